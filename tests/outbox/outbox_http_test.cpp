// outbox_http_test.cpp: an HTTP sink against a real gateway (tests/http/fixture.hpp) and the fake
// vendor (tools/fake_vendor) as the sink: facts appended over HTTP are POSTed to the vendor in
// seq order with their fact_id as Idempotency-Key; a 503 is retried and a 400 becomes a dead
// letter that the dead-letters route lists, after which delivery goes on; /metrics shows the
// sink's series under its configured name. The vendor's charge log (a price per call) is its
// record of the calls in the order it answered them.
#include <doctest/doctest.h>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/sinks/http_tool.hpp"
#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

/// The Idempotency-Keys of the vendor's 2xx answers, in order.
std::vector<std::string> delivered_keys(const fake_vendor::vendor& v) {
  std::vector<std::string> out;
  auto stats = v.stats();
  for (auto& c : stats["charges"])
    if (c["status"] == 200)
      out.push_back(c["idempotency_key"]);
  return out;
}

} // namespace

TEST_CASE("outbox over HTTP: facts POSTed in order with fact_id as Idempotency-Key (a 503 "
          "retried and a 400 dead-lettered and passed) and the sink's series on /metrics") {
  fake_vendor::vendor v;
  REQUIRE(v.set_mode({{"price", "0.001"}, {"charge_failed", true}}).empty());
  http_tool_client tools;
  gateway_fixture f([&](runtime_config& rc, http_server_config&) {
    http_tool_options o;
    o.url = v.url() + "/facts";
    o.request_timeout = std::chrono::milliseconds(2'000);
    auto t = tools.make_tool("outbox:audit", o);
    REQUIRE(t.is_ok());
    rc.outbox.sinks["audit"].deliver = http_outbox_sink("audit", std::move(t.value()));
    rc.outbox.sinks["audit"].retry =
      json{{"base_delay_ms", 20}, {"max_delay_ms", 100}, {"jitter", "none"}};
    rc.outbox.routes.push_back({"audit", {"payment"}, {}, {}});
    rc.alarm_poll = std::chrono::milliseconds(50);
  });
  http_client c(f.port());
  std::vector<std::string> ids;
  auto append = [&](const std::string& key, const std::string& type) {
    auto r = c.request("POST", "/v1/entities/ledger/h1/append", json_headers(acme_key, key),
                       json{{"type", type}, {"data", {{"k", key}}}}.dump());
    REQUIRE_MESSAGE(r.status == 200, r.body);
    if (type == "payment")
      ids.push_back(r.json()["fact_id"]);
  };
  for (int i = 1; i <= 5; ++i)
    append("p" + std::to_string(i), i == 3 ? "note" : "payment");
  REQUIRE(eventually([&] { return delivered_keys(v).size() == 4; }));
  CHECK(delivered_keys(v) == ids);
  CHECK(v.stats()["calls"] == 4); // once each

  // A 503, then a 400 for the same fact: retried, then refused for good; the next one goes.
  REQUIRE(v.script({{"responses", {{{"status", 503}}, {{"status", 400}}}}}).empty());
  append("p6", "payment");
  auto refused = ids.back();
  append("p7", "payment");
  REQUIRE(eventually([&] { return delivered_keys(v).size() == 5; }));
  CHECK(delivered_keys(v).back() == ids.back());
  auto keys = v.keys()["keys"];
  CHECK(keys[refused]["calls"] == 2);
  CHECK(keys[refused]["failed"] == 2);
  auto dl = c.request("GET", "/v1/entities/ledger/h1/dead-letters", {{"X-API-Key", acme_key}});
  REQUIRE(dl.status == 200);
  auto list = dl.json();
  REQUIRE(list.size() == 1);
  CHECK(list[0]["operation"] == "@outbox:audit");
  CHECK(list[0]["error_code"] == "HTTP_400");
  CHECK(json::parse(list[0]["payload"].dump()).dump().find(refused) != std::string::npos);

  auto m = c.request("GET", "/metrics");
  REQUIRE(m.status == 200);
  CHECK(m.body.find("factum_outbox_delivered_total{sink=\"audit\"} 5\n") != std::string::npos);
  CHECK(m.body.find("factum_outbox_refused_total{sink=\"audit\"} 1\n") != std::string::npos);
  CHECK(m.body.find("factum_outbox_retries_total{sink=\"audit\"} 1\n") != std::string::npos);
  CHECK(m.body.find("factum_outbox_lag{sink=\"audit\"} 0\n") != std::string::npos);
  CHECK(m.body.find("h1") == std::string::npos); // no entity in any label
  f.stop();
  tools.stop();
}
