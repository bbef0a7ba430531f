// telephony_test.cpp: examples/telephony's `asset` in the in-process runtime, against a scripted
// telephony vendor that times out, rate-limits with Retry-After, goes down and charges for
// failed calls: retries with backoff, the breaker opening (fallback while open), half-opening
// and closing, error facts, cost facts on failure, and economics that close to the cent.
#include "support.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
using test::example_fixture;
using test::scripted_vendor;

namespace {

tool_policy telephony_policy() {
  tool_policy p;
  p.retry = {{"base_delay_ms", 20}, {"max_delay_ms", 80}, {"max_attempts", 4}, {"jitter", "full"}};
  p.breaker = {{"count_window", {{"size", 4}, {"failure_threshold", 3}, {"min_calls", 3}}},
               {"cooldown_ms", 200},
               {"half_open_max_trials", 1},
               {"success_threshold", 1}};
  p.price = "0.013";
  p.charge_on_failure = true;
  p.fallback = [](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    r.body = {{"queued", true}, {"message", "the line is busy, we will call you back"}};
    done(std::move(r));
  };
  return p;
}

json place(example_fixture& f, int n, const std::string& to = "+15550001") {
  auto r = f.call("asset", "a1", "place_call", {{"to", to}}, "call-" + std::to_string(n));
  REQUIRE_MESSAGE(r.ok, r.body);
  return r.json();
}

} // namespace

TEST_CASE("telephony: retries, breaker open/half-open/closed, fallback, and closed economics") {
  example_fixture f;
  scripted_vendor vendor("0.013");
  f.tools["telephony"] = vendor.fn();
  f.policies["telephony"] = telephony_policy();
  f.start();

  // 1. A timeout and a 429 with Retry-After, then the call goes through.
  vendor.script({{0, "timeout"}, {429, "", 60}, {200}});
  auto first = place(f, 1);
  CHECK(first["status"] == "placed");
  CHECK(first["attempts"] == 3);
  auto t = vendor.times();
  REQUIRE(t.size() == 3);
  CHECK(t[2] - t[1] >= 60); // Retry-After honoured
  auto errs = f.facts("asset", "a1", {{"type", "error"}, {"tool_id", "telephony"}});
  REQUIRE(errs.size() == 2);
  CHECK(errs[0]["data"]["error_code"] == "TIMEOUT");
  CHECK(errs[1]["data"]["error_code"] == "RATE_LIMITED");
  CHECK(f.facts("asset", "a1", {{"type", "outcome"}, {"subtype", "resolved_after_retry"}}).size() ==
        1);

  // 2. The vendor goes down: the breaker opens during the call and the fallback answers.
  vendor.always({503});
  auto second = place(f, 2);
  CHECK(second["status"] == "deferred");
  CHECK(second["fallback"] == true);
  int calls_when_open = vendor.calls();
  // 3. While open, calls do not reach the vendor.
  auto third = place(f, 3);
  CHECK(third["status"] == "deferred");
  CHECK(vendor.calls() == calls_when_open);
  auto open_errs = f.facts("asset", "a1", {{"type", "error"}});
  CHECK(open_errs.back()["data"]["error_code"] == "CIRCUIT_OPEN");

  // 4. The vendor recovers; after the cooldown a trial call half-opens and closes the breaker.
  vendor.always({200});
  int n = 4;
  json placed;
  CHECK(test::eventually(
    [&] {
      placed = place(f, n++);
      return placed["status"] == "placed";
    },
    5s));
  auto states =
    f.facts("asset", "a1", {{"type", "lifecycle"}, {"subtype", "circuit_breaker_state_changed"}});
  REQUIRE(states.size() == 3);
  CHECK(states[0]["data"]["new_state"] == "OPEN");
  CHECK(states[1]["data"]["new_state"] == "HALF_OPEN");
  CHECK(states[2]["data"]["new_state"] == "CLOSED");

  // 5. Economics close: every charge of the vendor is a cost fact, failed calls included.
  auto s = f.ok("asset", "a1", "summary", json::object());
  CHECK(s["costs"]["total"]["USD"] == vendor.charged());
  CHECK(s["costs"]["failed_call_facts"].get<int>() >= 2); // the timeout and the 503
  CHECK(s["calls"]["placed"] == 2);
  CHECK(s["calls"]["deferred"].get<int>() >= 2);
  CHECK(s["errors_by_code"]["TIMEOUT"] == 1);
  CHECK(s["errors_by_code"]["RATE_LIMITED"] == 1);
  CHECK(s["errors_by_code"]["CIRCUIT_OPEN"].get<int>() >= 2);
  CHECK(s["breaker_transitions"].size() == 3);
  for (auto& c : f.facts("asset", "a1", {{"type", "cost"}}))
    if (c["data"]["failed"].get<bool>())
      CHECK(c["data"].contains("error_fact_id"));
  // a 429 was not charged: no cost fact points at the RATE_LIMITED error
  for (auto& c : f.facts("asset", "a1", {{"type", "cost"}}))
    CHECK(c["data"].value("error_fact_id", "") != errs[1]["fact_id"].get<std::string>());
}

TEST_CASE("telephony: exhausted retries are a dead letter with error and cost facts") {
  example_fixture f;
  scripted_vendor vendor("0.013");
  f.tools["telephony"] = vendor.fn();
  auto p = telephony_policy();
  p.breaker = {{"count_window", {{"size", 20}, {"failure_threshold", 20}, {"min_calls", 20}}}};
  f.policies["telephony"] = p;
  f.start();
  vendor.always({503});
  auto r = f.call("asset", "a2", "place_call", {{"to", "+15550002"}}, "dl-1");
  REQUIRE_FALSE(r.ok);
  CHECK(r.http_status == 503);
  CHECK(r.json()["attempts"] == 4);
  REQUIRE(r.json().contains("dead_letter_id"));
  CHECK(vendor.calls() == 4);
  CHECK(f.facts("asset", "a2", {{"type", "cost"}}).size() == 4);
  CHECK(f.facts("asset", "a2", {{"type", "error"}, {"subtype", "max_retries_exceeded"}}).size() ==
        1);
  auto dls = f.dead_letters("asset", "a2");
  REQUIRE(dls.size() == 1);
  CHECK(dls[0]["operation"] == "place_call");
  CHECK(dls[0]["attempts"] == 4);
  auto s = f.ok("asset", "a2", "summary", json::object());
  CHECK(s["costs"]["total"]["USD"] == vendor.charged());
  CHECK(s["calls"]["failed"] == 1);
  // A bad number is a client error: no vendor call, nothing retried.
  auto bad = f.call("asset", "a2", "place_call", {{"to", "call me"}}, "bad-1");
  CHECK(bad.http_status == 400);
  CHECK(vendor.calls() == 4);
}
