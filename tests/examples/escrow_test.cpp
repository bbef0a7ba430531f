// escrow_test.cpp: examples/escrow's `escrow` in the in-process runtime with a scripted payout
// vendor: the state machine, invalid transitions and unauthorized actors as terminal errors,
// de-duplicated commands and events, the release saga's compensation and an operator's retry,
// poison events ending as dead letters, and the state rebuilt from the facts alone (after a
// restart and by an independent fold).
#include "support.hpp"

#include "factum/examples/escrow.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
using test::example_fixture;
using test::scripted_vendor;

namespace {

tool_policy payout_policy() {
  tool_policy p;
  p.retry = {{"base_delay_ms", 10}, {"max_delay_ms", 40}, {"max_attempts", 3}, {"jitter", "equal"}};
  p.breaker = {{"count_window", {{"size", 50}, {"failure_threshold", 50}, {"min_calls", 50}}}};
  return p;
}

json opening() {
  return {{"buyer", "bob"},
          {"seller", "sue"},
          {"arbiter", "ann"},
          {"amount", "250.00"},
          {"currency", "USD"}};
}

struct escrow_fixture : example_fixture {
  scripted_vendor payout{"0"};
  escrow_fixture() {
    tools["payout"] = payout.fn();
    policies["payout"] = payout_policy();
  }
  json cmd(const std::string& id, const std::string& m, json a, const std::string& key) {
    return ok("escrow", id, m, a, key);
  }
  /// The escrow's state folded from its facts read back (independently of the entity).
  examples::escrow::state fold(const std::string& id) {
    std::vector<fact> log;
    for (auto& j : facts("escrow", id)) {
      fact f;
      f.seq = j["seq"];
      f.type = j["type"];
      f.data = j["data"].dump();
      log.push_back(std::move(f));
    }
    return examples::escrow::replay(log);
  }
};

} // namespace

TEST_CASE("escrow: the happy path, and the state is the fold of the facts (also after restart)") {
  escrow_fixture f;
  f.start();
  CHECK(f.cmd("e1", "open", opening(), "e1-open")["status"] == "AWAIT_FUNDS");
  CHECK(f.cmd("e1", "fund", {{"actor", "bob"}, {"amount", "250"}}, "e1-fund")["status"] ==
        "FUNDED");
  CHECK(f.cmd("e1", "deliver", {{"actor", "sue"}}, "e1-deliver")["status"] == "DELIVERED");
  auto rel = f.cmd("e1", "release", {{"actor", "bob"}}, "e1-release");
  CHECK(rel["status"] == "RELEASED");
  CHECK(rel["payout_ref"] == "v-1");
  REQUIRE(f.payout.calls() == 1);
  CHECK(f.payout.payloads()[0]["to"] == "sue");
  CHECK(f.payout.payloads()[0]["amount"] == "250.00");

  auto before = f.ok("escrow", "e1", "state", json::object());
  CHECK(f.fold("e1").to_json() == before);
  f.restart(); // a new activation replays the log
  auto after = f.ok("escrow", "e1", "state", json::object());
  CHECK(after == before);
  auto rb = f.ok("escrow", "e1", "rebuild", json::object());
  CHECK(rb["matches_memory"] == true);
  CHECK(rb["state"] == before);
  CHECK(after["applied"] == 5);
}

