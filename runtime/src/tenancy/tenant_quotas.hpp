// tenant_quotas.hpp (private): per-tenant quotas (runtime_config::tenant_quotas): each tenant's
// entities and bytes, counted in memory and in the tenant index (DATA/runtime/tenants.db,
// storage/tenant_index.hpp), and the refusals: 429 TENANT_QUOTA_EXCEEDED for a creation a
// tenant's max_entities has no room for, 507 TENANT_STORAGE_QUOTA_EXCEEDED for writes of a
// tenant at its max_bytes. Files a shard move brings in or takes away (entity_moves.cpp) are
// counted here too, without a quota.
//
// Threads: accounts are found and reserved under tenant_directory::mu from any thread; index
// writes are group commits from storage threads; a tenant_meter belongs to one entity (its actor
// and its open and close jobs, which never run at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actor/group_commit.hpp"
#include "factum/entities/errors.hpp"
#include "factum/metrics/metrics.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/tenant_index.hpp"

namespace factum::detail {

struct runtime_core;

/// One tenant's usage and quota. Never removed once made: pointers to it stay valid.
struct tenant_account {
  std::string name;
  tenant_quota quota;
  /// Entity files, and creations reserved and not yet done (changed under tenant_directory::mu;
  /// read anywhere).
  std::atomic<int64_t> entities{0};
  /// Bytes of the entity files, as last measured (tenant_meter::set).
  std::atomic<int64_t> bytes{0};
};

/// One entity's share of its tenant's bytes.
struct tenant_meter {
  tenant_account* account = nullptr; ///< set when the actor starts
  int64_t counted = 0;               ///< what this entity adds to account->bytes now
  int64_t indexed = 0;               ///< the bytes the tenant index holds for it
  int64_t db = 0; ///< the database file's bytes at the last measure of both files
  /// Set by an open job that refused to create the entity's file (its quota).
  std::optional<call_error> refusal;
  /// The entity's last commit (ms), and the last activity written to the index for it
  /// (index_fleet_summary, measure_closed).
  int64_t active_ms = 0;
  int64_t activity_indexed_ms = 0;

