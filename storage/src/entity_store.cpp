// entity_store.cpp: one entity's SQLite database (see entity_store.hpp). Owned by one thread at
// a time; no locking inside. The file format is specified in docs/storage-format.md.
#include "factum/storage/entity_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <sqlite3.h>

#include "entity_image.hpp"
#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "factum/storage/utf8.hpp"
#include "file_io.hpp"
#include "ofd_file.hpp"
#include "schema.hpp"
#include "sqlite_global.hpp"
#include "wal_vfs.hpp"

namespace fs = std::filesystem;

namespace factum {

// -- enums --------------------------------------------------------------------------------------

result<durability> parse_durability(std::string_view text) {
  if (text == "full")
    return durability::full;
  if (text == "normal")
    return durability::normal;
  return status{errc::invalid_argument,
                "durability must be \"full\" or \"normal\", got \"" + std::string(text) + "\""};
}

std::string_view to_string(key_status s) noexcept {
  switch (s) {
  case key_status::pending: return "pending";
  case key_status::completed: return "completed";
  case key_status::failed: return "failed";
  }
  return "pending";
}

static key_status parse_key_status(std::string_view s) {
  if (s == "completed")
    return key_status::completed;
  if (s == "failed")
    return key_status::failed;
  return key_status::pending;
}

std::string_view to_string(dl_status s) noexcept {
  switch (s) {
  case dl_status::pending: return "pending";
  case dl_status::scheduled: return "scheduled";
  case dl_status::resolved: return "resolved";
  case dl_status::discarded: return "discarded";
  case dl_status::acknowledged: return "acknowledged";
  }
  return "pending";
}

result<dl_status> parse_dl_status(std::string_view s) {
  for (auto v : {dl_status::pending, dl_status::scheduled, dl_status::resolved,
                 dl_status::discarded, dl_status::acknowledged})
    if (to_string(v) == s)
      return v;
  return status{errc::invalid_argument,
                "dead letter status must be pending, scheduled, resolved, discarded or "
                "acknowledged"};
}

// -- helpers ------------------------------------------------------------------------------------

namespace {

errc map_rc(int rc) {
  switch (rc & 0xff) {
  case SQLITE_FULL: return errc::full;
  case SQLITE_IOERR:
  case SQLITE_CANTOPEN:
  case SQLITE_PROTOCOL: return errc::io_error;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: return errc::corruption;
  case SQLITE_READONLY: return errc::read_only;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return errc::busy;
  case SQLITE_CONSTRAINT: return errc::conflict;
  case SQLITE_AUTH:
  case SQLITE_ERROR: return errc::invalid_argument;
  default: return errc::internal;
  }
}

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<uint64_t>(now_ms()) << 20) ^
                                   reinterpret_cast<uintptr_t>(&rng)};
  return rng();
}

/// Appends the low `digits` hex digits of `v` (lowercase, zero-padded) to `out`.
void append_hex(std::string& out, uint64_t v, int digits) {
  static constexpr char hex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i)
    out.push_back(hex[(v >> (i * 4)) & 0xf]);
}

/// Fact ids of schema version 4: the file's prefix (`fct_` + 16 hex digits) + 12 hex digits
/// of seq. 2^48 facts per entity.
constexpr size_t fact_id_prefix_size = 20;
constexpr int64_t max_derived_seq = (int64_t{1} << 48) - 1;

std::string derived_fact_id(const std::string& prefix, int64_t seq) {
  std::string out;
  out.reserve(prefix.size() + 12);
  out += prefix;
  append_hex(out, static_cast<uint64_t>(seq), 12);
  return out;
}

/// Whether `p` is `fct_` + 16 lowercase hex digits.
bool valid_fact_id_prefix(std::string_view p) {
  if (p.size() != fact_id_prefix_size || p.substr(0, 4) != "fct_")
    return false;
  for (char c : p.substr(4))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

/// The seq of a derived fact id with this prefix, or 0 when `id` is not one.
int64_t seq_of_derived_id(std::string_view id, std::string_view prefix) {
  if (prefix.size() != fact_id_prefix_size || id.size() != fact_id_prefix_size + 12 ||
      id.substr(0, prefix.size()) != prefix)
    return 0;
  int64_t seq = 0;
  for (char c : id.substr(prefix.size())) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return 0;
    seq = seq * 16 + d;
  }
  return seq;
}

// Binding helpers: empty strings and zero optionals become NULL.
void bind_text(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}
void bind_text_or_null(sqlite3_stmt* st, int i, std::string_view s) {
  if (s.empty())
    sqlite3_bind_null(st, i);
  else
    bind_text(st, i, s);
}
void bind_int_or_null(sqlite3_stmt* st, int i, int64_t v) {
  if (v == 0)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_int64(st, i, v);
}
void bind_opt(sqlite3_stmt* st, int i, const std::optional<int64_t>& v) {
  if (v)
    sqlite3_bind_int64(st, i, *v);
  else
    sqlite3_bind_null(st, i);
}
std::string col_text(sqlite3_stmt* st, int i) {
  auto p = sqlite3_column_text(st, i);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(st, i)))
           : std::string();
}
std::optional<int64_t> col_opt(sqlite3_stmt* st, int i) {
  if (sqlite3_column_type(st, i) == SQLITE_NULL)
    return std::nullopt;
  return sqlite3_column_int64(st, i);
}

// Resets a statement when it leaves scope so that it never holds a read transaction open.
struct stmt_guard {
  sqlite3_stmt* st;
  ~stmt_guard() {
    if (st) {
      sqlite3_reset(st);
      sqlite3_clear_bindings(st);
    }
  }
};

/// Literal SQL texts joined at compile time. Kept in a `static constexpr` array, the result is
/// a literal text for entity_store::prepare (cached by its address, like a string literal).
template <std::size_t... N>
consteval std::array<char, (N + ...) - sizeof...(N) + 1> sql_concat(const char (&... parts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> out{}; // the last char stays '\0'
  std::size_t at = 0;
  ((std::copy_n(parts, N - 1, out.begin() + at), at += N - 1), ...);
  return out;
}

constexpr char fact_columns[] =
  "seq, fact_id, type, subtype, ts, tool_id, config_id, config_version, trace_id, "
  "idempotency_key, amount, currency, from_entity, to_entity, data, prev_hash, hash";

fact read_fact(sqlite3_stmt* st, const entity_key& key) {
  fact f;
  f.seq = sqlite3_column_int64(st, 0);
  f.fact_id = col_text(st, 1);
  f.type = col_text(st, 2);
  f.subtype = col_text(st, 3);
  f.timestamp_ms = sqlite3_column_int64(st, 4);
  f.tenant_id = key.tenant;
  f.entity_type = key.type;
  f.entity_id = key.id;
  f.tool_id = col_text(st, 5);
  f.config_id = col_text(st, 6);
  f.config_version = sqlite3_column_int64(st, 7);
  f.trace_id = col_text(st, 8);
  f.idempotency_key = col_text(st, 9);
  f.amount = col_text(st, 10);
  f.currency = col_text(st, 11);
  f.from_entity = col_text(st, 12);
  f.to_entity = col_text(st, 13);
  f.data = col_text(st, 14);
  f.prev_hash = col_text(st, 15);
  f.hash = col_text(st, 16);
  return f;
}

status check_text_field(std::string_view v, std::string_view what, size_t max = 1024) {
  if (v.size() > max)
    return {errc::invalid_argument,
            std::string(what) + " is longer than " + std::to_string(max) + " bytes"};
  if (!valid_utf8(v))
    return {errc::invalid_argument, std::string(what) + " is not valid UTF-8"};
  return status::ok();
}

using detail::errno_code;
using detail::sync_dir;
using detail::with_suffix;

/// The meta rows an open reads: the file's format and entity, and its fact id rows (schema
/// version 4; absent rows read as empty).
struct meta_rows {
  std::string format;
  entity_key key;
  std::string fact_id_prefix;
  std::string fact_id_legacy_until;
};

/// Reads every meta row in one statement (a handful: an open's one look at the table); the
/// SQLite result code of the prepare or the last step (SQLITE_DONE when all were read).
int read_meta(sqlite3* db, meta_rows& m) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &st, nullptr);
  if (rc != SQLITE_OK)
    return rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    auto k = col_text(st, 0);
    std::string* to = k == "format"                 ? &m.format
                      : k == "tenant"               ? &m.key.tenant
                      : k == "type"                 ? &m.key.type
                      : k == "id"                   ? &m.key.id
                      : k == "fact_id_prefix"       ? &m.fact_id_prefix
                      : k == "fact_id_legacy_until" ? &m.fact_id_legacy_until
                                                    : nullptr;
    if (to != nullptr)
      *to = col_text(st, 1);
  }
  sqlite3_finalize(st);
  return rc;
}

