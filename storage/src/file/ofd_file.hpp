// ofd_file.hpp (private to storage/): a SQLite main-database file opened by factum's VFS itself,
// locked with open-file-description locks instead of through SQLite's "unix" VFS.
//
// Why: the "unix" VFS keeps one process-wide list of every open database (POSIX record locks
// belong to the process, so it must share lock state between connections to one file) and walks
// it twice per open under a global mutex: each open paid ~0.18 us per database already open in
// the process, serialised across threads (measured with runtime_bench). An OFD lock
// (F_OFD_SETLK) belongs to the open file description, so every connection locks on its own: no
// list of open files, no global mutex on open. The byte ranges are SQLite's
// (docs/storage-format.md section 2), and on Linux OFD locks and POSIX locks conflict with each
// other, so other processes using the "unix" VFS (sqlite3) interoperate on the database file.
// The WAL's index is kept in heap memory, one per file and process, not in a mapped -shm
// (ofd_file.cpp says how, and why another process cannot share a WAL the process has open).
//
// Threads: one sqlite3_file per connection, used by one thread at a time; a file's wal-index is
// shared by the process's connections to it (ofd_file.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

struct sqlite3_file;

namespace factum::detail {

/// Bytes an OFD-locked file needs in a sqlite3_file slot.
std::size_t ofd_file_size() noexcept;

/// Opens the main database file `name` into `out` (xOpen's contract: pMethods is set when and
/// only when the file is open).
int ofd_open(const char* name, sqlite3_file* out, int flags, int* out_flags);

/// Whether this thread's last attempt to attach a WAL index was refused because another process
/// has the file open (its -shm's DMS byte); clears the flag. A busy handler calls it so that it
/// does not wait out its timeout for a refusal that lasts until the other process closes the
/// file.
bool take_shm_refusal() noexcept;

/// The byte of a database file that a reader copying it (entity_store::copy_files) locks for
/// reading and every checkpoint of factum's VFS locks for writing (ofd_file.cpp, file comment).
inline constexpr long long ofd_copy_byte = 0x40000200;

} // namespace factum::detail
