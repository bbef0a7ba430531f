// factum/resilience/circuit_breaker.hpp: the per-(entity, tool) circuit breaker: CLOSED, OPEN,
// HALF_OPEN, FORCED_OPEN, DISABLED; count- and time-based windows; transitions reported for
// `lifecycle` facts; full state as JSON. No clock of its own: every call takes now_ms. Any single
// thread (not thread-safe): the entity's actor.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/entities/errors.hpp"
#include "factum/error/status.hpp"
#include "factum/resilience/time_buckets.hpp"

namespace factum::resilience {

/// The breaker's states; their names are the upper-case strings of the HTTP API and storage.
enum class breaker_state {
  closed,      ///< CLOSED: calls pass, outcomes are recorded in the windows
  open,        ///< OPEN: calls fast-fail until the cooldown has elapsed
  half_open,   ///< HALF_OPEN: a bounded number of trial calls pass
  forced_open, ///< FORCED_OPEN: manual override; calls fast-fail until reset()
  disabled,    ///< DISABLED: calls always pass, nothing is recorded, until reset()
};

/// "CLOSED", "OPEN", "HALF_OPEN", "FORCED_OPEN", "DISABLED".
std::string_view to_string(breaker_state s) noexcept;
/// The state named by to_string(), or nullopt.
std::optional<breaker_state> parse_breaker_state(std::string_view s) noexcept;

/// The count-based window: the outcomes of the last `size` recorded calls.
struct count_window_config {
  int64_t size = 10;             ///< calls remembered; 0 turns the count window off
  int64_t min_calls = 10;        ///< volume needed before the window may open the breaker
  int64_t failure_threshold = 5; ///< failures in the window that open it; 0 = no count rule
  double failure_rate = 0.0;     ///< failure fraction that opens it, (0, 1]; 0 = no rate rule
  friend bool operator==(const count_window_config&, const count_window_config&) = default;
};

/// The time-based window: the calls of the last `window_ms` (see time_buckets).
struct time_window_config {
  int64_t window_ms = 60000;      ///< window length; 0 turns the time window off
  int64_t bucket_ms = 1000;       ///< bucket granularity (1 = exact)
  int64_t min_calls = 10;         ///< volume needed before the window may open the breaker
  int64_t failure_threshold = 10; ///< failures in the window that open it; 0 = no count rule
  double failure_rate = 0.5;      ///< failure fraction that opens it, (0, 1]; 0 = no rate rule
  friend bool operator==(const time_window_config&, const time_window_config&) = default;
};

/// Breaker settings. The defaults: open on 5 failures in the last 10 calls, or
/// on 10 failures (or a failure rate >= 50 % over at least 10 calls) in the last 60 s; 120 s
/// cooldown; HALF_OPEN lets 1 trial through and closes on 1 success; a trial whose outcome is
/// not reported within 60 s ("60 s test window") is presumed lost and frees its slot.
struct breaker_config {
  count_window_config count_window; ///< see count_window_config
  time_window_config time_window;   ///< see time_window_config
  int64_t cooldown_ms = 120000;     ///< time OPEN before trials are let through
  int64_t half_open_max_trials = 1; ///< trial calls in flight at once in HALF_OPEN (>= 1)
  int64_t success_threshold = 1;    ///< trial successes that close the breaker (>= 1)
  int64_t trial_timeout_ms = 60000; ///< unreported trials are forgotten after this; 0 = never

  /// Ok, or INVALID_ARGUMENT naming the first bad field.
  status validate() const;
  /// {"count_window":{"size","min_calls","failure_threshold","failure_rate"},
  ///  "time_window":{"window_ms","bucket_ms","min_calls","failure_threshold","failure_rate"},
  ///  "cooldown_ms","half_open_max_trials","success_threshold","trial_timeout_ms"}.
  nlohmann::json to_json() const;
  /// Parses to_json()'s form; missing members keep their defaults; validates the result.
  static result<breaker_config> from_json(const nlohmann::json& j);

