// wal_archiver.cpp: the continuous archive's writer (wal_archiver.hpp) and the index record's
// encoding. The store owner's thread (sync() too: the store calls it before its close).
#include "wal/wal_archiver.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/wal_copy.hpp"

namespace fs = std::filesystem;

namespace factum::detail {

// -- counters and the record --------------------------------------------------------------------

namespace {

std::atomic<uint64_t> commits_shipped{0}, bytes_shipped{0}, epochs_started{0}, failures{0},
  wal_starts{0};

/// A note file's text (its first 200 bytes; empty when it cannot be read).
std::string read_note(const fs::path& path) {
  std::string note(200, '\0');
  scoped_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ssize_t n = fd.get() < 0 ? -1 : ::pread(fd.get(), note.data(), note.size(), 0);
  note.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return note;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

void put64(char* out, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((u >> (8 * i)) & 0xff);
}

int64_t get64(const char* in) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i)
    u = (u << 8) | static_cast<unsigned char>(in[i]);
  return static_cast<int64_t>(u);
}

/// FNV-1a over the record's first 40 bytes, never 0 (a record of zeros is a hole, not a record).
int64_t record_check(const char* in) {
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < 40; ++i)
    h = (h ^ static_cast<unsigned char>(in[i])) * 1099511628211ull;
  return static_cast<int64_t>(h | 1);
}

/// A valid WAL header (magic, version, page size): its page size, else 0.
int64_t header_page_size(const std::string& h) {
  if (h.size() != 32)
    return 0;
  uint32_t magic = be32(h.data()), page = be32(h.data() + 8);
  if ((magic & 0xfffffffe) != 0x377f0682 || be32(h.data() + 4) != 3007000 || page < 512 ||
      page > 65536 || (page & (page - 1)) != 0)
    return 0;
  return page;
}

status os_error(const std::string& what, int e) {
  return {errno_code(e), what + ": " + std::strerror(e)};
}

} // namespace

void count_archive(uint64_t c, uint64_t b, uint64_t e, uint64_t f, uint64_t w) {
  wal_starts.fetch_add(w, std::memory_order_relaxed);
  commits_shipped.fetch_add(c, std::memory_order_relaxed);
  bytes_shipped.fetch_add(b, std::memory_order_relaxed);
  epochs_started.fetch_add(e, std::memory_order_relaxed);
  failures.fetch_add(f, std::memory_order_relaxed);
}

void encode_archive_record(const archive_point& p, char (&out)[archive_record_size]) {
  put64(out, p.epoch);
  put64(out + 8, p.gen);
  put64(out + 16, p.end);
  put64(out + 24, p.seq);
  put64(out + 32, p.time_ms);
  put64(out + 40, record_check(out));
}

bool decode_archive_record(const char* in, archive_point& p) {
  if (get64(in + 40) != record_check(in))
    return false;
  p = {get64(in), get64(in + 8), get64(in + 16), get64(in + 24), get64(in + 32)};
  return p.epoch > 0 && p.gen >= 0 && p.end >= 0 && p.seq >= 0;
}

std::string archive_epoch_name(int64_t epoch) {
  char b[32];
  std::snprintf(b, sizeof b, "e%06lld", static_cast<long long>(epoch));
  return b;
}

std::string archive_gen_name(int64_t gen) {
  char b[32];
  std::snprintf(b, sizeof b, "g%06lld.wal", static_cast<long long>(gen));
  return b;
}

// -- the writer ---------------------------------------------------------------------------------

wal_archiver::wal_archiver(fs::path dir, fs::path db, fault_hook fault)
    : dir_(std::move(dir)), db_(std::move(db)), wal_(with_suffix(db_, "-wal")),
      fault_(std::move(fault)) {}

fs::path wal_archiver::epoch_dir(int64_t epoch) const {
  return dir_ / archive_epoch_name(epoch);
}

fs::path wal_archiver::gen_file(int64_t epoch, int64_t gen) const {
  return epoch_dir(epoch) / archive_gen_name(gen);
}

void wal_archiver::fail(const status& st) {
  if (!broken_)
    std::fprintf(stderr, "factum: archive %s: %s (a new epoch starts at the next commit)\n",
                 dir_.c_str(), st.message().c_str());
  broken_ = true;
  count_archive(0, 0, 0, 1);
}

