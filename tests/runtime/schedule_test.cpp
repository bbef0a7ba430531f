// schedule_test.cpp: the schedule class alone (runtime/src/schedule/schedule.hpp, cron.hpp): cron
// expressions and their next times, daylight-saving changes in Europe/Berlin and
// America/New_York, intervals, spec errors, jitter and each missed-fire policy.
#include <doctest/doctest.h>

#include <ctime>
#include <set>
#include <string>

#include "schedule/cron.hpp"
#include "schedule/schedule.hpp"
#include "support/utc_time.hpp"

using namespace factum;
using namespace factum::detail;
using nlohmann::json;

namespace schedule_test {

namespace {

using test::utc;

int64_t next(const char* expr, const char* zone, const char* after) {
  auto c = cron_schedule::parse(expr, zone);
  REQUIRE_MESSAGE(c.is_ok(), c.error().to_string());
  auto n = c->next_after(utc(after));
  REQUIRE(n.has_value());
  return *n;
}

schedule parse_ok(json spec, int64_t now = 0) {
  auto s = schedule::parse(spec, now);
  REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
  return std::move(s.value());
}

} // namespace

// -- cron expressions -----------------------------------------------------------------------------

// The examples of Debian's crontab(5) (cron 3.0pl1, "EXAMPLE CRON FILE" and the note on the two
// day fields), each with the next times it gives after Friday 2026-11-27 10:00 UTC.
TEST_CASE("schedules: cron: the examples of crontab(5) give the times it describes") {
  struct row {
    const char* expr;
    const char* after;
    const char* expected;
    const char* what; // crontab(5)'s words
  };
  const row rows[] = {
    {"5 0 * * *", "2026-11-27 10:00", "2026-11-28 00:05", "five minutes after midnight, every day"},
    {"15 14 1 * *", "2026-11-27 10:00", "2026-12-01 14:15",
     "at 2:15pm on the first of every month"},
    {"0 22 * * 1-5", "2026-11-27 10:00", "2026-11-27 22:00", "at 10 pm on weekdays (Friday)"},
    {"0 22 * * 1-5", "2026-11-27 22:00", "2026-11-30 22:00", "at 10 pm on weekdays (then Monday)"},
    {"23 0-23/2 * * *", "2026-11-27 10:00", "2026-11-27 10:23",
     "23 minutes after midn, 2am, 4am ..., everyday"},
    {"23 0-23/2 * * *", "2026-11-27 10:23", "2026-11-27 12:23", "... and two hours later"},
    {"5 4 * * sun", "2026-11-27 10:00", "2026-11-29 04:05", "at 5 after 4 every sunday"},
    {"30 4 1,15 * 5", "2026-11-27 10:00", "2026-12-01 04:30",
     "4:30 am on the 1st and 15th of each month (Tuesday the 1st)"},
    {"30 4 1,15 * 5", "2026-12-01 04:30", "2026-12-04 04:30", "... plus every Friday"},
    {"0 */2 * * *", "2026-11-27 10:00", "2026-11-27 12:00", "every two hours (\"*/2\")"},
    {"0 0-23/2 * * *", "2026-11-27 10:00", "2026-11-27 12:00", "every other hour (\"0-23/2\")"},
    // The nicknames crontab(5) lists.
    {"@hourly", "2026-11-27 10:00", "2026-11-27 11:00", "@hourly: 0 * * * *"},
    {"@daily", "2026-11-27 10:00", "2026-11-28 00:00", "@daily: 0 0 * * *"},
    {"@weekly", "2026-11-27 10:00", "2026-11-29 00:00", "@weekly: 0 0 * * 0"},
    {"@monthly", "2026-11-27 10:00", "2026-12-01 00:00", "@monthly: 0 0 1 * *"},
    {"@yearly", "2026-11-27 10:00", "2027-01-01 00:00", "@yearly: 0 0 1 1 *"},
    // Names of months and days, in any case; 7 is Sunday as 0 is.
    {"0 9 * DEC *", "2026-11-27 10:00", "2026-12-01 09:00", "month name"},
    {"0 9 * * 7", "2026-11-27 10:00", "2026-11-29 09:00", "7 is Sunday"},
    {"0 9 * * Mon-Wed", "2026-11-27 10:00", "2026-11-30 09:00", "a range of day names"},
    // A restricted day of month with a '*'-led day of week: both must match.
    {"0 0 1 * *", "2026-11-27 10:00", "2026-12-01 00:00", "first of the month"},
    {"0 0 */10 * 5", "2026-11-27 10:00", "2026-12-11 00:00",
     "a day field led by '*' is not restricted: both must match, Friday the 11th"},
    {"0 0 29 2 *", "2026-11-27 10:00", "2028-02-29 00:00", "February 29, the next leap year"},
    {"59 23 31 12 *", "2026-12-31 23:59", "2027-12-31 23:59", "the last minute of the year"},
  };
  for (auto& r : rows) {
    CAPTURE(r.expr);
    CAPTURE(r.what);
    CHECK(next(r.expr, "UTC", r.after) == utc(r.expected));
  }
}

TEST_CASE("schedules: cron: invalid expressions are refused with what is wrong") {
  struct row {
    const char* expr;
    const char* zone;
    const char* message;
  };
  const row rows[] = {
    {"* * * *", "UTC", "has 4"},
    {"* * * * * *", "UTC", "has 6"},
    {"60 * * * *", "UTC", "minute field '60': values must be 0 to 59"},
    {"* 24 * * *", "UTC", "hour field '24'"},
    {"* * 0 * *", "UTC", "day of month field '0'"},
    {"* * * 13 *", "UTC", "month field '13'"},
    {"* * * * 8", "UTC", "day of week field '8'"},
    {"5-1 * * * *", "UTC", "must not run backwards"},
    {"*/0 * * * *", "UTC", "step '0'"},
    {"1,,2 * * * *", "UTC", "empty list element"},
    {"* * * foo *", "UTC", "'foo' is not a value"},
    {"0 0 30 2 *", "UTC", "matches no day"},
    {"@reboot", "UTC", "unknown cron nickname"},
    {"* * * * *", "Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"},
  };
  for (auto& r : rows) {
    CAPTURE(r.expr);
    auto c = cron_schedule::parse(r.expr, r.zone);
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.error().code() == errc::invalid_argument);
    CHECK_MESSAGE(c.error().message().find(r.message) != std::string::npos, c.error().message());
  }
}

