// handover_test.cpp: the moments a shard changes homes (docs/cluster.md, "Moving shards"), with a
// real etcd in process: `factum cluster join` returns only once the shard it moved is served by
// its new home (the old home ends the move at the hand-over; the new home acquires the shard at
// its next poll), a relayed request for a shard handed over to a node makes that node read etcd
// at once and acquire it, rather than at its next poll (the new home of those two tests polls
// every 4 s, a 20 s lease, so that only these paths can make it acquire sooner), and while the
// old home moves a shard out it answers a client's request "settling" (its gateway waits) and a
// relayed one NOT_OWNER (the relaying node waits). The test's thread; the nodes' threads, the
// old home's runtime and etcd (a child process) run beside it.
#include <future>
#include <thread>

#include <doctest/doctest.h>

#include "cluster/node_support.hpp"
#include "etcd_test_client.hpp"
#include "factum/cluster/cli.hpp"
#include "factum/cluster/node.hpp"
#include "factum/cluster/shard_map.hpp"
#include "support/etcd_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace factum::cluster;
using namespace std::chrono_literals;
using factum::test::eventually;
using factum::test::started;

namespace handover_test {

namespace {

constexpr uint32_t shards = 8;

node_config config_of(const test::etcd_server& etcd, const std::string& name, const std::string& id,
                      const char* advertise, std::chrono::milliseconds ttl) {
  node_config c;
  c.name = name;
  c.node_id = id;
  c.etcd = {etcd.url()};
  c.advertise = advertise;
  c.shards = shards;
  c.lease_ttl = ttl;
  c.secret = "handover-secret-0123";
  c.log = [](std::string_view) {};
  return c;
}

/// `factum cluster ARGS...` in process: its exit code.
int cluster_command(std::vector<std::string> args) {
  CLI::App app{"factum"};
  int code = -1;
  add_cluster_command(app, &code);
  args.insert(args.begin(), "factum");
  std::vector<const char*> argv;
  for (auto& a : args)
    argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return code;
}

/// A counter entity whose shard rendezvous hashing over {a, b} gives to b.
entity_key entity_for_b() {
  for (int i = 0; i < 1000; ++i) {
    entity_key k{"acme", "counter", "c" + std::to_string(i)};
    if (rendezvous_owner(shard_of(k, shards), {"a", "b"}) == "b")
      return k;
  }
  FAIL("no entity of a shard rendezvous hashing gives to b");
  return {};
}

/// The old home's runtime: the test types, files under the shared `root`.
std::unique_ptr<runtime> home_runtime(const std::filesystem::path& root,
                                      const std::filesystem::path& data) {
  runtime_config rc;
  rc.data_dir = data;
  rc.entity_root = root;
  rc.storage_threads = 2;
  test::add_test_types(rc.types);
  auto rt = runtime::start(std::move(rc));
  REQUIRE_MESSAGE(rt.is_ok(), rt.error().to_string());
  return std::move(rt.value());
}

} // namespace

TEST_CASE("factum cluster join returns only once the shard it moved is served by its new home, "
          "not at the hand-over") {
  test::etcd_server etcd;
  test::temp_dir root, a_data;
  auto rt = home_runtime(root.path(), a_data.path());
  auto shared = [&](const std::string& id, const char* advertise, std::chrono::milliseconds ttl) {
    auto c = config_of(etcd, "jointest", id, advertise, ttl);
    c.storage = "shared";
    return c;
  };
  auto a = started(shared("a", "127.0.0.1:1", 1000ms)); // polls every 200 ms: moves at once
  a->attach(*rt);
  auto k = entity_for_b();
  auto placed = a->route(k, false);
  REQUIRE(placed.to == shard_route::where::local);
  REQUIRE(rt->call_sync(k, "add", R"({"by":1})").ok);
  auto b = started(shared("b", "127.0.0.1:2", 20'000ms)); // its next poll: 4 s from now
  auto t0 = std::chrono::steady_clock::now();
  CHECK(cluster_command({"cluster", "join", "b", "--etcd", etcd.url(), "--name", "jointest",
                         "--timeout", "30"}) == 0);
  MESSAGE("join took " << std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count()
                       << " ms");
  auto c = test::client_of({etcd.url()});
  auto owner = c->get("/factum/jointest/shards/" + std::to_string(placed.shard));
  REQUIRE(owner.is_ok());
  CHECK_MESSAGE(owner->has_value(), "the join returned while its shard was served by nobody");
  if (owner->has_value())
    CHECK((*owner)->value == "b");
  CHECK(b->claim_for(k).is_ok());
  CHECK(a->route(k, false).to == shard_route::where::forward);
  b->stop();
  a->stop();
  rt->stop();
}

TEST_CASE("a relayed request for a shard handed over to a node makes it read etcd at once and "
          "acquire the shard, not at its next poll") {
  test::etcd_server etcd;
  auto a = started(config_of(etcd, "nudgetest", "a", "127.0.0.1:1", 1000ms));
  entity_key k{"acme", "ledger", "h1"};
  auto placed = a->route(k, false);
  REQUIRE(placed.to == shard_route::where::local);
  auto b = started(config_of(etcd, "nudgetest", "b", "127.0.0.1:2", 20'000ms)); // polls in 4 s
  REQUIRE(b->route(k, false).address == "127.0.0.1:1"); // b's view: a serves it
  // The old home hands the shard over (as a move's step 3 does): homes/k is b and nobody holds
  // it. b's view is behind until it reads etcd again.
  auto c = test::client_of({etcd.url()});
  auto key = [&](const char* what) {
    return "/factum/nudgetest/" + std::string(what) + "/" + std::to_string(placed.shard);
  };
  using f = etcd_compare::field;
  auto t = c->transact({{key("homes"), f::value, "a", 0}},
                       {{key("homes"), "b"}, {key("shards"), std::nullopt}});
  REQUIRE(t.is_ok());
  REQUIRE(t->succeeded);
  auto t0 = std::chrono::steady_clock::now();
  auto relayed = b->route(k, true); // a's request, relayed to its shard's new home
  CHECK(relayed.code == "NOT_OWNER");
  CHECK(eventually([&] { return b->claim_for(k).is_ok(); }, 2000ms));
  MESSAGE("b's claim looked at for " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - t0)
                                          .count()
                                     << " ms after the relayed request");
  auto served = b->route(k, false);
  CHECK(served.to == shard_route::where::local);
  CHECK(served.epoch > placed.epoch);
  b->stop();
  a->stop();
}

TEST_CASE("while its old home moves a shard out, a client's request for it there is settling (the "
          "gateway waits) and a relayed one NOT_OWNER (its relaying node waits)") {
  test::etcd_server etcd;
  test::temp_dir root, a_data;
  auto rt = home_runtime(root.path(), a_data.path());
  auto shared = [&](const std::string& id, const char* advertise) {
    auto c = config_of(etcd, "movingtest", id, advertise, 1000ms);
    c.storage = "shared";
    return c;
  };
  auto a = started(shared("a", "127.0.0.1:1"));
  a->attach(*rt);
  // Placed while a is the only live node: a shard's first request places it by rendezvous over
  // the live nodes this node has seen, so placing it after b joined could give it to b.
  entity_key k{"acme", "probe", "p1"};
  auto placed = a->route(k, false);
  REQUIRE(placed.to == shard_route::where::local);
  auto b = started(shared("b", "127.0.0.1:2"));
  // A turn that takes 3 s holds the move in its first step (the shard's activations close).
  std::promise<call_reply> slow;
  call_options opts;
  opts.timeout = 30s;
  rt->call(k, "slow_pair", R"({"ms":3000})", opts,
           [&](call_reply r) { slow.set_value(std::move(r)); });
  REQUIRE(eventually([&] { return rt->metrics().value("factum_active_entities") >= 1; }, 2000ms));
  auto c = test::client_of({etcd.url()});
  auto move = c->create_if_absent("/factum/movingtest/moves/" + std::to_string(placed.shard),
                                  R"({"from":"a","to":"b"})");
  REQUIRE(move.is_ok());
  REQUIRE(move->succeeded);
  CHECK(eventually([&] { return a->route(k, false).settling; }, 2000ms));
  auto direct = a->route(k, false);
  CHECK(direct.to == shard_route::where::unavailable);
  CHECK(direct.code == "SHARD_UNAVAILABLE");
  CHECK(direct.settling);
  auto relayed = a->route(k, true);
  CHECK(relayed.to == shard_route::where::unavailable);
  CHECK(relayed.code == "NOT_OWNER");
  CHECK_FALSE(relayed.settling);
  auto done = slow.get_future();
  REQUIRE(done.wait_for(30s) == std::future_status::ready);
  CHECK(done.get().ok);
  // The move ends: the new home serves the shard, and the old one relays to it.
  CHECK(eventually([&] { return b->claim_for(k).is_ok(); }, 5000ms));
  CHECK(eventually([&] { return a->route(k, false).to == shard_route::where::forward; }, 5000ms));
  b->stop();
  a->stop();
  rt->stop();
}

} // namespace handover_test
