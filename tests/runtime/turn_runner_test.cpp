// turn_runner_test.cpp: the turn runner (runtime/src/turn/turn_runner.hpp) and the handler context
// driven without an actor system: a real entity store in a temporary directory, a fake host
// that records answers and commits at awaits on the test thread, and a tool that fails on
// demand. Each case names the failure path it covers. Test thread only.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <deque>

#include "runner_bench.hpp"

using namespace factum;
using namespace factum::detail;
using namespace factum::test_runner;
using nlohmann::json;

TEST_CASE("turn runner: a keyed call records its key with its result, and a retry replays it") {
  bench b;
  auto r = b.call("two_steps", "k1");
  REQUIRE(r.ok);
  auto again = b.call("two_steps", "k1");
  CHECK(again.ok);
  CHECK(again.replayed);
  CHECK(again.body == r.body);
  CHECK(b.count_facts("step") == 2);
}

TEST_CASE("turn runner: a commit that fails at an await fails the turn retryably and leaves its "
          "key free (it used to store a terminal 409 after the await)") {
  bench b;
  b.fail_commits = true;
  auto r = b.call("two_steps", "k1");
  CHECK_FALSE(r.ok);
  CHECK(r.retryable);
  CHECK(r.http_status == 503);
  CHECK(r.code == "STORAGE_FULL");
  CHECK(b.host.commits_failed >= 1);
  // Nothing of the call is on disk: neither its facts nor a record of its key.
  b.fail_commits = false;
  CHECK(b.count_facts("step") == 0);
  CHECK(b.store->get_key("k1").error().code() == errc::not_found);
  // The retry runs the call, once.
  auto again = b.call("two_steps", "k1");
  REQUIRE(again.ok);
  CHECK_FALSE(again.replayed);
  CHECK(b.count_facts("step") == 2);
}

