// fleet_cluster_test.cpp: the fleet views of a cluster, over two real in-process gateways whose
// cluster answers the test sets (scripted_cluster.hpp): a client's GET /v1/dead-letters,
// GET /v1/breakers and GET /v1/entities?order=last_activity on one node show every node's
// entities, merged in order and paged across nodes, never another tenant's; a bulk action acts
// on each dead letter at its owner (the other node's through its per-entity route), once, and
// pages by the merged cursor; a node down or silent makes the view 503 rather than partial.
// Test thread plus the servers' threads.
#include <doctest/doctest.h>

#include <atomic>
#include <set>

#include "http/scripted_cluster.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace fleet_cluster_test {

namespace {

/// A tool that answers 429 to {"mode":"bad"} (rate_limit: a pending dead letter under the rules
/// below) and 503 otherwise (server_error: a dead letter scheduled for a retry in an hour).
gateway_fixture::tweak node_setup(const std::shared_ptr<scripted_cluster>& c) {
  return [c](runtime_config& rc, http_server_config& hc) {
    with_cluster(c)(rc, hc);
    rc.tools["vendor"] = [](const tool_request& req, std::function<void(tool_reply)> done) {
      tool_reply r;
      r.http_status = req.payload.value("mode", "") == "bad" ? 429 : 503;
      r.body = json{{"status", r.http_status}};
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 1}, {"max_delay_ms", 2}, {"max_attempts", 1}, {"jitter", "none"}};
    rc.tool_policies["vendor"] = std::move(p);
    rc.dead_letter_rules = {{"rate_limit", {{"auto_retry_after_ms", nullptr}}}};
  };
}

void fail_delivery(http_client& c, const std::string& id, bool bad,
                   const std::string& key = acme_key) {
  static int n = 0;
  auto r = c.request("POST", "/v1/entities/webhook/" + id + "/deliver",
                     json_headers(key, "fc-" + std::to_string(++n)),
                     json{{"tool", "vendor"}, {"payload", {{"mode", bad ? "bad" : "ok"}}}}.dump());
  REQUIRE_MESSAGE(!r.json().value("dead_letter_id", "").empty(), r.body);
}

json get_ok(http_client& c, const std::string& target, const std::string& key = acme_key) {
  auto r = c.request("GET", target, {{"X-API-Key", key}});
  REQUIRE_MESSAGE(r.status == 200, target << ": " << r.body);
  return r.json();
}

std::vector<std::string> ids_of(const json& list, const char* member) {
  std::vector<std::string> out;
  for (auto& d : list)
    out.push_back(d.value(member, ""));
  return out;
}

} // namespace

