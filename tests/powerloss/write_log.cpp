// write_log.cpp: the write log (write_log.hpp). Defines, in the test executable, the libc calls
// through which factum, SQLite and libstdc++ change files; each forwards to libc's own
// (dlsym(RTLD_NEXT)) and, while recording, appends a record under mu. Calls made inside libc
// (fopen's open, remove's unlink) do not come here: the ones factum's code paths reach are
// listed below, and a test checks that a plain workload's files are all in the log. The fault
// plan (set_faults()) is applied here too, under mu: which calls fail, and each descriptor's
// view of its file's writeback errors.
// Any thread; recording state is written once by start() before the code under test runs.
#include "write_log.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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

// The fault plan (set_faults()), under mu. Empty: every call passes as it would without it.
struct planned {
  fault f;
  uint64_t seen = 0; // matching calls so far
};
std::vector<planned> plan;
int notify_fd = -1;
int32_t notify_value = 0;
// Writeback errors (errseq): each file's count of errors, and for each descriptor opened under
// the root while recording, its file and the count it has seen. Under mu.
std::map<uint64_t, uint64_t> wb_errors; // inode -> writeback errors so far
struct descriptor {
  uint64_t ino = 0;
  uint64_t seen = 0;
};
std::map<int, descriptor> descriptors;

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
  bool was = inside;
  inside_guard() { inside = true; }
  ~inside_guard() { inside = was; }
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

// -- the fault plan -------------------------------------------------------------------------------

// The path `fd` names now ("" when unknown).
std::string fd_path(int fd) {
  char link[4096];
  auto proc = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string();
}

bool planned_for(fault::call what) {
  for (auto& p : plan)
    if (p.f.what == what)
      return true;
  return false;
}

// Counts a call of kind `what` on `path` against every fault that matches it; the index of the
// first fault that fails it, or -1. Under mu.
int fails(fault::call what, const std::string& path, int accmode = -1) {
  int hit = -1;
  for (size_t i = 0; i < plan.size(); ++i) {
    auto& p = plan[i];
    if (p.f.what != what || path.find(p.f.path_has) == std::string::npos ||
        path.size() < p.f.path_ends.size() ||
        path.compare(path.size() - p.f.path_ends.size(), std::string::npos, p.f.path_ends) != 0 ||
        (p.f.accmode >= 0 && accmode != p.f.accmode))
      continue;
    ++p.seen;
    if (hit < 0 && p.seen >= p.f.first && p.seen < p.f.first + p.f.count)
      hit = static_cast<int>(i);
  }
  return hit;
}

// Logs the failure fault `i` made on `path` and tells the notify descriptor. Under mu.
void injected(int i, const std::string& path, uint64_t ino, uint64_t result) {
  append(op::injected, ino, static_cast<uint64_t>(i), plan[i].f.what, result, path);
  if (notify_fd >= 0) {
    FACTUM_REAL(write);
    (void)!real_write(notify_fd, &notify_value, sizeof notify_value);
  }
}

