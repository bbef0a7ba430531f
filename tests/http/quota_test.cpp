// quota_test.cpp: per-tenant quotas over HTTP (docs/http-api.md, "Tenant quotas"): 429
// TENANT_QUOTA_EXCEEDED for an entity a tenant's max_entities has no room for, 507
// TENANT_STORAGE_QUOTA_EXCEEDED for writes of a tenant at its max_bytes (reads and operator
// routes still answer), both as problem+json, and the quota series of /metrics. Test thread plus
// the server's threads.
#include <doctest/doctest.h>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

http_reply add(http_client& c, const std::string& id, const std::string& key = acme_key) {
  return c.request("POST", "/v1/entities/counter/" + id + "/add", json_headers(key), R"({"by":1})");
}

} // namespace

TEST_CASE(
  "quotas: 429 TENANT_QUOTA_EXCEEDED for a new entity at max_entities, then existing entities "
  "and other tenants answer 200, and /metrics counts it") {
  gateway_fixture f(
    [](runtime_config& rc, http_server_config&) { rc.tenant_quotas["acme"].max_entities = 1; });
  http_client c(f.port());
  REQUIRE(add(c, "c1").status == 200);
  auto r = add(c, "c2");
  CHECK(r.status == 429);
  CHECK(r.header("content-type") == "application/problem+json");
  CHECK(r.code() == "TENANT_QUOTA_EXCEEDED");
  auto p = r.json();
  CHECK(p["title"] == "Too Many Requests");
  CHECK(p["quota"] == "max_entities");
  CHECK(p["limit"] == 1);
  CHECK(r.header("retry-after").empty()); // waiting does not make room
  CHECK(f.entity_files() == 1);
  CHECK(add(c, "c1").status == 200);
  CHECK(add(c, "g1", globex_key).status == 200);
  auto m = c.request("GET", "/metrics");
  REQUIRE(m.status == 200);
  CHECK(m.body.find("factum_tenant_quota_refusals_total{quota=\"max_entities\"} 1\n") !=
        std::string::npos);
  CHECK(m.body.find("factum_tenant_entities{tenant=\"acme\"} 1\n") != std::string::npos);
  CHECK(m.body.find("factum_tenant_max_entities{tenant=\"acme\"} 1\n") != std::string::npos);
  // Only tenants with a quota have quota series (every tenant has request counters).
  CHECK(m.body.find("factum_tenant_entities{tenant=\"globex\"") == std::string::npos);
  CHECK(m.body.find("factum_tenant_bytes{tenant=\"globex\"") == std::string::npos);
  CHECK(m.body.find("factum_tenant_requests_total{tenant=\"globex\",class=\"2xx\"} 1\n") !=
        std::string::npos);
}

TEST_CASE(
  "quotas: 507 TENANT_STORAGE_QUOTA_EXCEEDED for writes at max_bytes, then reads and operator "
  "routes answer 200") {
  gateway_fixture f;
  {
    http_client c(f.port());
    REQUIRE(add(c, "c1").status == 200);
  }
  f.stop();
  // One byte: the entity's files are over it.
  f.start([](runtime_config& rc, http_server_config&) { rc.tenant_quotas["acme"].max_bytes = 1; });
  http_client c(f.port());
  auto r = add(c, "c1");
  CHECK(r.status == 507);
  CHECK(r.header("content-type") == "application/problem+json");
  CHECK(r.code() == "TENANT_STORAGE_QUOTA_EXCEEDED");
  CHECK(r.json()["title"] == "Insufficient Storage");
  CHECK(r.json()["quota"] == "max_bytes");
  CHECK(add(c, "c9").status == 507); // a new entity is a write too
  auto facts =
    c.request("GET", "/v1/entities/counter/c1/facts?type=counter", {{"X-API-Key", acme_key}});
  CHECK(facts.status == 200);
  CHECK(facts.json().size() == 1);
  auto breakers = c.request("GET", "/v1/entities/counter/c1/breakers", {{"X-API-Key", acme_key}});
  CHECK(breakers.status == 200);
  CHECK(add(c, "g1", globex_key).status == 200);
  auto m = c.request("GET", "/metrics");
  CHECK(m.body.find("factum_tenant_quota_refusals_total{quota=\"max_bytes\"} 2\n") !=
        std::string::npos);
  CHECK(m.body.find("factum_tenant_max_bytes{tenant=\"acme\"} 1\n") != std::string::npos);
}
