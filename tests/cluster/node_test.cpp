// node_test.cpp: the cluster node (factum/cluster/node.hpp) against a real etcd, in process:
// what it refuses at start (another shard count, a node id that is live elsewhere, an unknown
// storage), the epochs it hands the runtime (claim_for, may_commit) and the gateway (route), what
// a lost lease does to them, and a shared-storage takeover of a down home's shard. The test's
// thread; the nodes' polling threads and etcd (a child process) run beside it.
#include <thread>

#include <doctest/doctest.h>

#include "cluster/node_support.hpp"
#include "factum/cluster/etcd_client.hpp"
#include "factum/cluster/node.hpp"
#include "support/etcd_server.hpp"

using namespace factum;
using namespace factum::cluster;
using namespace std::chrono_literals;
using factum::test::eventually;
using factum::test::started;

namespace {

node_config config_of(const test::etcd_server& etcd, const std::string& id, uint32_t shards = 8) {
  node_config c;
  c.name = "nodetest";
  c.node_id = id;
  c.etcd = {etcd.url()};
  c.advertise = "127.0.0.1:1";
  c.shards = shards;
  c.lease_ttl = 1000ms;
  c.log = [](std::string_view) {};
  return c;
}

} // namespace

TEST_CASE("node: a node configured with another shard count than the cluster's refuses to start") {
  test::etcd_server etcd;
  auto a = started(config_of(etcd, "a", 8));
  auto b = node::start(config_of(etcd, "b", 16));
  REQUIRE_FALSE(b.is_ok());
  CHECK(b.error().code() == errc::conflict);
  CHECK(b.error().message().find("\"shards\":8") != std::string::npos);
  a->stop();
}

TEST_CASE("node: a node id that is live elsewhere is refused after one TTL, and a stopped node's "
          "id starts again at once") {
  test::etcd_server etcd;
  auto a = started(config_of(etcd, "a"));
  auto t0 = std::chrono::steady_clock::now();
  auto twin = node::start(config_of(etcd, "a"));
  REQUIRE_FALSE(twin.is_ok());
  CHECK(twin.error().code() == errc::conflict);
  CHECK(std::chrono::steady_clock::now() - t0 >= 1000ms); // it waited for the lease first
  a->stop();                                              // revokes the lease
  t0 = std::chrono::steady_clock::now();
  auto again = started(config_of(etcd, "a"));
  CHECK(std::chrono::steady_clock::now() - t0 < 1000ms);
  again->stop();
}

TEST_CASE("node: the first request places a shard on a node and the epochs it hands out fence "
          "every other epoch") {
  test::etcd_server etcd;
  auto a = started(config_of(etcd, "a"));
  entity_key k{"acme", "ledger", "e1"};
  CHECK(a->claim_for(k).error().code() == errc::not_owner); // never used: nobody's yet
  auto r = a->route(k, false);
  REQUIRE(r.to == shard_route::where::local);
  CHECK(r.epoch > 0);
  CHECK(r.shard == a->shard_of(k));
  auto c = a->claim_for(k);
  REQUIRE(c.is_ok());
  CHECK(c->epoch == r.epoch);
  CHECK(c->shard == r.shard);
  CHECK(a->may_commit(*c));
  CHECK_FALSE(a->may_commit({c->epoch + 1, c->shard}));
  CHECK_FALSE(a->may_commit({0, c->shard}));
  // A second node routes the same entity to the first (its home), and says NOT_OWNER to a
  // relayed request for it.
  auto b_cfg = config_of(etcd, "b");
  b_cfg.advertise = "127.0.0.1:2";
  auto b = started(b_cfg);
  auto rb = b->route(k, false);
  CHECK(rb.to == shard_route::where::forward);
  CHECK(rb.address == "127.0.0.1:1");
  CHECK(rb.epoch == r.epoch);
  auto relayed = b->route(k, true);
  CHECK(relayed.to == shard_route::where::unavailable);
  CHECK(relayed.code == "NOT_OWNER");
  CHECK(b->claim_for(k).error().code() == errc::not_owner);
  // The home stops: its shard is unavailable from the other node, never taken over.
  a->stop();
  CHECK(eventually([&] { return b->route(k, false).code == "SHARD_UNAVAILABLE"; }, 5000ms));
  CHECK(b->claim_for(k).error().code() == errc::not_owner);
  b->stop();
}

