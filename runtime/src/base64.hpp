// base64.hpp (private): standard base64 (RFC 4648, with padding) for binary WebSocket messages,
// which travel to an entity inside a call's JSON arguments. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace factum::detail {

inline std::string base64_encode(std::string_view in) {
  static constexpr char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) |
                 uint32_t(uint8_t(in[i + 2]));
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += abc[(v >> 6) & 63];
    out += abc[v & 63];
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (rest == 2)
      v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += rest == 2 ? abc[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

/// The bytes `in` encodes, or nothing when it is not padded standard base64.
inline std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  if (in.size() % 4 != 0)
    return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int a = val(in[i]), b = val(in[i + 1]);
    bool last = i + 4 == in.size();
    int c = last && in[i + 2] == '=' ? -2 : val(in[i + 2]);
    int d = last && in[i + 3] == '=' ? -2 : val(in[i + 3]);
    if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2))
      return std::nullopt;
    uint32_t v = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c < 0 ? 0 : c) << 6) |
                 uint32_t(d < 0 ? 0 : d);
    out += char((v >> 16) & 0xff);
    if (c >= 0)
      out += char((v >> 8) & 0xff);
    if (d >= 0)
      out += char(v & 0xff);
  }
  return out;
}

} // namespace factum::detail
