// workflow_test.cpp: examples/workflow's `order_workflow` in the in-process runtime with one
// scripted vendor per step: each step's own retry policy (fixed, exponential, linear), an
// exhausted step as a dead letter moving pending -> scheduled -> resolved (and discarded,
// acknowledged), an operator retry that resumes the execution after its last completed step,
// and one idempotency key = one execution.
#include "support.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
using test::example_fixture;
using test::scripted_vendor;

namespace {

tool_policy step_policy(const std::string& backoff, int attempts) {
  tool_policy p;
  p.retry = {{"base_delay_ms", 40}, {"max_delay_ms", 1000}, {"max_attempts", attempts},
             {"backoff", backoff},  {"multiplier", 2.0},    {"jitter", "none"}};
  p.breaker = {{"count_window", {{"size", 50}, {"failure_threshold", 50}, {"min_calls", 50}}}};
  return p;
}

struct workflow_fixture : example_fixture {
  scripted_vendor inventory, payments, shipping;
  workflow_fixture() {
    tools["inventory"] = inventory.fn();
    tools["payments"] = payments.fn();
    tools["shipping"] = shipping.fn();
    policies["inventory"] = step_policy("constant", 3);
    policies["payments"] = step_policy("exponential", 4);
    policies["shipping"] = step_policy("linear", 4);
    // exhausted steps wait for an operator (no automatic retry): they start pending
    dead_letter_rules = {{"server_error", {{"auto_retry_after_ms", nullptr}}}};
  }
  call_reply execute(const std::string& order, const std::string& key) {
    return call("order_workflow", "order-process", "execute", {{"input", {{"order_id", order}}}},
                key);
  }
};

std::vector<int64_t> gaps(const std::vector<int64_t>& t) {
  std::vector<int64_t> g;
  for (size_t i = 1; i < t.size(); ++i)
    g.push_back(t[i] - t[i - 1]);
  return g;
}

} // namespace

TEST_CASE("workflow: every step retries with its own policy (fixed, exponential, linear)") {
  workflow_fixture f;
  f.start();
  f.inventory.script({{503}, {503}, {200}});
  f.payments.script({{503}, {503}, {503}, {200}});
  f.shipping.script({{503}, {503}, {503}, {200}});
  auto r = f.execute("ORD-1", "order-ORD-1");
  REQUIRE_MESSAGE(r.ok, r.body);
  auto res = r.json();
  CHECK(res["status"] == "completed");
  CHECK(res["steps"][0]["attempts"] == 3);
  CHECK(res["steps"][0]["retry"]["backoff"] == "constant");
  CHECK(res["steps"][1]["retry"]["backoff"] == "exponential");
  CHECK(res["steps"][2]["retry"]["backoff"] == "linear");
  // fixed: 40, 40; exponential: 40, 80, 160; linear: 40, 80, 120 (lower bounds: timers never
  // fire early; upper bounds are not asserted on a shared machine)
  auto gi = gaps(f.inventory.times()), gp = gaps(f.payments.times()), gs = gaps(f.shipping.times());
  REQUIRE(gi.size() == 2);
  REQUIRE(gp.size() == 3);
  REQUIRE(gs.size() == 3);
  CHECK(gi[0] >= 40);
  CHECK(gi[1] >= 40);
  CHECK(gp[0] >= 40);
  CHECK(gp[1] >= 80);
  CHECK(gp[2] >= 160);
  CHECK(gs[0] >= 40);
  CHECK(gs[1] >= 80);
  CHECK(gs[2] >= 120);
  MESSAGE("gaps fixed " << json(gi) << " exponential " << json(gp) << " linear " << json(gs));
  // each step's retries are error facts of its own tool, under its own config
  auto perr =
    f.facts("order_workflow", "order-process", {{"type", "error"}, {"tool_id", "payments"}});
  CHECK(perr.size() == 3);
  CHECK(perr[0]["config_id"] == "tool.payments");
}

