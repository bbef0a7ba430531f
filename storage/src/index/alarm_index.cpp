// alarm_index.cpp: DATA/runtime/alarms.db (see alarm_index.hpp). One owner thread at a time.
#include "factum/storage/alarm_index.hpp"

#include <sqlite3.h>

#include <chrono>

#include "file/file_io.hpp"
#include "index/index_db.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

status alarm_sql_error(sqlite3* db, const char* what) {
  return detail::index_error(db, "alarm index", what);
}

using detail::col_text;

constexpr const char* upsert_sql =
  "INSERT OR REPLACE INTO alarm_index(digest, tenant, type, id, due_at) VALUES (?,?,?,?,?)";
constexpr const char* remove_alarm_sql = "DELETE FROM alarm_index WHERE digest=?";

} // namespace

result<std::unique_ptr<alarm_index>> alarm_index::open(const fs::path& data_dir, durability mode) {
  std::unique_ptr<alarm_index> ix(new alarm_index());
  if (auto st = detail::open_index_db(data_dir, "alarms.db", "alarm index", ix->db_); !st)
    return st;
  ix->stmts_ = std::make_unique<detail::statement_cache>(ix->db_);
  std::string sql = "PRAGMA synchronous=";
  sql += mode == durability::full ? "FULL;" : "NORMAL;";
  sql += "CREATE TABLE IF NOT EXISTS alarm_index("
         "  digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, type TEXT NOT NULL, id TEXT NOT NULL,"
         "  due_at INTEGER NOT NULL, parked_until INTEGER, park_attempts INTEGER NOT NULL "
         "  DEFAULT 0, park_reason TEXT) WITHOUT ROWID;"
         "CREATE INDEX IF NOT EXISTS alarm_index_by_due ON alarm_index(due_at);";
  if (sqlite3_exec(ix->db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return alarm_sql_error(ix->db_, "create");
  // An index made before alarms could be parked gains the columns (derived data: no version).
  bool has_parked = false;
  sqlite3_stmt* info = nullptr;
  if (sqlite3_prepare_v2(ix->db_, "PRAGMA table_info(alarm_index)", -1, &info, nullptr) !=
      SQLITE_OK)
    return alarm_sql_error(ix->db_, "table_info");
  while (sqlite3_step(info) == SQLITE_ROW)
    has_parked |= col_text(info, 1) == "parked_until";
  sqlite3_finalize(info);
  if (!has_parked &&
      sqlite3_exec(ix->db_,
                   "ALTER TABLE alarm_index ADD COLUMN parked_until INTEGER;"
                   "ALTER TABLE alarm_index ADD COLUMN park_attempts INTEGER NOT NULL DEFAULT 0;"
                   "ALTER TABLE alarm_index ADD COLUMN park_reason TEXT;",
                   nullptr, nullptr, nullptr) != SQLITE_OK)
    return alarm_sql_error(ix->db_, "add park columns");
  return ix;
}

void alarm_index::set_fault(fault_hook fault) {
  fault_ = std::move(fault);
}

status alarm_index::injected(const char* what) {
  return detail::injected_fault(fault_, "alarm index", what);
}

alarm_index::~alarm_index() {
  stmts_.reset(); // finalized before the connection closes
  if (db_)
    sqlite3_close_v2(db_);
}

status alarm_index::apply(const std::vector<alarm_index_entry>& changes) {
  if (changes.empty())
    return status::ok();
  if (auto st = injected("apply"); !st)
    return st;
  auto* up = stmts_->get(upsert_sql);
  auto* del = stmts_->get(remove_alarm_sql);
  if (!up || !del)
    return alarm_sql_error(db_, "apply");
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK)
    return alarm_sql_error(db_, "begin");
  bool ok = true;
  for (auto& c : changes) {
    if (!ok)
      break;
    auto d = c.key.digest();
    if (c.due_ms < 0) {
      sqlite3_bind_text(del, 1, d.c_str(), -1, SQLITE_TRANSIENT);
      ok = sqlite3_step(del) == SQLITE_DONE;
      sqlite3_reset(del);
    } else {
      sqlite3_bind_text(up, 1, d.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(up, 2, c.key.tenant.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(up, 3, c.key.type.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(up, 4, c.key.id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(up, 5, c.due_ms);
      ok = sqlite3_step(up) == SQLITE_DONE;
      sqlite3_reset(up);
    }
  }
  if (!ok || sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    auto st = alarm_sql_error(db_, "apply");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return st;
  }
  return status::ok();
}

result<std::vector<alarm_index_entry>> alarm_index::due(int64_t until_ms, int64_t limit) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT tenant, type, id, due_at, park_attempts FROM alarm_index "
                         "WHERE due_at <= ?1 AND (parked_until IS NULL OR parked_until <= ?1) "
                         "ORDER BY due_at LIMIT ?2",
                         -1, &st, nullptr) != SQLITE_OK)
    return alarm_sql_error(db_, "due");
  sqlite3_bind_int64(st, 1, until_ms);
  sqlite3_bind_int64(st, 2, limit);
  std::vector<alarm_index_entry> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back({entity_key{col_text(st, 0), col_text(st, 1), col_text(st, 2)},
                   sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4)});
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) // an I/O error is not the end of the results
    return alarm_sql_error(db_, "due");
  return out;
}

