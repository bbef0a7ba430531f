// factum/runtime/ownership.hpp: what the runtime asks of a cluster before it opens an entity and
// before it commits one (runtime_config::ownership). Without one (a node alone) every entity is
// this node's and nothing is checked. A cluster node (factum/cluster/node.hpp) implements it
// from its etcd lease and the shards it holds.
//
// Two checks, one per failure they guard against:
// - At activation the runtime asks claim_for(key) and claims the entity's file under its epoch
//   (entity_store::claim_owner): a file claimed by a newer owner refuses it, and every write
//   transaction of the store then checks, inside the transaction, that the file's epoch is still
//   its claim. That is the fence: it needs no clock, and holds whatever the lease says.
// - Before each commit the runtime asks may_commit(claim): false once the node's lease may
//   have run out or the shard was taken again under another epoch. That makes a node that was
//   paused past its lease refuse the writes it had queued, instead of committing them while a
//   new owner may already serve the entity (liveness of the single-owner rule; the fence above
//   is what keeps it safe).
// Threads: both are called from any thread (storage threads, CAF workers) and must not block.
// The degradation floors (below) are read and written by the runtime's degradation watcher.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum {

/// What an activation holds: the epoch its file was claimed under, and the entity's shard (the
/// cluster's own number for it), kept so that the check before each commit need not derive the
/// shard from the key again.
struct owner_claim {
  int64_t epoch = 0;
  uint32_t shard = 0;
};

/// The cluster's answer to "may this node own this entity now" (runtime_config::ownership).
class entity_ownership {
 public:
  virtual ~entity_ownership() = default;

  /// The claim under which this node owns `key`'s shard now (epoch > 0), or NOT_OWNER (another
  /// node owns it, or nobody does) or UNAVAILABLE (this node has no live lease). Must not block.
  virtual result<owner_claim> claim_for(const entity_key& key) const = 0;

  /// Whether a commit made under `claim` may happen now: the lease is live and the shard is
  /// still held under the claim's epoch. Must not block; called before every commit.
  virtual bool may_commit(const owner_claim& claim) const = 0;

  /// This node's id (recorded with each claim in the entity file's owner history).
  virtual const std::string& node_id() const = 0;

  // -- operators' degradation floors, kept by the cluster --

  /// Whether the cluster keeps the operators' degradation floors (so that one floor holds on
  /// every node, and across restarts): set_degradation_floor stores one, degradation_floors
  /// reads them. False: each runtime keeps its own (in its tenants' runtime entities).
  virtual bool keeps_degradation_floors() const { return false; }
  /// Every tenant's floor as last read from the cluster: tenant -> the JSON text that
  /// set_degradation_floor stored. Must not block.
  virtual std::map<std::string, std::string> degradation_floors() const { return {}; }
  /// Stores `value` (JSON text) as `tenant`'s floor, or removes the floor when `value` is
  /// empty. May block for one write to the cluster's store; UNAVAILABLE when it fails.
  virtual status set_degradation_floor(const std::string& tenant, const std::string& value) const {
    (void)tenant, (void)value;
    return status{errc::unavailable, "this cluster keeps no degradation floors"};
  }
};

} // namespace factum
