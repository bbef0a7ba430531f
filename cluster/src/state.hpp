// state.hpp (private): the cluster's state as etcd holds it (docs/cluster.md, "Keys in etcd"),
// read in one pass (one range read of the cluster's prefix) and shown as GET /v1/cluster and
// `factum cluster status` show it. Plain functions over an etcd_client; the caller's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/cluster/etcd_client.hpp"

namespace factum::cluster::detail {

/// One shard as etcd holds it.
struct shard_view {
  std::string home;  ///< node id; "" while the shard was never used
  std::string owner; ///< node id serving it; "" when nobody holds it
  int64_t epoch = 0; ///< the owner key's create revision
  int64_t owner_lease = 0;
  int64_t owner_mod_revision = 0;
  int64_t home_mod_revision = 0; ///< 0 while the shard was never used
};

/// A planned move of a shard's files (moves/<k>): from its home to another node.
struct move_view {
  std::string from, to;
  int64_t epoch = 0;        ///< the key's create revision: the claim each moved file gets
  int64_t mod_revision = 0; ///< for the compare of a write that ends or fails the move
  std::string failed;       ///< why the move was given up; "" while it is under way
  bool handed_over = false; ///< the new home is the home; the old one removes its copies
};

/// moves/<k> as a move_view; nullopt when its value is not a move.
std::optional<move_view> read_move(const etcd_kv& kv);

/// The cluster as one read saw it.
struct cluster_state {
  int64_t revision = 0;                     ///< etcd's revision when the state was read
  std::map<std::string, std::string> nodes; ///< live node id -> address
  std::vector<shard_view> shards;
  std::map<uint32_t, move_view> moves; ///< by shard
  std::vector<std::string> draining;   ///< node ids being drained (sorted)
  /// Operators' degradation floors: tenant -> {"level","reason","actor","at"}, or "" once removed
  /// (floors/<tenant>).
  std::map<std::string, std::string> floors;

  /// Whether `id` is being drained (no shard is placed or moved to it).
  bool is_draining(const std::string& id) const;
  /// The live nodes a shard may be placed on or moved to: every live node not being drained.
  std::vector<std::string> placeable() const;
};

/// moves/<k>'s value: {"from", "to"} and "failed" (given up) or "handed_over" (true).
std::string move_value(const move_view& m);

/// The etcd prefix of cluster `name`: "/factum/<name>/".
inline std::string prefix_of(const std::string& name) {
  return "/factum/" + name + "/";
}

/// Reads nodes/, homes/, shards/, moves/, draining/ and floors/ under `prefix` (one range read, one
/// revision) for a cluster of `shards` shards (keys of shards out of range are ignored).
result<cluster_state> read_state(etcd_client& etcd, const std::string& prefix, uint32_t shards);

/// The shard count stored in `prefix`config (0 when the cluster was never created).
result<uint32_t> read_shard_count(etcd_client& etcd, const std::string& prefix);

/// The JSON of GET /v1/cluster: nodes (live, or down for a home or owner without a lease; each
/// with "draining"), every shard's home, owner and epoch, and the moves under way or failed.
nlohmann::json describe(const cluster_state& st);

} // namespace factum::cluster::detail
