// json_text.cpp: compact JSON text of nlohmann::json values, equal to dump(). Pure functions;
// any thread.
//
// Why: nlohmann's serializer decodes every byte of every string through a UTF-8 state machine
// and writes one character at a time; a fact's data is dumped at every append (the text that
// is hashed and stored), which made dump() the largest item of the store's own CPU per fact.
// Here ASCII runs are copied whole. Whatever this file does not write itself (non-ASCII text,
// floats, binary) goes to nlohmann's serializer, so the output never differs from dump();
// tests/storage/json_text_test.cpp compares both on generated and hand-picked values.
#include "factum/storage/json_text.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace factum {

namespace {

constexpr uint64_t ones = 0x0101010101010101ull;
constexpr uint64_t highs = 0x8080808080808080ull;

/// Nonzero when one of the 8 bytes of `x` may need attention: below 0x20, '"', '\\', or (with
/// `non_ascii`) 0x80 and above. May report a byte >= 0x80 without `non_ascii`; never misses one
/// that needs it (the byte loop decides).
template <bool non_ascii> uint64_t attention(uint64_t x) {
  auto zero = [](uint64_t v) { return (v - ones) & ~v & highs; };
  uint64_t below_space = (x - ones * 0x20) & ~x & highs;
  uint64_t r = below_space | zero(x ^ (ones * '"')) | zero(x ^ (ones * '\\'));
  return non_ascii ? (r | (x & highs)) : r;
}

/// Writes `s` quoted and escaped; with `stop_on_non_ascii`, returns false at the first byte
/// >= 0x80 (having written part of it), else passes such bytes through and returns true.
template <bool stop_on_non_ascii> bool escape(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  const char* p = s.data();
  size_t n = s.size(), run = 0, i = 0; // run: start of the pending bytes that need no escaping
  while (i < n) {
    if (i + 8 <= n) { // 8 bytes at a time while none needs attention
      uint64_t x;
      std::memcpy(&x, p + i, 8);
      if (!attention<stop_on_non_ascii>(x)) {
        i += 8;
        continue;
      }
    }
    size_t end = std::min(n, i + 8);
    for (; i < end; ++i) {
      auto c = static_cast<unsigned char>(p[i]);
      if (c >= 0x80) {
        if (stop_on_non_ascii)
          return false;
        continue;
      }
      if (c >= 0x20 && c != '"' && c != '\\')
        continue;
      out.append(p + run, i - run);
      run = i + 1;
      switch (c) {
      case '"': out.append("\\\"", 2); break;
      case '\\': out.append("\\\\", 2); break;
      case '\b': out.append("\\b", 2); break;
      case '\f': out.append("\\f", 2); break;
      case '\n': out.append("\\n", 2); break;
      case '\r': out.append("\\r", 2); break;
      case '\t': out.append("\\t", 2); break;
      default:
        out.append("\\u00", 4);
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 0xf]);
      }
    }
  }
  out.append(p + run, n - run);
  out.push_back('"');
  return true;
}

/// A string of the value being written: ASCII here, anything else through nlohmann (which
/// validates the UTF-8, throwing type_error 316, and escapes it).
void append_string(std::string& out, const std::string& s) {
  size_t mark = out.size();
  if (!escape<true>(out, s)) {
    out.resize(mark);
    out += nlohmann::json(s).dump();
  }
}

template <class Int> void append_int(std::string& out, Int v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

} // namespace

void append_json_string(std::string& out, std::string_view s) {
  escape<false>(out, s);
}

void append_json_text(std::string& out, const nlohmann::json& j) {
  using vt = nlohmann::json::value_t;
  switch (j.type()) {
  case vt::null: out.append("null", 4); return;
  case vt::boolean:
    if (j.get_ref<const nlohmann::json::boolean_t&>())
      out.append("true", 4);
    else
      out.append("false", 5);
    return;
  case vt::number_integer:
    append_int(out, j.get_ref<const nlohmann::json::number_integer_t&>());
    return;
  case vt::number_unsigned:
    append_int(out, j.get_ref<const nlohmann::json::number_unsigned_t&>());
    return;
  case vt::string: append_string(out, j.get_ref<const std::string&>()); return;
  case vt::object: {
    out.push_back('{');
    bool first = true;
    for (auto& [k, v] : j.get_ref<const nlohmann::json::object_t&>()) {
      if (!first)
        out.push_back(',');
      first = false;
      append_string(out, k);
      out.push_back(':');
      append_json_text(out, v);
    }
    out.push_back('}');
    return;
  }
  case vt::array: {
    out.push_back('[');
    bool first = true;
    for (auto& e : j.get_ref<const nlohmann::json::array_t&>()) {
      if (!first)
        out.push_back(',');
      first = false;
      append_json_text(out, e);
    }
    out.push_back(']');
    return;
  }
  default: // number_float, binary, discarded: nlohmann's own text
    out += j.dump();
    return;
  }
}

std::string json_text(const nlohmann::json& j) {
  std::string out;
  append_json_text(out, j);
  return out;
}

} // namespace factum