status wal_archiver::sync_live(bool with_db) {
  status st;
  if (fault_ && fault_(0, "archive_sync_live") != 0)
    st = {errc::io_error, "fdatasync " + wal_.string() + ": injected failure"};
  else if (int e = with_db ? sync_file(db_) : 0; e != 0 && e != ENOENT)
    st = os_error("fdatasync " + db_.string(), e);
  else if (live_fd() >= 0 && ::fdatasync(live_fd()) != 0)
    st = os_error("fdatasync " + wal_.string(), errno);
  if (!st && live_failed_)
    live_failed_(st);
  return st;
}

int wal_archiver::live_fd() {
  if (!live_ || live_->get() < 0)
    live_ = std::make_shared<scoped_fd>(::open(wal_.c_str(), O_RDONLY | O_CLOEXEC));
  return live_->get();
}

std::string wal_archiver::live_header() {
  live_fd();
  std::string h(32, '\0');
  ssize_t n = live_->get() < 0 ? -1 : ::pread(live_->get(), h.data(), h.size(), 0);
  if (n != 32)
    return {};
  return h;
}

/// Reads the index: the whole records up to the first torn or invalid one (a power cut's tail),
/// which the next append overwrites. The current generation's mirror is reopened for writing.
status wal_archiver::load_index() {
  auto path = dir_ / "index";
  index_ = std::make_shared<scoped_fd>(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (index_->get() < 0) {
    index_.reset();
    return errno == ENOENT ? status{errc::not_found, "no index"}
                           : os_error("open " + path.string(), errno);
  }
  char rec[archive_record_size];
  archive_point p;
  index_size_ = 0;
  while (::pread(index_->get(), rec, sizeof rec, index_size_) == archive_record_size &&
         decode_archive_record(rec, p) &&
         (index_size_ == 0 || p.epoch > last_.epoch ||
          (p.epoch == last_.epoch &&
           (p.gen > last_.gen || (p.gen == last_.gen && p.end >= last_.end))))) {
    last_ = p;
    index_size_ += archive_record_size;
  }
  if (index_size_ == 0)
    return {errc::not_found, "an empty index"};
  // A power cut may have taken mirror bytes that the index names (neither is synced per commit,
  // and unsynced writes reach the disk in any order): keep only the records whose bytes hold.
  // When none of the last generation's records holds (its mirror lost everything, its header
  // included), the generation before it is the archive's last, and is checked in turn.
  while (last_.gen > 0) {
    auto g = gen_file(last_.epoch, last_.gen);
    mirror_ = std::make_shared<scoped_fd>(::open(g.c_str(), O_RDWR | O_CLOEXEC));
    std::string h(32, '\0');
    bool headed = mirror_->get() >= 0 && ::pread(mirror_->get(), h.data(), 32, 0) == 32 &&
                  header_page_size(h) != 0;
    int64_t have = headed ? wal_commit_end(g) : 0;
    if (have >= last_.end) {
      page_size_ = header_page_size(h);
      salts_ = h.substr(16, 8);
      return status::ok();
    }
    int64_t gen = last_.gen;
    if (auto st = drop_records_after(have); !st)
      return st;
    if (last_.gen == gen) { // some of the generation's records hold: the mirror goes on from them
      page_size_ = header_page_size(h);
      salts_ = h.substr(16, 8);
      return status::ok();
    }
    mirror_.reset();
  }
  return status::ok();
}

/// The index's whole records before the first for which `past` holds: their size in bytes and
/// the last of them (epoch 0 when there is none).
template <class Past>
std::pair<int64_t, archive_point> wal_archiver::records_before(Past past) const {
  char rec[archive_record_size];
  archive_point p, keep;
  int64_t size = 0;
  while (size < index_size_ &&
         ::pread(index_->get(), rec, sizeof rec, size) == archive_record_size &&
         decode_archive_record(rec, p) && !past(p)) {
    keep = p;
    size += archive_record_size;
  }
  return {size, keep};
}

/// Drops the index records of the current generation past `end` (the live WAL or the mirror no
/// longer has those commits) and makes `end` the archive's end.
status wal_archiver::drop_records_after(int64_t end) {
  auto [size, keep] = records_before([&](const archive_point& p) {
    return p.epoch == last_.epoch && p.gen == last_.gen && p.end > end;
  });
  if (size == 0 || keep.epoch != last_.epoch)
    return {errc::corruption, "no commit of the current epoch is left in the archive"};
  if (::ftruncate(index_->get(), size) != 0)
    return os_error("truncate the index of " + dir_.string(), errno);
  index_size_ = size;
  last_ = keep;
  return status::ok();
}

std::string wal_archiver::close_note() {
  struct stat st {};
  if (::stat(db_.c_str(), &st) != 0)
    return {};
  auto h = live_header();
  std::string salts = header_page_size(h) ? h.substr(16, 8) : std::string();
  char b[160];
  std::snprintf(b, sizeof b, "%llu %lld %lld.%09ld %02x%02x%02x%02x%02x%02x%02x%02x\n",
                static_cast<unsigned long long>(st.st_ino), static_cast<long long>(st.st_size),
                static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec,
                salts.empty() ? 0 : static_cast<unsigned char>(salts[0]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[1]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[2]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[3]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[4]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[5]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[6]),
                salts.empty() ? 0 : static_cast<unsigned char>(salts[7]));
  return b;
}

void wal_archiver::closed() {
  if (broken() || last_.epoch == 0)
    return;
  live_.reset(); // the close may have truncated the -wal: read it anew
  auto note = close_note();
  auto path = dir_ / "closed";
  scoped_fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() >= 0 && !note.empty())
    (void)write_all(fd.get(), note);
}

