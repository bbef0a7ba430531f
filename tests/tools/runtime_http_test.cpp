// runtime_http_test.cpp: resilient tool calls end to end over real HTTP: the built-in webhook
// entity in a runtime whose tool is an http_tool_client transport to the in-process fake vendor
// on loopback. Retries then success (one stable Idempotency-Key across attempts), the breaker
// opening and the fallback answering without calling the vendor, cost facts that add up to the
// vendor's charged_total exactly, and exhausted retries ending as a dead letter. Short delays.
#include <doctest/doctest.h>

#include <future>
#include <optional>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/resilience/money.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/sinks/http_tool.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct fixture {
  test::temp_dir tmp;
  fake_vendor::vendor vendor;
  http_tool_client client;
  std::unique_ptr<runtime> rt;

  void start(tool_policy pol, std::chrono::milliseconds request_timeout = 2s,
             std::optional<http_tool_auth_refresh> auth = std::nullopt) {
    runtime_config c;
    c.data_dir = tmp.path();
    c.storage_threads = 2;
    c.alarm_poll = 50ms;
    add_builtin_types(c.types);
    http_tool_options o;
    o.url = vendor.url() + "/hooks";
    o.request_timeout = request_timeout;
    o.auth_refresh = std::move(auth);
    auto fn = client.make_tool("hook", o);
    REQUIRE_MESSAGE(fn.is_ok(), fn.error().message());
    pol.refresh_auth = client.auth_refresher("hook");
    c.tools["hook"] = fn.value();
    c.tool_policies["hook"] = std::move(pol);
    rt = test::start_ok(std::move(c));
  }
  ~fixture() {
    if (rt)
      rt->stop();
    client.stop();
  }
  call_reply deliver(const std::string& id, const std::string& key, json payload = {{"n", 1}}) {
    call_options o;
    o.idempotency_key = key;
    return rt->call_sync({"acme", "webhook", id}, "deliver",
                         json{{"tool", "hook"}, {"payload", payload}}.dump(), o);
  }
  json facts(const std::string& id, json filter) {
    filter["limit"] = 10000;
    auto r = rt->call_sync({"acme", "webhook", id}, "@facts", filter.dump());
    REQUIRE_MESSAGE(r.ok, r.body);
    return r.json();
  }
};

tool_policy fast_policy(int attempts) {
  tool_policy p;
  p.retry = {{"base_delay_ms", 10},
             {"max_delay_ms", 40},
             {"max_attempts", attempts},
             {"jitter", "none"},
             {"retry_after_cap_ms", 100}};
  return p;
}

} // namespace

TEST_CASE(
  "runtime over HTTP: transient failures are retried with one Idempotency-Key, then succeed") {
  fixture f;
  f.start(fast_policy(4), 300ms);
  REQUIRE(f.vendor.script(
            {{"responses", {{{"status", 503}}, {{"timeout", true}, {"hold_ms", 3000}}}}}) == "");
  auto r = f.deliver("w1", "delivery-1");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK(r.json()["attempts"] == 3);
  CHECK(r.json()["status"] == 200);
  auto errs = f.facts("w1", {{"type", "error"}, {"tool_id", "hook"}});
  REQUIRE(errs.size() == 2);
  CHECK(errs[0]["data"]["error_code"] == "HTTP_503");
  CHECK(errs[1]["data"]["error_code"] == "TIMEOUT");
  auto out = f.facts("w1", {{"type", "outcome"}, {"subtype", "resolved_after_retry"}});
  REQUIRE(out.size() == 1);
  CHECK(out[0]["data"]["resolves"].size() == 2);
  auto st = f.vendor.stats();
  CHECK(st["calls"] == 3);
  CHECK(st["by_status"]["200"] == 1);
  auto replay = f.deliver("w2", "delivery-1"); // another entity, same call key: another key
  REQUIRE(replay.ok);
  CHECK(f.vendor.stats()["duplicates"] == 0);
  // A repeated HTTP delivery with the same call key is answered by the runtime (replayed).
  auto again = f.deliver("w1", "delivery-1");
  CHECK(again.ok);
  CHECK(again.replayed);
  CHECK(f.vendor.stats()["calls"] == 4);
}

