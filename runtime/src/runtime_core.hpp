// runtime_core.hpp (private): state shared by the runtime facade, the entity actors, the storage
// threads and the alarm scheduler. Each member says which lock or thread guards it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <caf/all.hpp>

#include "actor/group_commit.hpp"
#include "counters.hpp"
#include "entity_ops/archive_pruner.hpp"
#include "factum/replication/commit_sink.hpp"
#include "factum/resilience/classifier.hpp"
#include "factum/resilience/dead_letter_rules.hpp"
#include "factum/runtime/connections.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/alarm_index.hpp"
#include "factum/storage/entity_store.hpp"
#include "messages.hpp"
#include "outbox/outbox_board.hpp"
#include "storage_pool.hpp"
#include "tenancy/degradation.hpp"
#include "tenancy/degradation_watch.hpp"
#include "tenancy/tenant_quotas.hpp"
#include "turn/tool_board.hpp"

namespace factum::detail {

/// Live activations by entity key, their LRU order and the activation slots (open files).
/// Everything is guarded by `mu`. Single activation: spawning happens under the lock.
struct activation_registry {
  struct entry {
    caf::actor actor;
    std::list<std::string>::iterator lru;
    bool has_slot = false;
    bool asked_to_hibernate = false;
  };
  std::mutex mu;
  std::condition_variable changed; ///< notified when an entry leaves (stop waits on it)
  std::unordered_map<std::string, entry> map;
  std::list<std::string> lru;                             ///< front: most recently used
  std::deque<std::pair<std::string, caf::actor>> waiters; ///< actors waiting for a slot
  size_t cap = 1;
  size_t slots_used = 0;
  /// Slot holders asked to hibernate that have not released yet. Kept >= waiters.size() when
  /// enough holders exist, so that every waiter has a release coming (no waiter is left until
  /// an idle timeout).
  size_t asked = 0;
  bool stopping = false;
  /// Entities whose activation must not start while a whole-file operation replaces their file
  /// (a rollback: entity_files.hpp, hold_entity).
  std::unordered_set<std::string> held;

  /// Asks least recently used slot holders to hibernate until as many are asked as actors wait.
  /// Call with `mu` held; send atoms::hibernate to the returned actors after unlocking.
  std::vector<caf::actor> ask_victims_locked() {
    std::vector<caf::actor> out;
    for (auto l = lru.rbegin(); l != lru.rend() && asked < waiters.size(); ++l) {
      auto& e = map[*l];
      if (e.has_slot && !e.asked_to_hibernate) {
        e.asked_to_hibernate = true;
        ++asked;
        out.push_back(e.actor);
      }
    }
    return out;
  }
};

/// Descriptors an open entity holds: its database, -wal, -shm (its DMS lock) and the -wal
/// descriptor deferred sync fdatasyncs; with an archive also the -wal read for shipping, the
/// generation's mirror and the archive's index.
inline size_t descriptors_per_entity(const runtime_config& cfg) {
  return cfg.archive_dir.empty() ? 4 : 7;
}

struct runtime_core;
class reply_sink;

/// The call router's own thread: it answers calls whose deadline passed (CALL_TIMEOUT) and
/// re-routes calls whose message reached an actor that had already ended. Both are rare
/// compared with calls answered by their entity, which only add and remove a deadline here.
///
/// Threads: add/remove/reroute from any thread (guarded by `mu_`); run() on its own thread.
class call_router_thread {
 public:
  using clock = std::chrono::steady_clock;
  /// A queued deadline. The sink's destructor removes its entry first thing (under the mutex),
  /// so a pointer found in the queue is always to a live sink.
  using entry = std::multimap<clock::time_point, reply_sink*>::iterator;

  // -- lifecycle --

  void start(runtime_core* rt);
  /// Stops the thread; deadlines still queued are dropped (their calls are answered by their
  /// entities, or by the actor system's shutdown).
  void stop();

  // -- deadlines (any thread) --

  /// Queues `sink`'s deadline; remembers the entry in the sink.
  void add(const std::shared_ptr<reply_sink>& sink);
  /// Removes `sink`'s deadline if it is still queued.
  void remove(reply_sink& sink);
  /// Hands a call back for routing on this thread (its actor ended before taking it).
  void reroute(std::shared_ptr<reply_sink> sink);

