// tool_test.cpp: resilient tool calls end to end in the runtime, against a scripted in-process
// vendor: retries with error and outcome facts, exhaustion into dead letters, terminal errors,
// the breaker's life cycle (also across a restart), the retry budget, Retry-After, locked config
// versions, and cost facts that add up to what the vendor charged. Short real delays.
#include <doctest/doctest.h>

#include <deque>
#include <mutex>
#include <thread>

#include "factum/resilience/circuit_breaker.hpp"
#include "factum/resilience/money.hpp"
#include "factum/runtime/runtime.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace tool_test {

namespace {

/// A vendor whose answers are scripted per request. Thread-safe.
class fake_vendor {
 public:
  struct answer {
    answer(int s = 200, std::string t = {}, std::optional<int64_t> ra = {})
        : status(s), transport(std::move(t)), retry_after_ms(ra) {}
    int status;
    std::string transport; // "timeout", "connection_reset": no HTTP answer
    std::optional<int64_t> retry_after_ms;
  };
  void script(std::vector<answer> a) {
    std::lock_guard<std::mutex> g(mu_);
    script_.assign(a.begin(), a.end());
  }
  void always(answer a) {
    std::lock_guard<std::mutex> g(mu_);
    script_.clear();
    default_ = a;
  }
  tool_fn fn(std::string price_per_call) {
    return [this, price_per_call](const tool_request&, std::function<void(tool_reply)> done) {
      answer a;
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!script_.empty()) {
          a = script_.front();
          script_.pop_front();
        } else {
          a = default_;
        }
        ++calls_;
        times_.push_back(now_ms());
        charged_.add("USD", resilience::decimal::parse(price_per_call).value());
      }
      tool_reply r;
      r.http_status = a.transport.empty() ? a.status : 0;
      r.ok = a.transport.empty() && a.status < 300;
      r.error_code = a.transport;
      r.error_message = r.ok ? "" : "vendor says " + std::to_string(a.status);
      r.retry_after_ms = a.retry_after_ms;
      r.body = json{{"status", a.status}};
      done(std::move(r));
    };
  }
  int calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }
  std::vector<int64_t> times() {
    std::lock_guard<std::mutex> g(mu_);
    return times_;
  }
  std::string charged() {
    std::lock_guard<std::mutex> g(mu_);
    return charged_.total("USD").to_string();
  }

 private:
  std::mutex mu_;
  std::deque<answer> script_;
  answer default_;
  int calls_ = 0;
  std::vector<int64_t> times_;
  resilience::money_totals charged_;
};

/// A tool user that can also publish a new version of a tool's config.
class tool_user final : public entity {
 public:
  task<json> deliver(context& ctx, json a) {
    tool_request req;
    req.tool = a.value("tool", std::string("vendor"));
    req.operation = "deliver";
    req.payload = a.value("payload", json::object());
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (!r.ok) {
      call_error e(r.category, r.error_code, r.error_message);
      e.details["attempts"] = r.attempts;
      if (!r.dead_letter_id.empty())
        e.details["dead_letter_id"] = r.dead_letter_id;
      throw e;
    }
    co_return json{{"attempts", r.attempts}, {"body", r.body}};
  }
  json publish(context& ctx, json a) {
    auto cur = ctx.config("tool.vendor");
    auto body = json::parse(cur->body);
    body["price"]["amount"] = a.value("price", std::string("9"));
    return {{"version", ctx.put_config("tool.vendor", body)}};
  }
};

struct fixture {
  test::temp_dir tmp;
  fake_vendor vendor;
  std::unique_ptr<runtime> rt;

