// utc_time.hpp (tests): a UTC time written as text, as ms since the epoch, for the tests of
// schedules and cron expressions. Header-only; any thread.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <ctime>

namespace factum::test {

/// "YYYY-MM-DD HH:MM" or "YYYY-MM-DD HH:MM:SS" in UTC as ms since the epoch (the text must be
/// one of them, whole).
inline int64_t utc(const char* text) {
  std::tm tm{};
  const char* rest = strptime(text, "%Y-%m-%d %H:%M", &tm);
  REQUIRE_MESSAGE(rest != nullptr, text);
  if (*rest == ':')
    rest = strptime(rest, ":%S", &tm);
  REQUIRE_MESSAGE((rest != nullptr && *rest == '\0'), text);
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

} // namespace factum::test
