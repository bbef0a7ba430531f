// turn_runner.hpp (private): the turns of one entity, run on its store: a call (its
// idempotency key checked, the handler, the key recorded in the turn's own savepoint), the
// activation, an alarm (its retries and its dead letter), the retry of a dead letter, the
// runtime's purge of expired keys and dead letters; every failure as an error fact.
//
// A plain class: no actor system. The entity actor owns one, feeds it turns one at a time and
// commits what they wrote (the actor's start_commit, output_gate.hpp); doctest drives it with a
// store in a temporary directory and a fake host (tests/runtime/turn_runner_test.cpp). Touched
// only on the entity's actor thread.
#pragma once

#include <coroutine>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "counters.hpp"
#include "factum/entities/context.hpp"
#include "factum/entities/entity.hpp"
#include "factum/resilience/circuit_breaker.hpp"
#include "factum/resilience/retry_budget.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "outbox/outbox_relay.hpp"
#include "schedule/schedule_turns.hpp"
#include "turn/call_errors.hpp"
#include "turn/call_request.hpp"
#include "turn/journal.hpp"

namespace factum::detail {

class reply_sink;

/// Where a call's answer goes: its caller's reply sink (runtime_core.hpp). Empty for turns
/// nobody waits on (activation, alarms, the runtime's own retries). The entity itself may be
/// the destination instead (`local`): the start of an awaited operation, which the output gate
/// holds like a reply.
struct reply_to {
  std::shared_ptr<reply_sink> sink;
  std::function<void(call_reply)> local;
  /// Hands `r` to the sink (defined beside reply_sink) or to `local`; nothing when empty.
  void deliver(call_reply r);
};

enum class turn_kind { call, activate, alarm };

/// A turn waiting in an entity's queue.
struct queued {
  turn_kind kind = turn_kind::call;
  call_request req;
  reply_to rp;         ///< empty for turns nobody waits on
  bool shared = false; ///< a shared (read-only) call (turn_runner::is_shared, asked once)
};

/// The turn that runs now.
struct turn_state {
  queued item;
  call_info info;
  bool suspended = false;
  bool woken = false;
  std::coroutine_handle<> handle;
  uint64_t token = 0;
  alarm_record alarm; ///< alarm turns: the alarm that is due
  /// A dead letter's retry of an alarm: the alarm its on_alarm runs with (kept here: the
  /// handler holds a reference to it across its awaits).
  alarm_record retried_alarm;
  std::string dead_letter_id; ///< a turn that retries a dead letter
  /// The turn's tool call wrote that dead letter (its retry failed and it was rescheduled or
  /// handed to an operator): the turn's failure leaves it as the tool wrote it.
  bool dead_letter_rewritten = false;
  std::vector<std::string> alarms_set;
  /// An alarm's run set its own alarm again: the new occurrence, written when the run ends
  /// well (entity_context::set_alarm). Until then the alarm's row is the running occurrence's,
  /// so a run interrupted before its end is retried as itself.
  std::optional<alarm_record> rearm;
  bool key_on_disk = false; ///< a pending row was committed (the turn awaited something)
  /// The call resumes one interrupted at an await (its key was pending): it replays its journal.
  bool resumed = false;
  /// A commit at one of the turn's awaits failed: what it wrote before the await is gone, so
  /// the turn fails (retryably) whatever its handler returns.
  std::optional<status> lost_at_await;
  /// A read whose page was full: where the next one starts (call_reply::cursor).
  std::string cursor;
  /// A schedule's alarm turn: the fire it runs (schedule_turns.hpp).
  std::optional<schedule_turn> schedule;
  /// A connection's turn: the connection and the message its handler runs with (kept here:
  /// the handler holds references to them across its awaits).
  connection conn;
  ws_message message;
};

/// Whether `method` is one of a WebSocket connection's turns (connection_turns.cpp).
bool is_connection_turn(const std::string& method);

/// Whether a call of `method` may create its entity's file: a type's own method, a
/// connection's turn (a client connecting makes the entity, as a call would), or the
/// degradation watcher's record (a tenant's runtime entity starts with its first move). Every
/// other internal method ('@...': reads, operator actions) never creates one: an entity that
/// was never written answers it 404 ENTITY_NOT_FOUND.
inline bool may_create_entity(const std::string& method) {
  return method.empty() || method[0] != '@' || is_connection_turn(method) ||
         method == "@degradation";
}

/// What the runner needs from its owner (the entity actor; a fake in tests).
class turn_host {
 public:
  virtual ~turn_host() = default;
  /// The answer of a turn, once, when the turn ends (into the batch the next commit covers).
  virtual void turn_answered(queued& item, call_reply r) = 0;
};

/// What a batch of turns wrote that the commit must know.
struct batch_marks {
  uint64_t turns = 0;        ///< turns whose writes the batch keeps
  bool alarms_moved = false; ///< an alarm was set or cancelled (the alarm index must follow)
};

class entity_context;

/// The name of the runtime's own alarm that purges expired keys and dead letters.
inline constexpr const char* purge_alarm = "@purge_keys";

/// The turns of one entity.
class turn_runner {
 public:
  /// What does not change while the entity's actor lives.
  struct env {
    const runtime_config* cfg = nullptr;
    counters* stats = nullptr;
    const entity_type* type = nullptr;
    const entity_key* key = nullptr;
    outbox_board* outbox = nullptr; ///< null when no outbox sink is configured
  };

