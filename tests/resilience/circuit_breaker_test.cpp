// circuit_breaker_test.cpp: the breaker's state machine with an injected clock: thresholds,
// minimum volume, fast fails, cooldown, bounded trials, success threshold, manual states, time
// windows, and the JSON state across a simulated restart. Single-threaded.
#include <doctest/doctest.h>

#include "factum/resilience/circuit_breaker.hpp"

using namespace factum;
using namespace factum::resilience;

namespace {

constexpr int64_t t0 = 1705500000000;

// Count window of 10 (5 failures, volume 10), no time window, 1 s cooldown, 2 trials, closes on
// 2 successes.
breaker_config count_config() {
  breaker_config c;
  c.count_window = {10, 10, 5, 0.0};
  c.time_window.window_ms = 0;
  c.cooldown_ms = 1000;
  c.half_open_max_trials = 2;
  c.success_threshold = 2;
  c.trial_timeout_ms = 5000;
  return c;
}

// Drives a breaker to OPEN at `now` with ten failures.
void trip(circuit_breaker& b, int64_t now) {
  for (int i = 0; i < 10 && b.state() == breaker_state::closed; ++i) {
    REQUIRE(b.allow(now).allowed);
    (void)b.on_failure(now);
  }
  REQUIRE(b.state() == breaker_state::open);
}

} // namespace

TEST_CASE("circuit_breaker: defaults") {
  breaker_config c;
  CHECK(c.count_window.size == 10);
  CHECK(c.count_window.failure_threshold == 5);
  CHECK(c.time_window.window_ms == 60000);
  CHECK(c.time_window.failure_threshold == 10);
  CHECK(c.cooldown_ms == 120000);
  CHECK(c.half_open_max_trials == 1);
  CHECK(c.success_threshold == 1);
  CHECK(c.validate().is_ok());
  circuit_breaker b("telephony");
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.allow(t0).allowed);
}

TEST_CASE("circuit_breaker: opens exactly at the failure threshold") {
  circuit_breaker b("crm", count_config(), t0);
  for (int i = 0; i < 5; ++i)
    CHECK_FALSE(b.on_success(t0));
  for (int i = 0; i < 4; ++i)
    CHECK_FALSE(b.on_failure(t0));
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.window_counters(t0) == breaker_counters{4, 5, 9});
  auto t = b.on_failure(t0 + 1);
  REQUIRE(t);
  CHECK(t->from == breaker_state::closed);
  CHECK(t->to == breaker_state::open);
  CHECK(t->reason == "count_window_failures");
  CHECK(t->counters == breaker_counters{5, 5, 10});
  CHECK(t->at_ms == t0 + 1);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.opened_at_ms() == t0 + 1);

  auto data = t->fact_data();
  CHECK(data == nlohmann::json{{"circuit_name", "crm"},
                               {"tool_id", "crm"},
                               {"previous_state", "CLOSED"},
                               {"new_state", "OPEN"},
                               {"reason", "count_window_failures"},
                               {"failure_count", 5},
                               {"success_count", 5},
                               {"request_count", 10}});
}

TEST_CASE("circuit_breaker: the count window forgets old outcomes") {
  circuit_breaker b("crm", count_config(), t0);
  for (int round = 0; round < 5; ++round) {
    // 4 failures in every 10 calls never reach 5 in the last 10.
    for (int i = 0; i < 6; ++i)
      CHECK_FALSE(b.on_success(t0));
    for (int i = 0; i < 4; ++i)
      CHECK_FALSE(b.on_failure(t0));
  }
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.window_counters(t0) == breaker_counters{4, 6, 10});
}

TEST_CASE("circuit_breaker: nothing opens before the minimum volume") {
  circuit_breaker b("crm", count_config(), t0);
  for (int i = 0; i < 9; ++i)
    CHECK_FALSE(b.on_failure(t0));
  CHECK(b.state() == breaker_state::closed);
  // The call completing the volume is checked too, even a success (9 of 10 failed).
  auto t = b.on_success(t0);
  REQUIRE(t);
  CHECK(t->to == breaker_state::open);
  CHECK(t->counters == breaker_counters{9, 1, 10});
}

