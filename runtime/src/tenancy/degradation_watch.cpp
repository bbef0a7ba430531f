// degradation_watch.cpp: the degradation watcher (degradation_watch.hpp): gathers the rules'
// signals from the runtime, evaluates the board and records each move in the tenant's runtime
// entity; in a cluster it stores operators' floors in the cluster and applies everyone's. Its own
// thread; kick() and set_override() from any thread.
#include "tenancy/degradation_watch.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <future>
#include <set>

#include "runtime_core.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// The tenant part of an entity key string ("tenant/type/id").
std::string tenant_of(const std::string& key_str) {
  return key_str.substr(0, key_str.find('/'));
}

/// Whether the file system of `dir` has fewer than `min_free` bytes for unprivileged writers.
bool disk_low(const std::filesystem::path& dir, int64_t min_free) {
  if (min_free <= 0)
    return false;
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) != 0)
    return false; // not measurable: the storage's own errors say more than a guess here
  auto free_bytes = static_cast<long double>(sv.f_bavail) * static_cast<long double>(sv.f_frsize);
  return free_bytes < static_cast<long double>(min_free);
}

/// The rules' signals of each tenant: breakers from the tool board, quotas from the tenant
/// accounts.
std::map<std::string, degradation_signals> gather(runtime_core& c) {
  std::map<std::string, degradation_signals> out;
  for (auto& [tool, entities] : c.tools.open_breakers())
    for (auto& key_str : entities)
      out[tenant_of(key_str)].open_tools.insert(tool);
  for (auto& [tenant, quota] : c.cfg.tenant_quotas) {
    if (!quota.max_bytes)
      continue;
    auto u = tenant_usage_snapshot(c, tenant);
    if (u.bytes >= *quota.max_bytes)
      out[tenant].over_quota = true;
  }
  return out;
}

json change_json(const degradation_change& ch) {
  return {{"from", ch.from},
          {"to", ch.to},
          {"level", degradation_level_name(ch.to)},
          {"reasons", ch.reasons}};
}

/// A tenant's runtime entity: its facts are written by internal methods only.
class runtime_entity final : public entity {};

} // namespace

void add_runtime_entity_type(entity_registry& types) {
  types.add(type_builder<runtime_entity>(runtime_entity_type).build());
}

void degradation_watch::start(runtime_core* rt) {
  rt_ = rt;
  if (!rt_->degradation.enabled())
    return;
  rt_->tools.on_breaker_move([this] { kick(); });
  thread_ = std::thread([this] {
    if (!floor_keeper()) // a cluster's floors come with every check instead
      restore_floors();
    run();
  });
}