// Whether meta names no entity: a spare's placeholder rows (spare_pool.hpp).
bool unclaimed(const entity_key& key) {
  return key.tenant.empty() && key.type.empty() && key.id.empty();
}

// Creates `tmp` (it must not exist), writes `bytes` to it and fdatasyncs it. A failure leaves no
// file.
status write_new_file(const fs::path& tmp, std::string_view bytes) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    return {errno_code(e), "create " + tmp.string() + ": " + std::strerror(e)};
  }
  int e = detail::write_all(fd, bytes);
  if (e == 0 && ::fdatasync(fd) != 0)
    e = errno;
  ::close(fd);
  if (e != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return {errno_code(e), "write " + tmp.string() + ": " + std::strerror(e)};
  }
  return status::ok();
}

// Builds a new entity file at `tmp` (the caller renames it into place; a failure leaves no file).
// At the current schema version it is a copy of the process's template database with this
// entity's meta (entity_image.hpp): one write and one fdatasync, no SQL. Older versions (tests
// ask for them) replay their migrations through SQLite: schema, meta and user_version in one
// transaction without a journal and without syncs (nobody else can see the file yet), then WAL
// mode, then one fdatasync.
status build_entity_file(const fs::path& tmp, const entity_key& key, int64_t now, int version,
                         int page_size, const char* vfs) {
  if (version == current_schema_version) {
    std::string prefix = "fct_";
    append_hex(prefix, random_u64(), 16);
    auto image = detail::fresh_entity_image(key, now, prefix, page_size);
    if (!image)
      return image.error();
    return write_new_file(tmp, *image);
  }
  detail::sqlite_global_init();
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
    tmp.c_str(), &db,
    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXCLUSIVE, vfs);
  auto fail_with = [&](const std::string& what) {
    status st{db ? errno_code(sqlite3_system_errno(db)) : errc::io_error,
              "create " + tmp.string() + ": " + what + ": " +
                (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc))};
    sqlite3_close(db);
    std::error_code ec;
    fs::remove(tmp, ec);
    return st;
  };
  if (rc != SQLITE_OK)
    return fail_with("open");
  std::string script = "PRAGMA page_size=" + std::to_string(page_size) +
                       ";PRAGMA journal_mode=OFF;PRAGMA synchronous=OFF;BEGIN;";
  for (int v = 0; v < version; ++v) // an older version, for migration tests
    script += schema::migrations[v];
  char* err = nullptr;
  if (sqlite3_exec(db, script.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "";
    sqlite3_free(err);
    return fail_with("schema (" + m + ")");
  }
  // Versions before 4 get their fact_id_prefix from migration 4, like any old file.
  const char* meta_sql = "INSERT INTO meta(key, value) VALUES ('format', 'factum-entity'), "
                         "('tenant', ?), ('type', ?), ('id', ?), ('created_at', ?)";
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, meta_sql, -1, &st, nullptr) != SQLITE_OK)
    return fail_with("prepare meta");
  bind_text(st, 1, key.tenant);
  bind_text(st, 2, key.type);
  bind_text(st, 3, key.id);
  sqlite3_bind_int64(st, 4, now);
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return fail_with("write meta");
  std::string tail =
    "PRAGMA user_version=" + std::to_string(version) + ";COMMIT;PRAGMA journal_mode=WAL;";
  if (sqlite3_exec(db, tail.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "";
    sqlite3_free(err);
    return fail_with("finish (" + m + ")");
  }
  if (sqlite3_close(db) != SQLITE_OK)
    return fail_with("close");
  db = nullptr;
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fdatasync(fd) != 0) {
    std::string m = std::strerror(errno);
    if (fd >= 0)
      ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    return {errc::io_error, "sync " + tmp.string() + ": " + m};
  }
  ::close(fd);
  return status::ok();
}

} // namespace

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
  ~sync_state() {
    if (fd >= 0)
      ::close(fd);
  }
};

