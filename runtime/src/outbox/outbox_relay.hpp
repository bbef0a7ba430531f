// outbox_relay.hpp (private): the outbox of one activation (docs/outbox.md). A turn that appends
// facts some sink takes also sets the entity's alarm `@outbox` (due now) in the same commit, so
// the alarm index wakes the entity after a crash; the alarm's turn relays the facts after each
// sink's cursor, one at a time and in seq order, each delivery an awaited operation that the
// output gate starts only once the facts are durable; it advances the cursors in the turn's
// commit, dead-letters a fact a sink refuses, and sets the alarm again for the next batch or
// after a backoff. Owned by the entity's turn_runner; touched only on the entity's actor thread,
// inside turns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "factum/entities/task.hpp"
#include "factum/storage/entity_store.hpp"
#include "outbox_board.hpp"

namespace factum::detail {

class entity_context;

/// The name of the runtime's own alarm that runs an entity's relay.
inline constexpr const char* outbox_alarm = "@outbox";

/// The operation of an outbox dead letter: "@outbox:<sink>".
inline constexpr std::string_view outbox_operation = "@outbox:";

class outbox_relay {
 public:
  /// A new activation of `key` (the store open): its routes and where its log ends now.
  void attach(outbox_board* board, const entity_key& key, entity_store& store);
  void detach();
  /// Whether any sink takes this entity's facts.
  bool active() const noexcept { return !targets_.empty(); }

  /// Inside a turn, before its writes are kept (at its end or at an await): when facts appended
  /// since the last look include one that a sink takes, counts them into the sink's lag and sets
  /// the alarm (due now) unless it is set.
  void after_writes(entity_context& ctx, entity_store& store);

  /// The alarm's turn: relays what each sink has not acknowledged (at most batch() facts per
  /// sink), then sets the alarm again when more is left or a sink is backing off.
  task<void> run(entity_context& ctx, entity_store& store);

  /// An operator's retry of a dead letter of this outbox (operation "@outbox:<sink>"): delivers
  /// its fact to its sink once more (whatever the cursor says; the cursor is past it). Returns
  /// when the sink acknowledged; throws a call_error when it did not (the dead letter stays).
  task<void> redeliver(entity_context& ctx, entity_store& store, dead_letter_record dl);

  /// The batch was rolled back: what this activation believed of the alarm may be gone.
  void commit_failed() noexcept { armed_known_ = false; }

 private:
  /// The facts after `after_seq` whose type is one of `types`, in seq order, at most `limit`.
  static std::vector<fact> pending(entity_store& store, const std::vector<std::string>& types,
                                   int64_t after_seq, int64_t limit);
  /// Counts what `t`'s sink has not acknowledged of this entity into its lag; answers it.
  int64_t measure(entity_store& store, const outbox_target& t, int64_t cursor);
  /// Delivers `f` to `sink` through the output gate and records the outcome on the sink.
  static task<outbox_ack> deliver(entity_context& ctx, outbox_sink_state& sink, const fact& f);
  /// A fact `t`'s sink refused: a dead letter and its lifecycle fact.
  void dead_letter(entity_context& ctx, entity_store& store, const outbox_target& t, const fact& f,
                   const outbox_ack& ack, int64_t now);

  outbox_board* board_ = nullptr;
  std::string key_str_;
  std::vector<outbox_target> targets_;
  int64_t seen_seq_ = 0;
  bool armed_known_ = false; ///< the alarm is known to be set (committed or in the batch)
};

} // namespace factum::detail
