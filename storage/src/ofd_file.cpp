// ofd_file.cpp: main-database files with open-file-description locks (see ofd_file.hpp).
//
// The locking protocol is SQLite's own (os_unix.c, and https://sqlite.org/lockingv3.html,
// https://sqlite.org/walformat.html section 2.3), on the same bytes:
// - database file: PENDING byte 0x40000000, RESERVED the next one, SHARED the 510 after that.
//   SHARED: a read lock on PENDING, then on the SHARED range, then PENDING released. RESERVED:
//   a write lock on RESERVED. EXCLUSIVE: a write lock on PENDING (kept), then on the SHARED
//   range. In WAL mode a connection holds SHARED while it is open; SQLite takes EXCLUSIVE at
//   close to learn whether it is the last connection.
// - -shm file: the eight WAL locks at bytes 120..127 (xShmLock's offsets), and the "DMS" byte
//   128: every connection holds a read lock on it while it has the -shm mapped; the first one
//   (a write lock is granted) truncates the file, so stale contents after a crash are never
//   trusted and the wal-index is rebuilt from the WAL.
// A connection that set SQLITE_FCNTL_PERSIST_WAL (an entity store's owner) keeps the -shm at its
// last close, emptied, where SQLite would delete it: SQLite then keeps the -wal too (truncated
// by journal_size_limit=0, or left with its frames when the close skips the checkpoint), so the
// next open of the entity creates no file. "Last" is what SQLite itself checks before it
// deletes: the closing connection got the database's EXCLUSIVE lock (every open connection
// holds SHARED); a close without a checkpoint takes no such lock, and then "last" is a write
// lock granted on the DMS byte (every connection with the -shm attached holds a read lock on
// it). The next opener rebuilds the empty -shm from the WAL, as after a crash. With another
// connection open the -shm is left whole. Emptying it also drops its dirty pages before
// writeback would write them to the disk.
// What differs from "unix": each connection has its own descriptors and its own locks (OFD
// locks are owned by the open file description), so no process-wide table, no global mutex, and
// no file descriptor kept open after a close. Each connection maps the -shm itself (MAP_SHARED
// mappings of one file are coherent). Memory-mapped I/O of the database (xFetch) is not offered:
// factum sets mmap_size=0.
#include "ofd_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sqlite3.h>

namespace factum::detail {

namespace {

constexpr off_t pending_byte = 0x40000000;
constexpr off_t reserved_byte = pending_byte + 1;
constexpr off_t shared_first = pending_byte + 2;
constexpr off_t shared_size = 510;
constexpr off_t shm_base = 120;                        // first WAL lock byte in the -shm
constexpr off_t shm_dms = shm_base + SQLITE_SHM_NLOCK; // 128
constexpr off_t os_page = 4096;

std::atomic<uint64_t> n_shm_kept{0};
std::atomic<bool> populate_write{true}; // ofd_set_populate_write()

struct ofd_file {
  sqlite3_file base; // pMethods: set once open
  int fd = -1;
  int lock = SQLITE_LOCK_NONE;
  bool persist_wal = false;
  bool psow = true;
  const char* name = nullptr; // SQLite keeps it valid until xClose
  int shm_fd = -1;
  int region_size = 0;
  std::vector<void*> regions;
};

ofd_file* of(sqlite3_file* p) {
  return reinterpret_cast<ofd_file*>(p);
}

/// Sets (or clears) an OFD lock without waiting; 0 or the errno.
int set_lock(int fd, short type, off_t start, off_t len) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  fl.l_pid = 0;
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_SETLK, &fl);
  } while (rc < 0 && errno == EINTR);
  return rc == 0 ? 0 : errno;
}

int busy_or(int err, int ioerr) {
  return err == EAGAIN || err == EACCES ? SQLITE_BUSY : ioerr;
}

// -- database file ------------------------------------------------------------------------------

void unmap_shm(ofd_file* f) {
  for (void* r : f->regions)
    if (r != nullptr)
      ::munmap(r, static_cast<size_t>(f->region_size));
  f->regions.clear();
}

