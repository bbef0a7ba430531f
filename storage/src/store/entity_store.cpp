// entity_store.cpp: one entity's SQLite database (see entity_store.hpp): the orchestrator. It
// owns the lifecycle (open, open_file, the connection's configuration, close), transactions
// (the batch, turn savepoints, commit, rollback), deferred sync and the re-sync of files whose
// sync failed, checkpoints, the statement cache and the fault seam. The rest of the class lives
// by concern in store_*.cpp, the SQLite helpers they share in store_sql.hpp. Owned by one
// thread at a time; no locking inside, but for sync() and checkpoint_concurrently(), which
// other threads may run (entity_store.hpp). The file format is in docs/storage-format.md.
#include "factum/storage/entity_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "factum/storage/wal_archive.hpp"
#include "file/file_io.hpp"
#include "file/ofd_file.hpp"
#include "store/sqlite_global.hpp"
#include "store/store_sql.hpp"
#include "wal/wal_archiver.hpp"
#include "wal/wal_vfs.hpp"

namespace fs = std::filesystem;

namespace factum {

using detail::build_entity_file;
using detail::errno_code;
using detail::map_rc;
using detail::stmt_guard;
using detail::sync_dir;
using detail::with_suffix;

// -- options ------------------------------------------------------------------------------------

result<durability> parse_durability(std::string_view text) {
  if (text == "full")
    return durability::full;
  if (text == "normal")
    return durability::normal;
  return status{errc::invalid_argument,
                "durability must be \"full\" or \"normal\", got \"" + std::string(text) + "\""};
}

namespace detail {

void sqlite_global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Memory statistics take a global mutex on every allocation; factum does not read them.
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    // No up-front page-cache block per connection: SQLite's default allocates 20 pages
    // (~85 KiB) at a connection's first read, and the runtime keeps thousands of mostly idle
    // connections open; pages are allocated one by one as a connection needs them.
    sqlite3_config(SQLITE_CONFIG_PAGECACHE, nullptr, 0, 0);
    sqlite3_initialize();
    sqlite3_vfs* unix_vfs = sqlite3_vfs_find("unix");
    register_wal_vfs(unix_vfs ? unix_vfs : sqlite3_vfs_find(nullptr));
  });
}

} // namespace detail

// -- deferred sync ------------------------------------------------------------------------------

/// The descriptor that sync() fdatasyncs: our own, on the -wal file, opened on first use.
struct entity_store::sync_state {
  std::mutex mu;
  int fd = -1;
  bool dir_synced = false; // the directory was fsynced since the -wal exists
  /// An fdatasync of the live files by the archive failed (wal_archiver::on_live_sync_failure):
  /// every sync() of this store fails with it from then on.
  std::optional<status> live_error;
  ~sync_state() {
    if (fd >= 0)
      ::close(fd);
  }
};

status entity_store::sync() {
  if (!deferred_sync()) {
    if (!archive_)
      return status::ok();
    std::lock_guard<std::mutex> g(sync_->mu);
    return sync_->live_error ? *sync_->live_error : status::ok();
  }
  auto wal = wal_path();
  int fd;
  {
    // The descriptor and the directory sync under the mutex; the fdatasync outside it, so
    // that syncs on several threads overlap (each covers the commits made before it began,
    // and the kernel merges their cache flushes).
    std::lock_guard<std::mutex> g(sync_->mu);
    if (sync_->live_error)
      return *sync_->live_error;
    if (sync_->fd < 0) {
      sync_->fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
      if (sync_->fd < 0)
        return {errc::io_error, "open " + wal.string() + " for sync: " + std::strerror(errno)};
    }
    if (!sync_->dir_synced) {
      // The -wal file may be new, and so may the database file (a creation leaves its name to
      // the first sync): their directory entries must be durable too.
      if (int frc = opts_.fault ? opts_.fault(0, "sync_dir") : 0; frc != 0)
        return {map_rc(frc), "fsync the directory of " + path_.string() + ": " +
                               sqlite3_errstr(frc) + " (injected)"};
      if (int e = sync_dir(path_.parent_path()); e != 0)
        return {errno_code(e),
                "fsync the directory of " + path_.string() + ": " + std::strerror(e)};
      sync_->dir_synced = true;
    }
    fd = sync_->fd;
  }
  if (int frc = opts_.fault ? opts_.fault(0, "sync") : 0; frc != 0)
    return {map_rc(frc), "sync " + wal.string() + ": " + sqlite3_errstr(frc) + " (injected)"};
  if (::fdatasync(fd) != 0)
    return {errc::io_error, "fdatasync " + wal.string() + ": " + std::strerror(errno)};
  return status::ok();
}

