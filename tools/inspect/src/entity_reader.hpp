// entity_reader.hpp (private to factum_inspect): opens one entity file for reading without
// changing anything on disk. Used by the one thread that runs a subcommand.
//
// Every file is read through a private copy: entity_store::copy_files copies the database and
// its -wal into a temporary directory as one committed state, also while a server writes the
// file (docs/storage-format.md section 2), and the copy is opened read-only; a refresh brings
// the copy's -wal up to date (entity_store::refresh_copy). Nothing beside the real file is
// created or changed (SQLite's mode=ro would create a missing -wal and -shm, and a server's
// process keeps its wal-index to itself).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/wal_archive.hpp"

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
  friend bool operator==(const file_state&, const file_state&) = default;
};

/// Stats `db` and `db`-wal.
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
  /// Opens `key`'s file as it was at the archived commit `at` of the continuous archive under
  /// `archive_dir` (materialize_archive_point into the reader's own temporary directory: the
  /// archive is only read). NOT_FOUND when the archive holds no such commit; the file is checked
  /// to be `key`'s. refresh() does nothing on such a reader (a past commit does not change).
  static result<std::unique_ptr<entity_reader>>
  open_archived(const std::filesystem::path& archive_dir, const entity_key& key,
                const archive_point& at);
  ~entity_reader();
  entity_reader(const entity_reader&) = delete;
  entity_reader& operator=(const entity_reader&) = delete;

  entity_store& store() { return *store_; }
  const entity_key& key() const { return store_->key(); }
  /// The real entity file (not the copy); for open_archived, the entity's archive directory.
  const std::filesystem::path& path() const noexcept { return file_; }
  /// True when reading a private copy (always, once open).
  bool snapshot() const noexcept { return !snap_dir_.empty() && store_ != nullptr; }
  /// The archived commit read (open_archived), or none (the live file).
  const std::optional<archive_point>& archived() const noexcept { return archived_; }
  /// Bytes of the database file plus its -wal.
  uint64_t file_bytes() const;

  /// Follow: makes new commits visible when the file changed since the last copy (its stat,
  /// its WAL header, or a frame of the current generation past the copy's last): the copy's
  /// WAL gets the commits made since, and the whole file is copied again only after its WAL
  /// restarted (entity_store::refresh_copy).
  status refresh();
  /// Whole copies of the file made so far (the first one included).
  uint64_t whole_copies() const noexcept { return whole_copies_; }

 private:
  explicit entity_reader(std::filesystem::path file) : file_(std::move(file)) {}
  status open_now(bool refresh = false);
  bool changed() const;

  std::filesystem::path file_;
  std::filesystem::path snap_dir_;
  std::unique_ptr<entity_store> store_;
  file_state state_;        ///< the file's stat before the copy was taken
  std::string wal_header_;  ///< the copy's WAL header (empty without one)
  int64_t next_frame_ = -1; ///< where the copy's current WAL generation ended, or -1
  uint64_t whole_copies_ = 0;
  std::optional<archive_point> archived_;
};

} // namespace factum::tools
