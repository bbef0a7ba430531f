// degradation_test.cpp: degradation levels over HTTP against a real in-process server: each
// transition (a critical tool's breaker open -> 2 and back to 0, a quarantine -> 3, a tenant at
// its byte quota -> 3, an operator's floor -> 4, kept across a restart), what each refuses (503
// DEGRADED with the level and Retry-After, a tool turned off inside a call), and where the
// level shows: GET /v1/degradation, /healthz, /metrics and lifecycle facts in the tenant's
// runtime entity. Another tenant is never moved. Test thread plus the server's threads.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>
#include <limits>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

/// A tool answering 503 (`vendor`, critical) and one answering 200 (`sms`).
void add_tools(runtime_config& rc) {
  rc.tools["vendor"] = [](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.ok = false;
    r.http_status = 503;
    r.body = json{{"status", 503}};
    done(std::move(r));
  };
  rc.tools["sms"] = [](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    r.body = json{{"sent", true}};
    done(std::move(r));
  };
  tool_policy p;
  p.retry = {{"base_delay_ms", 5}, {"max_delay_ms", 10}, {"max_attempts", 1}, {"jitter", "none"}};
  rc.tool_policies["vendor"] = p;
  rc.tool_policies["sms"] = p;
}

/// Levels on, evaluated every 20 ms, falling at once; the matrix of the tests.
void enable(runtime_config& rc) {
  auto& d = rc.degradation;
  d.enabled = true;
  d.critical_tools = {"vendor"};
  d.tenants = {"acme", "globex"};
  d.recover_after = std::chrono::milliseconds(0);
  d.check_interval = std::chrono::milliseconds(20);
  d.retry_after = std::chrono::seconds(7);
  d.features = {{"reports", 0, {"ledger.recent"}, {}},
                {"sms", 1, {}, {"sms"}},
                {"writes", 3, {"ledger.*", "counter.*"}, {}}};
}

/// The fixture's tweak of most cases: both tools and the levels.
void tools_and_levels(runtime_config& rc, http_server_config&) {
  add_tools(rc);
  enable(rc);
}

int level(http_client& c, const std::string& key = acme_key) {
  auto r = c.request("GET", "/v1/degradation", {{"X-API-Key", key}});
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return r.json()["level"].get<int>();
}

bool level_becomes(http_client& c, int want, const std::string& key = acme_key) {
  return eventually([&] { return level(c, key) == want; });
}

/// The tenant's lifecycle facts of degradation, oldest first (none before the first is written).
json level_facts(gateway_fixture& f, const std::string& tenant, const std::string& subtype) {
  auto r = f.rt().call_sync(entity_key{tenant, "factum.runtime", "degradation"}, "@facts",
                            json{{"type", "lifecycle"}, {"subtype", subtype}}.dump());
  if (!r.ok && r.code == "ENTITY_NOT_FOUND")
    return json::array();
  REQUIRE_MESSAGE(r.ok, r.body);
  return r.json();
}

http_reply recent(http_client& c, const std::string& key = acme_key) {
  return c.request("POST", "/v1/entities/ledger/l1/recent", json_headers(key), "{}");
}

} // namespace

