// factum/storage/tenant_index.hpp: the runtime-wide index of the entity files each tenant has
// and the bytes they take (DATA/runtime/tenants.db), so that per-tenant quotas hold across
// restarts without opening every entity file (an entity file's path does not show its tenant:
// its meta rows do). Not thread-safe: one owner at a time (the runtime's group commit).
//
// The entity files are the truth and the index is derived data, like the alarm index. It may
// count an entity that has no file, never miss one that has: the runtime adds an entity's row,
// durably, before it creates the entity's file, and removes the row only when the creation did
// not happen. Bytes are written when an entity closes. A damaged index is set aside and rebuilt
// from the entity files (rebuild()); one that was never completed (a new or deleted index over
// existing entity files) is rebuilt too (flag "complete"); one that was not closed cleanly (flag
// "clean") has its rows checked against the files (rescan()).
//
// For the fleet views it also keeps, per entity, its last activity and a summary of its dead
// letters (by status and reason) and breakers (by tool), written by the runtime after each
// commit that changed them (kind::summary); derived data like the rest, read again from the
// files by rebuild() and by rescan() after an unclean stop (flag "summaries": every row has one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

struct sqlite3;

namespace factum {

namespace detail {
class statement_cache;
}

/// One change of the index.
struct tenant_index_change {
  enum class kind {
    add,       ///< the entity has a file, or is about to (a row with `bytes`; kept if present)
    set_bytes, ///< the entity's files take `bytes` now (no row: nothing)
    remove,    ///< the entity has no file (a creation that did not happen)
    summary,   ///< the entity's fleet summary is `summary` now (no row: nothing)
    activity,  ///< the entity was active at `bytes` ms (kept when later than the row's)
  };
  kind what = kind::add;
  entity_key key;
  int64_t bytes = 0;
  entity_fleet_summary summary{}; ///< kind::summary
};

/// A tenant's entity in the order of last activity (tenant_index::list_by_activity).
struct entity_activity {
  entity_key key;
  int64_t bytes = 0;
  int64_t last_activity_ms = 0;
};

/// Which dead letters of a tenant (tenant_index::dead_letter_entities, count_dead_letters): of
/// one status and one reason, each unless empty.
struct dead_letter_filter {
  std::string status, reason;
};

/// A tenant's dead letters as the index counts them (tenant_index::dead_letter_totals_by_tenant).
struct dead_letter_totals {
  std::map<std::string, int64_t> by_status; ///< to_string(dl_status) -> dead letters
  int64_t oldest_pending_ms = 0;            ///< 0: none pending
};

/// One tool's breakers across a tenant's entities (tenant_index::breaker_states).
struct tool_breaker_states {
  std::string tool;
  std::map<std::string, int64_t> entities_by_state; ///< breaker state -> entities
};

/// An entity whose breaker of `tool` is not closed (tenant_index::open_breakers).
struct entity_breaker {
  std::string tool, state, type, id;
  int64_t updated_at_ms = 0;
};

/// One tenant's entities and their bytes, as the index says.
struct tenant_totals {
  int64_t entities = 0;
  int64_t bytes = 0;
};

/// What rebuild() found in the entity files.
struct tenant_index_rebuild_report {
  int64_t entity_files = 0; ///< entity files looked at
  int64_t entities = 0;     ///< entities now in the index
  int64_t unreadable = 0;   ///< files whose tenant could not be read (corrupt, foreign): skipped
};

/// What rescan() changed.
struct tenant_index_rescan_report {
  int64_t entries = 0;    ///< rows looked at
  int64_t removed = 0;    ///< rows whose entity has no file (a creation a crash cut short)
  int64_t resized = 0;    ///< rows whose bytes were not those of the files
  int64_t summarized = 0; ///< rows whose fleet summary was read again from the file
  int64_t unreadable = 0; ///< files whose summary could not be read (left as they were)
};

/// The fleet summary of the entity file `file` (opened read-only, then closed). NOT_FOUND for
/// an unclaimed file. Any thread.
result<entity_fleet_summary> read_fleet_summary(const std::filesystem::path& file,
                                                const std::filesystem::path& data_dir);

/// Bytes of an entity's files on disk now: the database file and its -wal (two stat calls; an
/// absent file counts 0). Any thread.
int64_t entity_disk_bytes(const std::filesystem::path& db_file);

class tenant_index {
 public:
  /// Opens (creating) DATA/runtime/tenants.db. A file that is not a database or is corrupt
  /// answers errc::corruption (see set_aside()).
  static result<std::unique_ptr<tenant_index>> open(const std::filesystem::path& data_dir,
                                                    durability mode);
  /// Renames DATA/runtime/tenants.db and its -wal and -shm to `tenants.db.corrupt-<ms>*` (kept
  /// for a post-mortem) so that open() starts a fresh index. Answers the new name.
  static result<std::filesystem::path> set_aside(const std::filesystem::path& data_dir);
  ~tenant_index();
  tenant_index(const tenant_index&) = delete;
  tenant_index& operator=(const tenant_index&) = delete;

