// store_schema.cpp: an entity file's schema (see entity_store.hpp): building a new file
// (build_entity_file), claiming an unclaimed one (a spare, spare_pool.hpp) and the migrations an
// open runs, with the meta rows they read and write. Run by entity_store::open and open_file on
// the opening thread, the store's one owner at the time. The file format is specified in
// docs/storage-format.md; the migrations' SQL is in schema.hpp.
#include "factum/storage/entity_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#include "file/file_io.hpp"
#include "store/entity_image.hpp"
#include "store/schema.hpp"
#include "store/sqlite_global.hpp"
#include "store/store_sql.hpp"

namespace fs = std::filesystem;

namespace factum {

using detail::append_hex;
using detail::bind_text;
using detail::col_text;
using detail::errno_code;
using detail::random_u64;
using detail::stmt_guard;

// -- new files ----------------------------------------------------------------------------------

namespace {

/// The meta rows an open reads: the file's format and entity, and its fact id rows (schema
/// version 4; absent rows read as empty).
struct meta_rows {
  std::string format;
  entity_key key;
  std::string fact_id_prefix;
  std::string fact_id_legacy_until;
  std::string fact_id_history;
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
                      : k == "fact_id_history"      ? &m.fact_id_history
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

} // namespace

namespace detail {

// Creates `tmp` (it must not exist), writes `bytes` to it and fdatasyncs it. A failure leaves no
// file.
status write_new_file(const fs::path& tmp, std::string_view bytes, bool sync) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    return {errno_code(e), "create " + tmp.string() + ": " + std::strerror(e)};
  }
  int e = detail::write_all(fd, bytes);
  if (e == 0 && sync && ::fdatasync(fd) != 0)
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
    auto prefix = new_fact_id_prefix();
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

} // namespace detail

// -- claim and migrations -----------------------------------------------------------------------

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
    auto prefix = new_fact_id_prefix();
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

status entity_store::open_error(int rc, const char* what) {
  if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
    return {errc::corruption, path_.string() + " is not a database or is corrupt"};
  return fail(rc, what);
}

result<int> entity_store::read_schema_version() {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &st, nullptr);
  if (rc != SQLITE_OK)
    return open_error(rc, "read user_version");
  int version = 0;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return open_error(rc, "read user_version");
  return version;
}

result<int> entity_store::count_tables(bool& has_meta) {
  sqlite3_stmt* st = nullptr;
  int rc =
    sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type='table'", -1, &st, nullptr);
  if (rc != SQLITE_OK)
    return open_error(rc, "read schema");
  int tables = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    ++tables;
    if (std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "meta") == 0)
      has_meta = true;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return open_error(rc, "read schema");
  return tables;
}

status entity_store::write_migrations(int version, int target) {
  if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
    return st;
  auto rollback_with = [&](status st) {
    (void)exec("ROLLBACK");
    return st;
  };
  for (int v = version; v < target; ++v)
    if (auto st = exec(schema::migrations[v]); !st)
      return rollback_with(
        {st.code(), "migrate to schema version " + std::to_string(v + 1) + ": " + st.message()});
  if (version == 0) { // a new file made in place (tests): its meta rows
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
    if (!ok)
      return rollback_with({errc::io_error, "write meta: " + std::string(sqlite3_errmsg(db_))});
  }
  std::string uv = "PRAGMA user_version=" + std::to_string(target);
  if (auto st = exec(uv.c_str()); !st)
    return rollback_with(st);
  if (auto st = exec_cached("COMMIT"); !st)
    return rollback_with(st);
  schema_version_ = target;
  return status::ok();
}

result<int64_t> entity_store::count_pending_keys() {
  sqlite3_stmt* st = schema_version_ >= schema::journal_version
                       ? prepare("SELECT COUNT(*) FROM idempotency_keys WHERE status='pending' "
                                 "AND 'key:' || key NOT IN (SELECT key FROM journal)")
                       : prepare("SELECT COUNT(*) FROM idempotency_keys WHERE status='pending'");
  if (!st)
    return fail(sqlite3_errcode(db_), "count pending keys");
  stmt_guard g{st};
  int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  return n;
}

/// Long for a reason: every read of an open shares one read transaction (one WAL read lock, one
/// look at the wal-index and the file), which must end before each write (a claim, the
/// migrations, releasing pending keys) and on every return; the steps themselves are the
/// functions above.
status entity_store::migrate() {
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
  auto version = read_schema_version();
  if (!version)
    return version.error();
  int target =
    opts_.target_schema_version > 0 ? opts_.target_schema_version : current_schema_version;
  if (target > current_schema_version) // open() refuses it too, before building a file
    return {errc::invalid_argument, "store_options.target_schema_version must be 0.." +
                                      std::to_string(current_schema_version)};
  if (*version > current_schema_version)
    return {errc::newer_schema, path_.string() + " has schema version " + std::to_string(*version) +
                                  "; this factum reads up to " +
                                  std::to_string(current_schema_version)};
  // Is this a factum file? A fresh one has no tables at all. A file with a schema version
  // (every factum file has one: migrations set it) has its meta rows read in one statement,
  // without a look at sqlite_master first: a missing meta table fails that statement.
  int tables = 0;
  bool has_meta = *version > 0;
  if (*version == 0) {
    auto n = count_tables(has_meta);
    if (!n)
      return n.error();
    tables = *n;
  }
  meta_rows meta; // as of this read transaction; read again after a claim or a migration
  if (has_meta)
    if (int rc = read_meta(db_, meta); rc != SQLITE_DONE && (rc & 0xff) != SQLITE_ERROR)
      return open_error(rc, "read meta"); // SQLITE_ERROR: no meta table: not a factum file
  bool meta_stale = false;
  if (tables > 0 || *version > 0) {
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
  schema_version_ = *version;
  if (*version < target && !opts_.read_only) {
    end_reading();
    if (auto st = write_migrations(*version, target); !st)
      return st;
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
  if (auto st =
        use_fact_id_meta(meta.fact_id_prefix, meta.fact_id_legacy_until, meta.fact_id_history);
      !st)
    return st;
  if (opts_.read_only)
    return load_commit_mark();
  // Replicated: the claim and the release of pending keys below are captured like any commit.
  if (auto st = start_capture(); !st)
    return st;
  // Cluster mode: the claim releases the pending keys in its own transaction, once it holds the
  // file. A file another node owns under a newer epoch is left as it is, its pending keys
  // included (they belong to that owner's live activation).
  if (opts_.owner_epoch > 0) {
    end_reading();
    return take_ownership(opts_.owner_epoch, opts_.owner_node, true);
  }
  // Keys pending in the file belong to an activation that is gone (single activation). A key
  // with a journal stays pending: its call was interrupted at an await, and a retry resumes it.
  auto pending = count_pending_keys();
  if (!pending)
    return pending.error();
  if (*pending > 0) {
    released_on_open_ = *pending;
    end_reading();
    const char* release = schema_version_ >= schema::journal_version
                            ? schema::release_unjournaled_sql
                            : schema::release_pending_sql;
    if (!session_)
      return exec(release);
    // Captured: in a transaction of its own, stamped like any commit.
    auto st = exec("BEGIN IMMEDIATE");
    if (st)
      st = exec(release);
    if (st)
      st = stamp_capture();
    if (st)
      st = exec("COMMIT");
    if (!st && !sqlite3_get_autocommit(db_))
      (void)exec("ROLLBACK");
    collect_capture(st.is_ok());
    return st;
  }
  return status::ok();
}

} // namespace factum
