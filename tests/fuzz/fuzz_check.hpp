// tests/fuzz/fuzz_check.hpp: FUZZ_CHECK, the assertion of the fuzz targets. A failed property
// prints what broke and aborts, so libFuzzer records the input as a crash. Single-threaded.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace factum::fuzz {

/// Reports a broken property and aborts (libFuzzer keeps the input as crash-<sha1>).
[[noreturn]] inline void fail(const char* file, int line, const char* expr,
                              std::string_view detail) {
  std::fprintf(stderr, "%s:%d: property failed: %s\n  %.*s\n", file, line, expr,
               static_cast<int>(detail.size() > 2000 ? 2000 : detail.size()), detail.data());
  std::abort();
}

} // namespace factum::fuzz

/// Asserts a property of the code under test; `detail` (a string) says what was seen.
#define FUZZ_CHECK(cond, detail)                                                                   \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::factum::fuzz::fail(__FILE__, __LINE__, #cond, (detail));                                   \
  } while (false)
