// factum/cluster/shard_map.hpp: which shard an entity belongs to and which node should own a
// shard, for cluster mode. Pure functions of their arguments, the same on every machine and in
// every version of factum (changing one moves data between nodes); any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "factum/storage/entity_key.hpp"

namespace factum::cluster {

/// The shard of `key` among `shards` (>= 1; 0 when shards is 0): the first 8 bytes of
/// SHA-256(tenant '\0' type '\0' id), read as a big-endian uint64, modulo `shards`. The hashed
/// bytes are those of entity_key::digest(), so shard_of is also the first 16 hex digits of the
/// digest modulo `shards`.
uint32_t shard_of(const entity_key& key, uint32_t shards);

/// The node that should own `shard` by highest-random-weight (rendezvous) hashing: the node
/// whose weight, the first 8 bytes of SHA-256(node_id '\0' decimal shard) read as a big-endian
/// uint64 (e.g. SHA-256("n1\0" "17") for node "n1", shard 17), is the largest; on equal
/// weights, the smaller node_id. "" for an empty list. Independent of the list's order and of
/// duplicates in it. Adding a node moves only the shards it wins; removing one moves only its
/// own.
std::string rendezvous_owner(uint32_t shard, const std::vector<std::string>& node_ids);

/// The shards among 0..shards-1 whose rendezvous_owner over `nodes` is `node`, ascending.
std::vector<uint32_t> shards_of(const std::string& node, const std::vector<std::string>& nodes,
                                uint32_t shards);

} // namespace factum::cluster
