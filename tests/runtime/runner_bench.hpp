// runner_bench.hpp: what the turn runner's tests (turn_runner_test.cpp, journal_test.cpp,
// schedule_journal_test.cpp) share: an entity type whose handlers await timers and a tool, a fake
// host that records answers and commits at awaits on the test thread, a bench holding one
// activation (a real entity store in a temporary directory, the runner, the context, a tool that
// fails on demand), and a call's journal in its store. No actor system. Test thread only.
#pragma once

#include <doctest/doctest.h>

#include <sqlite3.h>

#include <deque>
#include <map>

#include "support/temp_dir.hpp"
#include "turn/entity_context.hpp"
#include "turn/turn_runner.hpp"

namespace factum::test_runner {

using namespace factum::detail;
using nlohmann::json;

/// A handler that appends a fact, awaits a timer, appends another.
class awaiter final : public entity {
 public:
  task<json> two_steps(context& ctx, json) {
    fact_draft d;
    d.type = "step";
    d.subtype = "before";
    ctx.append(d);
    co_await ctx.sleep(std::chrono::milliseconds(1));
    d.subtype = "after";
    auto f = ctx.append(d);
    co_return json{{"seq", f.seq}};
  }
  /// Delivers through the tool "vendor" (the runtime's resilient call).
  task<json> deliver(context& ctx, json) {
    tool_request req;
    req.tool = "vendor";
    req.operation = "deliver";
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (!r.ok) {
      call_error e(r.category, r.error_code.empty() ? "DELIVERY_FAILED" : r.error_code,
                   "delivery failed");
      if (!r.dead_letter_id.empty())
        e.details["dead_letter_id"] = r.dead_letter_id;
      throw e;
    }
    co_return json{{"delivered", true}};
  }
  /// Three tool steps with facts between them (j.a, j.b, j.c, j.d), the clock and a random
  /// number taken before the first. args: "fail_after" (fail retryably after that step while
  /// fail_steps_ > 0), "op2" (step 2's operation, "s2" by default).
  task<json> three_steps(context& ctx, json args) {
    json out = {{"now", ctx.now_ms()}, {"random", ctx.random()}};
    fact_draft d;
    d.type = "j.a";
    d.data = out;
    ctx.append(d);
    int fail_after = args.value("fail_after", 0);
    for (int i = 1; i <= 3; ++i) {
      tool_request req;
      req.tool = "vendor";
      req.operation = i == 2 ? args.value("op2", std::string("s2")) : "s" + std::to_string(i);
      req.payload = {{"step", i}};
      auto op = ctx.call_tool(std::move(req));
      tool_reply r = co_await op;
      if (!r.ok) {
        call_error e(r.category, "STEP_FAILED", "step failed");
        if (!r.dead_letter_id.empty())
          e.details["dead_letter_id"] = r.dead_letter_id;
        throw e;
      }
      out["step" + std::to_string(i)] = r.body;
      if (i == fail_after && fail_steps_ > 0) {
        --fail_steps_;
        throw transient_error("ASKED_TO_FAIL", "asked to fail after step " + std::to_string(i));
      }
      d.type = std::string("j.") + static_cast<char>('a' + i);
      d.data = {{"after_step", i}};
      ctx.append(d);
    }
    co_return out;
  }
  static inline int fail_steps_ = 0;

  task<void> on_alarm(context& ctx, const alarm_record& a) override {
    if (a.name == "steps") { // a journaled alarm: a tool step, then maybe a failure
      tool_request req;
      req.tool = "vendor";
      req.operation = "alarm_step";
      auto op = ctx.call_tool(std::move(req));
      tool_reply r = co_await op;
      fact_draft d;
      d.type = "alarm_step_done";
      d.data = {{"ok", r.ok}};
      ctx.append(d);
    }
    if (a.name == "pause") { // a tool step, maybe a failure, a timer, then the alarm read again
      tool_request req;
      req.tool = "vendor";
      req.operation = "pause_step";
      auto op = ctx.call_tool(std::move(req));
      tool_reply r = co_await op;
      if (fail_alarms_ > 0) {
        --fail_alarms_;
        throw transient_error("ALARM_FAILED", "asked to fail after the step");
      }
      auto pause = ctx.sleep(std::chrono::milliseconds(1));
      co_await pause;
      fact_draft d;
      d.type = "pause_done";
      d.data = {{"ok", r.ok}, {"alarm", a.name}}; // read after the awaits
      ctx.append(d);
      co_return;
    }
    if (fail_alarms_ > 0) {
      --fail_alarms_;
      throw transient_error("ALARM_FAILED", "asked to fail");
    }
    fact_draft d;
    d.type = "alarm_ran";
    d.data = {{"name", a.name}, {"payload", json::parse(a.payload, nullptr, false)}};
    ctx.append(d);
    co_return;
  }
  static inline int fail_alarms_ = 0;
};

/// The host: answers recorded; awaits resumed by the test's drive loop.
struct fake_host final : turn_host, context_port {
  entity_store* store = nullptr;
  turn_runner* runner = nullptr;
  std::vector<call_reply> answers;
  std::deque<uint64_t> wakes;
  uint64_t tokens = 1;
  int commits_failed = 0;

