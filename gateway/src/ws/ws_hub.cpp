// http/ws_hub.cpp: the gateway's WebSocket connections by entity (ws_hub.hpp). Any thread;
// every member takes the hub's mutex, and the links are called with it released.
#include "ws/ws_hub.hpp"

#include <algorithm>
#include <random>

namespace factum::http {

namespace {

/// "w" and 16 hex digits: a per-process sequence mixed with a random start, so that ids are
/// not reused within a process and are hard to guess across processes.
std::string new_connection_id(uint64_t order) {
  static const uint64_t salt = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  uint64_t z = salt + order * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  static constexpr char hex[] = "0123456789abcdef";
  std::string id(17, 'w');
  for (int i = 0; i < 16; ++i)
    id[16 - i] = hex[(z >> (4 * i)) & 15];
  return id;
}

bool has_tag(const connection& c, const std::string& tag) {
  return tag.empty() || std::find(c.tags.begin(), c.tags.end(), tag) != c.tags.end();
}

} // namespace

ws_hub::admission ws_hub::admit(const entity_key& key, nlohmann::json params,
                                std::weak_ptr<ws_link> link) {
  admission a;
  auto ks = key.to_string();
  std::lock_guard<std::mutex> g(mu_);
  auto& mine = by_entity_[ks];
  if (a.why = caps_.admit(mine.size(), key.tenant); a.why != admission::refusal::none) {
    if (mine.empty())
      by_entity_.erase(ks);
    return a;
  }
  auto order = next_order_++;
  a.id = new_connection_id(order);
  entry e;
  e.key = key;
  e.entity = ks;
  e.order = order;
  e.conn.id = a.id;
  e.conn.params = std::move(params);
  e.link = std::move(link);
  by_id_.emplace(a.id, std::move(e));
  mine.emplace(order, a.id);
  return a;
}

bool ws_hub::open(const std::string& id, std::vector<std::string> tags, nlohmann::json attachment) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.open)
    return false;
  it->second.open = true;
  it->second.conn.tags = std::move(tags);
  it->second.conn.attachment = std::move(attachment);
  ++open_;
  return true;
}

std::optional<connection> ws_hub::remove(const std::string& id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end())
    return std::nullopt;
  auto& e = it->second;
  if (auto m = by_entity_.find(e.entity); m != by_entity_.end()) {
    m->second.erase(e.order);
    if (m->second.empty())
      by_entity_.erase(m);
  }
  caps_.release(e.key.tenant);
  std::optional<connection> out;
  if (e.open) {
    --open_;
    out = std::move(e.conn);
  }
  by_id_.erase(it);
  return out;
}

std::optional<connection> ws_hub::find(const std::string& id) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end())
    return std::nullopt;
  return it->second.conn;
}

size_t ws_hub::open_count() const {
  std::lock_guard<std::mutex> g(mu_);
  return open_;
}

size_t ws_hub::count_of(const entity_key& key) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_entity_.find(key.to_string());
  return it == by_entity_.end() ? 0 : it->second.size();
}

std::vector<connection> ws_hub::connections(const entity_key& key, const std::string& tag) {
  std::vector<connection> out;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_entity_.find(key.to_string());
  if (it == by_entity_.end())
    return out;
  for (auto& [order, id] : it->second) {
    auto& e = by_id_.at(id);
    if (e.open && has_tag(e.conn, tag))
      out.push_back(e.conn);
  }
  return out;
}

void ws_hub::deliver(const entity_key& key, std::vector<outgoing_frame> frames) {
  // Resolved under the lock, sent without it: (link, data, binary) or (link, close).
  struct job {
    std::shared_ptr<ws_link> link;
    std::shared_ptr<const std::string> data;
    const outgoing_frame* frame;
  };
  std::vector<job> jobs;
  auto ks = key.to_string();
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& f : frames) {
      auto data = std::make_shared<const std::string>(std::move(f.data));
      if (f.broadcast) {
        auto it = by_entity_.find(ks);
        if (it == by_entity_.end())
          continue;
        for (auto& [order, id] : it->second) {
          auto& e = by_id_.at(id);
          if (e.open && has_tag(e.conn, f.tag))
            if (auto l = e.link.lock())
              jobs.push_back({std::move(l), data, &f});
        }
        continue;
      }
      auto it = by_id_.find(f.conn_id);
      if (it == by_id_.end() || it->second.entity != ks) // another entity's: not this one's to use
        continue;
      if (auto l = it->second.link.lock())
        jobs.push_back({std::move(l), data, &f});
    }
  }
  for (auto& j : jobs) {
    if (j.frame->what == outgoing_frame::kind::close)
      j.link->close(j.frame->code, *j.data);
    else
      j.link->send(j.data, j.frame->what == outgoing_frame::kind::binary);
  }
}

} // namespace factum::http

namespace factum::http {

void ws_hub::release(const std::function<bool(const entity_key&)>& which) {
  std::vector<std::pair<entity_key, std::weak_ptr<ws_link>>> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    all.reserve(by_id_.size());
    for (auto& [id, e] : by_id_)
      all.emplace_back(e.key, e.link);
  }
  for (auto& [key, link] : all) // `which` runs unlocked: it may take its own locks
    if (which(key))
      if (auto l = link.lock())
        l->close(1012, "the entity moved to another node; reconnect");
}

} // namespace factum::http