TEST_CASE("circuit_breaker: failures that do not count never open it") {
  circuit_breaker b("crm", count_config(), t0);
  for (auto c : {error_category::client, error_category::data_integrity,
                 error_category::authorization, error_category::budget})
    for (int i = 0; i < 10; ++i)
      CHECK_FALSE(b.on_failure(t0, c));
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.window_counters(t0) == breaker_counters{0, 10, 10});
  for (int i = 0; i < 4; ++i)
    CHECK_FALSE(b.on_failure(t0, error_category::transient));
  CHECK(b.on_failure(t0, error_category::external));
}

TEST_CASE("circuit_breaker: OPEN fast-fails, HALF_OPEN after the cooldown, bounded trials") {
  circuit_breaker b("crm", count_config(), t0);
  trip(b, t0);

  auto d = b.allow(t0 + 400);
  CHECK_FALSE(d.allowed);
  CHECK(d.state == breaker_state::open);
  CHECK(d.reason == "open");
  CHECK(d.retry_after_ms == 600);
  CHECK_FALSE(d.transition);
  auto err = circuit_open_error("crm", d);
  CHECK(err.code() == "CIRCUIT_OPEN");
  CHECK(err.category() == error_category::transient);
  CHECK(err.http_status() == 503);
  CHECK(err.details["retry_after_ms"] == 600);
  CHECK(err.details["circuit_state"] == "OPEN");
  CHECK_FALSE(b.allow(t0 + 999).allowed);

  // Cooldown elapsed: the first allow moves to HALF_OPEN and is the first trial.
  auto first = b.allow(t0 + 1000);
  CHECK(first.allowed);
  CHECK(first.state == breaker_state::half_open);
  CHECK(first.reason == "half_open_trial");
  REQUIRE(first.transition);
  CHECK(first.transition->from == breaker_state::open);
  CHECK(first.transition->to == breaker_state::half_open);
  CHECK(first.transition->reason == "cooldown_elapsed");
  CHECK(first.transition->counters.request_count == 2); // the two refused calls
  CHECK(b.allow(t0 + 1001).allowed);                    // second trial
  auto third = b.allow(t0 + 1002);
  CHECK_FALSE(third.allowed);
  CHECK(third.reason == "half_open_busy");
  CHECK(b.trials_in_flight() == 2);
}

TEST_CASE("circuit_breaker: closes after the success threshold with empty windows") {
  circuit_breaker b("crm", count_config(), t0);
  trip(b, t0);
  REQUIRE(b.allow(t0 + 1000).allowed);
  REQUIRE(b.allow(t0 + 1000).allowed);
  CHECK_FALSE(b.on_success(t0 + 1100)); // 1 of 2
  CHECK(b.state() == breaker_state::half_open);
  // A finished trial frees its slot.
  CHECK(b.allow(t0 + 1150).allowed);
  auto t = b.on_success(t0 + 1200);
  REQUIRE(t);
  CHECK(t->from == breaker_state::half_open);
  CHECK(t->to == breaker_state::closed);
  CHECK(t->reason == "success_threshold_met");
  CHECK(t->counters == breaker_counters{0, 2, 3});
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.window_counters(t0 + 1200) == breaker_counters{0, 0, 0});
  // A fresh window: four failures do not reopen it.
  for (int i = 0; i < 4; ++i)
    CHECK_FALSE(b.on_failure(t0 + 1300));
}

