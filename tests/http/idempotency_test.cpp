// idempotency_test.cpp: the Idempotency-Key matrix over HTTP: replay with Idempotent-Replayed,
// 409 while the first request is in flight, 422 for another request under the same key, 400
// for a missing or malformed key, stored terminal failures, and two concurrent requests with
// one key (never two effects). Runs on the test thread plus client threads.
#include <doctest/doctest.h>

#include <future>

#include "factum/storage/entity_store.hpp"
#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// Whether a committed fact with this idempotency key and subtype is in the entity's file
/// (read-only, like `factum inspect`: the actor is busy inside the turn being observed).
bool committed(const std::filesystem::path& data, const entity_key& key, const std::string& idem,
               const std::string& subtype) {
  store_options ro;
  ro.data_dir = data;
  ro.read_only = true;
  auto s = entity_store::open(ro, key);
  if (!s)
    return false;
  fact_filter f;
  f.idempotency_key = idem;
  f.subtype = subtype;
  auto r = (*s)->query(f);
  return r && !r->empty();
}

} // namespace

TEST_CASE("idempotency: a replay answers the stored result with Idempotent-Replayed: true and "
          "writes nothing") {
  gateway_fixture f;
  http_client c(f.port());
  auto body = json{{"type", "payment"}, {"amount", "10.00"}, {"currency", "USD"}}.dump();
  auto first =
    c.request("POST", "/v1/entities/ledger/i1/append", json_headers(acme_key, "pay-1"), body);
  REQUIRE(first.status == 200);
  CHECK(first.header("idempotent-replayed").empty());
  for (int i = 0; i < 3; ++i) {
    auto again =
      c.request("POST", "/v1/entities/ledger/i1/append", json_headers(acme_key, "pay-1"), body);
    CHECK(again.status == 200);
    CHECK(again.header("idempotent-replayed") == "true");
    CHECK(again.body == first.body);
  }
  CHECK(f.facts("acme", "ledger", "i1").size() == 1);
}

TEST_CASE("idempotency: the same key with another request answers 422 IDEMPOTENCY_KEY_MISMATCH") {
  gateway_fixture f;
  http_client c(f.port());
  auto one = json{{"type", "payment"}, {"amount", "10.00"}, {"currency", "USD"}}.dump();
  auto other = json{{"type", "payment"}, {"amount", "99.00"}, {"currency", "USD"}}.dump();
  REQUIRE(
    c.request("POST", "/v1/entities/ledger/i2/append", json_headers(acme_key, "k"), one).status ==
    200);
  auto r = c.request("POST", "/v1/entities/ledger/i2/append", json_headers(acme_key, "k"), other);
  CHECK(r.status == 422);
  CHECK(r.code() == "IDEMPOTENCY_KEY_MISMATCH");
  CHECK(r.header("content-type") == "application/problem+json");
  // Another method of the same entity under the same key is another request, too.
  auto m = c.request("POST", "/v1/entities/ledger/i2/recent", json_headers(acme_key, "k"), "{}");
  CHECK(m.status == 422);
  CHECK(f.facts("acme", "ledger", "i2").size() == 1);
}

TEST_CASE("idempotency: 400 when a required key is missing or a key is malformed") {
  gateway_fixture f;
  http_client c(f.port());
  auto body = json{{"type", "x"}}.dump();
  auto missing = c.request("POST", "/v1/entities/ledger/i3/append", json_headers(), body);
  CHECK(missing.status == 400);
  CHECK(missing.code() == "IDEMPOTENCY_KEY_REQUIRED");
  for (std::string bad : {std::string(256, 'k'), std::string("caf\xc3\xa9"), std::string("a\tb")}) {
    auto r = c.request("POST", "/v1/entities/ledger/i3/append", json_headers(acme_key, bad), body);
    CHECK(r.status == 400);
    CHECK(r.code() == "INVALID_IDEMPOTENCY_KEY");
  }
  auto two = json_headers(acme_key, "a");
  two.emplace_back("Idempotency-Key", "b");
  auto r2 = c.request("POST", "/v1/entities/ledger/i3/append", two, body);
  CHECK(r2.status == 400);
  CHECK(r2.code() == "INVALID_IDEMPOTENCY_KEY");
  // 255 characters is the longest key.
  auto longest = c.request("POST", "/v1/entities/ledger/i3/append",
                           json_headers(acme_key, std::string(255, 'k')), body);
  CHECK(longest.status == 200);
  // A method that does not require a key runs without one.
  CHECK(c.request("POST", "/v1/entities/counter/i3/add", json_headers(), "{}").status == 200);
  CHECK(f.facts("acme", "ledger", "i3").size() == 1);
}