// -- files whose sync failed -------------------------------------------------------------------

status entity_store::mark_unsynced() {
  unsynced_ = true;
  // The marker need survive a process crash only: a power cut takes the page cache, and with
  // it every write no sync covered, which is what the marker warns of.
  auto marker = with_suffix(path_, unsynced_suffix);
  int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return {errno_code(errno), "create " + marker.string() + ": " + std::strerror(errno)};
  ::close(fd);
  return status::ok();
}

status entity_store::resync(const store_options& opts, const entity_key& key) {
  auto path = key.file_path(opts.data_dir);
  std::error_code ec;
  if (!fs::exists(path, ec))
    return status::ok(); // never created: nothing to make durable
  return resync_files(path, opts.fault);
}

status entity_store::resync_files(const fs::path& path, const fault_hook& fault) {
  if (int frc = fault ? fault(0, "resync") : 0; frc != 0)
    return {map_rc(frc), "re-sync " + path.string() + ": " + sqlite3_errstr(frc) + " (injected)"};
  auto fail_errno = [](const std::string& what) {
    int e = errno;
    return status{errno_code(e), what + ": " + std::strerror(e)};
  };
  // After a failed fdatasync the kernel may have dropped the failed pages' dirty state: a
  // later fdatasync would not write them again. So every byte of the -wal is written again
  // (what a read returns now: the page cache, or the disk where the cache lost it) and synced.
  auto wal = with_suffix(path, "-wal");
  if (detail::scoped_fd fd(::open(wal.c_str(), O_RDWR | O_CLOEXEC)); fd.get() >= 0) {
    std::string buf(1 << 20, '\0');
    for (off_t off = 0;;) {
      ssize_t n = ::pread(fd.get(), buf.data(), buf.size(), off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return fail_errno("read " + wal.string());
      if (n == 0)
        break;
      for (ssize_t done = 0; done < n;) {
        ssize_t w =
          ::pwrite(fd.get(), buf.data() + done, static_cast<size_t>(n - done), off + done);
        if (w < 0 && errno == EINTR)
          continue;
        if (w <= 0)
          return fail_errno("write " + wal.string());
        done += w;
      }
      off += n;
    }
    if (::fdatasync(fd.get()) != 0)
      return fail_errno("fdatasync " + wal.string());
  } else if (errno != ENOENT) {
    return fail_errno("open " + wal.string());
  }
  if (detail::scoped_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      fd.get() < 0 || ::fdatasync(fd.get()) != 0)
    return fail_errno("fdatasync " + path.string());
  if (int e = sync_dir(path.parent_path()); e != 0)
    return {errno_code(e), "fsync " + path.parent_path().string() + ": " + std::strerror(e)};
  auto marker = with_suffix(path, unsynced_suffix);
  if (::unlink(marker.c_str()) != 0 && errno != ENOENT)
    return fail_errno("remove " + marker.string());
  return status::ok();
}

status entity_store::checkpoint() {
  int log = 0, done = 0;
  // A checkpoint must sync the WAL before it copies pages into the database and the database
  // before the WAL restarts: deferred-sync stores run it with synchronous=NORMAL.
  bool deferred = deferred_sync() && !opts_.read_only;
  if (deferred)
    sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
  int rc = sqlite3_wal_checkpoint_v2(db_, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (deferred)
    sqlite3_exec(db_, "PRAGMA synchronous=OFF", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return fail(rc, "checkpoint");
  wal_.frames = log - done;
  return status::ok();
}

namespace {

/// SQLite's default busy wait (as sqlite3_busy_timeout: sleeps of 1, 2, 5, ... 100 ms until
/// *timeout_ms), except for a WAL index another process holds: that lasts until the other
/// process closes the file, so the connection gives up at once (detail::take_shm_refusal).
int busy_wait(void* timeout_ms, int count) {
  if (detail::take_shm_refusal())
    return 0;
  static constexpr int delays[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
  static constexpr int totals[] = {0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228};
  constexpr int last = 11;
  int timeout = *static_cast<const int*>(timeout_ms);
  int delay = delays[count < last ? count : last];
  int prior = count < last ? totals[count] : totals[last] + delays[last] * (count - last);
  if (prior + delay > timeout) {
    delay = timeout - prior;
    if (delay <= 0)
      return 0;
  }
  sqlite3_sleep(delay);
  return 1;
}
int wal_hook(void* p, sqlite3* db, const char* name, int frames) {
  auto* c = static_cast<detail::wal_counts*>(p);
  c->frames = frames;
  c->mx = frames;
  c->committed = true;
  if (c->auto_checkpoint && frames >= 1000) // what SQLite's own hook (replaced here) does
    sqlite3_wal_checkpoint(db, name);
  return SQLITE_OK;
}
} // namespace

// -- statement cache ----------------------------------------------------------------------------

struct entity_store::stmt_cache {
  /// Statements of literal texts, by the text's address (a turn touches a handful of them; a
  /// short array scanned by pointer beats hashing a 100-byte text, most so with a thousand
  /// entities' caches competing for the CPU cache).
  std::vector<std::pair<const char*, sqlite3_stmt*>> by_address;
  /// Looked up by the SQL text without copying it into a std::string.
  struct text_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, sqlite3_stmt*, text_hash, std::equal_to<>> by_text;
  ~stmt_cache() {
    for (auto& [_, st] : by_address)
      sqlite3_finalize(st);
    for (auto& [_, st] : by_text)
      sqlite3_finalize(st);
  }
};

sqlite3_stmt* entity_store::prepare(sql_literal sql) {
  for (auto& [text, st] : stmts_->by_address)
    if (text == sql.text)
      return st;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v3(db_, sql.text, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK)
    return nullptr;
  stmts_->by_address.emplace_back(sql.text, st);
  return st;
}

sqlite3_stmt* entity_store::prepare_text(const std::string& sql) {
  auto it = stmts_->by_text.find(std::string_view(sql));
  if (it != stmts_->by_text.end())
    return it->second;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) !=
      SQLITE_OK)
    return nullptr;
  stmts_->by_text.emplace(sql, st);
  return st;
}

// -- lifecycle ----------------------------------------------------------------------------------

entity_store::entity_store(store_options opts, entity_key key, fs::path path)
    : opts_(std::move(opts)), key_(std::move(key)), path_(std::move(path)),
      stmts_(std::make_unique<stmt_cache>()), head_hash_(genesis_hash),
      sync_(std::make_unique<sync_state>()) {}

entity_store::~entity_store() {
  end_capture();
  if (db_) {
    if (in_batch_)
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    stmts_.reset();
    // A small -wal stays as it is (store_options::wal_kept_on_close_kib): no checkpoint, no
    // sync. The -shm is kept too, empty as always (ofd_file.cpp: the wal-index is in memory).
    // A store marked unsynced keeps its WAL whatever its size: nothing of it is copied into
    // the database before the next open has re-synced it.
    bool keep_wal = !opts_.read_only &&
                    (unsynced_ || (opts_.wal_kept_on_close_kib > 0 &&
                                   wal_bytes() <= int64_t{opts_.wal_kept_on_close_kib} * 1024));
    if (keep_wal) {
      sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    } else if (!opts_.read_only) {
      // The close checkpoints the WAL into the database: with its syncs (see configure()) ...
      if (deferred_sync())
        sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
      // ... and, the WAL persisting (open_db()), truncates it to 0 bytes when it is the last
      // connection. Set only now: while open, a limit would also make SQLite trim the WAL file
      // at every restart, which nothing needs.
      sqlite3_exec(db_, "PRAGMA journal_size_limit=0", nullptr, nullptr, nullptr);
    }
    if (archive_)
      archive_->sync(); // before the close's checkpoint may truncate the WAL it copied
    sqlite3_close_v2(db_);
    if (archive_)
      archive_->closed();
  }
}

int entity_store::fault_check(const char* sql) {
  if (!opts_.fault)
    return SQLITE_OK;
  return opts_.fault(++op_index_, sql ? std::string_view(sql) : std::string_view());
}

status entity_store::fail(int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  if (db_ && (rc & 0xff) != (sqlite3_errcode(db_) & 0xff)) // an injected fault
    msg = std::string(what) + ": " + sqlite3_errstr(rc) + " (injected)";
  // SQLite rolls a transaction back by itself on some errors (FULL, IOERR, NOMEM, BUSY):
  // keep the in-memory chain head in step with what the file holds.
  if (in_batch_ && db_ && sqlite3_get_autocommit(db_)) {
    in_batch_ = in_turn_ = dirty_ = false;
    last_seq_ = batch_mark_.seq;
    head_hash_ = batch_mark_.hash;
  }
  return {map_rc(rc), std::move(msg)};
}

status entity_store::exec(const char* sql) {
  if (int rc = fault_check(sql); rc != SQLITE_OK)
    return fail(rc, "exec");
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    auto st = fail(rc, "exec");
    return {st.code(), std::string(sql).substr(0, 40) + ": " + msg};
  }
  return status::ok();
}

status entity_store::exec_cached(sql_literal sql) {
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), sql.text);
  stmt_guard g{st};
  return step_done(st, sql.text);
}