void degradation_watch::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void degradation_watch::kick() {
  {
    std::lock_guard<std::mutex> g(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

void degradation_watch::run() {
  std::unique_lock<std::mutex> g(mu_);
  auto interval = rt_->degradation.config().check_interval;
  while (!stop_) {
    auto floors = std::move(floors_);
    floors_.clear();
    g.unlock();
    for (auto& f : floors)
      store_floor(std::move(f));
    evaluate_once();
    g.lock();
    cv_.wait_for(g, interval, [&] { return stop_ || kicked_; });
    kicked_ = false;
  }
}

void degradation_watch::evaluate_once() {
  auto& c = *rt_;
  if (auto* keeper = floor_keeper())
    apply_cluster_floors(*keeper);
  auto changes = c.degradation.evaluate(
    gather(c), disk_low(c.cfg.entity_dir(), c.degradation.config().min_free_bytes), c.now());
  for (auto& ch : changes)
    record(ch, "degradation_level_changed", json::object(), nullptr);
}

void degradation_watch::record(const degradation_change& ch, const char* subtype, json extra,
                               std::function<void(call_reply)> done) {
  auto& c = *rt_;
  c.stats.degradation_changes.inc(ch.from != ch.to);
  auto data = change_json(ch);
  for (auto& [k, v] : extra.items())
    data[k] = v;
  c.log_event({{"level", ch.to > ch.from ? "warn" : "info"},
               {"event", subtype},
               {"tenant", ch.tenant},
               {"data", data}});
  call_request req;
  req.method = "@degradation";
  req.args = json{{"subtype", subtype}, {"data", std::move(data)}}.dump();
  req.trace_id = new_trace_id();
  entity_key key{ch.tenant, runtime_entity_type, degradation_entity_id};
  // In a cluster the node that owns the runtime entity writes its facts (its own levels, and
  // every floor, which it applies from the cluster too); another node leaves them to it.
  if (auto* o = c.cfg.ownership.get(); o) {
    if (auto claim = o->claim_for(key); !claim && claim.error().code() == errc::not_owner) {
      if (done)
        done(call_reply::success("null"));
      return;
    }
  }
  auto* core = rt_;
  c.route(key, std::move(req), std::chrono::seconds(30),
          [core, tenant = ch.tenant, done = std::move(done)](call_reply r) {
            if (!r.ok)
              core->log_event({{"level", "error"},
                               {"event", "degradation_fact_failed"},
                               {"tenant", tenant},
                               {"detail", r.body}});
            if (done)
              done(std::move(r));
          });
}

void degradation_watch::set_override(const std::string& tenant, std::optional<int> level,
                                     std::string reason, std::string actor,
                                     std::function<void(call_reply)> done) {
  if (floor_keeper()) {
    {
      std::lock_guard<std::mutex> g(mu_);
      floors_.push_back({tenant, level, std::move(reason), std::move(actor), std::move(done)});
      kicked_ = true;
    }
    cv_.notify_all();
    return;
  }
  apply_floor(tenant, level, std::move(reason), std::move(actor), std::move(done));
}

// -- floors --

const entity_ownership* degradation_watch::floor_keeper() const {
  auto* o = rt_->cfg.ownership.get();
  return o && o->keeps_degradation_floors() ? o : nullptr;
}

void degradation_watch::store_floor(pending_floor f) {
  json value;
  if (f.level)
    value = {{"level", *f.level}, {"reason", f.reason}, {"actor", f.actor}, {"at", rt_->now()}};
  auto st = floor_keeper()->set_degradation_floor(f.tenant, f.level ? value.dump() : "");
  if (!st)
    return f.done(
      problems::cluster_unavailable.reply("the floor could not be stored in the cluster (nothing "
                                          "changed): " +
                                          st.message()));
  apply_floor(f.tenant, f.level, std::move(f.reason), std::move(f.actor), std::move(f.done));
}

void degradation_watch::apply_cluster_floors(const entity_ownership& keeper) {
  auto floors = keeper.degradation_floors();
  std::set<std::string> tenants(rt_->degradation.config().tenants.begin(),
                                rt_->degradation.config().tenants.end());
  for (auto& [t, _] : floors)
    tenants.insert(t);
  for (auto& t : tenants) {
    std::optional<int> level;
    std::string reason, actor;
    if (auto it = floors.find(t); it != floors.end()) {
      auto j = json::parse(it->second, nullptr, false);
      if (j.is_object() && j["level"].is_number_integer()) {
        level = std::clamp(j["level"].get<int>(), 0, max_degradation_level);
        reason = j.value("reason", "");
        actor = j.value("actor", "");
      }
    }
    auto now = rt_->degradation.status_of(t);
    if (now.override_level == level &&
        (!level || (now.override_reason == reason && now.override_actor == actor)))
      continue;
    apply_floor(t, level, std::move(reason), std::move(actor), nullptr);
  }
}

void degradation_watch::apply_floor(const std::string& tenant, std::optional<int> level,
                                    std::string reason, std::string actor,
                                    std::function<void(call_reply)> done) {
  auto& b = rt_->degradation;
  int before = b.level_of(tenant);
  auto moved = b.set_override(tenant, level, reason, actor);
  degradation_change ch = moved ? *moved : degradation_change{tenant, before, before, {}};
  if (!moved)
    ch.reasons = b.status_of(tenant).reasons;
  json ov = {{"level", level ? json(*level) : json(nullptr)}, {"reason", reason}, {"actor", actor}};
  record(ch, "degradation_override", json{{"override", std::move(ov)}}, std::move(done));
}

void degradation_watch::restore_floors() {
  auto& c = *rt_;
  for (auto& tenant : c.degradation.config().tenants) {
    call_request req;
    req.method = "@facts";
    req.args = json{
      {"type", "lifecycle"},
      {"subtype", "degradation_override"},
      {"order", "desc"},
      {"limit",
       1}}.dump();
    req.trace_id = new_trace_id();
    auto p = std::make_shared<std::promise<call_reply>>();
    auto f = p->get_future();
    c.route(entity_key{tenant, runtime_entity_type, degradation_entity_id}, std::move(req),
            std::chrono::seconds(30), [p](call_reply r) { p->set_value(std::move(r)); });
    auto r = f.get();
    if (!r.ok) {
      if (r.code != problems::entity_not_found.code)
        c.log_event({{"level", "error"},
                     {"event", "degradation_override_unread"},
                     {"tenant", tenant},
                     {"detail", r.body}});
      continue;
    }
    auto facts = r.json();
    if (!facts.is_array() || facts.empty())
      continue;
    auto ov = facts[0].value("data", json::object()).value("override", json::object());
    auto lv = ov.value("level", json(nullptr));
    if (lv.is_number_integer())
      c.degradation.set_override(tenant, lv.get<int>(), ov.value("reason", std::string()),
                                 ov.value("actor", std::string()));
  }
}

} // namespace factum::detail

namespace factum {

degradation_status runtime::degradation_of(const std::string& tenant) const {
  return impl_->core->degradation.status_of(tenant);
}

std::vector<degradation_status> runtime::degradation() const {
  return impl_->core->degradation.all();
}

void runtime::set_degradation(const std::string& tenant, std::optional<int> level,
                              std::string reason, std::string actor,
                              std::function<void(call_reply)> done) {
  auto& c = *impl_->core;
  if (!c.degradation.enabled())
    return done(
      problems::degradation_not_enabled.reply("degradation levels are not enabled in this server's "
                                              "configuration"));
  if (level && (*level < 0 || *level > max_degradation_level))
    return done(problems::invalid_argument.reply("level must be between 0 and 4, or null"));
  if (auto st = validate_key_part(tenant, "tenant"); !st)
    return done(problems::invalid_argument.reply(st.message()));
  c.degradation_watcher.set_override(tenant, level, std::move(reason), std::move(actor),
                                     std::move(done));
}

} // namespace factum
