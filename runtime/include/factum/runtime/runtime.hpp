// factum/runtime/runtime.hpp: the runtime facade. start(config) brings up the actor system, the
// storage threads and the alarm scheduler; call() routes a call to its entity's actor
// (activating it on first use); stop() drains and closes everything. Every member function is
// thread-safe; done callbacks run on a CAF worker thread and must not block.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "factum/entities/call.hpp"
#include "factum/entities/context.hpp"
#include "factum/entities/entity.hpp"
#include "factum/error/status.hpp"
#include "factum/metrics/metrics.hpp"
#include "factum/runtime/connections.hpp"
#include "factum/runtime/degradation.hpp"
#include "factum/runtime/outbox.hpp"
#include "factum/runtime/ownership.hpp"
#include "factum/storage/durability.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/wal_archive.hpp"

namespace factum {
struct store_options; // factum/storage/entity_store.hpp
}
namespace factum::replication {
class commit_sink; // factum/replication/commit_sink.hpp (cluster storage "replicated")
}

namespace factum {

class tenant_index; // factum/storage/tenant_index.hpp

/// An external tool as the runtime sees it: an asynchronous callable. It must call `done`
/// exactly once, from any thread, and must not block the calling thread.
using tool_fn = std::function<void(const tool_request&, std::function<void(tool_reply)> done)>;

/// How an entity calls one tool: the defaults of its versioned config (`tool.<name>`, version 1
/// is written from these on first use; later versions are published with put_config), its
/// fallback and its idempotency.
struct tool_policy {
  /// retry_policy JSON (factum/resilience/retry_policy.hpp); null: 5 attempts, 1 s base,
  /// exponential x2 to 60 s, ratio jitter 0.5, Retry-After honoured up to 5 min.
  nlohmann::json retry;
  /// Retry policies of single operations (tool_request::operation -> retry_policy JSON), in
  /// place of `retry` for calls of that operation: e.g. a tool's "search" retried 3 x 100 ms and
  /// its "charge" 5 x 1 s. Written into the versioned config with the rest. Default none.
  std::map<std::string, nlohmann::json> operation_retry;
  /// HTTP failures wait (and stop) as their status's own policy says (429: 60 s apart, 6
  /// attempts; 503: exponential from 2 s, 4; 504: linear from 5 s, 3; ...:
  /// resilience::http_status_policy) instead of as `retry` says. Default false.
  bool retry_by_status = false;
  /// breaker_config JSON (factum/resilience/circuit_breaker.hpp); null: 5 failures in 10 calls
  /// or 10 in 60 s, 30 s cooldown.
  nlohmann::json breaker;
  /// retry_budget_config JSON; null: retries at most 20% of calls plus 10 per minute.
  nlohmann::json budget;
  /// Price per call (exact decimal) and currency; "0": free. Default "0" USD.
  std::string price = "0";
  std::string currency = "USD";
  /// Whether the vendor charges for failed calls too (e.g. telephony). Default false.
  bool charge_on_failure = false;
  /// to_entity of cost facts. Default "vendor_<tool>".
  std::string vendor;
  /// Whether repeating a call is safe (server errors 500/502 are retried only then). Default true.
  bool idempotent = true;
  /// Backoff waits up to this long are timers inside the turn; a longer one ends the call as a
  /// scheduled dead letter retried by an alarm (the entity is not held). Default 5 s.
  int64_t max_inline_delay_ms = 5'000;
  /// Answers in place of the tool while its breaker is open. Default none.
  tool_fn fallback;
  /// Refreshes the tool's credentials after an attempt answered 401: `done(true)` once new
  /// ones are in place, and the attempt is made again at once (once per call; not a retry of
  /// the policy, not spent from the budget; an `outcome` fact `auth_refreshed` or
  /// `auth_refresh_failed` says what happened). Default none: a 401 ends the call
  /// (authorization, not retried). http_tool_client::auth_refresher makes one for HTTP tools.
  std::function<void(std::function<void(bool)> done)> refresh_auth;
  /// Also answer with `fallback` when the retries run out: the call then has its answer, so no
  /// dead letter is made; the `max_retries_exceeded` error fact says `resolved` true and an
  /// `outcome` fact `fallback_used` follows. Default false: a dead letter.
  bool fallback_after_retries = false;
  /// This tool's replacements of the default failure classification (classifier.hpp's table):
  /// {"statuses": {"404": {"category": "transient", "retryable": true, "code"?, "reason"?}},
  /// "codes": {"QUOTA_EXCEEDED": {...}}}. A status or code listed here is classified as it
  /// says (which decides retries, the breaker and the dead letter's reason). Checked at start.
  /// Default null: the table as it is.
  nlohmann::json classify;
};

/// What one tenant may use (runtime_config::tenant_quotas). An absent member is no limit.
struct tenant_quota {
  /// Entity files the tenant may have. A call that would create one more (a write to an entity
  /// that has no file) is answered 429 TENANT_QUOTA_EXCEEDED and creates nothing; calls to its
  /// existing entities go on. 0: no entity may be created.
  std::optional<int64_t> max_entities;
  /// Bytes the tenant's entity files (each database file and its -wal) may take. At or over it,
  /// calls of the types' methods are answered 507 TENANT_STORAGE_QUOTA_EXCEEDED; reads, operator
  /// actions and alarms still run, and writes run again once the files take less (a -wal
  /// emptied or cut when its entity closes). Measured when an entity opens, closes and
  /// checkpoints, and after each commit of an entity of a tenant that has this quota.
  std::optional<int64_t> max_bytes;
};

/// Runtime configuration. Every field documents its default.
struct runtime_config {
  /// Root directory of the runtime's own files (runtime/: its lock, alarm and tenant indexes;
  /// spares/) and, unless entity_root is set, of every entity file (entities/). Required.
  std::filesystem::path data_dir;
  /// Root directory of the entity files (entities/) when they are apart from data_dir: several
  /// processes, each with a data_dir of its own, may then share one (cluster storage "shared";
  /// each entity is open in at most one process at a time, see docs/cluster.md). It must be on
  /// data_dir's file system when spare_files > 0 (spares are renamed from one to the other).
  /// Default empty: data_dir.
  std::filesystem::path entity_root;
  /// Continuous archive (point-in-time recovery): every commit of every entity is copied into
  /// this directory right after it commits and made durable with the commit's sync
  /// (store_options::archive_dir; docs/operations.md, "Point-in-time recovery"). Opt-in;
  /// default empty: no archive.
  std::filesystem::path archive_dir;
  /// With archive_dir: how long every commit stays rebuildable. Every archive_prune_interval
  /// the runtime prunes each entity's archive to what rebuilds the commits of this window
  /// (prune_archive). 0 (the default): nothing is pruned.
  std::chrono::milliseconds archive_retention{0};
  /// How often the archive is pruned. Default 1 h.
  std::chrono::milliseconds archive_prune_interval{3'600'000};
  /// Where the entity files are: entity_root, or data_dir when it is empty.
  const std::filesystem::path& entity_dir() const {
    return entity_root.empty() ? data_dir : entity_root;
  }
  /// Commit durability (full: survives power loss; normal: survives a process crash). Default
  /// full.
  durability mode = durability::full;
  /// An entity idle this long hibernates: commits, closes its file, ends its actor. Default 60 s.
  std::chrono::milliseconds idle_timeout{60'000};
  /// Cap on entities with an open file at once; 0 derives it from RLIMIT_NOFILE (each open
  /// entity holds 4 descriptors; a quarter of the limit is kept for sockets). A lower cap leaves
  /// the descriptors it does not use to connections (connection_budget): a server of many
  /// WebSocket clients over few active entities sets it. Default 0.
  size_t max_active_entities = 0;
  /// CAF scheduler worker threads; 0 means the number of cores. Default 0.
  size_t scheduler_threads = 0;
  /// Threads that run blocking SQLite work (open, commit with its fsync, close), so that no CAF
  /// worker ever waits on the disk. Commits of different entities run in parallel on them.
  /// Default 8.
  size_t storage_threads = 8;
  /// Threads that only fdatasync entities' WALs for commits made on CAF workers (deferred sync,
  /// durability full), apart from the storage threads: a sync mostly waits on the device, and
  /// the disk runs many at once, where more storage threads would slow the CPU-bound opens
  /// and closes that share them (docs/performance.md, "What the figures rest on"). Default 16.
  size_t sync_threads = 16;
  /// Idempotency key lifetime; 0 keeps keys until purged. Default 24 h.
  std::chrono::milliseconds key_ttl{std::chrono::hours(24)};
  /// Durable execution: a call with an idempotency key, an alarm and a dead letter's retry
  /// journal the steps their handler awaits, so that a retry after a crash resumes them
  /// (docs/architecture.md, "Durable execution"). False: no journal; a retry of a call
  /// interrupted at an await runs it again from the start. Default true.
  bool journal = true;
  /// Expired keys of an entity are purged by an alarm at most this often. Default 1 h.
  std::chrono::milliseconds key_purge_interval{std::chrono::hours(1)};
  /// First retry delay of a failing alarm handler; doubles per retry. Default 2 s.
  std::chrono::milliseconds alarm_retry_base{2'000};
  /// Retries of a failing alarm handler before it becomes a dead letter. Default 6.
  int alarm_max_retries = 6;
  /// How often the alarm scheduler looks for due alarms of hibernated entities at the latest.
  /// Default 1 s.
  std::chrono::milliseconds alarm_poll{1'000};
  /// SQLite page cache per open entity, KiB: an upper bound (pages are allocated as an entity's
  /// working set needs them, so idle entities use a few). Default 4096: a hot entity keeps its
  /// random-key index pages (idempotency keys, fact ids, trace ids) in memory instead of
  /// re-reading them at every call. Worst case memory: max_active_entities x cache_kib.
  int cache_kib = 4096;
  /// When an entity closes (hibernation, eviction, stop), a WAL of at most this many KiB stays
  /// as it is, without a checkpoint or a sync: the next activation reads it, a later close or
  /// checkpoint folds it into the database. A larger one is checkpointed and emptied. 0: every
  /// close checkpoints (a closed entity is then wholly in its .db file, e.g. for backups that
  /// copy .db files only). Default 256 (store_options::wal_kept_on_close_kib).
  int wal_kept_on_close_kib = 256;
  /// A WAL that a commit makes longer grows ahead by zeros to the next multiple of this many
  /// KiB, so that the commits after it overwrite blocks the file has and their fdatasyncs write
  /// no file-system metadata (store_options::wal_grow_kib). 0: a WAL grows by its frames only.
  /// 0..65536; default 256.
  int wal_grow_kib = 256;
  /// Entity files kept ready, made ahead by a thread of their own in <data_dir>/spares/: a new
  /// entity's file is then a rename of one and a small unsynced claim, instead of writing and
  /// fdatasyncing a new file on a storage thread (storage/spare_pool.hpp). 0: none, every
  /// creation makes its file. Default 32 (~80 KiB of disk and 3 inodes each). 0..1024.
  int spare_files = 32;
  /// An entity's WAL past this many frames (pages) is copied into its database by a storage
  /// thread, through a connection of its own, while the entity goes on committing; the WAL
  /// then restarts from its beginning. No commit runs a checkpoint (SQLite's automatic one is
  /// off), in either durability. Default 4000 (~16 MiB of WAL per hot entity).
  int wal_checkpoint_frames = 4000;
  /// The entity types hosted. Default: the built-in ones are added by the caller
  /// (add_builtin_types).
  entity_registry types;
  /// External tools by name: the transports (HTTP client or in-process callable). Default none.
  std::map<std::string, tool_fn> tools;
  /// Resilience policy per tool name; a tool without one gets tool_policy{}. Default none.
  std::map<std::string, tool_policy> tool_policies;
  /// The outbox: facts of configured types relayed to external sinks until they acknowledge
  /// them (factum/runtime/outbox.hpp, docs/outbox.md). Default none.
  outbox_config outbox;
  /// Dead-letter rules by failure reason (dead_letter_rules JSON); null: the defaults of
  /// resilience::dead_letter_rules (its header's table).
  nlohmann::json dead_letter_rules;
  /// Calls one entity may have queued (accepted, not yet run): one more is answered 429
  /// ENTITY_OVERLOADED with a retry delay, as Durable Objects answers an overloaded object.
  /// Default 1000.
  size_t max_queued_calls = 1000;
  /// A read of facts (@facts, GET .../facts) stops once its facts hold about this many bytes,
  /// whatever its limit, and says where the next page starts (call_reply::cursor): a page of
  /// 10,000 facts of 1 MiB would otherwise be built whole in memory. Default 4 MiB.
  int64_t max_facts_bytes = 4 * 1024 * 1024;
  /// Quotas by tenant name (tenant_quota). A tenant without an entry has none. Each tenant's
  /// entities and bytes are counted in DATA/runtime/tenants.db, quota or not. Default none.
  std::map<std::string, tenant_quota> tenant_quotas;
  /// Cluster mode: which entities this node may open and commit, under which owner epoch
  /// (factum/runtime/ownership.hpp). Each activation claims its file under the epoch, and every
  /// commit is refused NOT_OWNER (503, retryable) once the lease or the shard is gone. Default
  /// null: a node alone, no claim, no check.
  std::shared_ptr<const entity_ownership> ownership;
  /// Cluster storage "replicated": every commit of every entity goes to this log
  /// (factum/replication/commit_sink.hpp), and nothing a commit may reveal (a reply, a frame,
  /// a fact-stream event, an outbox delivery) leaves before the log holds it as well as the
  /// local disk. An activation serves only when its file holds exactly the log's last commit of
  /// the entity (503 STORAGE_UNAVAILABLE otherwise: the file must be rebuilt from the log).
  /// Default null: commits stay on the local disk.
  std::shared_ptr<replication::commit_sink> replicator;
  /// With a replicator: an entity's log is compacted (commit_sink::compact) by an image of its
  /// whole file once the changes appended since its last image reach replicated_image_ratio
  /// times the file's size and at least replicated_image_min_bytes. With the ratio at 1 the log
  /// holds about at most twice each entity's size, and images cost at most as many bytes as
  /// the changes they replace; a lower ratio keeps less log for more image bytes. Min 0: never.
  /// Defaults 1 MiB and 1.
  uint64_t replicated_image_min_bytes = uint64_t{1} << 20;
  double replicated_image_ratio = 1.0;
  /// Degradation levels and the feature matrix (factum/runtime/degradation.hpp). Enabled, the
  /// runtime hosts one more entity type, `factum.runtime`, whose entity `degradation` of each
  /// tenant holds the tenant's level changes as lifecycle facts. Default: not enabled.
  degradation_config degradation;
  /// Fault injection for storage tests: applied to every entity store. Default none.
  fault_hook storage_fault;
  /// Fault injection for tests: applied to the alarm index's writes (alarm_index::set_fault).
  /// Default none.
  fault_hook alarm_index_fault;
  /// Fault injection for tests: applied to the tenant index's writes (tenant_index::set_fault).
  /// Default none.
  fault_hook tenant_index_fault;
  /// The wall clock in ms since the epoch, for tests that move time on without waiting for it:
  /// what handlers see as now_ms(), what alarms and schedules are due against, and what the
  /// alarm scheduler and the entities' alarm timers measure delays from (timers still wait in
  /// real time, so a test clock should run with the real one plus an offset). Default: the
  /// system clock.
  std::function<int64_t()> clock;
  /// Where the runtime writes what an operator must hear of (an entity quarantined after a
  /// failed sync, alarms parked, the alarm index failing): one JSON object per line, with
  /// "ts", "level" and "event". Default: standard error. `factum serve` passes its log.
  std::function<void(std::string_view line)> log;
};

/// One tenant's usage as the runtime counts it (runtime::tenant_usage_of, /metrics).
struct tenant_usage {
  std::string tenant;
  int64_t entities = 0; ///< entity files, and creations under way
  int64_t bytes = 0;    ///< bytes of the entity files, as last measured
  tenant_quota quota;   ///< its configured quota (none: unlimited)
};

/// One entity of a tenant's listing (runtime::list_entities).
struct entity_listing {
  std::string type;
  std::string id;
  int64_t bytes = 0; ///< its files' bytes at its last close (0: created and not closed since)
  /// Its last activity (ms) as the index has it: written when it closes and after commits at
  /// most once a minute while it is active (0: none known). Set for by_activity only.
  int64_t last_activity_ms = 0;
};

/// Which page of a tenant's entities to list (runtime::list_entities).
struct entity_list_query {
  std::string type;                 ///< only this type; empty: every type
  std::string after_type, after_id; ///< the page starts after this entity; empty: at the start
  int64_t limit = 100;              ///< 1..10000
  /// Most recently active first; the page starts after (before_ms, after_type, after_id), the
  /// last entity of the previous page (before_ms < 0: at the start).
  bool by_activity = false;
  int64_t before_ms = -1;
};

namespace detail {
struct runtime_testing;
} // namespace detail

class runtime {
 public:
  /// Starts a runtime on config.data_dir.
  static result<std::unique_ptr<runtime>> start(runtime_config config);

  /// Stops (as stop()) and frees everything.
  ~runtime();

  /// Graceful stop: refuses new calls (UNAVAILABLE), drains the turns already queued, commits,
  /// closes every file. Idempotent.
  void stop();

  /// Calls `method` of the entity `key` with JSON arguments. `done` runs exactly once, on a CAF
  /// worker, after the reply's facts are committed.
  void call(const entity_key& key, std::string method, std::string args_json, call_options opts,
            std::function<void(call_reply)> done);

  /// Blocking variant for tests, tools and embedders. Never call it from a CAF worker.
  call_reply call_sync(const entity_key& key, std::string method, std::string args_json,
                       call_options opts = {});

  /// The runtime's metrics, each registered once with its name and help (/metrics writes them
  /// with the gateway's; tests and tools read values by name: metrics().value(name, labels)).
  const factum::metrics::registry& metrics() const;

  /// Who holds entities' WebSocket connections (the HTTP gateway attaches its hub when it
  /// starts and detaches it, with null, when it stops): turns list connections through it and
  /// their frames go to it. Without one, a turn's connections() is empty and its frames are
  /// dropped. Any thread.
  void attach_connections(std::shared_ptr<connection_host> host);

  /// How the process's file descriptors are shared (descriptors()).
  struct descriptor_budget {
    /// RLIMIT_NOFILE, its soft limit raised to the hard one at start (capped at 1,000,000); 0
    /// when it cannot be read.
    size_t limit = 0;
    /// Entities with an open file at once (max_active_entities, as lowered at start).
    size_t max_active_entities = 0;
    /// Descriptors one open entity uses (its database, -wal and -shm, and an archive's).
    size_t per_entity = 0;
    /// Kept for the listener, the tools' connections, the indexes and the spare files.
    size_t reserved = 0;
    /// What is left to connections (at least 32); SIZE_MAX when the limit cannot be read.
    size_t connections = SIZE_MAX;
  };

  /// The process's descriptor limit, what the open entities may take of it and what it leaves
  /// to connections (a quarter of the limit less 64 with the default max_active_entities).
  descriptor_budget descriptors() const;

  /// descriptors().connections: the HTTP server lowers max_connections to it.
  size_t connection_budget() const;

  /// What `tenant` uses now (its entities and bytes) and its quota; zeros for a tenant that has
  /// no entity.
  tenant_usage tenant_usage_of(const std::string& tenant) const;

  // -- degradation (factum/runtime/degradation.hpp) --

  /// `tenant`'s level now, why, and what it turns off (level 0 when not enabled).
  degradation_status degradation_of(const std::string& tenant) const;
  /// The level of every tenant degradation_config::tenants lists or a rule has named.
  std::vector<degradation_status> degradation() const;
  /// Sets an operator's floor for `tenant` (nullopt: removes it), with why and who: recorded
  /// as a lifecycle fact `degradation_override` in the tenant's runtime entity
  /// (factum.runtime/degradation), read back at the next start for the tenants
  /// degradation_config::tenants lists. `done` gets that fact's outcome (a CAF worker, or the
  /// calling thread when refused: 409 DEGRADATION_NOT_ENABLED, 400 INVALID_ARGUMENT for a level
  /// outside 0..4). The floor applies at once, before the fact is written.
  void set_degradation(const std::string& tenant, std::optional<int> level, std::string reason,
                       std::string actor, std::function<void(call_reply)> done);

  /// A page of `tenant`'s entities in (type, id) order, as `q` says (a limit outside 1..10000:
  /// INVALID_ARGUMENT), handed to `done` on a storage thread. From the tenant index
  /// (DATA/runtime/tenants.db), so no entity file is opened; the read may wait for the index's
  /// current write, which is why it does not run on the caller's thread. Any thread.
  void list_entities(const std::string& tenant, entity_list_query q,
                     std::function<void(result<std::vector<entity_listing>>)> done) const;

  /// Runs `read` on a storage thread between the tenant index's writes, with the index (null
  /// once it is closed: the runtime is stopping), then `then` on the same thread once the index
  /// is free again. `read` only reads (the fleet views: dead letters and breakers across a
  /// tenant's entities, tenant_index.hpp) and copies what it needs; `then` does the rest (it may
  /// call the runtime). Any thread.
  void read_tenant_index(std::function<void(tenant_index*)> read, std::function<void()> then) const;

  // -- cluster mode: shard moves --
  //
  // A shard's files move from its old home to its new one (docs/cluster.md, "Where shards live
  // over time"): the old home releases the shard's activations (release_entities), lists its
  // entities (entities_where), claims and exports each file (export_entity); the new home adopts
  // each (adopt_entity); the old home then forgets its copies (forget_entity). The caller keeps
  // new activations of the entities from starting meanwhile (cluster: the node's ownership
  // refuses them); these members refuse an entity that has a live activation (BUSY), but do not
  // stop one from starting while they run. A key whose parts are not valid (entity_key::make)
  // is refused INVALID_ARGUMENT and no path is derived from it. Once stop() has begun, the
  // members other than release_entities answer UNAVAILABLE (stop() closes every activation).

  /// The options this runtime opens entity files with (their data_dir is the entity root):
  /// what a replica of its files is written with (factum/replication/log_applier.hpp).
  const store_options& entity_store_options() const;

  /// Asks every live activation whose key `which` selects to hibernate (commit what it has, close
  /// its file; atoms::hibernate as eviction does) and waits until none of them is left or `wait`
  /// passed. Answers how many were still live at the deadline (0: all closed). The caller keeps
  /// new activations of those entities from starting meanwhile (cluster: the node's ownership
  /// refuses them); one that starts anyway while this waits is asked too. An activation closes
  /// once its queued calls have run: one that keeps getting calls may outlast `wait`. `which`
  /// runs on the calling thread, without a lock of the runtime held. Blocking: any thread but a
  /// CAF worker.
  size_t release_entities(const std::function<bool(const entity_key&)>& which,
                          std::chrono::milliseconds wait);

  /// Every entity the tenant index (DATA/runtime/tenants.db) lists, of every tenant, whose key
  /// `which` selects, in (tenant, type, id) order; `which` runs on the storage thread. The index
  /// may list an entity whose creation is under way or failed (it never misses a file).
  /// Blocking (runs on a storage thread and waits): not from a CAF worker.
  result<std::vector<entity_key>>
  entities_where(const std::function<bool(const entity_key&)>& which);

  /// Claims `key`'s file under `epoch` (> 0) for `node` (1 to 255 bytes) as
  /// entity_store::claim_owner does (at the open, store_options::owner_epoch): from then on every
  /// write of an activation holding an older claim is refused not_owner (the fence), and a file
  /// already claimed under a newer epoch, or under `epoch` by another node, answers NOT_OWNER.
  /// Then answers a self-contained copy of its committed state: one database file's bytes with
  /// its WAL folded in (entity_store::copy_files to a temporary file of its own under
  /// DATA/runtime/, then a checkpoint of the copy by a close that leaves its -wal empty, read
  /// back, temporary files removed; keys left pending in the copy by an activation that is gone
  /// are released there, as any open releases them). The copy opens as `key`'s file with the
  /// claim as its newest owner (adopt_entity checks both). The claim's bytes are measured into
  /// the tenant's account and the index row, as a close measures an entity. NOT_FOUND when the
  /// entity has no file; BUSY when it has a live activation (release it first). Blocking (runs
  /// on a storage thread and waits): not from a CAF worker.
  result<std::string> export_entity(const entity_key& key, int64_t epoch, std::string_view node);

  /// Takes `file_bytes` (another node's export_entity of `key`) as `key`'s file here, on a storage
  /// thread, then calls `done` there with the outcome:
  /// 1. writes them to a temporary file of its own under DATA/runtime/ and syncs it;
  /// 2. checks that it opens as an entity file (read-only; else CORRUPTION), that the key in it is
  ///    `key` (else CORRUPTION) and that its newest owner claim has epoch `epoch` (else
  ///    INVALID_ARGUMENT); a refusal changes nothing;
  /// 3. adds `key` to the tenant index (durably, as a creation does; quotas are not applied: a
  ///    move must not be refused by a quota, but the tenant's account counts the entity and its
  ///    bytes from step 4 on); a failed index write changes nothing;
  /// 4. removes the -wal, -shm and -unsynced marker a previous file of `key` left (a -wal would
  ///    be replayed into the new file), renames the file over `key`'s path (creating its
  ///    directory, synced into its parent) and syncs the directory; a failure here undoes step 3
  ///    (not the removals: the previous file was being replaced);
  /// 5. sets the alarm index's entry for `key` from the file's next due alarm (none: removed).
  /// A crash before `done` may leave a temporary file, or a file at the path that no alarm entry
  /// names yet: a move that was not answered ok is repeated. BUSY when `key` has a live
  /// activation. Any thread; an invalid key or epoch (<= 0), refused before any work, is
  /// answered on the calling thread.
  void adopt_entity(const entity_key& key, std::string file_bytes, int64_t epoch,
                    std::function<void(status)> done);

  /// Removes `key`'s files (its -wal, -shm and -unsynced marker, then the database, then a sync
  /// of the directory), its tenant-index row (and its share of the tenant's account) and its
  /// alarm-index entry: the entity moved to another node. ok when it has no file (a row or an
  /// entry left by an earlier forget that failed half-way still goes); BUSY when it has a live
  /// activation. Blocking (runs on a storage thread and waits): not from a CAF worker.
  status forget_entity(const entity_key& key);

  // -- point-in-time recovery and forks (runtime_config::archive_dir) --
  //
  // Blocking (they run on a storage thread and wait): not from a CAF worker. Single node only:
  // in cluster mode they answer UNAVAILABLE (docs/operations.md, "Point-in-time recovery").

  /// The archived commit of `key` that `q` names (find_bookmark): the last one at or before a
  /// time, or whose last seq is at most a seq. INVALID_ARGUMENT without an archive; NOT_FOUND
  /// when the archive has none that early (or no archive of `key`).
  result<archive_point> bookmark(const entity_key& key, const bookmark_query& q);

  /// What prune_archives() did.
  struct prune_report {
    int64_t archives = 0, epochs_removed = 0, generations_folded = 0, bytes_freed = 0, failures = 0;
  };
  /// Prunes every entity's archive now to what rebuilds the commits shipped at or after
  /// `keep_after_ms` (the retention's thread does it every archive_prune_interval with now less
  /// archive_retention). INVALID_ARGUMENT without an archive. Blocking; any thread but a CAF
  /// worker.
  result<prune_report> prune_archives(int64_t keep_after_ms);

  /// What rollback_entity() did.
  struct rollback_report {
    archive_point to;      ///< the bookmark's commit
    int64_t from_seq = 0;  ///< the entity's last seq before the rollback
    std::string from_hash; ///< and its chain head
    int64_t fact_seq = 0;  ///< the seq of the rollback's own lifecycle fact
  };
  /// Rolls `key` back to the archived commit `to`, while the server runs: holds the entity (its
  /// calls answer 503 ENTITY_RESTORING meanwhile), releases its activation (BUSY when it is
  /// still live after `wait`), rebuilds its file at `to` from the archive in a temporary file,
  /// appends a `lifecycle`/`rolled_back` fact to it (the bookmark, the seq and head it replaces,
  /// `note`; the chain continues from the bookmark's head), folds the current file's WAL into
  /// it, then renames the rebuilt file over it (a crash leaves one or the other whole) and
  /// re-indexes its alarms. Every table rolls back: keys, alarms, breakers, dead letters. The
  /// facts past the bookmark stay in the archive.
  result<rollback_report>
  rollback_entity(const entity_key& key, const archive_point& to, std::string note,
                  std::chrono::milliseconds wait = std::chrono::seconds(10));

  /// What fork_entity() did.
  struct fork_report {
    int64_t source_seq = 0;  ///< the source's last seq at the point forked
    std::string source_hash; ///< and its chain head
    std::optional<archive_point> at;
    int64_t fact_seq = 0; ///< the target's provenance fact (1)
  };
  /// Makes a new entity `to` that starts from `from`'s state at the archived commit `at` (or
  /// now, taken while `from` keeps running): entity_store::fork_file, whose first fact is a
  /// `lifecycle`/`forked` fact naming the source (key, seq, chain head, bookmark) and `note`.
  /// `to` may be of another tenant; its type must be one of this runtime's. CONFLICT when `to`
  /// has a file; NOT_FOUND when `from` has none. The target is indexed as a created entity
  /// (its tenant's quota applies) and its alarms indexed.
  result<fork_report> fork_entity(const entity_key& from, const entity_key& to,
                                  std::optional<archive_point> at, std::string note);

  // -- cluster mode: shards on shared storage --
  //
  // Nodes whose entity_root is one directory take over each other's shards without a copy
  // (docs/cluster.md, "Shared storage"): the node that acquires a shard indexes its files
  // (index_entities); one that no longer holds a shard drops its rows (unindex_entities). Each
  // entity file is open in at most one process at a time (the VFS's lock on its -shm): another
  // process's open of it answers BUSY (503, retryable) until the first closes it. Both answer
  // UNAVAILABLE once stop() has begun. Blocking (they run on a storage thread and wait): not
  // from a CAF worker.

  /// What index_entities() found.
  struct index_report {
    size_t indexed = 0; ///< files whose tenant row and alarm entry are now here
    /// Digests of the files another process has open: not read (ask again once it let go).
    std::vector<std::string> busy;
    size_t unreadable = 0; ///< files that do not open as the entity their name says (logged)
  };

  /// Makes this node's indexes hold each entity file under entity_dir() whose name's digest
  /// (entity_key::digest(); cluster::shard_of_digest gives its shard) `which` selects: a tenant
  /// row where there is none (counted in the tenant's account, quotas not applied), and an
  /// alarm entry moved to the file's next due alarm when that is earlier than the entry (the
  /// index may say earlier than an entity, never later), whose parking, if any, ends.
  result<index_report> index_entities(const std::function<bool(std::string_view digest)>& which);

  /// Removes this node's tenant row (and its share of the tenant's account) and alarm entry of
  /// each entity the tenant index lists whose key `which` selects and that has no live
  /// activation here, its files left as they are (a shard that another node serves from the
  /// shared directory now). How many went.
  result<size_t> unindex_entities(const std::function<bool(const entity_key&)>& which);

  /// What start() found and repaired, one sentence each (for the operator's log): for instance a
  /// damaged alarm index set aside and rebuilt from the entity files. Empty normally.
  const std::vector<std::string>& start_notes() const;

  const runtime_config& config() const;

  /// Whether stop() has begun.
  bool stopping() const;

  struct impl;

 private:
  friend struct detail::runtime_testing; // tests reach the private core (runtime/src/)
  explicit runtime(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// A new trace id: 32 lowercase hex characters (W3C trace-id), time-ordered: Unix milliseconds
/// in the first 12 digits, 80 random bits after them (so an entity's trace index grows at its end).
std::string new_trace_id();

/// SHA-256 (hex) of method and args: the default idempotency fingerprint.
std::string call_fingerprint(std::string_view method, std::string_view args_json);

} // namespace factum
