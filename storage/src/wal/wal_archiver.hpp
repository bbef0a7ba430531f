// wal_archiver.hpp (private to storage/): the writer of an entity's continuous archive
// (store_options::archive_dir; the format: docs/storage-format.md, "The continuous archive").
// After each commit the store hands it the WAL's frame count; it copies the WAL bytes the
// commit wrote into the archive's mirror of that WAL generation, at the same offsets, and
// appends an index record (epoch, generation, end, seq, time). A WAL restart starts the next
// generation's mirror: SQLite restarts a WAL only after a complete checkpoint, so the database
// then equals the previous generation replayed over its base. Anything it cannot follow (no
// archive yet, a generation it did not see, an error) starts a new epoch: a fresh copy of the
// entity file (entity_store::copy_files) as its base.
//
// Durability: the archive is not synced per commit (that tripled a commit's syncs). Every
// commit that was acknowledged is in the live WAL; what the archive lacks of it after a power
// cut, attach() copies from there at the next open. The one moment that would lose it for good
// is when the live WAL's frames go: a restart overwrites them, a close's checkpoint truncates
// them. So the archive's copy is fdatasynced right before both (restarting(), from factum's VFS
// as the new WAL header is about to be written; sync() before the store's close), and a base
// before the record that names it. One more sync, at the first commit of a WAL that a close had
// truncated: its salts do not follow the archived generation's, so that after a power cut
// attach() could not tell that generation from a foreign writer's and would start an epoch
// without its commits. What a power cut can still take is only index records: the commits they
// named then share the record of attach()'s catch-up (its time). The other way round, the
// archive must never be ahead of the live file on disk: every sync of the archive, and every
// base copy, begins with an fdatasync of the live WAL. Writes no sync covered may still reach
// the disk in any order; when the archive's did and the live WAL's did not, attach() drops the
// records the live file lacks, by the WAL's end when the generation survives, by seq when it
// does not (then only while the file is the one the epoch follows: its `source`, the inode and
// its birth time).
//
// Threads: the store's owner, one at a time (the store is not thread-safe, neither is this);
// restarting() runs inside a commit of the owner, from the VFS.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/durability.hpp"
#include "factum/storage/wal_archive.hpp"
#include "file/file_io.hpp"

namespace factum::detail {

class wal_archiver {
 public:
  /// The archive at `dir` of the entity file `db` (its -wal beside it). Reads the archive's
  /// index; creates nothing yet. `fault` (tests): a non-zero answer to "archive_sync_live"
  /// fails the archive's fdatasync of the live files as the disk would.
  wal_archiver(std::filesystem::path dir, std::filesystem::path db, fault_hook fault = {});

  /// At the end of the store's open (after its own writes): brings the archive level with the
  /// live WAL (copies commits a crash left unshipped, drops ones a power cut took from the live
  /// file but not from the archive) or starts an epoch. `seq`: the entity's last seq.
  void attach(int64_t seq);
  /// After a commit: the WAL now has `frames` frames (SQLite's WAL hook); `seq` the entity's
  /// last seq. Errors break the archive (counted); the next ship starts a new epoch.
  void ship(int64_t frames, int64_t seq);
  /// After the store's close: notes the database file as the close left it (and the -wal's
  /// header, when the close kept it), so that the next attach can tell its own close from a
  /// writer that did not archive (a file `closed` in the archive; lost to a power cut, it only
  /// makes the next attach start an epoch).
  void closed();
  /// fdatasyncs the current generation's copy and the index. A failure breaks the archive as
  /// ship()'s do.
  void sync();
  /// The VFS is about to write a WAL header (a restart, or a new WAL after a truncation):
  /// sync(), and the next ship() reads the header.
  void restarting();
  /// Whether restarting() will be called (the store's VFS took the hook). Without it, every
  /// ship() reads the WAL header and syncs the archive (correct, and three times the syncs).
  void watch_restarts(bool hooked) noexcept { hooked_ = hooked; }
  /// Called when an fdatasync of the live files (the -wal, the entity file) fails here. Linux
  /// reports a writeback error once per open file description: a descriptor the store opens
  /// after this one saw the error would sync with success over the lost pages, so the store
  /// must fail its own next sync (entity_store::sync()).
  void on_live_sync_failure(std::function<void(const status&)> fn) { live_failed_ = std::move(fn); }

  /// The last point shipped (epoch 0 before any).
  const archive_point& last() const noexcept { return last_; }
  /// True when the last ship or sync failed and no epoch has started since.
  bool broken() const noexcept { return broken_; }

 private:
  using fd_ptr = std::shared_ptr<scoped_fd>;

  status load_index();
  /// A new epoch at `seq`, its base a copy of the entity file; `after_commit`: right after a
  /// commit (not at an open), whose WAL may not be synced yet.
  status start_epoch(int64_t seq, bool after_commit = false);
  status start_gen(const std::string& header);
  status copy_live(int64_t from, int64_t to);
  status append_record(int64_t seq);
  template <class Past> std::pair<int64_t, archive_point> records_before(Past past) const;
  status drop_records_after(int64_t end);
  status drop_records_past(int64_t seq);
  /// The entity file's device and inode, as an epoch's `source` holds them.
  std::string source_note() const;
  /// True when the current epoch's `source` names the entity file as it is now.
  bool follows_source() const;
  /// The live -wal's descriptor, opened on first use (-1 when it cannot be).
  int live_fd();
  /// fdatasyncs the entity file (`with_db`) and the live -wal; a failure is told to
  /// on_live_sync_failure's function before it is returned.
  status sync_live(bool with_db);
  std::string live_header();
  /// The `closed` note for the files as they are now (empty when the database is missing).
  std::string close_note();
  /// Reads and removes the `closed` note: true when it describes the files as they are now.
  bool take_close_note();
  void fail(const status& st);
  std::filesystem::path epoch_dir(int64_t epoch) const;
  std::filesystem::path gen_file(int64_t epoch, int64_t gen) const;

  std::filesystem::path dir_;
  std::filesystem::path db_;
  std::filesystem::path wal_;
  archive_point last_;     // the last record written (or read at load)
  std::string salts_;      // the current generation's salts (8 bytes); empty: none
  int64_t page_size_ = 0;  // of the current generation's frames
  fd_ptr mirror_;          // the current generation's mirror
  fd_ptr index_;           // the index, appended to
  int64_t index_size_ = 0; // bytes of whole records in it
  fd_ptr live_;            // the live -wal, read-only
  std::vector<char> buf_;  // copy buffer
  bool broken_ = false;
  bool restarted_ = false;                         // restarting() ran since the last ship()
  bool hooked_ = false;                            // watch_restarts()
  std::function<void(const status&)> live_failed_; // on_live_sync_failure()
  fault_hook fault_;
};

/// Size in bytes of one index record: epoch, gen, end, seq, time, checksum (little-endian
/// int64 each).
inline constexpr int64_t archive_record_size = 48;

/// Encodes and decodes an index record (false: its checksum does not hold).
void encode_archive_record(const archive_point& p, char (&out)[archive_record_size]);
bool decode_archive_record(const char* in, archive_point& p);

/// The name of an epoch's directory and a generation's mirror within it.
std::string archive_epoch_name(int64_t epoch);
std::string archive_gen_name(int64_t gen);

/// Counts for wal_archive_stats().
void count_archive(uint64_t commits, uint64_t bytes, uint64_t epochs, uint64_t failures,
                   uint64_t wal_starts = 0);

} // namespace factum::detail
