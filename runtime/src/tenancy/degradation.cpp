// degradation.cpp: the degradation board (degradation.hpp): the rules of each level, the delay
// before a level falls, operators' floors and the feature matrix. Any thread, under the
// board's mutex.
#include "tenancy/degradation.hpp"

#include <algorithm>

namespace factum::detail {

bool method_pattern_covers(std::string_view pattern, std::string_view type,
                           std::string_view method) {
  if (pattern == "*")
    return true;
  auto dot = pattern.rfind('.'); // type names may hold dots; method names do not
  if (dot == std::string_view::npos || pattern.substr(0, dot) != type)
    return false;
  auto m = pattern.substr(dot + 1);
  return m == "*" || m == method;
}

call_reply degraded_reply(const degradation_refusal& no, std::chrono::seconds retry_after,
                          const std::string& what) {
  call_error e = problems::degraded.error(
    what + " at degradation level " + std::to_string(no.level) + " (" +
    degradation_level_name(no.level) + "): feature " + no.feature + " is turned off");
  e.details = {{"level", no.level},
               {"level_name", degradation_level_name(no.level)},
               {"feature", no.feature},
               {"retry_after_ms", retry_after.count() * 1000}};
  auto r = call_reply::failure(e);
  r.retry_after_ms = retry_after.count() * 1000;
  return r;
}

namespace {

bool covers_method(const degraded_feature& f, std::string_view type, std::string_view method) {
  return std::any_of(f.methods.begin(), f.methods.end(),
                     [&](const std::string& p) { return method_pattern_covers(p, type, method); });
}

bool covers_tool(const degraded_feature& f, std::string_view tool, std::string_view) {
  return std::find(f.tools.begin(), f.tools.end(), tool) != f.tools.end();
}

} // namespace

degradation_board::degradation_board(degradation_config cfg) : cfg_(std::move(cfg)) {
  critical_.insert(cfg_.critical_tools.begin(), cfg_.critical_tools.end());
  for (auto& t : cfg_.tenants)
    tenants_.try_emplace(t);
}

void degradation_board::note_quarantine(const std::string& tenant, int64_t now_ms) {
  std::lock_guard<std::mutex> g(mu_);
  tenants_[tenant].quarantined_at = now_ms;
}

int degradation_board::target(const tenant_state& t, const degradation_signals* s, bool disk_low,
                              int64_t now_ms, std::vector<std::string>& why) const {
  int level = 0;
  auto raise = [&](int l, std::string reason) {
    level = std::max(level, l);
    why.push_back(std::move(reason));
  };
  if (s) {
    for (auto& tool : s->open_tools)
      raise(critical_.count(tool) ? 2 : 1, "breaker_open:" + tool);
    if (s->over_quota)
      raise(3, "over_quota");
  }
  if (t.quarantined_at && now_ms - *t.quarantined_at < cfg_.quarantine_hold.count())
    raise(3, "quarantine");
  if (disk_low)
    raise(3, "disk_low");
  return level;
}

std::vector<degradation_change>
degradation_board::evaluate(const std::map<std::string, degradation_signals>& signals,
                            bool disk_low, int64_t now_ms) {
  std::vector<degradation_change> out;
  if (!cfg_.enabled)
    return out;
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [name, _] : signals)
    tenants_.try_emplace(name);
  base_ = disk_low ? 3 : 0;
  for (auto& [name, t] : tenants_) {
    auto it = signals.find(name);
    std::vector<std::string> why;
    int want = target(t, it == signals.end() ? nullptr : &it->second, disk_low, now_ms, why);
    int before = t.level();
    if (want >= t.computed) {
      t.computed = want;
      t.lower_since = -1;
      t.reasons = std::move(why);
    } else if (t.lower_since < 0) {
      t.lower_since = now_ms;
    }
    if (t.lower_since >= 0 && now_ms - t.lower_since >= cfg_.recover_after.count()) {
      t.computed = want;
      t.lower_since = -1;
      t.reasons = std::move(why);
    }
    if (t.level() != before)
      out.push_back({name, before, t.level(), reasons_of(t)});
  }
  update_max_locked();
  return out;
}

std::optional<degradation_change> degradation_board::set_override(const std::string& tenant,
                                                                  std::optional<int> level,
                                                                  std::string reason,
                                                                  std::string actor) {
  std::lock_guard<std::mutex> g(mu_);
  auto& t = tenants_[tenant];
  int before = t.level();
  t.floor = level;
  t.floor_reason = level ? std::move(reason) : std::string();
  t.floor_actor = level ? std::move(actor) : std::string();
  update_max_locked();
  if (t.level() == before)
    return std::nullopt;
  return degradation_change{tenant, before, t.level(), reasons_of(t)};
}

std::vector<std::string> degradation_board::reasons_of(const tenant_state& t) const {
  auto out = t.reasons;
  if (t.floor && *t.floor > 0)
    out.push_back("operator");
  return out;
}

void degradation_board::update_max_locked() {
  int m = base_;
  for (auto& [_, t] : tenants_)
    m = std::max(m, t.level());
  max_level_.store(m, std::memory_order_release);
}

int degradation_board::level_of(std::string_view tenant) const {
  if (max_level_.load(std::memory_order_acquire) == 0)
    return 0;
  std::lock_guard<std::mutex> g(mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? base_ : it->second.level();
}

degradation_status degradation_board::status_locked(const std::string& name,
                                                    const tenant_state* t) const {
  degradation_status s;
  s.tenant = name;
  s.level = t ? t->level() : base_;
  if (t) {
    s.reasons = reasons_of(*t);
    s.override_level = t->floor;
    s.override_reason = t->floor_reason;
    s.override_actor = t->floor_actor;
  } else if (base_ > 0) {
    s.reasons = {"disk_low"};
  }
  for (auto& f : cfg_.features)
    if (f.max_level < s.level)
      s.features_off.push_back(f.name);
  return s;
}

degradation_status degradation_board::status_of(const std::string& tenant) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = tenants_.find(tenant);
  return status_locked(tenant, it == tenants_.end() ? nullptr : &it->second);
}

std::vector<degradation_status> degradation_board::all() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<degradation_status> out;
  for (auto& [name, t] : tenants_)
    out.push_back(status_locked(name, &t));
  return out;
}

std::optional<degradation_refusal> degradation_board::find_refusal(
  std::string_view tenant,
  bool (*covers)(const degraded_feature&, std::string_view, std::string_view), std::string_view a,
  std::string_view b) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = tenants_.find(tenant);
  int level = it == tenants_.end() ? base_ : it->second.level();
  for (auto& f : cfg_.features)
    if (f.max_level < level && covers(f, a, b))
      return degradation_refusal{f.name, level};
  return std::nullopt;
}

std::optional<degradation_refusal>
degradation_board::refuses_method(std::string_view tenant, std::string_view type,
                                  std::string_view method) const {
  if (max_level_.load(std::memory_order_acquire) == 0 || cfg_.features.empty())
    return std::nullopt;
  return find_refusal(tenant, covers_method, type, method);
}

std::optional<degradation_refusal> degradation_board::refuses_tool(std::string_view tenant,
                                                                   std::string_view tool) const {
  if (max_level_.load(std::memory_order_acquire) == 0 || cfg_.features.empty())
    return std::nullopt;
  return find_refusal(tenant, covers_tool, tool, {});
}

} // namespace factum::detail
