// wal_vfs.cpp: the "factum" SQLite VFS (see wal_vfs.hpp).
//
// Why: SQLite writes each WAL frame as two writes (its 24-byte header, then the page), so a
// commit of 85 frames is 170 pwrite calls; in this project's VM that was ~260 us against ~30 us
// for the same bytes in one call (measured with bench/store_bench.cpp).
//
// What it does, for -wal files only (every other file, and every other method, passes through):
// - A write that continues the previous one (its offset is the end of the last write) is
//   appended to a per-file buffer. The WAL header of a new generation (offset 0) starts one.
// - The buffer goes to the base VFS in one write when a commit frame is complete (a 24-byte
//   frame header whose "database size" field is non-zero, then its page): the commit's own
//   xWrite returns the result, so a full disk or an I/O error fails the commit as before. It is
//   also written before any read, sync, size query, truncation, file control or close of that
//   file, before it would exceed 124 KiB (the most the unix VFS writes in one call), and at
//   xShmBarrier on the database file.
// - A write out of sequence (SQLite rewriting a frame of a spilled transaction, or the checksums
//   after it) flushes the buffer and switches the file to unbuffered writes until the next
//   xShmBarrier.
//
// Why it is safe: another connection (another thread's, or another process's) finds WAL frames
// only through the wal-index header, and SQLite publishes that header after a barrier
// (walIndexWriteHdr: write copy 1, xShmBarrier on the database file, write copy 0; readers
// accept the header only when both copies match). The barrier writes whatever is still
// buffered, so no frame is published before it is in the file. A crash before that is a crash in
// the middle of a commit, which WAL recovery already handles (frame checksums, commit markers).
// xShmBarrier cannot return an error: if that write fails the process aborts rather than publish
// frames that are not in the file (the commit path above writes first and reports errors, so the
// barrier has nothing to write in every path this file knows of).
//
// Growing ahead (store_options::wal_grow_kib, set per connection through the file control
// wal_grow_fcntl_op on its database file): when a flushed write ends exactly at the end of a
// -wal file of at least a quarter of the chunk, zeros are appended up to the next multiple of
// the chunk (256 KiB by default), in the same commit, on the committing thread. The commits that
// follow then overwrite blocks the file already has: their fdatasync writes data only, where an
// append also writes the inode (size), the block bitmap and extent tree, twice the round trips
// on this disk, and holds the inode table block that the inodes of other -wal files share (a
// commit appending to another WAL waited on it). The zeros are never frames: recovery stops at
// the first frame whose salts or checksum do not match the header's, as it does at the stale
// frames a restarted WAL leaves behind. Only the bytes past the file's end are written (its
// size is read first), so no frame is ever overwritten; a failed zero write leaves some zeros
// and is otherwise ignored (the commit's frames were written before it). At the close of a
// connection that grew the file, the file is cut back to the end of the last byte that
// connection wrote, when SQLite kept it (a small WAL, store_options::wal_kept_on_close_kib):
// everything past it is zeros (or frames of an older generation), so that the next open reads
// no zeros and a kept WAL takes no more disk than its frames.
//
// Reads of a -wal file pass through, except during SQLite's rebuild of the wal-index from the
// WAL (walIndexRecover, at the first open after a close that kept its frames, or after a crash):
// it reads the 32-byte WAL header at offset 0 and then every frame in order, one pread each
// (11 system calls for a 10-frame WAL). A read of exactly the header at offset 0 reads the whole
// file (up to 512 KiB, in reads of up to 124 KiB) instead, and the frame reads that follow in
// sequence are served from that copy. Any other read, write, truncation, sync or close drops it.
// Why that is coherent: SQLite reads the header and frames this way only while it rebuilds, and it
// rebuilds holding the WAL's write lock and every other WAL lock but the read locks, so no
// connection in any process can change the WAL between the copy and the last frame read; its first
// read after the rebuild (a page at a frame's page offset) is not in sequence and drops
// the copy. When the copy cannot be made (no memory for it, a read that comes back short) the
// rebuild reads the WAL plainly, frame by frame; tests take that path through
// wal_vfs_fail_next_readahead().
//
// Full pathnames: an absolute path without "." or ".." parts is returned as it is, without the
// unix VFS's lstat of every component (x_full_pathname below says why that is safe).
//
// Main database files are not opened through the base VFS but by ofd_file.cpp (open-file-
// description locks, no process-wide table, the wal-index in heap memory); -wal files and
// everything else are.
//
// Threads: a sqlite3_file belongs to one connection, used by one thread at a time; the buffer
// it holds during a commit is that file's. The database file and its WAL are the same
// connection's. The pool of idle buffers is shared (its own mutex); the counters are atomic. The
// VFS and method tables are written once, at registration, before any open.
#include "wal/wal_vfs.hpp"

