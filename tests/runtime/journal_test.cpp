// journal_test.cpp: durable execution. The turn journal alone (runtime/src/turn/journal.hpp); the
// turn runner replaying journaled calls, alarms and dead-letter retries over a real store
// (runner_bench.hpp); and a runtime in a child process SIGKILLed while a handler awaits its
// second step, whose call a retry then resumes in a new runtime over the same files. Each case
// names what it proves. Test thread only (and the child).
#include <doctest/doctest.h>

#include <unistd.h>

#include "factum/runtime/runtime.hpp"
#include "runner_bench.hpp"
#include "support/child_process.hpp"
#include "turn/journal.hpp"

using namespace factum;
using namespace factum::detail;
using namespace factum::test_runner;
using nlohmann::json;

namespace journal_test {

namespace {

/// Records entries and steps of a first run as the context would (rows kept as if written).
struct first_run {
  turn_journal j;
  std::vector<journal_step> rows;

  int64_t step(std::string_view kind, std::string_view what, std::string_view fp,
               std::optional<json> result) {
    auto s = j.begin_step(kind, what, fp, 1000);
    REQUIRE_FALSE(s.result);
    s.row.result = result ? std::optional<std::string>(result->dump()) : std::nullopt;
    rows.push_back(s.row);
    j.end_step();
    return s.step;
  }
};

} // namespace

// -- the turn journal
// ------------------------------------------------------------------------------

TEST_CASE("journal: a replay returns the recorded entries and step results in order, then runs "
          "live from the first step that was not completed") {
  first_run f;
  f.j.start("key:k", {});
  CHECK_FALSE(f.j.replay("now", ""));
  f.j.record("now", "", 1234);
  f.j.record("append", "a", 1);
  f.step("tool", "v/s1", "fp1", json{{"ok", true}});
  f.j.record("append", "b", 2);
  f.step("tool", "v/s2", "fp2", std::nullopt); // in flight at the crash
  REQUIRE(f.rows.size() == 2);
  CHECK(f.rows[0].entries == R"([["now","",1234],["append","a",1]])");
  CHECK(f.rows[1].entries == R"([["append","b",2]])");

  turn_journal again;
  again.start("key:k", f.rows);
  CHECK(again.replaying());
  CHECK(again.replay("now", "") == json(1234));
  CHECK(again.replay("append", "a") == json(1));
  auto s1 = again.begin_step("tool", "v/s1", "fp1", 2000);
  REQUIRE(s1.result);
  CHECK((*s1.result)["ok"] == true);
  CHECK(again.replay("append", "b") == json(2));
  auto s2 = again.begin_step("tool", "v/s2", "fp2", 2000);
  CHECK_FALSE(s2.result); // runs again
  CHECK(s2.row.runs == 2);
  CHECK(s2.row.step == 2);
  CHECK(s2.row.entries == R"([["append","b",2]])");
  again.end_step();
  CHECK_FALSE(again.replaying());
  CHECK_FALSE(again.replay("append", "c")); // live now
  again.record("append", "c", 3);
  auto s3 = again.begin_step("tool", "v/s3", "fp3", 3000);
  CHECK(s3.step == 3);
  CHECK(s3.row.runs == 1);
  CHECK(s3.row.entries == R"([["append","c",3]])");
}

TEST_CASE("journal: a replay that does something else than its journal is JOURNAL_MISMATCH, "
          "whatever differs (the entry, the step, the step's request)") {
  first_run f;
  f.j.start("key:k", {});
  f.j.record("append", "a", 1);
  f.step("tool", "v/s1", "fp1", json{{"ok", true}});
  auto expect_mismatch = [&](auto&& fn) {
    turn_journal j;
    j.start("key:k", f.rows);
    try {
      fn(j);
      FAIL("no mismatch");
    } catch (const call_error& e) {
      CHECK(e.code() == "JOURNAL_MISMATCH");
      CHECK_FALSE(e.retryable());
      CHECK(e.http_status() == 500);
    }
  };
  expect_mismatch([](turn_journal& j) { j.replay("append", "other"); });
  expect_mismatch([](turn_journal& j) { j.replay("sql", "a"); });
  expect_mismatch([](turn_journal& j) { j.begin_step("tool", "v/s1", "fp1", 1); }); // entry skipped
  expect_mismatch([](turn_journal& j) {
    j.replay("append", "a");
    j.begin_step("tool", "v/other", "fp1", 1);
  });
  expect_mismatch([](turn_journal& j) {
    j.replay("append", "a");
    j.begin_step("tool", "v/s1", "another request", 1);
  });
  expect_mismatch([](turn_journal& j) {
    j.replay("append", "a");
    j.replay("append", "b"); // the journal has the step here
  });
}

TEST_CASE("journal: a sleep that runs again keeps its first start, so that it ends when the first "
          "run said, and another step that runs again starts now") {
  first_run f;
  f.j.start("alarm:x", {});
  f.step("sleep", "500ms", "500ms", std::nullopt);
  turn_journal j;
  j.start("alarm:x", f.rows);
  auto s = j.begin_step("sleep", "500ms", "500ms", 9000);
  CHECK(s.row.started_at_ms == 1000);
  first_run g;
  g.j.start("alarm:y", {});
  g.step("tool", "v/s", "fp", std::nullopt);
  turn_journal k;
  k.start("alarm:y", g.rows);
  CHECK(k.begin_step("tool", "v/s", "fp", 9000).row.started_at_ms == 9000);
}

// -- the turn runner
// ---------------------------------------------------------------------------------

TEST_CASE("journal: a keyed call that failed retryably after two steps is resumed by its retry: "
          "no step is called again, no fact is written again, and the retry sees the clock and "
          "random number of the first run") {
  bench b;
  b.vendor_ok = true;
  awaiter::fail_steps_ = 1;
  auto r = b.call("three_steps", "k1", {{"fail_after", 2}});
  REQUIRE_FALSE(r.ok);
  CHECK(r.retryable);
  CHECK(b.vendor_ops["s1"] == 1);
  CHECK(b.vendor_ops["s2"] == 1);
  // The key waits, pending, with its journal; the first run's facts before step 2 are on disk.
  CHECK(b.store->get_key("k1")->status == key_status::pending);
  CHECK(journal_of(b, "key:k1").size() == 2);
  fact_filter only_a;
  only_a.type = "j.a";
  auto first_a = b.store->query(only_a);
  REQUIRE(first_a->size() == 1);

  auto again = b.call("three_steps", "k1", {{"fail_after", 2}});
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK_FALSE(again.replayed);
  CHECK(b.vendor_ops["s1"] == 1);
  CHECK(b.vendor_ops["s2"] == 1);
  CHECK(b.vendor_ops["s3"] == 1);
  for (auto t : {"j.a", "j.b", "j.c", "j.d"})
    CHECK_MESSAGE(b.count_facts(t) == 1, std::string(t));
  auto out = again.json();
  auto data = json::parse((*first_a)[0].data);
  CHECK(out["now"] == data["now"]);
  CHECK(out["random"] == data["random"]);
  CHECK(out["step1"]["call"] == 1); // step 1's reply as the vendor first gave it
  auto steps = journal_of(b, "key:k1");
  REQUIRE(steps.size() == 3);
  for (auto& s : steps) {
    CHECK(s.runs == 1);
    CHECK(s.result);
  }
  CHECK(b.stats.journal_resumes.value() == 1);
  CHECK(b.stats.journal_steps_replayed.value() == 2);
  // Completed: the key answers its result, and the journal stays as long as the key.
  auto replay = b.call("three_steps", "k1", {{"fail_after", 2}});
  CHECK(replay.replayed);
  CHECK(replay.body == again.body);
  CHECK(b.vendor_calls == 3);
  REQUIRE(b.store->purge_expired_keys(now_ms() + 400LL * 86'400'000).is_ok());
  REQUIRE(b.store->commit().is_ok());
  CHECK(b.store->get_key("k1").error().code() == errc::not_found);
  CHECK(journal_of(b, "key:k1").empty());
}

TEST_CASE("journal: a replay that awaits another step than its journal fails JOURNAL_MISMATCH and "
          "a dead letter owns the call, and nothing it did is written") {
  bench b;
  b.vendor_ok = true;
  awaiter::fail_steps_ = 1;
  REQUIRE_FALSE(b.call("three_steps", "k2", {{"fail_after", 2}}).ok);
  auto facts_before = b.store->last_seq();
  auto r = b.call("three_steps", "k2", {{"fail_after", 2}, {"op2", "changed"}});
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == "JOURNAL_MISMATCH");
  CHECK(r.http_status == 500);
  CHECK_FALSE(r.retryable);
  auto dl_id = r.json().value("dead_letter_id", "");
  REQUIRE_FALSE(dl_id.empty());
  CHECK(b.vendor_ops["changed"] == 0);
  auto dl = b.store->get_dead_letter(dl_id);
  REQUIRE(dl.is_ok());
  CHECK(dl->status == dl_status::pending);
  CHECK(dl->reason == "journal_mismatch");
  CHECK(dl->idempotency_key == "k2");
  CHECK(b.count_facts("j.b") == 1); // the first run's, not written again
  CHECK(b.count_facts("j.c") == 0);
  CHECK(b.store->last_seq() == facts_before + 2); // its error fact and the dead letter's fact
  CHECK(b.stats.journal_mismatches.value() == 1);
  // The dead letter holds the key: a retry is told so.
  auto held = b.call("three_steps", "k2", {{"fail_after", 2}});
  CHECK(held.code == "IDEMPOTENCY_KEY_IN_USE");
  CHECK(held.json().value("dead_letter_id", "") == dl_id);
}

