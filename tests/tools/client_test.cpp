// client_test.cpp: the HTTP tool transport (http_tool_client) against the in-process fake
// vendor on loopback: reply mapping (2xx, 429 + Retry-After, 503, 500, X-Cost, non-JSON),
// transport failures (refused, reset, timeout), keep-alive reuse, a stale connection dropped
// before a send and the one re-send of a keyed request, the pool bound and its queue, and stop()
// with requests in flight. Every wait is bounded; the tests run on the test thread, replies
// arrive on the client's thread.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <future>
#include <mutex>
#include <thread>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/sinks/http_tool.hpp"
#include "support/eventually.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

/// Calls `fn` once and waits (bounded) for its reply.
tool_reply call(const tool_fn& fn, tool_request req = {}) {
  if (req.tool.empty())
    req.tool = "t";
  auto prom = std::make_shared<std::promise<tool_reply>>();
  auto fut = prom->get_future();
  auto calls = std::make_shared<std::atomic<int>>(0);
  fn(req, [prom, calls](tool_reply r) {
    if (calls->fetch_add(1) == 0)
      prom->set_value(std::move(r));
  });
  REQUIRE(fut.wait_for(15s) == std::future_status::ready);
  return fut.get();
}

tool_fn make(http_tool_client& c, const std::string& url, http_tool_options o = {}) {
  static std::atomic<int> n{0};
  o.url = url;
  auto fn = c.make_tool("tool" + std::to_string(n++), o);
  REQUIRE_MESSAGE(fn.is_ok(), fn.error().message());
  return fn.value();
}

/// Polls `pred` until true or 10 s passed.
using test::eventually;

} // namespace

TEST_CASE("client: a 2xx answer is ok with its JSON body - path, payload and headers arrive") {
  fake_vendor::vendor v;
  http_tool_client c;
  http_tool_options o;
  o.headers["Authorization"] = "Bearer test";
  auto fn = make(c, v.url() + "/telephony/", o);
  tool_request req;
  req.operation = "call";
  req.payload = {{"to", "+15550100"}};
  req.trace_id = "0123456789abcdef0123456789abcdef";
  req.idempotency_key = "k-1";
  auto r = call(fn, req);
  CHECK(r.ok);
  CHECK(r.http_status == 200);
  CHECK(r.error_code.empty());
  CHECK(r.body["path"] == "/telephony/call");
  CHECK(r.body["received"] == req.payload);
  CHECK(r.body["idempotency_key"] == "k-1");
  CHECK(r.body["trace_id"] == req.trace_id);
  CHECK(r.cost_amount.empty()); // the vendor has no price: no X-Cost
  // An empty operation posts to the URL itself.
  tool_request root;
  CHECK(call(fn, root).body["path"] == "/telephony");
  // A non-JSON body becomes a JSON string.
  v.script({{"responses", {{{"status", 200}, {"raw_body", "plain text"}}}}});
  auto t = call(fn, root); // no key: req's key would replay the stored answer
  CHECK(t.ok);
  CHECK(t.body == "plain text");
}