  friend bool operator==(const breaker_config&, const breaker_config&) = default;
};

/// The counters a transition reports (the `lifecycle` fact's failure_count, success_count,
/// request_count). For a transition out of CLOSED: the outcomes in the window that tripped (for
/// a manual move: the count window when on, else the time window), request_count = outcomes in
/// it. For a transition out of any other state: what happened while in that state:
/// request_count = allow() calls, success_count / failure_count = outcomes reported (in
/// HALF_OPEN these are the trials; in OPEN, FORCED_OPEN and DISABLED they are late or ignored).
struct breaker_counters {
  int64_t failure_count = 0; ///< counting failures (default 0)
  int64_t success_count = 0; ///< successes, non-counting failures included (default 0)
  int64_t request_count = 0; ///< calls (default 0)
  friend bool operator==(const breaker_counters&, const breaker_counters&) = default;
};

/// One state change, for a `lifecycle` fact with subtype circuit_breaker_state_changed.
struct breaker_transition {
  std::string circuit_name;                   ///< the breaker's name (the tool id)
  breaker_state from = breaker_state::closed; ///< previous_state
  breaker_state to = breaker_state::closed;   ///< new_state
  /// count_window_failures, count_window_failure_rate, time_window_failures,
  /// time_window_failure_rate, cooldown_elapsed, half_open_trial_failed, success_threshold_met,
  /// or the reason given to force_open() / reset() / disable().
  std::string reason;
  breaker_counters counters;
  int64_t at_ms = 0; ///< the now_ms of the call that caused it

  /// The fact's data: {"circuit_name","tool_id","previous_state","new_state","reason",
  /// "failure_count","success_count","request_count"}.
  nlohmann::json fact_data() const;
};

/// What allow() decided.
struct breaker_decision {
  bool allowed = true;                         ///< whether the call may go to the tool
  breaker_state state = breaker_state::closed; ///< the state after the decision
  /// closed, half_open_trial, disabled (allowed); open, half_open_busy, forced_open (refused).
  std::string reason;
  int64_t retry_after_ms = 0; ///< refused in OPEN: time left of the cooldown; else 0
  std::optional<breaker_transition> transition; ///< OPEN -> HALF_OPEN happened in this call
};

/// The error of a call the breaker refused: transient, code CIRCUIT_OPEN, HTTP 503, with
/// details {"circuit_name","circuit_state"} and "retry_after_ms" when known.
call_error circuit_open_error(std::string_view circuit_name, const breaker_decision& d);

/// A circuit breaker.
///
/// Protocol: call allow(now) before each call of the tool; if it is refused, do not call the
/// tool (report CIRCUIT_OPEN, see circuit_open_error). If it is allowed, report exactly one
/// outcome: on_success(now) or on_failure(now, category). Every returned transition is to be
/// appended as a `lifecycle` fact (breaker_transition::fact_data) and the state saved
/// (to_json) in the same turn.
///
/// Only failures that count (trips_breaker: transient, server, external) are recorded as
/// failures; any other failure (client, data_integrity, authorization, budget) means the tool
/// answered and is recorded as a success. In CLOSED every outcome enters the windows and the
/// rules are checked after each one (so a success that completes the minimum volume can open
/// it). OPEN turns into HALF_OPEN lazily, in allow() or poll(), once the cooldown has elapsed.
/// In HALF_OPEN any counting failure reopens it and success_threshold successes close it (and
/// clear the windows); outcomes arriving there count even if allow() was called earlier. In
/// OPEN, FORCED_OPEN and DISABLED outcomes change nothing.
class circuit_breaker {
 public:
  /// A CLOSED breaker named `name` (the tool id). `config` must be valid (validate()); an
  /// invalid one is replaced by the defaults.
  explicit circuit_breaker(std::string name, breaker_config config = {}, int64_t now_ms = 0);

  /// Decides whether a call may go to the tool now (counts HALF_OPEN trials).
  breaker_decision allow(int64_t now_ms);

  /// Records a successful call.
  std::optional<breaker_transition> on_success(int64_t now_ms);
  /// Records a failed call; `counts` false records it as a success (see the class).
  std::optional<breaker_transition> on_failure(int64_t now_ms, bool counts = true);
  /// Records a failed call of this category: on_failure(now_ms, trips_breaker(category)).
  std::optional<breaker_transition> on_failure(int64_t now_ms, error_category category);

