// write_log.cpp: the write log (write_log.hpp). Defines, in the test executable, the libc calls
// through which factum, SQLite and libstdc++ change files; each forwards to libc's own
// (dlsym(RTLD_NEXT)) and, while recording, appends a record under mu. Calls made inside libc
// (fopen's open, remove's unlink) do not come here: the ones factum's code paths reach are
// listed below, and a test checks that a plain workload's files are all in the log.
// Any thread; recording state is written once by start() before the code under test runs.
#include "write_log.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace factum::powerloss {

namespace {

std::atomic<bool> recording{false};
std::mutex mu;            // orders the log; held across each change and its record
int log_fd = -1;          // the log, written with libc's write
uint64_t next_seq = 0;    // the next record's seq, under mu
std::string root_prefix;  // "<root>/"
thread_local bool inside; // a call made by the log itself passes straight through

template <class F> F real(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    std::fprintf(stderr, "write_log: no libc symbol %s\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(p);
}

#define FACTUM_REAL(name) static auto real_##name = real<decltype(&::name)>(#name)

// Whether this call is to be logged: recording, and not a call the log makes itself.
bool active() {
  return recording.load(std::memory_order_acquire) && !inside;
}

struct inside_guard {
  inside_guard() { inside = true; }
  ~inside_guard() { inside = false; }
};

// Appends one record; under mu. Returns its seq.
uint64_t append(op kind, uint64_t ino, uint64_t dir, uint64_t offset, uint64_t len,
                const std::string& path = {}, const void* data = nullptr, size_t data_len = 0) {
  FACTUM_REAL(write);
  record_header h;
  h.kind = static_cast<uint8_t>(kind);
  h.ino = ino;
  h.dir = dir;
  h.offset = offset;
  h.len = len;
  h.path_len = static_cast<uint32_t>(path.size());
  h.data_len = static_cast<uint32_t>(data_len);
  std::string buf(reinterpret_cast<const char*>(&h), sizeof h);
  buf += path;
  if (data_len)
    buf.append(static_cast<const char*>(data), data_len);
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = real_write(log_fd, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::fprintf(stderr, "write_log: cannot append to the log: %s\n", std::strerror(errno));
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  return next_seq++;
}

// The inode of `fd` if it is a regular file (or, with dirs, a directory); 0 otherwise.
uint64_t inode_of(int fd, bool dirs = false) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return 0;
  if (S_ISREG(st.st_mode) || (dirs && S_ISDIR(st.st_mode)))
    return st.st_ino;
  return 0;
}

// `path` made absolute against `dirfd` and lexically normal.
std::string absolute(int dirfd, const char* path) {
  std::string p = path;
  if (p.empty() || p[0] != '/') {
    std::string base;
    if (dirfd == AT_FDCWD) {
      char cwd[4096];
      if (::getcwd(cwd, sizeof cwd))
        base = cwd;
    } else {
      char link[4096];
      auto proc = "/proc/self/fd/" + std::to_string(dirfd);
      ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
      if (n > 0)
        base.assign(link, static_cast<size_t>(n));
    }
    p = base + "/" + p;
  }
  return std::filesystem::path(p).lexically_normal().string();
}

bool under_root(const std::string& abs) {
  return abs.compare(0, root_prefix.size(), root_prefix) == 0;
}

// The inode of `abs` itself (not followed), 0 if absent.
uint64_t lstat_ino(const std::string& abs, bool* is_dir = nullptr) {
  struct stat st {};
  if (::lstat(abs.c_str(), &st) != 0)
    return 0;
  if (is_dir)
    *is_dir = S_ISDIR(st.st_mode);
  return st.st_ino;
}

uint64_t parent_ino(const std::string& abs) {
  return lstat_ino(std::filesystem::path(abs).parent_path().string());
}

// Logs a write of `n` bytes of `data` at `off` of `fd`; under mu.
void log_write(int fd, const void* data, size_t n, off_t off) {
  uint64_t ino = inode_of(fd);
  if (!ino || n == 0)
    return;
  auto* b = static_cast<const unsigned char*>(data);
  bool zero = true;
  for (size_t i = 0; i < n && zero; ++i)
    zero = b[i] == 0;
  if (zero)
    append(op::zeros, ino, 0, static_cast<uint64_t>(off), n);
  else
    append(op::write, ino, 0, static_cast<uint64_t>(off), n, {}, data, n);
}

// What an open with these flags changes: a new name, or a truncation. Under mu.
int logged_open(int dirfd, const char* path, int flags, mode_t mode, bool at) {
  FACTUM_REAL(openat);
  std::string abs = absolute(dirfd, path);
  bool tracked = under_root(abs) && (flags & (O_CREAT | O_TRUNC));
  bool existed = tracked && lstat_ino(abs) != 0;
  int fd = real_openat(at ? dirfd : AT_FDCWD, path, flags, mode);
  if (fd < 0 || !tracked)
    return fd;
  inside_guard g;
  uint64_t ino = inode_of(fd);
  if (!existed && ino)
    append(op::add_name, ino, parent_ino(abs), 1, 0, abs);
  else if (existed && ino && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY)
    append(op::truncate, ino, 0, 0, 0);
  return fd;
}

int do_open(int dirfd, const char* path, int flags, mode_t mode, bool at) {
  if (!active()) {
    FACTUM_REAL(openat);
    return real_openat(at ? dirfd : AT_FDCWD, path, flags, mode);
  }
  std::lock_guard<std::mutex> g(mu);
  return logged_open(dirfd, path, flags, mode, at);
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

int do_sync(int fd, bool data_only) {
  FACTUM_REAL(fsync);
  FACTUM_REAL(fdatasync);
  if (!active())
    return data_only ? real_fdatasync(fd) : real_fsync(fd);
  uint64_t ino = 0, begin = 0;
  {
    std::lock_guard<std::mutex> g(mu);
    inside_guard ig;
    ino = inode_of(fd, true);
    if (ino)
      begin = append(op::sync_begin, ino, 0, 0, 0);
  }
  int rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
  if (rc == 0 && ino) {
    int saved = errno;
    std::lock_guard<std::mutex> g(mu);
    inside_guard ig;
    append(op::sync_end, ino, 0, begin, 0);
    errno = saved;
  }
  return rc;
}

// rename/renameat/renameat2: the new name first, then the old one dropped.
int do_rename(int olddir, const char* from, int newdir, const char* to, unsigned flags) {
  FACTUM_REAL(renameat2);
  if (!active())
    return real_renameat2(olddir, from, newdir, to, flags);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  std::string a = absolute(olddir, from), b = absolute(newdir, to);
  bool dir = false;
  uint64_t ino = lstat_ino(a, &dir);
  uint64_t other = (flags & RENAME_EXCHANGE) ? lstat_ino(b) : 0;
  int rc = real_renameat2(olddir, from, newdir, to, flags);
  if (rc != 0 || !ino)
    return rc;
  int saved = errno;
  if (under_root(b))
    append(op::add_name, ino, parent_ino(b), 0, dir ? 1 : 0, b);
  if (flags & RENAME_EXCHANGE) {
    if (under_root(a))
      append(op::add_name, other, parent_ino(a), 0, 0, a);
  } else if (under_root(a)) {
    append(op::drop_name, 0, parent_ino(a), 0, 0, a);
  }
  errno = saved;
  return rc;
}

int do_unlink(int dirfd, const char* path, bool dir) {
  FACTUM_REAL(unlinkat);
  int flags = dir ? AT_REMOVEDIR : 0;
  if (!active())
    return real_unlinkat(dirfd, path, flags);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  std::string abs = absolute(dirfd, path);
  int rc = real_unlinkat(dirfd, path, flags);
  if (rc == 0 && under_root(abs)) {
    int saved = errno;
    append(op::drop_name, 0, parent_ino(abs), 0, 0, abs);
    errno = saved;
  }
  return rc;
}

int do_mkdir(int dirfd, const char* path, mode_t mode) {
  FACTUM_REAL(mkdirat);
  if (!active())
    return real_mkdirat(dirfd, path, mode);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  int rc = real_mkdirat(dirfd, path, mode);
  std::string abs = absolute(dirfd, path);
  if (rc == 0 && under_root(abs)) {
    int saved = errno;
    append(op::add_name, lstat_ino(abs), parent_ino(abs), 1, 1, abs);
    errno = saved;
  }
  return rc;
}

int do_link(int olddir, const char* from, int newdir, const char* to, int flags) {
  FACTUM_REAL(linkat);
  if (!active())
    return real_linkat(olddir, from, newdir, to, flags);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  int rc = real_linkat(olddir, from, newdir, to, flags);
  std::string b = absolute(newdir, to);
  if (rc == 0 && under_root(b)) {
    int saved = errno;
    append(op::add_name, lstat_ino(b), parent_ino(b), 0, 0, b);
    errno = saved;
  }
  return rc;
}

ssize_t do_pwrite(int fd, const void* buf, size_t n, off_t off) {
  FACTUM_REAL(pwrite64);
  if (!active())
    return real_pwrite64(fd, buf, n, off);
  std::lock_guard<std::mutex> g(mu);
  ssize_t rc = real_pwrite64(fd, buf, n, off);
  if (rc > 0) {
    int saved = errno;
    inside_guard ig;
    log_write(fd, buf, static_cast<size_t>(rc), off);
    errno = saved;
  }
  return rc;
}

// A write at the descriptor's position (or its end, with O_APPEND).
ssize_t do_write(int fd, const void* buf, size_t n) {
  FACTUM_REAL(write);
  if (!active())
    return real_write(fd, buf, n);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  off_t off = -1;
  if (inode_of(fd)) {
    struct stat st {};
    off = (::fcntl(fd, F_GETFL) & O_APPEND) && ::fstat(fd, &st) == 0 ? st.st_size
                                                                     : ::lseek(fd, 0, SEEK_CUR);
  }
  ssize_t rc = real_write(fd, buf, n);
  if (rc > 0 && off >= 0) {
    int saved = errno;
    log_write(fd, buf, static_cast<size_t>(rc), off);
    errno = saved;
  }
  return rc;
}

std::string gather(const struct iovec* iov, int cnt) {
  std::string all;
  for (int i = 0; i < cnt; ++i)
    all.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return all;
}

int do_truncate(int fd, off_t size) {
  FACTUM_REAL(ftruncate64);
  if (!active())
    return real_ftruncate64(fd, size);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  int rc = real_ftruncate64(fd, size);
  uint64_t ino = rc == 0 ? inode_of(fd) : 0;
  if (ino) {
    int saved = errno;
    append(op::truncate, ino, 0, static_cast<uint64_t>(size), 0);
    errno = saved;
  }
  return rc;
}

int do_fallocate(int fd, int mode, off_t off, off_t len) {
  FACTUM_REAL(fallocate64);
  if (!active())
    return real_fallocate64(fd, mode, off, len);
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  struct stat before {};
  ::fstat(fd, &before);
  int rc = real_fallocate64(fd, mode, off, len);
  uint64_t ino = rc == 0 ? inode_of(fd) : 0;
  if (ino) {
    int saved = errno;
    if (mode != 0) {
      std::fprintf(stderr, "write_log: fallocate mode %d is not modelled\n", mode);
      std::abort();
    }
    if (off + len > before.st_size)
      append(op::zeros, ino, 0, static_cast<uint64_t>(before.st_size),
             static_cast<uint64_t>(off + len - before.st_size));
    errno = saved;
  }
  return rc;
}

} // namespace

void start(const std::filesystem::path& log, const std::filesystem::path& root, int control) {
  FACTUM_REAL(openat);
  log_fd = real_openat(AT_FDCWD, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    std::fprintf(stderr, "write_log: cannot create %s: %s\n", log.c_str(), std::strerror(errno));
    std::abort();
  }
  root_prefix = std::filesystem::path(root).lexically_normal().string();
  if (root_prefix.empty() || root_prefix.back() != '/')
    root_prefix += '/';
  recording.store(true, std::memory_order_release);
  if (control >= 0)
    std::thread([control] {
      char c = 0;
      while (::read(control, &c, 1) < 0 && errno == EINTR) {
      }
      mu.lock(); // for good: the power is off
      FACTUM_REAL(write);
      (void)!real_write(control, &c, 1);
      for (;;)
        ::pause();
    }).detach();
}

bool freeze(int control) {
  char c = 1;
  if (::write(control, &c, 1) != 1)
    return false;
  ssize_t n;
  while ((n = ::read(control, &c, 1)) < 0 && errno == EINTR) {
  }
  return n == 1;
}

} // namespace factum::powerloss

// -- the calls the process makes ------------------------------------------------------------------

using namespace factum::powerloss;

extern "C" {

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(AT_FDCWD, path, flags, mode, false);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(AT_FDCWD, path, flags, mode, false);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(dirfd, path, flags, mode, true);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(dirfd, path, flags, mode, true);
}

int creat(const char* path, mode_t mode) {
  return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode, false);
}

