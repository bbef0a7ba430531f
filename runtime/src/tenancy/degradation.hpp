// degradation.hpp (private): the degradation board, each tenant's level from the rules of
// factum/runtime/degradation.hpp and the feature matrix that says what runs at it. A plain
// class: tests drive it with explicit signals and times. In the runtime, the degradation
// watcher's thread evaluates it; calls (any thread: HTTP I/O threads, CAF workers) ask it
// whether a method or tool runs; operators set floors from any thread. Everything is under one
// mutex, except the fast path of a runtime where every tenant is at 0 (an atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "factum/entities/call.hpp"
#include "factum/runtime/degradation.hpp"

namespace factum::detail {

/// What the rules see of one tenant at one evaluation (besides quarantines, which the board
/// remembers itself, and the disk, which is every tenant's).
struct degradation_signals {
  std::set<std::string> open_tools; ///< tools of which an entity of the tenant has an open breaker
  bool over_quota = false;          ///< the tenant's files reach its byte quota
};

/// A tenant's level moved (degradation_board::evaluate, set_override).
struct degradation_change {
  std::string tenant;
  int from = 0, to = 0;
  std::vector<std::string> reasons;
};

/// A refusal of the matrix: the feature and the level that turned it off.
struct degradation_refusal {
  std::string feature;
  int level = 0;
};

class degradation_board {
 public:
  explicit degradation_board(degradation_config cfg);

  bool enabled() const { return cfg_.enabled; }
  const degradation_config& config() const { return cfg_; }

  // -- inputs --

  /// An entity of `tenant` was quarantined at `now_ms`.
  void note_quarantine(const std::string& tenant, int64_t now_ms);
  /// Evaluates every tenant at `now_ms`: `signals` by tenant (a tenant absent has none),
  /// `disk_low` for all. Answers the levels that moved.
  std::vector<degradation_change>
  evaluate(const std::map<std::string, degradation_signals>& signals, bool disk_low,
           int64_t now_ms);
  /// An operator's floor for `tenant` (nullopt: none); answers the move it made, if any.
  std::optional<degradation_change> set_override(const std::string& tenant,
                                                 std::optional<int> level, std::string reason,
                                                 std::string actor);

  // -- reads --

  int level_of(std::string_view tenant) const;
  degradation_status status_of(const std::string& tenant) const;
  /// The configured tenants and every tenant a rule has named, in name order.
  std::vector<degradation_status> all() const;
  /// The feature that turns `type.method` off at `tenant`'s level, if one does.
  std::optional<degradation_refusal> refuses_method(std::string_view tenant, std::string_view type,
                                                    std::string_view method) const;
  /// The feature that turns `tool` off at `tenant`'s level, if one does.
  std::optional<degradation_refusal> refuses_tool(std::string_view tenant,
                                                  std::string_view tool) const;

 private:
  struct tenant_state {
    int computed = 0;         ///< the rules' level, after the recovery delay
    int64_t lower_since = -1; ///< since when the rules say less than `computed`; -1: they do not
    std::vector<std::string> reasons;
    std::optional<int64_t> quarantined_at;
    std::optional<int> floor; ///< an operator's level
    std::string floor_reason, floor_actor;
    int level() const { return floor ? std::max(computed, *floor) : computed; }
  };

  /// The rules' level for one tenant now, and why.
  int target(const tenant_state& t, const degradation_signals* s, bool disk_low, int64_t now_ms,
             std::vector<std::string>& why) const;
  std::vector<std::string> reasons_of(const tenant_state& t) const;
  degradation_status status_locked(const std::string& name, const tenant_state* t) const;
  void update_max_locked();
  /// The first feature `covers` says covers (a, b) that is off at `tenant`'s level. Locks.
  std::optional<degradation_refusal>
  find_refusal(std::string_view tenant,
               bool (*covers)(const degraded_feature&, std::string_view, std::string_view),
               std::string_view a, std::string_view b) const;

  degradation_config cfg_;
  std::set<std::string, std::less<>> critical_;
  mutable std::mutex mu_;
  std::map<std::string, tenant_state, std::less<>> tenants_; ///< under mu_
  int base_ = 0;                  ///< every tenant's least level (the disk's rule), under mu_
  std::atomic<int> max_level_{0}; ///< the highest tenant level: 0 lets calls skip the mutex
};

/// The answer to a call, or a tool call, that `no` turns off: 503 DEGRADED (transient), the
/// problem body naming the level and the feature, and `retry_after`.
call_reply degraded_reply(const degradation_refusal& no, std::chrono::seconds retry_after,
                          const std::string& what);

/// Whether `pattern` ("type.method", "type.*", "*") covers type.method.
bool method_pattern_covers(std::string_view pattern, std::string_view type,
                           std::string_view method);

} // namespace factum::detail