// Debian's crontab(5): "If the time has moved forwards, those jobs which would have run in the
// time that was skipped will be run soon after the change. Conversely, if the time has moved
// backwards by less than 3 hours, those jobs that fall into the repeated time will not be
// re-run. Only jobs that run at a particular time (not specified as @hourly, nor with '*' in the
// hour or minute specifier) are affected. Jobs which are specified with wildcards are run based
// on the new time immediately." Here "soon after" is the instant of the change.
TEST_CASE("schedules: cron: daylight-saving changes in Europe/Berlin and America/New_York") {
  struct row {
    const char* expr;
    const char* zone;
    const char* after;    // UTC
    const char* expected; // UTC
    const char* what;
  };
  const row rows[] = {
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    {"30 2 * * *", "Europe/Berlin", "2026-03-28 12:00", "2026-03-29 01:00",
     "02:30 is skipped: fires at the change, 03:00 CEST"},
    {"30 2 * * *", "Europe/Berlin", "2026-03-29 01:00", "2026-03-30 00:30",
     "the next day at 02:30 CEST"},
    {"30 1 * * *", "Europe/Berlin", "2026-03-28 12:00", "2026-03-29 00:30", "01:30 CET"},
    {"30 3 * * *", "Europe/Berlin", "2026-03-28 12:00", "2026-03-29 01:30", "03:30 CEST"},
    {"*/30 * * * *", "Europe/Berlin", "2026-03-29 00:30", "2026-03-29 01:00",
     "wildcard: nothing in the gap, 03:00 CEST after 01:30 CET"},
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:00-02:59 twice.
    {"30 2 * * *", "Europe/Berlin", "2026-10-24 12:00", "2026-10-25 00:30",
     "repeated 02:30: its first occurrence, CEST"},
    {"30 2 * * *", "Europe/Berlin", "2026-10-25 00:30", "2026-10-26 01:30",
     "not re-run at 02:30 CET: the next day"},
    {"30 * * * *", "Europe/Berlin", "2026-10-25 00:00", "2026-10-25 00:30", "wildcard: 02:30 CEST"},
    {"30 * * * *", "Europe/Berlin", "2026-10-25 00:30", "2026-10-25 01:30",
     "wildcard: 02:30 CET, the second occurrence"},
    {"30 * * * *", "Europe/Berlin", "2026-10-25 01:30", "2026-10-25 02:30", "wildcard: 03:30 CET"},
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    {"0 2 * * *", "America/New_York", "2026-03-07 12:00", "2026-03-08 07:00",
     "02:00 is skipped: fires at 03:00 EDT"},
    {"0,30 2 * * *", "America/New_York", "2026-03-08 07:00", "2026-03-09 06:00",
     "02:00 and 02:30 skipped fire once between them"},
    {"0 * * * *", "America/New_York", "2026-03-08 06:00", "2026-03-08 07:00",
     "wildcard: 01:00 EST, then 03:00 EDT"},
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC); 01:00-01:59 twice.
    {"30 1 * * *", "America/New_York", "2026-10-31 12:00", "2026-11-01 05:30", "01:30 EDT"},
    {"30 1 * * *", "America/New_York", "2026-11-01 05:30", "2026-11-02 06:30",
     "not at 01:30 EST: the next day"},
    {"45 1 * * *", "America/New_York", "2026-11-01 06:10", "2026-11-02 06:45",
     "asked inside the repeated hour, after the first 01:45"},
    {"0 * * * *", "America/New_York", "2026-11-01 04:30", "2026-11-01 05:00",
     "wildcard: 01:00 EDT"},
    {"0 * * * *", "America/New_York", "2026-11-01 05:00", "2026-11-01 06:00",
     "wildcard: 01:00 EST"},
    {"0 * * * *", "America/New_York", "2026-11-01 06:00", "2026-11-01 07:00",
     "wildcard: 02:00 EST"},
    {"*/30 * * * *", "America/New_York", "2026-11-01 05:45", "2026-11-01 06:00",
     "wildcard, asked at 01:45 EDT: 01:00 EST, the repeated hour, comes first"},
    {"@hourly", "America/New_York", "2026-11-01 05:00", "2026-11-01 06:00",
     "@hourly is a wildcard time"},
    // Plain local times in winter and summer.
    {"0 9 * * 1-5", "Europe/Berlin", "2026-11-27 10:00", "2026-11-30 08:00", "09:00 CET, Monday"},
    {"0 9 * * 1-5", "America/New_York", "2026-07-01 12:00", "2026-07-01 13:00", "09:00 EDT"},
  };
  for (auto& r : rows) {
    CAPTURE(r.expr);
    CAPTURE(r.zone);
    CAPTURE(r.after);
    CAPTURE(r.what);
    CHECK(next(r.expr, r.zone, r.after) == utc(r.expected));
  }
}