#include "file/file_io.hpp"
#include "file/ofd_file.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include <sqlite3.h>

namespace factum::detail {

namespace {

sqlite3_vfs* base_vfs = nullptr;
sqlite3_vfs shim_vfs{};
sqlite3_io_methods shim_methods{};

std::atomic<uint64_t> n_wal_flushes{0}, n_passthrough{0}, n_wal_syncs{0}, n_db_syncs{0},
  n_wal_readaheads{0}, n_wal_grows{0}, n_wal_trims{0}, n_wal_starts{0};

// The size of a WAL header (SQLite's WAL_HDRSIZE), and the most one read-ahead copies.
constexpr int wal_header_size = 32;
constexpr int64_t max_readahead = 512 * 1024;

// The fault the next read-ahead meets (wal_vfs_fail_next_readahead; tests only): taken, and
// reset, by the read-ahead itself.
std::atomic<int> readahead_fault{0};

void count(std::atomic<uint64_t>& n) {
  n.fetch_add(1, std::memory_order_relaxed);
}

// The unix VFS writes at most 0x1ffff bytes per pwrite call (seekAndWriteFd masks the length,
// and a remainder of exactly 128 KiB would then write nothing and report SQLITE_FULL): a buffer
// stays below that, 31 pages of 4 KiB with their frame headers.
constexpr size_t max_buffer = 0x1f000;

// Buffers are lent to a file from its first buffered write to its flush, then returned: an
// open entity holds none between commits (thousands stay open), and a commit does not pay for
// a fresh allocation (glibc would grow and trim an arena per commit). At most `pool_keep` idle
// buffers are kept (~2 MiB).
std::mutex pool_mu;
std::vector<std::unique_ptr<char[]>> pool;
constexpr size_t pool_keep = 16;

char* take_buffer() {
  {
    std::lock_guard<std::mutex> g(pool_mu);
    if (!pool.empty()) {
      char* b = pool.back().release();
      pool.pop_back();
      return b;
    }
  }
  return new char[max_buffer];
}

void give_buffer(char* b) {
  std::unique_ptr<char[]> owned(b);
  std::lock_guard<std::mutex> g(pool_mu);
  if (pool.size() < pool_keep)
    pool.push_back(std::move(owned));
}

struct shim_file {
  sqlite3_file head; // pMethods = &shim_methods once the base file is open
  bool is_wal = false;
  bool unbuffered = false;    // out of sequence since the last barrier
  bool commit_header = false; // the last buffered write was a commit frame's header
  int64_t header_off = 0;     // ... at this offset
  int64_t next_off = -1;      // where an in-sequence write starts; -1: unknown yet
  int64_t buf_off = 0;        // file offset of buf[0]
  size_t buf_len = 0;         // bytes buffered
  char* buf = nullptr;        // lent by take_buffer() while buf_len > 0
  shim_file* wal = nullptr;   // database file: its connection's open WAL
  shim_file* db = nullptr;    // WAL file: its database file
  char* ra = nullptr;         // WAL file: the read-ahead copy of its first ra_len bytes
  int64_t ra_len = 0;
  int64_t ra_next = -1;    // ... served only to a read starting here (the end of the last one)
  int64_t grow = 0;        // database file: its WAL grows ahead in chunks of this many bytes
  int64_t known_size = -1; // WAL file: its size is at least this (-1: not known)
  int64_t max_end = 0;     // WAL file: the end of the furthest byte this connection wrote
  bool grown = false;      // WAL file: this connection appended zeros to it
  wal_start_hook on_start; // database file: called before its WAL's header is written
};

// What a WAL grows by is written from here (in .bss: untouched pages cost no memory).
const char zeros[0x1f000] = {};

constexpr size_t real_offset = (sizeof(shim_file) + 15) & ~size_t{15};

shim_file* shim(sqlite3_file* p) {
  return reinterpret_cast<shim_file*>(p);
}
sqlite3_file* real(sqlite3_file* p) {
  return reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(p) + real_offset);
}
sqlite3_file* real(shim_file* f) {
  return real(&f->head);
}

/// After a write that ended at `end`: appends zeros up to the next multiple of the chunk when
/// that write reached the end of the file (file comment). Costs nothing while `end` stays inside
/// the size last seen, one size query otherwise.
void grow_ahead(shim_file* f, int64_t end) {
  int64_t chunk = f->db != nullptr ? f->db->grow : 0;
  if (chunk <= 0 || end < chunk / 4 || end <= f->known_size)
    return;
  auto* r = real(f);
  sqlite3_int64 size = 0;
  if (r->pMethods->xFileSize(r, &size) != SQLITE_OK)
    return;
  f->known_size = size;
  if (size > end)
    return; // the file reaches past this write already
  int64_t target = (end / chunk + 1) * chunk;
  for (int64_t at = size; at < target;) {
    int n = static_cast<int>(std::min<int64_t>(target - at, static_cast<int64_t>(sizeof zeros)));
    if (r->pMethods->xWrite(r, zeros, n, at) != SQLITE_OK)
      return; // some zeros, or none: harmless, and the next write past the end tries again
    at += n;
    f->known_size = at;
    f->grown = true;
  }
  count(n_wal_grows);
}

/// At the close of a WAL this connection grew: cuts what follows its last written byte (zeros,
/// or frames of an older generation) when SQLite left the file longer (file comment).
void trim_grown(shim_file* f) {
  if (!f->grown || f->max_end <= 0)
    return;
  auto* r = real(f);
  sqlite3_int64 size = 0;
  if (r->pMethods->xFileSize(r, &size) == SQLITE_OK && size > f->max_end &&
      r->pMethods->xTruncate(r, f->max_end) == SQLITE_OK)
    count(n_wal_trims);
}

/// Writes `n` bytes at `off` to the base file, and remembers how far this connection wrote.
int base_write(shim_file* f, const void* data, int n, int64_t off) {
  auto* r = real(f);
  int rc = r->pMethods->xWrite(r, data, n, off);
  if (rc == SQLITE_OK)
    f->max_end = std::max<int64_t>(f->max_end, off + n);
  return rc;
}

/// Writes the buffer to the base file. On failure the buffer is dropped (the commit it belongs
/// to fails) and the error returned.
int flush(shim_file* f) {
  f->commit_header = false;
  if (f->buf_len == 0)
    return SQLITE_OK;
  int rc = base_write(f, f->buf, static_cast<int>(f->buf_len), f->buf_off);
  count(n_wal_flushes);
  int64_t end = f->buf_off + static_cast<int64_t>(f->buf_len);
  give_buffer(f->buf);
  f->buf = nullptr;
  f->buf_len = 0;
  if (rc == SQLITE_OK)
    grow_ahead(f, end);
  return rc;
}

void drop_readahead(shim_file* f) {
  if (f->ra == nullptr) // the common case: a write, sync or read outside a rebuild
    return;
  delete[] f->ra;
  f->ra = nullptr;
  f->ra_len = 0;
  f->ra_next = -1;
}

/// Copies the first bytes of the -wal (up to max_readahead) into f->ra for a wal-index rebuild
/// (file comment). False when there is nothing after the header, or the copy cannot be made
/// (allocation, a short read: the file shrank since its size was taken): the caller reads
/// plainly then.
bool make_readahead(shim_file* f) {
  auto* r = real(f);
  sqlite3_int64 size = 0;
  if (r->pMethods->xFileSize(r, &size) != SQLITE_OK || size <= wal_header_size)
    return false;
  int64_t len = std::min<int64_t>(size, max_readahead);
  auto fault =
    static_cast<readahead_fault_kind>(readahead_fault.exchange(0, std::memory_order_relaxed));
  auto* copy = fault == readahead_fault_kind::allocation
                 ? nullptr
                 : new (std::nothrow) char[static_cast<size_t>(len)];
  if (copy == nullptr)
    return false;
  // In reads of at most max_buffer bytes: the unix VFS expects no more per call (it asserts
  // that a read length fits in 17 bits, as it masks a write's).
  for (int64_t at = 0; at < len; at += static_cast<int64_t>(max_buffer)) {
    int chunk = static_cast<int>(std::min<int64_t>(len - at, static_cast<int64_t>(max_buffer)));
    int rc = r->pMethods->xRead(r, copy + at, chunk, at);
    if (fault == readahead_fault_kind::short_read && at + chunk >= len)
      rc = SQLITE_IOERR_SHORT_READ; // as if the file had shrunk since its size was taken
    if (rc != SQLITE_OK) {
      delete[] copy;
      return false;
    }
  }
  count(n_wal_readaheads);
  f->ra = copy;
  f->ra_len = len;
  f->ra_next = 0;
  return true;
}

/// A read of a -wal file: served from the read-ahead copy when it continues the last read of a
/// wal-index rebuild (file comment), or when it is the rebuild's first (the header) and a copy
/// can be made; else the base VFS's read.
int wal_read(shim_file* f, void* out, int n, sqlite3_int64 off) {
  bool from_copy = f->ra != nullptr && off == f->ra_next && n >= 0 && off + n <= f->ra_len;
  if (!from_copy) {
    drop_readahead(f);
    from_copy = off == 0 && n == wal_header_size && make_readahead(f);
  }
  if (!from_copy) {
    auto* r = real(f);
    return r->pMethods->xRead(r, out, n, off);
  }
  std::memcpy(out, f->ra + off, static_cast<size_t>(n));
  f->ra_next = off + n;
  return SQLITE_OK;
}

// -- io methods ---------------------------------------------------------------------------------

int x_close(sqlite3_file* p) {
  auto* f = shim(p);
  int frc = f->is_wal ? flush(f) : SQLITE_OK;
  drop_readahead(f);
  if (f->is_wal && frc == SQLITE_OK)
    trim_grown(f);
  if (f->is_wal && f->db)
    f->db->wal = nullptr;
  if (!f->is_wal && f->wal)
    f->wal->db = nullptr;
  auto* r = real(p);
  int rc = r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
  f->~shim_file();
  return frc != SQLITE_OK ? frc : rc;
}

int x_read(sqlite3_file* p, void* out, int n, sqlite3_int64 off) {
  auto* f = shim(p);
  if (!f->is_wal)
    return real(p)->pMethods->xRead(real(p), out, n, off);
  if (int rc = flush(f); rc != SQLITE_OK)
    return rc;
  return wal_read(f, out, n, off);
}

int x_write(sqlite3_file* p, const void* data, int n, sqlite3_int64 off) {
  auto* f = shim(p);
  if (!f->is_wal)
    return real(p)->pMethods->xWrite(real(p), data, n, off);
  drop_readahead(f);
  if (off == 0) {
    count(n_wal_starts); // the header of a new WAL generation (its first frame follows)
    if (f->db && f->db->on_start.fn)
      f->db->on_start.fn(f->db->on_start.ctx);
  }
  bool in_sequence =
    !f->unbuffered && f->db != nullptr && (off == 0 || f->next_off < 0 || off == f->next_off);
  if (!in_sequence) {
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
    f->unbuffered = true;
    count(n_passthrough);
    return base_write(f, data, n, off);
  }
  if (f->buf_len > 0 && (off != f->buf_off + static_cast<int64_t>(f->buf_len) ||
                         f->buf_len + static_cast<size_t>(n) > max_buffer))
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
  if (static_cast<size_t>(n) > max_buffer) { // cannot happen (pages are <= 64 KiB): as is
    f->next_off = off + n;
    return base_write(f, data, n, off);
  }
  if (f->buf_len == 0) {
    f->buf = take_buffer();
    f->buf_off = off;
  }
  auto* b = static_cast<const char*>(data);
  std::memcpy(f->buf + f->buf_len, b, static_cast<size_t>(n));
  f->buf_len += static_cast<size_t>(n);
  f->next_off = off + n;
  if (f->commit_header && off == f->header_off + 24)
    return flush(f); // the commit frame is complete
  f->commit_header = n == 24 && be32(b + 4) != 0;
  f->header_off = off;
  return SQLITE_OK;
}

int x_truncate(sqlite3_file* p, sqlite3_int64 size) {
  auto* f = shim(p);
  if (f->is_wal) {
    drop_readahead(f);
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
    f->next_off = -1;
    f->known_size = -1;
    f->max_end = std::min<int64_t>(f->max_end, size);
  }
  return real(p)->pMethods->xTruncate(real(p), size);
}

int x_sync(sqlite3_file* p, int flags) {
  auto* f = shim(p);
  count(f->is_wal ? n_wal_syncs : n_db_syncs);
  drop_readahead(f);
  if (f->is_wal)
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
  return real(p)->pMethods->xSync(real(p), flags);
}

int x_file_size(sqlite3_file* p, sqlite3_int64* size) {
  auto* f = shim(p);
  if (f->is_wal)
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
  return real(p)->pMethods->xFileSize(real(p), size);
}

int x_lock(sqlite3_file* p, int level) {
  return real(p)->pMethods->xLock(real(p), level);
}
int x_unlock(sqlite3_file* p, int level) {
  return real(p)->pMethods->xUnlock(real(p), level);
}
int x_check_reserved_lock(sqlite3_file* p, int* out) {
  return real(p)->pMethods->xCheckReservedLock(real(p), out);
}

int x_file_control(sqlite3_file* p, int op, void* arg) {
  auto* f = shim(p);
  if (op == wal_grow_fcntl_op) {
    if (f->is_wal || arg == nullptr)
      return SQLITE_NOTFOUND;
    f->grow = std::max<int64_t>(0, *static_cast<sqlite3_int64*>(arg));
    return SQLITE_OK;
  }
  if (op == wal_start_hook_fcntl_op) {
    if (f->is_wal || arg == nullptr)
      return SQLITE_NOTFOUND;
    f->on_start = *static_cast<wal_start_hook*>(arg);
    return SQLITE_OK;
  }
  if (f->is_wal)
    if (int rc = flush(f); rc != SQLITE_OK)
      return rc;
  return real(p)->pMethods->xFileControl(real(p), op, arg);
}

int x_sector_size(sqlite3_file* p) {
  return real(p)->pMethods->xSectorSize(real(p));
}
int x_device_characteristics(sqlite3_file* p) {
  return real(p)->pMethods->xDeviceCharacteristics(real(p));
}
int x_shm_map(sqlite3_file* p, int page, int size, int extend, void volatile** out) {
  return real(p)->pMethods->xShmMap(real(p), page, size, extend, out);
}
int x_shm_lock(sqlite3_file* p, int offset, int n, int flags) {
  return real(p)->pMethods->xShmLock(real(p), offset, n, flags);
}

void x_shm_barrier(sqlite3_file* p) {
  auto* f = shim(p);
  if (auto* w = f->wal) {
    if (flush(w) != SQLITE_OK) {
      // SQLite publishes the wal-index header right after this barrier: frames that did not
      // reach the file must not become visible. Recovery after the restart drops them.
      std::fprintf(stderr, "factum: writing buffered WAL frames failed before they were "
                           "published; aborting\n");
      std::abort();
    }
    w->unbuffered = false;
  }
  real(p)->pMethods->xShmBarrier(real(p));
}

int x_shm_unmap(sqlite3_file* p, int del) {
  return real(p)->pMethods->xShmUnmap(real(p), del);
}
int x_fetch(sqlite3_file* p, sqlite3_int64 off, int n, void** out) {
  return real(p)->pMethods->xFetch(real(p), off, n, out);
}
int x_unfetch(sqlite3_file* p, sqlite3_int64 off, void* ptr) {
  return real(p)->pMethods->xUnfetch(real(p), off, ptr);
}

// -- vfs ----------------------------------------------------------------------------------------

// Whether `path` is absolute and has no empty, "." or ".." component.
bool plain_absolute(const char* path) {
  if (path == nullptr || path[0] != '/')
    return false;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p != '/')
      continue;
    const char* c = p + 1; // the component after this slash
    size_t len = std::strcspn(c, "/");
    if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
      return false;
  }
  return true;
}