TEST_CASE("idempotency: 409 IDEMPOTENCY_KEY_IN_USE while the first request is in flight, then "
          "the stored result") {
  gateway_fixture f;
  auto body = json{{"n", 7}, {"ms", 1500}}.dump();
  auto first = std::async(std::launch::async, [&] {
    http_client c(f.port());
    return c.request("POST", "/v1/entities/probe/slow/slow_pair", json_headers(acme_key, "slow-1"),
                     body);
  });
  // The first request is inside its turn once its "begin" fact is committed (at the await).
  REQUIRE(eventually([&] {
    return committed(f.data_dir(), entity_key{"acme", "probe", "slow"}, "slow-1", "begin");
  }));
  http_client c(f.port());
  auto second =
    c.request("POST", "/v1/entities/probe/slow/slow_pair", json_headers(acme_key, "slow-1"), body);
  CHECK(second.status == 409);
  CHECK(second.code() == "IDEMPOTENCY_KEY_IN_USE");
  REQUIRE(first.wait_for(20s) == std::future_status::ready);
  auto r1 = first.get();
  REQUIRE_MESSAGE(r1.status == 200, r1.body);
  auto third =
    c.request("POST", "/v1/entities/probe/slow/slow_pair", json_headers(acme_key, "slow-1"), body);
  CHECK(third.status == 200);
  CHECK(third.header("idempotent-replayed") == "true");
  CHECK(third.body == r1.body);
  CHECK(f.facts("acme", "probe", "slow", {{"idempotency_key", "slow-1"}}).size() == 2);
}

TEST_CASE("idempotency: two concurrent requests with one key never cause two effects") {
  gateway_fixture f;
  for (int round = 0; round < 3; ++round) {
    auto key = "race-" + std::to_string(round);
    auto body = json{{"n", round}, {"ms", 200}}.dump();
    auto send = [&] {
      http_client c(f.port());
      return c.request("POST", "/v1/entities/probe/race/slow_pair", json_headers(acme_key, key),
                       body);
    };
    auto a = std::async(std::launch::async, send);
    auto b = std::async(std::launch::async, send);
    REQUIRE(a.wait_for(20s) == std::future_status::ready);
    REQUIRE(b.wait_for(20s) == std::future_status::ready);
    auto ra = a.get(), rb = b.get();
    CAPTURE(ra.body);
    CAPTURE(rb.body);
    bool one_conflict =
      (ra.status == 200 && rb.status == 409) || (ra.status == 409 && rb.status == 200);
    bool same_result = ra.status == 200 && rb.status == 200 && ra.body == rb.body;
    CHECK((one_conflict || same_result));
    // begin + end of exactly one run
    CHECK(f.facts("acme", "probe", "race", {{"idempotency_key", key}}).size() == 2);
  }
}

TEST_CASE("idempotency: a terminal failure is stored and replayed, a retryable one releases the "
          "key") {
  gateway_fixture f;
  http_client c(f.port());
  auto fail = json{{"fail", "client"}}.dump();
  auto r1 =
    c.request("POST", "/v1/entities/probe/t/append_then", json_headers(acme_key, "term"), fail);
  CHECK(r1.status == 400);
  CHECK(r1.code() == "PROBE_CLIENT");
  auto r2 =
    c.request("POST", "/v1/entities/probe/t/append_then", json_headers(acme_key, "term"), fail);
  CHECK(r2.status == 400);
  CHECK(r2.header("idempotent-replayed") == "true");
  CHECK(r2.body == r1.body);
  auto t1 = c.request("POST", "/v1/entities/probe/t/fail_then_succeed",
                      json_headers(acme_key, "retry"), json{{"times", 1}}.dump());
  CHECK(t1.status == 503);
  auto t2 = c.request("POST", "/v1/entities/probe/t/fail_then_succeed",
                      json_headers(acme_key, "retry"), json{{"times", 1}}.dump());
  CHECK(t2.status == 200);
  CHECK(t2.header("idempotent-replayed").empty());
}
