// factum/storage/utf8.hpp: UTF-8 validation and the control-character check, shared by the
// store, the runtime and the HTTP gateway. Pure functions; any thread.
#pragma once

#include <string_view>

namespace factum {

/// True when `s` has an ASCII control character (below 0x20, or DEL).
inline bool has_control_char(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f)
      return true;
  return false;
}

/// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n)
      return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

} // namespace factum