TEST_CASE("escrow: invalid transitions and unauthorized actors are terminal, never retried") {
  escrow_fixture f;
  f.start();
  f.cmd("e2", "open", opening(), "e2-open");
  auto early = f.call("escrow", "e2", "release", {{"actor", "bob"}}, "e2-rel");
  CHECK(early.http_status == 422);
  CHECK(early.code == "INVALID_TRANSITION");
  CHECK(early.category == "client");
  CHECK_FALSE(early.retryable);
  // the same key replays the stored failure; nothing runs again
  auto again = f.call("escrow", "e2", "release", {{"actor", "bob"}}, "e2-rel");
  CHECK(again.replayed);
  CHECK(again.code == "INVALID_TRANSITION");
  auto wrong = f.call("escrow", "e2", "fund", {{"actor", "sue"}, {"amount", "250"}}, "e2-f");
  CHECK(wrong.http_status == 403);
  CHECK(wrong.code == "ACTOR_NOT_ALLOWED");
  CHECK(wrong.category == "authorization");
  auto short_pay = f.call("escrow", "e2", "fund", {{"actor", "bob"}, {"amount", "249.99"}}, "e2-s");
  CHECK(short_pay.code == "AMOUNT_MISMATCH");
  auto missing = f.call("escrow", "nope", "fund", {{"actor", "bob"}, {"amount", "1"}}, "n-1");
  CHECK(missing.http_status == 404);
  CHECK(f.payout.calls() == 0);
  CHECK(f.ok("escrow", "e2", "state", json::object())["status"] == "AWAIT_FUNDS");
  // every refusal is an error fact of the command
  CHECK(f.facts("escrow", "e2", {{"type", "error"}}).size() == 3);
}

TEST_CASE("escrow: commands and events are de-duplicated") {
  escrow_fixture f;
  f.start();
  f.cmd("e3", "open", opening(), "e3-open");
  auto a = f.call("escrow", "e3", "open", opening(), "e3-open");
  CHECK(a.replayed);
  REQUIRE(a.ok);
  // the same event delivered twice (a webhook retried by the provider) funds once
  json ev = {
    {"event_id", "evt-1"}, {"type", "PaymentSucceeded"}, {"payload", {{"amount", "250.00"}}}};
  CHECK(f.cmd("e3", "ingest", ev, "deliv-1")["accepted"] == true);
  CHECK(f.cmd("e3", "ingest", ev, "deliv-2")["duplicate"] == true);
  CHECK(test::eventually(
    [&] { return f.ok("escrow", "e3", "state", json::object())["status"] == "FUNDED"; }));
  CHECK(f.facts("escrow", "e3", {{"type", "escrow.funded"}}).size() == 1);
  CHECK(f.facts("escrow", "e3", {{"type", "escrow.opened"}}).size() == 1);
}

TEST_CASE("escrow: a failed payout is compensated, dead-lettered, and an operator retry releases") {
  escrow_fixture f;
  f.start();
  f.cmd("e4", "open", opening(), "e4-open");
  f.cmd("e4", "fund", {{"actor", "bob"}, {"amount", "250.00"}}, "e4-fund");
  f.cmd("e4", "deliver", {{"actor", "sue"}}, "e4-deliver");
  f.payout.always({503});
  auto r = f.call("escrow", "e4", "release", {{"actor", "bob"}}, "e4-release");
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == "PAYOUT_FAILED");
  auto p = r.json();
  CHECK(p["compensated"] == true);
  CHECK(p["escrow_status"] == "DELIVERED");
  REQUIRE(p.contains("dead_letter_id"));
  CHECK(f.payout.calls() == 3);
  // the state changed, the payout failed, the compensation restored it: all in the log
  auto log = f.facts("escrow", "e4");
  std::vector<std::string> kinds;
  for (auto& x : log)
    if (x["type"].get<std::string>().rfind("escrow.", 0) == 0)
      kinds.push_back(x["type"]);
  CHECK(kinds == std::vector<std::string>{"escrow.opened", "escrow.funded", "escrow.delivered",
                                          "escrow.released", "escrow.payout_compensated"});
  CHECK(f.ok("escrow", "e4", "state", json::object())["status"] == "DELIVERED");
  CHECK(f.fold("e4").status == "DELIVERED");

  // the payout provider recovers; an operator retries the dead letter: the release runs again
  f.payout.always({200});
  auto id = p["dead_letter_id"];
  auto moved = f.ok("escrow", "e4", "@dead_letter", {{"id", id}, {"action", "retry"}});
  CHECK(moved["status"] == "scheduled");
  CHECK(
    test::eventually([&] { return f.dead_letters("escrow", "e4")[0]["status"] == "resolved"; }));
  auto st = f.ok("escrow", "e4", "state", json::object());
  CHECK(st["status"] == "RELEASED");
  CHECK(st["compensations"] == 1);
  CHECK(f.payout.calls() == 4);
  // the client's retry with its key now gets the release, without a second payout
  auto replay = f.call("escrow", "e4", "release", {{"actor", "bob"}}, "e4-release");
  REQUIRE_MESSAGE(replay.ok, replay.body);
  CHECK(replay.replayed);
  CHECK(f.payout.calls() == 4);
  CHECK(f.fold("e4").to_json() == st);
}

