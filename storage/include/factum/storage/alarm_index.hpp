// factum/storage/alarm_index.hpp: the runtime-wide index of when each entity's next alarm is
// due (DATA/runtime/alarms.db), so that alarms of hibernated entities fire, and fire after a
// restart, without opening every entity file. Not thread-safe: one owner (the runtime's alarm
// scheduler) at a time.
//
// The entity file is the truth. The index may say an entity is due earlier than it is (the
// entity then reports its real next due time); it must never say later. So the runtime writes an
// earlier due time into the index before the entity commits its alarm, and removes or delays an
// entry only after the entity has committed. Because the index is derived data, a damaged index
// is not fatal: set_aside() moves it out of the way and rebuild() refills a fresh one from the
// alarms tables of the entity files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

struct sqlite3;

namespace factum {

namespace detail {
class statement_cache;
}

struct alarm_index_entry {
  entity_key key;
  int64_t due_ms = 0;
  /// Times the runtime could not wake the entity for this due time (park()); read by due().
  int64_t park_attempts = 0;
};

/// An entry whose entity could not be woken (park()).
struct alarm_index_parked {
  alarm_index_entry entry;
  int64_t parked_until_ms = 0; ///< due() leaves it out until then
  std::string reason;          ///< why the last wake failed
};

/// What rebuild() found in the entity files.
struct alarm_index_rebuild_report {
  int64_t entity_files = 0; ///< entity files looked at
  int64_t entries = 0;      ///< entities with a pending alarm, now in the index
  int64_t unreadable = 0;   ///< files that could not be read (corrupt, unreadable): skipped
};

class alarm_index {
 public:
  /// Opens (creating) DATA/runtime/alarms.db. A file that is not a database or is corrupt
  /// answers errc::corruption (see set_aside()).
  static result<std::unique_ptr<alarm_index>> open(const std::filesystem::path& data_dir,
                                                   durability mode);
  /// Renames DATA/runtime/alarms.db and its -wal and -shm to `alarms.db.corrupt-<ms>*` (kept for
  /// a post-mortem) so that open() starts a fresh index. Answers the new name of the database.
  static result<std::filesystem::path> set_aside(const std::filesystem::path& data_dir);
  ~alarm_index();
  alarm_index(const alarm_index&) = delete;
  alarm_index& operator=(const alarm_index&) = delete;

  /// Sets the due time of each entity (one transaction, committed on return). A due time of
  /// -1 removes the entity's entry.
  status apply(const std::vector<alarm_index_entry>& changes);
  /// Entries due at or before `until_ms` and not parked past it, earliest first.
  result<std::vector<alarm_index_entry>> due(int64_t until_ms, int64_t limit);
  /// The earliest time an entry is due (a parked one: when its parking ends), if any.
  result<std::optional<int64_t>> next_due();
  /// Entities that could not be woken for their alarm due at `entry.due_ms` (their type is not
  /// hosted, their file cannot be opened), in one transaction: due() leaves each entry out
  /// until `until_ms`, so that the alarms of other entities keep firing. Counts the attempt and
  /// keeps the reason. No change to an entry whose due time is no longer `entry.due_ms`;
  /// apply() of an entity's next due time ends its parking.
  status park(const std::vector<alarm_index_parked>& parks);
  /// Every parked entry (inspection, tests).
  result<std::vector<alarm_index_parked>> parked();
  /// Fault injection for tests: called with (0, "apply") or (0, "park") before each write; a
  /// non-zero SQLite code fails the write (SQLITE_FULL as a full disk). Default none.
  void set_fault(fault_hook fault);
  /// The due time the index holds for `key`, if any.
  result<std::optional<int64_t>> due_of(const entity_key& key);
  /// Every entry (tests, inspection).
  result<std::vector<alarm_index_entry>> all();
  /// Sets the entry of every entity file under `data_dir` that has an alarm to its earliest due
  /// time (entity files opened read-only, one at a time; files that cannot be read are counted
  /// and skipped). For an index that set_aside() has just replaced; no entity may be active.
  result<alarm_index_rebuild_report> rebuild(const std::filesystem::path& data_dir);

 private:
  alarm_index() = default;
  status injected(const char* what);
  sqlite3* db_ = nullptr;
  std::unique_ptr<detail::statement_cache> stmts_; ///< apply()'s and due_of()'s
  fault_hook fault_;
};

} // namespace factum