TEST_CASE("journal: a replay that appends a fact with other data than its first run did fails "
          "JOURNAL_MISMATCH") {
  bench b;
  b.vendor_ok = true;
  awaiter::fail_steps_ = 1;
  REQUIRE_FALSE(b.call("three_steps", "k4", {{"fail_after", 1}}).ok);
  // Fact j.a holds the clock and random number: a handler that took them from outside the
  // context would append other data on its replay. Edit the recorded entries to make the
  // replay's ctx.random() differ, as such a handler would.
  auto steps = journal_of(b, "key:k4");
  REQUIRE(steps.size() == 1);
  auto entries = json::parse(steps[0].entries);
  REQUIRE(entries[1][0] == "random");
  entries[1][2] = entries[1][2].get<uint64_t>() + 1;
  steps[0].entries = entries.dump();
  REQUIRE(b.store->put_journal_step(steps[0]).is_ok());
  REQUIRE(b.store->commit().is_ok());
  auto r = b.call("three_steps", "k4", {{"fail_after", 1}});
  CHECK(r.code == "JOURNAL_MISMATCH");
  CHECK(b.count_facts("j.a") == 1);
}

TEST_CASE("journal: a dead letter's retry replays the call up to the step that ended in it, runs "
          "that step again and goes on live") {
  bench b;
  b.vendor_ok = true;
  b.fail_op = "s2";
  auto r = b.call("three_steps", "k3");
  REQUIRE_FALSE(r.ok);
  auto dl_id = r.json().value("dead_letter_id", "");
  REQUIRE_FALSE(dl_id.empty());
  CHECK(b.vendor_ops["s1"] == 1);
  b.fail_op.clear();
  auto moved = b.call("@dead_letter", "", {{"id", dl_id}, {"action", "retry"}});
  REQUIRE_MESSAGE(moved.ok, moved.body);
  b.alarm(); // the retry is due at once
  auto dl = b.store->get_dead_letter(dl_id);
  REQUIRE(dl.is_ok());
  CHECK(dl->status == dl_status::resolved);
  CHECK(b.vendor_ops["s1"] == 1); // replayed
  CHECK(b.vendor_ops["s2"] >= 2);
  CHECK(b.vendor_ops["s3"] == 1);
  for (auto t : {"j.a", "j.b", "j.c", "j.d"})
    CHECK_MESSAGE(b.count_facts(t) == 1, std::string(t));
  auto steps = journal_of(b, "key:k3");
  REQUIRE(steps.size() == 3);
  CHECK(steps[1].runs == 2);
  auto replay = b.call("three_steps", "k3");
  CHECK(replay.replayed);
}