// -- specs --------------------------------------------------------------------------------------

TEST_CASE("schedules: an interval fires at its anchor and every every_ms after it, the anchor "
          "defaulting to the time it is set") {
  auto s = parse_ok({{"every_ms", 60'000}}, 1'000);
  CHECK(s.anchor_ms() == 1'000);
  CHECK(s.next_after(1'000) == 61'000);
  CHECK(s.next_after(60'999) == 61'000);
  CHECK(s.next_after(61'000) == 121'000);
  auto a = parse_ok({{"every_ms", 10'000}, {"anchor_ms", 5'000}}, 123'456);
  CHECK(a.next_after(123'456) == 125'000);
  CHECK(a.next_after(-7'000) == 5'000); // nothing before the anchor
  CHECK(a.next_after(4'999) == 5'000);
  CHECK(a.next_after(5'000) == 15'000);
  CHECK(a.fires_between(100'000, 140'000, 10) ==
        std::vector<int64_t>{105'000, 115'000, 125'000, 135'000});
  CHECK(a.fires_between(100'000, 140'000, 2) == std::vector<int64_t>{105'000, 115'000});
  // to_json() keeps the anchor: the stored spec gives the same times when parsed later.
  auto again = parse_ok(s.to_json(), 999'999);
  CHECK(again.next_after(61'000) == 121'000);
  CHECK(s.to_json() == json{{"every_ms", 60'000},
                            {"anchor_ms", 1'000},
                            {"missed", "fire_once"},
                            {"jitter_ms", 0},
                            {"grace_ms", 60'000}});
}

TEST_CASE("schedules: a cron spec keeps its zone and defaults to UTC") {
  auto s = parse_ok({{"cron", "0 9 * * *"}});
  CHECK(s.is_cron());
  CHECK(s.cron()->time_zone() == "UTC");
  CHECK(s.next_after(utc("2026-11-27 10:00")) == utc("2026-11-28 09:00"));
  auto b = parse_ok({{"cron", "0 9 * * *"}, {"time_zone", "Europe/Berlin"}, {"missed", "skip"}});
  CHECK(b.next_after(utc("2026-11-27 10:00")) == utc("2026-11-28 08:00"));
  CHECK(b.to_json() == json{{"cron", "0 9 * * *"},
                            {"time_zone", "Europe/Berlin"},
                            {"missed", "skip"},
                            {"jitter_ms", 0},
                            {"grace_ms", 60'000}});
}

TEST_CASE("schedules: invalid specs are refused with what is wrong") {
  struct row {
    json spec;
    const char* message;
  };
  const row rows[] = {
    {json::array(), "must be a JSON object"},
    {json::object(), "exactly one of every_ms and cron"},
    {{{"every_ms", 1000}, {"cron", "* * * * *"}}, "exactly one of every_ms and cron"},
    {{{"every_ms", 999}}, "every_ms must be 1000 to"},
    {{{"every_ms", 0}}, "every_ms must be 1000 to"},
    {{{"every_ms", 1500.5}}, "every_ms must be an integer"},
    {{{"every_ms", 1000}, {"time_zone", "UTC"}}, "time_zone goes with cron"},
    {{{"cron", "* * * * *"}, {"anchor_ms", 0}}, "anchor_ms goes with every_ms"},
    {{{"cron", 5}}, "cron must be a string"},
    {{{"cron", "* * *"}}, "has 3"},
    {{{"cron", "* * * * *"}, {"time_zone", "Nowhere/Town"}}, "unknown time zone"},
    {{{"every_ms", 1000}, {"missed", "later"}}, "missed must be"},
    {{{"every_ms", 1000}, {"max_catch_up", 3}}, "max_catch_up goes with missed: \"fire_all\""},
    {{{"every_ms", 1000}, {"missed", "fire_all"}, {"max_catch_up", 0}}, "max_catch_up must be 1"},
    {{{"every_ms", 1000}, {"missed", "fire_all"}, {"max_catch_up", 1001}}, "to 1000"},
    {{{"every_ms", 1000}, {"jitter_ms", 1000}}, "(below every_ms)"},
    {{{"every_ms", 1000}, {"jitter_ms", -1}}, "jitter_ms must be 0 to 999"},
    {{{"cron", "* * * * *"}, {"jitter_ms", 60'000}}, "shortest gap"},
    {{{"every_ms", 1000}, {"grace_ms", -5}}, "grace_ms must be 0"},
    {{{"every_ms", 1000}, {"every", 5}}, "unknown schedule field 'every'"},
  };
  for (auto& r : rows) {
    CAPTURE(r.spec.dump());
    auto s = schedule::parse(r.spec, 0);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.error().code() == errc::invalid_argument);
    CHECK_MESSAGE(s.error().message().find(r.message) != std::string::npos, s.error().message());
  }
  CHECK_FALSE(schedule::parse_text("{not json", 0).is_ok());
}

// -- jitter -------------------------------------------------------------------------------------

TEST_CASE("schedules: jitter is within 0..jitter_ms, the same for the same fire, and spread") {
  auto s = parse_ok({{"every_ms", 60'000}, {"anchor_ms", 0}, {"jitter_ms", 5'000}});
  std::set<int64_t> seen;
  for (int64_t i = 1; i <= 200; ++i) {
    int64_t t = i * 60'000;
    auto j = s.jitter("acme/job/a:tick", t);
    CHECK(j >= 0);
    CHECK(j <= 5'000);
    CHECK(j == s.jitter("acme/job/a:tick", t)); // reproducible
    CHECK(s.due_ms("acme/job/a:tick", t) == t + j);
    seen.insert(j);
  }
  CHECK(seen.size() > 150); // spread, not one value
  int differ = 0;
  for (int64_t i = 1; i <= 50; ++i)
    differ += s.jitter("acme/job/a:tick", i * 60'000) != s.jitter("acme/job/b:tick", i * 60'000);
  CHECK(differ > 40); // another entity gets other delays
  auto none = parse_ok({{"every_ms", 60'000}});
  CHECK(none.jitter("x", 60'000) == 0);
}

// -- the missed-fire policy -----------------------------------------------------------------------

namespace {

json interval(const char* policy, json extra = json::object()) {
  json spec = {{"every_ms", 10'000}, {"anchor_ms", 0}, {"grace_ms", 1'000}, {"missed", policy}};
  for (auto& [k, v] : extra.items())
    spec[k] = v;
  return spec;
}

} // namespace

TEST_CASE("schedules: a fire on time runs whatever the policy, and nothing runs early") {
  for (const char* p : {"skip", "fire_once", "fire_all"}) {
    CAPTURE(p);
    auto s = parse_ok(interval(p));
    auto st = s.step("k", 10'000, 10'500); // 500 ms late, within grace
    REQUIRE(st.fire);
    CHECK(st.fire->scheduled_ms == 10'000);
    CHECK(st.fire->missed == 0);
    CHECK(st.next_ms == 20'000);
    CHECK(st.dropped == 0);
    auto early = s.step("k", 10'000, 9'999);
    CHECK_FALSE(early.fire);
    CHECK(early.next_ms == 10'000);
  }
}

TEST_CASE("schedules: skip runs none of the missed fires and goes on with the next to come") {
  auto s = parse_ok(interval("skip"));
  // Down from before 10 s to 55 s: 10, 20, 30, 40 and 50 s passed.
  auto st = s.step("k", 10'000, 55'000);
  CHECK_FALSE(st.fire);
  CHECK(st.dropped == 5);
  CHECK(st.next_ms == 60'000);
  // One fire later than grace is missed too.
  auto one = s.step("k", 10'000, 12'000);
  CHECK_FALSE(one.fire);
  CHECK(one.dropped == 1);
  CHECK(one.next_ms == 20'000);
}

TEST_CASE("schedules: fire_once runs one fire for all the missed ones and then the next to come") {
  auto s = parse_ok(interval("fire_once"));
  auto st = s.step("k", 10'000, 55'000);
  REQUIRE(st.fire);
  CHECK(st.fire->scheduled_ms == 50'000); // the latest it stands for
  CHECK(st.fire->missed == 5);
  CHECK(st.dropped == 0);
  CHECK(st.next_ms == 60'000);
  auto one = s.step("k", 10'000, 12'000);
  REQUIRE(one.fire);
  CHECK(one.fire->scheduled_ms == 10'000);
  CHECK(one.fire->missed == 1);
  CHECK(one.next_ms == 20'000);
}

TEST_CASE("schedules: fire_all runs each missed fire oldest first, at most max_catch_up") {
  auto s = parse_ok(interval("fire_all"));
  CHECK(s.max_catch_up() == default_max_catch_up);
  // Each step runs one fire; the next step is due at once until the schedule has caught up.
  std::vector<int64_t> ran;
  int64_t at = 10'000;
  for (int i = 0; i < 10 && at <= 55'000; ++i) {
    auto st = s.step("k", at, 55'000);
    REQUIRE(st.fire);
    CHECK(st.fire->missed == 1);
    CHECK(st.dropped == 0);
    ran.push_back(st.fire->scheduled_ms);
    at = st.next_ms;
  }
  CHECK(ran == std::vector<int64_t>{10'000, 20'000, 30'000, 40'000, 50'000});
  CHECK(at == 60'000);

  auto capped = parse_ok(interval("fire_all", {{"max_catch_up", 3}}));
  auto st = capped.step("k", 10'000, 55'000);
  REQUIRE(st.fire);
  CHECK(st.fire->scheduled_ms == 30'000); // the latest 3 run: 30, 40, 50 s
  CHECK(st.dropped == 2);
  CHECK(st.next_ms == 40'000);
  // A long outage: counted, not walked.
  auto big = capped.step("k", 10'000, 10'000 + 10'000 * 1'000'000LL);
  REQUIRE(big.fire);
  CHECK(big.dropped == 1'000'001 - 3);
  CHECK(big.fire->scheduled_ms == 10'000 * 999'999LL);
}

TEST_CASE(
  "schedules: a cron schedule down for a year counts a hundred thousand missed fires at most") {
  auto c = parse_ok({{"cron", "* * * * *"}, {"missed", "fire_once"}});
  auto st = c.step("k", utc("2026-01-01 00:00"), utc("2026-12-01 00:00") + 30'000);
  REQUIRE(st.fire);
  CHECK(st.fire->missed == max_counted_misses);
  CHECK(st.fire->scheduled_ms == utc("2026-12-01 00:00")); // still the latest
  CHECK(st.next_ms == utc("2026-12-01 00:01"));
  auto all = parse_ok({{"cron", "* * * * *"}, {"missed", "fire_all"}, {"max_catch_up", 2}});
  auto a = all.step("k", utc("2026-01-01 00:00"), utc("2026-12-01 00:00") + 30'000);
  REQUIRE(a.fire);
  CHECK(a.fire->scheduled_ms == utc("2026-11-30 23:59"));
  CHECK(a.next_ms == utc("2026-12-01 00:00"));
}

TEST_CASE("schedules: missed fires of a cron schedule and of a jittered one") {
  auto c = parse_ok({{"cron", "0 * * * *"}, {"missed", "fire_once"}});
  // The server was down from 09:30 to 13:10: 10:00, 11:00, 12:00 and 13:00 passed.
  auto st = c.step("k", utc("2026-11-27 10:00"), utc("2026-11-27 13:10"));
  REQUIRE(st.fire);
  CHECK(st.fire->scheduled_ms == utc("2026-11-27 13:00"));
  CHECK(st.fire->missed == 4);
  CHECK(st.next_ms == utc("2026-11-27 14:00"));
  CHECK(c.fires_between(utc("2026-11-27 09:30"), utc("2026-11-27 13:10"), 100).size() == 4);
  // Jitter delays the due time: a fire not yet due with its jitter is the next one.
  auto j = parse_ok(interval("skip", {{"jitter_ms", 9'000}}));
  int64_t t = 50'000;
  while (j.jitter("k", t) < 2'000) // a fire whose jitter reaches past now
    t += 10'000;
  auto late = j.step("k", 10'000, t + 1'000);
  CHECK(late.next_ms == t); // 10 s .. t - 10 s were due and skipped; t is not due yet
  CHECK(late.dropped == (t - 10'000) / 10'000);
}

} // namespace schedule_test