status entity_store::step_done(sqlite3_stmt* st, const char* what) {
  if (int rc = fault_check(what); rc != SQLITE_OK)
    return fail(rc, what);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return fail(rc, what);
  return status::ok();
}

status entity_store::check_writable() const {
  if (opts_.read_only)
    return {errc::read_only, "the store was opened read-only"};
  return status::ok();
}

result<std::unique_ptr<entity_store>> entity_store::open(const store_options& opts,
                                                         const entity_key& key) {
  if (auto st = validate_key_part(key.tenant, "tenant"); !st)
    return st;
  if (auto st = validate_key_part(key.type, "entity type"); !st)
    return st;
  if (auto st = validate_key_part(key.id, "entity id"); !st)
    return st;
  if (opts.data_dir.empty())
    return status{errc::invalid_argument, "store_options.data_dir is empty"};
  if (opts.wal_grow_kib < 0 || opts.wal_grow_kib > 65536)
    return status{errc::invalid_argument, "store_options.wal_grow_kib must be 0..65536"};
  if (auto st = check_page_size(opts.page_size); !st)
    return status{st.code(), "store_options: " + st.message()};
  if (opts.target_schema_version < 0 || opts.target_schema_version > current_schema_version)
    return status{errc::invalid_argument, "store_options.target_schema_version must be 0.." +
                                            std::to_string(current_schema_version)};
  if (opts.owner_epoch < 0 || (opts.owner_epoch > 0 && opts.read_only))
    return status{errc::invalid_argument,
                  "store_options.owner_epoch must be 0, or > 0 on a writable store"};
  if (opts.owner_epoch > 0 && (opts.owner_node.empty() || opts.owner_node.size() > 255))
    return status{errc::invalid_argument, "store_options.owner_node must be 1 to 255 bytes"};
  auto path = key.file_path(opts.data_dir);
  std::unique_ptr<entity_store> s(new entity_store(opts, key, path));
  std::error_code ec;
  bool exists = fs::exists(path, ec);
  if (!exists && (opts.read_only || !opts.create_if_missing))
    return status{errc::not_found,
                  "no entity " + key.to_string() + " in " + opts.data_dir.string()};
  // A quarantine left the file marked: its WAL may hold writes whose sync failed. They are
  // written again and synced before anything is read from the file (mark_unsynced()).
  if (exists && !opts.read_only && fs::exists(with_suffix(path, unsynced_suffix), ec)) {
    if (auto st = resync_files(path, opts.fault); !st)
      return st;
    s->resynced_ = true;
  }
  int version =
    opts.target_schema_version > 0 ? opts.target_schema_version : current_schema_version;
  // A -wal at the path without its database (only an operator deleting a .db leaves one: the
  // store never deletes entity files) would be replayed by SQLite into the new file: it cannot
  // tell a foreign WAL from the file's own, and the result mixes the lost entity's pages with
  // the new one's (tested). That WAL may also hold the lost entity's last commits. Refuse, and
  // leave both to the operator. (A concurrent creator of the key is no orphan: orphan_wal();
  // its file wins the RENAME_NOREPLACE below.)
  if (!exists) {
    if (auto wal = orphan_wal(path))
      return status{errc::corruption,
                    "entity " + key.to_string() + ": its database file is missing but its " +
                      "write-ahead log is there (" + wal->string() + "); refusing to create a " +
                      "new entity over it. Move the -wal away (it may hold the entity's last " +
                      "commits) to create the entity anew"};
    // Every directory made here is fsynced into its parent (top-down), so that the file's
    // path survives power loss in durability full.
    auto dir = path.parent_path();
    if (int e = detail::create_dirs_synced(dir, opts.mode == durability::full); e != 0)
      return status{errno_code(e), "cannot create " + dir.string() + ": " + std::strerror(e)};
    // A spare (spare_pool.hpp): a synced file already on disk, renamed into place and claimed
    // at the open below. RENAME_NOREPLACE: a file another creator put in place meanwhile wins
    // (the spare goes back to the pool) and is opened below like any existing file.
    bool in_place = opts.spares && version == current_schema_version &&
                    opts.spares->page_size() == opts.page_size &&
                    opts.spares->place(path) != spare_pool::placed::none;
    // Built aside and renamed into place: 1 fsync instead of ~10 for creating the schema in
    // place through WAL. The same RENAME_NOREPLACE rule.
    if (!in_place) {
      auto tmp = path;
      tmp += ".tmp-" + time_ordered_id("", 16);
      if (auto st = build_entity_file(tmp, key, now_ms(), version, opts.page_size, s->vfs_name());
          !st)
        return st;
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
        int e = errno;
        fs::remove(tmp, ec);
        if (e != EEXIST)
          return status{errno_code(e), "rename into " + path.string() + ": " + std::strerror(e)};
      }
    }
  }
  // A new entity's name (and its -wal's) become durable with its first durable commit, not
  // here: a creation acknowledges nothing. sync() fsyncs the directory before its first
  // fdatasync (deferred sync), and with synchronous=FULL SQLite does the same inside the first
  // commit (the unix VFS fsyncs the directory at the first sync of a -wal it opened with
  // SQLITE_OPEN_CREATE). Lost before that, the entity never existed; the next open creates it.
  if (auto st = s->open_db(); !st)
    return st;
  return s;
}