status entity_store::sync() {
  if (!deferred_sync())
    return status::ok();
  auto wal = wal_path();
  int fd;
  {
    // The descriptor and the directory sync under the mutex; the fdatasync outside it, so
    // that syncs on several threads overlap (each covers the commits made before it began,
    // and the kernel merges their cache flushes).
    std::lock_guard<std::mutex> g(sync_->mu);
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
  wal_frames_ = log - done;
  return status::ok();
}

namespace {
int wal_hook(void* p, sqlite3*, const char*, int frames) {
  *static_cast<int*>(p) = frames;
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
    sqlite3_close_v2(db_);
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
    std::vector<fs::path> made;
    for (auto d = dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path())
      made.push_back(d);
    fs::create_directories(dir, ec);
    if (ec)
      return status{errno_code(ec.value()), "cannot create " + dir.string() + ": " + ec.message()};
    if (opts.mode == durability::full)
      for (auto it = made.rbegin(); it != made.rend(); ++it)
        if (int e = sync_dir(it->parent_path()); e != 0)
          return status{errno_code(e),
                        "fsync " + it->parent_path().string() + ": " + std::strerror(e)};
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

namespace {

/// The first 32 bytes of a -wal file (its header: magic, page size, checkpoint sequence and
/// salts, checksum), or fewer when it is shorter or missing.
std::string wal_header(const fs::path& wal) {
  std::string h(32, '\0');
  int fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return {};
  ssize_t n = ::pread(fd, h.data(), h.size(), 0);
  ::close(fd);
  h.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return h;
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

/// Where the last whole commit of `wal`'s current generation ends: the offset after the last
/// commit frame (its header's database size is not 0) reached through frames whose salts are
/// the header's and whose checksums hold, as SQLite's recovery decides. 0 without a valid
/// header; 32 (the header alone) before the first commit. Frames up to there never change
/// while the generation lasts (SQLite rewrites in place only frames of an unfinished
/// transaction), so what a later commit adds starts there.
int64_t wal_committed_end(const fs::path& wal) {
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

} // namespace

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
  std::error_code ec;
  fs::copy_file(file, to, fs::copy_options::overwrite_existing, ec);
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
  int64_t from = wal_committed_end(wal_to); // 0 when the copy has no valid WAL header
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

result<std::unique_ptr<entity_store>> entity_store::open_file(const fs::path& file,
                                                              const store_options& opts) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return status{errc::not_found, "no such file: " + file.string()};
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
  int rc = sqlite3_open_v2(enc.c_str(), &db_, flags, vfs_name());
  if (rc != SQLITE_OK)
    return fail(rc, "open " + path_.string());
  sqlite3_extended_result_codes(db_, 1);
  if (auto st = configure(); !st)
    return st;
  // The WAL hook replaces SQLite's automatic-checkpoint hook (set it after the pragmas, which
  // would reset it): with deferred sync or without automatic checkpoints the owner checkpoints
  // (the runtime: on a storage thread) instead.
  if ((deferred_sync() || !opts_.auto_checkpoint) && !opts_.read_only)
    sqlite3_wal_hook(db_, wal_hook, &wal_frames_);
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
  return migrate();
}

status entity_store::configure() {
  sqlite3_busy_timeout(db_, opts_.busy_timeout_ms);
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

status entity_store::claim(entity_key& owner) {
  // Without a sync (synchronous=OFF for this one commit): a claim acknowledges nothing. Its
  // frames become durable with the entity's first durable commit (which syncs the whole WAL
  // after them); lost before that, the file is unclaimed again and the next open claims it.
  // A deferred-sync store (the runtime's) is at OFF already: nothing to switch.
  bool switch_sync = !deferred_sync();
  if (switch_sync)
    if (auto st = exec("PRAGMA synchronous=OFF"); !st)
      return st;
  auto restore = [&] { return switch_sync ? exec(synchronous_pragma()) : status::ok(); };
  if (auto st = exec("BEGIN IMMEDIATE"); !st) {
    (void)restore();
    return st;
  }
  meta_rows now;
  read_meta(db_, now); // a failure reads as unclaimed; the INSERT below then fails too
  owner = now.key;
  bool ok = true;
  if (unclaimed(owner)) {
    // Still unclaimed: no other connection got there first.
    owner = key_;
    std::string prefix = "fct_";
    append_hex(prefix, random_u64(), 16);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_,
                       "INSERT OR REPLACE INTO meta(key, value) VALUES ('tenant', ?1), "
                       "('type', ?2), ('id', ?3), ('created_at', ?4), ('fact_id_prefix', ?5)",
                       -1, &st, nullptr);
    if (st) {
      bind_text(st, 1, key_.tenant);
      bind_text(st, 2, key_.type);
      bind_text(st, 3, key_.id);
      sqlite3_bind_int64(st, 4, now_ms()); // TEXT affinity: stored as its decimal text
      bind_text(st, 5, prefix);
    }
    ok = st && sqlite3_step(st) == SQLITE_DONE;
    sqlite3_finalize(st);
    claimed_ = ok;
  }
  status result = ok ? exec("COMMIT")
                     : status{errc::io_error,
                              "claim " + path_.string() + ": " + std::string(sqlite3_errmsg(db_))};
  if (!result) {
    claimed_ = false;
    (void)exec("ROLLBACK");
  }
  if (auto st = restore(); !st && result)
    return st;
  return result;
}

status entity_store::migrate() {
  auto corrupt_or = [&](int rc, const char* what) -> status {
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
      return {errc::corruption, path_.string() + " is not a database or is corrupt"};
    return fail(rc, what);
  };
  // The reads of an open share one read transaction (one WAL read lock, one look at the wal-index
  // and the file) instead of taking one each. It ends before any write and on every return.
  // Not through the fault hook (tests count and fail the store's own statements), nor the
  // statement cache (a cached "BEGIN" would cost every open entity its memory for nothing).
  auto run = [&](const char* sql) {
    return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
  };
  bool reading = run("BEGIN");
  auto end_reading = [&] {
    if (reading && !run("COMMIT"))
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    reading = false;
  };
  struct read_guard {
    decltype(end_reading)& end;
    ~read_guard() { end(); }
  } guard{end_reading};
  int version = 0;
  {
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &st, nullptr);
    if (rc != SQLITE_OK)
      return corrupt_or(rc, "read user_version");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
      version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
      return corrupt_or(rc, "read user_version");
  }
  int target =
    opts_.target_schema_version > 0 ? opts_.target_schema_version : current_schema_version;
  if (target > current_schema_version) // open() refuses it too, before building a file
    return {errc::invalid_argument, "store_options.target_schema_version must be 0.." +
                                      std::to_string(current_schema_version)};
  if (version > current_schema_version)
    return {errc::newer_schema, path_.string() + " has schema version " + std::to_string(version) +
                                  "; this factum reads up to " +
                                  std::to_string(current_schema_version)};
  // Is this a factum file? A fresh one has no tables at all. A file with a schema version
  // (every factum file has one: migrations set it) has its meta rows read in one statement,
  // without a look at sqlite_master first: a missing meta table fails that statement.
  int tables = 0;
  bool has_meta = version > 0;
  if (version == 0) {
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type='table'", -1, &st,
                                nullptr);
    if (rc != SQLITE_OK)
      return corrupt_or(rc, "read schema");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      ++tables;
      if (std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "meta") == 0)
        has_meta = true;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return corrupt_or(rc, "read schema");
  }
  meta_rows meta; // as of this read transaction; read again after a claim or a migration
  if (has_meta)
    if (int rc = read_meta(db_, meta); rc != SQLITE_DONE && (rc & 0xff) != SQLITE_ERROR)
      return corrupt_or(rc, "read meta"); // SQLITE_ERROR: no meta table: not a factum file
  bool meta_stale = false;
  if (tables > 0 || version > 0) {
    entity_key stored = meta.key;
    if (meta.format != "factum-entity")
      return {errc::not_factum_file, path_.string() + " is a SQLite file but not a factum entity"};
    if (unclaimed(stored)) {
      // An unclaimed file: a spare renamed into place whose claim has not run (a crash in
      // between). It holds no entity yet. A writable open of its key claims it.
      if (key_.tenant.empty() || opts_.read_only)
        return {errc::not_found, path_.string() +
                                   " is an unclaimed entity file (no entity yet: the next "
                                   "writable open of its key claims it)"};
      end_reading();
      if (auto st = claim(stored); !st)
        return st;
      meta_stale = true; // the claim wrote meta rows (the fact id prefix among them)
      reading = run("BEGIN");
    }
    if (key_.tenant.empty()) {
      key_ = stored; // open_file: the file names its entity
    } else if (!(stored == key_)) {
      return {errc::corruption, path_.string() + " belongs to entity " + stored.to_string() +
                                  ", not " + key_.to_string()};
    }
  } else if (opts_.read_only || key_.tenant.empty()) {
    return {errc::not_factum_file, path_.string() + " is empty, not a factum entity"};
  }
  schema_version_ = version;
  if (version < target && !opts_.read_only) {
    end_reading();
    if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
      return st;
    for (int v = version; v < target; ++v) {
      if (auto st = exec(schema::migrations[v]); !st) {
        (void)exec("ROLLBACK");
        return {st.code(),
                "migrate to schema version " + std::to_string(v + 1) + ": " + st.message()};
      }
    }
    if (version == 0) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db_, "INSERT INTO meta(key, value) VALUES (?, ?)", -1, &st, nullptr);
      auto put = [&](const char* k, const std::string& v) {
        sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
        bind_text(st, 2, v);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        return rc == SQLITE_DONE;
      };
      bool ok = put("format", "factum-entity") && put("tenant", key_.tenant) &&
                put("type", key_.type) && put("id", key_.id) &&
                put("created_at", std::to_string(now_ms()));
      sqlite3_finalize(st);
      if (!ok) {
        (void)exec("ROLLBACK");
        return {errc::io_error, "write meta: " + std::string(sqlite3_errmsg(db_))};
      }
    }
    std::string uv = "PRAGMA user_version=" + std::to_string(target);
    if (auto st = exec(uv.c_str()); !st) {
      (void)exec("ROLLBACK");
      return st;
    }
    if (auto st = exec_cached("COMMIT"); !st) {
      (void)exec("ROLLBACK");
      return st;
    }
    schema_version_ = target;
    meta_stale = true; // the migrations wrote meta rows
    reading = run("BEGIN");
  } // an older file opened read-only is read as is: later versions' tables are absent
  if (auto st = load_head(); !st)
    return st;
  if (meta_stale) {
    meta = {};
    if (int rc = read_meta(db_, meta); rc != SQLITE_DONE)
      return fail(rc, "read fact id meta");
  }
  if (auto st = use_fact_id_meta(meta.fact_id_prefix, meta.fact_id_legacy_until); !st)
    return st;
  // Keys pending in the file belong to an activation that is gone (single activation).
  if (!opts_.read_only) {
    sqlite3_stmt* st = prepare("SELECT COUNT(*) FROM idempotency_keys WHERE status='pending'");
    if (!st)
      return fail(sqlite3_errcode(db_), "count pending keys");
    stmt_guard g{st};
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0) {
      released_on_open_ = sqlite3_column_int64(st, 0);
      sqlite3_reset(st);
      end_reading();
      if (auto s2 = exec("DELETE FROM idempotency_keys WHERE status='pending'"); !s2)
        return s2;
    }
  }
  return status::ok();
}