TEST_CASE("workflow: an exhausted step is a dead letter whose operator retry resumes the "
          "execution") {
  workflow_fixture f;
  f.start();
  f.payments.always({503});
  auto r = f.execute("ORD-2", "order-ORD-2");
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == "STEP_FAILED");
  auto p = r.json();
  CHECK(p["step"] == "charge_payment");
  CHECK(p["attempts"] == 4);
  REQUIRE(p.contains("dead_letter_id"));
  auto exec_id = p["execution_id"].get<std::string>();
  auto dls = f.dead_letters("order_workflow", "order-process");
  REQUIRE(dls.size() == 1);
  CHECK(dls[0]["status"] == "pending");
  CHECK(dls[0]["operation"] == "execute");
  CHECK(dls[0]["idempotency_key"] == "order-ORD-2");
  auto ex = f.ok("order_workflow", "order-process", "execution", {{"execution_id", exec_id}});
  CHECK(ex["status"] == "incomplete");
  CHECK(ex["completed_steps"] == json::array({"reserve_inventory"}));
  CHECK(f.inventory.calls() == 1);

  f.payments.always({200});
  auto moved = f.ok("order_workflow", "order-process", "@dead_letter",
                    {{"id", p["dead_letter_id"]}, {"action", "retry"}});
  CHECK(moved["status"] == "scheduled");
  CHECK(test::eventually(
    [&] { return f.dead_letters("order_workflow", "order-process")[0]["status"] == "resolved"; }));
  ex = f.ok("order_workflow", "order-process", "execution", {{"execution_id", exec_id}});
  CHECK(ex["status"] == "completed");
  CHECK(f.inventory.calls() == 1); // the completed step was not run again
  CHECK(f.shipping.calls() == 1);
  // every move of the dead letter is a fact
  CHECK(f.facts("order_workflow", "order-process",
                {{"type", "lifecycle"}, {"subtype", "dead_letter_retry"}})
          .size() == 1);
  CHECK(f.facts("order_workflow", "order-process",
                {{"type", "lifecycle"}, {"subtype", "dead_letter_resolved"}})
          .size() == 1);
  // the key now answers the resumed execution's result
  auto again = f.execute("ORD-2", "order-ORD-2");
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK(again.replayed);
  CHECK(again.json()["execution_id"] == exec_id);
  // The retry replayed the first run from its journal (which had found nothing to resume), up
  // to the failed step, instead of starting over: no execution_resumed fact.
  CHECK(again.json()["resumed"] == false);
  CHECK(f.facts("order_workflow", "order-process",
                {{"type", "workflow.execution_resumed"}, {"idempotency_key", "order-ORD-2"}})
          .empty());
  CHECK(f.facts("order_workflow", "order-process",
                {{"type", "workflow.execution_started"}, {"idempotency_key", "order-ORD-2"}})
          .size() == 1);
}

TEST_CASE("workflow: dead letters can be discarded or acknowledged, and final ones stay final") {
  workflow_fixture f;
  f.start();
  f.shipping.always({503});
  auto a = f.execute("ORD-3", "order-ORD-3").json();
  auto b = f.execute("ORD-4", "order-ORD-4").json();
  REQUIRE(a.contains("dead_letter_id"));
  REQUIRE(b.contains("dead_letter_id"));
  CHECK(f.ok("order_workflow", "order-process", "@dead_letter",
             {{"id", a["dead_letter_id"]}, {"action", "discard"}})["status"] == "discarded");
  CHECK(f.ok("order_workflow", "order-process", "@dead_letter",
             {{"id", b["dead_letter_id"]}, {"action", "acknowledge"}})["status"] == "acknowledged");
  auto bad = f.call("order_workflow", "order-process", "@dead_letter",
                    {{"id", a["dead_letter_id"]}, {"action", "retry"}});
  CHECK(bad.http_status == 409);
}

TEST_CASE("workflow: one idempotency key is one execution and bad input is not retried") {
  workflow_fixture f;
  f.start();
  auto first = f.execute("ORD-5", "order-ORD-5");
  REQUIRE_MESSAGE(first.ok, first.body);
  int calls = f.inventory.calls() + f.payments.calls() + f.shipping.calls();
  CHECK(calls == 3);
  auto second = f.execute("ORD-5", "order-ORD-5");
  REQUIRE(second.ok);
  CHECK(second.replayed);
  CHECK(second.json()["execution_id"] == first.json()["execution_id"]);
  CHECK(f.inventory.calls() + f.payments.calls() + f.shipping.calls() == calls);
  // another key is another execution
  auto other = f.execute("ORD-5", "order-ORD-5-again");
  REQUIRE(other.ok);
  CHECK(other.json()["execution_id"] != first.json()["execution_id"]);
  // a request without order_id is a client error: answered at once, stored, no step runs
  auto bad =
    f.call("order_workflow", "order-process", "execute", {{"input", json::object()}}, "order-bad");
  CHECK(bad.http_status == 400);
  CHECK(bad.code == "INVALID_REQUEST");
  CHECK(f.inventory.calls() == 2);
}
