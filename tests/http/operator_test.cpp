// operator_test.cpp: the operator routes over HTTP against the runtime's resilience layer: a
// webhook delivery whose tool always fails becomes a dead letter that is listed, filtered and
// moved (discard, an invalid move, an unknown id), and the tool's breaker is listed, forced open
// (deliveries then fast-fail with CIRCUIT_OPEN), disabled with a reason and reset. Runs on the
// test thread.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "factum/storage/sha256.hpp"
#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

/// A tool that always answers 503; counts its calls in `calls` when given.
void add_failing_vendor(runtime_config& rc, std::atomic<int>* calls = nullptr) {
  rc.tools["vendor"] = [calls](const tool_request&, std::function<void(tool_reply)> done) {
    if (calls)
      ++*calls;
    tool_reply r;
    r.ok = false;
    r.http_status = 503;
    r.error_message = "vendor unavailable";
    r.body = json{{"status", 503}};
    done(std::move(r));
  };
  tool_policy p;
  p.retry = {{"base_delay_ms", 5}, {"max_delay_ms", 10}, {"max_attempts", 2}, {"jitter", "none"}};
  rc.tool_policies["vendor"] = std::move(p);
}

} // namespace

TEST_CASE("operator routes: dead letters are listed, filtered and moved over HTTP") {
  gateway_fixture f([](runtime_config& rc, http_server_config&) { add_failing_vendor(rc); });
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  auto failed = c.request("POST", "/v1/entities/webhook/w1/deliver", json_headers(acme_key, "d-1"),
                          json{{"tool", "vendor"}, {"payload", {{"order", 1}}}}.dump());
  REQUIRE_MESSAGE(failed.status == 503, failed.body);
  MESSAGE("POST deliver: " << failed.body);
  auto dl_id = failed.json().value("dead_letter_id", "");
  REQUIRE_FALSE(dl_id.empty());
  auto list = c.request("GET", "/v1/entities/webhook/w1/dead-letters", auth);
  REQUIRE(list.status == 200);
  REQUIRE(list.json().size() == 1);
  MESSAGE("GET dead-letters: " << list.body);
  CHECK(list.json()[0]["id"] == dl_id);
  CHECK(list.json()[0]["idempotency_key"] == "d-1");
  auto status = list.json()[0]["status"].get<std::string>();
  CHECK(c.request("GET", "/v1/entities/webhook/w1/dead-letters?status=" + status + "&limit=5", auth)
          .json()
          .size() == 1);
  CHECK(c.request("GET", "/v1/entities/webhook/w1/dead-letters?status=discarded", auth).json() ==
        json::array());
  // Another tenant sees none of it: its webhook/w1 was never written.
  CHECK(
    c.request("GET", "/v1/entities/webhook/w1/dead-letters", {{"X-API-Key", globex_key}}).code() ==
    "ENTITY_NOT_FOUND");
  auto discard =
    c.request("POST", "/v1/entities/webhook/w1/dead-letters/" + dl_id + "/discard", auth);
  REQUIRE_MESSAGE(discard.status == 200, discard.body);
  MESSAGE("POST discard: " << discard.body);
  CHECK(discard.json()["status"] == "discarded");
  CHECK(discard.json().contains("next_retry_at")); // null, not left out, once nothing is due
  CHECK(discard.json()["next_retry_at"].is_null());
  auto again = c.request("POST", "/v1/entities/webhook/w1/dead-letters/" + dl_id + "/retry", auth);
  CHECK(again.status == 409);
  CHECK(again.code() == "INVALID_DEAD_LETTER_TRANSITION");
  auto unknown =
    c.request("POST", "/v1/entities/webhook/w1/dead-letters/dl_nope/acknowledge", auth);
  CHECK(unknown.status == 404);
  CHECK(unknown.code() == "DEAD_LETTER_NOT_FOUND");
  auto moves =
    f.facts("acme", "webhook", "w1", {{"type", "lifecycle"}, {"subtype", "dead_letter_discard"}});
  CHECK(moves.size() == 1);
}