TEST_CASE("fleet cluster: the views show every node's entities merged and paged, a bulk action "
          "acts at each owner once, and a missing node makes them 503") {
  auto b_c = std::make_shared<scripted_cluster>();
  gateway_fixture b(node_setup(b_c));
  auto a_c = std::make_shared<scripted_cluster>();
  auto b_address = "127.0.0.1:" + std::to_string(b.port());
  a_c->peer_addresses = {b_address};
  for (auto id : {"w3", "w4"}) { // a client's request to a for these goes to b
    shard_route r;
    r.to = shard_route::where::forward;
    r.address = b_address;
    r.epoch = 7;
    a_c->by_id[id] = r;
  }
  gateway_fixture a(node_setup(a_c));
  http_client ca(a.port()), cb(b.port());
  fail_delivery(ca, "w1", true);  // pending
  fail_delivery(ca, "w2", false); // scheduled
  fail_delivery(cb, "w3", true);
  fail_delivery(cb, "w4", true);
  fail_delivery(cb, "g1", true, globex_key);

  // Dead letters of both nodes, in (type, id) order, each once, pages across nodes.
  auto all = get_ok(ca, "/v1/dead-letters");
  CHECK(all["matched"] == 4);
  CHECK(ids_of(all["dead_letters"], "entity_id") ==
        std::vector<std::string>{"w1", "w2", "w3", "w4"});
  CHECK(all["next"].is_null());
  std::vector<std::string> paged;
  std::string target = "/v1/dead-letters?limit=1";
  for (int pages = 0; !target.empty() && pages < 10; ++pages) {
    auto r = ca.request("GET", target, {{"X-API-Key", acme_key}});
    REQUIRE_MESSAGE(r.status == 200, r.body);
    for (auto& id : ids_of(r.json()["dead_letters"], "entity_id"))
      paged.push_back(id);
    auto link = r.header("link");
    target = link.empty() ? "" : link.substr(1, link.find('>') - 1);
  }
  CHECK_MESSAGE(paged == ids_of(all["dead_letters"], "entity_id"), json(paged).dump());
  CHECK(get_ok(ca, "/v1/dead-letters?state=pending")["matched"] == 3);
  auto g = get_ok(ca, "/v1/dead-letters", globex_key);
  CHECK(ids_of(g["dead_letters"], "entity_id") == std::vector<std::string>{"g1"});
  // A relayed request answers with its node's part only.
  auto part =
    cb.request("GET", "/v1/dead-letters", {{"X-API-Key", acme_key}, {"X-Factum-Forwarded", "0"}});
  CHECK(part.json()["matched"] == 2);

  // Breakers: a force-open on b shows from a; counts are summed per tool.
  REQUIRE(cb.request("POST", "/v1/entities/webhook/w3/breakers/vendor/force-open",
                     {{"X-API-Key", acme_key}})
            .status == 200);
  auto br = get_ok(ca, "/v1/breakers");
  REQUIRE(br["not_closed"].size() == 1);
  CHECK(br["not_closed"][0]["id"] == "w3");
  int64_t entities = 0;
  for (auto& t : br["tools"])
    for (auto& [state, n] : t["entities"].items())
      entities += n.get<int64_t>();
  CHECK(entities == 4);

  // Entities by activity: both nodes', each once.
  auto recent = get_ok(ca, "/v1/entities?order=last_activity");
  auto recent_ids = ids_of(recent, "id");
  CHECK(std::set<std::string>(recent_ids.begin(), recent_ids.end()) ==
        std::set<std::string>{"w1", "w2", "w3", "w4"});
  CHECK(recent_ids.size() == 4);

  // A dry run moves nothing; the action pages by the merged cursor and acts once at each owner.
  auto dry = ca.request("POST", "/v1/dead-letters/discard", json_headers(acme_key),
                        R"({"state":"pending","dry_run":true})");
  REQUIRE_MESSAGE(dry.status == 200, dry.body);
  CHECK(dry.json()["would_act"] == 3);
  CHECK(get_ok(ca, "/v1/dead-letters?state=pending")["matched"] == 3);
  auto first = ca.request("POST", "/v1/dead-letters/discard", json_headers(acme_key),
                          R"({"state":"pending","limit":2,"note":"drill"})");
  REQUIRE_MESSAGE(first.status == 200, first.body);
  CHECK(first.json()["acted"] == 2);
  CHECK(ids_of(first.json()["results"], "id") == std::vector<std::string>{"w1", "w3"});
  auto first_body = first.json();
  for (auto& r : first_body["results"])
    CHECK(r["new_status"] == "discarded");
  REQUIRE(first.json()["next"].is_string());
  auto rest =
    ca.request("POST", "/v1/dead-letters/discard", json_headers(acme_key),
               json{{"state", "pending"}, {"limit", 2}, {"after", first.json()["next"]}}.dump());
  REQUIRE_MESSAGE(rest.status == 200, rest.body);
  CHECK(rest.json()["acted"] == 1);
  CHECK(ids_of(rest.json()["results"], "id") == std::vector<std::string>{"w4"});
  CHECK(get_ok(ca, "/v1/dead-letters?state=pending")["matched"] == 0);
  CHECK(get_ok(ca, "/v1/dead-letters?state=discarded")["matched"] == 3);
  // On b, w3's log says who discarded it and why.
  auto facts = get_ok(cb, "/v1/entities/webhook/w3/facts?type=lifecycle");
  bool noted = false;
  for (auto& f : facts)
    noted = noted || f["data"].dump().find("drill") != std::string::npos;
  CHECK_MESSAGE(noted, facts.dump());
  CHECK(get_ok(cb, "/v1/dead-letters?state=discarded", globex_key)["matched"] == 0);

  // A node down (known to the cluster), or one that does not answer: 503, never a partial view.
  {
    std::lock_guard<std::mutex> lk(a_c->mu);
    a_c->down_nodes = {"n9"};
  }
  for (auto t : {"/v1/dead-letters", "/v1/breakers", "/v1/entities?order=last_activity"}) {
    auto r = ca.request("GET", t, {{"X-API-Key", acme_key}});
    CHECK_MESSAGE(r.code() == "SHARD_UNAVAILABLE", t << ": " << r.body);
    CHECK(r.header("retry-after") == "1");
  }
  {
    std::lock_guard<std::mutex> lk(a_c->mu);
    a_c->down_nodes.clear();
  }
  b.stop();
  for (auto t : {"/v1/dead-letters", "/v1/breakers"})
    CHECK(ca.request("GET", t, {{"X-API-Key", acme_key}}).code() == "SHARD_UNAVAILABLE");
  auto act = ca.request("POST", "/v1/dead-letters/retry", json_headers(acme_key), "{}");
  CHECK_MESSAGE(act.code() == "SHARD_UNAVAILABLE", act.body);
}

} // namespace fleet_cluster_test