bool wal_archiver::take_close_note() {
  auto path = dir_ / "closed";
  auto note = read_note(path);
  ::unlink(path.c_str());
  return !note.empty() && note == close_note();
}

void wal_archiver::attach(int64_t seq) {
  if (auto st = load_index(); !st) {
    if (st.code() != errc::not_found)
      fail(st);
    if (auto st2 = start_epoch(seq); !st2)
      fail(st2);
    return;
  }
  // What the archive can follow from here: the generation it has (a crash left commits in it
  // unshipped, or a power cut took some from the live file), the one after it (this store
  // restarted the WAL, then crashed before shipping), or nothing changed since its own close.
  // Anything else (a writer that did not archive) starts an epoch.
  bool own_close = take_close_note();
  auto h = live_header();
  int64_t page = header_page_size(h);
  status st;
  if (page == 0 && own_close) {
    return; // no live WAL, as this store's close left it: its next header starts a generation
  } else if (page != 0 && !salts_.empty() && h.compare(16, 8, salts_) == 0) {
    int64_t live_end = wal_commit_end(wal_);
    if (live_end < last_.end) // a power cut took commits from the live file, not the mirror
      st = drop_records_after(live_end);
    if (st && live_end > last_.end) {
      st = copy_live(last_.end, live_end);
      if (st)
        st = append_record(seq);
    }
  } else if (page != 0 && !own_close && !salts_.empty() &&
             be32(h.data() + 16) == be32(salts_.data()) + 1) {
    // The generation after the archived one (SQLite adds one to salt-1 at each restart).
    int64_t live_end = wal_commit_end(wal_);
    st = start_gen(h);
    if (st && live_end > 32)
      st = copy_live(0, live_end);
    if (st)
      st = append_record(seq);
  } else {
    // Neither. When the file is the one this epoch follows and it is behind the archive, a
    // power cut took commits the archive had copied and synced before the live WAL was (a
    // generation whose header never reached the disk, or a restart's): they were never
    // acknowledged, so their records go, and the new epoch starts where the archive's history
    // and the file's meet. A file put in place of the old one (a rollback, a restore) is another
    // history: the records stay.
    if (last_.seq > seq && follows_source())
      st = drop_records_past(seq);
    if (st)
      st = start_epoch(seq);
  }
  if (!st)
    fail(st);
}

std::string wal_archiver::source_note() const {
  // The inode and its birth time (where the file system keeps one): another file put in place
  // has another inode, or a reused one born later. Not the device: its number may change when
  // the machine restarts, which is when this is read.
  struct statx st {};
  if (::statx(AT_FDCWD, db_.c_str(), 0, STATX_INO | STATX_BTIME, &st) != 0)
    return {};
  std::string note = std::to_string(st.stx_ino);
  if (st.stx_mask & STATX_BTIME)
    note += " " + std::to_string(st.stx_btime.tv_sec) + "." + std::to_string(st.stx_btime.tv_nsec);
  return note + "\n";
}

bool wal_archiver::follows_source() const {
  if (last_.epoch == 0)
    return false;
  auto note = read_note(epoch_dir(last_.epoch) / "source");
  return !note.empty() && note == source_note();
}