TEST_CASE("operator routes: a breaker is listed, forced open and reset over HTTP") {
  gateway_fixture f([](runtime_config& rc, http_server_config&) { add_failing_vendor(rc); });
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  REQUIRE(c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "b-1"),
                    json{{"tool", "vendor"}}.dump())
            .status == 503);
  auto list = c.request("GET", "/v1/entities/webhook/w2/breakers", auth);
  REQUIRE(list.status == 200);
  REQUIRE(list.json().size() == 1);
  CHECK(list.json()[0]["tool"] == "vendor");
  auto forced = c.request("POST", "/v1/entities/webhook/w2/breakers/vendor/force-open", auth);
  REQUIRE_MESSAGE(forced.status == 200, forced.body);
  CHECK(forced.json()["state"] == "FORCED_OPEN");
  auto fast = c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "b-2"),
                        json{{"tool", "vendor"}}.dump());
  CHECK(fast.status == 503);
  CHECK(fast.code() == "CIRCUIT_OPEN");
  auto reset = c.request("POST", "/v1/entities/webhook/w2/breakers/vendor/reset", auth);
  REQUIRE(reset.status == 200);
  CHECK(reset.json()["state"] == "CLOSED");
  auto after = c.request("GET", "/v1/entities/webhook/w2/breakers", auth).json();
  REQUIRE(after.size() == 1);
  CHECK(after[0]["state"] == "CLOSED");
  CHECK(f.facts("acme", "webhook", "w2", {{"type", "lifecycle"}}).size() >= 2);
}

TEST_CASE("operator routes: POST .../alarms/resume needs scope operate, checks its reason and "
          "answers what it set again (nothing paused here: a fork's are, runtime:fork)") {
  gateway_fixture f;
  http_client c(f.port());
  REQUIRE(
    c.request("POST", "/v1/entities/counter/c1/add", json_headers(acme_key, "r-1"), "{}").status ==
    200);
  auto path = "/v1/entities/counter/c1/alarms/resume";
  auto r = c.request("POST", path, json_headers(), R"({"reason":"after the fork"})");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.json() == json{{"alarms", json::array()}, {"schedules", json::array()}});
  auto life = f.facts("acme", "counter", "c1", {{"type", "lifecycle"}});
  REQUIRE(life.size() == 1);
  CHECK(life[0]["subtype"] == "paused_resumed");
  CHECK(c.request("POST", path, json_headers(globex_key), "{}").status == 403);
  auto bad =
    c.request("POST", path, json_headers(), json{{"reason", std::string(600, 'x')}}.dump());
  CHECK(bad.status == 400);
  CHECK(bad.code() == "INVALID_ARGUMENT");
}

TEST_CASE("operator routes: after an operator retry resolved a dead letter, the client's own "
          "retry with its key replays the result (same fingerprint as over HTTP)") {
  auto healthy = std::make_shared<std::atomic<bool>>(false);
  gateway_fixture f([healthy](runtime_config& rc, http_server_config&) {
    rc.tools["vendor"] = [healthy](const tool_request&, std::function<void(tool_reply)> done) {
      tool_reply r;
      r.ok = healthy->load();
      r.http_status = r.ok ? 200 : 503;
      r.body = json{{"delivered", r.ok}};
      if (!r.ok)
        r.error_message = "vendor unavailable";
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 5}, {"max_delay_ms", 10}, {"max_attempts", 2}, {"jitter", "none"}};
    rc.tool_policies["vendor"] = std::move(p);
  });
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  auto body = json{{"tool", "vendor"}, {"payload", {{"order", 7}}}}.dump();
  auto failed =
    c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "d-7"), body);
  REQUIRE_MESSAGE(failed.status == 503, failed.body);
  auto dl_id = failed.json().value("dead_letter_id", "");
  REQUIRE_FALSE(dl_id.empty());
  healthy->store(true);
  auto retry = c.request("POST", "/v1/entities/webhook/w2/dead-letters/" + dl_id + "/retry", auth);
  REQUIRE_MESSAGE(retry.status == 200, retry.body);
  // The retry runs from an alarm: wait (bounded) until the dead letter is resolved.
  std::string status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto l = c.request("GET", "/v1/entities/webhook/w2/dead-letters", auth);
    REQUIRE(l.status == 200);
    status = l.json().at(0).value("status", "");
    if (status == "resolved")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(status == "resolved");
  auto again =
    c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "d-7"), body);
  CHECK_MESSAGE(again.status == 200, again.body);
  CHECK(again.header("idempotent-replayed") == "true");
  // A different body under the same key is still a mismatch.
  auto other = c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "d-7"),
                         json{{"tool", "vendor"}, {"payload", {{"order", 8}}}}.dump());
  CHECK(other.status == 422);
}