TEST_CASE("degradation: a critical tool's open breaker puts its tenant at 2, refuses the features "
          "off at 2 with 503 DEGRADED, shows in /healthz and /metrics, and a reset brings 0") {
  gateway_fixture f(tools_and_levels);
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  CHECK(level(c) == 0);
  REQUIRE(c.request("POST", "/v1/entities/ledger/l1/append", json_headers(acme_key, "a-1"),
                    R"({"type":"x"})")
            .status == 200);
  REQUIRE(c.request("POST", "/v1/entities/ledger/l1/append", json_headers(globex_key, "g-1"),
                    R"({"type":"x"})")
            .status == 200);
  CHECK(recent(c).status == 200);
  // An entity of acme holds the critical tool's breaker open.
  REQUIRE(c.request("POST", "/v1/entities/webhook/w1/deliver", json_headers(acme_key, "d-1"),
                    json{{"tool", "vendor"}}.dump())
            .status == 503);
  auto forced = c.request("POST", "/v1/entities/webhook/w1/breakers/vendor/force-open", auth);
  REQUIRE_MESSAGE(forced.status == 200, forced.body);
  REQUIRE(level_becomes(c, 2));
  auto st = c.request("GET", "/v1/degradation", auth).json();
  CHECK(st["level_name"] == "limited");
  CHECK(st["reasons"] == json::array({"breaker_open:vendor"}));
  CHECK(st["features_off"] == json::array({"reports", "sms"}));

  auto refused = recent(c);
  CHECK(refused.status == 503);
  CHECK(refused.code() == "DEGRADED");
  CHECK(refused.json()["level"] == 2);
  CHECK(refused.json()["feature"] == "reports");
  CHECK(refused.header("retry-after") == "7");
  CHECK(recent(c, globex_key).status == 200); // globex's entities hold no open breaker
  CHECK(level(c, globex_key) == 0);
  CHECK(c.request("POST", "/v1/entities/ledger/l1/append", json_headers(acme_key, "a-2"),
                  R"({"type":"x"})")
          .status == 200); // writes run up to 3

  // A tool the level turns off fails inside the call, without reaching the tool.
  auto sms = c.request("POST", "/v1/entities/webhook/w2/deliver", json_headers(acme_key, "s-1"),
                       json{{"tool", "sms"}}.dump());
  CHECK(sms.status == 503);
  CHECK(sms.body.find("DEGRADED") != std::string::npos);
  CHECK(f.facts("acme", "webhook", "w2", {{"type", "error"}})[0]["data"]["error_code"] ==
        "DEGRADED");

  auto health = json::parse(c.request("GET", "/healthz", {}).body);
  CHECK(health["degradation"]["level"] == 2);
  CHECK(health["degradation"]["tenants"] == json{{"acme", 2}});
  auto metrics = c.request("GET", "/metrics", {}).body;
  CHECK(metrics.find("factum_degradation_level{tenant=\"acme\"} 2\n") != std::string::npos);
  CHECK(metrics.find("factum_degradation_level{tenant=\"globex\"} 0\n") != std::string::npos);

  REQUIRE(c.request("POST", "/v1/entities/webhook/w1/breakers/vendor/reset", auth).status == 200);
  REQUIRE(level_becomes(c, 0));
  CHECK(recent(c).status == 200);
  // Each move is a lifecycle fact of acme's runtime entity, readable over the facts route.
  json moves;
  REQUIRE(eventually([&] {
    moves = level_facts(f, "acme", "degradation_level_changed");
    return moves.size() >= 2;
  }));
  CHECK(moves[0]["data"]["to"] == 2);
  CHECK(moves[0]["data"]["reasons"] == json::array({"breaker_open:vendor"}));
  CHECK(moves.back()["data"]["to"] == 0);
  auto over_http =
    c.request("GET", "/v1/entities/factum.runtime/degradation/facts?type=lifecycle", auth);
  CHECK(over_http.status == 200);
  CHECK(over_http.json().size() >= 2);
  CHECK(
    c.request("GET", "/v1/entities/factum.runtime/degradation/facts", {{"X-API-Key", globex_key}})
      .status == 404); // globex never moved: it has no such entity
  CHECK(f.rt().metrics().value("factum_degradation_changes_total") >= 2);
}

TEST_CASE("degradation: an operator's floor of 4 refuses every covered method, is recorded with "
          "who and why, survives a restart, and only a key with scope operate sets it") {
  auto tweak = tools_and_levels;
  gateway_fixture f(tweak);
  http_client c(f.port());
  auto op = json_headers(acme_key);
  CHECK(c.request("PUT", "/v1/degradation", json_headers(globex_key), R"({"level":4,"reason":"x"})")
          .status == 403);
  for (auto bad :
       {R"({"level":5,"reason":"x"})", R"({"level":4})", R"({"reason":"x"})",
        R"({"level":4,"reason":"x","until":1})", R"([4])", R"({"level":"4","reason":"x"})"}) {
    auto r = c.request("PUT", "/v1/degradation", op, bad);
    CHECK_MESSAGE(r.status == 400, bad);
    CHECK(r.code() == "INVALID_ARGUMENT");
  }
  CHECK(level(c) == 0);
  auto set = c.request("PUT", "/v1/degradation", op, R"({"level":4,"reason":"bad deploy"})");
  REQUIRE_MESSAGE(set.status == 200, set.body);
  CHECK(set.json()["level"] == 4);
  CHECK(set.json()["override"]["reason"] == "bad deploy");
  auto refused = c.request("POST", "/v1/entities/counter/c1/add", json_headers(), R"({"by":1})");
  CHECK(refused.status == 503);
  CHECK(refused.json()["feature"] == "writes");
  CHECK(c.request("POST", "/v1/entities/counter/c1/add", json_headers(globex_key), R"({"by":1})")
          .status == 200);
  auto facts = level_facts(f, "acme", "degradation_override");
  REQUIRE(facts.size() == 1);
  CHECK(facts[0]["data"]["override"]["level"] == 4);
  CHECK(facts[0]["data"]["override"]["actor"].get<std::string>().rfind("api-key:", 0) == 0);
  CHECK(facts[0]["data"]["to"] == 4);

  f.stop();
  f.start(tweak, f.data_dir());
  http_client c2(f.port());
  REQUIRE(level_becomes(c2, 4)); // read back from the runtime entity at start
  CHECK(
    c2.request("GET", "/v1/degradation", {{"X-API-Key", acme_key}}).json()["override"]["reason"] ==
    "bad deploy");
  auto cleared = c2.request("PUT", "/v1/degradation", op, R"({"level":null,"reason":"fixed"})");
  REQUIRE(cleared.status == 200);
  CHECK(cleared.json()["level"] == 0);
  CHECK(c2.request("POST", "/v1/entities/counter/c1/add", json_headers(), R"({"by":1})").status ==
        200);
  f.stop();
  f.start(tweak, f.data_dir());
  http_client c3(f.port());
  CHECK(level(c3) == 0); // the last override removed the floor
}