TEST_CASE("runtime over HTTP: the vendor sees one stable key and de-duplicates a re-run call") {
  fixture f;
  f.start(fast_policy(3));
  REQUIRE(f.vendor.set_mode({{"price", "0.5"}}) == "");
  REQUIRE(f.vendor.script({{"responses", {{{"status", 500}}}}}) == "");
  auto r = f.deliver("k1", "dk-1", {{"msg", "hi"}});
  REQUIRE_MESSAGE(r.ok, r.body);
  auto st = f.vendor.stats();
  REQUIRE(st["charges"].size() == 1); // the 500 was not charged (charge_failed false)
  CHECK(st["by_status"]["500"] == 1);
  CHECK(st["by_status"]["200"] == 1);
  // The same logical delivery run by another runtime call path (a new entity call whose
  // handler sends the identical tool request with the identical call key) would reuse the key;
  // here: the key the vendor stored answers a direct replay without a new charge.
  auto key = st["charges"][0]["idempotency_key"].get<std::string>();
  CHECK(key.rfind("fk_", 0) == 0);
  CHECK(key.size() == 43);
  http_tool_client c2;
  http_tool_options o;
  o.url = f.vendor.url() + "/hooks";
  auto fn = c2.make_tool("direct", o).value();
  std::promise<tool_reply> p;
  auto fut = p.get_future();
  fn(tool_request{"direct", "deliver", json{{"msg", "hi"}}, "", key},
     [&](tool_reply tr) { p.set_value(std::move(tr)); });
  REQUIRE(fut.wait_for(10s) == std::future_status::ready);
  auto tr = fut.get();
  CHECK(tr.ok);
  CHECK(tr.replayed);
  CHECK(tr.cost_amount == "0.5"); // what the original call was charged, not a new charge
  CHECK(f.vendor.stats()["duplicates"] == 1);
  CHECK(f.vendor.stats()["charged_total"] == "0.5");
}

TEST_CASE("runtime over HTTP: an attempt whose answer came too late after the vendor charged it "
          "is charged once: the retry's replay reports the charge and it is recorded") {
  fixture f;
  f.start(fast_policy(3), std::chrono::milliseconds(300));
  REQUIRE(f.vendor.set_mode({{"price", "0.25"}}) == "");
  // Charged and stored at once, answered after the client gave up; its replay comes at once.
  REQUIRE(f.vendor.script({{"responses", {{{"status", 200}, {"delay_ms", 1500}}}}}) == "");
  auto r = f.deliver("late1", "late-1");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK(f.vendor.stats()["duplicates"] == 1);
  auto costs = f.facts("late1", {{"type", "cost"}});
  REQUIRE(costs.size() == 1);
  CHECK(costs[0]["amount"] == "0.25");
  CHECK(costs[0]["data"]["failed"] == false);
  CHECK(f.vendor.stats()["charged_total"] == "0.25");
}

TEST_CASE("runtime over HTTP: the breaker opens after failures and the fallback answers") {
  fixture f;
  auto pol = fast_policy(1);
  pol.breaker = {{"count_window", {{"size", 4}, {"min_calls", 2}, {"failure_threshold", 2}}},
                 {"time_window", {{"window_ms", 0}}},
                 {"cooldown_ms", 60000}};
  pol.fallback = [](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    r.body = {{"queued", true}};
    done(std::move(r));
  };
  f.start(std::move(pol));
  REQUIRE(f.vendor.set_mode({{"mode", "down"}}) == "");
  CHECK_FALSE(f.deliver("b1", "d1").ok);
  CHECK_FALSE(f.deliver("b1", "d2").ok);
  CHECK(f.vendor.stats()["calls"] == 2);
  auto fb = f.deliver("b1", "d3");
  REQUIRE_MESSAGE(fb.ok, fb.body);
  CHECK(fb.json()["fallback"] == true);
  CHECK(f.vendor.stats()["calls"] == 2); // the open breaker did not call the vendor
  auto life = f.facts("b1", {{"type", "lifecycle"}, {"subtype", "circuit_breaker_state_changed"}});
  REQUIRE(life.size() >= 1);
  auto open = f.facts("b1", {{"type", "error"}, {"tool_id", "hook"}});
  bool saw_circuit_open = false;
  for (auto& e : open)
    saw_circuit_open = saw_circuit_open || e["data"]["error_code"] == "CIRCUIT_OPEN";
  CHECK(saw_circuit_open);
}