  /// OPEN -> HALF_OPEN if the cooldown has elapsed (without admitting a trial); else nothing.
  std::optional<breaker_transition> poll(int64_t now_ms);

  /// Forgets the HALF_OPEN trials in flight: their callers can no longer report (the process
  /// that admitted them is gone, or their turn has ended), so waiting for trial_timeout_ms would
  /// only refuse calls. The state is kept; the next allow() may admit a new trial.
  void forget_trials() noexcept { trials_in_flight_ = 0; }

  /// Any state -> FORCED_OPEN (nothing if already there).
  std::optional<breaker_transition> force_open(int64_t now_ms, std::string reason = "forced_open");
  /// Any state -> CLOSED with empty windows (windows are emptied even if already CLOSED).
  std::optional<breaker_transition> reset(int64_t now_ms, std::string reason = "reset");
  /// Any state -> DISABLED (nothing if already there).
  std::optional<breaker_transition> disable(int64_t now_ms, std::string reason = "disabled");

  /// Replaces the settings, keeping the state: the count window keeps its newest outcomes, the
  /// time window is kept if its sizes are unchanged and emptied otherwise. INVALID_ARGUMENT
  /// (and no change) for an invalid config.
  status set_config(breaker_config config);

  const std::string& name() const noexcept { return name_; }
  const breaker_config& config() const noexcept { return config_; }
  breaker_state state() const noexcept { return state_; }
  int64_t state_since_ms() const noexcept { return state_since_ms_; }
  /// When the current or last OPEN period began (0 if never opened).
  int64_t opened_at_ms() const noexcept { return opened_at_ms_; }
  /// Outcomes in the count window (or, when it is off, the time window) at `now_ms`.
  breaker_counters window_counters(int64_t now_ms) const;
  /// Trials admitted in HALF_OPEN whose outcome has not been reported.
  int64_t trials_in_flight() const noexcept { return trials_in_flight_; }

  /// The full state: {"name","config","state","state_since_ms","opened_at_ms",
  /// "count_window":"SFS..." (oldest first; S success, F failure),"time_window":[[start,calls,
  /// failures],...],"trials_in_flight","trial_successes","last_trial_ms","episode":{"requests",
  /// "successes","failures"}}.
  nlohmann::json to_json() const;
  /// Restores to_json()'s form exactly; INVALID_ARGUMENT on malformed or inconsistent input.
  static result<circuit_breaker> from_json(const nlohmann::json& j);

 private:
  /// What happened since the current state was entered.
  struct episode {
    int64_t requests = 0;  ///< allow() calls
    int64_t successes = 0; ///< outcomes reported as successes
    int64_t failures = 0;  ///< counting failures reported
  };

  /// Adds one outcome to both windows (CLOSED only).
  void record(int64_t now_ms, bool failure);
  /// CLOSED -> OPEN if a rule of either window holds.
  std::optional<breaker_transition> evaluate(int64_t now_ms);
  /// Outcomes in the count window.
  breaker_counters count_counters() const;
  /// Outcomes in the time window at now_ms.
  breaker_counters time_counters(int64_t now_ms) const;
  /// The counters a transition out of the current state reports (see breaker_counters).
  breaker_counters leaving_counters(int64_t now_ms) const;
  /// Enters `to`, resetting the per-state counters; returns the transition to report.
  breaker_transition move_to(breaker_state to, std::string reason, breaker_counters counters,
                             int64_t now_ms);
  /// Empties both windows.
  void clear_windows();

  std::string name_;
  breaker_config config_;
  breaker_state state_ = breaker_state::closed;
  int64_t state_since_ms_ = 0;   ///< when the current state was entered
  int64_t opened_at_ms_ = 0;     ///< start of the current/last OPEN period
  std::deque<bool> outcomes_;    ///< count window, oldest first; true = failure
  time_buckets times_;           ///< time window: a = calls, b = failures
  int64_t trials_in_flight_ = 0; ///< HALF_OPEN trials admitted, outcome not yet reported
  int64_t trial_successes_ = 0;  ///< HALF_OPEN successes so far
  int64_t last_trial_ms_ = 0;    ///< when the last trial was admitted
  episode episode_;              ///< counters of the current state
};

} // namespace factum::resilience