// A plain absolute path is its own full pathname. SQLite's unix VFS would lstat every component
// of it to resolve symbolic links (six calls per open of an entity here), so that a -wal lands
// beside the real file of a symlinked database; factum opens database files with O_NOFOLLOW
// (ofd_file.cpp), so a database path is never a link, and a linked directory above it puts the
// -wal beside the file either way. Anything else (relative, "." or "..") goes to the unix VFS.
int x_full_pathname(sqlite3_vfs*, const char* path, int n_out, char* out) {
  if (plain_absolute(path)) {
    size_t len = std::strlen(path);
    if (len + 1 > static_cast<size_t>(n_out))
      return SQLITE_CANTOPEN;
    std::memcpy(out, path, len + 1);
    return SQLITE_OK;
  }
  return base_vfs->xFullPathname(base_vfs, path, n_out, out);
}

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* out, int flags, int* out_flags) {
  auto* f = new (out) shim_file{};
  f->head.pMethods = nullptr;
  // Main databases: opened and locked here (ofd_file.hpp); everything else through "unix".
  int rc = (flags & SQLITE_OPEN_MAIN_DB) != 0 && name != nullptr
             ? ofd_open(name, real(out), flags, out_flags)
             : base_vfs->xOpen(base_vfs, name, real(out), flags, out_flags);
  if (rc != SQLITE_OK || real(out)->pMethods == nullptr) {
    f->~shim_file();
    out->pMethods = nullptr;
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  f->head.pMethods = &shim_methods;
  if ((flags & SQLITE_OPEN_WAL) != 0 && name != nullptr) {
    f->is_wal = true;
    // The database file this WAL belongs to: its xShmBarrier publishes our frames. Without
    // the link (not opened through this VFS), every write passes through unbuffered.
    if (sqlite3_file* dbf = sqlite3_database_file_object(name);
        dbf != nullptr && dbf->pMethods == &shim_methods) {
      f->db = shim(dbf);
      f->db->wal = f;
    }
  }
  return SQLITE_OK;
}

} // namespace

