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
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/status.hpp"

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
  };
  kind what = kind::add;
  entity_key key;
  int64_t bytes = 0;
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
  int64_t entries = 0; ///< rows looked at
  int64_t removed = 0; ///< rows whose entity has no file (a creation a crash cut short)
  int64_t resized = 0; ///< rows whose bytes were not those of the files
};

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
  /// A flag of the index: "complete" (set by rebuild(): every entity file is in the index) or
  /// "clean" (the runtime closed the index after every entity). False when never set.
  result<bool> flag(const char* name);
  /// Sets a flag, durably.
  status set_flag(const char* name, bool value);
  /// Fault injection for tests: called with (0, "apply") or (0, "flag") before each write; a
  /// non-zero SQLite code fails the write (SQLITE_FULL as a full disk). Default none.
  void set_fault(fault_hook fault);
  /// Empties the index and fills it from every entity file under `data_dir` (opened read-only,
  /// one at a time), then sets "complete". No entity may be active.
  result<tenant_index_rebuild_report> rebuild(const std::filesystem::path& data_dir);
  /// Measures the files of every row (stat only): a row whose entity has no file goes, a row
  /// whose bytes differ is corrected. After an unclean stop; no entity may be active.
  result<tenant_index_rescan_report> rescan(const std::filesystem::path& data_dir);

 private:
  tenant_index() = default;
  status injected(const char* what);
  status exec(const char* sql, const char* what);
  /// PRAGMA synchronous FULL or NORMAL, run only when it changes.
  status synchronous(bool full);
  sqlite3* db_ = nullptr;
  std::unique_ptr<detail::statement_cache> stmts_;
  durability mode_ = durability::full;
  std::optional<bool> synchronous_full_; ///< unknown until first set
  fault_hook fault_;
};

} // namespace factum
