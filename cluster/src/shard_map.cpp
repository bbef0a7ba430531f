// shard_map.cpp: the shard of an entity and the rendezvous owner of a shard
// (factum/cluster/shard_map.hpp). Pure; any thread.
#include "factum/cluster/shard_map.hpp"

#include "factum/storage/sha256.hpp"

namespace factum::cluster {

namespace {

/// The first 16 hex digits of a SHA-256 hex digest as a uint64 (its first 8 bytes, big-endian).
uint64_t leading_uint64(const std::string& hex) {
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    char c = hex[i];
    v = v << 4 | uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return v;
}

uint64_t weight(const std::string& node, uint32_t shard) {
  std::string buf = node;
  buf.push_back('\0');
  buf += std::to_string(shard);
  return leading_uint64(sha256_hex(buf));
}

} // namespace

uint32_t shard_of(const entity_key& key, uint32_t shards) {
  return shard_of_digest(key.digest(), shards);
}

std::string rendezvous_owner(uint32_t shard, const std::vector<std::string>& node_ids) {
  const std::string* best = nullptr;
  uint64_t best_weight = 0;
  for (const auto& node : node_ids) {
    uint64_t w = weight(node, shard);
    if (!best || w > best_weight || (w == best_weight && node < *best)) {
      best = &node;
      best_weight = w;
    }
  }
  return best ? *best : std::string();
}

std::vector<uint32_t> shards_of(const std::string& node, const std::vector<std::string>& nodes,
                                uint32_t shards) {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < shards; ++s)
    if (rendezvous_owner(s, nodes) == node)
      out.push_back(s);
  return out;
}

} // namespace factum::cluster
