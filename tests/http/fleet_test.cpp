// fleet_test.cpp: a tenant's view of its fleet over HTTP: GET /v1/entities lists the tenant's
// entities (never another tenant's) from the tenant index, in (type, id) order, filtered by
// type, in pages linked by a cursor; bad queries are 400. Test thread plus the server's threads.
#include <doctest/doctest.h>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

void add(http_client& c, const std::string& id, const std::string& key = acme_key) {
  REQUIRE(c.request("POST", "/v1/entities/counter/" + id + "/add", json_headers(key), R"({"by":1})")
            .status == 200);
}

} // namespace

TEST_CASE("fleet: GET /v1/entities lists the tenant's own entities by type, in pages linked by "
          "a cursor, and never another tenant's") {
  gateway_fixture f;
  http_client c(f.port());
  for (auto id : {"c3", "c1", "c2"})
    add(c, id);
  REQUIRE(c.request("POST", "/v1/entities/ledger/l1/append", json_headers(acme_key, "l-1"),
                    R"({"type":"x"})")
            .status == 200);
  add(c, "g1", globex_key);
  auto auth = header_list{{"X-API-Key", acme_key}};
  auto all = c.request("GET", "/v1/entities", auth);
  REQUIRE_MESSAGE(all.status == 200, all.body);
  auto list = all.json();
  REQUIRE(list.size() == 4);
  CHECK(list[0]["type"] == "counter");
  CHECK(list[0]["id"] == "c1");
  CHECK(list[2]["id"] == "c3");
  CHECK(list[3]["type"] == "ledger");
  CHECK(all.header("link").empty()); // one page holds them all
  for (auto& e : list)
    CHECK(e["id"] != "g1");
  // Pages of two, by type: the Link carries the cursor.
  auto p1 = c.request("GET", "/v1/entities?type=counter&limit=2", auth);
  REQUIRE(p1.status == 200);
  REQUIRE(p1.json().size() == 2);
  auto link = p1.header("link");
  REQUIRE_FALSE(link.empty());
  CHECK(link == "</v1/entities?type=counter&limit=2&after=counter/c2>; rel=\"next\"");
  auto p2 = c.request("GET", link.substr(1, link.find('>') - 1), auth);
  REQUIRE(p2.status == 200);
  REQUIRE(p2.json().size() == 1);
  CHECK(p2.json()[0]["id"] == "c3");
  // The other tenant sees its own only.
  auto g = c.request("GET", "/v1/entities", {{"X-API-Key", globex_key}}).json();
  REQUIRE(g.size() == 1);
  CHECK(g[0]["id"] == "g1");
  // Refusals.
  CHECK(c.request("GET", "/v1/entities").status == 401);
  CHECK(c.request("GET", "/v1/entities?after=counter", auth).code() == "INVALID_QUERY");
  CHECK(c.request("GET", "/v1/entities?after=a/../b", auth).code() == "INVALID_QUERY");
  CHECK(c.request("GET", "/v1/entities?limit=0", auth).code() == "INVALID_QUERY");
  CHECK(c.request("GET", "/v1/entities?owner=x", auth).code() == "INVALID_QUERY");
  CHECK(c.request("POST", "/v1/entities", auth).status == 405);
}