ssize_t write(int fd, const void* buf, size_t n) {
  return do_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  if (!active()) {
    FACTUM_REAL(writev);
    return real_writev(fd, iov, cnt);
  }
  auto all = gather(iov, cnt);
  return do_write(fd, all.data(), all.size());
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  return do_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  return do_pwrite(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (!active()) {
    FACTUM_REAL(pwritev);
    return real_pwritev(fd, iov, cnt, off);
  }
  auto all = gather(iov, cnt);
  return do_pwrite(fd, all.data(), all.size(), off);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) {
  return pwritev(fd, iov, cnt, off);
}

int ftruncate(int fd, off_t size) {
  return do_truncate(fd, size);
}

int ftruncate64(int fd, off_t size) {
  return do_truncate(fd, size);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
  return do_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len) {
  return do_fallocate(fd, mode, off, len);
}

int fsync(int fd) {
  return do_sync(fd, false);
}

int fdatasync(int fd) {
  return do_sync(fd, true);
}

int rename(const char* from, const char* to) {
  return do_rename(AT_FDCWD, from, AT_FDCWD, to, 0);
}

int renameat(int olddir, const char* from, int newdir, const char* to) {
  return do_rename(olddir, from, newdir, to, 0);
}

int renameat2(int olddir, const char* from, int newdir, const char* to, unsigned flags) {
  return do_rename(olddir, from, newdir, to, flags);
}

int unlink(const char* path) {
  return do_unlink(AT_FDCWD, path, false);
}

int unlinkat(int dirfd, const char* path, int flags) {
  return do_unlink(dirfd, path, (flags & AT_REMOVEDIR) != 0);
}

int rmdir(const char* path) {
  return do_unlink(AT_FDCWD, path, true);
}

int remove(const char* path) {
  struct stat st {};
  bool dir = ::lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
  return do_unlink(AT_FDCWD, path, dir);
}

int mkdir(const char* path, mode_t mode) {
  return do_mkdir(AT_FDCWD, path, mode);
}

int mkdirat(int dirfd, const char* path, mode_t mode) {
  return do_mkdir(dirfd, path, mode);
}

int link(const char* from, const char* to) {
  return do_link(AT_FDCWD, from, AT_FDCWD, to, 0);
}

int linkat(int olddir, const char* from, int newdir, const char* to, int flags) {
  return do_link(olddir, from, newdir, to, flags);
}

} // extern "C"