status entity_store::load_head() {
  sqlite3_stmt* st = prepare("SELECT seq, hash FROM facts ORDER BY seq DESC LIMIT 1");
  if (!st)
    return fail(sqlite3_errcode(db_), "read chain head");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    last_seq_ = sqlite3_column_int64(st, 0);
    head_hash_ = col_text(st, 1);
  } else if (rc == SQLITE_DONE) {
    last_seq_ = 0;
    head_hash_ = genesis_hash;
  } else {
    return fail(rc, "read chain head");
  }
  return status::ok();
}

status entity_store::use_fact_id_meta(const std::string& prefix, const std::string& legacy_until) {
  fact_id_prefix_.clear();
  legacy_ids_until_ = 0;
  if (schema_version_ < 4) { // a file kept at an older version: every id is old-style
    legacy_ids_until_ = std::numeric_limits<int64_t>::max();
    return status::ok();
  }
  fact_id_prefix_ = prefix;
  if (!legacy_until.empty())
    legacy_ids_until_ = std::strtoll(legacy_until.c_str(), nullptr, 10);
  // Checked in release builds: appending with a malformed prefix would write ids that get()
  // cannot find.
  if (!valid_fact_id_prefix(fact_id_prefix_))
    return {errc::corruption, path_.string() + ": meta fact_id_prefix is missing or malformed"};
  return status::ok();
}

// -- transactions -------------------------------------------------------------------------------

status entity_store::begin_batch() {
  if (in_batch_)
    return status::ok();
  if (auto st = check_writable(); !st)
    return st;
  if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
    return st;
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
  auto st = exec_cached("COMMIT");
  if (!st) {
    if (in_batch_) { // COMMIT failed but the transaction is still open: undo it whole
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      in_batch_ = dirty_ = false;
      last_seq_ = batch_mark_.seq;
      head_hash_ = batch_mark_.hash;
    }
    return st;
  }
  in_batch_ = dirty_ = false;
  return status::ok();
}

status entity_store::rollback() {
  if (!in_batch_)
    return status::ok();
  sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  in_batch_ = in_turn_ = dirty_ = false;
  last_seq_ = batch_mark_.seq;
  head_hash_ = batch_mark_.hash;
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

// -- facts --------------------------------------------------------------------------------------

result<fact> entity_store::append(const fact_draft& d) {
  if (auto st = validate_fact_token(d.type, "type"); !st)
    return st;
  if (!d.subtype.empty())
    if (auto st = validate_fact_token(d.subtype, "subtype"); !st)
      return st;
  if (!d.amount.empty() || !d.currency.empty()) {
    if (auto st = validate_amount(d.amount); !st)
      return st;
    bool cur_ok = d.currency.size() >= 3 && d.currency.size() <= 8;
    for (char c : d.currency)
      cur_ok = cur_ok && c >= 'A' && c <= 'Z';
    if (!cur_ok)
      return status{errc::invalid_argument, "currency must be 3 to 8 upper-case letters"};
  }
  if (d.timestamp_ms < 0)
    return status{errc::invalid_argument, "timestamp must not be negative"};
  if (d.config_version < 0)
    return status{errc::invalid_argument, "config_version must not be negative"};
  for (auto [v, what] : {std::pair{&d.tool_id, "tool_id"},
                         {&d.config_id, "config_id"},
                         {&d.trace_id, "trace_id"},
                         {&d.idempotency_key, "idempotency_key"},
                         {&d.from_entity, "from_entity"},
                         {&d.to_entity, "to_entity"}})
    if (auto st = check_text_field(*v, what); !st)
      return st;
  if (!d.data.is_object())
    return status{errc::invalid_argument, "fact data must be a JSON object"};
  fact f;
  try {
    f.data = json_text(d.data);
  } catch (const nlohmann::json::exception& e) {
    return status{errc::invalid_argument, std::string("fact data: ") + e.what()};
  }
  if (auto st = ensure_batch(); !st)
    return st;
  f.seq = last_seq_ + 1;
  if (f.seq > max_derived_seq)
    return status{errc::full, "the entity holds the most facts a fact id can number (2^48 - 1)"};
  // A file kept at an older schema version (migration tests only) gets old-style ids.
  f.fact_id =
    fact_id_prefix_.empty() ? time_ordered_id("fct_", 16) : derived_fact_id(fact_id_prefix_, f.seq);
  f.type = d.type;
  f.subtype = d.subtype;
  f.timestamp_ms = d.timestamp_ms ? d.timestamp_ms : now_ms();
  f.tenant_id = key_.tenant;
  f.entity_type = key_.type;
  f.entity_id = key_.id;
  f.tool_id = d.tool_id;
  f.config_id = d.config_id;
  f.config_version = d.config_version;
  f.trace_id = d.trace_id;
  f.idempotency_key = d.idempotency_key;
  f.amount = d.amount;
  f.currency = d.currency;
  f.from_entity = d.from_entity;
  f.to_entity = d.to_entity;
  f.prev_hash = head_hash_;
  f.hash = compute_hash(f);

  auto st = prepare("INSERT INTO facts(seq, fact_id, type, subtype, ts, tool_id, config_id, "
                    "config_version, trace_id, idempotency_key, amount, currency, from_entity, "
                    "to_entity, data, prev_hash, hash) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare fact insert");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, f.seq);
  bind_text(st, 2, f.fact_id);
  bind_text(st, 3, f.type);
  bind_text_or_null(st, 4, f.subtype);
  sqlite3_bind_int64(st, 5, f.timestamp_ms);
  bind_text_or_null(st, 6, f.tool_id);
  bind_text_or_null(st, 7, f.config_id);
  bind_int_or_null(st, 8, f.config_version);
  bind_text_or_null(st, 9, f.trace_id);
  bind_text_or_null(st, 10, f.idempotency_key);
  bind_text_or_null(st, 11, f.amount);
  bind_text_or_null(st, 12, f.currency);
  bind_text_or_null(st, 13, f.from_entity);
  bind_text_or_null(st, 14, f.to_entity);
  bind_text(st, 15, f.data);
  bind_text(st, 16, f.prev_hash);
  bind_text(st, 17, f.hash);
  if (auto s = step_done(st, "append fact"); !s)
    return s;
  last_seq_ = f.seq;
  head_hash_ = f.hash;
  return f;
}

result<std::vector<fact>> entity_store::append_many(const std::vector<fact_draft>& drafts) {
  std::vector<fact> out;
  out.reserve(drafts.size());
  bool own_turn = !in_turn_;
  if (own_turn)
    if (auto st = begin_turn(); !st)
      return st;
  for (auto& d : drafts) {
    auto r = append(d);
    if (!r) {
      if (own_turn)
        (void)end_turn(false);
      return r.error();
    }
    out.push_back(std::move(r.value()));
  }
  if (own_turn)
    if (auto st = end_turn(true); !st)
      return st;
  return out;
}

