// counters.hpp (private): the runtime's counters, gauges and latency histograms, each declared
// here once with its metric name and help and registered in the runtime's registry
// (runtime::metrics(), /metrics). Relaxed atomics: statistics, not synchronisation. Any thread.
#pragma once

#include <array>

#include "factum/metrics/metrics.hpp"

namespace factum::detail {

/// Upper bounds (seconds) of the entity WAL sync histogram's buckets.
inline constexpr std::array<double, 14> sync_bounds = {
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
/// Upper bounds (seconds) of the alarm lag histogram's buckets: alarms fire within milliseconds
/// of their due time when all is well; seconds to minutes behind is what an operator looks for.
inline constexpr std::array<double, 12> alarm_lag_bounds = {0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                                            5,     10,   30,   60,  300, 1800};

struct counters {
  explicit counters(metrics::registry& r) : reg(r) {}
  metrics::registry& reg;

  using counter = metrics::counter;
  using gauge = metrics::gauge;

  // -- calls --
  counter calls{reg, "factum_calls_total", "Calls routed to entities."};
  counter call_errors{reg, "factum_call_errors_total",
                      "Calls that failed before reaching an entity."};
  /// runtime_config::max_queued_calls.
  counter calls_overloaded{reg, "factum_calls_overloaded_total",
                           "Calls refused 429 ENTITY_OVERLOADED (an entity's queue was full)."};
  counter calls_dropped{
    reg, "factum_calls_dropped_total",
    "Calls never run because their caller had been answered 504 while they waited."};

  // -- activations --
  gauge active{reg, "factum_active_entities", "Entities with a live actor and an open file."};
  gauge peak_active{reg, "factum_peak_active_entities", "Most entities active at once."};
  counter activations{reg, "factum_activations_total", "Entity activations."};
  counter hibernations{reg, "factum_hibernations_total", "Entity hibernations."};

  // -- commits --
  counter commits{reg, "factum_commits_total", "SQLite commits (each one fsync in full mode)."};
  counter facts{reg, "factum_facts_total", "Facts committed."};
  counter turns_committed{reg, "factum_turns_committed_total",
                          "Turns whose writes were committed."};
  /// Each entity WAL sync (entity_store::sync: an fdatasync in durability full), timed on the
  /// thread that runs it.
  metrics::histogram syncs{reg, "factum_storage_sync_duration_seconds",
                           "Entity WAL syncs (an fdatasync each in durability full) by duration.",
                           sync_bounds};

  // -- idempotency keys and journals --
  counter replays{reg, "factum_idempotency_replays_total",
                  "Calls answered from a stored idempotency record."};
  counter key_conflicts{reg, "factum_idempotency_conflicts_total",
                        "Calls refused because their key was in flight (409)."};
  counter key_mismatches{reg, "factum_idempotency_mismatches_total",
                         "Calls refused because their key was used with another request (422)."};
  counter journal_steps{reg, "factum_journal_steps_total",
                        "Awaited steps of journaled calls started (run for real)."};
  counter journal_steps_replayed{
    reg, "factum_journal_steps_replayed_total",
    "Awaited steps of journaled calls answered from the journal by a replay."};
  counter journal_resumes{
    reg, "factum_journal_resumes_total",
    "Calls interrupted at an await (a crash, a retryable failure) that a retry resumed."};
  counter journal_mismatches{
    reg, "factum_journal_mismatches_total",
    "Replays that diverged from their journal (JOURNAL_MISMATCH, dead-lettered)."};
  counter keys_released_on_open{reg, "factum_idempotency_keys_released_on_open_total",
                                "Pending keys released when an entity reopened after a crash."};

  // -- the alarm index --
  /// 0 or 1: a damaged index set aside at start.
  counter alarm_index_rebuilds{
    reg, "factum_alarm_index_rebuilds_total",
    "Damaged alarm indexes set aside and rebuilt from the entity files at start."};
  /// Changes of an entity's next due time written to the index, and the transactions (one sync
  /// each) that wrote them: concurrent changes share one (group commit).
  counter alarm_index_changes{reg, "factum_alarm_index_changes_total",
                              "Changes of an entity's next alarm written to the alarm index."};
  counter alarm_index_writes{
    reg, "factum_alarm_index_writes_total",
    "Alarm index transactions (one sync each); concurrent changes share one."};
  counter alarm_index_failures{
    reg, "factum_alarm_index_failures_total",
    "Alarm index writes that failed (the commits that needed them were refused)."};

  // -- checkpoints, quarantines --
  counter checkpoints{reg, "factum_wal_checkpoints_total",
                      "WAL checkpoints run beside a running entity."};
  /// Another connection was mid-update: retried at the next commit past the threshold.
  counter checkpoints_busy{
    reg, "factum_wal_checkpoints_busy_total",
    "WAL checkpoints that found the database busy and were left to the next commit."};
  /// While they fail, the entity's WAL keeps growing: a rising count needs an operator.
  counter checkpoint_failures{
    reg, "factum_wal_checkpoint_failures_total",
    "WAL checkpoints that failed with an error other than busy (the WAL keeps growing)."};
  /// A WAL sync failed (or a commit failed with an I/O error): the entity's unanswered calls
  /// failed 503 and it closed without trusting its WAL.
  counter quarantines{reg, "factum_quarantines_total",
                      "Entities quarantined after a failed WAL sync (their unanswered calls "
                      "failed 503); any is an alert: look at the disk."};
  /// Rewritten WAL, fdatasync, directory fsync, because a quarantine marked the files.
  counter resyncs{reg, "factum_resyncs_total",
                  "Entity files written again and synced before an open, after a quarantine."};

  // -- alarms --
  counter alarms_fired{reg, "factum_alarms_fired_total", "Alarm handlers that ran."};
  counter alarm_retries{reg, "factum_alarm_retries_total", "Failed alarms scheduled again."};
  counter alarms_dead_lettered{reg, "factum_alarms_dead_lettered_total",
                               "Alarms that exhausted their retries."};
  /// From an alarm's due time to the start of its turn, for each alarm turn that found one due.
  metrics::histogram alarm_lag{reg, "factum_alarm_lag_seconds",
                               "Delay from an alarm's due time to the start of its turn.",
                               alarm_lag_bounds};
  /// Type not hosted, file that cannot open: the index entry is parked with a backoff so that
  /// other alarms keep firing.
  counter alarms_parked{reg, "factum_alarms_parked_total",
                        "Alarm wakes that could not reach their entity, parked with a backoff."};

  // -- tools (every tool; by tool in tool_board.hpp) --
  counter tool_calls{reg, "factum_tool_calls_total", "Resilient tool calls started."};
  counter tool_retries{reg, "factum_tool_retries_total", "Tool call retries."};
  counter tool_failures{reg, "factum_tool_failures_total", "Tool calls that failed in the end."};
  counter breaker_transitions{reg, "factum_breaker_transitions_total",
                              "Circuit breaker state changes."};
  counter breaker_fast_fails{reg, "factum_breaker_fast_fails_total",
                             "Tool calls refused by an open circuit breaker."};
  counter dead_letters{reg, "factum_dead_letters_total", "Dead letters created."};

  // -- degradation, cluster mode --
  /// runtime_config::degradation.
  counter degradation_changes{reg, "factum_degradation_changes_total",
                              "Moves of a tenant's degradation level."};
  /// The node no longer owned the entity (its lease ran out, or the shard was taken under a
  /// newer epoch: the fence). 0 outside cluster mode.
  counter fenced_writes{reg, "factum_cluster_fenced_writes_total",
                        "Commits refused because this node no longer owned the entity (lease run "
                        "out, or a newer epoch in the file)."};
  /// The entity's shard is not this node's (or its file was claimed by a newer owner).
  counter activations_refused_not_owner{
    reg, "factum_cluster_activations_refused_total",
    "Activations refused because the entity's shard is not this node's."};
};

} // namespace factum::detail