TEST_CASE("operator routes: a breaker is disabled with a reason: deliveries reach the failing "
          "vendor every time, and the lifecycle fact names the reason and the API key") {
  std::atomic<int> vendor_calls{0};
  gateway_fixture f([&](runtime_config& rc, http_server_config&) {
    add_failing_vendor(rc);
    auto inner = rc.tools["vendor"];
    rc.tools["vendor"] = [&vendor_calls, inner](const tool_request& r,
                                                std::function<void(tool_reply)> done) {
      ++vendor_calls;
      inner(r, std::move(done));
    };
  });
  http_client c(f.port());
  // The entity exists once a delivery failed (operator routes never create one).
  REQUIRE(c.request("POST", "/v1/entities/webhook/w3/deliver", json_headers(acme_key, "x-first"),
                    json{{"tool", "vendor"}}.dump())
            .status == 503);
  auto disabled = c.request(
    "POST", "/v1/entities/webhook/w3/breakers/vendor/disable",
    {{"X-API-Key", acme_key}, {"Content-Type", "application/json"}},
    json{{"reason", "vendor maintenance, ticket 4711"}, {"actor", "someone-else"}}.dump());
  REQUIRE_MESSAGE(disabled.status == 200, disabled.body);
  CHECK(disabled.json()["state"] == "DISABLED");
  // The breaker would open on this many failures (5 of the last 10 by default); disabled, it
  // never refuses: every delivery's attempts reach the vendor.
  for (int i = 0; i < 8; ++i) {
    auto r =
      c.request("POST", "/v1/entities/webhook/w3/deliver",
                json_headers(acme_key, "x-" + std::to_string(i)), json{{"tool", "vendor"}}.dump());
    CHECK(r.status == 503);
    CHECK(r.code() != "CIRCUIT_OPEN");
  }
  CHECK(vendor_calls.load() == 18); // 9 deliveries x 2 attempts
  auto moves = f.facts("acme", "webhook", "w3",
                       {{"type", "lifecycle"}, {"subtype", "circuit_breaker_state_changed"}});
  REQUIRE(moves.size() == 1);
  auto d = moves[0]["data"];
  CHECK(d["new_state"] == "DISABLED");
  CHECK(d["reason"] == "vendor maintenance, ticket 4711");
  // The actor is the API key that asked (its digest's first 12 hex digits), not the body's.
  CHECK(d["actor"] == "api-key:" + sha256_hex(acme_key).substr(0, 12));
  // A reason with a control character is refused and changes nothing.
  auto bad = c.request("POST", "/v1/entities/webhook/w3/breakers/vendor/reset",
                       {{"X-API-Key", acme_key}, {"Content-Type", "application/json"}},
                       json{{"reason", "line\nbreak"}}.dump());
  CHECK(bad.status == 400);
  CHECK(bad.code() == "INVALID_ARGUMENT");
  CHECK(c.request("GET", "/v1/entities/webhook/w3/breakers", {{"X-API-Key", acme_key}})
          .json()[0]["state"] == "DISABLED");
  auto reset =
    c.request("POST", "/v1/entities/webhook/w3/breakers/vendor/reset", {{"X-API-Key", acme_key}});
  REQUIRE(reset.status == 200);
  CHECK(reset.json()["state"] == "CLOSED");
}