result<std::vector<fact>> entity_store::query(const fact_filter& f) {
  if (auto st = f.validate(); !st)
    return st;
  // The SQL text is built only from constant fragments; every value is a bound parameter.
  std::string sql = "SELECT ";
  sql += fact_columns;
  sql += " FROM facts WHERE 1";
  if (!f.type.empty())
    sql += " AND type = ?1";
  if (!f.subtype.empty())
    sql += " AND subtype = ?2";
  if (f.since_ms)
    sql += " AND ts >= ?3";
  if (f.until_ms)
    sql += " AND ts < ?4";
  if (f.after_seq)
    sql += " AND seq > ?5";
  if (f.before_seq)
    sql += " AND seq < ?6";
  if (!f.trace_id.empty())
    sql += " AND trace_id = ?7";
  if (!f.tool_id.empty())
    sql += " AND tool_id = ?8";
  if (!f.idempotency_key.empty())
    sql += " AND idempotency_key = ?9";
  sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?10" : " ORDER BY seq ASC LIMIT ?10";
  auto st = prepare_text(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare fact query");
  stmt_guard g{st};
  if (!f.type.empty())
    bind_text(st, 1, f.type);
  if (!f.subtype.empty())
    bind_text(st, 2, f.subtype);
  if (f.since_ms)
    sqlite3_bind_int64(st, 3, *f.since_ms);
  if (f.until_ms)
    sqlite3_bind_int64(st, 4, *f.until_ms);
  if (f.after_seq)
    sqlite3_bind_int64(st, 5, *f.after_seq);
  if (f.before_seq)
    sqlite3_bind_int64(st, 6, *f.before_seq);
  if (!f.trace_id.empty())
    bind_text(st, 7, f.trace_id);
  if (!f.tool_id.empty())
    bind_text(st, 8, f.tool_id);
  if (!f.idempotency_key.empty())
    bind_text(st, 9, f.idempotency_key);
  sqlite3_bind_int64(st, 10, f.limit);
  std::vector<fact> out;
  int rc;
  if (int frc = fault_check("query facts"); frc != SQLITE_OK)
    return fail(frc, "query facts");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_fact(st, key_));
  if (rc != SQLITE_DONE)
    return fail(rc, "query facts");
  return out;
}

result<fact> entity_store::get(int64_t seq) {
  static constexpr auto sql = sql_concat("SELECT ", fact_columns, " FROM facts WHERE seq=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get fact");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, seq);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_fact(st, key_);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no fact with seq " + std::to_string(seq)};
  return fail(rc, "get fact");
}

result<fact> entity_store::get(std::string_view fact_id) {
  auto not_found = [&] {
    return status{errc::not_found, "no fact with id " + std::string(fact_id.substr(0, 80))};
  };
  // A derived id (schema version 4) names its seq: a rowid lookup, no index on fact_id.
  if (int64_t seq = seq_of_derived_id(fact_id, fact_id_prefix_); seq > legacy_ids_until_) {
    auto f = get(seq);
    if (!f && f.error().code() == errc::not_found)
      return not_found();
    if (f && f.value().fact_id != fact_id)
      return not_found();
    return f;
  }
  // Old-style ids exist only in files from before version 4, which keep the UNIQUE index.
  if (legacy_ids_until_ == 0)
    return not_found();
  static constexpr auto sql = sql_concat("SELECT ", fact_columns, " FROM facts WHERE fact_id=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get fact");
  stmt_guard g{st};
  bind_text(st, 1, fact_id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_fact(st, key_);
  if (rc == SQLITE_DONE)
    return not_found();
  return fail(rc, "get fact");
}

result<verify_report> entity_store::verify() {
  verify_report rep;
  // Every check runs: a missing trigger must not hide an edited row.
  bool chain_bad = false;
  auto problem = [&](int64_t seq, std::string what) {
    if (seq > 0) {
      if (chain_bad)
        return; // report the first bad fact only
      chain_bad = true;
      rep.first_bad_seq = seq;
    }
    if (rep.ok) {
      rep.ok = false;
      rep.problem = what;
    }
    rep.problems.push_back(std::move(what));
  };
  if (schema_version_ != current_schema_version)
    problem(0, "schema version " + std::to_string(schema_version_) + ", expected " +
                 std::to_string(current_schema_version));
  {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type='trigger'", -1, &st,
                       nullptr);
    bool upd = false, del = false;
    while (st && sqlite3_step(st) == SQLITE_ROW) {
      auto n = col_text(st, 0);
      upd |= n == "facts_no_update";
      del |= n == "facts_no_delete";
    }
    sqlite3_finalize(st);
    if (!upd)
      problem(0, "trigger facts_no_update is missing: facts can be edited");
    if (!del)
      problem(0, "trigger facts_no_delete is missing: facts can be deleted");
  }
  std::string sql = std::string("SELECT ") + fact_columns + " FROM facts ORDER BY seq";
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
  if (rc != SQLITE_OK)
    return fail(rc, "verify");
  int64_t expect = 1;
  std::string prev(genesis_hash);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    fact f = read_fact(st, key_);
    ++rep.facts_checked;
    if (f.seq != expect)
      problem(f.seq, "seq " + std::to_string(f.seq) + " follows " + std::to_string(expect - 1) +
                       ": facts are missing");
    else if (f.prev_hash != prev)
      problem(f.seq, "prev_hash of seq " + std::to_string(f.seq) +
                       " does not equal the hash of the fact before it");
    else if (compute_hash(f) != f.hash)
      problem(f.seq, "hash of seq " + std::to_string(f.seq) +
                       " does not match its contents: the fact was altered");
    else if (f.seq > legacy_ids_until_ && f.fact_id != derived_fact_id(fact_id_prefix_, f.seq))
      problem(f.seq, "fact_id of seq " + std::to_string(f.seq) + " is not " + fact_id_prefix_ +
                       " + its seq in hex: two facts could share it");
    expect = f.seq + 1;
    prev = f.hash;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return fail(rc, "verify");
  return rep;
}

// -- idempotency keys ---------------------------------------------------------------------------

namespace {
constexpr char key_select[] =
  "SELECT key, status, fingerprint, response, created_at, expires_at FROM idempotency_keys ";

idempotency_record read_key(sqlite3_stmt* st) {
  idempotency_record r;
  r.key = col_text(st, 0);
  r.status = parse_key_status(col_text(st, 1));
  r.fingerprint = col_text(st, 2);
  r.response = col_text(st, 3);
  r.created_at_ms = sqlite3_column_int64(st, 4);
  r.expires_at_ms = col_opt(st, 5);
  return r;
}
} // namespace

result<key_begin_result> entity_store::peek_key(std::string_view key, std::string_view fingerprint,
                                                int64_t now) {
  key_begin_result out;
  auto r = get_key(key);
  if (!r) {
    if (r.error().code() != errc::not_found)
      return r.error();
    return out;
  }
  out.record = std::move(r.value());
  bool expired = out.record.expires_at_ms && *out.record.expires_at_ms <= now &&
                 out.record.status != key_status::pending;
  if (expired)
    out.outcome = key_outcome::fresh;
  else if (out.record.fingerprint != fingerprint)
    out.outcome = key_outcome::mismatch;
  else if (out.record.status == key_status::pending)
    out.outcome = key_outcome::in_flight;
  else if (out.record.status == key_status::completed)
    out.outcome = key_outcome::completed;
  else
    out.outcome = key_outcome::failed;
  return out;
}

result<key_begin_result> entity_store::begin_key(std::string_view key, std::string_view fingerprint,
                                                 int64_t ttl_ms, int64_t now) {
  if (key.empty() || key.size() > 255)
    return status{errc::invalid_argument, "idempotency key must be 1 to 255 characters"};
  if (ttl_ms < 0)
    return status{errc::invalid_argument, "idempotency key TTL must not be negative"};
  auto peek = peek_key(key, fingerprint, now);
  if (!peek)
    return peek;
  if (peek->outcome != key_outcome::fresh)
    return peek;
  key_begin_result out;
  if (auto st = ensure_batch(); !st)
    return st;
  // Fresh means no record or an expired settled one: REPLACE drops the expired record.
  auto ins = prepare("INSERT OR REPLACE INTO idempotency_keys(key, status, fingerprint, response, "
                     "created_at, expires_at) VALUES (?, 'pending', ?, NULL, ?, ?)");
  if (!ins)
    return fail(sqlite3_errcode(db_), "prepare key insert");
  stmt_guard g{ins};
  bind_text(ins, 1, key);
  bind_text(ins, 2, fingerprint);
  sqlite3_bind_int64(ins, 3, now);
  if (ttl_ms > 0)
    sqlite3_bind_int64(ins, 4, now + ttl_ms);
  else
    sqlite3_bind_null(ins, 4);
  if (auto st = step_done(ins, "insert key"); !st)
    return st;
  out.outcome = key_outcome::fresh;
  out.record = idempotency_record{std::string(key),
                                  key_status::pending,
                                  std::string(fingerprint),
                                  "",
                                  now,
                                  ttl_ms > 0 ? std::optional<int64_t>(now + ttl_ms) : std::nullopt};
  return out;
}

