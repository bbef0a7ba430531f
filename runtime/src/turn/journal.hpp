// journal.hpp (private): the journal of the running turn, for durable execution. A journaled
// turn (a call with an idempotency key, an alarm, a dead letter's retry) records each step it
// awaits (a tool, another entity, a timer) in the entity's `journal` table when the step
// starts, with what the handler did since the step before (its entries: reads, writes, the
// clock, random numbers, each with its result), and completes the row with the step's result.
// A retry of the turn after a crash replays it: the handler runs again from the start, each
// recorded entry and completed step returns what was recorded without doing anything, and the
// first step not completed runs for real; from there on the turn is live again. A replay that
// does something else than the journal recorded fails with JOURNAL_MISMATCH
// (docs/architecture.md, "Durable execution").
//
// A plain class: no store, no actor system (the context writes the rows it hands out). doctest
// drives it (tests/runtime/journal_test.cpp). Touched only on the entity's actor thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/entities/context.hpp"
#include "factum/entities/errors.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/records.hpp"

namespace factum::detail {

/// The error of a replay that diverged from its journal: 500 JOURNAL_MISMATCH, not retryable
/// (a retry replays the same journal).
call_error journal_mismatch(const std::string& message);

/// The journal key of a call with idempotency key `k` ("key:" + k); a dead letter's retry of a
/// call without a key uses "dl:" + id, a run of an alarm alarm_journal_key.
std::string journal_key_of_call(std::string_view k);

// -- the journal of an alarm's run --
// Every run of an alarm (a new occurrence, set again by its own handler or by another turn) is
// journaled under a key of its own, "alarm:" + name + "#" + a run id of alarm_run_id_size
// characters, so that the keys its steps derive (a callee's, a vendor's) differ from one run to
// the next; the retries of one run (after a crash, a failure or as a dead letter) find that run's
// journal and keep its keys. Files written before run ids journaled a run as "alarm:" + name:
// such a journal is resumed as it is.

inline constexpr size_t alarm_run_id_size = 32;
/// The journal of alarm `name`'s run `run_id`.
std::string alarm_journal_key(std::string_view name, std::string_view run_id);
/// Whether `key` journals a run of alarm `name`.
bool is_alarm_journal(std::string_view key, std::string_view name);
/// The journals of alarm `name`'s runs in `store` (a run that has not ended: interrupted, failed
/// and due again, or ended in a dead letter).
std::vector<std::string> alarm_journals(entity_store& store, std::string_view name);
/// The journal a run of alarm `name` starts under: the one of its unfinished run, else a new one.
std::string alarm_run_journal(entity_store& store, std::string_view name);

/// A step's result as the journal keeps it, and back.
nlohmann::json journal_result(const tool_reply& r);
nlohmann::json journal_result(const call_reply& r);
tool_reply tool_reply_from_journal(const nlohmann::json& j);
call_reply call_reply_from_journal(const nlohmann::json& j);

class turn_journal {
 public:
  /// What begin_step decided.
  struct step_start {
    int64_t step = 0;
    /// The recorded result (a replayed step: nothing runs), or nothing (the step runs).
    std::optional<nlohmann::json> result;
    /// The row to write before the step runs (when it runs).
    journal_step row;
    /// The step runs again after a run that was cut off while in flight (its row has neither a
    /// result nor an end): nothing that run did after the step began was recorded.
    bool cut_off = false;
  };

  /// Starts journaling a turn under `key`, with what the store recorded for it (empty: a new
  /// journal). `recorded` is in step order.
  void start(std::string key, std::vector<journal_step> recorded);
  /// The turn ended: forgets everything.
  void stop();
  bool active() const noexcept { return active_; }
  /// Journaled and not inside a running step (whose own work, e.g. a tool call's retries and
  /// their facts, is not the handler's: the step replays as a whole).
  bool recording() const noexcept { return active_ && !in_step_; }
  const std::string& key() const noexcept { return key_; }
  /// Whether recorded steps remain to replay.
  bool replaying() const noexcept { return next_recorded_ < recorded_.size(); }
  /// Steps recorded when the turn started.
  size_t recorded_steps() const noexcept { return recorded_.size(); }

  // -- entries --

  /// During a replay, the recorded result of the handler's next entry, which must be `kind` on
  /// `what` (else JOURNAL_MISMATCH is thrown); nothing when the turn is live.
  std::optional<nlohmann::json> replay(std::string_view kind, std::string_view what);
  /// A live entry and its result, kept for the next step's row.
  void record(std::string_view kind, std::string_view what, nlohmann::json result);

  // -- steps --

  /// The handler awaits step `kind` on `what` with request fingerprint `fingerprint`: a replayed
  /// result, or the row to write before it runs (a new step, or one that was in flight when the
  /// turn was interrupted or ended in a dead letter: its runs count grows, and the steps
  /// recorded after it are dropped: the turn is live from there on). Throws JOURNAL_MISMATCH.
  step_start begin_step(std::string_view kind, std::string_view what, std::string_view fingerprint,
                        int64_t now_ms);
  /// The running step has ended (its row completed or left in flight by the caller).
  void end_step() noexcept { in_step_ = false; }

 private:
  [[noreturn]] void mismatch(const std::string& did, const std::string& recorded) const;
  /// The entries of the recorded step to replay next (parsed on first use).
  const nlohmann::json& recorded_entries();

  bool active_ = false;
  bool in_step_ = false;
  std::string key_;
  std::vector<journal_step> recorded_;
  size_t next_recorded_ = 0; ///< the recorded step the replay reaches next
  size_t next_entry_ = 0;    ///< its next entry
  nlohmann::json entries_;   ///< its entries, parsed (null until read)
  int64_t next_step_ = 1;    ///< the number of the next step
  /// An entry done live, kept as it is until a step writes it (most keyed calls never await:
  /// their entries are dropped unwritten, so recording one must cost next to nothing).
  struct live_entry {
    std::string_view kind; ///< a literal of the context's
    std::string what;
    nlohmann::json result;
  };
  std::vector<live_entry> live_; ///< entries done live since the last step
};

} // namespace factum::detail