  /// Whether commits are measured: the tenant has a byte quota.
  bool watches_commits() const noexcept { return account && account->quota.max_bytes; }
  /// The entity's files take `bytes` now.
  void set(int64_t bytes) noexcept {
    account->bytes.fetch_add(bytes - counted, std::memory_order_relaxed);
    counted = bytes;
  }
};

/// The tenant accounts and the index. Writes are group commits (write_tenant_index): storage
/// threads that need a change written at the same time queue it, one of them applies the queue
/// in one transaction while the others wait.
struct tenant_directory {
  explicit tenant_directory(metrics::registry& r) : reg(r) {}
  metrics::registry& reg;
  std::mutex mu; ///< guards everything below; never held during a write to `index`
  std::unordered_map<std::string, std::unique_ptr<tenant_account>> accounts;
  std::unique_ptr<tenant_index> index; ///< used only by the thread whose turn `writes` gave
  struct queued_change {
    tenant_index_change change;
    status* outcome; ///< its writer's, which waits until the change is applied
  };
  std::vector<queued_change> queued;
  bool queued_durable = false; ///< a change in `queued` must be synced (an added entity)
  /// A write failed: what the index says may differ from the files (rescanned at next start).
  bool dirty = false;
  group_commit writes; ///< whose turn it is on `index`
  /// Refusals by quota: index 0 for 429 TENANT_QUOTA_EXCEEDED (an entity the tenant's
  /// max_entities had no room for), 1 for 507 TENANT_STORAGE_QUOTA_EXCEEDED (writes of a tenant
  /// at its max_bytes).
  metrics::counter_by_label refusals{
    reg,
    "factum_tenant_quota_refusals_total",
    "Calls refused by a tenant quota: 429 TENANT_QUOTA_EXCEEDED (quota=\"max_entities\"), 507 "
    "TENANT_STORAGE_QUOTA_EXCEEDED (quota=\"max_bytes\").",
    "quota",
    {"max_entities", "max_bytes"}};
  static constexpr size_t entity_refusal = 0, bytes_refusal = 1;
  /// 0 or 1: damaged, missing or never completed at start.
  metrics::counter rebuilds{
    reg, "factum_tenant_index_rebuilds_total",
    "Tenant indexes rebuilt from the entity files at start (damaged, missing, incomplete)."};
  /// A creation that needed the write was refused 503.
  metrics::counter failures{
    reg, "factum_tenant_index_failures_total",
    "Tenant index writes that failed (creations that needed one were refused 503)."};
};

// -- start and stop (the thread that starts or stops the runtime) --

/// Checks cfg.tenant_quotas, opens the index (rebuilt when damaged, missing or never completed;
/// rows checked against the files after an unclean stop: each says so in `notes`) and loads
/// every tenant's totals.
status open_tenant_index(runtime_core& rt, std::vector<std::string>& notes);
/// Marks the index clean (when no write failed) and closes it: after every entity closed.
void close_tenant_index(runtime_core& rt);

// -- accounts (any thread) --

/// The account of `tenant`, made on first use.
tenant_account* tenant_account_of(runtime_core& rt, const std::string& tenant);
/// A snapshot of `tenant`'s usage.
tenant_usage tenant_usage_snapshot(runtime_core& rt, const std::string& tenant);
/// Registers the usage gauges of each tenant with a quota (as many series as configured quotas:
/// bounded) in the runtime's registry.
void register_tenant_metrics(runtime_core& rt);
/// A page of a tenant's entities from the index (runtime::list_entities), between its writes.
result<std::vector<entity_listing>>
list_tenant_entities(runtime_core& rt, const std::string& tenant, const entity_list_query& q);
/// Runs `read` with the index (null once closed) between its writes (runtime::read_tenant_index).
void read_tenant_index(runtime_core& rt, const std::function<void(tenant_index*)>& read);

// -- an entity (its open and close jobs on storage threads; the rest on its actor) --

/// entity_store::open for a call that may create the file: when there is none, the creation
/// is counted first (refused, with meter.refusal set, when the tenant's max_entities has no
/// room; the index row written durably) and uncounted when no file was made. Measures the files.
result<std::unique_ptr<entity_store>> open_creating(runtime_core& rt, const store_options& opts,
                                                    const entity_key& key, tenant_meter& meter);
/// Measures the files of an entity opened without creating it.
void measure_opened(tenant_meter& meter, const entity_store& store);
/// After a commit: the -wal's bytes when the tenant has a byte quota (one stat), else nothing.
void measure_commit(tenant_meter& meter, const entity_store& store);
/// After a checkpoint: both files.
void measure_checkpoint(tenant_meter& meter, const entity_store& store);
/// How often an active entity's last activity is written to the index at most (ms): the
/// staleness bound of GET /v1/entities?order=last_activity for an entity that stays active.
constexpr int64_t activity_cadence_ms = 60'000;
/// After a commit, on the actor: when the commit wrote dead letters or moved breakers
/// (entity_store::take_fleet_change), the entity's fleet summary is written to the index now
/// (the actor waits for that write: a fleet view read after the call's answer sees it);
/// otherwise its last activity, at most once per activity_cadence_ms.
void index_fleet_summary(runtime_core& rt, const entity_key& key, tenant_meter& meter,
                         entity_store& store);
/// After the entity's store closed: both files, written to the index when they changed, and
/// its last activity when newer than the index's.
void measure_closed(runtime_core& rt, const entity_key& key, tenant_meter& meter);
/// 507 TENANT_STORAGE_QUOTA_EXCEEDED for a call of a type's method (not '@...') while the
/// tenant is at or over its max_bytes; nothing otherwise.
std::optional<call_reply> refuse_write(runtime_core& rt, const tenant_meter& meter,
                                       const std::string& method);

// -- moves (runtime::adopt_entity and forget_entity, on a storage thread) --

/// What index_adopted() found and wrote, for settle_adopted().
struct adopted_row {
  bool had_row = false;  ///< the index had a row for the entity already
  bool had_file = false; ///< the entity had a file, which the adopted one replaces
  int64_t bytes = 0;     ///< the adopted file's bytes
  int64_t old_bytes = 0; ///< the bytes of the files it replaces (0: none)
};
/// Before an adopted file of `bytes` is put in place: `key`'s index row says so (added durably,
/// as a creation's, when there is none; else its bytes set), whatever the tenant's quota.
/// Nothing is written on an error.
result<adopted_row> index_adopted(runtime_core& rt, const entity_key& key, int64_t bytes);
/// Holds a place in `tenant`'s max_entities for a new entity whose file is built aside and then
/// adopted (a fork): QUOTA_EXCEEDED when the tenant has no room, naming its count and limit.
/// The place counts as an entity until give_entity_place(), which the caller calls once the
/// file is in place (settle_adopted counted it then) or given up.
status take_entity_place(runtime_core& rt, const std::string& tenant);
void give_entity_place(runtime_core& rt, const std::string& tenant);
/// After the file was put in place (`placed`): its tenant's account counts it and its bytes in
/// place of the files it replaced. Not placed: the row is put back (removed when it was added,
/// else sized as the files still there).
void settle_adopted(runtime_core& rt, const entity_key& key, const adopted_row& row, bool placed);
/// `key`'s files were removed (`had_file`: there were some, of `removed_bytes`): its tenant's
/// account no longer counts them, and its index row goes (a row left without a file goes too).
/// The index write's outcome.
status uncount_forgotten(runtime_core& rt, const entity_key& key, bool had_file,
                         int64_t removed_bytes);

// -- shared storage (runtime::index_entities and unindex_entities, on a storage thread) --

/// `key`'s file of `bytes` is in place under the entity root: a row is added (durably) where
/// the index has none, and the tenant's account counts it then. Whether a row was added.
result<bool> index_in_place(runtime_core& rt, const entity_key& key, int64_t bytes);

} // namespace factum::detail
