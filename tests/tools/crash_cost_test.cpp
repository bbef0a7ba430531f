// crash_cost_test.cpp: what a vendor charged is recorded exactly once across a crash. A child
// process runs the runtime and a keyed webhook delivery to the fake vendor on loopback (this
// process); the child is SIGKILLed while the call awaits the vendor, then a runtime in this
// process over the same files retries the call with its key, which resumes the journaled tool
// step. When the vendor had charged the cut-off request, its replay reports that charge and the
// runtime records it once; when the vendor's answers cannot say (the cut-off request never
// completed there), an `unknown_cost` fact marks the step for an operator. The test thread; the
// child's runtime in the forked child.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <thread>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/resilience/money.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/sinks/http_tool.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using nlohmann::json;

namespace crash_cost_test {

namespace {

const entity_key hook_entity{"acme", "webhook", "w1"};

runtime_config hook_config(const std::filesystem::path& dir, http_tool_client& client,
                           uint16_t vendor_port) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 2;
  add_builtin_types(c.types);
  http_tool_options o;
  o.url = "http://127.0.0.1:" + std::to_string(vendor_port) + "/hooks";
  o.request_timeout = std::chrono::seconds(20);
  auto fn = client.make_tool("hook", o);
  if (!fn)
    _exit(4);
  c.tools["hook"] = fn.value();
  tool_policy p;
  p.retry = {{"max_attempts", 1}};
  c.tool_policies["hook"] = p;
  return c;
}

call_reply deliver(runtime& rt) {
  call_options o;
  o.idempotency_key = "pay-1";
  return rt.call_sync(hook_entity, "deliver",
                      json{{"tool", "hook"}, {"payload", {{"amount", 130}}}}.dump(), o);
}

/// Polls `pred` (the vendor's state) until true or 20 s passed.

struct outcome {
  json costs;         ///< the entity's cost facts
  std::string vendor; ///< the vendor's charged_total
};

/// Starts the call in a child (the vendor's mode as `first` says), kills the child once
/// `reached` holds, sets the vendor's mode to `then`, and retries the call in a new runtime.
template <class F> outcome crash_and_retry(const json& first, F reached, const json& then) {
  test::temp_dir tmp;
  fake_vendor::vendor vendor;
  REQUIRE(vendor.set_mode(first) == "");
  auto port = vendor.port();
  test::child_process child;
  REQUIRE(child.run([&] {
    http_tool_client client;
    auto rt = runtime::start(hook_config(tmp.path(), client, port));
    if (!rt)
      _exit(2);
    (void)deliver(*rt.value());
    _exit(3); // not reached: the parent kills the child first
  }));
  bool got_there =
    test::eventually([&] { return reached(vendor.stats()); }, std::chrono::seconds(20));
  child.kill_now();
  REQUIRE(got_there);
  REQUIRE(vendor.set_mode(then) == "");
  http_tool_client client;
  auto rt = runtime::start(hook_config(tmp.path(), client, port));
  REQUIRE_MESSAGE(rt.is_ok(), rt.error().to_string());
  auto r = deliver(*rt.value());
  CHECK_MESSAGE(r.ok, r.body);
  outcome out;
  auto f = rt.value()->call_sync(hook_entity, "@facts", R"({"type":"cost","limit":100})");
  REQUIRE(f.ok);
  out.costs = f.json();
  out.vendor = vendor.stats()["charged_total"].get<std::string>();
  rt.value()->stop();
  client.stop();
  return out;
}

/// Whether two exact decimals are the same amount ("1.3" and "1.30").
bool same_amount(const std::string& a, const std::string& b) {
  return (resilience::decimal::parse(a).value() <=> resilience::decimal::parse(b).value()) == 0;
}

std::string recorded_total(const json& costs) {
  resilience::money_totals total;
  for (auto& c : costs)
    if (c.contains("amount"))
      total.add(c["currency"].get<std::string>(),
                resilience::decimal::parse(c["amount"].get<std::string>()).value());
  return total.total("USD").to_string();
}

} // namespace

TEST_CASE("costs across a crash: a SIGKILL after the vendor charged and before its answer "
          "arrived, then the retry: the vendor's replay reports the charge and it is recorded "
          "once") {
  auto out = crash_and_retry(
    {{"price", "1.30"}, {"delay_ms", 30000}}, // charged at once, answered 30 s later
    [](const json& st) { return same_amount(st["charged_total"].get<std::string>(), "1.30"); },
    {{"delay_ms", 0}});
  CHECK(same_amount(out.vendor, "1.30"));
  REQUIRE(out.costs.size() == 1);
  CHECK(out.costs[0]["subtype"] == "tool_usage");
  CHECK(same_amount(recorded_total(out.costs), out.vendor));
}

TEST_CASE("costs across a crash: a SIGKILL while the vendor held the request without an "
          "answer or a charge, then the retry: the new answer's charge is recorded and an "
          "unknown_cost fact marks the cut-off request") {
  auto out = crash_and_retry({{"mode", "timeout"}, {"hold_ms", 30000}, {"price", "1.30"}},
                             [](const json& st) { return st["calls"] == 1; },
                             {{"mode", "ok"}, {"price", "1.30"}});
  CHECK(same_amount(out.vendor, "1.30"));
  REQUIRE(out.costs.size() == 2);
  CHECK(same_amount(recorded_total(out.costs), out.vendor));
  int unknown = 0;
  for (auto& c : out.costs)
    if (c["subtype"] == "unknown_cost") {
      ++unknown;
      CHECK_FALSE(c.contains("amount"));
      CHECK(c["data"]["idempotency_key"].get<std::string>().rfind("fk_", 0) == 0);
    }
  CHECK(unknown == 1);
}

} // namespace crash_cost_test