status entity_store::record_key(std::string_view key, key_status st_, std::string_view fingerprint,
                                std::string_view response, int64_t ttl_ms, int64_t now) {
  if (key.empty() || key.size() > 255)
    return {errc::invalid_argument, "idempotency key must be 1 to 255 characters"};
  if (st_ == key_status::pending || ttl_ms < 0)
    return {errc::invalid_argument, "record_key stores completed or failed keys"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT OR REPLACE INTO idempotency_keys(key, status, fingerprint, response, "
                    "created_at, expires_at) VALUES (?,?,?,?,?,?)");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare record key");
  stmt_guard g{st};
  bind_text(st, 1, key);
  bind_text(st, 2, to_string(st_));
  bind_text(st, 3, fingerprint);
  bind_text(st, 4, response);
  sqlite3_bind_int64(st, 5, now);
  if (ttl_ms > 0)
    sqlite3_bind_int64(st, 6, now + ttl_ms);
  else
    sqlite3_bind_null(st, 6);
  return step_done(st, "record key");
}

status entity_store::complete_key(std::string_view key, std::string_view response) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("UPDATE idempotency_keys SET status='completed', response=? "
                    "WHERE key=? AND status='pending'");
  stmt_guard g{st};
  bind_text(st, 1, response);
  bind_text(st, 2, key);
  if (auto s = step_done(st, "complete key"); !s)
    return s;
  if (sqlite3_changes(db_) != 1)
    return {errc::conflict, "idempotency key is not pending"};
  return status::ok();
}

status entity_store::fail_key(std::string_view key, std::string_view response) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("UPDATE idempotency_keys SET status='failed', response=? "
                    "WHERE key=? AND status='pending'");
  stmt_guard g{st};
  bind_text(st, 1, response);
  bind_text(st, 2, key);
  if (auto s = step_done(st, "fail key"); !s)
    return s;
  if (sqlite3_changes(db_) != 1)
    return {errc::conflict, "idempotency key is not pending"};
  return status::ok();
}

status entity_store::release_key(std::string_view key) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM idempotency_keys WHERE key=? AND status='pending'");
  stmt_guard g{st};
  bind_text(st, 1, key);
  return step_done(st, "release key");
}

result<int64_t> entity_store::purge_expired_keys(int64_t now) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM idempotency_keys WHERE expires_at IS NOT NULL AND expires_at <= ? "
                    "AND status <> 'pending'");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, now);
  if (auto s = step_done(st, "purge keys"); !s)
    return s;
  return static_cast<int64_t>(sqlite3_changes(db_));
}

result<idempotency_record> entity_store::get_key(std::string_view key) {
  static constexpr auto sql = sql_concat(key_select, "WHERE key=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare key lookup");
  stmt_guard g{st};
  bind_text(st, 1, key);
  if (int frc = fault_check("key lookup"); frc != SQLITE_OK)
    return fail(frc, "key lookup");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_key(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such idempotency key"};
  return fail(rc, "key lookup");
}

result<std::vector<idempotency_record>> entity_store::list_keys(int64_t limit) {
  static constexpr auto sql = sql_concat(key_select, "ORDER BY created_at DESC LIMIT ?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list keys");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, limit);
  std::vector<idempotency_record> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_key(st));
  if (rc != SQLITE_DONE)
    return fail(rc, "list keys");
  return out;
}

result<std::optional<int64_t>> entity_store::next_key_expiry() {
  auto st = prepare("SELECT MIN(expires_at) FROM idempotency_keys WHERE expires_at IS NOT NULL");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare next key expiry");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW)
    return fail(rc, "next key expiry");
  return col_opt(st, 0);
}

// -- alarms -------------------------------------------------------------------------------------

namespace {
constexpr char alarm_select[] = "SELECT name, due_at, payload, attempts, created_at FROM alarms ";
alarm_record read_alarm(sqlite3_stmt* st) {
  return alarm_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                      sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4)};
}
} // namespace

status entity_store::set_alarm(const alarm_record& a) {
  if (a.name.empty() || a.name.size() > 128 || !valid_utf8(a.name))
    return {errc::invalid_argument, "alarm name must be 1 to 128 bytes of UTF-8"};
  if (a.due_ms < 0 || a.attempts < 0)
    return {errc::invalid_argument, "alarm due time and attempts must not be negative"};
  if (!nlohmann::json::accept(a.payload))
    return {errc::invalid_argument, "alarm payload must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT OR REPLACE INTO alarms(name, due_at, payload, attempts, created_at) "
                    "VALUES (?,?,?,?,?)");
  stmt_guard g{st};
  bind_text(st, 1, a.name);
  sqlite3_bind_int64(st, 2, a.due_ms);
  bind_text(st, 3, a.payload);
  sqlite3_bind_int64(st, 4, a.attempts);
  sqlite3_bind_int64(st, 5, a.created_at_ms ? a.created_at_ms : now_ms());
  return step_done(st, "set alarm");
}

status entity_store::cancel_alarm(std::string_view name) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM alarms WHERE name=?");
  stmt_guard g{st};
  bind_text(st, 1, name);
  return step_done(st, "cancel alarm");
}

result<std::vector<alarm_record>> entity_store::list_alarms() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list alarms");
  stmt_guard g{st};
  std::vector<alarm_record> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_alarm(st));
  if (rc != SQLITE_DONE)
    return fail(rc, "list alarms");
  return out;
}

result<std::optional<alarm_record>> entity_store::next_alarm() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name LIMIT 1");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare next alarm");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return std::optional<alarm_record>(read_alarm(st));
  if (rc == SQLITE_DONE)
    return std::optional<alarm_record>();
  return fail(rc, "next alarm");
}