int x_close(sqlite3_file* p) {
  auto* f = of(p);
  unmap_shm(f);
  if (f->shm_fd >= 0)
    ::close(f->shm_fd);
  int rc = SQLITE_OK;
  if (f->fd >= 0 && ::close(f->fd) != 0 && errno != EINTR)
    rc = SQLITE_IOERR_CLOSE;
  f->~ofd_file();
  return rc;
}

int x_read(sqlite3_file* p, void* out, int amt, sqlite3_int64 off) {
  auto* f = of(p);
  auto* b = static_cast<char*>(out);
  int got = 0;
  while (got < amt) {
    ssize_t n = ::pread(f->fd, b + got, static_cast<size_t>(amt - got), off + got);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return SQLITE_IOERR_READ;
    }
    if (n == 0)
      break;
    got += static_cast<int>(n);
  }
  if (got < amt) {
    std::memset(b + got, 0, static_cast<size_t>(amt - got));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

int x_write(sqlite3_file* p, const void* data, int amt, sqlite3_int64 off) {
  auto* f = of(p);
  auto* b = static_cast<const char*>(data);
  int done = 0;
  while (done < amt) {
    ssize_t n = ::pwrite(f->fd, b + done, static_cast<size_t>(amt - done), off + done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno == ENOSPC || errno == EDQUOT ? SQLITE_FULL : SQLITE_IOERR_WRITE;
    }
    if (n == 0)
      return SQLITE_FULL;
    done += static_cast<int>(n);
  }
  return SQLITE_OK;
}

int x_truncate(sqlite3_file* p, sqlite3_int64 size) {
  int rc;
  do {
    rc = ::ftruncate(of(p)->fd, size);
  } while (rc < 0 && errno == EINTR);
  return rc == 0 ? SQLITE_OK : SQLITE_IOERR_TRUNCATE;
}

int x_sync(sqlite3_file* p, int) {
  // fdatasync also writes a changed file size (as SQLite's unix VFS relies on, on Linux).
  return ::fdatasync(of(p)->fd) == 0 ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

int x_file_size(sqlite3_file* p, sqlite3_int64* size) {
  struct stat st {};
  if (::fstat(of(p)->fd, &st) != 0)
    return SQLITE_IOERR_FSTAT;
  *size = st.st_size;
  return SQLITE_OK;
}

int x_lock(sqlite3_file* p, int level) {
  auto* f = of(p);
  if (f->lock >= level)
    return SQLITE_OK;
  if (level == SQLITE_LOCK_SHARED) {
    if (int e = set_lock(f->fd, F_RDLCK, pending_byte, 1); e != 0)
      return busy_or(e, SQLITE_IOERR_LOCK);
    int e = set_lock(f->fd, F_RDLCK, shared_first, shared_size);
    int u = set_lock(f->fd, F_UNLCK, pending_byte, 1);
    if (e != 0)
      return busy_or(e, SQLITE_IOERR_LOCK);
    if (u != 0)
      return SQLITE_IOERR_UNLOCK;
    f->lock = SQLITE_LOCK_SHARED;
    return SQLITE_OK;
  }
  if (level == SQLITE_LOCK_RESERVED) {
    if (int e = set_lock(f->fd, F_WRLCK, reserved_byte, 1); e != 0)
      return busy_or(e, SQLITE_IOERR_LOCK);
    f->lock = SQLITE_LOCK_RESERVED;
    return SQLITE_OK;
  }
  // EXCLUSIVE (SQLite never asks for PENDING itself): PENDING first, so that no new reader
  // gets in while the readers there drain; kept if the SHARED range is still busy.
  if (f->lock < SQLITE_LOCK_PENDING) {
    if (int e = set_lock(f->fd, F_WRLCK, pending_byte, 1); e != 0)
      return busy_or(e, SQLITE_IOERR_LOCK);
    f->lock = SQLITE_LOCK_PENDING;
  }
  if (int e = set_lock(f->fd, F_WRLCK, shared_first, shared_size); e != 0)
    return busy_or(e, SQLITE_IOERR_LOCK);
  f->lock = SQLITE_LOCK_EXCLUSIVE;
  return SQLITE_OK;
}

int x_unlock(sqlite3_file* p, int level) {
  auto* f = of(p);
  if (f->lock <= level)
    return SQLITE_OK;
  if (f->lock > SQLITE_LOCK_SHARED) {
    if (level == SQLITE_LOCK_SHARED && set_lock(f->fd, F_RDLCK, shared_first, shared_size) != 0)
      return SQLITE_IOERR_RDLOCK;
    if (set_lock(f->fd, F_UNLCK, pending_byte, 2) != 0) // PENDING and RESERVED
      return SQLITE_IOERR_UNLOCK;
    f->lock = SQLITE_LOCK_SHARED;
  }
  if (level == SQLITE_LOCK_NONE) {
    if (set_lock(f->fd, F_UNLCK, shared_first, shared_size) != 0)
      return SQLITE_IOERR_UNLOCK;
    f->lock = SQLITE_LOCK_NONE;
  }
  return SQLITE_OK;
}

int x_check_reserved_lock(sqlite3_file* p, int* out) {
  auto* f = of(p);
  if (f->lock >= SQLITE_LOCK_RESERVED) {
    *out = 1;
    return SQLITE_OK;
  }
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = reserved_byte;
  fl.l_len = 1;
  if (::fcntl(f->fd, F_OFD_GETLK, &fl) != 0)
    return SQLITE_IOERR_CHECKRESERVEDLOCK;
  *out = fl.l_type != F_UNLCK;
  return SQLITE_OK;
}

int flag_control(bool& flag, void* arg) {
  int* v = static_cast<int*>(arg);
  if (*v < 0)
    *v = flag ? 1 : 0;
  else
    flag = *v != 0;
  return SQLITE_OK;
}

int x_file_control(sqlite3_file* p, int op, void* arg) {
  auto* f = of(p);
  switch (op) {
  case SQLITE_FCNTL_LOCKSTATE: *static_cast<int*>(arg) = f->lock; return SQLITE_OK;
  case SQLITE_FCNTL_PERSIST_WAL: return flag_control(f->persist_wal, arg);
  case SQLITE_FCNTL_POWERSAFE_OVERWRITE: return flag_control(f->psow, arg);
  case SQLITE_FCNTL_VFSNAME:
    *static_cast<char**>(arg) = sqlite3_mprintf("factum");
    return SQLITE_OK;
  case SQLITE_FCNTL_SIZE_HINT:
  case SQLITE_FCNTL_CHUNK_SIZE: return SQLITE_OK; // advisory
  case SQLITE_FCNTL_HAS_MOVED: {
    struct stat a {
    }, b{};
    bool moved = ::fstat(f->fd, &a) != 0 || a.st_nlink == 0 || ::stat(f->name, &b) != 0 ||
                 a.st_ino != b.st_ino || a.st_dev != b.st_dev;
    *static_cast<int*>(arg) = moved ? 1 : 0;
    return SQLITE_OK;
  }
  default: return SQLITE_NOTFOUND;
  }
}

int x_sector_size(sqlite3_file*) {
  return 4096; // SQLITE_DEFAULT_SECTOR_SIZE, as "unix" reports on Linux
}

int x_device_characteristics(sqlite3_file* p) {
  return of(p)->psow ? SQLITE_IOCAP_POWERSAFE_OVERWRITE : 0;
}

// -- shared memory (the -shm file) --------------------------------------------------------------

int open_shm(ofd_file* f) {
  std::string path = f->name;
  path += "-shm";
  struct stat st {};
  mode_t mode = ::fstat(f->fd, &st) == 0 ? (st.st_mode & 0777) : 0644;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    return SQLITE_CANTOPEN;
  // First to attach (nobody holds the DMS byte): the contents may be a crashed process's.
  if (int e = set_lock(fd, F_WRLCK, shm_dms, 1); e == 0) {
    if (::ftruncate(fd, 3) != 0) {
      ::close(fd);
      return SQLITE_IOERR_SHMOPEN;
    }
  } else if (e != EAGAIN && e != EACCES) {
    ::close(fd);
    return SQLITE_IOERR_LOCK;
  }
  if (int e = set_lock(fd, F_RDLCK, shm_dms, 1); e != 0) { // a downgrade, or join the others
    ::close(fd);
    return busy_or(e, SQLITE_IOERR_LOCK);
  }
  f->shm_fd = fd;
  return SQLITE_OK;
}

int x_shm_map(sqlite3_file* p, int region, int size, int extend, void volatile** out) {
  auto* f = of(p);
  *out = nullptr;
  if (f->shm_fd < 0)
    if (int rc = open_shm(f); rc != SQLITE_OK)
      return rc;
  if (f->region_size == 0)
    f->region_size = size;
  auto idx = static_cast<size_t>(region);
  if (idx < f->regions.size() && f->regions[idx] != nullptr) {
    *out = f->regions[idx];
    return SQLITE_OK;
  }
  off_t need = static_cast<off_t>(region + 1) * size;
  struct stat st {};
  if (::fstat(f->shm_fd, &st) != 0)
    return SQLITE_IOERR_SHMSIZE;
  off_t had = st.st_size;
  if (had < need) {
    if (!extend)
      return SQLITE_OK;
    if (::ftruncate(f->shm_fd, need) != 0)
      return SQLITE_IOERR_SHMSIZE;
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED,
                   f->shm_fd, static_cast<off_t>(region) * size);
  if (m == MAP_FAILED)
    return SQLITE_IOERR_SHMMAP;
  if (had < need) {
    // The new pages are faulted in writable at once (SQLite clears the whole region next): one
    // call instead of a page fault per page, and the file system reserves their blocks here,
    // so a full disk is an error now rather than a SIGBUS on a later access to the mapping.
    // Kernels before 5.14 lack MADV_POPULATE_WRITE: one byte written at the end of each new
    // page does the reserving there. (Not fallocate: it allocates the blocks at once, and the
    // truncation at the last close must free them again; reopens measured ~40% slower with it.
    // Delayed-allocation pages are dropped by that truncation before they reach the disk.)
    int prc = populate_write.load(std::memory_order_relaxed)
                ? ::madvise(m, static_cast<size_t>(size), MADV_POPULATE_WRITE)
                : (errno = EINVAL, -1);
    if (prc != 0) {
      // EFAULT: a page could not be given a block (the file was just extended, so the mapping
      // is not past its end): the file system is full, as ENOSPC or EDQUOT from the pwrite.
      bool full = errno == EFAULT;
      bool ok = errno == EINVAL;
      for (off_t pg = had / os_page; ok && pg < need / os_page; ++pg) {
        ok = ::pwrite(f->shm_fd, "", 1, pg * os_page + os_page - 1) == 1;
        full = !ok && (errno == ENOSPC || errno == EDQUOT);
      }
      if (!ok) {
        ::munmap(m, static_cast<size_t>(size));
        return full ? SQLITE_FULL : SQLITE_IOERR_SHMSIZE;
      }
    }
  }
  if (f->regions.size() <= idx)
    f->regions.resize(idx + 1, nullptr);
  f->regions[idx] = m;
  *out = m;
  return SQLITE_OK;
}

int x_shm_lock(sqlite3_file* p, int offset, int n, int flags) {
  auto* f = of(p);
  if (f->shm_fd < 0)
    return SQLITE_IOERR_SHMLOCK;
  short type = (flags & SQLITE_SHM_UNLOCK) != 0   ? F_UNLCK
               : (flags & SQLITE_SHM_SHARED) != 0 ? F_RDLCK
                                                  : F_WRLCK;
  if (int e = set_lock(f->shm_fd, type, shm_base + offset, n); e != 0)
    return type == F_UNLCK ? SQLITE_IOERR_SHMLOCK : busy_or(e, SQLITE_IOERR_SHMLOCK);
  return SQLITE_OK;
}

void x_shm_barrier(sqlite3_file*) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

int x_shm_unmap(sqlite3_file* p, int del) {
  auto* f = of(p);
  unmap_shm(f);
  if (f->shm_fd >= 0) {
    // SQLite asks for deletion only while it holds the database's EXCLUSIVE lock (no other
    // connection anywhere has it open). A persistent WAL's connection never asks: under the
    // same lock, or when its close skipped the checkpoint (and that lock), under the DMS byte
    // held exclusively (no other connection anywhere has the -shm attached), the -shm is
    // emptied and kept instead (see the file comment). The next opener rebuilds it from the
    // WAL.
    if (del != 0) {
      std::string path = f->name;
      path += "-shm";
      ::unlink(path.c_str());
    } else if (f->persist_wal &&
               (f->lock == SQLITE_LOCK_EXCLUSIVE ||
                set_lock(f->shm_fd, F_WRLCK, shm_dms, 1) == 0) &&
               ::ftruncate(f->shm_fd, 0) == 0) {
      n_shm_kept.fetch_add(1, std::memory_order_relaxed);
    }
    ::close(f->shm_fd); // releases this connection's -shm locks, DMS included
    f->shm_fd = -1;
  }
  return SQLITE_OK;
}

int x_fetch(sqlite3_file*, sqlite3_int64, int, void** out) {
  *out = nullptr; // no memory-mapped reads: SQLite reads through xRead
  return SQLITE_OK;
}

int x_unfetch(sqlite3_file*, sqlite3_int64, void*) {
  return SQLITE_OK;
}

const sqlite3_io_methods methods = {
  3, // iVersion
  x_close,
  x_read,
  x_write,
  x_truncate,
  x_sync,
  x_file_size,
  x_lock,
  x_unlock,
  x_check_reserved_lock,
  x_file_control,
  x_sector_size,
  x_device_characteristics,
  x_shm_map,
  x_shm_lock,
  x_shm_barrier,
  x_shm_unmap,
  x_fetch,
  x_unfetch,
};

} // namespace

std::size_t ofd_file_size() noexcept {
  return sizeof(ofd_file);
}

void ofd_set_populate_write(bool on) noexcept {
  populate_write.store(on, std::memory_order_relaxed);
}

uint64_t ofd_shm_kept() noexcept {
  return n_shm_kept.load(std::memory_order_relaxed);
}

int ofd_open(const char* name, sqlite3_file* out, int flags, int* out_flags) {
  auto* f = new (out) ofd_file{};
  f->base.pMethods = nullptr;
  int oflags = O_CLOEXEC | O_NOFOLLOW;
  bool read_only = (flags & SQLITE_OPEN_READONLY) != 0;
  oflags |= read_only ? O_RDONLY : O_RDWR;
  if ((flags & SQLITE_OPEN_CREATE) != 0)
    oflags |= O_CREAT;
  if ((flags & SQLITE_OPEN_EXCLUSIVE) != 0)
    oflags |= O_EXCL;
  int fd = ::open(name, oflags, 0644);
  if (fd < 0 && !read_only && (errno == EACCES || errno == EROFS) &&
      (flags & SQLITE_OPEN_CREATE) == 0) {
    fd = ::open(name, O_CLOEXEC | O_NOFOLLOW | O_RDONLY); // as "unix": read-only after all
    if (fd >= 0) {
      read_only = true;
      flags = (flags & ~SQLITE_OPEN_READWRITE) | SQLITE_OPEN_READONLY;
    }
  }
  if (fd < 0) {
    f->~ofd_file();
    return SQLITE_CANTOPEN;
  }
  f->fd = fd;
  f->name = name;
  f->psow = sqlite3_uri_boolean(name, "psow", 1) != 0;
  if (out_flags != nullptr)
    *out_flags = flags;
  f->base.pMethods = &methods;
  return SQLITE_OK;
}

} // namespace factum::detail