  runtime_config config(tool_policy pol) {
    runtime_config c;
    c.data_dir = tmp.path();
    c.storage_threads = 2;
    add_builtin_types(c.types);
    c.types.add(type_builder<tool_user>("tool_user")
                  .method("deliver", &tool_user::deliver)
                  .method("publish", &tool_user::publish)
                  .build());
    c.tools["vendor"] = vendor.fn(pol.price.empty() ? "0" : pol.price);
    c.tool_policies["vendor"] = std::move(pol);
    c.alarm_poll = 50ms;
    return c;
  }
  void start(tool_policy pol) { rt = test::start_ok(config(std::move(pol))); }
  call_reply deliver(const std::string& id, const std::string& key = "") {
    call_options o;
    o.idempotency_key = key;
    return rt->call_sync({"acme", "tool_user", id}, "deliver", json{{"tool", "vendor"}}.dump(), o);
  }
  json facts(const std::string& id, json filter) {
    filter["limit"] = 10000;
    auto r = rt->call_sync({"acme", "tool_user", id}, "@facts", filter.dump());
    REQUIRE_MESSAGE(r.ok, r.body);
    return r.json();
  }
  /// The value of the series `name` of the tool "vendor" (/metrics), with `label`="value" when
  /// given.
  double vendor_metric(std::string_view name, std::string_view label = {},
                       std::string_view value = {}) {
    if (label.empty())
      return rt->metrics().value(name, {{"tool", "vendor"}});
    return rt->metrics().value(name, {{"tool", "vendor"}, {label, value}});
  }
  json internal(const std::string& id, const std::string& m, json args) {
    auto r = rt->call_sync({"acme", "tool_user", id}, m, args.dump());
    REQUIRE_MESSAGE(r.ok, r.body);
    return r.json();
  }
};

tool_policy fast_policy(int attempts = 4) {
  tool_policy p;
  p.retry = {
    {"base_delay_ms", 10}, {"max_delay_ms", 40}, {"max_attempts", attempts}, {"jitter", "none"}};
  return p;
}

} // namespace

TEST_CASE("tools: transient failures then success: error facts and an outcome that resolves them") {
  fixture f;
  f.start(fast_policy());
  f.vendor.script({{503}, {503}, {200}});
  auto r = f.deliver("t1");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK(r.json()["attempts"] == 3);
  CHECK(f.vendor.calls() == 3);
  auto errs = f.facts("t1", {{"type", "error"}});
  REQUIRE(errs.size() == 2);
  CHECK(errs[0]["data"]["error_code"] == "HTTP_503");
  CHECK(errs[0]["data"]["category"] == "transient");
  CHECK(errs[0]["data"]["retry_attempt"] == 1);
  CHECK(errs[0]["tool_id"] == "vendor");
  CHECK(errs[0]["config_id"] == "tool.vendor");
  CHECK(errs[0]["config_version"] == 1);
  auto out = f.facts("t1", {{"type", "outcome"}});
  REQUIRE(out.size() == 1);
  CHECK(out[0]["data"]["resolves"] == json::array({errs[0]["fact_id"], errs[1]["fact_id"]}));
  CHECK(f.rt->metrics().value("factum_tool_calls_total") == 1);
  CHECK(f.vendor_metric("factum_tool_errors_total", "category", "transient") == 2);
  CHECK(f.vendor_metric("factum_tool_retry_outcomes_total", "outcome", "attempted") == 2);
  CHECK(f.vendor_metric("factum_tool_retry_outcomes_total", "outcome", "succeeded") == 1);
  CHECK(f.vendor_metric("factum_tool_dead_letters_total") == 0);
}

TEST_CASE("tools: exhausted retries become a dead letter, listed and resolvable by an operator") {
  fixture f;
  f.start(fast_policy(3));
  f.vendor.always({503});
  auto r = f.deliver("t2", "key-t2");
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 503);
  auto p = r.json();
  REQUIRE(p.contains("dead_letter_id"));
  CHECK(f.vendor.calls() == 3);
  CHECK(
    f.facts("t2", {{"type", "error"}, {"subtype", "transient"}, {"tool_id", "vendor"}}).size() ==
    3);
  // ...and the failed call itself is an error fact too (no tool_id: the operation's failure)
  CHECK(f.facts("t2", {{"type", "error"}, {"subtype", "transient"}}).size() == 4);
  CHECK(f.facts("t2", {{"type", "error"}, {"subtype", "max_retries_exceeded"}}).size() == 1);
  auto dls = f.internal("t2", "@dead_letters", json::object());
  REQUIRE(dls.size() == 1);
  CHECK(dls[0]["id"] == p["dead_letter_id"]);
  CHECK(dls[0]["attempts"] == 3);
  CHECK(dls[0]["reason"] == "server_error");
  CHECK(dls[0]["idempotency_key"] == "key-t2");
  CHECK(f.vendor_metric("factum_tool_dead_letters_total") == 1);
  // operator: discard, then an invalid move (discarded is final)
  auto ack = f.internal("t2", "@dead_letter", {{"id", p["dead_letter_id"]}, {"action", "discard"}});
  CHECK(ack["status"] == "discarded");
  auto bad = f.rt->call_sync({"acme", "tool_user", "t2"}, "@dead_letter",
                             json{{"id", p["dead_letter_id"]}, {"action", "retry"}}.dump());
  CHECK(bad.http_status == 409);
  CHECK(f.facts("t2", {{"type", "lifecycle"}, {"subtype", "dead_letter_discard"}}).size() == 1);
}

