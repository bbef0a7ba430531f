// manifest.hpp (private to factum_backup): a backup directory's layout and its manifest
// (docs/storage-format.md, "Backups"): the manifest's fields, reading it, writing it atomically,
// and the file steps backup and restore share (checksums, syncs, the refusal messages). Used by
// the one thread that runs a subcommand.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum::tools::backup {

/// The manifest's name in a backup directory.
inline constexpr const char* manifest_name = "manifest.json";
/// The `format` field of every manifest: what makes a directory a factum backup.
inline constexpr const char* manifest_format = "factum-backup";
/// The manifest version this build writes and reads.
inline constexpr int manifest_version = 1;

/// Size and SHA-256 of one copied file.
struct file_sum {
  uint64_t bytes = 0;
  std::string sha256; ///< 64 lowercase hex digits
  friend bool operator==(const file_sum&, const file_sum&) = default;
};

/// One entity in a backup.
struct manifest_entity {
  entity_key key;
  std::string file;             ///< entities/<d0d1>/<digest>.db, relative to the generation
  int64_t last_seq = 0;         ///< read from the copy
  std::string head;             ///< the copy's chain head (hash of last_seq; genesis for none)
  file_sum db;                  ///< the copied database file
  std::optional<file_sum> wal;  ///< its copied -wal, when there is one
  int64_t wal_end = 0;          ///< where the copy's -wal's last whole commit ends (wal_commit_end)
  uint64_t source_db_bytes = 0; ///< the source .db's size before it was copied
  int64_t source_db_mtime_ns = 0; ///< and its mtime: an entity without WAL is unchanged if equal
};

/// A backup's manifest (written last: a directory without one holds no backup).
struct manifest {
  int version = manifest_version;
  int64_t generation = 0; ///< the files are under gen-<generation>/
  int64_t started_ms = 0; ///< when the backup began: every call acknowledged before is in it
  int64_t finished_ms = 0;
  std::string source; ///< the data directory backed up (absolute)
  uint64_t bytes_copied = 0;
  std::vector<manifest_entity> entities;
};

/// The generation directory's name: gen-<generation>, 6 digits at least.
std::string generation_dir(int64_t generation);
/// Whether `name` is a generation directory's name.
bool is_generation_dir(const std::string& name);

/// Reads DEST/manifest.json. not_found when there is none; invalid_argument ("... is not a
/// factum backup ...") when it is not a manifest this build reads; io_error when unreadable.
result<manifest> read_manifest(const std::filesystem::path& dest);
/// Writes DEST/manifest.json atomically: a temporary file, fsync, rename over, fsync of DEST.
status write_manifest(const std::filesystem::path& dest, const manifest& m);

/// `p` with `suffix` appended to its name ("-wal").
inline std::filesystem::path suffixed(std::filesystem::path p, const char* suffix) {
  p += suffix;
  return p;
}

/// Size and SHA-256 of `file` (read once).
result<file_sum> sum_file(const std::filesystem::path& file);
/// Copies `from` to a new file `to` (which must not exist), computing size and SHA-256 of the
/// bytes copied (not synced: see sync_fs).
result<file_sum> copy_and_sum(const std::filesystem::path& from, const std::filesystem::path& to);
/// fsync of a directory: ok or io_error naming it.
status sync_dir(const std::filesystem::path& dir);
/// Files and directories to make durable together: each file's write-out starts when it is
/// added (sync_file_range, without waiting), so that sync() finds most of them written and its
/// fdatasync of each file, then fsync of each directory (deepest first), wait little.
class durable_batch {
 public:
  /// Starts writing `file` out; sync() fdatasyncs it.
  status add_file(const std::filesystem::path& file);
  /// sync() fsyncs `dir` (after every file).
  void add_dir(const std::filesystem::path& dir) { dirs_.push_back(dir); }
  status sync();

 private:
  std::vector<std::filesystem::path> files_, dirs_;
};

/// `p` made absolute and normal, through symlinks of the part that exists.
std::filesystem::path normal_path(const std::filesystem::path& p);
/// Whether `inner` is `outer` or below it (both normal_path()).
bool is_within(const std::filesystem::path& inner, const std::filesystem::path& outer);

} // namespace factum::tools::backup
