// fake_vendor_test.cpp: the fake vendor's knobs for load and crash tests (tools/fake_vendor/
// README.md): `flaky` with `timeout_ratio` (503, held calls and 200 from one seeded draw per
// call), `delay_jitter_ms`, and the per-key counters of GET /_vendor/keys. Calls go through the
// HTTP tool transport (http_tool_client) from the test thread; replies arrive on the client's
// thread. Every wait is bounded.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/sinks/http_tool.hpp"
#include "http/client.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace fake_vendor_test {

namespace {

tool_fn make(http_tool_client& c, const std::string& url, std::chrono::milliseconds timeout = 5s) {
  http_tool_options o;
  o.url = url;
  o.request_timeout = timeout;
  auto fn = c.make_tool("vendor", o);
  REQUIRE_MESSAGE(fn.is_ok(), fn.error().message());
  return fn.value();
}

/// Starts one call with `key` (empty: none); the future holds its reply.
std::future<tool_reply> start(const tool_fn& fn, const std::string& key) {
  auto prom = std::make_shared<std::promise<tool_reply>>();
  auto fut = prom->get_future();
  tool_request req;
  req.tool = "vendor";
  req.operation = "deliver";
  req.idempotency_key = key;
  fn(req, [prom](tool_reply r) { prom->set_value(std::move(r)); });
  return fut;
}

tool_reply call(const tool_fn& fn, const std::string& key) {
  auto f = start(fn, key);
  REQUIRE(f.wait_for(15s) == std::future_status::ready);
  return f.get();
}

/// The per-key counts once no call is in flight any more (a call counts in flight until the
/// vendor's write of its answer completed, which may be just after the client read it).
json settled_keys(const fake_vendor::vendor& v) {
  auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto k = v.keys()["keys"];
    bool busy = false;
    for (auto& [_, c] : k.items())
      busy = busy || c.value("in_flight", 0) != 0;
    if (!busy || std::chrono::steady_clock::now() > until)
      return k;
    std::this_thread::sleep_for(5ms);
  }
}

/// "200", "503" or "none" (no answer: the vendor held the call past the client's timeout).
std::string outcome(const tool_reply& r) {
  return r.http_status ? std::to_string(r.http_status) : std::string("none");
}

} // namespace

TEST_CASE("fake vendor: flaky with timeout_ratio answers 503, holds without an answer or answers "
          "200, from one seeded draw per call") {
  fake_vendor::vendor v;
  http_tool_client c;
  // The client gives up on a held call long before the vendor closes it (a close first would
  // look like a stale connection, and the client would send the call once more).
  auto fn = make(c, v.url() + "/hook", 150ms);
  json mode = {{"mode", "flaky"},
               {"fail_ratio", 0.3},
               {"timeout_ratio", 0.3},
               {"hold_ms", 5000},
               {"seed", 7u}};
  REQUIRE(v.set_mode(mode) == "");
  std::vector<std::string> first;
  std::map<std::string, int> n;
  for (int i = 0; i < 40; ++i) {
    first.push_back(outcome(call(fn, "k" + std::to_string(i))));
    ++n[first.back()];
  }
  // 40 draws of 0.3 / 0.3 / 0.4: each class far from empty.
  CHECK(n["503"] >= 3);
  CHECK(n["none"] >= 3);
  CHECK(n["200"] >= 3);
  CHECK(n["503"] + n["none"] + n["200"] == 40);
  auto s = v.stats();
  CHECK(s["by_status"].value("503", 0) == n["503"]);
  CHECK(s["by_status"].value("timeout", 0) == n["none"]);
  CHECK(s["mode"]["timeout_ratio"] == 0.3);

  // The same seed, the same sequence.
  v.reset();
  REQUIRE(v.set_mode(mode) == "");
  std::vector<std::string> again;
  for (int i = 0; i < 40; ++i)
    again.push_back(outcome(call(fn, "k" + std::to_string(i))));
  CHECK(again == first);

  // The two shares together are at most 1; a refused mode changes nothing.
  CHECK(v.set_mode({{"timeout_ratio", 0.8}}) != "");
  CHECK(v.set_mode({{"timeout_ratio", 1.5}}) != "");
  CHECK(v.set_mode({{"timeout_ratio", "a"}}) != "");
  CHECK(v.stats()["mode"]["timeout_ratio"] == 0.3);
}

TEST_CASE("fake vendor: delay_jitter_ms adds a random wait of at most that much to each answer") {
  fake_vendor::vendor v;
  http_tool_client c;
  auto fn = make(c, v.url());
  REQUIRE(v.set_mode({{"delay_ms", 40}, {"delay_jitter_ms", 100}, {"seed", 3u}}) == "");
  for (int i = 0; i < 6; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(call(fn, "").ok);
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= 40ms);
    CHECK(took < 2s); // 40 + at most 100 ms, with room for a loaded machine
  }
  CHECK(v.stats()["mode"]["delay_jitter_ms"] == 100);
  CHECK(v.set_mode({{"delay_jitter_ms", -1}}) != "");
  CHECK(v.set_mode({{"delay_jitter_ms", 30001}}) != "");
}

TEST_CASE("fake vendor: GET /_vendor/keys counts each key's deliveries, replays, failures, calls "
          "without an answer and calls in flight") {
  fake_vendor::vendor v;
  http_tool_client c;
  auto fn = make(c, v.url());
  REQUIRE(v.script({{"responses", {{{"status", 503}}, {{"status", 200}}, {{"reset", true}}}}}) ==
          "");
  CHECK(call(fn, "k1").http_status == 503);
  CHECK(call(fn, "k1").http_status == 200);
  CHECK(call(fn, "k1").http_status == 200); // a replay: the script's reset is still queued
  {
    // The reset, on a connection of its own (on a reused one the client would take it for a
    // stale connection and send the call once more).
    http_tool_client fresh;
    CHECK(call(make(fresh, v.url()), "k2").http_status == 0);
  }
  CHECK(call(fn, "").ok); // no key: not listed

  // Over HTTP, as a driver in another process reads it.
  auto keys = settled_keys(v);
  test::http_client http(v.port());
  auto r = http.request("GET", "/_vendor/keys");
  REQUIRE(r.status == 200);
  CHECK(r.json()["keys"] == keys);
  CHECK(keys.size() == 2);
  CHECK(keys["k1"] == json{{"calls", 3},
                           {"delivered", 1},
                           {"replayed", 1},
                           {"failed", 1},
                           {"no_answer", 0},
                           {"in_flight", 0}});
  CHECK(keys["k2"]["calls"] == 1);
  CHECK(keys["k2"]["no_answer"] == 1);

  // A call being answered counts in flight until its answer is sent.
  REQUIRE(v.set_mode({{"delay_ms", 300}}) == "");
  auto slow = start(fn, "k3");
  auto until = std::chrono::steady_clock::now() + 10s;
  while (v.keys()["keys"].value("k3", json::object()).value("in_flight", 0) != 1 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  CHECK(v.keys()["keys"]["k3"]["in_flight"] == 1);
  REQUIRE(slow.wait_for(15s) == std::future_status::ready);
  CHECK(slow.get().ok);
  auto after = settled_keys(v);
  CHECK(after["k3"]["in_flight"] == 0);
  CHECK(after["k3"]["delivered"] == 1);

  v.reset();
  CHECK(v.keys()["keys"].empty());
}

} // namespace fake_vendor_test