TEST_CASE("degradation: a quarantined entity puts its tenant at 3 for the hold, while another "
          "tenant stays at 0") {
  auto failing = std::make_shared<std::atomic<bool>>(false);
  gateway_fixture f([failing](runtime_config& rc, http_server_config&) {
    enable(rc);
    rc.degradation.quarantine_hold = std::chrono::minutes(10);
    rc.storage_fault = [failing](uint64_t, std::string_view what) {
      return failing->load() && what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    };
  });
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/counter/q1/add", json_headers(), R"({"by":1})").status ==
          200);
  failing->store(true);
  auto lost = c.request("POST", "/v1/entities/counter/q1/add", json_headers(), R"({"by":1})");
  CHECK(lost.status == 503);
  failing->store(false);
  REQUIRE(level_becomes(c, 3));
  CHECK(c.request("GET", "/v1/degradation", {{"X-API-Key", acme_key}}).json()["reasons"] ==
        json::array({"quarantine"}));
  CHECK(level(c, globex_key) == 0);
  REQUIRE(eventually([&] {
    auto m = level_facts(f, "acme", "degradation_level_changed");
    return m.size() == 1 && m[0]["data"]["to"] == 3;
  }));
}

TEST_CASE("degradation: a tenant whose files reach its byte quota is at 3") {
  gateway_fixture f([](runtime_config& rc, http_server_config&) {
    enable(rc);
    rc.tenant_quotas["acme"].max_bytes = 1; // the first file reaches it
  });
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/counter/b1/add", json_headers(), R"({"by":1})").status ==
          200);
  REQUIRE(level_becomes(c, 3));
  CHECK(c.request("GET", "/v1/degradation", {{"X-API-Key", acme_key}}).json()["reasons"] ==
        json::array({"over_quota"}));
  CHECK(level(c, globex_key) == 0);
}

TEST_CASE("degradation: not enabled, every tenant is at 0, /healthz says nothing of it and a "
          "floor is refused 409") {
  gateway_fixture f;
  http_client c(f.port());
  auto st = c.request("GET", "/v1/degradation", {{"X-API-Key", acme_key}}).json();
  CHECK(st["enabled"] == false);
  CHECK(st["level"] == 0);
  CHECK(!json::parse(c.request("GET", "/healthz", {}).body).contains("degradation"));
  auto r = c.request("PUT", "/v1/degradation", json_headers(), R"({"level":4,"reason":"x"})");
  CHECK(r.status == 409);
  CHECK(r.code() == "DEGRADATION_NOT_ENABLED");
}

TEST_CASE("degradation: a breaker of a tool that is not critical puts its tenant at 1, which turns "
          "off only what runs at 0") {
  gateway_fixture f(tools_and_levels);
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  REQUIRE(c.request("POST", "/v1/entities/webhook/s1/deliver", json_headers(acme_key, "s-1"),
                    json{{"tool", "sms"}}.dump())
            .status == 200);
  REQUIRE(c.request("POST", "/v1/entities/webhook/s1/breakers/sms/force-open", auth).status == 200);
  REQUIRE(level_becomes(c, 1));
  auto st = c.request("GET", "/v1/degradation", auth).json();
  CHECK(st["reasons"] == json::array({"breaker_open:sms"}));
  CHECK(st["features_off"] == json::array({"reports"}));
  CHECK(recent(c).code() == "DEGRADED");
  REQUIRE(c.request("POST", "/v1/entities/webhook/s1/breakers/sms/reset", auth).status == 200);
  REQUIRE(level_becomes(c, 0));
}

TEST_CASE("degradation: a data disk below min_free_bytes puts every tenant at 3") {
  gateway_fixture f([](runtime_config& rc, http_server_config&) {
    enable(rc);
    rc.degradation.min_free_bytes = std::numeric_limits<int64_t>::max(); // no disk has that
  });
  http_client c(f.port());
  REQUIRE(level_becomes(c, 3));
  REQUIRE(level_becomes(c, 3, globex_key));
  CHECK(c.request("GET", "/v1/degradation", {{"X-API-Key", globex_key}}).json()["reasons"] ==
        json::array({"disk_low"}));
  auto r = c.request("POST", "/v1/entities/counter/d1/add", json_headers(), R"({"by":1})");
  CHECK(r.status == 200); // writes run up to 3
  CHECK(recent(c, globex_key).code() == "DEGRADED");
}