TEST_CASE("tools: an operator retry re-runs the call with its key and resolves the dead letter") {
  fixture f;
  f.start(fast_policy(2));
  f.vendor.always({503});
  auto r = f.deliver("t3", "key-t3");
  REQUIRE_FALSE(r.ok);
  auto id = r.json()["dead_letter_id"];
  f.vendor.always({200});
  auto moved = f.internal("t3", "@dead_letter", {{"id", id}, {"action", "retry"}});
  CHECK(moved["status"] == "scheduled");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  json dl;
  while (std::chrono::steady_clock::now() < deadline) {
    dl = f.internal("t3", "@dead_letters", json::object())[0];
    if (dl["status"] == "resolved")
      break;
    std::this_thread::sleep_for(20ms); // the retry runs from an alarm
  }
  CHECK(dl["status"] == "resolved");
  // the original key now replays the retry's result: exactly one effect
  auto again = f.deliver("t3", "key-t3");
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK(again.replayed);
  CHECK(f.vendor.calls() == 3);
}

TEST_CASE("tools: a terminal error is not retried") {
  fixture f;
  f.start(fast_policy());
  f.vendor.always({400});
  auto r = f.deliver("t4");
  CHECK(r.http_status == 400);
  CHECK(f.vendor.calls() == 1);
  CHECK(f.internal("t4", "@dead_letters", json::object()).empty());
}

TEST_CASE("tools: the breaker opens at its threshold, fast-fails, half-opens and closes") {
  fixture f;
  auto p = fast_policy(1);
  p.breaker = {{"count_window", {{"size", 4}, {"failure_threshold", 3}, {"min_calls", 3}}},
               {"cooldown_ms", 150},
               {"half_open_max_trials", 1},
               {"success_threshold", 1}};
  f.start(p);
  f.vendor.always({503});
  for (int i = 0; i < 3; ++i)
    CHECK(f.deliver("b1").http_status == 503);
  CHECK(f.vendor.calls() == 3);
  auto opened =
    f.facts("b1", {{"type", "lifecycle"}, {"subtype", "circuit_breaker_state_changed"}});
  REQUIRE(opened.size() == 1);
  CHECK(opened[0]["data"]["new_state"] == "OPEN");
  CHECK(f.vendor_metric("factum_tool_breaker_transitions_total", "to", "open") == 1);
  CHECK(f.vendor_metric("factum_tool_breakers", "state", "open") == 1);
  auto fast = f.deliver("b1");
  CHECK(fast.code == "CIRCUIT_OPEN");
  CHECK(f.vendor_metric("factum_tool_fast_fails_total") == 1);
  CHECK(f.vendor.calls() == 3); // the vendor was not touched
  CHECK(f.facts("b1", {{"type", "error"}}).back()["data"]["error_code"] == "CIRCUIT_OPEN");
  f.vendor.always({200});
  std::this_thread::sleep_for(200ms); // let the cooldown pass (a timer, not synchronisation)
  auto ok = f.deliver("b1");
  REQUIRE_MESSAGE(ok.ok, ok.body);
  auto states =
    f.facts("b1", {{"type", "lifecycle"}, {"subtype", "circuit_breaker_state_changed"}});
  REQUIRE(states.size() == 3);
  CHECK(states[1]["data"]["new_state"] == "HALF_OPEN");
  CHECK(states[2]["data"]["new_state"] == "CLOSED");
  CHECK(f.vendor_metric("factum_tool_breaker_transitions_total", "to", "closed") == 1);
  for (auto state : {"open", "half_open", "forced_open", "disabled"}) // none holds it now
    CHECK(f.vendor_metric("factum_tool_breakers", "state", state) == 0);
}

