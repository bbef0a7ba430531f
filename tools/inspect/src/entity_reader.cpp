// entity_reader.cpp: read-only opening of entity files that leaves them untouched (see
// entity_reader.hpp). Used by the one thread that runs a subcommand.
#include "entity_reader.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <system_error>

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
  s.shm = ::stat(with_suffix(db, "-shm").c_str(), &st) == 0 && st.st_size > 0;
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

status entity_reader::open_now() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto before = stat_entity_file(file_);
    if (!before.db)
      return {errc::not_found, "no such file: " + file_.string()};
    if (before.wal && before.shm)
      return open_in_place();
    auto st = open_copy(before);
    if (st.code() != errc::busy) // busy: the file changed while it was copied
      return st;
  }
  return open_in_place(); // it keeps changing: a server is writing, so -wal/-shm are its own
}

status entity_reader::open_in_place() {
  store_.reset();
  auto r = entity_store::open_file(file_, read_only_options());
  if (!r)
    return r.error();
  store_ = std::move(r.value());
  in_place_ = true;
  state_ = stat_entity_file(file_);
  return status::ok();
}

status entity_reader::open_copy(const file_state& before) {
  std::error_code ec;
  store_.reset();
  if (snap_dir_.empty()) {
    std::string tmpl = (fs::temp_directory_path(ec) / "factum-inspect-XXXXXX").string();
    if (ec || !::mkdtemp(tmpl.data()))
      return {errc::io_error, "cannot create a temporary directory for a read-only copy"};
    snap_dir_ = tmpl;
  }
  auto copy = snap_dir_ / file_.filename();
  for (const char* s : {"", "-wal", "-shm", "-journal"})
    fs::remove(with_suffix(copy, s), ec);
  fs::copy_file(file_, copy, fs::copy_options::overwrite_existing, ec);
  if (ec)
    return {errc::io_error, "cannot read " + file_.string() + ": " + ec.message()};
  if (before.wal) {
    fs::copy_file(with_suffix(file_, "-wal"), with_suffix(copy, "-wal"),
                  fs::copy_options::overwrite_existing, ec);
    if (ec)
      return {errc::io_error, "cannot read " + file_.string() + "-wal: " + ec.message()};
  }
  auto after = stat_entity_file(file_);
  if (!(after == before))
    return {errc::busy, "changed while copied"};
  auto r = entity_store::open_file(copy, read_only_options());
  if (!r) {
    // Report the real file, not the copy.
    auto msg = r.error().message();
    for (size_t at = 0; (at = msg.find(copy.string(), at)) != std::string::npos;
         at += file_.string().size())
      msg.replace(at, copy.string().size(), file_.string());
    return {r.error().code(), msg};
  }
  store_ = std::move(r.value());
  in_place_ = false;
  state_ = before;
  return status::ok();
}

status entity_reader::refresh() {
  if (in_place_)
    return status::ok();
  auto now = stat_entity_file(file_);
  if (now == state_)
    return status::ok();
  return open_now();
}

} // namespace factum::tools
