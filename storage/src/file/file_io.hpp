// file_io.hpp (private to storage/): the few POSIX file steps the entity store, the spare pool
// and the VFS share: whole writes, directory fsyncs, errno -> errc, sibling paths, big-endian
// fields, descriptors closed at scope exit, a damaged database moved aside. Stateless; any
// thread.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"

namespace factum::detail {

/// fsyncs a directory so that its new entries survive power loss: 0, or the errno of the open
/// or of the fsync that failed (the caller must not take the entries for durable then).
inline int sync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return e;
}

/// fdatasyncs the file at `path`: 0, or the errno of the open or of the sync that failed.
inline int sync_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = ::fdatasync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return e;
}

/// Creates `dir` and its missing ancestors; with `sync`, fsyncs the parent of each directory it
/// made, top-down, so that the path survives power loss (a new directory's own entries still
/// need a sync of it). 0, or the errno of what failed.
inline int create_dirs_synced(const std::filesystem::path& dir, bool sync = true) {
  std::error_code ec;
  std::vector<std::filesystem::path> made;
  for (auto d = dir; !d.empty() && !std::filesystem::exists(d, ec); d = d.parent_path())
    made.push_back(d);
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return ec.value();
  if (sync)
    for (auto it = made.rbegin(); it != made.rend(); ++it)
      if (int e = sync_dir(it->parent_path()); e != 0)
        return e;
  return 0;
}

/// The code for an operating-system error: a read-only file system and a full disk are named.
inline errc errno_code(int e) {
  return e == EROFS ? errc::read_only : e == ENOSPC || e == EDQUOT ? errc::full : errc::io_error;
}

/// Writes all of `bytes` to `fd`; 0 or an errno.
inline int write_all(int fd, std::string_view bytes) {
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n > 0)
      off += static_cast<size_t>(n);
    else if (n == 0)
      return EIO;
    else if (errno != EINTR)
      return errno;
  }
  return 0;
}

/// Closes a descriptor when it goes out of scope (a negative one is left alone).
class scoped_fd {
 public:
  explicit scoped_fd(int fd) noexcept : fd_(fd) {}
  ~scoped_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  scoped_fd(const scoped_fd&) = delete;
  scoped_fd& operator=(const scoped_fd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

/// The big-endian 32-bit number at `p` (the byte order of SQLite's file headers and WAL frames).
inline uint32_t be32(const void* p) {
  auto* b = static_cast<const unsigned char*>(p);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

/// `path` with `suffix` appended to its last component (`x.db` + `-wal` = `x.db-wal`).
inline std::filesystem::path with_suffix(std::filesystem::path path, const char* suffix) {
  return path += suffix;
}

/// Moves a damaged database `base` (with its -wal and -shm) aside to `base.corrupt-<ms>` for a
/// post-mortem; `what` names it in errors. The -wal and -shm go first: a database renamed
/// without its WAL cannot pick up the WAL of a fresh one by accident. The new path.
inline result<std::filesystem::path> set_aside_database(const std::filesystem::path& base,
                                                        std::string_view what) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count();
  auto aside = base;
  aside += ".corrupt-" + std::to_string(ms);
  for (const char* suffix : {"-wal", "-shm", ""}) {
    auto from = with_suffix(base, suffix);
    std::error_code ec;
    if (!std::filesystem::exists(from, ec))
      continue;
    std::filesystem::rename(from, with_suffix(aside, suffix), ec);
    if (ec)
      return status{errc::io_error, std::string(what) + ": cannot move " + from.string() +
                                      " aside: " + ec.message()};
  }
  return aside;
}

} // namespace factum::detail
