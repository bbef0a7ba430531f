// factum/cluster/node.hpp: one node of a factum cluster. It holds this node's etcd lease, keeps
// the cluster's state (nodes, each shard's home and owner) fresh, takes the shards this node
// should serve, and answers the runtime (entity_ownership: may this node open and commit an
// entity, under which epoch) and the HTTP gateway (cluster_router: serve here, relay to the
// owner, or 503).
//
// The keys in etcd, under /factum/<cluster>/ (docs/cluster.md has the whole design):
// - config            {"shards": S}: created once (compare-and-swap); a node configured with
//                     another S refuses to start.
// - nodes/<id>        {"address": "host:port"}, bound to the node's lease: the live members.
// - homes/<k>         the node whose data directory holds shard k's entity files (storage
//                     "local"). Written when the shard is first used, for the node that
//                     rendezvous hashing over the live members picks, and by a planned move;
//                     never bound to a lease, so an expired lease never hands a shard to a node
//                     without its files. Storage "shared": the node that serves the shard; when
//                     it is down and its lease gone, the live node rendezvous hashing picks
//                     takes the shard over (homes/<k> and shards/<k> in one transaction).
// - shards/<k>        the node serving shard k now, bound to its lease. Its create revision is
//                     the shard's epoch: cluster-wide monotonic, raised at every acquisition.
//                     Only the shard's home acquires it.
//
// Threads: a thread of its own polls etcd (one keep-alive and three range reads per period,
// a fifth of the lease's TTL) and acquires shards; route() may acquire a shard that has never
// been used on the calling thread (once per shard in the cluster's life); every other member
// is cheap and callable from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/runtime/cluster_router.hpp"
#include "factum/runtime/ownership.hpp"
#include "factum/runtime/runtime.hpp"

namespace factum::cluster {

/// The "cluster" object of `factum serve`'s config. Every field documents its default.
struct node_config {
  /// The cluster's name: the etcd prefix /factum/<name>/. A valid key part. Default "factum".
  std::string name = "factum";
  /// This node's id, unique in the cluster and stable across restarts (its files are its
  /// shards' homes). A valid key part. Required.
  std::string node_id;
  /// etcd client URLs (http://host:port), tried in order. Required.
  std::vector<std::string> etcd;
  /// host:port where the other nodes reach this node's HTTP gateway. Required.
  std::string advertise;
  /// Shards of the cluster, fixed when the cluster is created (the first node's value).
  /// 1..4096; default 64.
  uint32_t shards = 64;
  /// The node's lease in etcd: how long after its last renewal the others consider it gone.
  /// etcd grants whole seconds (rounded up); at least 1 s. Default 10 s.
  std::chrono::milliseconds lease_ttl{10'000};
  /// A shard never used is placed only once at least this many nodes are live and not
  /// draining (as this node saw at its last poll): until then its requests answer 503
  /// SHARD_UNAVAILABLE, so that the first requests of a new cluster do not all land on the
  /// nodes that started first (Akka's min-nr-of-members). 1..1024; default 1.
  uint32_t min_nodes = 1;
  /// Where the entity files are: "local" (each node its own data directory; a shard is served
  /// only by its home, and its files move with a planned move), "shared" (one entity root
  /// that every node sees, runtime_config::entity_root: a down node's shards are taken over by
  /// the others once its lease ran out, and a planned move copies nothing) or "replicated"
  /// (see `replication`). Default "local".
  std::string storage = "local";
  /// Storage "replicated": every node keeps its own data directory, and every commit goes to
  /// its shard's log on NATS JetStream before it is acknowledged (docs/cluster.md,
  /// "Replication"). A shard is served by one owner; a down owner's shards are taken over, like
  /// "shared", by a live node that first applies the log to its copy. Required then.
  struct replication_config {
    /// NATS servers (nats://host:port) of the cluster that holds the logs.
    std::vector<std::string> servers;
    /// Replicas of each shard's log: 1, 3 or 5. Default 3.
    int replicas = 3;
    /// A commit the log has not acknowledged within this fails (503). Default 5 s.
    std::chrono::milliseconds ack_timeout{5'000};
  } replication;
  /// Storage "replicated": where this node keeps its copies of the entity files (the runtime's
  /// entity root) and how far it applied each shard's log (DATA/runtime/replica/). Required then.
  std::string data_dir;
  /// Shared by every node: authenticates the entity files one node sends another when a shard
  /// moves (X-Factum-Cluster-Secret). At least 16 characters. Empty (the default): this node
  /// neither sends nor takes shards; `factum cluster drain` and `join` then fail their moves.
  std::string secret;
  /// Receives one JSON object per line for events an operator must hear of (lease lost and
  /// regained, shards acquired). Default: standard error.
  std::function<void(std::string_view)> log;
};

class node final : public entity_ownership, public cluster_router {
 public:
  /// Checks the config, creates or reads the cluster's config in etcd, waits for a previous
  /// incarnation of this node's id to leave (at most one lease TTL), grants the lease,
  /// registers the node and starts the polling thread. INVALID_ARGUMENT for a bad config,
  /// UNAVAILABLE when etcd does not answer, CONFLICT when the cluster was created with
  /// another shard count or the node id is live elsewhere.
  static result<std::shared_ptr<node>> start(node_config cfg);

  /// Stops the thread and revokes the lease (its shards are free at once). Idempotent.
  void stop();
  ~node() override;

  // -- entity_ownership --
  result<owner_claim> claim_for(const entity_key& key) const override;
  bool may_commit(const owner_claim& claim) const override;
  const std::string& node_id() const override;
  /// Floors live in etcd under floors/<tenant>: every node applies them at its next poll.
  bool keeps_degradation_floors() const override { return true; }
  std::map<std::string, std::string> degradation_floors() const override;
  status set_degradation_floor(const std::string& tenant, const std::string& value) const override;

  // -- cluster_router --
  shard_route route(const entity_key& key, bool forwarded) override;
  void refresh(uint32_t shard, std::function<void()> then) override;
  std::vector<std::string> peers(std::vector<std::string>& down) const override;
  std::string describe() const override;
  bool healthy(std::string& why) const override;
  const factum::metrics::registry* metrics() const override;
  bool authentic(const move_credentials& c) const override;
  status accept_move(uint32_t shard, int64_t epoch, const entity_key& key) override;
  void file_received() override;

  // -- planned shard moves (docs/cluster.md, "Moving shards") --

  /// Lets the node move its shards' files out (moves/<k> naming this node as `from`) through
  /// `rt`, and starts the mover thread. Storage "shared": the mover thread also indexes the
  /// files of each shard the node acquires (runtime::index_entities), drops its index rows of
  /// shards other nodes serve (unindex_entities), and closes the activations of shards it no
  /// longer holds (release_entities), so that their new owner can open the files. Call after
  /// the runtime started; detach() before it stops.
  void attach(runtime& rt);
  /// Stops the mover thread (a move under way is left to be resumed by the next attach(),
  /// here or after a restart). Idempotent; stop() calls it.
  void detach();

  /// The shard of `key` in this cluster.
  uint32_t shard_of(const entity_key& key) const;

  /// Storage "replicated": the sink the runtime sends its commits to
  /// (runtime_config::replicator); null otherwise.
  std::shared_ptr<replication::commit_sink> replicator() const;

  struct impl;
  explicit node(std::unique_ptr<impl> p);

 private:
  std::unique_ptr<impl> impl_;
};

} // namespace factum::cluster