// Remembers which file descriptor `fd` (just opened) is on, and that it has seen its file's
// writeback errors so far. Under mu.
void opened(int fd) {
  descriptors.erase(fd);
  if (fd < 0)
    return;
  if (uint64_t ino = inode_of(fd, true))
    descriptors[fd] = {ino, wb_errors[ino]};
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
int logged_open(int dirfd, const char* path, const std::string& abs, int flags, mode_t mode,
                bool at) {
  FACTUM_REAL(openat);
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
  std::string abs = absolute(dirfd, path);
  if (!under_root(abs))
    return logged_open(dirfd, path, abs, flags, mode, at);
  if (int i = fails(fault::open, abs, flags & O_ACCMODE); i >= 0) {
    inside_guard ig;
    injected(i, abs, 0, static_cast<uint64_t>(plan[i].f.error));
    errno = plan[i].f.error;
    return -1;
  }
  int fd = logged_open(dirfd, path, abs, flags, mode, at);
  int saved = errno;
  opened(fd);
  errno = saved;
  return fd;
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

// Before the sync: an injected failure's write error (fault::sync). Under mu. The fault's
// index, or -1.
int sync_fault(int fd, uint64_t ino) {
  if (!planned_for(fault::sync))
    return -1;
  auto path = fd_path(fd);
  int i = under_root(path) ? fails(fault::sync, path) : -1;
  if (i < 0)
    return -1;
  injected(i, path, ino, static_cast<uint64_t>(plan[i].f.error));
  append(op::write_error, ino, 0, 0, 0);
  uint64_t n = ++wb_errors[ino];
  if (auto d = descriptors.find(fd); d != descriptors.end() && d->second.ino == ino)
    d->second.seen = n; // this call reports it
  return i;
}

// After the sync returned `rc` (errno `err`): what the caller learns, and its record. A sync
// that returned 0 on a descriptor that has not seen its file's last writeback error reports it
// (errseq); a real failure is a writeback error of its own. Under mu.
int sync_result(int fd, uint64_t ino, uint64_t begin, int rc, int& err, int injected_fault) {
  auto d = descriptors.find(fd);
  if (d != descriptors.end() && d->second.ino != ino)
    d = descriptors.end();
  if (injected_fault >= 0) {
    rc = -1;
    err = plan[injected_fault].f.error;
  } else if (rc == 0 && d != descriptors.end() && d->second.seen < wb_errors[ino]) {
    d->second.seen = wb_errors[ino];
    rc = -1;
    err = EIO;
  } else if (rc != 0) {
    append(op::write_error, ino, 0, 0, 0);
    uint64_t n = ++wb_errors[ino];
    if (d != descriptors.end())
      d->second.seen = n;
  }
  if (rc == 0)
    append(op::sync_end, ino, 0, begin, 0);
  else
    append(op::sync_failed, ino, 0, begin, static_cast<uint64_t>(err));
  return rc;
}

int do_sync(int fd, bool data_only) {
  FACTUM_REAL(fsync);
  FACTUM_REAL(fdatasync);
  if (!active())
    return data_only ? real_fdatasync(fd) : real_fsync(fd);
  uint64_t ino = 0, begin = 0;
  int fault_index = -1;
  {
    std::lock_guard<std::mutex> g(mu);
    inside_guard ig;
    ino = inode_of(fd, true);
    if (ino) {
      fault_index = sync_fault(fd, ino);
      begin = append(op::sync_begin, ino, 0, 0, 0);
    }
  }
  int rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
  int err = errno;
  if (ino) {
    std::lock_guard<std::mutex> g(mu);
    inside_guard ig;
    rc = sync_result(fd, ino, begin, rc, err, fault_index);
  }
  errno = err;
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

// Whether a write of `n` bytes to `fd` fails (fault::write): the fault's index, or -1. A fault
// with an errno sets it (nothing is to be written); a short one leaves the caller to write half
// of the bytes. Under mu.
int write_fault(int fd, size_t n) {
  if (n == 0 || !planned_for(fault::write))
    return -1;
  auto path = fd_path(fd);
  int i = under_root(path) ? fails(fault::write, path) : -1;
  if (i < 0)
    return -1;
  int e = plan[i].f.error;
  injected(i, path, inode_of(fd), e != 0 ? static_cast<uint64_t>(e) : std::max<size_t>(1, n / 2));
  errno = e;
  return i;
}

ssize_t do_pwrite(int fd, const void* buf, size_t n, off_t off) {
  FACTUM_REAL(pwrite64);
  if (!active())
    return real_pwrite64(fd, buf, n, off);
  std::lock_guard<std::mutex> g(mu);
  if (int i = write_fault(fd, n); i >= 0) {
    if (plan[i].f.error != 0)
      return -1;
    n = std::max<size_t>(1, n / 2);
  }
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
  if (int i = write_fault(fd, n); i >= 0) {
    if (plan[i].f.error != 0)
      return -1;
    n = std::max<size_t>(1, n / 2);
  }
  ssize_t rc = real_write(fd, buf, n);
  if (rc > 0 && off >= 0) {
    int saved = errno;
    log_write(fd, buf, static_cast<size_t>(rc), off);
    errno = saved;
  }
  return rc;
}

// sendfile and copy_file_range: the kernel copies `rc` bytes from `in` to `out`
// (std::filesystem::copy_file does it with sendfile). Logged as a write to `out` at its
// position (or *out_off) of the bytes read back from `in` where the copy took them. The fault
// plan does not reach these calls.
ssize_t do_copy_range(int out, int in, off_t* in_off, off_t* out_off, size_t n, bool sendfile,
                      unsigned flags) {
  FACTUM_REAL(sendfile64);
  FACTUM_REAL(copy_file_range);
  auto call = [&] {
    return sendfile ? real_sendfile64(out, in, in_off, n)
                    : real_copy_file_range(in, in_off, out, out_off, n, flags);
  };
  if (!active())
    return call();
  std::lock_guard<std::mutex> g(mu);
  inside_guard ig;
  off_t from = in_off ? *in_off : ::lseek(in, 0, SEEK_CUR);
  off_t to = out_off ? *out_off : ::lseek(out, 0, SEEK_CUR);
  ssize_t rc = call();
  if (rc > 0 && from >= 0 && to >= 0 && inode_of(out)) {
    int saved = errno;
    std::string buf(static_cast<size_t>(rc), '\0');
    ssize_t got = 0;
    while (got < rc) {
      ssize_t k = ::pread(in, buf.data() + got, static_cast<size_t>(rc - got), from + got);
      if (k <= 0) {
        std::fprintf(stderr, "write_log: cannot read back a copied range: %s\n",
                     std::strerror(errno));
        std::abort();
      }
      got += k;
    }
    log_write(out, buf.data(), buf.size(), to);
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

void set_faults(std::vector<fault> faults, int notify, int32_t value) {
  std::lock_guard<std::mutex> g(mu);
  plan.clear();
  for (auto& f : faults)
    plan.push_back({std::move(f), 0});
  notify_fd = notify;
  notify_value = value;
}

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

ssize_t sendfile(int out, int in, off_t* offset, size_t count) {
  return do_copy_range(out, in, offset, nullptr, count, true, 0);
}

ssize_t sendfile64(int out, int in, off64_t* offset, size_t count) {
  return do_copy_range(out, in, offset, nullptr, count, true, 0);
}

ssize_t copy_file_range(int in, off64_t* in_off, int out, off64_t* out_off, size_t n,
                        unsigned flags) {
  return do_copy_range(out, in, in_off, out_off, n, false, flags);
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
