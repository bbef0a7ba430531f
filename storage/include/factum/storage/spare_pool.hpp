// factum/storage/spare_pool.hpp: entity files made ahead of need, so that creating an entity is
// a rename instead of a write and an fdatasync of a new file. One pool per data directory,
// shared by the stores that open entities in it (store_options::spares). A thread of its own
// makes the files; take() and put_back() are called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "factum/error/status.hpp"

namespace factum {

/// Keeps up to `target` *spare* entity files ready in `<data_dir>/spares/`.
///
/// A spare is a complete, fdatasynced entity file at the current schema version whose meta rows
/// name no entity yet (tenant, type, id and fact_id_prefix empty; docs/storage-format.md section
/// 1), with an empty `-wal` and `-shm` beside it. entity_store::open of a missing key renames a
/// spare to the key's path (its inode and data are already on disk), then its `-wal` and `-shm`
/// (without replacing), and *claims* it: one small WAL transaction writes the entity's meta
/// rows. The first open thus allocates no inode (the dearest part of it on ext4 here).
/// A spare renamed into place but not yet claimed (a crash in between) is claimed by the next
/// open of that key; read-only opens treat it as a missing entity.
///
/// The maker thread first makes the 256 shard directories `entities/00` .. `entities/ff` that
/// are missing (so that no creation pays a mkdir and its directory fsyncs). Then, whenever
/// `min(16, target / 2)` (at least 1) spares are gone, it makes a batch in `spares/making/`:
/// writes each `<id>.tmp`, starts the write-out of all of them (`sync_file_range`), fdatasyncs
/// each, creates its empty `<id>.db-wal` and `<id>.db-shm`, and moves the three to `spares/`
/// (the `.db` last, as `<id>.db`): only whole, synced files carry the `.db` name in `spares/`,
/// and the inode allocations hold the lock of `making/`, not the one every take's rename needs.
/// start() keeps the `.db` spares an earlier process left whose bytes equal this build's
/// unclaimed image, which have one name only and whose `-wal` and `-shm` are empty (with one
/// name) or absent (up to `target`), with those, and deletes every other `.db`, `.tmp`,
/// `.db-wal`, `.db-shm` and `.db-journal` file in `spares/` and everything in `making/`.
/// Deleting removes a name only: an entity that shares the inode (a crash kept both names of a
/// take's rename, as on a file system whose renames are not atomic on disk) keeps its file.
class spare_pool {
 public:
  /// What the pool did since start (counters) and holds now (ready).
  struct stats {
    int64_t made = 0;      ///< spares written and synced by the maker thread
    int64_t reused = 0;    ///< valid spares found in the directory at start
    int64_t discarded = 0; ///< files deleted at start (unfinished or from another build)
    int64_t taken = 0;     ///< spares handed to a creation
    int64_t missed = 0;    ///< take() calls that found no spare ready
    /// Failed batches (disk full, something in the way of making/): the thread tries again
    /// after 1 s, making a missing spares/ or making/ again; creations meanwhile build their
    /// own files.
    int64_t errors = 0;
    int ready = 0; ///< spares ready now
  };

  /// Opens (creating it if needed) the pool's directory, `<data_dir>/spares/` for files of
  /// pages of 4096 bytes and `<data_dir>/spares-<page_size>/` for any other size, keeps the
  /// valid spares in it, deletes the rest, and starts the maker thread. `target` must be
  /// 1..1024; `page_size` a power of two from 512 to 65536. The spares are renamed into
  /// `<entity_root>/entities/` (default: data_dir's), which must be on the same file system.
  static result<std::shared_ptr<spare_pool>> start(const std::filesystem::path& data_dir,
                                                   int target, int page_size = 4096,
                                                   const std::filesystem::path& entity_root = {});

  spare_pool(const spare_pool&) = delete;
  spare_pool& operator=(const spare_pool&) = delete;

  /// Stops the maker thread (see stop()).
  ~spare_pool();

  // -- use --

  /// Removes one ready spare from the pool and returns its path, or nothing when none is ready
  /// (the caller then builds its file itself). Wakes the maker thread. Any thread.
  std::optional<std::filesystem::path> take();

  /// Hands back a spare that take() returned and that the caller did not use (its rename lost a
  /// race: another creator's file was already in place). Any thread.
  void put_back(std::filesystem::path spare);

  /// What place() did.
  enum class placed {
    spare,    ///< `db` is now a spare: an unclaimed file, for the caller's open to claim
    existing, ///< a file was at `db` already (another creator's); the spare went back
    none,     ///< no spare ready, or its rename failed otherwise (it is deleted): build the file
  };

  /// Takes a spare and renames it to `db` without replacing (RENAME_NOREPLACE), then its empty
  /// `-wal` and `-shm` beside it, so that the first open creates no file; a companion that
  /// cannot go (another opener made one meanwhile) is deleted and the one in place is used.
  /// Any thread.
  placed place(const std::filesystem::path& db);

  // -- lifecycle --

  /// Stops making spares: the maker thread finishes the batch it is writing and exits; waits
  /// for it. Ready spares stay on disk for the next start(). Idempotent; any thread but the
  /// maker's.
  void stop();

  /// Waits until at least `n` spares are ready, the pool is stopped, or `timeout` passes;
  /// returns the number ready. For benchmarks and tests that need a full pool.
  int wait_ready(int n, std::chrono::milliseconds timeout);

  /// Waits until `until(stats)` holds (checked whenever spares are made or put back, or a
  /// batch fails), the pool is stopped, or `timeout` passes; returns the stats then. For tests
  /// that wait on the maker thread. `until` runs under the pool's lock: it must not call the
  /// pool.
  stats wait_stats(const std::function<bool(const stats&)>& until,
                   std::chrono::milliseconds timeout);

  // -- observers --

  stats get_stats() const;

  /// `<data_dir>/spares` (or `spares-<page_size>`).
  const std::filesystem::path& dir() const noexcept { return dir_; }

  /// The page size of the files this pool makes.
  int page_size() const noexcept { return page_size_; }

  /// The number of spares the pool keeps ready.
  int target() const noexcept { return target_; }

 private:
  spare_pool(std::filesystem::path dir, std::filesystem::path entity_root, int target,
             int page_size);
  void run();
  status make_batch(int n, std::string& image);
  stats snapshot() const; ///< stats_ with `ready` filled in; the caller holds mu_

  const std::filesystem::path dir_;
  const std::filesystem::path making_;      ///< dir_/making: the maker's files until whole
  const std::filesystem::path entity_root_; ///< holds entities/, where spares are taken to
  const int target_;
  const int page_size_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // the maker: a spare was taken, or stop
  std::condition_variable ready_; // wait_ready(): spares were made, or stop
  std::deque<std::filesystem::path> spares_;
  bool stopping_ = false;
  stats stats_;
  std::thread maker_;
};

} // namespace factum