TEST_CASE("node: a lease etcd forgot drops every shard at once, and the node takes them back "
          "under newer epochs") {
  test::etcd_server etcd;
  auto a = started(config_of(etcd, "a"));
  entity_key k{"acme", "ledger", "e2"};
  auto first = a->route(k, false);
  REQUIRE(first.to == shard_route::where::local);
  // Someone (an operator, or etcd after a long pause of the node) ends the node's lease.
  auto c = etcd_client::make({etcd.url()});
  REQUIRE(c.is_ok());
  auto me = (*c)->get("/factum/nodetest/nodes/a");
  REQUIRE(me.is_ok());
  REQUIRE(me->has_value());
  REQUIRE((*c)->revoke((*me)->lease).is_ok());
  CHECK(eventually([&] { return a->metrics()->value("factum_cluster_leases_lost_total") >= 1; },
                   5000ms));
  CHECK_FALSE(a->may_commit({first.epoch, first.shard})); // the old epoch is fenced
  CHECK(eventually(
    [&] {
      auto c = a->claim_for(k);
      return c.is_ok() && c->epoch > first.epoch;
    },
    5000ms));
  CHECK(a->metrics()->value("factum_cluster_lease_live") == 1);
  a->stop();
}

TEST_CASE("node: with shared storage, a down home's shard is taken over by a live node under a "
          "newer epoch, and the one that comes back serves it only once it is moved back") {
  test::etcd_server etcd;
  auto shared = [&](const std::string& id, const char* advertise) {
    auto c = config_of(etcd, id);
    c.storage = "shared";
    c.advertise = advertise;
    return c;
  };
  auto a = started(shared("a", "127.0.0.1:1"));
  entity_key k{"acme", "ledger", "e3"};
  auto first = a->route(k, false);
  REQUIRE(first.to == shard_route::where::local);
  auto b = started(shared("b", "127.0.0.1:2"));
  CHECK(b->route(k, false).to == shard_route::where::forward); // a is its home, and live
  a->stop(); // the lease goes: a holds nothing, and its home key stays
  CHECK(eventually(
    [&] {
      auto c = b->claim_for(k);
      return c.is_ok() && c->epoch > first.epoch;
    },
    5000ms));
  CHECK(b->metrics()->value("factum_cluster_shard_takeovers_total") >= 1);
  auto r = b->route(k, false);
  CHECK(r.to == shard_route::where::local);
  CHECK(r.epoch > first.epoch);
  auto c = etcd_client::make({etcd.url()});
  REQUIRE(c.is_ok());
  auto home = (*c)->get("/factum/nodetest/homes/" + std::to_string(r.shard));
  REQUIRE(home.is_ok());
  REQUIRE(home->has_value());
  CHECK((*home)->value == "b");
  // a comes back: the shard stays with b (no file is on a's disk that b lacks).
  auto again = started(shared("a", "127.0.0.1:1"));
  CHECK(
    eventually([&] { return again->route(k, false).to == shard_route::where::forward; }, 5000ms));
  CHECK(again->claim_for(k).error().code() == errc::not_owner);
  again->stop();
  b->stop();
}

TEST_CASE("node: a node refuses a storage other than local or shared") {
  test::etcd_server etcd;
  auto c = config_of(etcd, "a");
  c.storage = "replicated";
  auto n = node::start(c);
  REQUIRE_FALSE(n.is_ok());
  CHECK(n.error().code() == errc::invalid_argument);
}

TEST_CASE("node: with min_nodes, a never-used shard is placed only once that many nodes are live") {
  test::etcd_server etcd;
  auto two = [&](const std::string& id, const char* advertise) {
    auto c = config_of(etcd, id);
    c.min_nodes = 2;
    c.advertise = advertise;
    return c;
  };
  auto a = started(two("a", "127.0.0.1:1"));
  entity_key k{"acme", "ledger", "e4"};
  auto r = a->route(k, false);
  CHECK(r.to == shard_route::where::unavailable);
  CHECK(r.code == "SHARD_UNAVAILABLE");
  CHECK(r.detail.find("cluster.min_nodes") != std::string::npos);
  CHECK(a->claim_for(k).error().code() == errc::not_owner);
  auto b = started(two("b", "127.0.0.1:2"));
  // Once a sees b (its next poll), the shard is placed by rendezvous hashing over both.
  CHECK(
    eventually([&] { return a->route(k, false).to != shard_route::where::unavailable; }, 5000ms));
  auto placed = a->route(k, false);
  CHECK((placed.to == shard_route::where::local || placed.to == shard_route::where::forward));
  b->stop();
  a->stop();
}
