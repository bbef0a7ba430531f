// counters.hpp (private): the runtime's statistics counters. Relaxed atomics; any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace factum::detail {

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
};

} // namespace factum::detail