result<std::unique_ptr<entity_store>> entity_store::open_file(const fs::path& file,
                                                              const store_options& opts) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return status{errc::not_found, "no such file: " + file.string()};
  if (opts.owner_epoch != 0 && (opts.owner_epoch < 0 || opts.read_only))
    return status{errc::invalid_argument,
                  "store_options.owner_epoch must be 0, or > 0 on a writable store"};
  store_options o = opts;
  o.create_if_missing = false;
  std::unique_ptr<entity_store> s(new entity_store(o, entity_key{}, file));
  if (auto st = s->open_db(); !st)
    return st;
  return s;
}

namespace {

/// `file:` URI of `path` with '?', '#' and '%' percent-encoded, so that no part of a path can
/// add URI parameters.
std::string file_uri(const fs::path& path) {
  std::string enc = "file:";
  for (char c : path.string()) {
    if (c == '?')
      enc += "%3f";
    else if (c == '#')
      enc += "%23";
    else if (c == '%')
      enc += "%25";
    else
      enc.push_back(c);
  }
  return enc;
}

} // namespace

const char* entity_store::default_vfs() {
  detail::sqlite_global_init();
  return detail::wal_vfs_name;
}

fs::path entity_store::wal_path() const {
  return detail::with_suffix(path_, "-wal");
}

