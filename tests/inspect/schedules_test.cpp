// schedules_test.cpp: `factum inspect alarms` on an entity with recurring schedules: each
// schedule's alarm, then a table of the schedules (spec, missed-fire policy, next and last fire,
// payload); in JSON each schedule's alarm line carries its schedule.
#include <doctest/doctest.h>

#include "support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;
using nlohmann::json;

namespace {

/// acme/cron/s1 with two schedules and their alarms, as the runtime writes them
/// (docs/storage-format.md section 17), and one plain alarm.
void fill_schedules(const fs::path& dir) {
  auto s = open_ok(opts_for(dir, durability::normal), entity_key{"acme", "cron", "s1"});
  schedule_record daily;
  daily.name = "daily-report";
  daily.spec = json{{"cron", "30 2 * * *"}, {"time_zone", "Europe/Berlin"},
                    {"missed", "fire_all"}, {"max_catch_up", 3},
                    {"jitter_ms", 5000},    {"grace_ms", 60000}}
                 .dump();
  daily.payload = R"({"report":"daily"})";
  daily.next_ms = t0 + 48'600'000; // 2024-01-18T03:30Z = 02:30 CET
  daily.last_ms = t0 - 37'800'000;
  daily.created_at_ms = t0 - 86'400'000;
  daily.updated_at_ms = t0;
  REQUIRE(s->put_schedule(daily).is_ok());
  schedule_record tick;
  tick.name = "tick";
  tick.spec = json{
    {"every_ms", 60000},
    {"anchor_ms", t0},
    {"missed", "skip"},
    {"jitter_ms", 0},
    {"grace_ms",
     60000}}.dump();
  tick.next_ms = t0 + 60'000;
  tick.created_at_ms = t0;
  tick.updated_at_ms = t0;
  REQUIRE(s->put_schedule(tick).is_ok());
  REQUIRE(s->set_alarm({"@schedule:daily-report", daily.next_ms + 1234,
                        json{{"at", daily.next_ms}}.dump(), 0, t0})
            .is_ok());
  REQUIRE(s->set_alarm({"@schedule:tick", tick.next_ms, json{{"at", tick.next_ms}}.dump(), 0, t0})
            .is_ok());
  REQUIRE(s->set_alarm({"remind", t0 + 30'000, "{}", 0, t0}).is_ok());
  REQUIRE(s->commit().is_ok());
}

} // namespace

TEST_CASE("alarms: schedules are listed with their spec, policy, next and last fire") {
  test::temp_dir tmp;
  fill_schedules(tmp.path());
  auto r = run_cli({"inspect", "alarms", "--data", tmp.path().string(), "acme/cron/s1", "--table"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == golden("schedules.txt"));
}

TEST_CASE("alarms: in JSON a schedule's alarm carries its schedule") {
  test::temp_dir tmp;
  fill_schedules(tmp.path());
  auto r = run_cli({"inspect", "alarms", "--data", tmp.path().string(), "acme/cron/s1"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  auto ls = lines(r.out);
  REQUIRE(ls.size() == 3);
  auto plain = json::parse(ls[0]);
  CHECK(plain["name"] == "remind");
  CHECK_FALSE(plain.contains("schedule"));
  auto daily = json::parse(ls[2]);
  CHECK(daily["name"] == "@schedule:daily-report");
  auto sc = daily["schedule"];
  CHECK(sc["name"] == "daily-report");
  CHECK(sc["missed"] == "fire_all");
  CHECK(sc["spec"]["cron"] == "30 2 * * *");
  CHECK(sc["spec"]["time_zone"] == "Europe/Berlin");
  CHECK(sc["spec"]["max_catch_up"] == 3);
  CHECK(sc["next_at"] == t0 + 48'600'000);
  CHECK(sc["last_at"] == t0 - 37'800'000);
  CHECK(sc["payload"] == json{{"report", "daily"}});
  CHECK(json::parse(ls[1])["schedule"]["last_at"].is_null());
}