result<alarm_record> entity_store::get_alarm(std::string_view name) {
  static constexpr auto sql = sql_concat(alarm_select, "WHERE name=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get alarm");
  stmt_guard g{st};
  bind_text(st, 1, name);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_alarm(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such alarm"};
  return fail(rc, "get alarm");
}

// -- dead letters -------------------------------------------------------------------------------

namespace {
constexpr char dl_select[] =
  "SELECT id, operation, payload, idempotency_key, config_id, config_version, error_code, "
  "error_message, error_category, reason, attempts, first_attempt_at, last_attempt_at, trace_id, "
  "status, next_retry_at, expires_at, created_at, updated_at FROM dead_letters ";

dead_letter_record read_dl(sqlite3_stmt* st) {
  dead_letter_record d;
  d.id = col_text(st, 0);
  d.operation = col_text(st, 1);
  d.payload = col_text(st, 2);
  d.idempotency_key = col_text(st, 3);
  d.config_id = col_text(st, 4);
  d.config_version = sqlite3_column_int64(st, 5);
  d.error_code = col_text(st, 6);
  d.error_message = col_text(st, 7);
  d.error_category = col_text(st, 8);
  d.reason = col_text(st, 9);
  d.attempts = sqlite3_column_int64(st, 10);
  d.first_attempt_ms = sqlite3_column_int64(st, 11);
  d.last_attempt_ms = sqlite3_column_int64(st, 12);
  d.trace_id = col_text(st, 13);
  auto s = parse_dl_status(col_text(st, 14));
  d.status = s ? *s : dl_status::pending;
  d.next_retry_ms = col_opt(st, 15);
  d.expires_at_ms = col_opt(st, 16);
  d.created_at_ms = sqlite3_column_int64(st, 17);
  d.updated_at_ms = sqlite3_column_int64(st, 18);
  return d;
}
} // namespace

status entity_store::put_dead_letter(const dead_letter_record& d) {
  if (schema_version_ < 2)
    return {errc::internal, "dead letters need schema version 2"};
  if (d.id.empty() || d.id.size() > 128)
    return {errc::invalid_argument, "dead letter id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(d.payload))
    return {errc::invalid_argument, "dead letter payload must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare(
    "INSERT OR REPLACE INTO dead_letters(id, operation, payload, idempotency_key, config_id, "
    "config_version, error_code, error_message, error_category, reason, attempts, "
    "first_attempt_at, last_attempt_at, trace_id, status, next_retry_at, expires_at, created_at, "
    "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  stmt_guard g{st};
  int64_t now = now_ms();
  bind_text(st, 1, d.id);
  bind_text(st, 2, d.operation);
  bind_text(st, 3, d.payload);
  bind_text_or_null(st, 4, d.idempotency_key);
  bind_text_or_null(st, 5, d.config_id);
  bind_int_or_null(st, 6, d.config_version);
  bind_text(st, 7, d.error_code);
  bind_text(st, 8, d.error_message);
  bind_text(st, 9, d.error_category);
  bind_text(st, 10, d.reason);
  sqlite3_bind_int64(st, 11, d.attempts);
  sqlite3_bind_int64(st, 12, d.first_attempt_ms);
  sqlite3_bind_int64(st, 13, d.last_attempt_ms);
  bind_text_or_null(st, 14, d.trace_id);
  bind_text(st, 15, to_string(d.status));
  bind_opt(st, 16, d.next_retry_ms);
  bind_opt(st, 17, d.expires_at_ms);
  sqlite3_bind_int64(st, 18, d.created_at_ms ? d.created_at_ms : now);
  sqlite3_bind_int64(st, 19, d.updated_at_ms ? d.updated_at_ms : now);
  return step_done(st, "put dead letter");
}

result<dead_letter_record> entity_store::get_dead_letter(std::string_view id) {
  if (schema_version_ < 2)
    return status{errc::not_found, "no such dead letter"};
  static constexpr auto sql = sql_concat(dl_select, "WHERE id=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get dead letter");
  stmt_guard g{st};
  bind_text(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_dl(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such dead letter"};
  return fail(rc, "get dead letter");
}

result<std::vector<dead_letter_record>>
entity_store::list_dead_letters(std::optional<dl_status> filter, int64_t limit) {
  std::vector<dead_letter_record> out;
  if (schema_version_ < 2)
    return out;
  static constexpr auto all = sql_concat(dl_select, "ORDER BY created_at, id LIMIT ?2");
  static constexpr auto by =
    sql_concat(dl_select, "WHERE status=?1 ORDER BY created_at, id LIMIT ?2");
  auto st = filter ? prepare(by) : prepare(all);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list dead letters");
  stmt_guard g{st};
  if (filter)
    bind_text(st, 1, to_string(*filter));
  sqlite3_bind_int64(st, 2, limit);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_dl(st));
  if (rc != SQLITE_DONE)
    return fail(rc, "list dead letters");
  return out;
}

result<int64_t> entity_store::purge_dead_letters(int64_t now) {
  if (schema_version_ < 2)
    return int64_t{0};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM dead_letters WHERE expires_at IS NOT NULL AND expires_at <= ? "
                    "AND status IN ('resolved', 'discarded', 'acknowledged')");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, now);
  if (auto s = step_done(st, "purge dead letters"); !s)
    return s;
  return static_cast<int64_t>(sqlite3_changes(db_));
}

result<std::optional<int64_t>> entity_store::next_dead_letter_expiry() {
  if (schema_version_ < 2)
    return std::optional<int64_t>{};
  auto st = prepare("SELECT MIN(expires_at) FROM dead_letters WHERE expires_at IS NOT NULL "
                    "AND status IN ('resolved', 'discarded', 'acknowledged')");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare next dead letter expiry");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW)
    return fail(rc, "next dead letter expiry");
  return col_opt(st, 0);
}

// -- breakers -----------------------------------------------------------------------------------

status entity_store::put_breaker(const breaker_record& b) {
  if (schema_version_ < 2)
    return {errc::internal, "breakers need schema version 2"};
  if (b.tool_id.empty() || b.tool_id.size() > 128)
    return {errc::invalid_argument, "tool id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(b.data))
    return {errc::invalid_argument, "breaker data must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT OR REPLACE INTO breakers(tool_id, state, data, updated_at) "
                    "VALUES (?,?,?,?)");
  stmt_guard g{st};
  bind_text(st, 1, b.tool_id);
  bind_text(st, 2, b.state);
  bind_text(st, 3, b.data);
  sqlite3_bind_int64(st, 4, b.updated_at_ms ? b.updated_at_ms : now_ms());
  return step_done(st, "put breaker");
}

result<std::vector<breaker_record>> entity_store::list_breakers() {
  std::vector<breaker_record> out;
  if (schema_version_ < 2)
    return out;
  auto st = prepare("SELECT tool_id, state, data, updated_at FROM breakers ORDER BY tool_id");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list breakers");
  stmt_guard g{st};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back({col_text(st, 0), col_text(st, 1), col_text(st, 2), sqlite3_column_int64(st, 3)});
  if (rc != SQLITE_DONE)
    return fail(rc, "list breakers");
  return out;
}

// -- configs ------------------------------------------------------------------------------------

result<int64_t> entity_store::put_config(std::string_view config_id, std::string_view body) {
  if (schema_version_ < 2)
    return status{errc::internal, "configs need schema version 2"};
  if (config_id.empty() || config_id.size() > 128 || !valid_utf8(config_id))
    return status{errc::invalid_argument, "config id must be 1 to 128 bytes of UTF-8"};
  if (!nlohmann::json::accept(body))
    return status{errc::invalid_argument, "config body must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT INTO configs(config_id, version, body, created_at) "
                    "SELECT ?1, COALESCE(MAX(version), 0) + 1, ?2, ?3 FROM configs "
                    "WHERE config_id=?1 RETURNING version");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare put config");
  stmt_guard g{st};
  bind_text(st, 1, config_id);
  bind_text(st, 2, body);
  sqlite3_bind_int64(st, 3, now_ms());
  if (int frc = fault_check("put config"); frc != SQLITE_OK)
    return fail(frc, "put config");
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW)
    return fail(rc, "put config");
  int64_t v = sqlite3_column_int64(st, 0);
  rc = sqlite3_step(st);
  if (rc != SQLITE_DONE)
    return fail(rc, "put config");
  return v;
}

result<config_record> entity_store::get_config(std::string_view config_id, int64_t version) {
  if (schema_version_ < 2)
    return status{errc::not_found, "no such config"};
  auto st = version > 0 ? prepare("SELECT config_id, version, body, created_at FROM configs "
                                  "WHERE config_id=?1 AND version=?2")
                        : prepare("SELECT config_id, version, body, created_at FROM configs "
                                  "WHERE config_id=?1 ORDER BY version DESC LIMIT 1");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get config");
  stmt_guard g{st};
  bind_text(st, 1, config_id);
  if (version > 0)
    sqlite3_bind_int64(st, 2, version);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return config_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                         sqlite3_column_int64(st, 3)};
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no config " + std::string(config_id.substr(0, 128)) +
                                     (version ? " version " + std::to_string(version) : "")};
  return fail(rc, "get config");
}

