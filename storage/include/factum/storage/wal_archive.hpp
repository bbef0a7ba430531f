// factum/storage/wal_archive.hpp: an entity's continuous archive (point-in-time recovery), the
// read side: its commits as bookmarks, the bookmark for a time or a seq, and the entity file as
// it was at a bookmark. The writer is the store's (store_options::archive_dir; wal_archiver in
// storage/src). The format: docs/storage-format.md, "The continuous archive".
//
// Stateless functions; any thread, on an archive the writer may be appending to (they read only
// what an index record names, which the writer wrote before the record).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum {

/// One archived commit of an entity: where it ends in which WAL generation of which epoch, the
/// entity's last fact seq and the wall-clock time (ms since the epoch) of its shipping.
struct archive_point {
  int64_t epoch = 0; ///< 1, 2, ...: a new base copy of the entity file starts each
  int64_t gen = 0;   ///< 1, 2, ...: the WAL generation within the epoch
  int64_t end = 0;   ///< byte offset in that generation's WAL where the commit ends
  int64_t seq = 0;   ///< the entity's last fact seq after the commit (0: no fact yet)
  int64_t time_ms = 0;

  /// The bookmark naming this point: "EPOCH.GEN.END.SEQ" (decimal).
  std::string bookmark() const;
  /// Parses bookmark(); INVALID_ARGUMENT for any other text.
  static result<archive_point> parse(std::string_view bookmark);
  friend bool operator==(const archive_point&, const archive_point&) = default;
};

/// The directory of `key`'s archive under the archive root `archive_dir`:
/// ARCHIVE/entities/<digest[0..2]>/<digest>/, as entity_key::file_path derives a data file.
std::filesystem::path entity_archive_dir(const std::filesystem::path& archive_dir,
                                         const entity_key& key);

/// Every archived commit of the entity whose archive is `dir`, in order (a torn last record is
/// left out). NOT_FOUND when `dir` holds no archive.
result<std::vector<archive_point>> archive_points(const std::filesystem::path& dir);

/// What a bookmark is asked for: the last commit shipped at or before a time, or the last
/// commit whose last seq is at most a seq.
struct bookmark_query {
  std::optional<int64_t> at_time_ms;
  std::optional<int64_t> at_seq;
};

/// The archived commit that `q` names (exactly one of its members set). NOT_FOUND when the
/// archive has no commit that early (before its first base), or no archive.
result<archive_point> find_bookmark(const std::filesystem::path& dir, const bookmark_query& q);

/// Builds, at `out` (which must not exist), the entity file as it was at `p` (a commit of the
/// archive at `dir`): the epoch's base with each WAL generation up to p's replayed, the last
/// one up to p.end, checkpointed into one file without a -wal. The file is written beside
/// `out` under a temporary name, fdatasynced, then renamed (its directory fsynced). NOT_FOUND
/// when `p` is not a commit of the archive; CORRUPTION when a file it needs is missing or
/// shorter than its index says.
status materialize_archive_point(const std::filesystem::path& dir, const archive_point& p,
                                 const std::filesystem::path& out);

/// Whether the archive at `dir` can still rebuild `p` (its epoch and a base for its generation
/// are there: prune_archive removes older ones).
bool archive_point_restorable(const std::filesystem::path& dir, const archive_point& p);

/// What prune_archive() removed.
struct archive_prune_report {
  int64_t epochs_removed = 0;
  int64_t generations_folded = 0; ///< into a new base of the kept commit's epoch
  int64_t bytes_freed = 0;
  archive_point oldest_kept;
};

/// Keeps what rebuilds every commit shipped at or after `keep_after_ms` (and always the newest
/// commit): removes older epochs, folds the generations before the oldest kept commit's into a
/// new base `base-gNNNNNN.db` (built aside, synced, renamed), then removes the bases and
/// generations it replaces. Index records stay (48 bytes a commit); find_bookmark answers
/// NOT_FOUND for a pruned point. Safe beside the writer (it never touches the generation being
/// written nor a newer epoch); a rebuild that raced a prune fails and can be retried.
result<archive_prune_report> prune_archive(const std::filesystem::path& dir, int64_t keep_after_ms);

/// Process-wide counters of the writer (metrics and tests).
struct wal_archive_counters {
  uint64_t commits_shipped = 0; ///< commits whose WAL bytes were copied into an archive
  uint64_t bytes_shipped = 0;   ///< WAL bytes copied (frames and headers)
  uint64_t epochs_started = 0;  ///< base copies made (a first archive, or after a break)
  uint64_t failures = 0;        ///< shipping or syncing errors (each breaks that archive)
  uint64_t wal_starts = 0;      ///< WAL headers about to be written: the archive synced first
};
wal_archive_counters wal_archive_stats() noexcept;

} // namespace factum