  turn_runner(env e, turn_host& host) : env_(e), host_(host) {}

  // -- activation --

  /// The store, the entity instance and the context of a new activation.
  void attach(entity_store& store, entity& instance, entity_context& ctx);
  /// The activation ends: forgets everything of it.
  void detach();

  // -- turns --

  /// Whether a call may queue: a call whose idempotency key belongs to a call accepted and
  /// not yet answered gets 409 at once (the reply to send), instead of queueing behind it.
  /// `shared`: is_shared(req), which the caller asked once and keeps in the queued call.
  std::optional<call_reply> accept(const call_request& req, bool shared);
  /// Forgets a call that will not run (answered without a turn): its key is free again.
  void drop(const queued& item) {
    if (item.kind == turn_kind::call && !item.req.idempotency_key.empty() && !item.shared)
      keys_in_flight_.erase(item.req.idempotency_key);
  }
  /// Runs `item` until it ends (its answer goes to the host) or suspends at an await.
  void run(queued item);

  // -- shared (read-only) calls: shared_calls.cpp --

  /// Whether `req` is a shared call: a method declared `method_options::shared`, or one of the
  /// built-in reads (@facts, @verify, @alarms, @dead_letters, @breakers).
  bool is_shared(const call_request& req) const;
  /// Runs shared call `req` at once, beside the turn that runs or waits at an await, on the
  /// store as it stands (the caller holds the answer until what it may reveal is durable). It
  /// writes nothing: the error fact of a failure of the method (`ran`: it ran; a key used with
  /// another request is refused before) is written by the internal call
  /// shared_failure_record() makes, which the caller queues.
  call_reply run_shared(const call_request& req, bool& ran);
  /// The internal call that records a shared call's failure `r` as an error fact.
  static call_request shared_failure_record(const call_request& req, const call_reply& r);
  /// Ends the running turn with the handler's outcome (`err`, or `value` for a call).
  void finish(std::exception_ptr err, std::optional<nlohmann::json> value);
  /// The turn that runs (or waits at an await), if any.
  turn_state* current() noexcept { return turn_ ? &*turn_ : nullptr; }
  bool busy() const noexcept { return turn_.has_value(); }

  // -- awaits --

  /// The running turn reached an await (a commit point): its writes so far are kept, its key
  /// becomes a pending row. The owner then commits.
  void suspend(std::coroutine_handle<> h, uint64_t token);
  /// The commit at the running turn's await failed with `st` (its writes are gone).
  void lost_at_await(const status& st);
  /// The running turn resumes after its await.
  void resume();

  // -- the batch --

  batch_marks& marks() noexcept { return marks_; }
  /// The journal of the running turn (inactive for a turn that is not journaled).
  turn_journal& journal() noexcept { return journal_; }
  /// A commit failed: what this activation remembers of the writes it rolled back goes too.
  void commit_failed();