  /// Applies `changes` in one transaction, committed on return. `durable`: with a sync in
  /// durability full (an added entity must be on disk before its file is made); otherwise
  /// synchronous NORMAL: the commit survives a crash of the process, not a power cut (bytes,
  /// which a rescan corrects).
  status apply(const std::vector<tenant_index_change>& changes, bool durable);
  /// Whether the index has a row for `key`.
  result<bool> contains(const entity_key& key);
  /// Entities and bytes of every tenant that has a row.
  result<std::map<std::string, tenant_totals>> totals();
  /// `tenant`'s entities (of `type` only, unless empty) after (after_type, after_id) in
  /// (type, id) order, at most `limit`, with their bytes: a page of the tenant's listing.
  result<std::vector<std::pair<entity_key, int64_t>>>
  list(std::string_view tenant, std::string_view type, std::string_view after_type,
       std::string_view after_id, int64_t limit);
  /// `tenant`'s entities (of `type` only, unless empty), most recently active first, after the
  /// cursor (before_ms, after_type, after_id) (before_ms < 0: from the start), at most `limit`.
  result<std::vector<entity_activity>> list_by_activity(std::string_view tenant,
                                                        std::string_view type, int64_t before_ms,
                                                        std::string_view after_type,
                                                        std::string_view after_id, int64_t limit);
  /// `tenant`'s entities (of `type` only, unless empty) that have dead letters `filter` takes,
  /// in (type, id) order from (from_type, from_id) included, at most `limit`, each with how
  /// many it has.
  result<std::vector<std::pair<entity_key, int64_t>>>
  dead_letter_entities(std::string_view tenant, const dead_letter_filter& filter,
                       std::string_view type, std::string_view from_type, std::string_view from_id,
                       int64_t limit);
  /// How many of `tenant`'s dead letters `filter` takes.
  result<int64_t> count_dead_letters(std::string_view tenant, const dead_letter_filter& filter);
  /// Every tenant's dead letters by status and its oldest pending one.
  result<std::map<std::string, dead_letter_totals>> dead_letter_totals_by_tenant();
  /// `tenant`'s breakers per tool (of `tool` only, unless empty): entities in each state.
  result<std::vector<tool_breaker_states>> breaker_states(std::string_view tenant,
                                                          std::string_view tool);
  /// `tenant`'s breakers that are not CLOSED (of `tool` and in `state`, each unless empty) in
  /// (tool, type, id) order after the cursor (after_tool, after_type, after_id), at most `limit`.
  result<std::vector<entity_breaker>> open_breakers(std::string_view tenant, std::string_view tool,
                                                    std::string_view state,
                                                    std::string_view after_tool,
                                                    std::string_view after_type,
                                                    std::string_view after_id, int64_t limit);
  /// A flag of the index: "complete" (set by rebuild(): every entity file is in the index) or
  /// "clean" (the runtime closed the index after every entity). False when never set.
  result<bool> flag(const char* name);
  /// Sets a flag, durably.
  status set_flag(const char* name, bool value);
  /// A number kept beside the flags ("opened_at": when the runtime last opened the index, ms);
  /// 0 when never set.
  result<int64_t> number(const char* name);
  /// Sets a number, durably.
  status set_number(const char* name, int64_t value);
  /// Fault injection for tests: called with (0, "apply") or (0, "flag") before each write; a
  /// non-zero SQLite code fails the write (SQLITE_FULL as a full disk). Default none.
  void set_fault(fault_hook fault);
  /// Empties the index and fills it from every entity file under `data_dir` (opened read-only,
  /// one at a time), then sets "complete". No entity may be active.
  result<tenant_index_rebuild_report> rebuild(const std::filesystem::path& data_dir);
  /// Measures the files of every row (stat only): a row whose entity has no file goes, a row
  /// whose bytes differ is corrected; each file written at or after `summaries_since` (ms, the
  /// later mtime of its database and -wal; 0: every file, nullopt: none) is also opened
  /// read-only and its fleet summary read again (a summary written after the entity's commit
  /// may have been lost with the process). After an unclean stop; no entity may be active.
  result<tenant_index_rescan_report> rescan(const std::filesystem::path& data_dir,
                                            std::optional<int64_t> summaries_since = 0);

 private:
  tenant_index() = default;
  status injected(const char* what);
  status exec(const char* sql, const char* what);
  /// Adds the fleet columns and tables to an index made before them (clears "summaries").
  status migrate();
  /// Writes `c` (kind::summary or kind::activity) inside apply()'s transaction.
  bool apply_fleet(const tenant_index_change& c, const std::string& digest);
  /// PRAGMA synchronous FULL or NORMAL, run only when it changes.
  status synchronous(bool full);
  sqlite3* db_ = nullptr;
  std::unique_ptr<detail::statement_cache> stmts_;
  durability mode_ = durability::full;
  std::optional<bool> synchronous_full_; ///< unknown until first set
  fault_hook fault_;
};

} // namespace factum