 private:
  void run();

  runtime_core* rt_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<clock::time_point, reply_sink*> deadlines_;
  std::vector<std::shared_ptr<reply_sink>> reroutes_;
  /// When the thread wakes by itself (max: it waits for a notify; min: it is awake).
  clock::time_point wake_at_ = clock::time_point::min();
  bool stop_ = false;
  std::thread thread_;
};

/// Where a routed call's reply goes. The call travels to its entity actor inside the sink (one
/// message, no actor of its own, no copy); the actor takes the request out (take()) and later
/// answers through deliver() from its own thread. Exactly one answer wins: the entity's, or
/// the router thread's CALL_TIMEOUT. A sink destroyed before any actor took its request means
/// the message reached an actor that had ended (hibernated between lookup and delivery): the
/// call never ran, and is routed again.
///
/// Threads: created by the caller, taken and delivered on an entity's CAF worker, expired on
/// the router thread; the state word decides the winner.
class reply_sink : public std::enable_shared_from_this<reply_sink> {
 public:
  reply_sink(runtime_core* rt, entity_key key, std::string key_str, call_request req,
             std::chrono::milliseconds timeout, std::function<void(call_reply)> done);
  ~reply_sink();
  reply_sink(const reply_sink&) = delete;
  reply_sink& operator=(const reply_sink&) = delete;

  /// The entity actor takes the request (once); from then on it owes an answer.
  call_request take();
  /// The entity's answer; ignored when the deadline already answered.
  void deliver(call_reply r);
  /// The deadline passed (router thread).
  void expire();
  /// Whether the call has its answer already (its deadline passed before the entity ran it).
  bool answered() const noexcept { return state_.load(std::memory_order_acquire) == answered_; }

 private:
  friend class call_router_thread;
  friend struct runtime_core;
  enum : int { pending = 0, taken = 1, answered_ = 2 };
  bool finish(call_reply r);

  runtime_core* rt_;
  entity_key key_;
  std::string key_str_;
  call_request req_;
  std::chrono::milliseconds timeout_;
  call_router_thread::clock::time_point deadline_;
  std::function<void(call_reply)> done_;
  int attempts_ = 0;
  std::atomic<int> state_{pending};
  call_router_thread::entry entry_{};
  bool queued_ = false; ///< entry_ is valid (guarded by the router thread's mutex)
};

/// A wake of the alarm scheduler that did not reach its entity, and why.
struct failed_wake {
  alarm_index_entry entry;
  std::string reason;
};

/// The alarm index: written by storage threads, read by the scheduler. Writes are group
/// commits (runtime_core::sync_alarm_index): the storage threads that need a change durable at
/// the same time queue it, one of them applies the queue in one transaction on `writer` while
/// the others wait, so the index costs one fsync per batch rather than one per entity.
struct alarm_directory {
  std::mutex mu; ///< guards everything below; never held during a write to `writer`
  std::unique_ptr<alarm_index> index;  ///< reads (under mu): the scheduler, decisions
  std::unique_ptr<alarm_index> writer; ///< only by the thread whose turn `writes` gave
  /// A change waiting to be written, with the outcome slots of everyone waiting for it.
  struct change {
    alarm_index_entry entry;
    std::vector<status*> waiters; ///< each writer's own, which waits until it is applied
  };
  /// Changes queued for the next batch, and those in the batch being applied, by key string
  /// (the latest change of a key wins): what the index will say once they are applied.
  std::unordered_map<std::string, change> queued, applying;
  group_commit writes; ///< whose turn it is on `writer`
  /// Wakes that failed since the scheduler's last scan (it parks their entries).
  std::vector<failed_wake> failed_wakes;
};

/// The configured tools: the transports' names and the policies' names.
inline std::vector<std::string> tool_names(const runtime_config& cfg) {
  std::vector<std::string> out;
  for (auto& [name, _] : cfg.tools)
    out.push_back(name);
  for (auto& [name, _] : cfg.tool_policies)
    if (!cfg.tools.count(name))
      out.push_back(name);
  return out;
}

struct runtime_core {
  explicit runtime_core(runtime_config c)
      : cfg(std::move(c)), pool(cfg.storage_threads), sync_pool(cfg.sync_threads) {}

