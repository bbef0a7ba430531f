// ofd_file.cpp: main-database files with open-file-description locks (see ofd_file.hpp).
//
// The database file's locks are SQLite's own (os_unix.c, https://sqlite.org/lockingv3.html), on
// the same bytes; the WAL's are not (https://sqlite.org/walformat.html section 2.3 has SQLite's):
// - database file: PENDING byte 0x40000000, RESERVED the next one, SHARED the 510 after that.
//   SHARED: a read lock on PENDING, then on the SHARED range, then PENDING released. RESERVED:
//   a write lock on RESERVED. EXCLUSIVE: a write lock on PENDING (kept), then on the SHARED
//   range. In WAL mode a connection holds SHARED while it is open; SQLite takes EXCLUSIVE at
//   close to learn whether it is the last connection.
// - -shm file: only its "DMS" byte 128 is locked, and nothing is ever written to it. The
//   wal-index SQLite would map from it lives in heap memory instead (below), so the -shm's
//   DMS byte says which process has the index: the first connection of a process to a file
//   write-locks it (kept while any connection of the process has the WAL open). A process
//   using the "unix" VFS (a sqlite3 shell, an older factum) asks for a read lock on that byte
//   to map the -shm: each refuses the other (SQLITE_BUSY), never share a WAL, and so never
//   disagree on a wal-index. Two factum processes (cluster nodes over one shared entity root)
//   are kept apart the same way: the second one's open fails at once, BUSY, until the first
//   closes the file.
// - the copy byte (ofd_copy_byte, right after the SHARED range): every checkpoint of this VFS
//   locks it for writing with the WAL's CKPT lock, before it writes the database file; a
//   reader copying the file (entity_store::copy_files) holds it for reading, so the database
//   file does not change under the copy (a checkpoint meanwhile gets SQLITE_BUSY and skips).
//
// The wal-index in heap memory: one per database file (device and inode) and process, shared
// by every connection of the process that has the file's WAL open (an entity's owner and the
// runtime's checkpointer), in a registry under a mutex. The WAL locks (xShmLock's eight) are an
// in-memory table with the rules of os_unix.c's unixShmLock. A new index is zeroed, so SQLite
// rebuilds it from the WAL (as after a crash). Against a mapped -shm this saves per activation
// an mmap, a munmap, three ftruncates and some 40 fcntls (measured with runtime_bench's
// activation workload).
// Persistent WAL (SQLITE_FCNTL_PERSIST_WAL, an entity store's owner): the -shm file is kept,
// empty, at the last close, where SQLite would delete it, so the next open creates no file.
// A child of fork() forgets its parent's indexes (pthread_atfork; see forget_registry_in_child).
//
// What differs from "unix": each connection has its own descriptors and its own database
// locks (OFD locks are owned by the open file description), so no process-wide table of open
// files, no global mutex on open, and no file descriptor kept open after a close. Memory-mapped
// I/O of the database (xFetch) is not offered: factum sets mmap_size=0.
//
// Threads: a sqlite3_file is used by one thread at a time (its connection's); a wal-index is
// shared by the threads of its connections (its own mutex for the region table and the lock
// table; SQLite itself orders its reads and writes of the index's contents with its locks and
// xShmBarrier); the registry is any thread's (registry_mu).
#include "file/ofd_file.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
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

constexpr off_t copy_byte = shared_first + shared_size; // see the file comment
static_assert(copy_byte == ofd_copy_byte);
constexpr int ckpt_lock = 1; // SQLite's WAL_CKPT_LOCK

