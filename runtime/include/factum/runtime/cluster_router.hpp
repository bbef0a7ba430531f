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
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/metrics/metrics.hpp"
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
  /// unavailable: only while the shard changes hands (it is moving between nodes, or another
  /// node took it a moment ago). The gateway then waits for the placement to change (refresh,
  /// with backoff, for a couple of seconds) before it answers a client 503. Never set for a
  /// relayed request: that is answered NOT_OWNER, and its relaying node waits.
  bool settling = false;
};

/// What authenticates one file of a planned shard move (PUT /v1/cluster/moves/...): the headers
/// the sending node sets. The cluster's secret itself is never sent.
struct move_credentials {
  std::string_view target;    ///< the request target, as sent
  std::string_view epoch;     ///< X-Factum-Move-Epoch
  std::string_view sha256;    ///< X-Factum-Content-Sha256: hex SHA-256 of the body
  std::string_view time_ms;   ///< X-Factum-Move-Time: the sender's Unix time, ms
  std::string_view signature; ///< X-Factum-Move-Signature: move_signature() under the secret
};

/// The signature of a move's file: hex HMAC-SHA256, under the cluster's secret, of
/// "PUT\n" target "\n" epoch "\n" sha256 "\n" time_ms.
std::string move_signature(std::string_view secret, const move_credentials& c);

/// The cluster as the gateway sees it.
class cluster_router {
 public:
  virtual ~cluster_router() = default;

  /// Where a request for `key` goes. `forwarded`: it came from another node, so it is served
  /// here or refused NOT_OWNER, never forwarded again.
  virtual shard_route route(const entity_key& key, bool forwarded) = 0;

  /// A forward to the owner of `shard` failed (refused NOT_OWNER, or the owner did not answer),
  /// or its shard is settling: reads the cluster's state again and then runs `then` (on the
  /// cluster's thread, at the latest one poll period later; also when the node stops). The
  /// gateway calls it again, after a backoff, while the placement it reads has not changed.
  virtual void refresh(uint32_t shard, std::function<void()> then) = 0;

  /// The other nodes a listing of a tenant's entities must ask (GET /v1/entities): the
  /// addresses of every live node but this one. `down` gets the ids of nodes that hold
  /// entities (a shard's home) and are not live: a listing without them would be incomplete.
  virtual std::vector<std::string> peers(std::vector<std::string>& down) const = 0;

  /// GET /v1/cluster: the nodes with their state, each shard's home, owner and epoch (JSON).
  virtual std::string describe() const = 0;

  /// /healthz: whether this node holds a live lease; `why` says what is wrong when not.
  virtual bool healthy(std::string& why) const = 0;

  /// The node's metrics (lease, shards, moves), each registered once; /metrics writes them after
  /// the gateway's and the runtime's. Null: none.
  virtual const factum::metrics::registry* metrics() const = 0;

  // -- planned shard moves (PUT /v1/cluster/moves/...: one entity file from the old home) --

  /// Whether `c` is signed with this cluster's secret (move_signature(), compared in constant
  /// time) and its time is within 5 minutes of this node's clock. False when the node has no
  /// secret: it then takes no file from a move.
  virtual bool authentic(const move_credentials& c) const = 0;
  /// Whether this node is the target of shard `shard`'s move under `epoch` and `key` is in
  /// that shard: ok, or CONFLICT (no such move, another target, or this node already serves
  /// the shard), INVALID_ARGUMENT (another shard). Reads etcd at the first file of each move
  /// (blocks for that read); the others are checked against what it read.
  virtual status accept_move(uint32_t shard, int64_t epoch, const entity_key& key) = 0;
  /// A file of a move was adopted here (counted in metrics()).
  virtual void file_received() = 0;
};

} // namespace factum
