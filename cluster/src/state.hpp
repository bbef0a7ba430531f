// state.hpp (private): the cluster's state as etcd holds it (docs/cluster.md, "Keys in etcd"),
// read in one pass (three range reads) and shown as GET /v1/cluster and `factum cluster status`
// show it. Plain functions over an etcd_client; the caller's thread.
#pragma once

#include <cstdint>
#include <map>
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
};

/// The cluster as one read saw it.
struct cluster_state {
  int64_t revision = 0; ///< etcd's revision when shards/ was read (the last of the three reads)
  std::map<std::string, std::string> nodes; ///< live node id -> address
  std::vector<shard_view> shards;
};

/// The etcd prefix of cluster `name`: "/factum/<name>/".
inline std::string prefix_of(const std::string& name) {
  return "/factum/" + name + "/";
}

/// Reads nodes/, homes/ and shards/ under `prefix` for a cluster of `shards` shards (keys of
/// shards out of range are ignored).
result<cluster_state> read_state(etcd_client& etcd, const std::string& prefix, uint32_t shards);

/// The shard count stored in `prefix`config (0 when the cluster was never created).
result<uint32_t> read_shard_count(etcd_client& etcd, const std::string& prefix);

/// The JSON of GET /v1/cluster: nodes (live, or down for a home or owner without a lease) and
/// every shard's home, owner and epoch.
nlohmann::json describe(const cluster_state& st);

} // namespace factum::cluster::detail
