// schedule_runtime_test.cpp: recurring schedules in the runtime: an interval fires again and
// again, each missed-fire policy after the runtime was down past several fires, a cron schedule
// in a time zone fires at its instant across a daylight-saving gap, a failing fire is retried and
// dead-lettered while the schedule goes on, an invalid spec is refused. Time moves through
// runtime_config::clock (the real clock plus an offset the test moves on), not by waiting.
#include <doctest/doctest.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"
#include "support/utc_time.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace schedule_runtime_test {

namespace {

/// One fire as the handler saw it.
struct fire_seen {
  std::string id; ///< the entity's id
  std::string name;
  bool schedule = false;
  int64_t scheduled_ms = 0;
  int64_t missed = 0;
  int64_t attempts = 0;
  int64_t now_ms = 0; ///< the handler's clock when it ran
};

class fire_log {
 public:
  static fire_log& get() {
    static fire_log log;
    return log;
  }
  void push(fire_seen f) {
    std::lock_guard<std::mutex> g(mu_);
    fires_.push_back(std::move(f));
  }
  std::vector<fire_seen> of(const std::string& id) {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<fire_seen> out;
    for (auto& f : fires_)
      if (f.id == id)
        out.push_back(f);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<fire_seen> fires_;
};

auto& events = test::event_log::get();

/// Sets and cancels schedules; records every fire; fails those whose payload says so.
class ticker final : public entity {
 public:
  json set(context& ctx, json a) {
    ctx.set_schedule(a.value("name", "tick"), a.at("spec"), a.value("payload", json::object()));
    return {{"set", a.value("name", "tick")}};
  }
  json cancel(context& ctx, json a) {
    ctx.cancel_schedule(a.value("name", "tick"));
    return {{"cancelled", a.value("name", "tick")}};
  }
  task<void> on_alarm(context& ctx, const alarm_record& rec) override {
    fire_log::get().push(
      {ctx.key().id, rec.name, rec.schedule, rec.due_ms, rec.missed, rec.attempts, ctx.now_ms()});
    events.push("fire:" + ctx.key().id);
    if (json::parse(rec.payload).value("fail", false))
      throw external_error("TICK_PROBE", "asked to fail");
    co_return;
  }
};

/// The real clock plus an offset that a test moves on.
struct test_clock {
  std::atomic<int64_t> offset{0};
  int64_t now() const { return factum::now_ms() + offset.load(); }
  /// Moves the clock so that it reads `t` now.
  void set(int64_t t) { offset += t - now(); }
};

runtime_config schedule_config(const std::filesystem::path& dir, test_clock& clock) {
  runtime_config c;
  c.data_dir = dir;
  c.types.add(type_builder<ticker>("ticker")
                .method("set", &ticker::set)
                .method("cancel", &ticker::cancel)
                .build());
  c.storage_threads = 2;
  c.alarm_poll = 50ms;
  c.clock = [&clock] { return clock.now(); };
  return c;
}

using test::call_ok;
using test::facts_of;
using test::start_ok;

/// Waits (polling the entity's facts) until it has a fact matching `filter`.
json wait_for_fact(runtime& rt, const entity_key& k, json filter) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  json found;
  while (std::chrono::steady_clock::now() < deadline) {
    found = facts_of(rt, k, filter);
    if (!found.empty())
      break;
    std::this_thread::sleep_for(10ms); // polling a durable condition, not waiting in its stead
  }
  return found;
}

/// The schedule shown by the `@alarms` route for the alarm of schedule `name`.
json schedule_of(runtime& rt, const entity_key& k, const std::string& name) {
  for (auto& a : call_ok(rt, k, "@alarms", json::object()))
    if (a["name"] == "@schedule:" + name)
      return a;
  return nullptr;
}

using test::utc;

} // namespace

