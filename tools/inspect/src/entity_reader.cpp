// entity_reader.cpp: read-only opening of entity files that leaves them untouched (see
// entity_reader.hpp). Used by the one thread that runs a subcommand.
#include "entity_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <system_error>

#include "factum/storage/wal_copy.hpp"

namespace fs = std::filesystem;

namespace factum::tools {

namespace {

fs::path with_suffix(const fs::path& p, const char* suffix) {
  auto q = p;
  q += suffix;
  return q;
}

store_options read_only_options() {
  store_options o;
  o.read_only = true;
  o.create_if_missing = false;
  o.cache_kib = 1024;
  return o;
}

} // namespace

file_state stat_entity_file(const fs::path& db) {
  file_state s;
  struct stat st {};
  if (::stat(db.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    s.db = true;
    s.size = static_cast<uint64_t>(st.st_size);
    s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    s.inode = static_cast<uint64_t>(st.st_ino);
  }
  if (::stat(with_suffix(db, "-wal").c_str(), &st) == 0) {
    s.wal = true;
    s.wal_size = static_cast<uint64_t>(st.st_size);
    s.wal_mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  return s;
}

result<std::unique_ptr<entity_reader>> entity_reader::open(const fs::path& file) {
  std::unique_ptr<entity_reader> r(new entity_reader(file));
  if (auto st = r->open_now(); !st)
    return st;
  return r;
}

result<std::unique_ptr<entity_reader>> entity_reader::open(const fs::path& data_dir,
                                                           const entity_key& key) {
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec))
    return status{errc::not_found, "no data directory " + data_dir.string()};
  auto file = key.file_path(data_dir);
  if (!fs::exists(file, ec))
    return status{errc::not_found, "no entity " + key.to_string() + " in " + data_dir.string() +
                                     " (no file " + file.lexically_relative(data_dir).string() +
                                     ")"};
  auto r = open(file);
  if (!r)
    return r;
  if (!((*r)->key() == key))
    return status{errc::corruption, file.string() + " belongs to entity " +
                                      (*r)->key().to_string() + ", not " + key.to_string()};
  return r;
}

result<std::unique_ptr<entity_reader>> entity_reader::open_archived(const fs::path& archive_dir,
                                                                    const entity_key& key,
                                                                    const archive_point& at) {
  std::error_code ec;
  if (!fs::is_directory(archive_dir, ec))
    return status{errc::not_found, "no archive directory " + archive_dir.string()};
  std::unique_ptr<entity_reader> r(new entity_reader(entity_archive_dir(archive_dir, key)));
  std::string tmpl = (fs::temp_directory_path(ec) / "factum-inspect-XXXXXX").string();
  if (ec || !::mkdtemp(tmpl.data()))
    return status{errc::io_error, "cannot create a temporary directory for a rebuilt file"};
  r->snap_dir_ = tmpl;
  auto file = r->snap_dir_ / key.file_path(fs::path()).filename();
  if (auto st = materialize_archive_point(r->file_, at, file); !st)
    return st;
  auto s = entity_store::open_file(file, read_only_options());
  if (!s)
    return s.error();
  if (!((*s)->key() == key))
    return status{errc::corruption, "the archive of " + key.to_string() + " rebuilds entity " +
                                      (*s)->key().to_string() + "'s file"};
  r->store_ = std::move(s.value());
  r->archived_ = at;
  return r;
}

entity_reader::~entity_reader() {
  store_.reset(); // close before the copy goes
  if (!snap_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(snap_dir_, ec);
  }
}

uint64_t entity_reader::file_bytes() const {
  auto s = stat_entity_file(file_);
  return s.size + s.wal_size;
}

namespace {

uint32_t be32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

/// Where the frame after the last one of the WAL's current generation starts in `wal` (a
/// frame whose salts are its header's), or -1 without a valid header. A commit adds its first
/// frame there, with those salts, even when a restart left older frames further on.
int64_t next_frame_offset(const fs::path& wal) {
  auto h = read_at(wal, 32, 0);
  if (h.size() < 32)
    return -1;
  auto* hb = reinterpret_cast<const unsigned char*>(h.data());
  uint32_t page = be32(hb + 8);
  if (page < 512 || page > 65536 || (page & (page - 1)) != 0)
    return -1;
  int fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int64_t off = 32;
  unsigned char fh[24];
  while (::pread(fd, fh, sizeof fh, off) == static_cast<ssize_t>(sizeof fh) &&
         std::memcmp(fh + 8, hb + 16, 8) == 0)
    off += 24 + page;
  ::close(fd);
  return off;
}

} // namespace

status entity_reader::open_now(bool refresh) {
  auto before = stat_entity_file(file_);
  if (!before.db)
    return {errc::not_found, "no such file: " + file_.string()};
  std::error_code ec;
  store_.reset();
  if (snap_dir_.empty()) {
    std::string tmpl = (fs::temp_directory_path(ec) / "factum-inspect-XXXXXX").string();
    if (ec || !::mkdtemp(tmpl.data()))
      return {errc::io_error, "cannot create a temporary directory for a read-only copy"};
    snap_dir_ = tmpl;
  }
  auto copy = snap_dir_ / file_.filename();
  // Report the real file, not the copy.
  auto real_name = [&](const status& st) {
    auto msg = st.message();
    for (size_t at = 0; (at = msg.find(copy.string(), at)) != std::string::npos;
         at += file_.string().size())
      msg.replace(at, copy.string().size(), file_.string());
    return status{st.code(), msg};
  };
  if (refresh) {
    // The copy's WAL gets what was committed since; the database file is copied again only
    // after a WAL restart (following a large entity must not copy it at every commit).
    auto r = entity_store::refresh_copy(file_, copy);
    if (!r)
      return real_name(r.error());
    whole_copies_ += *r ? 1 : 0;
  } else {
    for (const char* s : {"", "-wal", "-shm", "-journal"})
      fs::remove(with_suffix(copy, s), ec);
    if (auto st = entity_store::copy_files(file_, copy); !st)
      return real_name(st);
    ++whole_copies_;
  }
  auto r = entity_store::open_file(copy, read_only_options());
  if (!r)
    return real_name(r.error());
  store_ = std::move(r.value());
  state_ = before;
  wal_header_ = read_at(with_suffix(copy, "-wal"), 32, 0);
  next_frame_ = next_frame_offset(with_suffix(copy, "-wal"));
  return status::ok();
}

bool entity_reader::changed() const {
  if (!(stat_entity_file(file_) == state_))
    return true;
  auto wal = with_suffix(file_, "-wal");
  auto h = read_at(wal, 32, 0);
  if (h != wal_header_)
    return true; // a restart, or a WAL that appeared or went
  if (next_frame_ < 0)
    return false;
  // Same generation: a commit since the copy wrote its first frame where the copy's ended.
  auto fh = read_at(wal, 24, next_frame_);
  return fh.size() == 24 && h.size() == 32 && std::memcmp(fh.data() + 8, h.data() + 16, 8) == 0;
}

status entity_reader::refresh() {
  if (archived_)
    return status::ok();
  return changed() ? open_now(true) : status::ok();
}

} // namespace factum::tools
