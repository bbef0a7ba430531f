// degradation_watch.hpp (private): the thread that evaluates the degradation board
// (degradation.hpp) from what the runtime sees (breakers on the tool board, quarantines, tenant
// quotas, the data disk's free space) every check_interval or at once when kicked, and records
// each tenant's move as a lifecycle fact in the tenant's runtime entity
// (factum.runtime/degradation). kick() and set_override() from any thread; the rest on the
// watcher's own thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "factum/entities/call.hpp"
#include "factum/entities/entity.hpp"
#include "factum/runtime/ownership.hpp"
#include "tenancy/degradation.hpp"

namespace factum::detail {

struct runtime_core;

/// The type and id of each tenant's runtime entity, where degradation facts go.
inline constexpr const char* runtime_entity_type = "factum.runtime";
inline constexpr const char* degradation_entity_id = "degradation";

/// Adds the type of the tenants' runtime entities (no methods a client can call; the watcher
/// writes through the internal method @degradation).
void add_runtime_entity_type(entity_registry& types);

class degradation_watch {
 public:
  /// Starts the thread when the board is enabled; reads back each configured tenant's last
  /// operator floor from its runtime entity first.
  void start(runtime_core* rt);
  /// Stops and joins the thread (before the actor system goes).
  void stop();
  /// Evaluate now (a breaker moved, an entity was quarantined).
  void kick();
  /// An operator's floor for `tenant`, recorded as a `degradation_override` fact; `done` gets
  /// the fact's outcome (any thread). In a cluster that keeps the floors
  /// (entity_ownership::keeps_degradation_floors) the watcher's thread stores it there first
  /// (`done` gets 503 CLUSTER_UNAVAILABLE when that fails, and nothing changes); every node
  /// applies it at its next check, and the fact is written by the node that owns the tenant's
  /// runtime entity.
  void set_override(const std::string& tenant, std::optional<int> level, std::string reason,
                    std::string actor, std::function<void(call_reply)> done);

 private:
  /// A floor waiting for the watcher's thread to store it in the cluster.
  struct pending_floor {
    std::string tenant;
    std::optional<int> level;
    std::string reason, actor;
    std::function<void(call_reply)> done;
  };

  void run();
  void evaluate_once();
  void restore_floors();
  /// The cluster that keeps the floors, or nullptr (the runtime keeps its own).
  const entity_ownership* floor_keeper() const;
  void store_floor(pending_floor f);
  /// Applies the cluster's floors that differ from the board's.
  void apply_cluster_floors(const entity_ownership& keeper);
  void apply_floor(const std::string& tenant, std::optional<int> level, std::string reason,
                   std::string actor, std::function<void(call_reply)> done);
  void record(const degradation_change& ch, const char* subtype, nlohmann::json extra,
              std::function<void(call_reply)> done);

  runtime_core* rt_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, kicked_ = false;
  std::vector<pending_floor> floors_; ///< under mu_
  std::thread thread_;
};

} // namespace factum::detail