  runtime_config cfg;
  /// Every metric of the runtime, registered once (runtime::metrics(), /metrics); declared
  /// before every member that registers in it.
  metrics::registry metric_registry;
  /// How entity files are opened: files of pages of 4096 bytes (the storage default).
  store_options store_opts;
  /// The same for each other page size a type asks for (entity_type::page_size), each with its
  /// own spare pool. Filled at start, read-only afterwards.
  std::map<int, store_options> store_opts_by_page;

  /// The options an entity of `type` opens with (the map never holds the default size).
  const store_options& store_opts_for(const entity_type* type) const {
    auto it = type ? store_opts_by_page.find(type->page_size) : store_opts_by_page.end();
    return it == store_opts_by_page.end() ? store_opts : it->second;
  }

  /// Every spare pool running: the default size's and each other page size's.
  std::vector<spare_pool*> spare_pools() const {
    std::vector<spare_pool*> out;
    if (store_opts.spares)
      out.push_back(store_opts.spares.get());
    for (auto& [page, o] : store_opts_by_page)
      if (o.spares)
        out.push_back(o.spares.get());
    return out;
  }

  storage_pool pool;
  /// Runs entity_store::sync() of deferred-sync commits only (runtime_config::sync_threads).
  storage_pool sync_pool;
  activation_registry reg;
  alarm_directory alarms;
  /// Per-tenant accounts and the tenant index (tenant_quotas.hpp).
  tenant_directory tenants{metric_registry};
  counters stats{metric_registry};
  /// The configured tools' counters and breaker states (tool_board.hpp).
  tool_board tools{tool_names(cfg), metric_registry};
  /// Each tenant's degradation level and the feature matrix (degradation.hpp); evaluated by
  /// `degradation_watcher`'s thread.
  degradation_board degradation{cfg.degradation};
  degradation_watch degradation_watcher;
  /// The archive's retention thread (archive_pruner.hpp).
  archive_pruner pruner;
  /// The outbox sinks and routes (outbox/outbox_board.hpp); null when none is configured.
  std::unique_ptr<outbox_board> outbox;
  resilience::classifier classifier;      ///< read-only after start
  resilience::dead_letter_rules dl_rules; ///< read-only after start
  std::unique_ptr<caf::actor_system_config> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor scheduler;
  /// Delivers entity actors' delayed self-messages, naming them by key and actor id only
  /// (spawn_timer).
  caf::actor timers;
  call_router_thread router;
  /// Test seam: when set, called with the key after a call's actor was looked up and before
  /// the call is sent to it (detail::runtime_testing). Null in production.
  std::atomic<const std::function<void(const std::string&)>*> before_dispatch_send{nullptr};

  // -- routing (any thread) --

  /// The live actor of `key`, spawning it when there is none; an invalid handle when stopping.
  caf::actor lookup_or_spawn(const entity_key& key, const std::string& key_str);
  /// Sends `req` to `key`'s actor inside a reply sink, routed again when the actor ended
  /// between lookup and delivery. `done` runs exactly once: on the entity's CAF worker (its
  /// answer), on the router thread (504 CALL_TIMEOUT after `timeout`), or on the calling thread
  /// (unknown type, runtime stopping).
  void route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
             std::function<void(call_reply)> done);
  /// Sends `sink` to its key's live actor (spawning one), or answers it when that is not
  /// possible (stopping, or too many actors ended in its way).
  void dispatch(std::shared_ptr<reply_sink> sink);

  // -- activation slots (entity actors) --

  /// Asks for a slot to open a file; true when granted now, else the actor is queued and gets
  /// (atoms::slot) later while the least recently used idle entity is asked to hibernate.
  bool acquire_slot(const std::string& key_str, const caf::actor& self);
  /// Returns a slot (the file is closed); hands it to the first waiter.
  void release_slot(const std::string& key_str);
  /// Removes `key_str` when it still maps to `self`.
  void unregister(const std::string& key_str, const caf::actor& self);

  // -- alarms (storage threads) --

  /// Makes the index agree with an entity's next due alarm (`next` empty: none). When
  /// `before_commit`, only moves the entry earlier (never later) and kicks the scheduler. The
  /// write's outcome: a caller that needed an earlier entry must not go on when it failed.
  status sync_alarm_index(const entity_key& key, std::optional<int64_t> next, bool before_commit);