struct ofd_file {
  sqlite3_file base; // pMethods: set once open
  int fd = -1;
  int lock = SQLITE_LOCK_NONE;
  bool persist_wal = false;
  bool read_only = false; // opened O_RDONLY
  bool psow = true;
  const char* name = nullptr;     // SQLite keeps it valid until xClose
  struct wal_index* wi = nullptr; // attached by xShmMap, detached by xShmUnmap or xClose
  uint8_t shared_mask = 0;        // WAL locks this connection holds shared
  uint8_t excl_mask = 0;          // and exclusively
  bool copy_locked = false;       // the copy byte, taken with the CKPT lock by a checkpoint
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

void detach_wal_index(ofd_file* f, bool unlink_shm);

int ofd_io_close(sqlite3_file* p) {
  auto* f = of(p);
  detach_wal_index(f, false);
  int rc = SQLITE_OK;
  if (f->fd >= 0 && ::close(f->fd) != 0 && errno != EINTR)
    rc = SQLITE_IOERR_CLOSE;
  f->~ofd_file();
  return rc;
}

int ofd_io_read(sqlite3_file* p, void* out, int amt, sqlite3_int64 off) {
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

int ofd_io_write(sqlite3_file* p, const void* data, int amt, sqlite3_int64 off) {
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

int ofd_io_truncate(sqlite3_file* p, sqlite3_int64 size) {
  int rc;
  do {
    rc = ::ftruncate(of(p)->fd, size);
  } while (rc < 0 && errno == EINTR);
  return rc == 0 ? SQLITE_OK : SQLITE_IOERR_TRUNCATE;
}

int ofd_io_sync(sqlite3_file* p, int) {
  // fdatasync also writes a changed file size (as SQLite's unix VFS relies on, on Linux).
  return ::fdatasync(of(p)->fd) == 0 ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

int ofd_io_file_size(sqlite3_file* p, sqlite3_int64* size) {
  struct stat st {};
  if (::fstat(of(p)->fd, &st) != 0)
    return SQLITE_IOERR_FSTAT;
  *size = st.st_size;
  return SQLITE_OK;
}

int ofd_io_lock(sqlite3_file* p, int level) {
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

int ofd_io_unlock(sqlite3_file* p, int level) {
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

int ofd_io_check_reserved_lock(sqlite3_file* p, int* out) {
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

int ofd_io_file_control(sqlite3_file* p, int op, void* arg) {
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

int ofd_io_sector_size(sqlite3_file*) {
  return 4096; // SQLITE_DEFAULT_SECTOR_SIZE, as "unix" reports on Linux
}

int ofd_io_device_characteristics(sqlite3_file* p) {
  return of(p)->psow ? SQLITE_IOCAP_POWERSAFE_OVERWRITE : 0;
}

// -- the wal-index: heap memory shared by the connections of this process ---------------------

/// One per database file (device and inode) and process, shared by every connection of the
/// process that has that file's WAL open (an entity's owner and its checkpointer).
struct wal_index {
  std::pair<dev_t, ino_t> id;
  int attached = 0; ///< connections attached (registry_mu)
  int shm_fd = -1;  ///< the -shm file, its DMS byte write-locked while this index exists
  std::mutex mu;    ///< regions and the lock table
  std::vector<std::unique_ptr<char[]>> regions;
  int shared[SQLITE_SHM_NLOCK] = {}; ///< holders of each WAL lock in shared mode
  bool excl[SQLITE_SHM_NLOCK] = {};  ///< each WAL lock held exclusively (by one connection)
};

struct id_hash {
  size_t operator()(const std::pair<dev_t, ino_t>& k) const noexcept {
    return std::hash<uint64_t>{}(static_cast<uint64_t>(k.second) * 0x9e3779b97f4a7c15ULL ^
                                 static_cast<uint64_t>(k.first));
  }
};

std::mutex registry_mu;
std::unordered_map<std::pair<dev_t, ino_t>, wal_index*, id_hash> registry;

/// A child of fork() must not find its parent's wal-indexes: they are copies that the parent
/// goes on changing in its own memory. Forgotten (not freed: the parent's connections, which the
/// child must not use either, still point at them); the child's own connections then ask for
/// the DMS lock, which the parent's descriptors hold, and are refused while the parent has the
/// file open.
void forget_registry_in_child() {
  new (&registry_mu) std::mutex;
  new (&registry) std::unordered_map<std::pair<dev_t, ino_t>, wal_index*, id_hash>;
}

const bool atfork_set = [] {
  ::pthread_atfork(nullptr, nullptr, forget_registry_in_child);
  return true;
}();

/// Set on the thread whose attach_wal_index() another process refused; read and cleared by
/// take_shm_refusal() (the connection's busy handler, on that thread, in the same SQLite call).
thread_local bool shm_refused = false;

/// Attaches f to its file's wal-index, making it (zeroed: SQLite then rebuilds it from the WAL)
/// when this is the first connection of the process. SQLITE_BUSY_TIMEOUT when another process
/// has the file's -shm attached (the DMS byte is not ours to lock).
int attach_wal_index(ofd_file* f) {
  struct stat st {};
  if (::fstat(f->fd, &st) != 0)
    return SQLITE_IOERR_SHMOPEN;
  std::lock_guard<std::mutex> g(registry_mu);
  auto id = std::make_pair(st.st_dev, st.st_ino);
  auto it = registry.find(id);
  if (it == registry.end()) {
    std::string path = f->name;
    path += "-shm";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0777);
    if (fd < 0)
      return SQLITE_CANTOPEN;
    if (int e = set_lock(fd, F_WRLCK, shm_dms, 1); e != 0) {
      ::close(fd);
      // Another process has the file open, and keeps it until it closes it: not the transient
      // race SQLite assumes of a plain SQLITE_BUSY from xShmMap (it would retry for some 10 s,
      // sleeping on the caller's thread). The extended code ends SQLite's own retries, and the
      // flag tells the connection's busy handler not to wait either (take_shm_refusal).
      if (e != EAGAIN && e != EACCES)
        return SQLITE_IOERR_LOCK;
      shm_refused = true;
      return SQLITE_BUSY_TIMEOUT;
    }
    auto* wi = new (std::nothrow) wal_index;
    if (wi == nullptr) {
      ::close(fd);
      return SQLITE_NOMEM;
    }
    wi->id = id;
    wi->shm_fd = fd;
    it = registry.emplace(id, wi).first;
  }
  f->wi = it->second;
  ++f->wi->attached;
  return SQLITE_OK;
}

/// Releases the WAL locks of `mask` that f holds (in either mode) from its index's lock table,
/// and the copy byte when the CKPT lock is among them; 0, or the errno of the copy byte's unlock.
int release_locks(ofd_file* f, uint8_t mask) {
  auto* wi = f->wi;
  bool copy_held = f->copy_locked && (f->excl_mask & mask & (1u << ckpt_lock)) != 0;
  {
    std::lock_guard<std::mutex> g(wi->mu);
    for (int i = 0; i < SQLITE_SHM_NLOCK; ++i) {
      if ((f->excl_mask & mask) >> i & 1)
        wi->excl[i] = false;
      if ((f->shared_mask & mask) >> i & 1)
        --wi->shared[i];
    }
  }
  f->excl_mask &= static_cast<uint8_t>(~mask);
  f->shared_mask &= static_cast<uint8_t>(~mask);
  if (!copy_held)
    return 0;
  f->copy_locked = false;
  return set_lock(f->fd, F_UNLCK, copy_byte, 1);
}

/// Releases f's WAL locks (and the copy byte with the CKPT lock) and detaches it; the last
/// connection of the process frees the index and unlocks the -shm's DMS byte.
void detach_wal_index(ofd_file* f, bool unlink_shm) {
  auto* wi = f->wi;
  if (wi == nullptr)
    return;
  release_locks(f, 0xff);
  f->wi = nullptr;
  std::lock_guard<std::mutex> g(registry_mu);
  if (--wi->attached == 0) {
    registry.erase(wi->id);
    if (unlink_shm) {
      std::string path = f->name;
      path += "-shm";
      ::unlink(path.c_str());
    }
    ::close(wi->shm_fd); // unlocks the DMS byte
    delete wi;
  }
}

int ofd_io_shm_map(sqlite3_file* p, int region, int size, int extend, void volatile** out) {
  auto* f = of(p);
  *out = nullptr;
  if (f->wi == nullptr)
    if (int rc = attach_wal_index(f); rc != SQLITE_OK)
      return rc;
  auto* wi = f->wi;
  std::lock_guard<std::mutex> g(wi->mu);
  auto idx = static_cast<size_t>(region);
  if (idx >= wi->regions.size() || !wi->regions[idx]) {
    if (!extend)
      return SQLITE_OK; // not there yet: *out stays null, as SQLite expects
    if (wi->regions.size() <= idx)
      wi->regions.resize(idx + 1);
    // Zeroed (value-initialised), and aligned for SQLite's 32-bit atomic accesses.
    wi->regions[idx].reset(new (std::nothrow) char[static_cast<size_t>(size)]());
    if (!wi->regions[idx])
      return SQLITE_NOMEM;
  }
  *out = wi->regions[idx].get();
  return SQLITE_OK;
}

/// SQLite's WAL locks, in memory (the rules of os_unix.c's unixShmLock): a shared lock is
/// granted unless another connection holds it exclusively; an exclusive one unless another
/// connection holds it in any mode. Never waits: SQLITE_BUSY, and SQLite retries or gives up.
/// The CKPT lock taken exclusively (every checkpoint, the one at a close included, asks for it
/// before it writes the database file) also takes the copy byte of the database file for
/// writing, and is refused while a reader copies the file (holds that byte for reading).
int ofd_io_shm_lock(sqlite3_file* p, int offset, int n, int flags) {
  auto* f = of(p);
  auto* wi = f->wi;
  if (wi == nullptr || offset < 0 || n < 1 || offset + n > SQLITE_SHM_NLOCK)
    return SQLITE_IOERR_SHMLOCK;
  auto mask = static_cast<uint8_t>(((1u << n) - 1) << offset);
  if ((flags & SQLITE_SHM_UNLOCK) != 0)
    return release_locks(f, mask) == 0 ? SQLITE_OK : SQLITE_IOERR_SHMLOCK;
  if ((flags & SQLITE_SHM_SHARED) != 0) { // n is 1 (SQLite's contract)
    if ((f->shared_mask & mask) != 0)
      return SQLITE_OK;
    std::lock_guard<std::mutex> g(wi->mu);
    if (wi->excl[offset])
      return SQLITE_BUSY;
    ++wi->shared[offset];
    f->shared_mask |= mask;
    return SQLITE_OK;
  }
  std::lock_guard<std::mutex> g(wi->mu);
  for (int i = offset; i < offset + n; ++i)
    if (((f->excl_mask >> i) & 1) == 0 &&
        (wi->excl[i] || wi->shared[i] > ((f->shared_mask >> i) & 1)))
      return SQLITE_BUSY;
  // Only a checkpoint asks for the CKPT lock alone (the rebuild of the index takes it with the
  // locks after it); a read-only connection never checkpoints, and could not lock for writing.
  bool new_ckpt =
    offset == ckpt_lock && n == 1 && !f->read_only && (f->excl_mask & (1u << ckpt_lock)) == 0;
  if (new_ckpt) {
    if (int e = set_lock(f->fd, F_WRLCK, copy_byte, 1); e != 0)
      return busy_or(e, SQLITE_IOERR_SHMLOCK); // a reader is copying the file
    f->copy_locked = true;
  }
  for (int i = offset; i < offset + n; ++i)
    wi->excl[i] = true;
  f->excl_mask |= mask;
  return SQLITE_OK;
}

void ofd_io_shm_barrier(sqlite3_file*) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

int ofd_io_shm_unmap(sqlite3_file* p, int del) {
  // SQLite asks for the deletion only while it holds the database's EXCLUSIVE lock, and never
  // for a persistent WAL (an entity store's owner sets SQLITE_FCNTL_PERSIST_WAL): an entity's
  // -shm stays, empty, and spares the next open a file creation. Deleted by the last
  // connection of this process (the DMS lock says no other process has one).
  auto* f = of(p);
  detach_wal_index(f, del != 0 && !f->persist_wal);
  return SQLITE_OK;
}

int ofd_io_fetch(sqlite3_file*, sqlite3_int64, int, void** out) {
  *out = nullptr; // no memory-mapped reads: SQLite reads through xRead
  return SQLITE_OK;
}

int ofd_io_unfetch(sqlite3_file*, sqlite3_int64, void*) {
  return SQLITE_OK;
}

const sqlite3_io_methods methods = {
  3, // iVersion
  ofd_io_close,
  ofd_io_read,
  ofd_io_write,
  ofd_io_truncate,
  ofd_io_sync,
  ofd_io_file_size,
  ofd_io_lock,
  ofd_io_unlock,
  ofd_io_check_reserved_lock,
  ofd_io_file_control,
  ofd_io_sector_size,
  ofd_io_device_characteristics,
  ofd_io_shm_map,
  ofd_io_shm_lock,
  ofd_io_shm_barrier,
  ofd_io_shm_unmap,
  ofd_io_fetch,
  ofd_io_unfetch,
};

} // namespace

std::size_t ofd_file_size() noexcept {
  return sizeof(ofd_file);
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
  f->read_only = read_only;
  f->name = name;
  f->psow = sqlite3_uri_boolean(name, "psow", 1) != 0;
  if (out_flags != nullptr)
    *out_flags = flags;
  f->base.pMethods = &methods;
  return SQLITE_OK;
}

bool take_shm_refusal() noexcept {
  return std::exchange(shm_refused, false);
}

} // namespace factum::detail
