// store_changes.cpp: an entity store's side of the replicated log (docs/storage-format.md, "The
// replicated log"). With store_options::capture_changes, an SQLite session (the session
// extension of Debian's libsqlite3, built with SQLITE_ENABLE_SESSION) records the rows every
// write transaction of the store changes; each such transaction also stamps the entity's next
// replicated commit number and a random id into meta (key replicated_commit, "<n>/<id>"), so that
// the file itself says which commit of the log it holds; after its COMMIT the session's changeset
// is kept for take_captured() and a new session starts. A replica builds its file from the owner's
// meta rows (genesis(), create_replica()) and applies the commits in number order
// (apply_captured()): any row that is not as the owner's was aborts the apply. An image of the
// whole file at a commit (image()) lets the log drop the records before it; a replica takes it
// whole (install_image()). Threads: the store's owner only, as every other member of
// entity_store.
//
// A session records nothing of a table without a PRIMARY KEY: every table of the entity schema
// has one; a tenant's own table without one is not replicated (docs/cluster.md says so).
//
// Compiled outside the unity build: the session API of sqlite3.h is declared only when these two
// macros are defined before its first inclusion.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "factum/storage/entity_store.hpp"
#include "file/file_io.hpp"
#include "store/entity_image.hpp"
#include "store/store_sql.hpp"

namespace factum {

namespace fs = std::filesystem;

namespace {

/// The meta key that holds a file's last replicated commit number.
constexpr const char* commit_meta_key = "replicated_commit";

/// The meta row of a file's last replicated commit: "<number>/<id>" (id: 16 hex digits, random).
struct commit_mark {
  int64_t number = 0;
  std::string id;
};

result<commit_mark> read_commit_mark(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'replicated_commit'", -1, &st,
                              nullptr);
  if (rc != SQLITE_OK)
    return status{errc::io_error, std::string("read replicated_commit: ") + sqlite3_errmsg(db)};
  commit_mark m;
  std::string text;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    text = p ? p : "";
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return status{errc::io_error, std::string("read replicated_commit: ") + sqlite3_errmsg(db)};
  if (rc == SQLITE_ROW) {
    auto slash = text.find('/');
    try {
      m.number = std::stoll(text.substr(0, slash));
    } catch (const std::exception&) {
      m.number = -1;
    }
    if (slash == std::string::npos || m.number <= 0)
      return status{errc::corruption, "meta replicated_commit is '" + text + "'"};
    m.id = text.substr(slash + 1);
  }
  return m;
}

result<std::vector<std::pair<std::string, std::string>>> read_meta_rows(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT key, CAST(value AS TEXT) FROM meta ORDER BY key", -1, &st,
                         nullptr) != SQLITE_OK)
    return status{errc::io_error, std::string("read meta: ") + sqlite3_errmsg(db)};
  std::vector<std::pair<std::string, std::string>> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    auto text = [&](int c) {
      auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
      return std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(st, c)));
    };
    if (text(0) != commit_meta_key)
      out.emplace_back(text(0), text(1));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return status{errc::io_error, std::string("read meta: ") + sqlite3_errmsg(db)};
  return out;
}

/// Opens a file that no one else has open and that is in WAL mode, read-only and as immutable:
/// SQLite then reads the database file alone and creates no -wal or -shm beside it.
int open_unshared(const fs::path& file, sqlite3** db) {
  std::string uri = "file:";
  for (unsigned char c : file.string()) // percent-encode what a URI path cannot hold as is
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_')
      uri.push_back(static_cast<char>(c));
    else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      uri += b;
    }
  uri += "?immutable=1";
  return sqlite3_open_v2(uri.c_str(), db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
}

std::string meta_value(const replica_genesis& g, std::string_view key) {
  for (auto& [k, v] : g.meta)
    if (k == key)
      return v;
  return {};
}

/// The conflict handler of an apply: any conflict is a replica that differs from its owner.
int abort_on_conflict(void* ctx, int, sqlite3_changeset_iter*) {
  *static_cast<bool*>(ctx) = true;
  return SQLITE_CHANGESET_ABORT;
}

} // namespace

