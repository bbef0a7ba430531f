// entity_reader.hpp (private to factum_inspect): opens one entity file for reading without
// changing anything on disk. Used by the one thread that runs a subcommand.
//
// SQLite's mode=ro still creates the -wal and -shm files of a WAL database when they are absent
// (and cannot remove them on close), so reading a closed entity file in place would leave two
// new files beside it, and would rebuild an existing -shm. The reader therefore opens the file
// in place only when a -wal and a non-empty -shm exist (a server has it open, or crashed with it
// open; a closed entity keeps both emptied, see docs/storage-format.md); otherwise it copies
// the database (and its -wal) into a private temporary directory and opens the copy.
// The copy is taken only when the file did not change while it was copied (size, mtime, inode,
// and still no live -wal/-shm), else it is retried, then the file is opened in place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/status.hpp"

namespace factum::tools {

/// What stat() says about an entity file and its companions, to notice a change.
struct file_state {
  bool db = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool wal = false;
  uint64_t wal_size = 0;
  int64_t wal_mtime_ns = 0;
  bool shm = false; ///< a -shm file with content (one emptied at a last close counts as none)
  friend bool operator==(const file_state&, const file_state&) = default;
};

/// Stats `db`, `db`-wal and `db`-shm.
file_state stat_entity_file(const std::filesystem::path& db);

/// A read-only view of one entity file (in place or through a private copy).
class entity_reader {
 public:
  /// Opens the file at `file` (the key is read from the file).
  static result<std::unique_ptr<entity_reader>> open(const std::filesystem::path& file);
  /// Opens the entity `key` under `data_dir`; NOT_FOUND when it has no file, CORRUPTION when
  /// the file at its path names another entity.
  static result<std::unique_ptr<entity_reader>> open(const std::filesystem::path& data_dir,
                                                     const entity_key& key);
  ~entity_reader();
  entity_reader(const entity_reader&) = delete;
  entity_reader& operator=(const entity_reader&) = delete;

  entity_store& store() { return *store_; }
  const entity_key& key() const { return store_->key(); }
  /// The real entity file (not the copy).
  const std::filesystem::path& path() const noexcept { return file_; }
  /// True when reading a private copy.
  bool snapshot() const noexcept { return !snap_dir_.empty() && !in_place_; }
  /// Bytes of the database file plus its -wal.
  uint64_t file_bytes() const;

  /// Follow: makes new commits visible. In place, SQLite already sees them; a copy is
  /// replaced by the file itself once a server has it open, or by a fresh copy when it changed.
  status refresh();

 private:
  explicit entity_reader(std::filesystem::path file) : file_(std::move(file)) {}
  status open_now();
  status open_in_place();
  status open_copy(const file_state& before);

  std::filesystem::path file_;
  std::filesystem::path snap_dir_;
  std::unique_ptr<entity_store> store_;
  file_state state_;
  bool in_place_ = false;
};

} // namespace factum::tools
