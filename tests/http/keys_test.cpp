// keys_test.cpp: GET /v1/entities/{type}/{id}/keys, an entity's idempotency keys over HTTP
// (docs/http-api.md, "Idempotency keys"): the keys of keyed calls, completed and failed, in key
// order, paged by the Link's cursor; tenants; refusals of bad parameters. Runs on the test
// thread against an in-process gateway.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

/// The target of a Link header's rel="next", or "" when there is none.
std::string next_target(const http_reply& r) {
  auto link = r.header("link");
  auto open = link.find('<');
  auto close = link.find('>');
  if (link.find("rel=\"next\"") == std::string::npos || open == std::string::npos ||
      close == std::string::npos)
    return {};
  return link.substr(open + 1, close - open - 1);
}

} // namespace

TEST_CASE("keys route: the keys of keyed calls are listed in key order and paged by the Link") {
  gateway_fixture f;
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  // Keys with characters a query must encode; one call fails for good (its failure is stored).
  std::vector<std::string> keys = {"k 3", "k&1", "k/5", "k?2", "k+4", "k%6"};
  for (auto& k : keys) {
    auto r = c.request("POST", "/v1/entities/ledger/keys1/append", json_headers(acme_key, k),
                       json{{"type", "note"}, {"data", {{"k", k}}}}.dump());
    REQUIRE_MESSAGE(r.status == 200, r.body);
  }
  auto bad = c.request("POST", "/v1/entities/ledger/keys1/append", json_headers(acme_key, "k!0"),
                       json{{"subtype", "no type"}}.dump());
  REQUIRE_MESSAGE(bad.status == 400, bad.body);
  keys.push_back("k!0");
  // An unkeyed call leaves no key.
  REQUIRE(
    c.request("POST", "/v1/entities/counter/keys1/add", json_headers(acme_key), "{}").status ==
    200);
  auto unkeyed = c.request("GET", "/v1/entities/counter/keys1/keys", auth);
  REQUIRE(unkeyed.status == 200);
  CHECK(unkeyed.json() == json::array());
  std::sort(keys.begin(), keys.end());

  auto all = c.request("GET", "/v1/entities/ledger/keys1/keys", auth);
  REQUIRE_MESSAGE(all.status == 200, all.body);
  MESSAGE("GET keys: " << all.body);
  CHECK(next_target(all).empty());
  auto listed = all.json();
  REQUIRE(listed.size() == keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    CHECK(listed[i]["key"] == keys[i]);
  auto& failed = listed[1]; // bytewise: "k 3" < "k!0" < "k%6" ...
  REQUIRE(failed["key"] == "k!0");
  CHECK(failed["state"] == "failed");
  CHECK(failed["status"] == 400);
  CHECK(failed["code"] == bad.code());
  CHECK(failed["response_bytes"] == bad.body.size());
  auto& done = listed[0];
  CHECK(done["state"] == "completed");
  CHECK(done["status"] == 200);
  CHECK(done.contains("code")); // every member is there, null when it does not apply
  CHECK(done["code"].is_null());
  CHECK(done["created_at"].get<int64_t>() > 0);
  CHECK(done["expires_at"].get<int64_t>() > done["created_at"].get<int64_t>());
  CHECK(done["response_bytes"].get<size_t>() > 0);

  // Pages of 2 by the Link: every key once, in order, and the last page has no Link.
  std::vector<std::string> paged;
  std::string target = "/v1/entities/ledger/keys1/keys?limit=2";
  int pages = 0;
  while (!target.empty() && pages < 10) {
    auto p = c.request("GET", target, auth);
    REQUIRE_MESSAGE(p.status == 200, (target + ": " + p.body));
    CHECK(p.json().size() <= 2);
    for (auto& k : p.json())
      paged.push_back(k["key"]);
    target = next_target(p);
    if (!target.empty())
      CHECK(target.find("limit=2") != std::string::npos);
    ++pages;
  }
  CHECK(pages == 4);
  CHECK(paged == keys);
  // A cursor the client names itself: the keys after it.
  auto after = c.request("GET", "/v1/entities/ledger/keys1/keys?after=k%2F5", auth);
  REQUIRE(after.status == 200);
  REQUIRE(after.json().size() == 1);
  CHECK(after.json()[0]["key"] == "k?2");
}

TEST_CASE("keys route: another tenant's key sees 404 or only its own keys, and bad parameters "
          "are refused") {
  gateway_fixture f;
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/ledger/keys2/append", json_headers(acme_key, "a-1"),
                    json{{"type", "note"}}.dump())
            .status == 200);
  auto globex = header_list{{"X-API-Key", globex_key}};
  auto none = c.request("GET", "/v1/entities/ledger/keys2/keys", globex);
  CHECK(none.status == 404);
  CHECK(none.code() == "ENTITY_NOT_FOUND");
  REQUIRE(c.request("POST", "/v1/entities/ledger/keys2/append", json_headers(globex_key, "g-1"),
                    json{{"type", "note"}}.dump())
            .status == 200);
  auto own = c.request("GET", "/v1/entities/ledger/keys2/keys", globex);
  REQUIRE(own.status == 200);
  REQUIRE(own.json().size() == 1);
  CHECK(own.json()[0]["key"] == "g-1");
  CHECK(c.request("GET", "/v1/entities/ledger/keys2/keys").status == 401);

  auto acme = header_list{{"X-API-Key", acme_key}};
  for (std::string q : {"limit=0", "limit=1001", "limit=-1", "limit=ten",
                        "after=", "after=a&after=b", "after=%ZZ", "after=%01", "colour=red"}) {
    auto r = c.request("GET", "/v1/entities/ledger/keys2/keys?" + q, acme);
    CHECK_MESSAGE(r.status == 400, (q + ": " + r.body));
    CHECK_MESSAGE(r.code() == "INVALID_QUERY", q);
    CHECK(r.header("content-type") == "application/problem+json");
  }
  auto max = c.request("GET", "/v1/entities/ledger/keys2/keys?limit=1000", acme);
  CHECK(max.status == 200);
  CHECK(max.json().size() == 1);
}
