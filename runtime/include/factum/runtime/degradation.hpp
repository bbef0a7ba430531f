// factum/runtime/degradation.hpp: degradation levels, what computes them and which features run
// at each (runtime_config::degradation). Plain values; any thread.
//
// A tenant's level goes from 0 (full) to 4 (emergency); the highest rule that holds wins:
//
// | level | name      | when                                                                  |
// |-------|-----------|-----------------------------------------------------------------------|
// | 0     | full      | nothing below holds                                                   |
// | 1     | reduced   | a breaker of a tool that is not critical is open or forced open        |
// | 2     | limited   | a breaker of a critical tool is open or forced open                    |
// | 3     | minimal   | an entity of the tenant was quarantined within `quarantine_hold`, the  |
// |       |           | tenant's files reach its byte quota, or the data disk has less free    |
// |       |           | space than `min_free_bytes`                                            |
// | 4     | emergency | an operator set it (runtime::set_degradation)                          |
//
// An operator's level is a floor: the computed level still applies when it is higher. A level
// rises at once and falls only after the rules have held a lower one for `recover_after`, so
// that a breaker cycling through half-open does not flap the tenant's features.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace factum {

/// Degradation levels (the table above).
inline constexpr int max_degradation_level = 4;

/// The name of a level: "full", "reduced", "limited", "minimal", "emergency".
inline const char* degradation_level_name(int level) {
  switch (level) {
  case 0: return "full";
  case 1: return "reduced";
  case 2: return "limited";
  case 3: return "minimal";
  default: return "emergency";
  }
}

/// A feature of the degradation matrix: what it covers and the highest level it runs at.
struct degraded_feature {
  /// 1..64 characters of [A-Za-z0-9._-]; named in refusals and lifecycle facts.
  std::string name;
  /// The feature runs while the tenant's level is at most this (0..4). Default 4: always.
  int max_level = max_degradation_level;
  /// Calls it covers, as "type.method"; "type.*" is every method of a type, "*" every method.
  std::vector<std::string> methods;
  /// Tools it covers (ctx.call_tool of these names).
  std::vector<std::string> tools;
};

/// How levels are computed and what they turn off (runtime_config::degradation).
struct degradation_config {
  /// Whether levels are computed at all. Default false: every tenant stays at 0, nothing is
  /// refused, no runtime entity is written.
  bool enabled = false;
  /// Tools whose open breaker puts a tenant at level 2 (any other configured tool: 1).
  std::vector<std::string> critical_tools;
  /// The feature matrix. A call of a method, or of a tool, that a feature covers and whose
  /// max_level is below the tenant's level is refused 503 DEGRADED. A method or tool no
  /// feature covers always runs. Default none.
  std::vector<degraded_feature> features;
  /// Tenants whose level is reported (/metrics, /healthz) and recorded even while 0; others
  /// appear once a rule names them. `factum serve` lists its configured tenants.
  std::vector<std::string> tenants;
  /// The Retry-After of a DEGRADED refusal. Default 30 s.
  std::chrono::seconds retry_after{30};
  /// A quarantined entity keeps its tenant at level 3 this long. Default 10 min.
  std::chrono::milliseconds quarantine_hold{std::chrono::minutes(10)};
  /// Free bytes on the data directory's file system below which every tenant is at level 3;
  /// 0: not checked. Default 0.
  int64_t min_free_bytes = 0;
  /// A level falls only once the rules have said a lower one for this long. Default 30 s.
  std::chrono::milliseconds recover_after{30'000};
  /// How often the rules are evaluated at the latest (a breaker's move or a quarantine
  /// evaluates them at once). Default 1 s.
  std::chrono::milliseconds check_interval{1'000};
};

/// One tenant's degradation as the runtime sees it now (runtime::degradation_of).
struct degradation_status {
  std::string tenant;
  int level = 0;
  /// Why: the rules that hold, e.g. "breaker_open:telephony", "quarantine", "over_quota",
  /// "disk_low", "operator".
  std::vector<std::string> reasons;
  /// The level an operator set, if any, with its reason and who set it.
  std::optional<int> override_level;
  std::string override_reason, override_actor;
  /// Features turned off at this level.
  std::vector<std::string> features_off;
};

} // namespace factum