int64_t entity_store::wal_bytes() const {
  struct stat st {};
  return ::stat(wal_path().c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

const char* entity_store::vfs_name() const {
  return opts_.vfs.empty() ? default_vfs() : opts_.vfs.c_str();
}

result<int> entity_store::checkpoint_concurrently() const {
  if (opts_.read_only)
    return status{errc::invalid_argument, "checkpoint of a store opened read-only"};
  // Fault injection (tests): called from the checkpointing thread, beside the owner.
  if (int frc = opts_.fault ? opts_.fault(0, "checkpoint_concurrently") : 0; frc != 0)
    return status{map_rc(frc),
                  "checkpoint " + path_.string() + ": " + sqlite3_errstr(frc) + " (injected)"};
  sqlite3* db = nullptr;
  int rc =
    sqlite3_open_v2(file_uri(path_).c_str(), &db,
                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, vfs_name());
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
  if (rc != SQLITE_OK)
    return status{map_rc(rc), "open " + path_.string() + " to checkpoint: " + sqlite3_errstr(rc)};
  // synchronous=NORMAL: the WAL synced before its pages go into the database, the database
  // before the WAL may restart.
  char* err = nullptr;
  rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL", nullptr, nullptr, &err);
  int log = 0, done = 0;
  if (rc == SQLITE_OK)
    rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  std::string msg = err ? err : sqlite3_errmsg(db);
  sqlite3_free(err);
  if (rc != SQLITE_OK)
    return status{map_rc(rc), "checkpoint " + path_.string() + ": " + msg};
  return std::max(done, 0);
}

status entity_store::open_db() {
  detail::sqlite_global_init();
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
  // A URI so that mode=ro can be asked for.
  std::string enc = file_uri(path_);
  if (opts_.read_only) {
    flags |= SQLITE_OPEN_READONLY;
    if (opts_.immutable) {
      // immutable=1 reads the database file alone: commits still in a -wal (a close keeps a
      // small one, store_options::wal_kept_on_close_kib) would be silently missing.
      if (wal_bytes() > 0)
        return {errc::invalid_argument, "cannot open " + path_.string() +
                                          " immutable: its -wal holds commits (open it without "
                                          "immutable)"};
    }
    enc += opts_.immutable ? "?mode=ro&immutable=1" : "?mode=ro";
  } else {
    flags |= SQLITE_OPEN_READWRITE; // files are created by build_entity_file only
  }
  (void)detail::take_shm_refusal(); // a flag left by another call of this thread is not ours
  int rc = sqlite3_open_v2(enc.c_str(), &db_, flags, vfs_name());
  if (rc != SQLITE_OK)
    return fail(rc, "open " + path_.string());
  sqlite3_extended_result_codes(db_, 1);
  if (auto st = configure(); !st)
    return st;
  // The WAL hook replaces SQLite's automatic-checkpoint hook (set it after the pragmas, which
  // would reset it): with deferred sync or without automatic checkpoints the owner checkpoints
  // (the runtime: on a storage thread) instead.
  if ((deferred_sync() || !opts_.auto_checkpoint || !opts_.archive_dir.empty()) &&
      !opts_.read_only) {
    wal_.auto_checkpoint = !deferred_sync() && opts_.auto_checkpoint;
    sqlite3_wal_hook(db_, wal_hook, &wal_);
  }
  if (!opts_.read_only) {
    // Keep the -wal and -shm files across a close (the destructor keeps a small WAL as it is
    // or checkpoints and truncates a larger one; the -shm is never written, ofd_file.cpp): a
    // reopen then creates no inode.
    int keep = 1;
    sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &keep);
    // Through factum's VFS (or a wrapper that passes file controls on): the -wal grows ahead
    // (wal_vfs.cpp). Any other VFS answers SQLITE_NOTFOUND, and the -wal grows as SQLite writes.
    sqlite3_int64 grow = sqlite3_int64{opts_.wal_grow_kib} * 1024;
    sqlite3_file_control(db_, "main", detail::wal_grow_fcntl_op, &grow);
  }
  if (auto st = migrate(); !st)
    return st;
  return attach_archive();
}

status entity_store::configure() {
  sqlite3_busy_handler(db_, busy_wait, &opts_.busy_timeout_ms);
  std::string pragmas = "PRAGMA cache_size=-" + std::to_string(opts_.cache_kib) +
                        ";PRAGMA temp_store=MEMORY;PRAGMA mmap_size=0;";
  if (!opts_.read_only) {
    pragmas += "PRAGMA journal_mode=WAL;";
    pragmas += synchronous_pragma();
    if (opts_.max_page_count > 0)
      pragmas += "PRAGMA max_page_count=" + std::to_string(opts_.max_page_count) + ";";
  }
  char* err = nullptr;
  int rc = sqlite3_exec(db_, pragmas.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : "";
    sqlite3_free(err);
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
      return {errc::corruption, path_.string() + " is not a database (" + msg + ")"};
    if ((rc & 0xff) == SQLITE_BUSY) // the only lock an open waits for: another process's WAL index
      return {errc::busy, path_.string() + " is open in another process (" + msg +
                            "): it opens here once that process closed it"};
    return {map_rc(rc), "configure " + path_.string() + ": " + msg};
  }
  return status::ok();
}

const char* entity_store::synchronous_pragma() const noexcept {
  // Deferred sync: commits never sync (sync() fdatasyncs the WAL, header and frames alike,
  // before anything is acknowledged). synchronous=NORMAL would still fdatasync the WAL header
  // inside the first commit of every new WAL generation (after an open or a checkpoint), on
  // the owner's thread, i.e. a CAF worker. Checkpoints and the close need their syncs: they
  // switch to NORMAL for their duration (checkpoint(), the destructor).
  bool deferred = deferred_sync();
  return !deferred && opts_.mode == durability::full ? "PRAGMA synchronous=FULL;"
         : deferred                                  ? "PRAGMA synchronous=OFF;"
                                                     : "PRAGMA synchronous=NORMAL;";
}

// -- transactions -------------------------------------------------------------------------------

status entity_store::begin_batch() {
  if (in_batch_)
    return status::ok();
  if (auto st = check_writable(); !st)
    return st;
  if (fenced_)
    return refuse_fenced();
  if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
    return st;
  // The write lock is held from here to the COMMIT: no other connection can claim the file in
  // between, so a check at the start of the transaction holds for its commit.
  if (owner_epoch_ > 0)
    if (auto st = check_owner(); !st) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return st;
    }
  in_batch_ = true;
  dirty_ = false;
  batch_mark_ = {last_seq_, head_hash_};
  return status::ok();
}

