// schedule_journal_test.cpp: a schedule's fire as a journaled turn, in the turn runner alone
// (runner_bench.hpp: a real store, no actor system): the chosen fire stays on the schedule's
// alarm until the fire ends (so a process that dies at its await resumes the same fire), a fire
// that failed after its step replays the step on its retry, and the schedule moves on only then.
#include <doctest/doctest.h>

#include "runner_bench.hpp"
#include "schedule/schedule_turns.hpp"

using namespace factum;
using namespace factum::test_runner;

namespace schedule_journal_test {

namespace {

/// The schedule "steps" (every minute) whose fire at `at` is due now, as set_schedule leaves it
/// once that time has come. The bench's entity runs a tool step for an alarm named "steps".
void due_schedule(bench& b, int64_t at) {
  schedule_record row;
  row.name = "steps";
  row.spec = json{
    {"every_ms", 60'000},
    {"anchor_ms", at},
    {"missed", "fire_once"},
    {"jitter_ms", 0},
    {"grace_ms",
     60'000}}.dump();
  row.payload = R"({"report":"daily"})";
  row.next_ms = at;
  row.created_at_ms = at - 60'000;
  row.updated_at_ms = at - 60'000;
  REQUIRE(b.store->put_schedule(row).is_ok());
  REQUIRE(b.store->set_alarm({"@schedule:steps", at, json{{"at", at}}.dump(), 0, at}).is_ok());
  REQUIRE(b.store->commit().is_ok());
}

/// Sets a schedule, awaits a tool step, then fails retryably while `fail_` says so.
class planner final : public entity {
 public:
  task<json> plan(context& ctx, json) {
    ctx.set_schedule("tick", json{{"every_ms", 60'000}});
    tool_request req;
    req.tool = "vendor";
    req.operation = "after_plan";
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (fail_ > 0) {
      --fail_;
      throw transient_error("ASKED_TO_FAIL", "asked to fail after the step");
    }
    co_return json{{"ok", r.ok}};
  }
  static inline int fail_ = 0;
};

} // namespace

TEST_CASE("schedules: a fire's alarm holds the chosen fire while the handler waits at its await, "
          "and the schedule moves on when the fire ends") {
  bench b;
  b.vendor_ok = true;
  int64_t at = now_ms() - 500;
  due_schedule(b, at);
  queued q;
  q.kind = turn_kind::alarm;
  b.runner.run(std::move(q)); // suspended at the tool step: what it wrote so far is committed
  REQUIRE(b.runner.busy());
  // A process that died here would find the fire on the alarm, still due, and run it again.
  auto held = b.store->get_alarm("@schedule:steps");
  REQUIRE(held.is_ok());
  CHECK(held->due_ms == at);
  auto chosen = chosen_fire(held->payload);
  REQUIRE(chosen);
  CHECK(chosen->step.fire->scheduled_ms == at);
  CHECK(chosen->step.fire->missed == 0);
  CHECK(chosen->step.next_ms == at + 60'000);
  CHECK(b.store->get_schedule("steps")->next_ms == at); // not moved on yet
  CHECK(journal_of(b, schedule_journal_key("steps", at)).size() == 1);
  b.host.drive();
  REQUIRE_FALSE(b.runner.busy());
  if (b.store->dirty())
    b.host.commit();
  else if (b.store->in_batch())
    REQUIRE(b.store->commit().is_ok());
  CHECK(b.count_facts("alarm_ran") == 1);
  auto row = b.store->get_schedule("steps");
  REQUIRE(row.is_ok());
  CHECK(row->next_ms == at + 60'000);
  CHECK(row->last_ms == at);
  auto next = b.store->get_alarm("@schedule:steps");
  REQUIRE(next.is_ok());
  CHECK(next->due_ms == at + 60'000);
  CHECK(next->payload == json{{"at", at + 60'000}}.dump());
  CHECK(journal_of(b, schedule_journal_key("steps", at)).empty()); // this fire's journal went
}

TEST_CASE("schedules: a fire left on its alarm by a process that died runs again as that fire, "
          "not as one the policy would choose now") {
  bench b;
  b.vendor_ok = true;
  int64_t at = now_ms() - 3 * 60'000; // three fires ago
  due_schedule(b, at);
  // What a process that died at the fire's await left: the fire chosen (covering two missed
  // times) on the alarm.
  schedule_turn st;
  st.step.fire = schedule_fire{at + 60'000, 2};
  st.step.next_ms = at + 120'000;
  st.payload = R"({"report":"daily"})";
  REQUIRE(b.store->set_alarm({"@schedule:steps", at, retry_payload(st).dump(), 0, at}).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.alarm();
  CHECK(b.vendor_ops["alarm_step"] == 1);
  // The same fire, not one the policy would choose now (the latest time, three missed).
  fact_filter f;
  f.type = "alarm_ran";
  auto ran = b.store->query(f);
  REQUIRE(ran.is_ok());
  REQUIRE(ran->size() == 1);
  auto data = json::parse((*ran)[0].data);
  CHECK(data["name"] == "steps");
  CHECK(data["payload"] == json{{"report", "daily"}});
  auto row = b.store->get_schedule("steps");
  CHECK(row->last_ms == at + 60'000);
  CHECK(row->next_ms == at + 120'000);
}

TEST_CASE("schedules: a fire that failed after its step replays the step on its retry, then the "
          "schedule moves on and the fire's journal goes") {
  bench b;
  b.cfg.alarm_max_retries = 3;
  b.cfg.alarm_retry_base = std::chrono::milliseconds(0);
  b.vendor_ok = true;
  awaiter::fail_alarms_ = 1;
  int64_t at = now_ms() - 500;
  due_schedule(b, at);
  b.alarm(); // the step, then the failure
  CHECK(b.vendor_ops["alarm_step"] == 1);
  CHECK(journal_of(b, schedule_journal_key("steps", at)).size() == 1);
  auto retry = b.store->get_alarm("@schedule:steps");
  REQUIRE(retry.is_ok());
  CHECK(retry->attempts == 1);
  REQUIRE(chosen_fire(retry->payload));
  CHECK(chosen_fire(retry->payload)->step.fire->scheduled_ms == at);
  CHECK(b.store->get_schedule("steps")->next_ms == at);
  b.alarm();                              // the retry
  CHECK(b.vendor_ops["alarm_step"] == 1); // replayed, not called again
  CHECK(b.count_facts("alarm_step_done") == 1);
  CHECK(b.count_facts("alarm_ran") == 1);
  CHECK(b.store->get_schedule("steps")->next_ms == at + 60'000);
  CHECK(b.store->get_alarm("@schedule:steps")->attempts == 0);
  CHECK(journal_of(b, schedule_journal_key("steps", at)).empty());
}

TEST_CASE("schedules: set_schedule in a journaled call is an entry: the call's retry replays it, "
          "and the schedule keeps the times of the first run") {
  bench b;
  b.vendor_ok = true;
  b.type = type_builder<planner>("planner").method("plan", &planner::plan).build();
  b.instance = std::make_unique<planner>();
  b.runner.attach(*b.store, *b.instance, b.ctx);
  planner::fail_ = 1;
  auto r = b.call("plan", "k1");
  REQUIRE_FALSE(r.ok);
  CHECK(r.retryable);
  auto first = b.store->get_schedule("tick"); // committed at the await
  REQUIRE(first.is_ok());
  auto again = b.call("plan", "k1");
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK(b.vendor_ops["after_plan"] == 1); // the step replayed
  auto row = b.store->get_schedule("tick");
  REQUIRE(row.is_ok());
  CHECK(row->next_ms == first->next_ms);
  CHECK(row->spec == first->spec); // the anchor the first run chose
  CHECK(b.store->get_alarm("@schedule:tick")->due_ms == first->next_ms);
  CHECK(b.stats.journal_mismatches.value() == 0);
  auto steps = journal_of(b, "key:k1");
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].entries.find("\"set_schedule\",\"tick\"") != std::string::npos);
}

} // namespace schedule_journal_test
