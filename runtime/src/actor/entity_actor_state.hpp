// entity_actor_state.hpp (private): the state of one entity's actor and the functions the two
// files that make the actor share: entity_actor.cpp (its messages, activation and closing, the
// queue and pump, the port) and entity_commits.cpp (the commit of each batch of turns, the WAL
// syncs, the checkpoints, the quarantine). No other file includes it: the runtime knows the actor
// only by spawn_entity (runtime_core.hpp).
//
// Threads: entity_state is touched only on the entity's actor; entity_core is shared with the
// storage and sync jobs the actor posts, which own the store while they run (entity_actor.cpp
// says which, and when).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "actor/output_gate.hpp"
#include "factum/storage/entity_store.hpp"
#include "runtime_core.hpp"
#include "turn/entity_context.hpp"

namespace factum::detail {

/// What storage jobs and the actor share: the store itself, and results of jobs.
struct entity_core {
  std::unique_ptr<entity_store> store;
  std::optional<int64_t> next_alarm;
  int64_t released_on_open = 0;
  sync_ticketer tickets; ///< numbers every sync of this entity's WAL (output_gate.hpp)
  tenant_meter meter;    ///< this entity's part of its tenant's usage (tenant_quotas.hpp)
  owner_claim claim;     ///< cluster mode: what this activation claimed its file under
};

enum class phase { waiting_slot, opening, ready, closing };

struct entity_state;
using self_ptr = caf::stateful_actor<entity_state>*;

/// The actor's side of the turn runner and the context (turn_host, context_port).
class actor_port final : public turn_host, public context_port {
 public:
  explicit actor_port(self_ptr self) : self_(self) {}
  void turn_answered(queued& item, call_reply r) override;
  void hold_await(uint64_t token, std::function<void(bool, std::function<void()>)> start) override;
  uint64_t next_token() override;
  void route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
             std::function<void(call_reply)> done) override;
  void start_timer(std::chrono::milliseconds d, std::function<void(bool)> done) override;
  std::shared_ptr<connection_host> connections() override;

 private:
  /// Puts the frames the running turn sent into the batch the next commit covers: they leave
  /// when it is durable, as replies do.
  void gate_frames();

  self_ptr self_;
};

struct entity_state {
  static inline const char* name = "factum.entity";
  runtime_core* rt = nullptr;
  entity_key key;
  std::string key_str;
  std::shared_ptr<entity_core> core = std::make_shared<entity_core>();
  const entity_type* type = nullptr;
  std::unique_ptr<entity> instance;
  std::unique_ptr<actor_port> port;
  std::unique_ptr<turn_runner> runner;
  std::unique_ptr<entity_context> ctx;
  output_gate<reply_to> gate;
  phase ph = phase::waiting_slot;
  std::deque<queued> queue;
  size_t shared_queued = 0; ///< shared calls in `queue` (run_shared_calls looks only then)
  output_gate<reply_to>::reply_batch batch; ///< replies of turns not yet committed
  output_gate<reply_to>::reply_batch in_commit;
  uint64_t commit_facts = 0, commit_turns = 0;
  int64_t committed_seq = 0; ///< last seq committed
  /// Replicated: changeset bytes sent since the entity's last image (runtime_core::log_debts
  /// carries them from one actor to the next), and whether they were taken from there yet.
  uint64_t log_debt = 0;
  bool log_debt_taken = false;
  uint64_t log_debt_due = 0;  ///< the debt at which maybe_compact looks at the file's size again
  int64_t commit_seq = 0;     ///< last seq of the commit in flight
  bool checkpointing = false; ///< a storage thread is checkpointing the WAL
  int ckpt_rounds = 0;        ///< concurrent checkpoints in this cycle (maybe_checkpoint)
  int ckpt_done = 0;          ///< WAL frames in the database after the last of them
  bool committing = false;
  bool flush_scheduled = false;
  bool idle_fired = false;
  bool idle_armed = false;                         ///< an atoms::idle check is on its way
  std::chrono::steady_clock::time_point last_call; ///< arrival of the last call
  bool evict_requested = false;
  bool stopping = false;
  bool quarantine_handled = false; ///< the quarantine was counted and logged
  /// Cluster mode: this activation lost its ownership (a commit or a write was refused
  /// NOT_OWNER). It runs nothing more and closes; calls still queued wait for the next
  /// activation, which asks for the epoch again (and fails them NOT_OWNER if the node still
  /// does not own the entity).
  bool fenced = false;
  /// The start of the operation the suspended turn awaits: held, like a reply, until what the
  /// turn wrote before its await is durable (release_await).
  reply_to await_start;
  uint64_t next_token = 1;
  uint64_t alarm_gen = 0;
  std::unordered_map<uint64_t, std::function<void(bool)>> timers;
};

// -- what entity_actor.cpp and entity_commits.cpp share -----------------------------------------

// entity_actor.cpp

/// Runs what the queue holds while no turn runs and no storage job holds the store (shared
/// calls first), schedules the flush of a batch that wrote, and closes the activation when that
/// is wanted and nothing is left.
void pump(self_ptr self);
/// Closes the activation (its store on a storage thread) when a stop, an eviction, the idle
/// timeout, a quarantine or a fence asks for it and nothing is running or held.
void maybe_close(self_ptr self);
/// Arms the local alarm timer at the store's next alarm (or voids the armed one: none left).
void rearm_from_store(self_ptr self);

// entity_commits.cpp

/// Fails what a quarantined activation has not committed and closes it (once quarantined).
void handle_quarantine(self_ptr self);
/// Commits the batch of turns the store holds: on the actor, or whole on a storage thread.
void start_commit(self_ptr self);
/// Lets the suspended turn's awaited operation start once what it wrote is durable.
void release_await(self_ptr self);
/// The answers of the jobs a commit posts: a WAL sync (atoms::synced), a commit run whole on a
/// storage thread (atoms::committed), a checkpoint (atoms::checkpointed).
void on_synced(self_ptr self, const sync_report& r);
void on_committed(self_ptr self, const status& commit, bool alarms, const sync_report& rep);
void on_checkpointed(self_ptr self, bool concurrent, int done);
/// The replicated log took (or refused) the commits up to generation `gen` (atoms::replicated).
void on_replicated(self_ptr self, uint64_t gen, const status& st);
/// Replicated runtime, on a storage thread right after an activation opened its store: the
/// commits the open made (a claim, keys released) go to the log first, and the file must hold
/// exactly the log's last commit of the entity. UNAVAILABLE (the file must be rebuilt from the
/// log) or the log's error otherwise.
status check_with_log(runtime_core& rt, entity_core& core, const entity_key& key);

} // namespace factum::detail
