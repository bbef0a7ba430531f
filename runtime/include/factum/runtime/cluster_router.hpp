// factum/runtime/cluster_router.hpp: what the HTTP gateway asks of a cluster
// (http_server_config::cluster): where a request for an entity goes (served here, forwarded to
// its owner, or refused 503 while its shard has no live owner), what GET /v1/cluster shows,
// whether /healthz is green, and the cluster's lines of /metrics. A cluster node
// (factum/cluster/node.hpp) implements it; without one the gateway serves every entity itself.
// Threads: every member is called from the gateway's I/O threads (and forwarding completions)
// and must not block on the network.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "factum/storage/entity_key.hpp"

namespace factum {

/// The gateway's answer for one entity (cluster_router::route).
struct shard_route {
  enum class where { local, forward, unavailable };
  where to = where::local;
  uint32_t shard = 0;
  /// local: this node's epoch of the shard; forward: the owner's epoch as this node saw it
  /// (sent along, so that the owner can tell a stale view).
  int64_t epoch = 0;
  std::string address; ///< forward: the owner's "host:port"
  /// unavailable: SHARD_UNAVAILABLE (the shard's owner is down), CLUSTER_UNAVAILABLE (this node
  /// has no live lease: etcd unreachable or without quorum) or NOT_OWNER (a forwarded request
  /// reached a node that does not own the shard; the forwarding node retries).
  std::string code;
  std::string detail;
  int64_t retry_after_ms = 1'000;
};

/// A cluster node's counters, for /metrics (monotonic unless said otherwise).
struct cluster_stats {
  bool lease_live = false; ///< gauge
  uint64_t renewals = 0;   ///< keep-alives etcd answered
  uint64_t renewal_failures = 0;
  uint64_t renewal_us_sum = 0; ///< time of the answered keep-alives
  uint64_t leases_lost = 0;    ///< times the lease expired under the node
  uint64_t acquisitions = 0;   ///< shards acquired (each one a new epoch)
  uint64_t shards_owned = 0;   ///< gauge
  uint64_t nodes_live = 0;     ///< gauge
  uint64_t polls_failed = 0;   ///< reads of the cluster's state etcd did not answer
};

/// The cluster as the gateway sees it.
class cluster_router {
 public:
  virtual ~cluster_router() = default;

  /// Where a request for `key` goes. `forwarded`: it came from another node, so it is served
  /// here or refused NOT_OWNER, never forwarded again.
  virtual shard_route route(const entity_key& key, bool forwarded) = 0;

  /// A forward to the owner of `shard` failed (refused NOT_OWNER, or the owner did not answer):
  /// reads the cluster's state again and then runs `then` (on the cluster's thread, at the
  /// latest one poll period later; also when the node stops).
  virtual void refresh(uint32_t shard, std::function<void()> then) = 0;

  /// The other nodes a listing of a tenant's entities must ask (GET /v1/entities): the
  /// addresses of every live node but this one. `down` gets the ids of nodes that hold
  /// entities (a shard's home) and are not live: a listing without them would be incomplete.
  virtual std::vector<std::string> peers(std::vector<std::string>& down) const = 0;

  /// GET /v1/cluster: the nodes with their state, each shard's home, owner and epoch (JSON).
  virtual std::string describe() const = 0;

  /// /healthz: whether this node holds a live lease; `why` says what is wrong when not.
  virtual bool healthy(std::string& why) const = 0;

  /// The node's counters (the gateway renders them in /metrics).
  virtual cluster_stats stats() const = 0;
};

} // namespace factum