TEST_CASE("tools: a tool's classify override turns its 404 into a retried transient failure "
          "that ends as a dead letter, and without one a 404 is a client error, tried once") {
  std::atomic<int> calls{0};
  gateway_fixture f([&](runtime_config& rc, http_server_config&) {
    auto not_found = [&calls](const tool_request&, std::function<void(tool_reply)> done) {
      ++calls;
      tool_reply r;
      r.ok = false;
      r.http_status = 404;
      r.error_message = "no such record (yet)";
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 5}, {"max_delay_ms", 10}, {"max_attempts", 3}, {"jitter", "none"}};
    rc.tools["plain"] = not_found;
    rc.tool_policies["plain"] = p;
    p.classify = {{"statuses", {{"404", {{"category", "transient"}, {"retryable", true}}}}}};
    rc.tools["eventual"] = not_found;
    rc.tool_policies["eventual"] = p;
  });
  http_client c(f.port());
  auto plain = c.request("POST", "/v1/entities/webhook/c1/deliver", json_headers(acme_key, "p-1"),
                         json{{"tool", "plain"}}.dump());
  CHECK(plain.status == 400);
  CHECK(plain.json()["category"] == "client");
  CHECK(plain.json().value("dead_letter_id", "").empty());
  CHECK(calls.load() == 1);
  auto eventual = c.request("POST", "/v1/entities/webhook/c1/deliver",
                            json_headers(acme_key, "e-1"), json{{"tool", "eventual"}}.dump());
  CHECK(eventual.status == 503);
  CHECK(eventual.json()["category"] == "transient");
  CHECK_FALSE(eventual.json().value("dead_letter_id", "").empty());
  CHECK(calls.load() == 4); // 1 + 3 attempts
}

TEST_CASE("tools: a classify override the classifier cannot read stops the start") {
  test::temp_dir tmp;
  runtime_config rc;
  rc.data_dir = tmp.path();
  add_builtin_types(rc.types);
  tool_policy p;
  p.classify = {{"statuses", {{"404", {{"category", "weird"}}}}}};
  rc.tool_policies["crm"] = p;
  auto r = runtime::start(std::move(rc));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK(r.error().message().find("crm.statuses.404.category") != std::string::npos);
}

TEST_CASE("tools: a fallback after retries answers a delivery whose retries ran out, with no "
          "dead letter, and the facts say the fallback was used") {
  std::atomic<int> vendor_calls{0};
  gateway_fixture f([&vendor_calls](runtime_config& rc, http_server_config&) {
    add_failing_vendor(rc, &vendor_calls);
    auto& p = rc.tool_policies["vendor"];
    p.fallback = [](const tool_request&, std::function<void(tool_reply)> done) {
      tool_reply r;
      r.ok = true;
      r.http_status = 200;
      r.body = json{{"queued", true}};
      done(std::move(r));
    };
    p.fallback_after_retries = true;
  });
  http_client c(f.port());
  auto r = c.request("POST", "/v1/entities/webhook/fb1/deliver", json_headers(acme_key, "fb-1"),
                     json{{"tool", "vendor"}}.dump());
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.json()["fallback"] == true);
  CHECK(r.json()["attempts"] == 2);
  CHECK(r.header("idempotent-replayed").empty());
  CHECK(vendor_calls.load() == 2);
  CHECK(
    c.request("GET", "/v1/entities/webhook/fb1/dead-letters", {{"X-API-Key", acme_key}}).json() ==
    json::array());
  auto exhausted = [&] {
    return f.facts("acme", "webhook", "fb1", {{"subtype", "max_retries_exceeded"}});
  };
  auto used = [&] {
    return f.facts("acme", "webhook", "fb1", {{"type", "outcome"}, {"subtype", "fallback_used"}});
  };
  REQUIRE(exhausted().size() == 1);
  CHECK(exhausted()[0]["data"]["resolved"] == true);
  REQUIRE(used().size() == 1);
  CHECK(used()[0]["data"]["reason"] == "retries_exhausted");
  // A retry with the same key replays the fallback's answer: marked as a replay, the vendor not
  // called again, no second exhaustion or fallback in the facts.
  auto again = c.request("POST", "/v1/entities/webhook/fb1/deliver", json_headers(acme_key, "fb-1"),
                         json{{"tool", "vendor"}}.dump());
  CHECK(again.status == 200);
  CHECK(again.header("idempotent-replayed") == "true");
  CHECK(again.body == r.body);
  CHECK(vendor_calls.load() == 2);
  CHECK(exhausted().size() == 1);
  CHECK(used().size() == 1);
}

