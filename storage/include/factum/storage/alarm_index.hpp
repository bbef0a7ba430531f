// factum/storage/alarm_index.hpp: the runtime-wide index of when each entity's next alarm is
// due (DATA/runtime/alarms.db), so that alarms of hibernated entities fire, and fire after a
// restart, without opening every entity file. Not thread-safe: one owner (the runtime's alarm
// scheduler) at a time.
//
// The entity file is the truth. The index may say an entity is due earlier than it is (the
// entity then reports its real next due time); it must never say later. So the runtime writes an
// earlier due time into the index before the entity commits its alarm, and removes or delays an
// entry only after the entity has committed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/status.hpp"

struct sqlite3;

namespace factum {

struct alarm_index_entry {
  entity_key key;
  int64_t due_ms = 0;
};

class alarm_index {
public:
  /// Opens (creating) DATA/runtime/alarms.db.
  static result<std::unique_ptr<alarm_index>> open(const std::filesystem::path& data_dir,
                                                   durability mode);
  ~alarm_index();
  alarm_index(const alarm_index&) = delete;
  alarm_index& operator=(const alarm_index&) = delete;

  /// Sets the due time of each entity (one transaction, committed on return). A due time of
  /// -1 removes the entity's entry.
  status apply(const std::vector<alarm_index_entry>& changes);
  /// Entries due at or before `until_ms`, earliest first.
  result<std::vector<alarm_index_entry>> due(int64_t until_ms, int64_t limit);
  /// The earliest due time, if any.
  result<std::optional<int64_t>> next_due();
  /// The due time the index holds for `key`, if any.
  result<std::optional<int64_t>> due_of(const entity_key& key);
  /// Every entry (tests, inspection).
  result<std::vector<alarm_index_entry>> all();

private:
  alarm_index() = default;
  sqlite3* db_ = nullptr;
};

} // namespace factum