status entity_store::ensure_batch() {
  if (auto st = check_writable(); !st)
    return st;
  if (!in_batch_)
    if (auto st = begin_batch(); !st)
      return st;
  dirty_ = true;
  return status::ok();
}

status entity_store::commit() {
  if (!in_batch_)
    return status::ok();
  if (in_turn_)
    return {errc::internal, "commit inside a turn"};
  auto st = stamp_capture();
  if (st)
    st = exec_cached("COMMIT");
  if (!st) {
    if (in_batch_) { // COMMIT failed but the transaction is still open: undo it whole
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      in_batch_ = dirty_ = false;
      last_seq_ = batch_mark_.seq;
      head_hash_ = batch_mark_.hash;
    }
    collect_capture(false);
    return st;
  }
  in_batch_ = dirty_ = false;
  collect_capture(true);
  ship_to_archive();
  return status::ok();
}

void entity_store::ship_to_archive() {
  if (!archive_ || !wal_.committed)
    return;
  wal_.committed = false;
  archive_->ship(wal_.mx, last_seq_);
}

status entity_store::attach_archive() {
  if (opts_.archive_dir.empty() || opts_.read_only)
    return status::ok();
  archive_ = std::make_unique<detail::wal_archiver>(entity_archive_dir(opts_.archive_dir, key_),
                                                    path_, opts_.fault);
  archive_->on_live_sync_failure([s = sync_.get()](const status& st) {
    std::lock_guard<std::mutex> g(s->mu);
    if (!s->live_error)
      s->live_error = status{st.code(), st.message() + " (met by the archive's sync)"};
  });
  archive_->attach(last_seq_);
  wal_.committed = false;
  // From now on the VFS tells the archive before each new WAL header (wal_archiver.hpp).
  detail::wal_start_hook hook{[](void* a) { static_cast<detail::wal_archiver*>(a)->restarting(); },
                              archive_.get()};
  archive_->watch_restarts(
    sqlite3_file_control(db_, "main", detail::wal_start_hook_fcntl_op, &hook) == SQLITE_OK);
  return status::ok();
}

