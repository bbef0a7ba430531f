// state.cpp: see state.hpp. The caller's thread.
#include "state.hpp"

#include <algorithm>

namespace factum::cluster::detail {

using nlohmann::json;

namespace {

/// The shard number at the end of `key` after `skip` characters; -1 when it is not one.
int64_t shard_index(const std::string& key, size_t skip, uint32_t shards) {
  if (key.size() <= skip || key.size() - skip > 5)
    return -1;
  auto s = key.substr(skip);
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  auto k = std::stoll(s);
  return k < static_cast<int64_t>(shards) ? k : -1;
}

} // namespace

result<cluster_state> read_state(etcd_client& etcd, const std::string& prefix, uint32_t shards) {
  int64_t rev = 0;
  auto nodes = etcd.range_prefix(prefix + "nodes/");
  if (!nodes)
    return nodes.error();
  auto homes = etcd.range_prefix(prefix + "homes/");
  if (!homes)
    return homes.error();
  auto owners = etcd.range_prefix(prefix + "shards/", &rev); // the revision of the last read
  if (!owners)
    return owners.error();
  cluster_state st;
  st.revision = rev;
  st.shards.resize(shards);
  for (auto& kv : *nodes) {
    auto j = json::parse(kv.value, nullptr, false);
    st.nodes[kv.key.substr(prefix.size() + 6)] =
      j.is_object() && j.contains("address") && j["address"].is_string()
        ? j["address"].get<std::string>()
        : std::string();
  }
  for (auto& kv : *homes)
    if (auto k = shard_index(kv.key, prefix.size() + 6, shards); k >= 0)
      st.shards[k].home = kv.value;
  for (auto& kv : *owners)
    if (auto k = shard_index(kv.key, prefix.size() + 7, shards); k >= 0) {
      auto& s = st.shards[k];
      s.owner = kv.value;
      s.epoch = kv.create_revision;
      s.owner_lease = kv.lease;
      s.owner_mod_revision = kv.mod_revision;
    }
  return st;
}

result<uint32_t> read_shard_count(etcd_client& etcd, const std::string& prefix) {
  auto kv = etcd.get(prefix + "config");
  if (!kv)
    return kv.error();
  if (!kv->has_value())
    return uint32_t{0};
  auto j = json::parse((*kv)->value, nullptr, false);
  if (!j.is_object() || !j.contains("shards") || !j["shards"].is_number_unsigned())
    return status{errc::corruption, prefix + "config is not {\"shards\": N}: " + (*kv)->value};
  return j["shards"].get<uint32_t>();
}

json describe(const cluster_state& st) {
  json nodes = json::array();
  std::map<std::string, bool> seen;
  for (auto& [id, addr] : st.nodes) {
    nodes.push_back({{"id", id}, {"address", addr}, {"state", "live"}});
    seen[id] = true;
  }
  json shards = json::array();
  for (uint32_t k = 0; k < st.shards.size(); ++k) {
    auto& s = st.shards[k];
    for (auto* id : {&s.home, &s.owner})
      if (!id->empty() && !seen[*id]) {
        nodes.push_back({{"id", *id}, {"state", "down"}});
        seen[*id] = true;
      }
    shards.push_back({{"shard", k},
                      {"home", s.home.empty() ? json(nullptr) : json(s.home)},
                      {"owner", s.owner.empty() ? json(nullptr) : json(s.owner)},
                      {"epoch", s.epoch}});
  }
  return {{"revision", st.revision}, {"nodes", nodes}, {"shards", shards}};
}

} // namespace factum::cluster::detail
