// fleet_test.cpp: a tenant's view of its fleet over HTTP: GET /v1/entities lists the tenant's
// entities (never another tenant's) from the tenant index, in (type, id) order or by last
// activity, filtered by type, in pages linked by a cursor; GET /v1/dead-letters lists dead
// letters across the tenant's entities by state and reason, POST /v1/dead-letters/{retry|
// discard} acts on them in bulk (dry run, limit, cursor), GET /v1/breakers sums breakers per
// tool; /metrics carries the dead letter gauges; a summary the index lost to a failed write is
// read again from the files at the next start. Bad input is 400 and changes nothing. Test thread
// plus the server's threads.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "factum/storage/fact.hpp"
#include "factum/storage/sha256.hpp"
#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace fleet_test {

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

namespace {

constexpr const char* globex_operator_key = "key-globex-operator";

/// A tool that answers 429 to a payload {"mode":"bad"} (rate_limit, which the rules below never
/// retry automatically: a pending dead letter) and 503 otherwise (server_error: a dead letter
/// scheduled for an automatic retry in an hour), until `healthy` is set: then 200.
void add_vendor(runtime_config& rc, std::atomic<bool>* healthy) {
  rc.tools["vendor"] = [healthy](const tool_request& req, std::function<void(tool_reply)> done) {
    tool_reply r;
    bool bad = req.payload.value("mode", "") == "bad";
    r.ok = healthy && healthy->load();
    r.http_status = r.ok ? 200 : bad ? 429 : 503;
    r.body = json{{"status", r.http_status}};
    done(std::move(r));
  };
  tool_policy p;
  p.retry = {{"base_delay_ms", 1}, {"max_delay_ms", 2}, {"max_attempts", 2}, {"jitter", "none"}};
  rc.tool_policies["vendor"] = std::move(p);
  rc.dead_letter_rules = {{"rate_limit", {{"auto_retry_after_ms", nullptr}}}};
}

/// The fixture with the vendor, and globex given an operator key too.
gateway_fixture::tweak fleet_setup(std::atomic<bool>* healthy = nullptr) {
  return [healthy](runtime_config& rc, http_server_config& hc) {
    add_vendor(rc, healthy);
    for (auto& t : hc.tenants)
      if (t.name == "globex")
        t.keys.push_back({api_key_sha256(globex_operator_key), scope_all});
  };
}

/// A delivery that fails: a dead letter of webhook/`id`.
void fail_delivery(http_client& c, const std::string& id, bool bad,
                   const std::string& key = acme_key) {
  static int n = 0; // webhook.deliver requires an Idempotency-Key
  auto r = c.request("POST", "/v1/entities/webhook/" + id + "/deliver",
                     json_headers(key, "fleet-" + std::to_string(++n)),
                     json{{"tool", "vendor"}, {"payload", {{"mode", bad ? "bad" : "ok"}}}}.dump());
  REQUIRE_MESSAGE(r.status >= 400, r.body);
  REQUIRE_MESSAGE(!r.json().value("dead_letter_id", "").empty(), r.body);
}

json get_json(http_client& c, const std::string& target, const std::string& key = acme_key) {
  auto r = c.request("GET", target, {{"X-API-Key", key}});
  REQUIRE_MESSAGE(r.status == 200, target << ": " << r.body);
  return r.json();
}

http_reply post(http_client& c, const std::string& target, const json& body,
                const std::string& key = acme_key) {
  return c.request("POST", target, json_headers(key), body.dump());
}

} // namespace