TEST_CASE("schedules: an interval schedule fires again and again, on time") {
  test::temp_dir tmp;
  test_clock clock;
  auto rt = start_ok(schedule_config(tmp.path(), clock));
  auto k = entity_key{"acme", "ticker", "interval"};
  int64_t anchor = clock.now() + 60'000;
  call_ok(*rt, k, "set", {{"spec", {{"every_ms", 1'000}, {"anchor_ms", anchor}}}});
  auto shown = schedule_of(*rt, k, "tick");
  REQUIRE(shown.is_object());
  CHECK(shown["schedule"]["next_at"] == anchor);
  CHECK(shown["schedule"]["missed"] == "fire_once");
  CHECK(shown["schedule"]["spec"]["every_ms"] == 1'000);
  CHECK(shown["due_ms"] == anchor);
  for (int i = 0; i < 4; ++i) {
    clock.set(anchor + i * 1'000); // the fire i is due now
    REQUIRE(events.wait_for("fire:interval", static_cast<size_t>(i + 1), 10s));
  }
  auto fires = fire_log::get().of("interval");
  REQUIRE(fires.size() >= 4);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(fires[i].schedule);
    CHECK(fires[i].name == "tick");
    CHECK(fires[i].scheduled_ms == anchor + i * 1'000);
    CHECK(fires[i].missed == 0);
    CHECK(fires[i].now_ms >= fires[i].scheduled_ms);
  }
  // Cancelled, it fires no more and its alarm is gone.
  call_ok(*rt, k, "cancel", json::object());
  CHECK(schedule_of(*rt, k, "tick").is_null());
}

TEST_CASE("schedules: after the runtime was down past five fires, each policy does what it says") {
  test::temp_dir tmp;
  test_clock clock;
  int64_t anchor = clock.now() + 30'000;
  json base = {{"every_ms", 60'000}, {"anchor_ms", anchor}, {"grace_ms", 1'000}};
  struct policy_case {
    const char* id;
    json extra;
  };
  const policy_case cases[] = {{"p-skip", {{"missed", "skip"}}},
                               {"p-once", {{"missed", "fire_once"}}},
                               {"p-all3", {{"missed", "fire_all"}, {"max_catch_up", 3}}},
                               {"p-all", {{"missed", "fire_all"}}}};
  {
    auto rt = start_ok(schedule_config(tmp.path(), clock));
    for (auto& c : cases) {
      json spec = base;
      spec.update(c.extra);
      call_ok(*rt, entity_key{"acme", "ticker", c.id}, "set", {{"spec", spec}});
    }
  } // down before the first fire
  // Back 30 s after the fifth scheduled time: anchor + 0, 1, 2, 3 and 4 minutes passed.
  clock.set(anchor + 4 * 60'000 + 30'000);
  auto rt = start_ok(schedule_config(tmp.path(), clock));
  REQUIRE(events.wait_for("fire:p-once", 1, 20s));
  REQUIRE(events.wait_for("fire:p-all3", 3, 20s));
  REQUIRE(events.wait_for("fire:p-all", 5, 20s));
  auto skipped = wait_for_fact(*rt, entity_key{"acme", "ticker", "p-skip"},
                               {{"type", "lifecycle"}, {"subtype", "schedule_missed"}});
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0]["data"]["dropped"] == 5);
  CHECK(skipped[0]["data"]["next_at"] == anchor + 5 * 60'000);
  CHECK(fire_log::get().of("p-skip").empty());

  auto once = fire_log::get().of("p-once");
  REQUIRE(once.size() == 1);
  CHECK(once[0].scheduled_ms == anchor + 4 * 60'000); // the latest it stands for
  CHECK(once[0].missed == 5);

  auto all3 = fire_log::get().of("p-all3");
  REQUIRE(all3.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(all3[i].scheduled_ms == anchor + (i + 2) * 60'000); // the latest three, oldest first
    CHECK(all3[i].missed == 1);
  }
  auto dropped = facts_of(*rt, entity_key{"acme", "ticker", "p-all3"},
                          {{"type", "lifecycle"}, {"subtype", "schedule_missed"}});
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0]["data"]["dropped"] == 2);

  auto all = fire_log::get().of("p-all");
  REQUIRE(all.size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK(all[i].scheduled_ms == anchor + i * 60'000);
    CHECK(all[i].missed == 1);
  }
  // Then every policy is back on time: the sixth scheduled time fires once, missing nothing.
  std::map<std::string, size_t> before;
  for (auto& c : cases)
    before[c.id] = fire_log::get().of(c.id).size();
  clock.set(anchor + 5 * 60'000 + 200);
  for (auto& c : cases) {
    std::string id = c.id;
    CAPTURE(id);
    REQUIRE(events.wait_for("fire:" + id, before[id] + 1, 20s));
    auto last = fire_log::get().of(c.id).back();
    CHECK(last.scheduled_ms == anchor + 5 * 60'000);
    CHECK(last.missed == 0);
  }
}

TEST_CASE("schedules: a cron schedule in Europe/Berlin fires at the instant of the spring-forward "
          "gap that skips its time") {
  test::temp_dir tmp;
  test_clock clock;
  // 01:59:59 CET; at 02:00 the clocks go to 03:00 CEST (01:00 UTC), skipping 02:30.
  clock.set(utc("2026-03-29 00:59:59"));
  auto rt = start_ok(schedule_config(tmp.path(), clock));
  auto k = entity_key{"acme", "ticker", "berlin"};
  call_ok(*rt, k, "set",
          {{"spec", {{"cron", "30 2 * * *"}, {"time_zone", "Europe/Berlin"}}},
           {"payload", {{"report", "daily"}}}});
  auto shown = schedule_of(*rt, k, "tick");
  REQUIRE(shown.is_object());
  CHECK(shown["schedule"]["next_at"] == utc("2026-03-29 01:00:00"));
  CHECK(shown["schedule"]["spec"]["time_zone"] == "Europe/Berlin");
  REQUIRE(events.wait_for("fire:berlin", 1, 10s)); // a second of real time
  auto f = fire_log::get().of("berlin").at(0);
  CHECK(f.scheduled_ms == utc("2026-03-29 01:00:00"));
  CHECK(f.missed == 0);
  CHECK(f.now_ms >= utc("2026-03-29 01:00:00"));
  CHECK(f.now_ms < utc("2026-03-29 01:00:30"));
  // The next one is the next day's 02:30 CEST.
  CHECK(schedule_of(*rt, k, "tick")["schedule"]["next_at"] == utc("2026-03-30 00:30:00"));
}

TEST_CASE("schedules: a failing fire is retried, then dead-lettered, and the schedule goes on") {
  test::temp_dir tmp;
  test_clock clock;
  auto c = schedule_config(tmp.path(), clock);
  c.alarm_retry_base = 10ms;
  c.alarm_max_retries = 1;
  auto rt = start_ok(std::move(c));
  auto k = entity_key{"acme", "ticker", "failing"};
  int64_t anchor = clock.now() + 60'000;
  call_ok(*rt, k, "set",
          {{"spec", {{"every_ms", 60'000}, {"anchor_ms", anchor}}}, {"payload", {{"fail", true}}}});
  clock.set(anchor);
  REQUIRE(events.wait_for("fire:failing", 2, 10s)); // the fire and its one retry
  auto dl = wait_for_fact(*rt, k, {{"type", "lifecycle"}, {"subtype", "alarm_dead_lettered"}});
  REQUIRE(dl.size() == 1);
  auto fires = fire_log::get().of("failing");
  REQUIRE(fires.size() >= 2);
  CHECK(fires[0].scheduled_ms == anchor);
  CHECK(fires[0].attempts == 0);
  CHECK(fires[1].scheduled_ms == anchor); // the retry runs the same fire
  CHECK(fires[1].attempts == 1);
  auto letters = call_ok(*rt, k, "@dead_letters", json::object());
  REQUIRE(letters.size() == 1);
  CHECK(letters[0]["operation"] == "@alarm:@schedule:tick");
  CHECK(letters[0]["payload"]["fire"]["at"] == anchor);
  // The schedule was not stopped by it: its next time is the next minute, on a fresh alarm.
  auto shown = schedule_of(*rt, k, "tick");
  REQUIRE(shown.is_object());
  CHECK(shown["schedule"]["next_at"] == anchor + 60'000);
  CHECK(shown["schedule"]["last_at"].is_null()); // no fire ran to its end
  CHECK(shown["attempts"] == 0);
  // An operator's retry of the dead letter runs the same fire again, as a schedule's fire.
  call_ok(*rt, k, "@dead_letter",
          {{"id", letters[0]["id"]}, {"action", "retry"}, {"operator", "test"}});
  REQUIRE(events.wait_for("fire:failing", 3, 10s));
  fires = fire_log::get().of("failing");
  CHECK(fires[2].schedule);
  CHECK(fires[2].name == "tick");
  CHECK(fires[2].scheduled_ms == anchor);
  CHECK(fires[2].missed == 0);
  clock.set(anchor + 60'000);
  REQUIRE(events.wait_for("fire:failing", 4, 10s));
  fires = fire_log::get().of("failing");
  CHECK(fires[3].scheduled_ms == anchor + 60'000);
  CHECK(fires[3].attempts == 0);
}

TEST_CASE("schedules: an invalid spec is refused with 400 INVALID_SCHEDULE") {
  test::temp_dir tmp;
  test_clock clock;
  auto rt = start_ok(schedule_config(tmp.path(), clock));
  auto k = entity_key{"acme", "ticker", "invalid"};
  for (auto spec : {json{{"every_ms", 10}}, json{{"cron", "61 * * * *"}},
                    json{{"cron", "* * * * *"}, {"time_zone", "Atlantis/Capital"}}}) {
    CAPTURE(spec.dump());
    auto r = rt->call_sync(k, "set", json{{"spec", spec}}.dump());
    CHECK_FALSE(r.ok);
    CHECK(r.code == "INVALID_SCHEDULE");
    CHECK(r.http_status == 400);
  }
  auto r = rt->call_sync(k, "set", json{{"name", "@x"}, {"spec", {{"every_ms", 1000}}}}.dump());
  CHECK(r.code == "INVALID_SCHEDULE");
  CHECK(call_ok(*rt, k, "@alarms", json::object()).empty());
}

} // namespace schedule_runtime_test
