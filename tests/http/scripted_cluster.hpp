// scripted_cluster.hpp: a cluster node whose every answer the test sets (cluster_router and
// entity_ownership), for the gateway's cluster tests without etcd. Its members are read on the
// servers' I/O threads and CAF workers and set on the test thread.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "factum/storage/sha256.hpp"
#include "http/fixture.hpp"

namespace factum::test {

/// A cluster whose every answer the test sets.
struct scripted_cluster final : cluster_router, entity_ownership {
  mutable std::mutex mu;
  shard_route next;           ///< what route() answers to a client's request
  shard_route when_forwarded; ///< what route() answers to a relayed request
  std::atomic<int> routes{0}, forwarded_routes{0}, refreshes{0};
  std::atomic<int64_t> epoch{7}; ///< claim_for's epoch (0: NOT_OWNER)
  std::atomic<bool> commits_allowed{true};
  std::atomic<bool> lease_live{true};
  std::string id = "n-test";

  shard_route route(const entity_key& k, bool forwarded) override {
    std::lock_guard<std::mutex> g(mu);
    ++(forwarded ? forwarded_routes : routes);
    if (auto it = by_id.find(k.id); !forwarded && it != by_id.end())
      return it->second;
    if (!forwarded && switch_at >= 0 && refreshes >= switch_at)
      return switched;
    return forwarded ? when_forwarded : next;
  }
  std::map<std::string, shard_route> by_id; ///< a client's request for these ids (under mu)
  /// From the switch_at-th refresh on (-1: never), a client's request routes as `switched`
  /// (under mu): the cluster's placement changed, and a refresh read it.
  int switch_at = -1;
  shard_route switched;
  std::vector<std::chrono::steady_clock::time_point> refreshed_at; ///< under mu
  void refresh(uint32_t, std::function<void()> then) override {
    {
      std::lock_guard<std::mutex> g(mu);
      refreshed_at.push_back(std::chrono::steady_clock::now());
      ++refreshes;
    }
    then();
  }
  std::vector<std::string> peers(std::vector<std::string>& down) const override {
    std::lock_guard<std::mutex> g(mu);
    down = down_nodes;
    return peer_addresses;
  }
  std::vector<std::string> peer_addresses, down_nodes; ///< what peers() answers (under mu)
  std::string describe() const override { return R"({"cluster":"scripted"})"; }
  bool healthy(std::string& why) const override {
    if (!lease_live)
      why = "no lease (scripted)";
    return lease_live;
  }
  const factum::metrics::registry* metrics() const override { return &metric_registry; }
  /// What metrics() shows: the lease as scripted, three shards owned.
  factum::metrics::registry metric_registry;
  const bool metrics_registered = [this] {
    using factum::metrics::kind;
    metric_registry.add("factum_cluster_lease_live", "1 while the scripted lease is live.",
                        kind::gauge, {}, [this](auto& w) { w.add(lease_live ? 1.0 : 0.0); });
    metric_registry.add("factum_cluster_shards_owned", "Three, scripted.", kind::gauge, {},
                        [](auto& w) { w.add(3.0); });
    return true;
  }();

  result<owner_claim> claim_for(const entity_key&) const override {
    if (epoch.load() == 0)
      return status{errc::not_owner, "scripted: not this node's"};
    return owner_claim{epoch.load(), 0};
  }
  bool may_commit(const owner_claim& c) const override {
    return commits_allowed && c.epoch == epoch.load();
  }
  const std::string& node_id() const override { return id; }

  // -- planned moves --
  std::string secret = "scripted-secret-0123";
  status accept = status::ok(); ///< what accept_move() answers (under mu)
  std::atomic<int> received{0};
  bool authentic(const move_credentials& c) const override {
    return c.signature == move_signature(secret, c); // the clock is the real node's concern
  }
  status accept_move(uint32_t, int64_t, const entity_key&) override {
    std::lock_guard<std::mutex> g(mu);
    return accept;
  }
  void file_received() override { ++received; }
};

inline shard_route local_route() {
  return {};
}

/// The route of a request this node relays to the node at 127.0.0.1:`port`, seen under `epoch`.
inline shard_route forward_route(uint16_t port, int64_t epoch = 0) {
  shard_route r;
  r.to = shard_route::where::forward;
  r.address = "127.0.0.1:" + std::to_string(port);
  r.epoch = epoch;
  return r;
}

/// What a node that does not hold the shard (any more) answers a relayed request.
inline shard_route not_owner_route(std::string detail = "scripted") {
  shard_route r;
  r.to = shard_route::where::unavailable;
  r.code = "NOT_OWNER";
  r.detail = std::move(detail);
  return r;
}

inline gateway_fixture::tweak with_cluster(const std::shared_ptr<scripted_cluster>& c) {
  return [c](runtime_config& rc, http_server_config& hc) {
    rc.ownership = c;
    hc.cluster = c;
  };
}

} // namespace factum::test