TEST_CASE("fleet: GET /v1/dead-letters lists the tenant's dead letters across its entities by "
          "state and reason, in pages, and never another tenant's") {
  gateway_fixture f(fleet_setup());
  http_client c(f.port());
  for (auto id : {"w1", "w2", "w3"})
    fail_delivery(c, id, false);
  for (auto id : {"w4", "w5"})
    fail_delivery(c, id, true);
  fail_delivery(c, "g1", true, globex_key);
  auto all = get_json(c, "/v1/dead-letters");
  CHECK(all["matched"] == 5);
  REQUIRE(all["dead_letters"].size() == 5);
  CHECK(all["next"].is_null());
  for (auto& d : all["dead_letters"]) {
    CHECK(d["entity_type"] == "webhook");
    CHECK(d["entity_id"] != "g1");
  }
  auto pending = get_json(c, "/v1/dead-letters?state=pending");
  CHECK(pending["matched"] == 2);
  REQUIRE(pending["dead_letters"].size() == 2);
  CHECK(pending["dead_letters"][0]["entity_id"] == "w4");
  CHECK(pending["dead_letters"][0]["reason"] == "rate_limit");
  CHECK(get_json(c, "/v1/dead-letters?reason=rate_limit")["matched"] == 2);
  // Pages of two: the cursor in "next" and in the Link.
  auto auth_header = [](const std::string& key) { return header_list{{"X-API-Key", key}}; };
  auto p1 = c.request("GET", "/v1/dead-letters?state=scheduled&reason=server_error&limit=2",
                      auth_header(acme_key));
  REQUIRE_MESSAGE(p1.status == 200, p1.body);
  CHECK(p1.json()["matched"] == 3);
  REQUIRE(p1.json()["dead_letters"].size() == 2);
  auto link = p1.header("link");
  REQUIRE_FALSE(link.empty());
  auto p2 = get_json(c, link.substr(1, link.find('>') - 1));
  REQUIRE(p2["dead_letters"].size() == 1);
  CHECK(p2["dead_letters"][0]["entity_id"] == "w3");
  CHECK(p2["next"].is_null());
  // Pages of one: each entity's cursor ends it, and the next page starts at the next entity.
  std::vector<std::string> ones;
  for (std::string t = "/v1/dead-letters?limit=1"; !t.empty() && ones.size() < 10;) {
    auto r = c.request("GET", t, auth_header(acme_key));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    auto body = r.json();
    for (auto& d : body["dead_letters"])
      ones.push_back(d["entity_id"].get<std::string>());
    auto l = r.header("link");
    t = l.empty() ? "" : l.substr(1, l.find('>') - 1);
  }
  auto want = std::vector<std::string>{"w1", "w2", "w3", "w4", "w5"};
  CHECK_MESSAGE(ones == want, json(ones).dump());
  // The other tenant sees its own only.
  auto g = get_json(c, "/v1/dead-letters", globex_key);
  CHECK(g["matched"] == 1);
  REQUIRE(g["dead_letters"].size() == 1);
  CHECK(g["dead_letters"][0]["entity_id"] == "g1");
  // Refusals.
  auto auth = header_list{{"X-API-Key", acme_key}};
  CHECK(c.request("GET", "/v1/dead-letters").status == 401);
  for (auto q : {"state=bogus", "limit=0", "limit=1001", "after=zzz", "after=e30", "owner=x",
                 "type=a/../b"}) {
    auto r = c.request("GET", std::string("/v1/dead-letters?") + q, auth);
    CHECK_MESSAGE(r.code() == "INVALID_QUERY", q << ": " << r.body);
  }
  CHECK(c.request("DELETE", "/v1/dead-letters", auth).status == 405);
}