status entity_store::rollback() {
  if (!in_batch_)
    return status::ok();
  sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  in_batch_ = in_turn_ = dirty_ = false;
  last_seq_ = batch_mark_.seq;
  head_hash_ = batch_mark_.hash;
  collect_capture(false);
  return status::ok();
}

status entity_store::begin_turn() {
  if (in_turn_)
    return {errc::internal, "turns do not nest"};
  if (auto st = begin_batch(); !st)
    return st;
  if (auto st = exec_cached("SAVEPOINT turn"); !st)
    return st;
  in_turn_ = true;
  turn_mark_ = {last_seq_, head_hash_};
  return status::ok();
}

status entity_store::end_turn(bool keep) {
  if (!in_turn_)
    return status::ok();
  if (keep) {
    // A failed RELEASE leaves the turn open, so that the caller's end_turn(false) rolls it
    // back: its facts and key must not commit with a later batch after the call was failed.
    if (auto st = exec_cached("RELEASE turn"); !st)
      return st;
    in_turn_ = false;
    return status::ok();
  }
  in_turn_ = false;
  auto st = exec_cached("ROLLBACK TO turn");
  if (st)
    st = exec_cached("RELEASE turn");
  last_seq_ = turn_mark_.seq;
  head_hash_ = turn_mark_.hash;
  return st;
}

} // namespace factum
