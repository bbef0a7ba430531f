// cron.hpp (private): a standard five-field cron expression (crontab(5): minute, hour,
// day of month, month, day of week) evaluated in one IANA time zone: parsing, and the first fire
// after an instant, with the rule for local times that a daylight-saving change skips or
// repeats (docs/architecture.md, "Schedules"). A plain value: no actor system, no store; the
// time zone database is the system's (/usr/share/zoneinfo, through libdate-tz). Immutable after
// parse(), so any thread may use one.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "factum/error/status.hpp"

namespace date {
class time_zone;
}

namespace factum::detail {

/// A cron expression in a time zone.
///
/// Fields, as crontab(5) has them: minute 0-59, hour 0-23, day of month 1-31, month 1-12 or
/// JAN-DEC, day of week 0-7 or SUN-SAT (0 and 7 are Sunday). Each field is a comma-separated
/// list of `*`, `N`, `N-M`, each optionally followed by `/STEP`; `N/STEP` means `N-max/STEP`.
/// Names are case-insensitive and may also end ranges (`MON-FRI`). When both day fields are
/// restricted (neither starts with `*`), a day matches when either does. `@yearly`,
/// `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly` are accepted.
///
/// Daylight-saving changes, as Debian's cron (crontab(5), 3.0pl1) documents them: a fixed time
/// (neither the minute nor the hour field starts with '*') that a spring-forward gap skips fires
/// once, at the first instant after the gap (the instant of the change), and one that a
/// fall-back overlap repeats fires at its first occurrence only. A wildcard time (the minute or
/// the hour field starts with '*', @hourly) follows the clock: nothing in the gap, and both
/// occurrences of a repeated time.
class cron_schedule {
 public:
  /// Parses `expr` for `time_zone` (an IANA name such as "Europe/Berlin"); an error names the
  /// field and what is wrong with it, an unknown zone, or an expression that never fires.
  static result<cron_schedule> parse(std::string_view expr, std::string_view time_zone = "UTC");

  /// The first fire strictly after `after_ms` (ms since the epoch), or nullopt when none comes
  /// within ten years (cannot happen for an expression parse() accepted).
  std::optional<int64_t> next_after(int64_t after_ms) const;

  const std::string& expression() const noexcept { return expr_; }
  const std::string& time_zone() const noexcept { return zone_name_; }

 private:
  cron_schedule() = default;
  /// Whether the local day (days since 1970-01-01) matches the day-of-month, month and
  /// day-of-week fields.
  bool day_matches(int64_t local_day) const;
  /// The first matching local minute (minutes since 1970-01-01 local) at or after `from` and
  /// not after `limit`.
  std::optional<int64_t> next_local(int64_t from, int64_t limit) const;
  /// The instants (ms since the epoch) at which the local minute `local_min` fires, earliest
  /// first: how many (0 to 2) are in `out`.
  int instants_of(int64_t local_min, int64_t (&out)[2]) const;

  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;       ///< 1..31
  std::bitset<13> months_;     ///< 1..12
  std::bitset<7> weekdays_;    ///< 0 = Sunday
  bool days_star_ = false;     ///< the day-of-month field starts with '*'
  bool weekdays_star_ = false; ///< the day-of-week field starts with '*'
  /// The minute or the hour field starts with '*': a wildcard time (daylight-saving rule).
  bool wildcard_time_ = false;
  const date::time_zone* zone_ = nullptr;
  std::string expr_;
  std::string zone_name_;
};

} // namespace factum::detail
