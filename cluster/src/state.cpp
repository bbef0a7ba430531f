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

bool cluster_state::is_draining(const std::string& id) const {
  return std::binary_search(draining.begin(), draining.end(), id);
}

std::vector<std::string> cluster_state::placeable() const {
  std::vector<std::string> out;
  for (auto& [id, address] : nodes)
    if (!is_draining(id))
      out.push_back(id);
  return out;
}

std::string move_value(const move_view& m) {
  json j = {{"from", m.from}, {"to", m.to}};
  if (!m.failed.empty())
    j["failed"] = m.failed;
  if (m.handed_over)
    j["handed_over"] = true;
  return j.dump();
}

std::optional<move_view> read_move(const etcd_kv& kv) {
  auto j = json::parse(kv.value, nullptr, false);
  if (!j.is_object() || !j.contains("from") || !j["from"].is_string() || !j.contains("to") ||
      !j["to"].is_string())
    return std::nullopt;
  move_view m;
  m.from = j["from"].get<std::string>();
  m.to = j["to"].get<std::string>();
  if (j.contains("failed") && j["failed"].is_string())
    m.failed = j["failed"].get<std::string>();
  m.handed_over = j.value("handed_over", false);
  m.epoch = kv.create_revision;
  m.mod_revision = kv.mod_revision;
  return m;
}

namespace {

/// Reads one key of the cluster's prefix (`rest`: what follows it) into st.
void read_key(cluster_state& st, const etcd_kv& kv, std::string_view rest, uint32_t shards,
              size_t at) {
  auto under = [&](std::string_view dir) { return rest.substr(0, dir.size()) == dir; };
  if (under("nodes/")) {
    auto j = json::parse(kv.value, nullptr, false);
    st.nodes[kv.key.substr(at + 6)] =
      j.is_object() && j.contains("address") && j["address"].is_string()
        ? j["address"].get<std::string>()
        : std::string();
  } else if (under("homes/")) {
    if (auto k = shard_index(kv.key, at + 6, shards); k >= 0) {
      st.shards[k].home = kv.value;
      st.shards[k].home_mod_revision = kv.mod_revision;
    }
  } else if (under("shards/")) {
    if (auto k = shard_index(kv.key, at + 7, shards); k >= 0) {
      auto& s = st.shards[k];
      s.owner = kv.value;
      s.epoch = kv.create_revision;
      s.owner_lease = kv.lease;
      s.owner_mod_revision = kv.mod_revision;
    }
  } else if (under("moves/")) {
    auto k = shard_index(kv.key, at + 6, shards);
    if (auto m = read_move(kv); k >= 0 && m)
      st.moves[static_cast<uint32_t>(k)] = std::move(*m);
  } else if (under("draining/")) {
    st.draining.push_back(kv.key.substr(at + 9));
  } else if (under("floors/")) {
    st.floors[kv.key.substr(at + 7)] = kv.value;
  }
}

} // namespace

result<cluster_state> read_state(etcd_client& etcd, const std::string& prefix, uint32_t shards) {
  int64_t rev = 0;
  auto all = etcd.range_prefix(prefix, &rev);
  if (!all)
    return all.error();
  cluster_state st;
  st.revision = rev;
  st.shards.resize(shards);
  for (auto& kv : *all)
    read_key(st, kv, std::string_view(kv.key).substr(prefix.size()), shards, prefix.size());
  std::sort(st.draining.begin(), st.draining.end());
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
    nodes.push_back(
      {{"id", id}, {"address", addr}, {"state", "live"}, {"draining", st.is_draining(id)}});
    seen[id] = true;
  }
  json shards = json::array();
  for (uint32_t k = 0; k < st.shards.size(); ++k) {
    auto& s = st.shards[k];
    for (auto* id : {&s.home, &s.owner})
      if (!id->empty() && !seen[*id]) {
        nodes.push_back({{"id", *id}, {"state", "down"}, {"draining", st.is_draining(*id)}});
        seen[*id] = true;
      }
    shards.push_back({{"shard", k},
                      {"home", s.home.empty() ? json(nullptr) : json(s.home)},
                      {"owner", s.owner.empty() ? json(nullptr) : json(s.owner)},
                      {"epoch", s.epoch}});
  }
  json moves = json::array();
  for (auto& [k, m] : st.moves)
    moves.push_back({{"shard", k},
                     {"from", m.from},
                     {"to", m.to},
                     {"epoch", m.epoch},
                     {"state", !m.failed.empty() ? "failed"
                               : m.handed_over   ? "handed_over"
                                                 : "moving"},
                     {"failed", m.failed.empty() ? json(nullptr) : json(m.failed)}});
  return {{"revision", st.revision}, {"nodes", nodes}, {"shards", shards}, {"moves", moves}};
}

} // namespace factum::cluster::detail
