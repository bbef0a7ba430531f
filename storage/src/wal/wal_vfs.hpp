// wal_vfs.hpp (private to storage/): factum's SQLite VFS, a shim over the default one that
// hands a commit's WAL writes to the kernel in one write instead of two per frame, grows a WAL
// ahead in chunks of zeros, reads a WAL in one call when SQLite rebuilds its wal-index, and
// opens main database files itself (ofd_file.hpp).
// Registered once per process (sqlite_global_init); any thread may open files through it.
#pragma once

#include <cstdint>

struct sqlite3_vfs;

namespace factum::detail {

/// Name of the VFS: "factum".
inline constexpr const char* wal_vfs_name = "factum";

/// sqlite3_file_control op, on a main database opened through this VFS: `arg` points to a
/// sqlite3_int64, the chunk in bytes by which its -wal grows ahead (wal_vfs.cpp; 0: it does
/// not). Storage sets it at every read-write open (store_options::wal_grow_kib).
inline constexpr int wal_grow_fcntl_op = 0x66610001;

/// sqlite3_file_control op, on a main database opened through this VFS: `arg` points to a
/// wal_start_hook (copied; a null `fn` removes it). Before its WAL's header is written (the
/// first commit of a new WAL, or the commit that restarts it: frames of the previous generation
/// get overwritten from then on), the VFS calls fn(ctx) on the committing thread. The continuous
/// archive makes its copy of the previous generation durable there (wal_archiver.hpp).
inline constexpr int wal_start_hook_fcntl_op = 0x66610002;
struct wal_start_hook {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
};

/// Registers the VFS over `base` (not as the default VFS). Called once, by sqlite_global_init.
void register_wal_vfs(sqlite3_vfs* base);

/// What the shim saw and did since the process started (tests read it; nothing is counted per
/// write, a commit's hot path).
struct wal_vfs_counters {
  uint64_t wal_flushes = 0;    ///< writes the shim made to the base VFS for buffered ones
  uint64_t passthrough = 0;    ///< writes passed on unbuffered (out of sequence)
  uint64_t wal_syncs = 0;      ///< xSync calls SQLite made on -wal files
  uint64_t db_syncs = 0;       ///< xSync calls SQLite made on other files (main databases)
  uint64_t wal_readaheads = 0; ///< wal-index rebuilds whose WAL was read in one call
  uint64_t wal_grows = 0;      ///< -wal files grown ahead by a chunk of zeros
  uint64_t wal_trims = 0;      ///< -wal files cut back to their last written byte at a close
  uint64_t wal_starts = 0;     ///< WAL headers written: a -wal's first commit, and each commit
                               ///< that starts the WAL over after a complete checkpoint
};
wal_vfs_counters wal_vfs_stats() noexcept;

/// A fault for the next WAL read-ahead of the process (tests of its fallback).
enum class readahead_fault_kind : int {
  none = 0,
  allocation = 1, ///< its copy cannot be allocated
  short_read = 2, ///< its last read comes back short, as if the file had shrunk meanwhile
};

/// Makes the next read-ahead (in any thread) meet `kind`; the read-ahead takes it and then
/// fails, so that the rebuild of the wal-index reads the WAL plainly. For tests only.
void wal_vfs_fail_next_readahead(readahead_fault_kind kind) noexcept;

} // namespace factum::detail
