// factum/storage/base64.hpp: base64 (RFC 4648, standard alphabet, padded), the one codec of the
// tree: etcd's JSON gateway reads and writes keys and values in it, and a binary WebSocket
// message travels to its entity in it. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace factum {

namespace base64_detail {

inline constexpr char alphabet[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

inline int value(char c) {
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
}

} // namespace base64_detail

/// The padded standard base64 of `in`.
inline std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t n = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 |
                 uint32_t(uint8_t(in[i + 2]));
    for (int shift = 18; shift >= 0; shift -= 6)
      out.push_back(base64_detail::alphabet[(n >> shift) & 63]);
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t n = uint32_t(uint8_t(in[i])) << 16;
    if (rest == 2)
      n |= uint32_t(uint8_t(in[i + 1])) << 8;
    out.push_back(base64_detail::alphabet[(n >> 18) & 63]);
    out.push_back(base64_detail::alphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? base64_detail::alphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

/// The decoded bytes, or nullopt for text that is not padded standard base64.
inline std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0)
    return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    size_t pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
    if (pad == 1 && in[i + 2] == '=')
      return std::nullopt; // "x=y=" is not padding
    uint32_t n = 0;
    for (size_t j = 0; j < 4 - pad; ++j) {
      int v = base64_detail::value(in[i + j]);
      if (v < 0)
        return std::nullopt;
      n |= uint32_t(v) << (18 - 6 * j);
    }
    out.push_back(char(n >> 16));
    if (pad < 2)
      out.push_back(char((n >> 8) & 0xff));
    if (pad < 1)
      out.push_back(char(n & 0xff));
  }
  return out;
}

} // namespace factum