TEST_CASE("tools: retry_by_status makes a 504 wait as the status table says (5 s, longer than "
          "the entity may be held: a scheduled dead letter after one attempt), where the tool's "
          "own policy retries it at once") {
  std::atomic<int> calls{0};
  gateway_fixture f([&](runtime_config& rc, http_server_config&) {
    auto timeout = [&calls](const tool_request&, std::function<void(tool_reply)> done) {
      ++calls;
      tool_reply r;
      r.ok = false;
      r.http_status = 504;
      r.error_message = "upstream timed out";
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 1}, {"max_delay_ms", 2}, {"max_attempts", 5}, {"jitter", "none"}};
    p.max_inline_delay_ms = 1000;
    rc.tools["own"] = timeout;
    rc.tool_policies["own"] = p;
    p.retry_by_status = true;
    rc.tools["table"] = timeout;
    rc.tool_policies["table"] = p;
  });
  http_client c(f.port());
  auto own = c.request("POST", "/v1/entities/webhook/s1/deliver", json_headers(acme_key, "o-1"),
                       json{{"tool", "own"}}.dump());
  CHECK(own.status == 503);
  CHECK(calls.load() == 5); // the tool's policy: 5 attempts, 1-2 ms apart
  int64_t before = factum::now_ms();
  auto table = c.request("POST", "/v1/entities/webhook/s2/deliver", json_headers(acme_key, "t-1"),
                         json{{"tool", "table"}}.dump());
  CHECK(table.status == 503);
  CHECK(calls.load() == 6); // one attempt: the next would wait 5 s
  auto dls =
    c.request("GET", "/v1/entities/webhook/s2/dead-letters", {{"X-API-Key", acme_key}}).json();
  REQUIRE(dls.size() == 1);
  CHECK(dls[0]["status"] == "scheduled");
  CHECK(dls[0]["next_retry_at"].get<int64_t>() >= before + 5000);
}

TEST_CASE("operator routes: a tool's per-operation retry policy replaces the tool's for calls of "
          "that operation only, and a bad operation name is refused") {
  auto calls = std::make_shared<std::map<std::string, int>>();
  auto mu = std::make_shared<std::mutex>();
  gateway_fixture f([calls, mu](runtime_config& rc, http_server_config&) {
    rc.tools["vendor"] = [calls, mu](const tool_request& req,
                                     std::function<void(tool_reply)> done) {
      {
        std::lock_guard<std::mutex> g(*mu);
        ++(*calls)[req.operation];
      }
      tool_reply r;
      r.ok = false;
      r.http_status = 503;
      r.body = json{{"status", 503}};
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 1}, {"max_delay_ms", 2}, {"max_attempts", 1}, {"jitter", "none"}};
    p.operation_retry["charge"] = {
      {"base_delay_ms", 1}, {"max_delay_ms", 2}, {"max_attempts", 4}, {"jitter", "none"}};
    p.budget = {{"ratio", 1.0}, {"min_per_window", 100}};
    rc.tool_policies["vendor"] = std::move(p);
  });
  http_client c(f.port());
  auto deliver = [&](const std::string& id, const std::string& op) {
    return c.request("POST", "/v1/entities/webhook/" + id + "/deliver",
                     json_headers(acme_key, "k-" + id),
                     json{{"tool", "vendor"}, {"operation", op}}.dump());
  };
  auto plain = deliver("o1", "deliver");
  CHECK(plain.status == 503);
  CHECK(plain.json()["attempts"] == 1);
  auto charge = deliver("o2", "charge");
  CHECK(charge.status == 503);
  CHECK(charge.json()["attempts"] == 4);
  {
    std::lock_guard<std::mutex> g(*mu);
    CHECK((*calls)["deliver"] == 1);
    CHECK((*calls)["charge"] == 4);
  }
  // Each attempt of the operation left its error fact.
  CHECK(f.facts("acme", "webhook", "o2", {{"type", "error"}}).size() >= 4);
  auto bad = deliver("o3", "../x");
  CHECK(bad.status == 400);
  CHECK(bad.code() == "INVALID_ARGUMENT");
}
