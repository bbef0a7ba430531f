// runtime_core.hpp (private): state shared by the runtime facade, the entity actors, the storage
// threads and the alarm scheduler. Each member says which lock or thread guards it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "counters.hpp"
#include "factum/resilience/classifier.hpp"
#include "factum/resilience/dead_letter_rules.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/alarm_index.hpp"
#include "messages.hpp"
#include "storage_pool.hpp"

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

/// The alarm index behind a mutex: written by storage threads, read by the scheduler.
struct alarm_directory {
  std::mutex mu;
  std::unique_ptr<alarm_index> index;
};

struct runtime_core {
  explicit runtime_core(runtime_config c) : cfg(std::move(c)), pool(cfg.storage_threads) {}

  runtime_config cfg;
  store_options store_opts;
  storage_pool pool;
  activation_registry reg;
  alarm_directory alarms;
  counters stats;
  resilience::classifier classifier;      ///< read-only after start
  resilience::dead_letter_rules dl_rules; ///< read-only after start
  std::unique_ptr<caf::actor_system_config> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor scheduler;

  // -- routing (any thread) --

  /// The live actor of `key`, spawning it when there is none; an invalid handle when stopping.
  caf::actor lookup_or_spawn(const entity_key& key, const std::string& key_str);
  /// Sends `req` to `key`'s actor with `timeout`, retrying when the actor hibernated between
  /// lookup and delivery; `done` runs once on a CAF worker.
  void route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
             std::function<void(call_reply)> done);

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
  /// `before_commit`, only moves the entry earlier (never later) and kicks the scheduler.
  void sync_alarm_index(const entity_key& key, std::optional<int64_t> next, bool before_commit);

  int64_t now() const { return now_ms(); }
};

/// Spawns the actor of one entity (lazy_init; called under reg.mu).
caf::actor spawn_entity(runtime_core* rt, const entity_key& key, const std::string& key_str);

/// Spawns the alarm scheduler (a detached actor: it reads the index with blocking SQLite calls).
caf::actor spawn_alarm_scheduler(runtime_core* rt);

} // namespace factum::detail