result<std::vector<config_record>> entity_store::list_configs() {
  std::vector<config_record> out;
  if (schema_version_ < 2)
    return out;
  auto st = prepare("SELECT config_id, version, body, created_at FROM configs "
                    "ORDER BY config_id, version");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list configs");
  stmt_guard g{st};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(config_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                                sqlite3_column_int64(st, 3)});
  if (rc != SQLITE_DONE)
    return fail(rc, "list configs");
  return out;
}

// -- tenant SQL ---------------------------------------------------------------------------------

namespace {

struct auth_ctx {
  bool read_only;
  std::string denied;
};

bool tenant_table(const char* name) {
  return name && std::strncmp(name, "u_", 2) == 0;
}

int tenant_authorizer(void* p, int action, const char* a1, const char* a2, const char*,
                      const char*) {
  auto* ctx = static_cast<auth_ctx*>(p);
  auto deny = [&](std::string why) {
    if (ctx->denied.empty())
      ctx->denied = std::move(why);
    return SQLITE_DENY;
  };
  switch (action) {
  case SQLITE_SELECT:
  case SQLITE_READ:
  case SQLITE_FUNCTION:
  case SQLITE_RECURSIVE: return SQLITE_OK; // reading any table of its own database is allowed
  case SQLITE_INSERT:
  case SQLITE_UPDATE:
  case SQLITE_DELETE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    if (tenant_table(a1))
      return SQLITE_OK;
    if (a1 && (std::strcmp(a1, "sqlite_master") == 0 || std::strcmp(a1, "sqlite_schema") == 0 ||
               std::strcmp(a1, "sqlite_sequence") == 0))
      return SQLITE_OK; // bookkeeping of CREATE/DROP on u_ tables, authorized below
    return deny(std::string("writes are allowed only to tables named u_*, not ") + (a1 ? a1 : "?"));
  case SQLITE_CREATE_TABLE:
  case SQLITE_DROP_TABLE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    return tenant_table(a1) ? SQLITE_OK : deny("tenant tables must be named u_*");
  case SQLITE_CREATE_INDEX:
  case SQLITE_DROP_INDEX:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    return tenant_table(a2) ? SQLITE_OK : deny("indexes only on tenant tables u_*");
  case SQLITE_ALTER_TABLE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    return tenant_table(a2) ? SQLITE_OK : deny("only tenant tables u_* can be altered");
  default:
    return deny("statement kind not allowed in tenant SQL (action " + std::to_string(action) + ")");
  }
}

} // namespace

result<nlohmann::json> entity_store::tenant_sql(std::string_view sql, const nlohmann::json& params,
                                                bool read_only) {
  if (!read_only)
    if (auto st = ensure_batch(); !st)
      return st;
  auth_ctx ctx{read_only || opts_.read_only, {}};
  sqlite3_set_authorizer(db_, tenant_authorizer, &ctx);
  sqlite3_stmt* st = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &st, &tail);
  sqlite3_set_authorizer(db_, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = ctx.denied.empty() ? sqlite3_errmsg(db_) : ctx.denied;
    sqlite3_finalize(st);
    return status{errc::invalid_argument, "tenant SQL refused: " + msg};
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owner(st, sqlite3_finalize);
  if (!st)
    return status{errc::invalid_argument, "tenant SQL is empty"};
  while (tail && *tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';'))
    ++tail;
  if (tail && *tail && tail < sql.data() + sql.size())
    return status{errc::invalid_argument, "tenant SQL must be a single statement"};
  if (ctx.read_only && !sqlite3_stmt_readonly(st))
    return status{errc::invalid_argument, "tenant SQL must be read-only here"};
  if (!params.is_null() && !params.is_array())
    return status{errc::invalid_argument, "tenant SQL parameters must be a JSON array"};
  int i = 1;
  for (auto& p : params.is_array() ? params : nlohmann::json::array()) {
    if (p.is_null())
      sqlite3_bind_null(st, i);
    else if (p.is_boolean())
      sqlite3_bind_int64(st, i, p.get<bool>() ? 1 : 0);
    else if (p.is_number_integer())
      sqlite3_bind_int64(st, i, p.get<int64_t>());
    else if (p.is_number())
      sqlite3_bind_double(st, i, p.get<double>());
    else if (p.is_string())
      bind_text(st, i, p.get_ref<const std::string&>());
    else
      return status{errc::invalid_argument, "tenant SQL parameters must be JSON scalars"};
    ++i;
  }
  nlohmann::json rows = nlohmann::json::array();
  if (int frc = fault_check("tenant sql"); frc != SQLITE_OK)
    return fail(frc, "tenant sql");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    nlohmann::json row = nlohmann::json::object();
    int n = sqlite3_column_count(st);
    for (int c = 0; c < n; ++c) {
      const char* name = sqlite3_column_name(st, c);
      switch (sqlite3_column_type(st, c)) {
      case SQLITE_INTEGER: row[name] = sqlite3_column_int64(st, c); break;
      case SQLITE_FLOAT: row[name] = sqlite3_column_double(st, c); break;
      case SQLITE_NULL: row[name] = nullptr; break;
      default: row[name] = col_text(st, c);
      }
    }
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE)
    return fail(rc, "tenant sql");
  return rows;
}

// -- summary ------------------------------------------------------------------------------------

result<entity_info> entity_store::info() {
  entity_info i;
  i.key = key_;
  i.path = path_;
  i.schema_version = schema_version_;
  i.fact_count = last_seq_;
  if (last_seq_ > 0) {
    auto f = get(last_seq_);
    if (!f)
      return f.error();
    i.last_fact_ms = f->timestamp_ms;
  }
  auto st = prepare("SELECT value FROM meta WHERE key='created_at'");
  if (st) {
    stmt_guard g{st};
    if (sqlite3_step(st) == SQLITE_ROW)
      i.created_at_ms = std::atoll(col_text(st, 0).c_str());
  }
  std::error_code ec;
  i.file_bytes = fs::file_size(path_, ec);
  i.file_bytes += static_cast<uint64_t>(std::max<int64_t>(wal_bytes(), 0));
  return i;
}

std::string time_ordered_id(std::string_view prefix, int random_hex) {
  std::string out(prefix);
  out.reserve(prefix.size() + 12 + static_cast<size_t>(std::max(random_hex, 0)));
  append_hex(out, static_cast<uint64_t>(now_ms()), 12);
  for (int left = random_hex; left > 0; left -= 16)
    append_hex(out, random_u64(), std::min(left, 16));
  return out;
}

namespace {

/// The files directly inside the shard directories of data_dir/entities that `keep` accepts
/// (it gets the directory entry), in path order.
template <class Keep> std::vector<fs::path> list_shard_files(const fs::path& data_dir, Keep keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  auto root = data_dir / "entities";
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!it->is_directory(ec))
      continue;
    for (auto jt = fs::directory_iterator(it->path(), ec); !ec && jt != fs::directory_iterator();
         jt.increment(ec))
      if (keep(*jt))
        out.push_back(jt->path());
    ec.clear();
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

std::vector<fs::path> list_entity_files(const fs::path& data_dir) {
  return list_shard_files(data_dir, [](const fs::directory_entry& e) {
    std::error_code ec;
    return e.path().extension() == ".db" && e.is_regular_file(ec);
  });
}

std::vector<fs::path> list_orphan_wals(const fs::path& data_dir) {
  return list_shard_files(data_dir, [](const fs::directory_entry& e) {
    return e.path().extension() == ".db-wal" &&
           orphan_wal(fs::path(e.path()).replace_extension(".db")); // x.db-wal -> x.db
  });
}

std::optional<fs::path> orphan_wal(const fs::path& db_file) {
  auto wal = detail::with_suffix(db_file, "-wal");
  struct stat st {};
  if (::lstat(wal.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
    return std::nullopt;
  std::error_code ec;
  if (fs::exists(db_file, ec) || ec)
    return std::nullopt;
  return wal;
}

} // namespace factum