TEST_CASE("circuit_breaker: a failed trial reopens it for a new cooldown") {
  circuit_breaker b("crm", count_config(), t0);
  trip(b, t0);
  REQUIRE(b.allow(t0 + 1000).allowed);
  CHECK_FALSE(b.on_success(t0 + 1050));
  REQUIRE(b.allow(t0 + 1060).allowed);
  auto t = b.on_failure(t0 + 1100);
  REQUIRE(t);
  CHECK(t->from == breaker_state::half_open);
  CHECK(t->to == breaker_state::open);
  CHECK(t->reason == "half_open_trial_failed");
  CHECK(t->counters == breaker_counters{1, 1, 2});
  CHECK(b.opened_at_ms() == t0 + 1100);
  CHECK_FALSE(b.allow(t0 + 2050).allowed);
  CHECK(b.allow(t0 + 2100).allowed);
  // A client error on a trial means the tool answered: it counts as a success.
  REQUIRE(b.allow(t0 + 2100).allowed);
  CHECK_FALSE(b.on_failure(t0 + 2200, error_category::client));
  auto closed = b.on_success(t0 + 2200);
  REQUIRE(closed);
  CHECK(closed->to == breaker_state::closed);
}

TEST_CASE("circuit_breaker: a lost trial frees its slot after the trial timeout") {
  auto cfg = count_config();
  cfg.half_open_max_trials = 1;
  circuit_breaker b("crm", cfg, t0);
  trip(b, t0);
  REQUIRE(b.allow(t0 + 1000).allowed);
  CHECK_FALSE(b.allow(t0 + 5999).allowed);
  CHECK(b.allow(t0 + 6000).allowed);
}

TEST_CASE("circuit_breaker: poll moves OPEN to HALF_OPEN without admitting a trial") {
  auto cfg = count_config();
  cfg.half_open_max_trials = 1;
  circuit_breaker b("crm", cfg, t0);
  trip(b, t0);
  CHECK_FALSE(b.poll(t0 + 999));
  auto t = b.poll(t0 + 1000);
  REQUIRE(t);
  CHECK(t->to == breaker_state::half_open);
  CHECK_FALSE(b.poll(t0 + 1001));
  CHECK(b.trials_in_flight() == 0);
  CHECK(b.allow(t0 + 1001).allowed);
}

TEST_CASE("circuit_breaker: FORCED_OPEN ignores successes until reset") {
  circuit_breaker b("crm", count_config(), t0);
  CHECK_FALSE(b.on_success(t0));
  auto t = b.force_open(t0 + 1, "incident 42");
  REQUIRE(t);
  CHECK(t->from == breaker_state::closed);
  CHECK(t->to == breaker_state::forced_open);
  CHECK(t->reason == "incident 42");
  CHECK(t->counters == breaker_counters{0, 1, 1});
  CHECK_FALSE(b.force_open(t0 + 2)); // already there
  for (int i = 0; i < 20; ++i)
    CHECK_FALSE(b.on_success(t0 + 10 + i));
  auto d = b.allow(t0 + 1000000); // far past any cooldown
  CHECK_FALSE(d.allowed);
  CHECK(d.reason == "forced_open");
  CHECK(d.state == breaker_state::forced_open);
  CHECK_FALSE(b.poll(t0 + 1000000));
  auto r = b.reset(t0 + 1000001);
  REQUIRE(r);
  CHECK(r->from == breaker_state::forced_open);
  CHECK(r->to == breaker_state::closed);
  CHECK(r->reason == "reset");
  CHECK(r->counters == breaker_counters{0, 20, 1});
  CHECK(b.allow(t0 + 1000002).allowed);
}

TEST_CASE("circuit_breaker: DISABLED always allows and records nothing") {
  circuit_breaker b("crm", count_config(), t0);
  auto t = b.disable(t0);
  REQUIRE(t);
  CHECK(t->to == breaker_state::disabled);
  for (int i = 0; i < 50; ++i) {
    auto d = b.allow(t0 + i);
    CHECK(d.allowed);
    CHECK(d.reason == "disabled");
    CHECK_FALSE(b.on_failure(t0 + i));
  }
  CHECK(b.state() == breaker_state::disabled);
  auto r = b.reset(t0 + 100);
  REQUIRE(r);
  CHECK(r->to == breaker_state::closed);
  CHECK(b.window_counters(t0 + 100) == breaker_counters{0, 0, 0});
  // OPEN can be forced from any state, also from DISABLED and OPEN.
  trip(b, t0 + 200);
  auto f = b.force_open(t0 + 300);
  REQUIRE(f);
  CHECK(f->from == breaker_state::open);
}

