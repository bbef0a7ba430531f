// store_copy.cpp: consistent copies of an entity file while a process may write it (see
// entity_store::copy_files and refresh_copy, and wal_copy.hpp): the copy protocol and the walk
// of a -wal file's frames (docs/storage-format.md section 2). Stateless; any thread, on files that
// other threads and processes may be using.
#include "factum/storage/entity_store.hpp"
#include "factum/storage/wal_copy.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "file/file_io.hpp"
#include "file/ofd_file.hpp"

namespace fs = std::filesystem;

namespace factum {

// -- copies -------------------------------------------------------------------------------------

std::string read_at(const fs::path& path, size_t n, int64_t offset) {
  std::string b(n, '\0');
  detail::scoped_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return {};
  ssize_t got = ::pread(fd.get(), b.data(), n, static_cast<off_t>(offset));
  b.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return b;
}

namespace {

/// The first 32 bytes of a -wal file (its header: magic, page size, checkpoint sequence and
/// salts, checksum), or fewer when it is shorter or missing.
std::string wal_header(const fs::path& wal) {
  return read_at(wal, 32, 0);
}

/// SQLite's WAL checksum (its walChecksumBytes) over `n` bytes (a multiple of 8), continuing
/// from `s`: pairs of 32-bit words in the byte order the header's magic names.
void wal_checksum(bool big_endian, const unsigned char* p, size_t n, uint32_t s[2]) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint32_t a, b;
    if (big_endian) {
      a = detail::be32(p + i);
      b = detail::be32(p + i + 4);
    } else {
      a = uint32_t{p[i]} | uint32_t{p[i + 1]} << 8 | uint32_t{p[i + 2]} << 16 |
          uint32_t{p[i + 3]} << 24;
      b = uint32_t{p[i + 4]} | uint32_t{p[i + 5]} << 8 | uint32_t{p[i + 6]} << 16 |
          uint32_t{p[i + 7]} << 24;
    }
    s[0] += a + s[1];
    s[1] += b + s[0];
  }
}

} // namespace