TEST_CASE("journal: a key left pending by a dead letter's retry that was interrupted stays the "
          "dead letter's: a client's retry is told so and does not resume the call") {
  bench b;
  b.vendor_ok = true;
  b.fail_op = "s2";
  auto r = b.call("three_steps", "k5");
  auto dl_id = r.json().value("dead_letter_id", "");
  REQUIRE_FALSE(dl_id.empty());
  // What a dead letter's retry killed at its await leaves: the key pending, with the journal.
  REQUIRE(b.store->begin_key("k5", "fp-three_steps", 60'000, now_ms()).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.fail_op.clear();
  auto held = b.call("three_steps", "k5");
  CHECK(held.code == "IDEMPOTENCY_KEY_IN_USE");
  CHECK(held.json().value("dead_letter_id", "") == dl_id);
  CHECK(b.vendor_ops["s2"] == 1);
}

TEST_CASE("journal: an alarm whose handler failed after its step replays the step on its retry, "
          "and the alarm's journal goes once it completes") {
  bench b;
  b.cfg.alarm_max_retries = 3;
  b.cfg.alarm_retry_base = std::chrono::milliseconds(0);
  b.vendor_ok = true;
  awaiter::fail_alarms_ = 1;
  REQUIRE(b.store->set_alarm({"steps", now_ms() - 1, "{}", 0, now_ms()}).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.alarm();
  CHECK(b.vendor_ops["alarm_step"] == 1);
  auto runs = alarm_journals(*b.store, "steps"); // the run's journal, under its run id
  REQUIRE(runs.size() == 1);
  CHECK(is_alarm_journal(runs[0], "steps"));
  CHECK(journal_of(b, runs[0]).size() == 1);
  b.alarm(); // the retry
  CHECK(b.vendor_ops["alarm_step"] == 1);
  CHECK(b.count_facts("alarm_step_done") == 1);
  CHECK(b.store->get_alarm("steps").error().code() == errc::not_found);
  CHECK(alarm_journals(*b.store, "steps").empty());
}

TEST_CASE("journal: a dead letter's retry of an alarm runs its handler with the alarm kept for "
          "the whole turn (the handler read it after its await from a local that had gone)") {
  bench b;
  b.cfg.alarm_max_retries = 0;
  b.vendor_ok = true;
  awaiter::fail_alarms_ = 1;
  REQUIRE(b.store->set_alarm({"pause", now_ms() - 1, "{}", 0, now_ms()}).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.alarm(); // the step, then the handler fails: a dead letter
  auto dls = b.store->list_dead_letters(std::nullopt, 10);
  REQUIRE(dls->size() == 1);
  auto moved = b.call("@dead_letter", "", {{"id", (*dls)[0].id}, {"action", "retry"}});
  REQUIRE_MESSAGE(moved.ok, moved.body);
  b.alarm(); // the retry: the step replays, the sleep suspends, then the alarm is read
  CHECK(b.vendor_ops["pause_step"] == 1);
  fact_filter f;
  f.type = "pause_done";
  auto done = b.store->query(f);
  REQUIRE(done->size() == 1);
  CHECK(json::parse((*done)[0].data)["alarm"] == "pause");
  CHECK(b.store->get_dead_letter((*dls)[0].id)->status == dl_status::resolved);
}

// -- a process killed mid-await ------------------------------------------------------------------

namespace {

/// Appends, awaits "first", appends, awaits "second", appends.
class two_tools final : public entity {
 public:
  task<json> run(context& ctx, json) {
    json out;
    for (const char* op : {"first", "second"}) {
      fact_draft d;
      d.type = std::string("before.") + op;
      ctx.append(d);
      tool_request req;
      req.tool = "vendor";
      req.operation = op;
      auto call = ctx.call_tool(std::move(req));
      tool_reply r = co_await call;
      if (!r.ok)
        throw transient_error("VENDOR", r.error_message);
      out[op] = r.body;
    }
    fact_draft d;
    d.type = "done";
    ctx.append(d);
    co_return out;
  }
};

runtime_config kill_config(const std::filesystem::path& dir) {
  runtime_config c;
  c.data_dir = dir;
  c.types.add(type_builder<two_tools>("two_tools").method("run", &two_tools::run).build());
  return c;
}

} // namespace

TEST_CASE("journal: a SIGKILL while a handler awaits its second step loses nothing: the retry in a "
          "new process resumes at that step, calls the first step's vendor no more and writes no "
          "fact twice") {
  test::temp_dir tmp;
  auto key = *entity_key::make("acme", "two_tools", "t1");
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    auto c = kill_config(tmp.path());
    c.tools["vendor"] = [fd = report](const tool_request& req,
                                      std::function<void(tool_reply)> done) {
      if (req.operation == "second") {
        (void)!write(fd, "2", 1); // reached the second step: never answers
        return;
      }
      tool_reply r;
      r.ok = true;
      r.http_status = 200;
      r.body = {{"from", "child"}};
      done(std::move(r));
    };
    auto rt = runtime::start(std::move(c));
    if (!rt)
      _exit(2);
    call_options o;
    o.idempotency_key = "kill-1";
    (void)rt.value()->call_sync(key, "run", "{}", o);
    _exit(3); // not reached: the call never ends
  }));
  char c = 0;
  REQUIRE(read(child.reports(), &c, 1) == 1);
  child.kill_now();

  std::map<std::string, int> calls;
  auto cfg = kill_config(tmp.path());
  cfg.tools["vendor"] = [&calls](const tool_request& req, std::function<void(tool_reply)> done) {
    ++calls[req.operation];
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    r.body = {{"from", "parent"}};
    done(std::move(r));
  };
  {
    auto rt = runtime::start(std::move(cfg));
    REQUIRE_MESSAGE(rt.is_ok(), rt.error().to_string());
    call_options o;
    o.idempotency_key = "kill-1";
    auto r = rt.value()->call_sync(key, "run", "{}", o);
    REQUIRE_MESSAGE(r.ok, r.body);
    CHECK(r.json()["first"]["from"] == "child"); // the first step's recorded reply
    CHECK(r.json()["second"]["from"] == "parent");
    CHECK(calls["first"] == 0);
    CHECK(calls["second"] == 1);
    rt.value()->stop();
  }
  store_options so;
  so.data_dir = tmp.path();
  so.read_only = true;
  auto s = entity_store::open(so, key);
  REQUIRE(s.is_ok());
  for (auto t : {"before.first", "before.second", "done"}) {
    fact_filter f;
    f.type = t;
    CHECK_MESSAGE((*s)->query(f)->size() == 1, std::string(t));
  }
  auto steps = (*s)->journal("key:kill-1");
  REQUIRE(steps->size() == 2);
  CHECK((*steps)[0].runs == 1);
  CHECK((*steps)[1].runs == 2); // in flight at the kill, run again
  CHECK((*steps)[1].result);
  CHECK((*s)->get_key("kill-1")->status == key_status::completed);
}

} // namespace journal_test