TEST_CASE("circuit_breaker: the time window opens on failures in the last T ms") {
  breaker_config c;
  c.count_window.size = 0;
  c.time_window = {60000, 1, 10, 10, 0.0}; // exact window: 10 failures in 60 s
  circuit_breaker b("sms", c, t0);
  for (int i = 0; i < 9; ++i)
    CHECK_FALSE(b.on_failure(t0 + i * 1000)); // t0 .. t0+8000
  CHECK(b.window_counters(t0 + 8000) == breaker_counters{9, 0, 9});
  // At t0+60500 the failure at t0 has left the window: 8 + 1.
  CHECK_FALSE(b.on_failure(t0 + 60500));
  CHECK(b.window_counters(t0 + 60500).failure_count == 9);
  auto t = b.on_failure(t0 + 60600);
  REQUIRE(t);
  CHECK(t->reason == "time_window_failures");
  CHECK(t->counters == breaker_counters{10, 0, 10});
}

TEST_CASE("circuit_breaker: failure rate with a minimum volume") {
  breaker_config c;
  c.count_window.size = 0;
  c.time_window = {60000, 1000, 10, 0, 0.5}; // >= 50 % of at least 10 calls
  circuit_breaker b("sms", c, t0);
  for (int i = 0; i < 4; ++i)
    CHECK_FALSE(b.on_failure(t0)); // 100 % but volume 4
  for (int i = 0; i < 5; ++i)
    CHECK_FALSE(b.on_success(t0)); // 4 of 9
  auto t = b.on_failure(t0);       // 5 of 10 = 50 %
  REQUIRE(t);
  CHECK(t->reason == "time_window_failure_rate");
  CHECK(t->counters == breaker_counters{5, 5, 10});

  breaker_config r;
  r.time_window.window_ms = 0;
  r.count_window = {4, 4, 0, 0.75};
  circuit_breaker rate("x", r, t0);
  CHECK_FALSE(rate.on_failure(t0));
  CHECK_FALSE(rate.on_failure(t0));
  CHECK_FALSE(rate.on_success(t0));
  auto t2 = rate.on_failure(t0);
  REQUIRE(t2);
  CHECK(t2->reason == "count_window_failure_rate");
}

TEST_CASE("circuit_breaker: JSON state round trip preserves behaviour mid-window") {
  circuit_breaker b("crm", count_config(), t0);
  for (int i = 0; i < 5; ++i)
    (void)b.on_success(t0);
  for (int i = 0; i < 4; ++i)
    (void)b.on_failure(t0);
  auto saved = nlohmann::json::parse(b.to_json().dump());
  CHECK(saved["count_window"] == "SSSSSFFFF");
  auto restored = circuit_breaker::from_json(saved);
  REQUIRE(restored.is_ok());
  CHECK(restored->to_json() == b.to_json());
  CHECK(restored->name() == "crm");
  CHECK(restored->config() == b.config());
  // The next failure opens both identically.
  auto ta = b.on_failure(t0 + 5);
  auto tb = restored->on_failure(t0 + 5);
  REQUIRE(ta);
  REQUIRE(tb);
  CHECK(ta->fact_data() == tb->fact_data());

  // OPEN survives a restart with its cooldown.
  auto open = circuit_breaker::from_json(nlohmann::json::parse(b.to_json().dump()));
  REQUIRE(open.is_ok());
  CHECK(open->state() == breaker_state::open);
  CHECK(open->allow(t0 + 500).retry_after_ms == 505);
  CHECK(open->allow(t0 + 1005).allowed);
  // HALF_OPEN with its trials in flight too.
  auto half = circuit_breaker::from_json(nlohmann::json::parse(open->to_json().dump()));
  REQUIRE(half.is_ok());
  CHECK(half->state() == breaker_state::half_open);
  CHECK(half->trials_in_flight() == 1);
  CHECK(half->allow(t0 + 1006).allowed);
  CHECK_FALSE(half->allow(t0 + 1007).allowed);
  CHECK_FALSE(half->on_success(t0 + 1010));
  CHECK(half->on_success(t0 + 1011));
}

