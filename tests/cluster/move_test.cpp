// move_test.cpp: the target's side of planned shard moves (docs/cluster.md, "Moving shards"),
// with a real etcd (and two real runtimes) in process: the files a failed move left on its
// target are removed once the target's node sees the failure, and only those (a file of the
// same shard whose newest claim is another epoch stays); a move's file is authentic only when
// signed with the cluster's secret within the allowed clock skew. The test's thread; the node's
// threads and etcd (a child process) run beside it.
#include <future>
#include <thread>

#include <doctest/doctest.h>

#include "etcd_test_client.hpp"
#include "factum/cluster/etcd_client.hpp"
#include "factum/cluster/node.hpp"
#include "factum/cluster/shard_map.hpp"
#include "support/etcd_server.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace factum::cluster;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr uint32_t shards = 8;

std::unique_ptr<runtime> start_runtime(const std::filesystem::path& dir) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 2;
  test::add_test_types(c.types);
  return test::start_ok(std::move(c));
}

/// Two counter entities of one shard.
std::vector<entity_key> two_of_one_shard(uint32_t& shard) {
  std::vector<entity_key> out;
  for (int i = 0; out.size() < 2 && i < 1000; ++i) {
    entity_key k{"acme", "counter", "c" + std::to_string(i)};
    if (out.empty())
      shard = shard_of(k, shards);
    if (shard_of(k, shards) == shard)
      out.push_back(k);
  }
  REQUIRE(out.size() == 2);
  return out;
}

/// Exports `k` from `src` under `epoch` and adopts it into `dst`.
void copy(runtime& src, runtime& dst, const entity_key& k, int64_t epoch) {
  auto bytes = src.export_entity(k, epoch, "na");
  REQUIRE_MESSAGE(bytes.is_ok(), bytes.error().to_string());
  std::promise<status> adopted;
  dst.adopt_entity(k, std::move(*bytes), epoch, [&](status st) { adopted.set_value(st); });
  auto st = adopted.get_future().get();
  REQUIRE_MESSAGE(st.is_ok(), st.to_string());
}

} // namespace

TEST_CASE("a failed move's copies on its target are removed once the target sees the failure, "
          "and a file of the shard under another claim stays") {
  test::etcd_server etcd;
  test::temp_dir a_dir, b_dir;
  auto a = start_runtime(a_dir.path());
  auto b = start_runtime(b_dir.path());
  uint32_t k = 0;
  auto keys = two_of_one_shard(k);
  for (auto& key : keys)
    REQUIRE(a->call_sync(key, "add", R"({"by":2})").ok);
  REQUIRE(a->release_entities([](const entity_key&) { return true; }, 10s) == 0);

  auto c = test::client_of({etcd.url()});
  auto prefix = std::string("/factum/movetest/");
  auto mk = prefix + "moves/" + std::to_string(k);
  REQUIRE(c->put(prefix + "homes/" + std::to_string(k), "na").is_ok());
  auto move = c->create_if_absent(mk, R"({"from":"na","to":"nb"})");
  REQUIRE(move.is_ok());
  // The first key came with this move; the second with an earlier one (another epoch).
  copy(*a, *b, keys[1], move->revision - 1);
  copy(*a, *b, keys[0], move->revision);
  REQUIRE(std::filesystem::exists(keys[0].file_path(b_dir.path())));
  REQUIRE(c->put(mk, R"({"from":"na","to":"nb","failed":"scripted"})").is_ok());

  node_config cfg;
  cfg.name = "movetest";
  cfg.node_id = "nb";
  cfg.etcd = {etcd.url()};
  cfg.advertise = "127.0.0.1:1";
  cfg.shards = shards;
  cfg.lease_ttl = 1000ms;
  cfg.secret = "movetest-secret-0123";
  cfg.log = [](std::string_view) {};
  auto n = node::start(cfg);
  REQUIRE_MESSAGE(n.is_ok(), n.error().to_string());
  (*n)->attach(*b);
  // The forget removes the file, then its row of the tenant index (one storage job): the
  // listing is read until both are gone, at most 5 s.
  auto only_second = [&] {
    auto left = b->entities_where([](const entity_key&) { return true; });
    return left.is_ok() && *left == std::vector<entity_key>{keys[1]};
  };
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = !std::filesystem::exists(keys[0].file_path(b_dir.path())) && only_second();
    if (!gone)
      std::this_thread::sleep_for(20ms);
  }
  CHECK(gone);
  CHECK(std::filesystem::exists(keys[1].file_path(b_dir.path())));
  CHECK(only_second());
  (*n)->stop();
  b->stop();
  a->stop();
}

TEST_CASE("a move's file is authentic only when signed with the cluster's secret within five "
          "minutes of the node's clock") {
  test::etcd_server etcd;
  node_config cfg;
  cfg.name = "signtest";
  cfg.node_id = "nb";
  cfg.etcd = {etcd.url()};
  cfg.advertise = "127.0.0.1:1";
  cfg.shards = shards;
  cfg.lease_ttl = 1000ms;
  cfg.secret = "signtest-secret-0123";
  cfg.log = [](std::string_view) {};
  auto n = node::start(cfg);
  REQUIRE_MESSAGE(n.is_ok(), n.error().to_string());
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  const std::string sha(64, 'a');
  auto signed_at = [&](int64_t t, const std::string& secret, const std::string& target) {
    static std::string time_ms, sig; // the credentials view these
    time_ms = std::to_string(t);
    move_credentials c{target, "42", sha, time_ms, {}};
    sig = move_signature(secret, c);
    c.signature = sig;
    return c;
  };
  std::string target = "/v1/cluster/moves/3/acme/counter/c1";
  CHECK((*n)->authentic(signed_at(now, cfg.secret, target)));
  CHECK((*n)->authentic(signed_at(now - 240'000, cfg.secret, target)));
  CHECK_FALSE((*n)->authentic(signed_at(now - 360'000, cfg.secret, target))); // replayed later
  CHECK_FALSE((*n)->authentic(signed_at(now + 360'000, cfg.secret, target)));
  CHECK_FALSE((*n)->authentic(signed_at(now, "another-secret-0123", target)));
  auto c = signed_at(now, cfg.secret, target);
  c.target = "/v1/cluster/moves/3/acme/counter/c2"; // signed for another entity
  CHECK_FALSE((*n)->authentic(c));
  c = signed_at(now, cfg.secret, target);
  c.epoch = "43";
  CHECK_FALSE((*n)->authentic(c));
  (*n)->stop();
  cfg.secret.clear(); // a node without a secret takes no file
  cfg.node_id = "nc";
  auto open = node::start(cfg);
  REQUIRE(open.is_ok());
  CHECK_FALSE((*open)->authentic(signed_at(now, "", target)));
  (*open)->stop();
}