/// Drops the current epoch's records whose seq is past `seq` (the whole epoch when its base is
/// past it) and the mirrors no record names any more.
status wal_archiver::drop_records_past(int64_t seq) {
  auto [size, keep] =
    records_before([&](const archive_point& p) { return p.epoch == last_.epoch && p.seq > seq; });
  if (::ftruncate(index_->get(), size) != 0)
    return os_error("truncate the index of " + dir_.string(), errno);
  if (::fdatasync(index_->get()) != 0)
    return os_error("fdatasync the index of " + dir_.string(), errno);
  std::error_code ec;
  int64_t kept_gen = keep.epoch == last_.epoch ? keep.gen : 0;
  for (int64_t g = last_.gen; g > kept_gen; --g)
    fs::remove(gen_file(last_.epoch, g), ec);
  index_size_ = size;
  last_ = keep; // epoch 0 with no record left: start_epoch() numbers past the dropped epoch
  mirror_.reset();
  salts_.clear();
  return status::ok();
}

status wal_archiver::start_epoch(int64_t seq, bool after_commit) {
  broken_ = false;
  mirror_.reset();
  salts_.clear();
  // Every directory made on the way is synced into its parent: an archive whose directories a
  // power cut took would lose what its synced files hold.
  if (int e = create_dirs_synced(dir_); e != 0)
    return os_error("create " + dir_.string(), e);
  std::error_code ec;
  int64_t epoch = last_.epoch + 1;
  while (fs::exists(epoch_dir(epoch), ec)) // left by an attempt that wrote no record
    ++epoch;
  auto ed = epoch_dir(epoch);
  fs::create_directory(ed, ec);
  if (ec)
    return {errc::io_error, "create " + ed.string() + ": " + ec.message()};
  // The entity file and its WAL are synced before the base is copied from them (as sync() does
  // before the archive's own syncs). Not at the open of a file without a fact yet (a creation:
  // every new entity's first open), which holds nothing the archive could keep and the entity
  // lose; those two syncs cost a creation-heavy load a tenth of its rate.
  if (seq > 0 || after_commit)
    if (auto st = sync_live(true); !st)
      return st;
  if (auto st = entity_store::copy_files(db_, ed / "base.db"); !st)
    return st;
  // The file this epoch follows (source_note()): attach() tells by it the file's own lost
  // commits from another file put in its place.
  {
    scoped_fd src(::open((ed / "source").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    int e = src.get() < 0 ? errno : write_all(src.get(), source_note());
    if (e == 0 && ::fdatasync(src.get()) != 0)
      e = errno;
    if (e != 0)
      return os_error("write " + (ed / "source").string(), e);
  }
  last_ = {epoch, 0, 0, seq, 0};
  auto base_wal = ed / "base.db-wal";
  if (fs::exists(base_wal, ec)) {
    int64_t end = wal_commit_end(base_wal);
    if (end >= 32) {
      fs::rename(base_wal, gen_file(epoch, 1), ec);
      if (ec)
        return {errc::io_error, "rename " + base_wal.string() + ": " + ec.message()};
      mirror_ = std::make_shared<scoped_fd>(::open(gen_file(epoch, 1).c_str(), O_RDWR | O_CLOEXEC));
      std::string h(32, '\0');
      if (mirror_->get() < 0 || ::pread(mirror_->get(), h.data(), 32, 0) != 32)
        return os_error("open " + gen_file(epoch, 1).string(), errno);
      page_size_ = header_page_size(h);
      salts_ = h.substr(16, 8);
      last_.gen = 1;
      last_.end = end;
      if (::fdatasync(mirror_->get()) != 0)
        return os_error("fdatasync " + gen_file(epoch, 1).string(), errno);
    } else {
      fs::remove(base_wal, ec);
    }
  }
  // The base is durable before any record names it.
  if (int e = sync_file(ed / "base.db"); e != 0)
    return os_error("fdatasync " + (ed / "base.db").string(), e);
  if (!index_) {
    auto path = dir_ / "index";
    index_ = std::make_shared<scoped_fd>(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (index_->get() < 0)
      return os_error("create " + path.string(), errno);
    index_size_ = 0;
  }
  for (const auto& d : {ed, dir_})
    if (int e = sync_dir(d); e != 0)
      return os_error("fsync " + d.string(), e);
  count_archive(0, 0, 1, 0);
  return append_record(seq);
}

status wal_archiver::start_gen(const std::string& header) {
  int64_t gen = last_.gen + 1;
  auto g = gen_file(last_.epoch, gen);
  auto fd =
    std::make_shared<scoped_fd>(::open(g.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd->get() < 0)
    return os_error("create " + g.string(), errno);
  if (int e = sync_dir(g.parent_path()); e != 0)
    return os_error("fsync " + g.parent_path().string(), e);
  mirror_ = std::move(fd);
  page_size_ = header_page_size(header);
  salts_ = header.substr(16, 8);
  last_.gen = gen;
  last_.end = 0;
  return status::ok();
}

status wal_archiver::copy_live(int64_t from, int64_t to) {
  if (buf_.size() < (1u << 16))
    buf_.resize(1u << 16);
  for (int64_t off = from; off < to;) {
    size_t want =
      static_cast<size_t>(std::min<int64_t>(to - off, static_cast<int64_t>(buf_.size())));
    ssize_t n = ::pread(live_fd(), buf_.data(), want, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n == 0 ? status{errc::corruption, wal_.string() + " ends before its commit"}
                    : os_error("read " + wal_.string(), errno);
    for (ssize_t w = 0; w < n;) {
      ssize_t k = ::pwrite(mirror_->get(), buf_.data() + w, static_cast<size_t>(n - w), off + w);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        return os_error("write " + gen_file(last_.epoch, last_.gen).string(), k < 0 ? errno : EIO);
      w += k;
    }
    off += n;
  }
  count_archive(0, static_cast<uint64_t>(to - from), 0, 0);
  last_.end = to;
  return status::ok();
}

status wal_archiver::append_record(int64_t seq) {
  last_.seq = seq;
  last_.time_ms = now_ms();
  char rec[archive_record_size];
  encode_archive_record(last_, rec);
  if (::pwrite(index_->get(), rec, sizeof rec, index_size_) != archive_record_size)
    return os_error("append to " + (dir_ / "index").string(), errno ? errno : EIO);
  index_size_ += archive_record_size;
  count_archive(1, 0, 0, 0);
  return status::ok();
}

void wal_archiver::ship(int64_t frames, int64_t seq) {
  if (broken()) {
    if (auto st = start_epoch(seq, true); !st)
      fail(st);
    return;
  }
  status st;
  bool unrecognizable = false; // a generation attach() could not tell from a foreign writer's
  if (restarted_ || salts_.empty() || !hooked_) { // the VFS saw a WAL header written (restarting())
    restarted_ = false;
    auto h = live_header();
    if (header_page_size(h) == 0) {
      st = {errc::corruption, wal_.string() + " has no WAL header after a commit"};
    } else if (salts_.empty() || h.compare(16, 8, salts_) != 0) {
      // A restart adds one to salt-1; the first header of a WAL a close had truncated does not.
      unrecognizable = salts_.empty() || be32(h.data() + 16) != be32(salts_.data()) + 1;
      st = start_gen(h);
    }
  }
  int64_t end = 32 + frames * (24 + page_size_);
  if (st && end < last_.end)
    st = {errc::corruption,
          "the WAL's " + std::to_string(frames) + " frames end before what was shipped of it"};
  if (st && end > last_.end)
    st = copy_live(last_.end, end);
  if (st)
    st = append_record(seq);
  if (!st)
    fail(st);
  else if (!hooked_ || unrecognizable)
    // Without the hook, every commit. After a truncated WAL's first header, this first commit
    // of the generation: a power cut that took its record would leave a live WAL whose salts
    // the next attach() cannot place after the archived generation (not salt-1 plus one), and
    // it would start an epoch at the current seq, without the commits of this generation.
    sync();
}

void wal_archiver::sync() {
  if (broken_ || last_.epoch == 0)
    return;
  // The live WAL first: the archive never holds on disk a commit that the entity file could
  // still lose to a power cut (the next open would find the archive past the file).
  if (auto st = sync_live(false); !st) {
    fail(st);
    return;
  }
  for (const auto* fd : {&mirror_, &index_})
    if (*fd && ::fdatasync((*fd)->get()) != 0) {
      fail(os_error("fdatasync in " + dir_.string(), errno));
      return;
    }
}

void wal_archiver::restarting() {
  restarted_ = true;
  count_archive(0, 0, 0, 0, 1);
  sync(); // the previous generation's copy, before the live WAL overwrites it
}

} // namespace factum::detail

namespace factum {

wal_archive_counters wal_archive_stats() noexcept {
  using namespace detail;
  return {commits_shipped.load(), bytes_shipped.load(), epochs_started.load(), failures.load(),
          wal_starts.load()};
}

} // namespace factum