// The walk: the offset after the last commit frame (its header's database size is not 0)
// reached through frames whose salts are the header's and whose checksums hold, as SQLite's
// recovery decides. Frames up to there never change while the generation lasts (SQLite rewrites
// in place only frames of an unfinished transaction), so what a later commit adds starts there.
int64_t wal_commit_end(const fs::path& wal) {
  detail::scoped_fd fd(::open(wal.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return 0;
  unsigned char h[32];
  if (::pread(fd.get(), h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
    return 0;
  uint32_t magic = detail::be32(h), page = detail::be32(h + 8);
  if ((magic & 0xfffffffe) != 0x377f0682 || detail::be32(h + 4) != 3007000 || page < 512 ||
      page > 65536 || (page & (page - 1)) != 0)
    return 0;
  bool big_endian = (magic & 1) != 0;
  uint32_t sum[2] = {0, 0};
  wal_checksum(big_endian, h, 24, sum);
  if (sum[0] != detail::be32(h + 24) || sum[1] != detail::be32(h + 28))
    return 0;
  std::vector<unsigned char> frame(24 + page);
  int64_t off = 32, committed = 32;
  while (::pread(fd.get(), frame.data(), frame.size(), off) == static_cast<ssize_t>(frame.size())) {
    if (detail::be32(frame.data()) == 0 || std::memcmp(frame.data() + 8, h + 16, 8) != 0)
      break; // no page number, or another generation's salts: not a frame of this one
    wal_checksum(big_endian, frame.data(), 8, sum);
    wal_checksum(big_endian, frame.data() + 24, page, sum);
    if (sum[0] != detail::be32(frame.data() + 16) || sum[1] != detail::be32(frame.data() + 20))
      break; // torn or stale: recovery stops here
    off += static_cast<int64_t>(frame.size());
    if (detail::be32(frame.data() + 4) != 0)
      committed = off;
  }
  return committed;
}

status entity_store::copy_files(const fs::path& file, const fs::path& to) {
  // The protocol (docs/storage-format.md section 2): under a read lock on the copy byte no
  // checkpoint writes the database file, so one copy of it is one state. Commits append to
  // the WAL meanwhile, and the copy's recovery stops at the first frame that is not whole
  // (checksums), at a commit. A WAL restart (after a complete checkpoint: the database holds
  // every page of the old generation) overwrites frames from the start: a copy that mixed the
  // generations would replay an old prefix over newer pages, so the WAL header (whose salts a
  // restart always changes) must be the same before and after the WAL's copy.
  detail::scoped_fd lock_fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  int fd = lock_fd.get(); // closing it releases the lock
  if (fd < 0)
    return {errno == ENOENT ? errc::not_found : errc::io_error,
            "cannot open " + file.string() + ": " + std::strerror(errno)};
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = detail::ofd_copy_byte;
  fl.l_len = 1;
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_SETLKW, &fl); // waits only for a checkpoint in progress
  } while (rc != 0 && errno == EINTR);
  if (rc != 0)
    return {errc::io_error, "cannot lock " + file.string() + ": " + std::strerror(errno)};
  // `to` is replaced, never written into: a name removed first and a new file made, so that a
  // hard link to an earlier copy (factum backup's unchanged files) keeps that copy's bytes.
  std::error_code ec;
  fs::remove(to, ec);
  if (ec)
    return {errc::io_error, "cannot replace " + to.string() + ": " + ec.message()};
  fs::copy_file(file, to, ec);
  if (ec)
    return {errc::io_error, "cannot copy " + file.string() + ": " + ec.message()};
  auto wal = detail::with_suffix(file, "-wal");
  auto wal_to = detail::with_suffix(to, "-wal");
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto before = wal_header(wal);
    fs::remove(wal_to, ec);
    if (before.empty() && !fs::exists(wal, ec))
      return status::ok(); // no WAL: the database file is the whole state
    fs::copy_file(wal, wal_to, fs::copy_options::overwrite_existing, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      return {errc::io_error, "cannot copy " + wal.string() + ": " + ec.message()};
    if (before == wal_header(wal) && before == wal_header(wal_to))
      return status::ok();
  }
  return {errc::busy, "the WAL of " + file.string() + " restarted during every copy"};
}

result<bool> entity_store::refresh_copy(const fs::path& file, const fs::path& to) {
  auto whole = [&]() -> result<bool> {
    if (auto st = copy_files(file, to); !st)
      return st;
    return true;
  };
  auto wal = detail::with_suffix(file, "-wal");
  auto wal_to = detail::with_suffix(to, "-wal");
  std::error_code ec;
  if (!fs::exists(to, ec))
    return whole();
  // The copy's WAL is still the source's generation when the headers match (a restart always
  // changes the salts). Its frames up to its last whole commit are the source's too; what
  // follows (commits since, or a tail the copy caught half-written) is copied again. A
  // checkpoint since the copy changed only the source's database file, whose pages the copy's
  // WAL holds newer or equal: the copy's old database file and its whole WAL are one state.
  auto head = wal_header(wal_to);
  int64_t from = wal_commit_end(wal_to); // 0 when the copy has no valid WAL header
  if (from < 32 || wal_header(wal) != head)
    return whole();
  detail::scoped_fd in_fd(::open(wal.c_str(), O_RDONLY | O_CLOEXEC));
  int in = in_fd.get();
  if (in < 0)
    return errno == ENOENT
             ? whole()
             : status{errc::io_error, "cannot open " + wal.string() + ": " + std::strerror(errno)};
  detail::scoped_fd out_fd(::open(wal_to.c_str(), O_WRONLY | O_CLOEXEC));
  int out = out_fd.get();
  if (out < 0)
    return status{errc::io_error, "cannot open " + wal_to.string() + ": " + std::strerror(errno)};
  if (::lseek(out, from, SEEK_SET) < 0)
    return status{errc::io_error, "cannot seek " + wal_to.string() + ": " + std::strerror(errno)};
  std::vector<char> buf(1 << 20);
  int64_t off = from;
  for (;;) {
    ssize_t n = ::pread(in, buf.data(), buf.size(), off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return status{errc::io_error, "cannot read " + wal.string() + ": " + std::strerror(errno)};
    if (n == 0)
      break;
    if (int e = detail::write_all(out, {buf.data(), static_cast<size_t>(n)}); e != 0)
      return status{detail::errno_code(e),
                    "cannot write " + wal_to.string() + ": " + std::strerror(e)};
    off += n;
  }
  if (::ftruncate(out, off) != 0) // nothing of the copy's old tail past the source's end
    return status{errc::io_error,
                  "cannot truncate " + wal_to.string() + ": " + std::strerror(errno)};
  if (wal_header(wal) != head)
    return whole(); // restarted while being read: the bytes may mix generations
  return false;
}

} // namespace factum
