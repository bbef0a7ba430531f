// counters.hpp (private): the runtime's statistics counters and its sync latency histogram.
// Relaxed atomics; any thread.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace factum::detail {

/// A latency histogram: counts by bucket (upper bounds in seconds, +Inf last), sum and count.
struct latency_histogram {
  static constexpr std::array<double, 14> bounds = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
  std::array<std::atomic<uint64_t>, bounds.size() + 1> buckets{};
  std::atomic<uint64_t> ns_sum{0}, count{0};

  void observe(std::chrono::nanoseconds d) {
    double s = std::chrono::duration<double>(d).count();
    size_t i = 0;
    while (i < bounds.size() && s > bounds[i])
      ++i;
    buckets[i].fetch_add(1, std::memory_order_relaxed);
    ns_sum.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, d.count())),
                     std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
  }
};

/// Monotonic counters (relaxed atomics: they are statistics, not synchronisation).
struct counters {
  std::atomic<uint64_t> calls{0}, call_errors{0}, active{0}, peak_active{0}, activations{0},
    hibernations{0}, commits{0}, facts{0}, turns_committed{0}, replays{0}, key_conflicts{0},
    key_mismatches{0}, keys_released_on_open{0}, alarms_fired{0}, alarm_retries{0},
    alarms_dead_lettered{0}, alarm_lag_ms_max{0}, alarm_lag_ms_sum{0}, tool_calls{0},
    tool_retries{0}, tool_failures{0}, breaker_transitions{0}, breaker_fast_fails{0},
    dead_letters{0}, alarm_index_rebuilds{0}, alarm_index_changes{0}, alarm_index_writes{0},
    checkpoints{0}, checkpoints_busy{0}, checkpoint_failures{0}, quarantines{0}, resyncs{0},
    alarm_index_failures{0}, alarms_parked{0}, calls_overloaded{0}, calls_dropped{0},
    fenced_writes{0}, activations_refused_not_owner{0}, journal_steps{0}, journal_steps_replayed{0},
    journal_resumes{0}, journal_mismatches{0}, degradation_changes{0};
  /// Each entity WAL sync (entity_store::sync: an fdatasync in durability full), timed on the
  /// thread that runs it.
  latency_histogram syncs;
};

} // namespace factum::detail