TEST_CASE("escrow: a dispute is refunded by the arbiter only") {
  escrow_fixture f;
  f.start();
  f.cmd("e5", "open", opening(), "e5-open");
  f.cmd("e5", "fund", {{"actor", "bob"}, {"amount", "250.00"}}, "e5-fund");
  CHECK(f.cmd("e5", "dispute", {{"actor", "bob"}, {"reason", "never arrived"}}, "e5-d")["status"] ==
        "DISPUTED");
  CHECK(f.call("escrow", "e5", "refund", {{"actor", "bob"}}, "e5-r1").code == "ACTOR_NOT_ALLOWED");
  CHECK(f.call("escrow", "e5", "release", {{"actor", "bob"}}, "e5-r2").code == "ACTOR_NOT_ALLOWED");
  auto done = f.cmd("e5", "refund", {{"actor", "ann"}}, "e5-r3");
  CHECK(done["status"] == "REFUNDED");
  CHECK(f.payout.payloads().back()["to"] == "bob");
  CHECK(f.call("escrow", "e5", "release", {{"actor", "ann"}}, "e5-r4").code ==
        "INVALID_TRANSITION");
}

TEST_CASE("escrow: a poison event is retried, then becomes a dead letter while others go through") {
  escrow_fixture f;
  f.alarm_retry_base = 20ms;
  f.alarm_max_retries = 2;
  f.start();
  f.cmd("e6", "open", opening(), "e6-open");
  json poison = {{"event_id", "evt-bad"}, {"type", "PaymentSucceeded"}, {"payload", "%%garbage"}};
  CHECK(f.cmd("e6", "ingest", poison, "in-1")["accepted"] == true);
  json good = {
    {"event_id", "evt-ok"}, {"type", "PaymentSucceeded"}, {"payload", {{"amount", "250.00"}}}};
  CHECK(f.cmd("e6", "ingest", good, "in-2")["accepted"] == true);
  json dl;
  CHECK(test::eventually([&] {
    auto l = f.dead_letters("escrow", "e6");
    if (l.empty())
      return false;
    dl = l[0];
    return true;
  }));
  CHECK(dl["operation"] == "@alarm:event:evt-bad");
  CHECK(dl["error_code"] == "MALFORMED_EVENT");
  CHECK(dl["attempts"] == 3);
  CHECK(dl["payload"]["event_id"] == "evt-bad");
  CHECK(f.facts("escrow", "e6", {{"type", "error"}, {"subtype", "alarm_failed"}}).size() == 3);
  CHECK(
    f.facts("escrow", "e6", {{"type", "lifecycle"}, {"subtype", "alarm_dead_lettered"}}).size() ==
    1);
  CHECK(f.ok("escrow", "e6", "state", json::object())["status"] == "FUNDED");
  // an operator acknowledges it (reviewed: the provider will resend a correct event)
  auto ack = f.ok("escrow", "e6", "@dead_letter", {{"id", dl["id"]}, {"action", "acknowledge"}});
  CHECK(ack["status"] == "acknowledged");
}