result<std::optional<int64_t>> alarm_index::next_due() {
  sqlite3_stmt* st = nullptr;
  // A parked entry is due again when its parking ends.
  if (sqlite3_prepare_v2(db_, "SELECT MIN(MAX(due_at, IFNULL(parked_until, 0))) FROM alarm_index",
                         -1, &st, nullptr) != SQLITE_OK)
    return alarm_sql_error(db_, "next due");
  std::optional<int64_t> out;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
    out = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW)
    return alarm_sql_error(db_, "next due");
  return out;
}

result<std::optional<int64_t>> alarm_index::due_of(const entity_key& key) {
  auto* st = stmts_->get("SELECT due_at FROM alarm_index WHERE digest=?");
  if (!st)
    return alarm_sql_error(db_, "due_of");
  detail::stmt_guard g{st};
  auto d = key.digest();
  sqlite3_bind_text(st, 1, d.c_str(), -1, SQLITE_TRANSIENT);
  std::optional<int64_t> out;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    out = sqlite3_column_int64(st, 0);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return alarm_sql_error(db_, "due_of");
  return out;
}

result<std::vector<alarm_index_entry>> alarm_index::all() {
  return due(INT64_MAX, INT64_MAX);
}

status alarm_index::park(const std::vector<alarm_index_parked>& parks) {
  if (parks.empty())
    return status::ok();
  if (auto st = injected("park"); !st)
    return st;
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK)
    return alarm_sql_error(db_, "begin");
  sqlite3_stmt* st = nullptr;
  bool ok = sqlite3_prepare_v2(db_,
                               "UPDATE alarm_index SET parked_until=?, "
                               "park_attempts=park_attempts+1, park_reason=? "
                               "WHERE digest=? AND due_at=?",
                               -1, &st, nullptr) == SQLITE_OK;
  for (auto& p : parks) {
    if (!ok)
      break;
    auto d = p.entry.key.digest();
    sqlite3_bind_int64(st, 1, p.parked_until_ms);
    sqlite3_bind_text(st, 2, p.reason.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, d.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, p.entry.due_ms);
    ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  if (!ok || sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    auto err = alarm_sql_error(db_, "park");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return err;
  }
  return status::ok();
}

result<std::vector<alarm_index_parked>> alarm_index::parked() {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT tenant, type, id, due_at, parked_until, park_attempts, "
                         "park_reason FROM alarm_index WHERE parked_until IS NOT NULL "
                         "ORDER BY due_at",
                         -1, &st, nullptr) != SQLITE_OK)
    return alarm_sql_error(db_, "parked");
  std::vector<alarm_index_parked> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back({{entity_key{col_text(st, 0), col_text(st, 1), col_text(st, 2)},
                    sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 5)},
                   sqlite3_column_int64(st, 4),
                   col_text(st, 6)});
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return alarm_sql_error(db_, "parked");
  return out;
}

result<fs::path> alarm_index::set_aside(const fs::path& data_dir) {
  return detail::set_aside_database(data_dir / "runtime" / "alarms.db", "alarm index");
}

result<alarm_index_rebuild_report> alarm_index::rebuild(const fs::path& data_dir) {
  alarm_index_rebuild_report report;
  store_options o;
  o.data_dir = data_dir;
  o.read_only = true;
  std::vector<alarm_index_entry> batch;
  auto flush = [&]() -> status {
    auto st = apply(batch);
    report.entries += static_cast<int64_t>(batch.size());
    batch.clear();
    return st;
  };
  for (auto& file : list_entity_files(data_dir)) {
    ++report.entity_files;
    auto s = entity_store::open_file(file, o);
    if (!s) {
      // not_found: an unclaimed file (a spare put in place, not yet claimed) holds no entity.
      if (s.error().code() != errc::not_found)
        ++report.unreadable;
      continue;
    }
    auto next = (*s)->next_alarm();
    // A file whose meta names another path's entity would never be opened by the runtime.
    if (!next || (*s)->key().file_path(data_dir) != file) {
      ++report.unreadable;
      continue;
    }
    if (!next->has_value())
      continue;
    batch.push_back({(*s)->key(), (*next)->due_ms});
    if (batch.size() >= 1000)
      if (auto st = flush(); !st)
        return st;
  }
  if (auto st = flush(); !st)
    return st;
  return report;
}

} // namespace factum