TEST_CASE("runtime over HTTP: cost facts add up to exactly what the vendor charged") {
  fixture f;
  auto pol = fast_policy(5);
  pol.price = "0.013";
  pol.charge_on_failure = true;
  f.start(std::move(pol));
  REQUIRE(f.vendor.set_mode({{"price", "0.013"}, {"charge_failed", true}}) == "");
  REQUIRE(f.vendor.script({{"responses",
                            {{{"status", 503}},
                             {{"status", 429}, {"retry_after_s", 0}},
                             {{"status", 500}},
                             {{"status", 200}},
                             {{"status", 503}},
                             {{"status", 200}}}}}) == "");
  REQUIRE(f.deliver("c1", "cost-1").ok);
  REQUIRE(f.deliver("c1", "cost-2").ok);
  REQUIRE(f.vendor.set_mode({{"price", "0.0071"}}) == ""); // a vendor-side price change
  REQUIRE(f.deliver("c1", "cost-3").ok);
  auto st = f.vendor.stats();
  CHECK(st["charges"].size() == 7);
  auto costs = f.facts("c1", {{"type", "cost"}});
  REQUIRE(costs.size() == st["charges"].size());
  resilience::money_totals total;
  int failed_costs = 0;
  auto errors = f.facts("c1", {{"type", "error"}, {"tool_id", "hook"}});
  for (auto& c : costs) {
    total.add(c["currency"].get<std::string>(),
              resilience::decimal::parse(c["amount"].get<std::string>()).value());
    CHECK(c["to_entity"] == "vendor_hook");
    if (c["data"]["failed"] == true) {
      ++failed_costs;
      bool found = false;
      for (auto& e : errors)
        found = found || e["fact_id"] == c["data"]["error_fact_id"];
      CHECK(found);
    }
  }
  CHECK(failed_costs == 4);
  CHECK(total.total("USD").to_string() == st["charged_total"].get<std::string>());
  CHECK(st["charged_total"] == "0.0851"); // 6 x 0.013 + 0.0071
}

TEST_CASE("runtime over HTTP: exhausted retries become a dead letter") {
  fixture f;
  f.start(fast_policy(3));
  REQUIRE(f.vendor.set_mode({{"mode", "down"}}) == "");
  auto r = f.deliver("d1", "dead-1");
  CHECK_FALSE(r.ok);
  auto p = r.json();
  REQUIRE(p.contains("dead_letter_id"));
  CHECK(f.vendor.stats()["calls"] == 3);
  CHECK(f.facts("d1", {{"type", "error"}, {"subtype", "max_retries_exceeded"}}).size() == 1);
  auto dls = f.rt->call_sync({"acme", "webhook", "d1"}, "@dead_letters", "{}");
  REQUIRE(dls.ok);
  auto list = dls.json();
  REQUIRE(list.size() == 1);
  CHECK(list[0]["id"] == p["dead_letter_id"]);
  CHECK(list[0]["attempts"] == 3);
  CHECK(list[0]["reason"] == "server_error");
  CHECK(list[0]["error_code"] == "HTTP_503");
}

TEST_CASE("runtime over HTTP: a 401 refreshes the credential once and the call goes on with it, "
          "and a rotated credential is refreshed again") {
  fixture f;
  http_tool_auth_refresh auth;
  auth.url = f.vendor.url() + "/_vendor/token";
  f.start(fast_policy(1), 2s, auth); // one attempt: the call after the refresh is not a retry
  REQUIRE(f.vendor.set_mode({{"token", "t1"}}) == "");
  auto r = f.deliver("a1", "auth-1");
  REQUIRE_MESSAGE(r.ok, r.body);
  auto st = f.vendor.stats();
  CHECK(st["by_status"]["401"] == 1);
  CHECK(st["by_status"]["200"] == 1);
  CHECK(st["tokens_issued"] == 1);
  auto refreshed = f.facts("a1", {{"type", "outcome"}, {"subtype", "auth_refreshed"}});
  REQUIRE(refreshed.size() == 1);
  CHECK(refreshed[0]["data"]["after_attempt"] == 1);
  CHECK(f.facts("a1", {{"type", "error"}})[0]["data"]["error_code"] == "HTTP_401");
  // The credential is kept: the next call carries it and needs no refresh.
  REQUIRE(f.deliver("a2", "auth-2").ok);
  CHECK(f.vendor.stats()["tokens_issued"] == 1);
  CHECK(f.vendor.stats()["by_status"]["401"] == 1);
  // The vendor rotates its token: the next call refreshes again and goes on.
  REQUIRE(f.vendor.set_mode({{"token", "t2"}}) == "");
  REQUIRE(f.deliver("a3", "auth-3").ok);
  CHECK(f.vendor.stats()["tokens_issued"] == 2);
  CHECK(f.vendor.stats()["by_status"]["401"] == 2);
}

TEST_CASE("runtime over HTTP: a refresh whose answer has no credential leaves the call's 401 as "
          "its answer, once") {
  fixture f;
  http_tool_auth_refresh auth;
  auth.url = f.vendor.url() + "/_vendor/token";
  auth.field = "token"; // the vendor answers access_token: no such member
  f.start(fast_policy(3), 2s, auth);
  REQUIRE(f.vendor.set_mode({{"token", "t1"}}) == "");
  auto r = f.deliver("b1", "auth-b1");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "HTTP_401");
  CHECK(f.vendor.stats()["by_status"]["401"] == 1); // 401 is not retried: one call
  CHECK(f.vendor.stats()["tokens_issued"] == 1);
  CHECK(f.facts("b1", {{"type", "outcome"}, {"subtype", "auth_refresh_failed"}}).size() == 1);
}