TEST_CASE("fleet: POST /v1/dead-letters/{retry|discard} acts on dead letters by filter through "
          "their entities, with a dry run, a limit and a cursor, and bad input changes nothing") {
  std::atomic<bool> healthy{false};
  gateway_fixture f(fleet_setup(&healthy));
  http_client c(f.port());
  for (auto id : {"w1", "w2"})
    fail_delivery(c, id, false);
  for (auto id : {"w4", "w5"})
    fail_delivery(c, id, true);
  fail_delivery(c, "g1", true, globex_key);
  auto pending_count = [&](const std::string& key = acme_key) {
    return get_json(c, "/v1/dead-letters?state=pending", key)["matched"].get<int64_t>();
  };
  // Bad input: 400 INVALID_ARGUMENT (or the transport's own code), and nothing moves.
  for (auto body : {R"({"states":"pending"})", R"({"state":"nope"})", R"({"limit":0})",
                    R"({"limit":1001})", R"({"limit":"5"})", R"({"after":"zzz"})",
                    R"({"dry_run":"yes"})", R"({"reason":""})", R"([])"}) {
    auto r = c.request("POST", "/v1/dead-letters/discard", json_headers(), body);
    CHECK_MESSAGE(r.code() == "INVALID_ARGUMENT", body << ": " << r.body);
  }
  CHECK(c.request("POST", "/v1/dead-letters/discard", json_headers(acme_key, "k-1"), "{}").code() ==
        "INVALID_ARGUMENT");
  CHECK(c.request("POST", "/v1/dead-letters/discard?x=1", json_headers(), "{}").code() ==
        "INVALID_QUERY");
  CHECK(c.request("POST", "/v1/dead-letters/acknowledge", json_headers(), "{}").status == 404);
  // Operating needs the scope: globex's plain key may not.
  CHECK(post(c, "/v1/dead-letters/discard", json::object(), globex_key).status == 403);
  CHECK(pending_count() == 2);
  // A dry run says what would be done and does nothing.
  auto dry = post(c, "/v1/dead-letters/discard", {{"state", "pending"}, {"dry_run", true}});
  REQUIRE_MESSAGE(dry.status == 200, dry.body);
  MESSAGE("dry run: " << dry.body);
  CHECK(dry.json()["matched"] == 2);
  CHECK(dry.json()["would_act"] == 2);
  CHECK(dry.json()["results"].size() == 2);
  CHECK(pending_count() == 2);
  CHECK(f.facts("acme", "webhook", "w4", {{"subtype", "dead_letter_discard"}}).empty());
  // Another tenant's bulk action never reaches acme's entities.
  auto g = post(c, "/v1/dead-letters/discard", {{"state", "pending"}}, globex_operator_key);
  REQUIRE_MESSAGE(g.status == 200, g.body);
  CHECK(g.json()["acted"] == 1);
  CHECK(g.json()["results"][0]["id"] == "g1");
  CHECK(pending_count(globex_key) == 0);
  CHECK(pending_count() == 2);
  // One at a time: the cursor goes on where the first stopped.
  auto first = post(c, "/v1/dead-letters/discard",
                    {{"state", "pending"}, {"limit", 1}, {"note", "payloads fixed upstream"}});
  REQUIRE_MESSAGE(first.status == 200, first.body);
  CHECK(first.json()["acted"] == 1);
  CHECK(first.json()["results"][0]["new_status"] == "discarded");
  REQUIRE(first.json()["next"].is_string());
  auto second = post(c, "/v1/dead-letters/discard",
                     {{"state", "pending"}, {"limit", 1}, {"after", first.json()["next"]}});
  REQUIRE_MESSAGE(second.status == 200, second.body);
  CHECK(second.json()["acted"] == 1);
  CHECK(second.json()["results"][0]["id"] == "w5");
  CHECK(pending_count() == 0);
  CHECK(get_json(c, "/v1/dead-letters?state=discarded")["matched"] == 2);
  // Each action went through the entity: its fact says who and why.
  auto moved = f.facts("acme", "webhook", "w4", {{"subtype", "dead_letter_discard"}});
  REQUIRE(moved.size() == 1);
  CHECK(moved[0]["data"]["actor"] == "api-key:" + api_key_sha256(acme_key).substr(0, 12));
  CHECK(moved[0]["data"]["reason"] == "payloads fixed upstream");
  // A retry of the scheduled ones once the vendor is back: each is resolved by its entity.
  healthy = true;
  auto retry = post(c, "/v1/dead-letters/retry", {{"state", "scheduled"}});
  REQUIRE_MESSAGE(retry.status == 200, retry.body);
  CHECK(retry.json()["acted"] == 2);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (get_json(c, "/v1/dead-letters?state=resolved")["matched"] != 2 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // a poll of the view, bounded
  CHECK(get_json(c, "/v1/dead-letters?state=resolved")["matched"] == 2);
}

TEST_CASE("fleet: GET /v1/breakers sums each tool's breakers by state and pages the entities "
          "whose breaker is not closed") {
  gateway_fixture f(fleet_setup());
  http_client c(f.port());
  for (auto id : {"w1", "w2", "w3"})
    fail_delivery(c, id, true);
  fail_delivery(c, "g1", true, globex_key);
  auto auth = json_headers();
  REQUIRE(c.request("POST", "/v1/entities/webhook/w1/breakers/vendor/force-open", auth).status ==
          200);
  REQUIRE(c.request("POST", "/v1/entities/webhook/w3/breakers/vendor/disable", auth).status == 200);
  auto all = get_json(c, "/v1/breakers");
  MESSAGE("GET /v1/breakers: " << all.dump());
  REQUIRE(all["tools"].size() == 1);
  CHECK(all["tools"][0]["tool"] == "vendor");
  CHECK(all["tools"][0]["entities"]["CLOSED"] == 1);
  CHECK(all["tools"][0]["entities"]["FORCED_OPEN"] == 1);
  CHECK(all["tools"][0]["entities"]["DISABLED"] == 1);
  REQUIRE(all["not_closed"].size() == 2);
  CHECK(all["not_closed"][0]["id"] == "w1");
  CHECK(all["not_closed"][0]["state"] == "FORCED_OPEN");
  auto p1 = c.request("GET", "/v1/breakers?limit=1", {{"X-API-Key", acme_key}});
  REQUIRE(p1.status == 200);
  REQUIRE(p1.json()["not_closed"].size() == 1);
  auto link = p1.header("link");
  REQUIRE_FALSE(link.empty());
  auto p2 = get_json(c, link.substr(1, link.find('>') - 1));
  REQUIRE(p2["not_closed"].size() == 1);
  CHECK(p2["not_closed"][0]["id"] == "w3");
  CHECK(p2["next"].is_null());
  CHECK(get_json(c, "/v1/breakers?state=DISABLED")["not_closed"].size() == 1);
  CHECK(get_json(c, "/v1/breakers?tool=other")["tools"].empty());
  auto g = get_json(c, "/v1/breakers", globex_key);
  REQUIRE(g["tools"].size() == 1);
  CHECK(g["tools"][0]["entities"]["CLOSED"] == 1);
  CHECK(g["not_closed"].empty());
  auto q = header_list{{"X-API-Key", acme_key}};
  for (auto bad : {"state=CLOSED", "state=open", "limit=0", "after=zzz", "tools=x"})
    CHECK_MESSAGE(c.request("GET", std::string("/v1/breakers?") + bad, q).code() == "INVALID_QUERY",
                  bad);
}

TEST_CASE("fleet: GET /v1/entities?order=last_activity lists the most recently active first, in "
          "pages, and an entity's last activity reaches the index when it closes") {
  gateway_fixture f;
  http_client c(f.port());
  for (auto id : {"c1", "c2", "c3"})
    add(c, id);
  add(c, "g1", globex_key);
  auto sorted = [](const json& list) {
    for (size_t i = 1; i < list.size(); ++i) {
      auto a = list[i - 1]["last_activity"].get<int64_t>();
      auto b = list[i]["last_activity"].get<int64_t>();
      if (a < b || (a == b && list[i - 1]["id"].get<std::string>() > list[i]["id"]))
        return false;
    }
    return true;
  };
  auto list = get_json(c, "/v1/entities?order=last_activity");
  REQUIRE(list.size() == 3);
  CHECK(sorted(list));
  for (auto& e : list)
    CHECK(e["last_activity"].get<int64_t>() > 0);
  // Pages of one cover each entity once.
  std::set<std::string> seen;
  std::string target = "/v1/entities?order=last_activity&limit=1";
  for (int i = 0; i < 5 && !target.empty(); ++i) {
    auto r = c.request("GET", target, {{"X-API-Key", acme_key}});
    REQUIRE(r.status == 200);
    for (auto& e : r.json())
      CHECK(seen.insert(e["id"].get<std::string>()).second);
    auto link = r.header("link");
    target = link.empty() ? "" : link.substr(1, link.find('>') - 1);
  }
  CHECK(seen.size() == 3);
  // c1 is active again; within the cadence its index row keeps its first commit's time, and
  // its close writes the last one.
  auto before = get_json(c, "/v1/entities?order=last_activity&type=counter");
  int64_t c1_before = 0;
  for (auto& e : before)
    if (e["id"] == "c1")
      c1_before = e["last_activity"].get<int64_t>();
  add(c, "c1");
  int64_t c1_commit = now_ms();
  f.stop();
  f.start();
  http_client c2(f.port());
  auto after = get_json(c2, "/v1/entities?order=last_activity");
  CHECK(sorted(after));
  REQUIRE(after.size() == 3);
  CHECK(after[0]["id"] == "c1");
  CHECK(after[0]["last_activity"].get<int64_t>() >= c1_before);
  CHECK(after[0]["last_activity"].get<int64_t>() <= c1_commit);
  auto q = header_list{{"X-API-Key", acme_key}};
  for (auto bad : {"order=size", "order=last_activity&after=x/y", "order=last_activity&after=1/a",
                   "order=last_activity&after=-1/a/b"})
    CHECK_MESSAGE(
      c2.request("GET", std::string("/v1/entities?") + bad, q).code() == "INVALID_QUERY", bad);
}

TEST_CASE("fleet: /metrics has the dead letters by state and the oldest pending one's age per "
          "configured tenant, and a summary a failed index write lost is read again at the next "
          "start") {
  std::atomic<bool> failing{false};
  auto setup = [&](runtime_config& rc, http_server_config& hc) {
    fleet_setup()(rc, hc);
    rc.tenant_index_fault = [&failing](uint64_t, std::string_view what) {
      return failing && what == "apply" ? 13 : 0; // SQLITE_FULL
    };
  };
  gateway_fixture f(setup);
  http_client c(f.port());
  fail_delivery(c, "w1", true);
  fail_delivery(c, "w2", false);
  auto metrics = c.request("GET", "/metrics").body;
  CHECK(metrics.find("factum_dead_letters{tenant=\"acme\",state=\"pending\"} 1\n") !=
        std::string::npos);
  CHECK(metrics.find("factum_dead_letters{tenant=\"acme\",state=\"scheduled\"} 1\n") !=
        std::string::npos);
  CHECK(metrics.find("factum_dead_letters{tenant=\"globex\",state=\"pending\"} 0\n") !=
        std::string::npos);
  CHECK(metrics.find("factum_dead_letter_oldest_pending_seconds{tenant=\"acme\"} ") !=
        std::string::npos);
  CHECK(metrics.find("factum_dead_letter_oldest_pending_seconds{tenant=\"globex\"} 0\n") !=
        std::string::npos);
  // The index fails (a full disk) while w1's second dead letter is made: the call answers as it
  // would, the view misses it until the next start reads the summaries from the files again.
  failing = true;
  auto r = c.request("POST", "/v1/entities/webhook/w1/deliver", json_headers(acme_key, "lost-1"),
                     json{{"tool", "vendor"}, {"payload", {{"mode", "bad"}}}}.dump());
  CHECK(r.json().value("dead_letter_id", "") != "");
  failing = false;
  CHECK(get_json(c, "/v1/dead-letters?state=pending")["matched"] == 1);
  CHECK(f.rt().metrics().value("factum_tenant_index_failures_total") >= 1);
  f.stop();
  f.start(setup);
  http_client c2(f.port());
  CHECK(get_json(c2, "/v1/dead-letters?state=pending")["matched"] == 2);
  CHECK(get_json(c2, "/v1/dead-letters?state=pending")["dead_letters"].size() == 2);
}

} // namespace fleet_test