TEST_CASE("circuit_breaker: JSON state of the time window round trips") {
  breaker_config c;
  c.count_window.size = 0;
  c.time_window = {60000, 1000, 10, 10, 0.0};
  circuit_breaker b("sms", c, t0);
  for (int i = 0; i < 9; ++i)
    (void)b.on_failure(t0 + i * 1000);
  auto restored = circuit_breaker::from_json(b.to_json());
  REQUIRE(restored.is_ok());
  CHECK(restored->window_counters(t0 + 9000) == breaker_counters{9, 0, 9});
  CHECK(restored->on_failure(t0 + 9000));
}

TEST_CASE("circuit_breaker: malformed JSON state is refused") {
  circuit_breaker b("crm", count_config(), t0);
  auto good = b.to_json();
  auto refused = [&](auto mutate) {
    auto j = good;
    mutate(j);
    return !circuit_breaker::from_json(j).is_ok();
  };
  CHECK(refused([](nlohmann::json& j) { j["state"] = "BROKEN"; }));
  CHECK(refused([](nlohmann::json& j) { j["count_window"] = "SXF"; }));
  CHECK(refused([](nlohmann::json& j) { j["count_window"] = "SSSSSSSSSSS"; })); // 11 > 10
  CHECK(refused([](nlohmann::json& j) { j.erase("config"); }));
  CHECK(refused([](nlohmann::json& j) { j["config"]["cooldown_ms"] = -1; }));
  CHECK(refused([](nlohmann::json& j) { j["trials_in_flight"] = -1; }));
  CHECK(refused([](nlohmann::json& j) { j["opened_at_ms"] = "soon"; }));
  CHECK_FALSE(refused([](nlohmann::json&) {}));
  CHECK_FALSE(circuit_breaker::from_json(nlohmann::json::array()).is_ok());
}

TEST_CASE("circuit_breaker: config JSON, validation and reconfiguration") {
  auto c = count_config();
  auto back = breaker_config::from_json(nlohmann::json::parse(c.to_json().dump()));
  REQUIRE(back.is_ok());
  CHECK(*back == c);
  auto partial = breaker_config::from_json(nlohmann::json{{"cooldown_ms", 5}});
  REQUIRE(partial.is_ok());
  CHECK(partial->cooldown_ms == 5);
  CHECK(partial->count_window.size == 10);
  auto refused = [](nlohmann::json j) { return !breaker_config::from_json(j).is_ok(); };
  CHECK(refused({{"half_open_max_trials", 0}}));
  CHECK(refused({{"success_threshold", 0}}));
  CHECK(refused({{"count_window", {{"size", 5}, {"min_calls", 6}}}}));
  CHECK(refused({{"count_window", {{"failure_rate", 1.5}}}}));
  CHECK(refused({{"time_window", {{"bucket_ms", 0}}}}));
  CHECK(refused({{"time_window", {{"window_ms", 100}, {"bucket_ms", 1000}}}}));

  circuit_breaker b("crm", count_config(), t0);
  for (int i = 0; i < 4; ++i)
    (void)b.on_failure(t0);
  auto smaller = count_config();
  smaller.count_window = {3, 3, 3, 0.0};
  REQUIRE(b.set_config(smaller).is_ok());
  CHECK(b.window_counters(t0) == breaker_counters{3, 0, 3});
  CHECK(b.on_failure(t0)); // 3 of the last 3
  auto bad = smaller;
  bad.cooldown_ms = -5;
  CHECK_FALSE(b.set_config(bad).is_ok());
  CHECK(b.config() == smaller);
  CHECK(parse_breaker_state("HALF_OPEN") == breaker_state::half_open);
  CHECK_FALSE(parse_breaker_state("half_open"));
}
