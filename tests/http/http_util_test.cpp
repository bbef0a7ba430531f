// http_util_test.cpp: regression tests for what fuzzing (tests/fuzz) found in the gateway's
// pure helpers and routes. A query value that is not UTF-8 once escaped gateway::handle as an
// uncaught nlohmann::json type_error (the facts arguments are dumped as JSON): the I/O thread
// logged it and the request never got an answer. A body with a NUL byte passed check_json
// (nlohmann stops at NUL) with anything after it unchecked. Runs on the test thread plus the
// fixture's.
#include <doctest/doctest.h>

#include "http/fixture.hpp"
#include "http_util.hpp"

using namespace factum;
using namespace factum::test;

namespace {

void check_invalid_query(const http_reply& r) {
  CHECK_MESSAGE(r.status == 400, r.status << " " << r.error << " " << r.body);
  CHECK(r.header("content-type") == "application/problem+json");
  CHECK(r.code() == "INVALID_QUERY");
}

} // namespace

TEST_CASE("split_query: a decoded name or value that is not UTF-8 is refused") {
  CHECK(http::split_query("tool_id=%FF") == std::nullopt);
  CHECK(http::split_query("%C3%28=1") == std::nullopt);
  CHECK(http::split_query("a=%ED%A0%80") == std::nullopt); // a UTF-16 surrogate
  CHECK(http::split_query("a=%C0%AF") == std::nullopt);    // overlong '/'
  auto ok = http::split_query("tool_id=%C3%A9t%C3%A9&x");
  REQUIRE(ok.has_value());
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].value == "\xc3\xa9t\xc3\xa9");
  CHECK((*ok)[1].name == "x");
  CHECK(http::valid_utf8("\xf0\x9f\x98\x80"));
  CHECK_FALSE(http::valid_utf8("\xf4\x90\x80\x80")); // above U+10FFFF
  CHECK_FALSE(http::valid_utf8("\xe2\x82"));         // truncated
}

TEST_CASE("GET facts with a query value that is not UTF-8: 400 INVALID_QUERY, and the server "
          "keeps answering") {
  gateway_fixture f;
  http_client c(f.port());
  for (auto q : {"?tool_id=%FF", "?type=%C3%28", "?trace_id=a%80b", "?%FF=1"}) {
    CAPTURE(q);
    auto r =
      c.request("GET", std::string("/v1/entities/ledger/u/facts") + q, {{"X-API-Key", acme_key}});
    check_invalid_query(r);
  }
  auto r =
    c.request("GET", "/v1/entities/ledger/u/dead-letters?status=%FE", {{"X-API-Key", acme_key}});
  check_invalid_query(r);
  // A valid query reaches the runtime: entity u was never written, so it is not found there.
  auto fine =
    c.request("GET", "/v1/entities/ledger/u/facts?tool_id=%C3%A9", {{"X-API-Key", acme_key}});
  CHECK(fine.status == 404);
  CHECK(fine.code() == "ENTITY_NOT_FOUND");
}

TEST_CASE("check_json: a NUL byte anywhere is invalid JSON, also after a complete value") {
  using namespace std::string_literals;
  CHECK(http::check_json("1"s, 64).verdict == http::json_verdict::ok);
  CHECK(http::check_json("1\0[[[[[[garbage"s, 2).verdict == http::json_verdict::invalid);
  CHECK(http::check_json("{\"a\":1}\0"s, 64).verdict == http::json_verdict::invalid);
  CHECK(http::check_json("\0"s, 64).verdict == http::json_verdict::invalid);
}

TEST_CASE("POST with a NUL byte in the JSON body: 400 INVALID_JSON, nothing appended") {
  using namespace std::string_literals;
  gateway_fixture f;
  http_client c(f.port());
  auto r = c.request("POST", "/v1/entities/ledger/nul/append", json_headers(acme_key, "nul-1"),
                     "{\"type\":\"note\"}\0\xff\xfe"s);
  CHECK_MESSAGE(r.status == 400, r.status << " " << r.body);
  CHECK(r.code() == "INVALID_JSON");
  // Nothing reached the entity: it was never written.
  auto read = c.request("GET", "/v1/entities/ledger/nul/facts", {{"X-API-Key", acme_key}});
  CHECK(read.code() == "ENTITY_NOT_FOUND");
}