TEST_CASE(
  "client: 429 maps Retry-After (seconds and HTTP-date), 503 and 500 keep status and body") {
  fake_vendor::vendor v;
  http_tool_client c;
  auto fn = make(c, v.url() + "/x");
  REQUIRE(v.set_mode({{"mode", "rate_limit"}, {"retry_after_s", 2}}) == "");
  auto r = call(fn);
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 429);
  REQUIRE(r.retry_after_ms.has_value());
  CHECK(*r.retry_after_ms == 2000);
  CHECK(r.error_message.find("HTTP 429") != std::string::npos);

  // An HTTP-date 30 s ahead.
  std::time_t at = std::time(nullptr) + 30;
  char date[64];
  std::tm tm{};
  gmtime_r(&at, &tm);
  std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  REQUIRE(v.script({{"responses", {{{"status", 503}, {"headers", {{"Retry-After", date}}}}}}}) ==
          "");
  auto d = call(fn);
  CHECK(d.http_status == 503);
  REQUIRE(d.retry_after_ms.has_value());
  CHECK(*d.retry_after_ms >= 27'000);
  CHECK(*d.retry_after_ms <= 30'000);

  REQUIRE(v.set_mode({{"mode", "down"}}) == "");
  auto down = call(fn);
  CHECK(down.http_status == 503);
  CHECK_FALSE(down.retry_after_ms.has_value());
  CHECK(down.body["error"] == "service unavailable");
  REQUIRE(v.set_mode({{"mode", "error"}}) == "");
  auto err = call(fn);
  CHECK_FALSE(err.ok);
  CHECK(err.http_status == 500);
  CHECK(err.error_code.empty()); // an HTTP answer: the classifier maps the status
}

TEST_CASE("client: X-Cost becomes cost_amount, also for charged failures and as 0") {
  fake_vendor::vendor v;
  http_tool_client c;
  auto fn = make(c, v.url());
  REQUIRE(v.set_mode({{"price", "0.013"}, {"charge_failed", true}}) == "");
  CHECK(call(fn).cost_amount == "0.013");
  REQUIRE(v.set_mode({{"mode", "down"}}) == "");
  CHECK(call(fn).cost_amount == "0.013");
  REQUIRE(v.set_mode({{"charge_failed", false}}) == "");
  CHECK(call(fn).cost_amount == "0");
  CHECK(v.stats()["charged_total"] == "0.026");
}

TEST_CASE("client: transport failures: connection refused, reset, request timeout") {
  uint16_t closed_port;
  {
    fake_vendor::vendor gone;
    closed_port = gone.port();
  }
  http_tool_client c;
  auto refused = call(make(c, "http://127.0.0.1:" + std::to_string(closed_port)));
  CHECK_FALSE(refused.ok);
  CHECK(refused.http_status == 0);
  CHECK(refused.error_code == "connection_refused");
  CHECK_FALSE(refused.error_message.empty());

  fake_vendor::vendor v;
  REQUIRE(v.set_mode({{"mode", "reset"}}) == "");
  auto reset = call(make(c, v.url()));
  CHECK(reset.error_code == "connection_reset");
  CHECK(reset.http_status == 0);

  REQUIRE(v.set_mode({{"mode", "timeout"}, {"hold_ms", 5000}}) == "");
  http_tool_options o;
  o.request_timeout = 150ms;
  auto t0 = std::chrono::steady_clock::now();
  auto to = call(make(c, v.url(), o));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(to.error_code == "timeout");
  CHECK(to.error_message.find("150 ms") != std::string::npos);
  CHECK(took >= 150ms);
  CHECK(took < 3s);
  CHECK(v.stats()["by_status"]["timeout"] == 1);
}

TEST_CASE("client: keep-alive: sequential calls share one connection") {
  fake_vendor::vendor v;
  http_tool_client c;
  http_tool_options o;
  o.url = v.url();
  auto fn = c.make_tool("ka", o);
  REQUIRE(fn.is_ok());
  for (int i = 0; i < 5; ++i)
    REQUIRE(call(fn.value()).ok);
  CHECK(v.stats()["connections"] == 1);
  auto s = c.stats("ka");
  CHECK(s.requests == 5);
  CHECK(s.connections_opened == 1);
  CHECK(s.reused == 4);
  CHECK(s.open_connections == 1);
}

TEST_CASE("client: a kept-alive connection the vendor closed is dropped before a send, and a "
          "request whose connection closed after it was sent is sent again only with a key") {
  auto v = std::make_unique<fake_vendor::vendor>();
  auto port = v->port();
  http_tool_client c;
  http_tool_options o;
  o.url = v->url();
  auto fn = c.make_tool("stale", o).value();
  REQUIRE(call(fn).ok); // leaves one idle connection in the pool
  // The vendor restarts on the same port: the pooled connection's peer closed it while idle.
  v.reset();
  fake_vendor::vendor_options vo;
  vo.port = port;
  v = std::make_unique<fake_vendor::vendor>(vo);
  auto r = call(fn);
  CHECK(r.ok);
  CHECK(r.http_status == 200);
  auto s = c.stats("stale");
  CHECK(s.stale_dropped == 1); // seen closed before anything was sent on it
  CHECK(s.stale_retries == 0);
  CHECK(s.connections_opened == 2);
  CHECK(v->stats()["calls"] == 1); // the vendor saw the request once

  // A reset without an answer on a reused connection, after the vendor got the request: it may
  // have acted on it. Without a key the request is not sent again: the reset is the answer.
  REQUIRE(v->set_mode({{"mode", "reset"}}) == "");
  auto e = call(fn);
  CHECK(e.error_code == "connection_reset");
  CHECK(c.stats("stale").stale_retries == 0);
  CHECK(v->stats()["by_status"]["reset"] == 1);
  // With a key (which the vendor de-duplicates by) it is sent once more on a fresh connection,
  // whose reset is the attempt's error (no second re-send).
  REQUIRE(v->set_mode({{"mode", "ok"}}) == "");
  REQUIRE(call(fn).ok); // a kept-alive connection again
  REQUIRE(v->set_mode({{"mode", "reset"}}) == "");
  tool_request keyed;
  keyed.idempotency_key = "k-stale";
  auto k = call(fn, keyed);
  CHECK(k.error_code == "connection_reset");
  CHECK(c.stats("stale").stale_retries == 1);
  CHECK(v->stats()["by_status"]["reset"] == 3);
  // The next request has no idle connection left: a fresh one, reset, reported at once.
  auto f = call(fn, keyed);
  CHECK(f.error_code == "connection_reset");
  CHECK(c.stats("stale").stale_retries == 1);
  CHECK(v->stats()["by_status"]["reset"] == 4);
}

TEST_CASE("client: the pool bound caps connections - extra requests queue, then fail fast") {
  fake_vendor::vendor v;
  REQUIRE(v.set_mode({{"delay_ms", 150}}) == "");
  http_tool_client c;
  http_tool_options o;
  o.url = v.url();
  o.max_connections = 2;
  o.max_queued = 4;
  auto fn = c.make_tool("bounded", o).value();
  std::mutex mu;
  std::vector<tool_reply> replies;
  for (int i = 0; i < 7; ++i)
    fn(tool_request{"bounded", "", json::object()}, [&](tool_reply r) {
      std::lock_guard<std::mutex> g(mu);
      replies.push_back(std::move(r));
    });
  REQUIRE(eventually([&] {
    std::lock_guard<std::mutex> g(mu);
    return replies.size() == 7;
  }));
  int ok = 0, exhausted = 0;
  for (auto& r : replies) {
    ok += r.ok;
    exhausted += r.error_code == "POOL_EXHAUSTED";
  }
  CHECK(ok == 6);        // 2 on connections + 4 queued
  CHECK(exhausted == 1); // the 7th: the queue was full
  auto st = v.stats();
  CHECK(st["max_in_flight"] == 2);
  CHECK(st["connections"] == 2);
  auto s = c.stats("bounded");
  CHECK(s.queued == 4);
  CHECK(s.rejected == 1);
  CHECK(s.connections_opened == 2);
}

TEST_CASE("client: stop() answers every in-flight and queued request once with CANCELLED") {
  fake_vendor::vendor v;
  REQUIRE(v.set_mode({{"mode", "timeout"}, {"hold_ms", 20000}}) == "");
  auto c = std::make_unique<http_tool_client>();
  http_tool_options o;
  o.url = v.url();
  o.max_connections = 2;
  auto fn = c->make_tool("stopping", o).value();
  std::atomic<int> done{0}, cancelled{0};
  for (int i = 0; i < 4; ++i)
    fn(tool_request{"stopping", "", json::object()}, [&](tool_reply r) {
      done.fetch_add(1);
      cancelled.fetch_add(r.error_code == "CANCELLED");
    });
  REQUIRE(eventually([&] { return v.stats()["in_flight"] == 2; }));
  auto t0 = std::chrono::steady_clock::now();
  c->stop();
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(done.load() == 4);
  CHECK(cancelled.load() == 4);
  // After stop, a call answers at once.
  auto r = call(fn);
  CHECK(r.error_code == "CANCELLED");
  c.reset(); // a second stop (destructor) is harmless
  CHECK(done.load() == 4);
}

TEST_CASE("client: options are validated when the tool is made") {
  http_tool_client c;
  auto bad = [&](http_tool_options o) {
    auto r = c.make_tool("v", o);
    REQUIRE_FALSE(r.is_ok());
    return r.error().message();
  };
  http_tool_options o;
  o.url = "https://127.0.0.1/x";
  CHECK(bad(o).find("https is not supported") != std::string::npos);
  o.url = "ftp://127.0.0.1/";
  CHECK(bad(o).find("url:") == 0);
  o.url = "http://127.0.0.1:99999/";
  CHECK(bad(o).find("port") != std::string::npos);
  o.url = "http://127.0.0.1/a?b=1";
  CHECK(bad(o).find("query") != std::string::npos);
  o.url = "http://user@127.0.0.1/";
  CHECK(bad(o).find("user information") != std::string::npos);
  o.url = "http://127.0.0.1:8/";
  o.headers["Bad Name"] = "x";
  CHECK(bad(o).find("headers.Bad Name") == 0);
  o.headers = {{"Content-Length", "3"}};
  CHECK(bad(o).find("set by the transport") != std::string::npos);
  o.headers = {{"X-Ok", "a\r\nInjected: 1"}};
  CHECK(bad(o).find("CR, LF") != std::string::npos);
  o.headers.clear();
  o.max_connections = 0;
  CHECK(bad(o).find("max_connections") == 0);
  auto u = parse_http_tool_url("http://[::1]:8080/v1/");
  REQUIRE(u.is_ok());
  CHECK(u.value().host == "::1");
  CHECK(u.value().port == 8080);
  CHECK(u.value().path == "/v1");
}