TEST_CASE("tools: a forced-open breaker survives a restart and fast-fails until reset") {
  fixture f;
  f.start(fast_policy(1));
  f.vendor.always({200});
  REQUIRE(f.deliver("b2").ok);
  auto forced = f.internal("b2", "@breaker", {{"tool", "vendor"}, {"action", "force-open"}});
  CHECK(forced["state"] == "FORCED_OPEN");
  f.rt.reset();
  f.start(fast_policy(1));
  auto listed = f.internal("b2", "@breakers", json::object());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["state"] == "FORCED_OPEN");
  CHECK(f.deliver("b2").code == "CIRCUIT_OPEN");
  CHECK(f.vendor.calls() == 1);
  // The new process counts the breaker it loaded from the file.
  CHECK(f.vendor_metric("factum_tool_breakers", "state", "forced_open") == 1);
  f.internal("b2", "@breaker", {{"tool", "vendor"}, {"action", "reset"}});
  CHECK(f.deliver("b2").ok);
  CHECK(f.vendor.calls() == 2);
}

TEST_CASE("tools: a spent retry budget fails fast instead of retrying") {
  fixture f;
  auto p = fast_policy(5);
  p.budget = {{"ratio", 0.0}, {"min_per_window", 1}, {"window_ms", 60000}, {"bucket_ms", 1000}};
  f.start(p);
  f.vendor.always({503});
  auto r = f.deliver("bud");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "RETRY_BUDGET_EXHAUSTED");
  CHECK(f.vendor.calls() == 2); // the first attempt and the one retry the budget allowed
  CHECK(f.facts("bud", {{"type", "error"}, {"subtype", "budget"}}).size() == 1);
  CHECK(f.vendor_metric("factum_tool_retry_outcomes_total", "outcome", "budget_refused") == 1);
}

TEST_CASE("tools: Retry-After is respected") {
  fixture f;
  f.start(fast_policy());
  f.vendor.script({{429, "", 300}, {200}});
  auto r = f.deliver("ra");
  REQUIRE_MESSAGE(r.ok, r.body);
  auto t = f.vendor.times();
  REQUIRE(t.size() == 2);
  CHECK(t[1] - t[0] >= 300);
  CHECK(f.facts("ra", {{"type", "error"}})[0]["data"]["error_code"] == "RATE_LIMITED");
}

TEST_CASE("tools: a scheduled retry keeps the config version locked when a newer one is "
          "published") {
  fixture f;
  auto p = fast_policy(2);
  p.retry["base_delay_ms"] = 300;
  p.retry["max_delay_ms"] = 300;
  p.max_inline_delay_ms = 50; // a 300 ms wait becomes a scheduled dead letter
  p.price = "0.01";
  f.start(p);
  f.vendor.script({{503}, {200}});
  auto r = f.deliver("cv", "key-cv");
  REQUIRE_FALSE(r.ok);
  REQUIRE(r.json().contains("dead_letter_id"));
  auto v2 = f.internal("cv", "publish", {{"price", "9"}});
  CHECK(v2["version"] == 2);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  json dl;
  while (std::chrono::steady_clock::now() < deadline) {
    dl = f.internal("cv", "@dead_letters", json::object())[0];
    if (dl["status"] == "resolved")
      break;
    std::this_thread::sleep_for(20ms); // the retry runs from an alarm
  }
  REQUIRE(dl["status"] == "resolved");
  auto costs = f.facts("cv", {{"type", "cost"}});
  REQUIRE(costs.size() == 1); // the successful retry; failures were not charged
  CHECK(costs[0]["config_version"] == 1);
  CHECK(costs[0]["amount"] == "0.01");
}

TEST_CASE("tools: cost facts of charged calls add up to what the vendor charged, to the cent") {
  fixture f;
  auto p = fast_policy(3);
  p.price = "0.005";
  p.charge_on_failure = true;
  f.start(p);
  f.vendor.script({{503}, {200}, {503}, {503}, {503}, {200}, {400}, {200}});
  for (int i = 0; i < 5; ++i)
    (void)f.deliver("money");
  auto costs = f.facts("money", {{"type", "cost"}});
  resilience::money_totals sum;
  int failed = 0;
  for (auto& c : costs) {
    sum.add(c["currency"].get<std::string>(),
            resilience::decimal::parse(c["amount"].get<std::string>()).value());
    failed += c["data"]["failed"].get<bool>();
    CHECK(c["to_entity"] == "vendor_vendor");
  }
  CHECK(static_cast<int>(costs.size()) == f.vendor.calls());
  CHECK(sum.total("USD").to_string() == f.vendor.charged());
  CHECK(failed == 5);
  // every failed charge points at its error fact
  for (auto& c : costs)
    if (c["data"]["failed"].get<bool>())
      CHECK(c["data"].contains("error_fact_id"));
}

} // namespace tool_test