  // -- what tool calls and operators touch (through the context) --

  std::map<std::string, resilience::circuit_breaker>& breakers() noexcept { return breakers_; }
  std::map<std::string, resilience::retry_budget>& budgets() noexcept { return budgets_; }
  /// A dead letter was written in this turn: keeps the keys that live dead letters own, and
  /// arms the purge of one whose retention runs.
  void dead_letter_written(const dead_letter_record& dl);

 private:
  entity_store& store() { return *store_; }
  int64_t now() const;
  void answer(queued& item, call_reply r);
  /// A keyed call's answer from its key alone (replay, conflict), or nothing: run it.
  /// `resume` is set when the key is pending: the call was interrupted at an await and runs
  /// again from its journal.
  std::optional<call_reply> check_key(const call_request& req, int64_t now, bool& resume);
  /// Starts the running turn's journal under `key` (read from the store when `recorded`).
  void start_journal(std::string key, bool recorded);
  /// A keyed call's replay diverged from its journal: a dead letter owns the call from now on.
  void journal_mismatch_dead_letter(const call_error& ce);
  std::optional<std::string> dead_letter_owning(const std::string& key);
  void run_call();
  void run_alarm(int64_t now);
  /// A connection's turn: on_connect, on_message or on_close (connection_turns.cpp).
  void run_connection_turn(const std::string& method, const nlohmann::json& args);
  void run_dead_letter_retry();
  void run_purge(int64_t now);
  nlohmann::json run_internal(const std::string& method, const nlohmann::json& args);
  /// Whether `method` is a built-in read (shared_calls.cpp).
  static bool is_read(const std::string& method);
  /// A built-in read; `cursor` gets where the next page starts (shared_calls.cpp).
  nlohmann::json read_internal(const std::string& method, const nlohmann::json& args,
                               std::string& cursor);
  void arm_purge(int64_t due_ms);
  call_reply finish_ok(const std::optional<nlohmann::json>& value);
  call_reply finish_failed(const call_error& ce);
  void alarm_failed(const call_error& ce);
  /// The outbox relay's turn failed (a commit at a delivery, a store error): its alarm is set
  /// again after a backoff; it never becomes a dead letter (docs/outbox.md).
  void outbox_failed(const call_error& ce);
  // A schedule's alarm turn and its failure (schedule_turns.cpp).
  /// An operator resumes what the entity holds paused (a fork's alarms and schedules): each is
  /// set again unless one of its name was set since; a lifecycle fact says who, why and what.
  nlohmann::json resume_paused(const nlohmann::json& args);
  void run_schedule(int64_t now);
  void schedule_fire_done();
  void advance_schedule(schedule_record row, const schedule& spec, const schedule_step& step);
  void record_dropped(const std::string& name, const schedule& spec, const schedule_step& step);
  void schedule_failed(const call_error& ce);
  void dead_letter_retry_failed(const call_error& ce);
  void append_error_fact(const call_error& ce, const std::string& subtype,
                         const nlohmann::json& extra);

  env env_;
  turn_host& host_;
  entity_store* store_ = nullptr;
  entity* instance_ = nullptr;
  entity_context* ctx_ = nullptr;
  std::optional<turn_state> turn_;
  turn_journal journal_;
  batch_marks marks_;
  /// The purge alarm is known to be set (so a keyed call need not look).
  bool purge_alarm_known_ = false;
  /// Keys of calls accepted and not yet answered.
  std::unordered_set<std::string> keys_in_flight_;
  /// Keys that live dead letters own (key -> dead letter id), loaded at the first keyed call
  /// of the activation; a hint, checked against the store when it names a key.
  std::optional<std::unordered_map<std::string, std::string>> dead_letter_keys_;
  /// Breakers (loaded from the store) and retry budgets of this activation.
  std::map<std::string, resilience::circuit_breaker> breakers_;
  std::map<std::string, resilience::retry_budget> budgets_;
  /// The outbox of this activation (outbox/outbox_relay.hpp).
  outbox_relay outbox_;
};

} // namespace factum::detail