// -- capture (the owner) ------------------------------------------------------------------------

status entity_store::load_commit_mark() {
  auto n = read_commit_mark(db_);
  if (!n)
    return n.error();
  repl_commit_ = open_commit_ = n->number;
  repl_id_ = open_commit_id_ = n->id;
  return status::ok();
}

status entity_store::start_capture() {
  if (!opts_.capture_changes || opts_.read_only || session_)
    return status::ok();
  if (auto st = load_commit_mark(); !st)
    return st;
  if (repl_commit_ == 0 && last_seq_ > 0)
    return {errc::conflict, "entity " + key_.to_string() + " has " + std::to_string(last_seq_) +
                              " facts that no replicated log holds: it cannot be replicated"};
  int rc = sqlite3session_create(db_, "main", &session_);
  if (rc == SQLITE_OK)
    rc = sqlite3session_attach(session_, nullptr);
  if (rc != SQLITE_OK) {
    end_capture();
    return {errc::internal, "start capturing changes: " + std::string(sqlite3_errstr(rc))};
  }
  return status::ok();
}

status entity_store::stamp_capture() {
  stamped_ = 0;
  if (!session_ || sqlite3session_isempty(session_))
    return status::ok();
  int64_t next = repl_commit_ + 1;
  auto id = time_ordered_id("", 16).substr(12); // the random part: 16 hex digits
  auto mark = std::to_string(next) + "/" + id;
  if (auto st = step_bound("INSERT INTO meta(key, value) VALUES ('replicated_commit', ?1) "
                           "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                           "stamp the replicated commit", mark);
      !st)
    return st;
  stamped_ = next;
  stamped_id_ = std::move(id);
  return status::ok();
}

void entity_store::collect_capture(bool committed) {
  if (!session_)
    return;
  if (committed && stamped_ > 0) {
    int size = 0;
    void* bytes = nullptr;
    int rc = sqlite3session_changeset(session_, &size, &bytes);
    if (rc == SQLITE_OK) {
      captured_.push_back({stamped_,
                           std::string(static_cast<const char*>(bytes), static_cast<size_t>(size)),
                           stamped_id_});
      repl_commit_ = stamped_;
      repl_id_ = stamped_id_;
    } else if (!capture_error_) {
      capture_error_ =
        status{errc::internal, "commit " + std::to_string(stamped_) + " of " + key_.to_string() +
                                 ": its changes: " + sqlite3_errstr(rc)};
    }
    sqlite3_free(bytes);
  }
  stamped_ = 0;
  // A new session for the next transaction (3.40 has no reset; a rolled-back transaction's rows
  // net out in the old one, but its bookkeeping would grow).
  sqlite3session_delete(session_);
  session_ = nullptr;
  if (sqlite3session_create(db_, "main", &session_) != SQLITE_OK ||
      sqlite3session_attach(session_, nullptr) != SQLITE_OK) {
    end_capture();
    if (!capture_error_)
      capture_error_ = status{errc::internal, "restart capturing changes of " + key_.to_string()};
  }
}

void entity_store::end_capture() noexcept {
  if (session_)
    sqlite3session_delete(session_);
  session_ = nullptr;
}

result<std::vector<captured_commit>> entity_store::take_captured() {
  if (capture_error_)
    return *capture_error_;
  if (opts_.capture_changes && !session_ && !opts_.read_only)
    return status{errc::internal, "the store of " + key_.to_string() + " captures no changes"};
  // Changes outside a stamped transaction (none should be: every write path stamps) would never
  // reach the log: refuse to go on rather than replicate less than the file holds.
  if (session_ && !in_batch_ && stamped_ == 0 && !sqlite3session_isempty(session_)) {
    capture_error_ = status{errc::internal, "entity " + key_.to_string() +
                                              " committed changes outside a replicated commit"};
    return *capture_error_;
  }
  return std::exchange(captured_, {});
}

result<replica_genesis> entity_store::genesis() {
  auto rows = read_meta_rows(db_);
  if (!rows)
    return rows.error();
  replica_genesis g{std::move(*rows), 0};
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "PRAGMA page_size", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    g.page_size = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (!valid_page_size(g.page_size))
    return status{errc::io_error, "read the page size of " + path_.string()};
  return g;
}

// -- apply (a replica) --------------------------------------------------------------------------

status entity_store::create_replica(const store_options& opts, const entity_key& key,
                                    const replica_genesis& g, bool sync) {
  auto path = key.file_path(opts.data_dir);
  std::error_code ec;
  if (fs::exists(path, ec))
    return {errc::conflict, "entity " + key.to_string() + " has a file here already"};
  if (meta_value(g, "tenant") != key.tenant || meta_value(g, "type") != key.type ||
      meta_value(g, "id") != key.id)
    return {errc::corruption, "the genesis names another entity than " + key.to_string()};
  int64_t created_at = 0;
  try {
    created_at = std::stoll(meta_value(g, "created_at"));
  } catch (const std::exception&) {
    return {errc::corruption, "the genesis of " + key.to_string() + " has no created_at"};
  }
  auto image = detail::fresh_entity_image(key, created_at, meta_value(g, "fact_id_prefix"),
                                          g.page_size > 0 ? g.page_size : opts.page_size);
  if (!image)
    return image.error();
  auto dir = path.parent_path();
  if (int e = detail::create_dirs_synced(dir, sync && opts.mode == durability::full); e != 0)
    return {detail::errno_code(e), "cannot create " + dir.string() + ": " + std::strerror(e)};
  auto tmp = path;
  tmp += ".tmp-" + time_ordered_id("", 16);
  if (auto st = detail::write_new_file(tmp, *image, sync); !st)
    return st;
  // The new file's meta must be the owner's: anything else (a file from an older schema, a
  // fact id history) cannot be rebuilt from the image.
  {
    sqlite3* db = nullptr;
    int rc = open_unshared(tmp, &db);
    auto rows = rc == SQLITE_OK ? read_meta_rows(db)
                                : result<std::vector<std::pair<std::string, std::string>>>(
                                    status{errc::io_error, sqlite3_errstr(rc)});
    sqlite3_close(db);
    if (!rows || *rows != g.meta) {
      fs::remove(tmp, ec);
      return {errc::corruption, "a replica of " + key.to_string() +
                                  " cannot be built from its genesis (its meta differs from a "
                                  "new entity's)"};
    }
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    int e = errno;
    fs::remove(tmp, ec);
    return {e == EEXIST ? errc::conflict : detail::errno_code(e),
            "rename into " + path.string() + ": " + std::strerror(e)};
  }
  if (sync && opts.mode == durability::full)
    if (int e = detail::sync_dir(dir); e != 0)
      return {detail::errno_code(e), "sync " + dir.string() + ": " + std::strerror(e)};
  return status::ok();
}

status entity_store::apply_captured(const captured_commit& c) {
  if (auto st = check_writable(); !st)
    return st;
  if (in_batch_)
    return {errc::internal, "apply_captured inside a batch"};
  auto have = read_commit_mark(db_);
  if (!have)
    return have.error();
  repl_commit_ = have->number;
  repl_id_ = have->id;
  if (c.number == have->number && c.id != have->id)
    return {errc::corruption, "entity " + key_.to_string() + " holds another commit " +
                                std::to_string(c.number) + " than the log's (" + have->id +
                                ", not " + c.id + "): its file diverged"};
  if (c.number <= have->number)
    return status::ok();
  if (c.number != have->number + 1)
    return {errc::conflict, "entity " + key_.to_string() + " holds replicated commit " +
                              std::to_string(have->number) + "; commit " +
                              std::to_string(c.number) +
                              " cannot follow it (commits are missing between)"};
  if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
    return st;
  auto undo = [&](status st) {
    if (!sqlite3_get_autocommit(db_))
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return st;
  };
  bool conflicted = false;
  int rc = sqlite3changeset_apply(db_, static_cast<int>(c.changeset.size()),
                                  const_cast<char*>(c.changeset.data()), nullptr, abort_on_conflict,
                                  &conflicted);
  if (rc != SQLITE_OK)
    return undo({conflicted || (rc & 0xff) == SQLITE_ABORT ? errc::corruption : detail::map_rc(rc),
                 "apply commit " + std::to_string(c.number) + " to the replica of " +
                   key_.to_string() + ": " +
                   (conflicted ? std::string("a row differs from the owner's")
                               : std::string(sqlite3_errmsg(db_)))});
  auto now = read_commit_mark(db_);
  if (!now)
    return undo(now.error());
  if (now->number != c.number || now->id != c.id)
    return undo({errc::corruption, "commit " + std::to_string(c.number) + " of " +
                                     key_.to_string() + " does not carry its number"});
  if (auto st = exec_cached("COMMIT"); !st)
    return undo(st);
  repl_commit_ = c.number;
  repl_id_ = c.id;
  return load_head();
}

// -- images (the log's compaction) ---------------------------------------------------------------

result<replica_image> entity_store::image() {
  if (in_batch_)
    return status{errc::internal, "an image of " + key_.to_string() + " inside a batch"};
  auto mark = read_commit_mark(db_);
  if (!mark)
    return mark.error();
  // Within the read transaction of sqlite3_serialize's own statement: the pages of one commit.
  // Nothing can commit in between: this store is the file's only writer, and it is here.
  sqlite3_int64 size = 0;
  unsigned char* pages = sqlite3_serialize(db_, "main", &size, 0);
  if (!pages)
    return status{errc::io_error,
                  "an image of " + key_.to_string() + ": " + std::string(sqlite3_errmsg(db_))};
  replica_image img{mark->number, mark->id,
                    std::string(reinterpret_cast<const char*>(pages), static_cast<size_t>(size))};
  sqlite3_free(pages);
  return img;
}

status entity_store::install_image(const store_options& opts, const entity_key& key,
                                   const replica_image& img, bool sync) {
  auto path = key.file_path(opts.data_dir);
  auto dir = path.parent_path();
  bool synced = sync && opts.mode == durability::full;
  if (int e = detail::create_dirs_synced(dir, synced); e != 0)
    return {detail::errno_code(e), "cannot create " + dir.string() + ": " + std::strerror(e)};
  auto tmp = path;
  tmp += ".image-" + time_ordered_id("", 16);
  std::error_code ec;
  if (auto st = detail::write_new_file(tmp, img.bytes, synced); !st)
    return st;
  // The image must be this entity's file at that commit: its meta names the key and the mark.
  status checked;
  {
    sqlite3* db = nullptr;
    int rc = open_unshared(tmp, &db);
    auto rows = rc == SQLITE_OK ? read_meta_rows(db)
                                : result<std::vector<std::pair<std::string, std::string>>>(
                                    status{errc::corruption, sqlite3_errstr(rc)});
    auto mark = rows ? read_commit_mark(db) : result<commit_mark>(rows.error());
    sqlite3_close(db);
    replica_genesis g{rows ? *rows : std::vector<std::pair<std::string, std::string>>{}, 0};
    if (!rows || !mark || meta_value(g, "tenant") != key.tenant ||
        meta_value(g, "type") != key.type || meta_value(g, "id") != key.id ||
        mark->number != img.number || mark->id != img.id)
      checked = {errc::corruption, "an image of " + key.to_string() + " at commit " +
                                     std::to_string(img.number) +
                                     " is not that entity's file at that commit"};
  }
  for (const char* suffix : {"-wal", "-shm"})
    if (!checked)
      break;
    else if (!fs::remove(path.string() + suffix, ec) && ec)
      checked = {errc::io_error, "remove " + path.string() + suffix + ": " + ec.message()};
  if (!checked) {
    fs::remove(tmp, ec);
    return checked;
  }
  // The old file's -wal is gone before the image takes its name: a -wal left beside the image
  // would be replayed into it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    fs::remove(tmp, ec);
    return {detail::errno_code(e), "rename into " + path.string() + ": " + std::strerror(e)};
  }
  if (synced)
    if (int e = detail::sync_dir(dir); e != 0)
      return {detail::errno_code(e), "sync " + dir.string() + ": " + std::strerror(e)};
  return status::ok();
}

} // namespace factum