  void turn_answered(queued&, call_reply r) override { answers.push_back(std::move(r)); }
  void hold_await(uint64_t token, std::function<void(bool, std::function<void()>)> start) override {
    if (store->dirty())
      commit();
    auto* t = runner->current();
    start(!(t && t->lost_at_await), [this, token] { wakes.push_back(token); });
  }
  uint64_t next_token() override { return tokens++; }
  void route(const entity_key&, call_request, std::chrono::milliseconds,
             std::function<void(call_reply)> done) override {
    done(call_reply::failure(error_category::client, "NO_ROUTE", "no other entities here", 400));
  }
  void start_timer(std::chrono::milliseconds, std::function<void(bool)> done) override {
    done(true); // at once: the wake is queued, resumed by drive()
  }
  /// Commits the batch as the actor's fast path would; a failure is what the actor reports.
  void commit() {
    if (auto st = store->commit(); !st) {
      ++commits_failed;
      runner->commit_failed();
      if (auto* t = runner->current(); t && t->suspended)
        runner->lost_at_await(st);
    }
  }
  /// Resumes suspended turns until none waits.
  void drive() {
    while (!wakes.empty()) {
      auto tok = wakes.front();
      wakes.pop_front();
      auto* t = runner->current();
      REQUIRE(t);
      REQUIRE(t->token == tok);
      t->woken = true;
      runner->resume();
    }
  }
};

/// One entity's store, runner and context, as an activation has them.
struct bench {
  test::temp_dir dir;
  runtime_config cfg;
  metrics::registry metric_registry;
  counters stats{metric_registry};
  resilience::classifier classifier;
  resilience::dead_letter_rules dl_rules;
  entity_key key{"acme", "awaiter", "a1"};
  entity_type type;
  std::unique_ptr<entity_store> store;
  std::unique_ptr<entity> instance = std::make_unique<awaiter>();
  fake_host host;
  turn_runner runner{turn_runner::env{&cfg, &stats, &type, &key}, host};
  entity_context ctx{context_env{&cfg, &stats, &classifier, &dl_rules, &key}, runner, host};
  /// Fails every COMMIT while set (SQLITE_FULL: a disk that filled up).
  bool fail_commits = false;
  int vendor_calls = 0;
  bool vendor_ok = false;
  std::map<std::string, int> vendor_ops; ///< calls per operation
  std::string fail_op;                   ///< the vendor fails this operation (503) when set

  bench() {
    type = type_builder<awaiter>("awaiter")
             .method("two_steps", &awaiter::two_steps)
             .method("deliver", &awaiter::deliver)
             .method("three_steps", &awaiter::three_steps)
             .build();
    cfg.data_dir = dir.path();
    cfg.alarm_max_retries = 0; // the first failure of an alarm dead-letters it
    cfg.tools["vendor"] = [this](const tool_request& req, std::function<void(tool_reply)> done) {
      ++vendor_calls;
      ++vendor_ops[req.operation];
      bool ok = vendor_ok && req.operation != fail_op;
      tool_reply r;
      r.ok = ok;
      r.http_status = ok ? 200 : 503;
      r.body = {{"op", req.operation}, {"call", vendor_calls}};
      if (!ok)
        r.error_message = "vendor down";
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"max_attempts", 1}};
    cfg.tool_policies["vendor"] = p;
    store_options o;
    o.data_dir = dir.path();
    o.fault = [this](uint64_t, std::string_view sql) {
      return fail_commits && sql.rfind("COMMIT", 0) == 0 ? SQLITE_FULL : SQLITE_OK;
    };
    auto s = entity_store::open(o, key);
    REQUIRE(s.is_ok());
    store = std::move(s.value());
    host.store = store.get();
    host.runner = &runner;
    ctx.attach(store.get());
    runner.attach(*store, *instance, ctx);
  }

  /// Runs one call (key optional) to its end, committing as the actor would; its answer.
  call_reply call(const std::string& method, const std::string& key_ = "", json args = {}) {
    queued q;
    q.req.method = method;
    q.req.args = args.is_null() ? "{}" : args.dump();
    q.req.idempotency_key = key_;
    q.req.fingerprint = key_.empty() ? "" : "fp-" + method;
    REQUIRE_FALSE(runner.accept(q.req, runner.is_shared(q.req)));
    return run(std::move(q));
  }
  call_reply run(queued q) {
    auto before = host.answers.size();
    runner.run(std::move(q));
    host.drive();
    REQUIRE_FALSE(runner.busy());
    if (store->dirty())
      host.commit();
    else if (store->in_batch())
      (void)store->commit();
    REQUIRE(host.answers.size() == before + 1);
    return host.answers.back();
  }
  /// Runs the alarm turn (whatever is due now).
  void alarm() {
    queued q;
    q.kind = turn_kind::alarm;
    run(std::move(q));
  }
  int64_t count_facts(const std::string& type_, const std::string& subtype = "") {
    fact_filter f;
    f.type = type_;
    if (!subtype.empty())
      f.subtype = subtype;
    f.limit = 1000;
    auto r = store->query(f);
    REQUIRE(r.is_ok());
    return static_cast<int64_t>(r->size());
  }
};

/// The journal of the call `key` in the bench's store, which must read.
inline std::vector<journal_step> journal_of(bench& b, const std::string& key) {
  auto r = b.store->journal(key);
  REQUIRE(r.is_ok());
  return *r;
}

} // namespace factum::test_runner