void register_wal_vfs(sqlite3_vfs* base) {
  base_vfs = base;
  shim_vfs = *base;
  shim_vfs.pNext = nullptr;
  shim_vfs.zName = wal_vfs_name;
  shim_vfs.szOsFile =
    static_cast<int>(real_offset + std::max(static_cast<size_t>(base->szOsFile), ofd_file_size()));
  shim_vfs.xOpen = x_open;
  shim_vfs.xFullPathname = x_full_pathname;
  shim_methods.iVersion = 3;
  shim_methods.xClose = x_close;
  shim_methods.xRead = x_read;
  shim_methods.xWrite = x_write;
  shim_methods.xTruncate = x_truncate;
  shim_methods.xSync = x_sync;
  shim_methods.xFileSize = x_file_size;
  shim_methods.xLock = x_lock;
  shim_methods.xUnlock = x_unlock;
  shim_methods.xCheckReservedLock = x_check_reserved_lock;
  shim_methods.xFileControl = x_file_control;
  shim_methods.xSectorSize = x_sector_size;
  shim_methods.xDeviceCharacteristics = x_device_characteristics;
  shim_methods.xShmMap = x_shm_map;
  shim_methods.xShmLock = x_shm_lock;
  shim_methods.xShmBarrier = x_shm_barrier;
  shim_methods.xShmUnmap = x_shm_unmap;
  shim_methods.xFetch = x_fetch;
  shim_methods.xUnfetch = x_unfetch;
  sqlite3_vfs_register(&shim_vfs, 0);
}

void wal_vfs_fail_next_readahead(readahead_fault_kind kind) noexcept {
  readahead_fault.store(static_cast<int>(kind), std::memory_order_relaxed);
}

wal_vfs_counters wal_vfs_stats() noexcept {
  return {n_wal_flushes.load(),    n_passthrough.load(), n_wal_syncs.load(), n_db_syncs.load(),
          n_wal_readaheads.load(), n_wal_grows.load(),   n_wal_trims.load(), n_wal_starts.load()};
}

} // namespace factum::detail