  /// Runs `fn(writer)` with the index's writer connection to itself, waiting while a batch
  /// of sync_alarm_index() writes it (any thread that may block).
  template <class Fn> status with_index_writer(Fn&& fn) {
    std::unique_lock<std::mutex> g(alarms.mu);
    return alarms.writes.exclusive(g, [&] { return fn(*alarms.writer); });
  }
  /// A wake of the alarm scheduler failed (any thread): parked at its next scan.
  void wake_failed(const alarm_index_entry& e, std::string reason);

  // -- quarantined entities (storage threads) --

  /// Remembers that `key_str`'s WAL may hold writes no sync covered (a quarantine that could
  /// not mark the file itself): its next open re-syncs the files first.
  void remember_suspect(const std::string& key_str);
  /// Re-syncs the files of `key` when remember_suspect() named it (entity_store::resync()).
  status resync_if_suspect(const store_options& opts, const entity_key& key,
                           const std::string& key_str);
  /// Logs that `key_str` was quarantined, and why.
  void log_quarantine(const std::string& key_str, const status& why);
  /// Writes one event line to cfg.log (or standard error): `fields` plus "ts".
  void log_event(nlohmann::json fields);
  std::mutex suspects_mu;
  std::unordered_set<std::string> suspects; ///< guarded by suspects_mu

  // -- the replicated log's compaction (entity actors) --

  /// Replicated: the changeset bytes an entity appended to the log since its last image, kept
  /// from one activation to the next (not across a restart of the process: a new process
  /// counts from zero). At most a million entities; past that, the smallest debts are dropped.
  void keep_log_debt(const std::string& key_str, uint64_t bytes);
  uint64_t take_log_debt(const std::string& key_str);
  std::mutex log_debts_mu;
  std::unordered_map<std::string, uint64_t> log_debts; ///< guarded by log_debts_mu

  int64_t now() const { return cfg.clock ? cfg.clock() : now_ms(); }

  // -- WebSocket connections (any thread) --

  /// The holder of entities' WebSocket connections (runtime::attach_connections), or null.
  std::shared_ptr<connection_host> connection_holder() const {
    std::lock_guard<std::mutex> g(connections_mu);
    return connections;
  }
  mutable std::mutex connections_mu;
  std::shared_ptr<connection_host> connections; ///< guarded by connections_mu
};

/// Removes the temporary files of shard-move exports and adopts (DATA/runtime/move-*) that a
/// process killed mid-move left; at start, before any move runs. Answers how many.
size_t remove_move_temporaries(const std::filesystem::path& data_dir);

/// What tests may reach of a running runtime (declared a friend by `runtime`).
struct runtime_testing {
  static runtime_core& core(runtime& rt);
};

/// Spawns the actor of one entity (lazy_init; called under reg.mu).
caf::actor spawn_entity(runtime_core* rt, const entity_key& key, const std::string& key_str);

/// Spawns the alarm scheduler (a detached actor: it reads the index with blocking SQLite calls).
caf::actor spawn_alarm_scheduler(runtime_core* rt);

/// Spawns the timer actor: (fire, key_str, actor id, message), sent to it delayed and
/// anonymously, passes the message on to the key's registered actor if it is still that one. A
/// delayed_send to self would hold the sender's actor (its ~2.3 KiB block, its mailbox) until it
/// fires: up to the key-purge interval (an hour by default) for every activation that ended
/// meanwhile; so would a weak reference (CAF frees an actor's block with its last weak reference).
caf::actor spawn_timer(runtime_core* rt);

} // namespace factum::detail

namespace factum {

/// The facade's state: the core, and what start() and stop() keep of their own. Its members
/// are defined in runtime.cpp, and the shard moves' in entity_moves.cpp.
struct runtime::impl {
  std::unique_ptr<detail::runtime_core> core;
  int lock_fd = -1; ///< holds DATA/runtime/LOCK: closed last, also by a start that fails
  std::atomic<bool> stopped{false};
  std::mutex stop_mu;
  std::vector<std::string> start_notes;
  ~impl(); ///< frees the core, then releases the data directory
};

} // namespace factum

// The sink crosses actors only inside one process (it is never serialised).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<factum::detail::reply_sink>)