TEST_CASE("turn runner: a dead letter of an alarm can be retried: its handler runs again with the "
          "alarm's payload (it used to look the alarm up as a method, forever)") {
  bench b;
  awaiter::fail_alarms_ = 1;
  alarm_record a{"remind", factum::now_ms() - 10, R"({"who":"ops"})", 0, factum::now_ms()};
  REQUIRE(b.store->set_alarm(a).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.alarm(); // fails; alarm_max_retries 0: a dead letter
  auto dls = b.store->list_dead_letters(std::nullopt, 10);
  REQUIRE(dls.is_ok());
  REQUIRE(dls->size() == 1);
  auto id = dls->front().id;
  CHECK(dls->front().operation == "@alarm:remind");
  CHECK(b.count_facts("alarm_ran") == 0);
  // The operator retries it: a retry alarm due now, then the alarm turn runs it.
  auto op = b.call("@dead_letter", "", json{{"id", id}, {"action", "retry"}});
  REQUIRE_MESSAGE(op.ok, op.body);
  b.alarm();
  auto dl = b.store->get_dead_letter(id);
  REQUIRE(dl.is_ok());
  CHECK(dl->status == dl_status::resolved);
  REQUIRE(b.count_facts("alarm_ran") == 1);
  fact_filter f;
  f.type = "alarm_ran";
  auto ran = b.store->query(f);
  CHECK(json::parse(ran->front().data)["payload"]["who"] == "ops");
  CHECK(json::parse(ran->front().data)["name"] == "remind");
}

TEST_CASE("turn runner: while a dead letter owns a call's key, a retry of the call gets 409 with "
          "the dead letter's id and never runs the call again") {
  bench b;
  auto r = b.call("deliver", "order-1");
  REQUIRE_FALSE(r.ok);
  CHECK(b.vendor_calls == 1);
  auto id = r.json()["dead_letter_id"].get<std::string>();
  REQUIRE_FALSE(id.empty());
  auto dl = b.store->get_dead_letter(id);
  REQUIRE(dl.is_ok());
  CHECK(dl->idempotency_key == "order-1");
  // The client retries with the same key: the dead letter's retry owns the call.
  auto again = b.call("deliver", "order-1");
  CHECK(again.http_status == 409);
  CHECK(again.code == "IDEMPOTENCY_KEY_IN_USE");
  CHECK(again.json()["dead_letter_id"] == id);
  CHECK(b.vendor_calls == 1);
  // The dead letter's retry succeeds: the key is the retry's result, which a client replays.
  b.vendor_ok = true;
  auto op = b.call("@dead_letter", "", json{{"id", id}, {"action", "retry"}});
  REQUIRE_MESSAGE(op.ok, op.body);
  b.alarm();
  CHECK(b.vendor_calls == 2);
  auto done = b.call("deliver", "order-1");
  CHECK(done.ok);
  CHECK(done.replayed);
  CHECK(b.vendor_calls == 2);
  // A discarded dead letter frees its key: the client's call runs (no effect happened).
  b.vendor_ok = false;
  auto r2 = b.call("deliver", "order-2");
  auto id2 = r2.json()["dead_letter_id"].get<std::string>();
  REQUIRE(b.call("@dead_letter", "", json{{"id", id2}, {"action", "discard"}}).ok);
  b.vendor_ok = true;
  auto r3 = b.call("deliver", "order-2");
  CHECK(r3.ok);
  CHECK(b.vendor_calls == 4);
}

TEST_CASE("turn runner: an operator's breaker change whose commit fails is forgotten, not kept in "
          "memory") {
  bench b;
  b.vendor_ok = true;
  b.fail_commits = true;
  auto forced = b.call("@breaker", "", json{{"tool", "vendor"}, {"action", "force-open"}});
  CHECK(forced.ok); // the turn ran; its commit (below) fails
  CHECK(b.host.commits_failed == 1);
  b.fail_commits = false;
  // The store never saw the force-open: calls go through.
  auto r = b.call("deliver");
  CHECK(r.ok);
  CHECK(b.vendor_calls == 1);
}

TEST_CASE("turn runner: a resolved dead letter arms the purge of its retention by itself") {
  bench b;
  auto r = b.call("deliver");
  auto id = r.json()["dead_letter_id"].get<std::string>();
  CHECK(b.store->get_alarm(purge_alarm).error().code() == errc::not_found);
  REQUIRE(b.call("@dead_letter", "", json{{"id", id}, {"action", "acknowledge"}}).ok);
  auto dl = b.store->get_dead_letter(id);
  REQUIRE(dl->expires_at_ms);
  auto purge = b.store->get_alarm(purge_alarm);
  REQUIRE(purge.is_ok());
  CHECK(purge->due_ms == *dl->expires_at_ms);
}

TEST_CASE("turn runner: the automatic retries of a dead letter stop at its rule's cap (they went "
          "on every hour forever)") {
  bench b;
  auto r = b.call("deliver");
  auto id = r.json()["dead_letter_id"].get<std::string>();
  int retries = 0;
  for (int i = 0; i < 10; ++i) {
    auto dl = b.store->get_dead_letter(id);
    REQUIRE(dl.is_ok());
    if (dl->status != dl_status::scheduled)
      break;
    // Its retry alarm is due: run it now rather than in an hour.
    int64_t now = factum::now_ms();
    REQUIRE(b.store->set_alarm({"@dl:" + id, now - 1, "{}", 0, now}).is_ok());
    REQUIRE(b.store->commit().is_ok());
    b.alarm();
    ++retries;
  }
  auto dl = b.store->get_dead_letter(id);
  CHECK(retries == 3); // server_error: 3 automatic retries
  CHECK(dl->status == dl_status::pending);
  CHECK(dl->auto_retries == 3);
  CHECK_FALSE(dl->next_retry_ms);
  CHECK(b.store->get_alarm("@dl:" + id).error().code() == errc::not_found);
  CHECK(b.vendor_calls == 4);
  // An operator's retry starts them over.
  REQUIRE(b.call("@dead_letter", "", json{{"id", id}, {"action", "retry"}}).ok);
  b.alarm();
  CHECK(b.store->get_dead_letter(id)->auto_retries == 1);
  CHECK(b.store->get_dead_letter(id)->status == dl_status::scheduled);
}

TEST_CASE("turn runner: a dead letter's retry refused by an open breaker hands it to an operator "
          "even when the operator's retry was written in the turn's millisecond (it stayed "
          "scheduled without an alarm)") {
  bench b;
  auto r = b.call("deliver", "order-1");
  auto id = r.json()["dead_letter_id"].get<std::string>();
  REQUIRE(b.call("@breaker", "", json{{"tool", "vendor"}, {"action", "force-open"}}).ok);
  REQUIRE(b.call("@dead_letter", "", json{{"id", id}, {"action", "retry"}}).ok);
  // The operator's write carries the turn's own millisecond (here: one later than any turn's
  // start), as it does when the retry's alarm turn starts at once.
  auto dl = b.store->get_dead_letter(id);
  REQUIRE(dl.is_ok());
  dl->updated_at_ms = factum::now_ms() + 60'000;
  REQUIRE(b.store->put_dead_letter(*dl).is_ok());
  REQUIRE(b.store->commit().is_ok());
  b.alarm(); // CIRCUIT_OPEN at once: the tool never wrote the dead letter
  CHECK(b.vendor_calls == 1);
  auto after = b.store->get_dead_letter(id);
  REQUIRE(after.is_ok());
  CHECK(after->status == dl_status::pending);
  CHECK(after->error_code == "CIRCUIT_OPEN");
  CHECK(b.store->get_alarm("@dl:" + id).error().code() == errc::not_found);
}

TEST_CASE("turn runner: after a dead letter's retry fails, a client's retry of its call is told "
          "which dead letter owns the key (it was told the key was still in flight)") {
  bench b;
  auto r = b.call("deliver", "order-1");
  auto id = r.json()["dead_letter_id"].get<std::string>();
  REQUIRE(b.call("@dead_letter", "", json{{"id", id}, {"action", "retry"}}).ok);
  b.alarm(); // the vendor is down: the retry fails after its await, the tool reschedules it
  CHECK(b.vendor_calls == 2);
  CHECK(b.store->get_dead_letter(id)->status == dl_status::scheduled);
  CHECK(b.store->get_key("order-1").error().code() == errc::not_found);
  auto again = b.call("deliver", "order-1");
  CHECK(again.http_status == 409);
  CHECK(again.code == "IDEMPOTENCY_KEY_IN_USE");
  CHECK(again.json()["dead_letter_id"] == id);
  CHECK(b.vendor_calls == 2);
}

TEST_CASE("turn runner: a breaker's half-open trial left in flight by a dead process does not "
          "refuse calls until trial_timeout_ms (it refused them for a minute)") {
  bench b;
  int64_t now = factum::now_ms();
  resilience::breaker_config bc;
  bc.cooldown_ms = 1;
  bc.trial_timeout_ms = 60'000;
  resilience::circuit_breaker cb("vendor", bc, now - 10);
  for (int i = 0; i < 1000 && cb.state() != resilience::breaker_state::open; ++i)
    (void)cb.on_failure(now - 10, true);
  REQUIRE(cb.state() == resilience::breaker_state::open);
  REQUIRE(cb.allow(now).allowed); // the trial the dead process admitted, and never reported
  REQUIRE(cb.trials_in_flight() == 1);
  REQUIRE(b.store->put_breaker({"vendor", "HALF_OPEN", cb.to_json().dump(), now}).is_ok());
  REQUIRE(b.store->commit().is_ok());
  // A new activation over that file.
  b.runner.detach();
  b.runner.attach(*b.store, *b.instance, b.ctx);
  b.vendor_ok = true;
  auto r = b.call("deliver", "k1");
  CHECK_MESSAGE(r.ok, r.body);
  CHECK(b.vendor_calls == 1);
}

TEST_CASE("turn runner: a commit that fails at a tool call's await fails the call retryably "
          "without calling the vendor, and the call's breaker outlives the commit (it was freed "
          "under it)") {
  bench b;
  b.vendor_ok = true;
  b.fail_commits = true;
  auto r = b.call("deliver", "k1");
  CHECK_FALSE(r.ok);
  CHECK(r.retryable);
  CHECK(r.code == "STORAGE_FULL");
  CHECK(b.host.commits_failed >= 1);
  CHECK(b.vendor_calls == 0); // the call waits for the commit before it leaves, and it failed
  b.fail_commits = false;
  auto again = b.call("deliver", "k1");
  CHECK_MESSAGE(again.ok, again.body);
  CHECK(b.vendor_calls == 1);
}
