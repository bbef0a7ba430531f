// outbox_board.hpp (private): the runtime's side of each configured outbox sink, shared by every
// entity of the process: its transport, its retry policy, its one circuit breaker, its counters
// (delivered, retried, refused, refused by the breaker) and its lag as seen by this process (per
// entity with facts not yet acknowledged: how many and since when; entity keys are map keys here,
// never metric labels). Built once at start from runtime_config::outbox (which it validates) and
// read-only in shape afterwards; the counters are atomics any CAF worker bumps, the breaker and
// the lag are under a mutex per sink. Its families of /metrics, labelled by sink, are registered
// once by register_metrics and collected at each scrape (any thread). docs/outbox.md.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/metrics/metrics.hpp"
#include "factum/resilience/circuit_breaker.hpp"
#include "factum/resilience/retry_policy.hpp"
#include "factum/runtime/outbox.hpp"
#include "factum/runtime/runtime.hpp"

namespace factum::detail {

/// One sink's counters and lag at one instant (outbox_sink_state::snapshot).
struct outbox_snapshot {
  std::string sink;
  uint64_t delivered = 0, retried = 0, refused = 0, fast_fails = 0;
  /// Facts committed and not yet acknowledged, over the entities this process has seen since it
  /// started (an entity is seen when it commits such a fact or its relay runs).
  uint64_t lag = 0;
  int64_t oldest_age_ms = 0; ///< of the oldest of those facts (0: none)
  resilience::breaker_state breaker = resilience::breaker_state::closed;
};

/// One configured sink in this process.
class outbox_sink_state {
 public:
  outbox_sink_state(std::string name, outbox_sink sink, resilience::retry_policy retry,
                    resilience::breaker_config breaker);

  const std::string& name() const noexcept { return name_; }
  const outbox_fn& deliver() const noexcept { return sink_.deliver; }

  /// Whether a delivery may go to the sink now (the breaker; a refusal is counted).
  resilience::breaker_decision allow(int64_t now_ms);
  /// The outcome of a delivery allow() let through.
  void record(const outbox_ack& ack, int64_t now_ms);
  /// A delivery allow() let through that will report nothing (its turn failed).
  void forget_trial();
  /// The retry policy's ceiling: the longest a fact waits between two attempts, also while the
  /// breaker is open (a relay started after a restart finds a closed breaker).
  int64_t max_delay_ms() const noexcept { return std::max<int64_t>(1'000, retry_.max_delay_ms); }
  /// The wait before the next attempt after `attempts` failed ones (never gives up).
  int64_t backoff_ms(int64_t attempts, std::optional<int64_t> retry_after_ms);

  /// `entity` has `count` facts for this sink not yet acknowledged, the first from `oldest_ms`
  /// (count 0: it is caught up).
  void set_lag(const std::string& entity, int64_t count, int64_t oldest_ms);
  /// `entity` committed `count` more, the first of them at `oldest_ms`.
  void add_lag(const std::string& entity, int64_t count, int64_t oldest_ms);

  /// Its counters and lag now.
  outbox_snapshot snapshot(int64_t now_ms) const;

  std::atomic<uint64_t> delivered{0}, retried{0}, refused{0}, fast_fails{0};

 private:
  struct lag {
    int64_t count = 0;
    int64_t oldest_ms = 0;
  };
  std::string name_;
  outbox_sink sink_;
  resilience::retry_policy retry_;
  mutable std::mutex mu_;
  resilience::circuit_breaker breaker_;
  std::mt19937_64 rng_;
  std::map<std::string, lag> lag_;
};

/// One route as an entity uses it: a sink and the fact types it takes from this entity.
struct outbox_target {
  outbox_sink_state* sink = nullptr;
  std::vector<std::string> types; ///< sorted, unique
};

/// Every configured sink and route.
class outbox_board {
 public:
  /// Checks `cfg` (sink names, a transport each, retry and breaker JSON, routes naming known
  /// sinks with valid fact types, batch) and builds the board; INVALID_ARGUMENT names the field.
  static result<std::unique_ptr<outbox_board>> make(const outbox_config& cfg);

  /// The sinks `key`'s facts go to, with their types; empty when no route applies.
  std::vector<outbox_target> targets_for(const entity_key& key) const;
  /// Each sink's counters and lag at `now_ms`, by name.
  std::vector<outbox_snapshot> snapshot(int64_t now_ms) const;
  /// The sink named `name`; null when none is.
  outbox_sink_state* find(const std::string& name) const {
    auto it = sinks_.find(name);
    return it == sinks_.end() ? nullptr : it->second.get();
  }
  int batch() const noexcept { return batch_; }
  bool empty() const noexcept { return sinks_.empty(); }

 private:
  std::map<std::string, std::unique_ptr<outbox_sink_state>> sinks_;
  std::vector<outbox_route> routes_;
  int batch_ = 64;
};

/// Registers the families of /metrics labelled by sink in `r`, collected from `board` at `now`
/// ms: with no series while `board` is null (no outbox configured).
void register_outbox_metrics(metrics::registry& r, const outbox_board* board,
                             std::function<int64_t()> now);

} // namespace factum::detail
