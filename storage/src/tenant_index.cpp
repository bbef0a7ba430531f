// tenant_index.cpp: DATA/runtime/tenants.db (see tenant_index.hpp). One owner thread at a time;
// entity_disk_bytes() from any thread.
#include "factum/storage/tenant_index.hpp"

#include <sys/stat.h>

#include <sqlite3.h>

#include <chrono>

#include "file_io.hpp"
#include "index_db.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

status sql_error(sqlite3* db, const char* what) {
  return detail::index_error(db, "tenant index", what);
}

/// A statement finalized at scope exit (statements run once: rebuild, rescan, totals).
struct stmt {
  sqlite3_stmt* st = nullptr;
  ~stmt() { sqlite3_finalize(st); }
};

constexpr const char* add_sql =
  "INSERT OR IGNORE INTO tenant_entities(digest, tenant, type, id, bytes) VALUES (?,?,?,?,?)";
constexpr const char* set_bytes_sql = "UPDATE tenant_entities SET bytes=? WHERE digest=?";
constexpr const char* remove_sql = "DELETE FROM tenant_entities WHERE digest=?";

int64_t file_size(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

} // namespace

int64_t entity_disk_bytes(const fs::path& db_file) {
  auto wal = db_file.native() + "-wal";
  return std::max<int64_t>(file_size(db_file.c_str()), 0) +
         std::max<int64_t>(file_size(wal.c_str()), 0);
}

result<std::unique_ptr<tenant_index>> tenant_index::open(const fs::path& data_dir,
                                                         durability mode) {
  std::unique_ptr<tenant_index> ix(new tenant_index());
  ix->mode_ = mode;
  if (auto st = detail::open_index_db(data_dir, "tenants.db", "tenant index", ix->db_); !st)
    return st;
  ix->stmts_ = std::make_unique<detail::statement_cache>(ix->db_);
  // tenant_entities_by_key: a tenant's entities in (type, id) order, for list().
  if (auto st = ix->exec("CREATE TABLE IF NOT EXISTS tenant_entities("
                         "  digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, type TEXT NOT NULL,"
                         "  id TEXT NOT NULL, bytes INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
                         "CREATE INDEX IF NOT EXISTS tenant_entities_by_key"
                         "  ON tenant_entities(tenant, type, id);"
                         "CREATE TABLE IF NOT EXISTS tenant_index_flags("
                         "  name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;",
                         "create");
      !st)
    return st;
  return ix;
}

tenant_index::~tenant_index() {
  stmts_.reset(); // finalized before the connection closes
  if (db_)
    sqlite3_close_v2(db_);
}

status tenant_index::synchronous(bool full) {
  if (synchronous_full_ == full)
    return status::ok();
  if (auto st = exec(full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", "pragma"); !st)
    return st;
  synchronous_full_ = full;
  return status::ok();
}

void tenant_index::set_fault(fault_hook fault) {
  fault_ = std::move(fault);
}

status tenant_index::injected(const char* what) {
  return detail::injected_fault(fault_, "tenant index", what);
}

status tenant_index::exec(const char* sql, const char* what) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
    return sql_error(db_, what);
  return status::ok();
}

status tenant_index::apply(const std::vector<tenant_index_change>& changes, bool durable) {
  if (changes.empty())
    return status::ok();
  if (auto st = injected("apply"); !st)
    return st;
  // Each transaction says how hard its commit syncs (a connection setting, read at commit).
  if (auto st = synchronous(durable && mode_ == durability::full); !st)
    return st;
  auto* add = stmts_->get(add_sql);
  auto* set = stmts_->get(set_bytes_sql);
  auto* del = stmts_->get(remove_sql);
  if (!add || !set || !del)
    return sql_error(db_, "apply");
  if (auto st = exec("BEGIN IMMEDIATE", "begin"); !st)
    return st;
  bool ok = true;
  for (auto& c : changes) {
    if (!ok)
      break;
    auto d = c.key.digest();
    sqlite3_stmt* st = nullptr;
    switch (c.what) {
    case tenant_index_change::kind::add:
      st = add;
      detail::bind_args(st, std::string_view(d), std::string_view(c.key.tenant),
                        std::string_view(c.key.type), std::string_view(c.key.id), c.bytes);
      break;
    case tenant_index_change::kind::set_bytes:
      st = set;
      detail::bind_args(st, c.bytes, std::string_view(d));
      break;
    case tenant_index_change::kind::remove:
      st = del;
      detail::bind_args(st, std::string_view(d));
      break;
    }
    ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  if (!ok || sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    auto err = sql_error(db_, "apply");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return err;
  }
  return status::ok();
}

result<bool> tenant_index::contains(const entity_key& key) {
  auto* st = stmts_->get("SELECT 1 FROM tenant_entities WHERE digest=?");
  if (!st)
    return sql_error(db_, "contains");
  detail::stmt_guard g{st};
  auto d = key.digest();
  detail::bind_args(st, std::string_view(d));
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return sql_error(db_, "contains");
  return rc == SQLITE_ROW;
}

result<std::map<std::string, tenant_totals>> tenant_index::totals() {
  stmt s;
  if (sqlite3_prepare_v2(db_,
                         "SELECT tenant, COUNT(*), SUM(bytes) FROM tenant_entities GROUP BY tenant",
                         -1, &s.st, nullptr) != SQLITE_OK)
    return sql_error(db_, "totals");
  std::map<std::string, tenant_totals> out;
  int rc;
  while ((rc = sqlite3_step(s.st)) == SQLITE_ROW)
    out[detail::col_text(s.st, 0)] = {sqlite3_column_int64(s.st, 1), sqlite3_column_int64(s.st, 2)};
  if (rc != SQLITE_DONE)
    return sql_error(db_, "totals");
  return out;
}

result<std::vector<std::pair<entity_key, int64_t>>>
tenant_index::list(std::string_view tenant, std::string_view type, std::string_view after_type,
                   std::string_view after_id, int64_t limit) {
  auto* st = stmts_->get("SELECT tenant, type, id, bytes FROM tenant_entities"
                         " WHERE tenant=?1 AND (?2='' OR type=?2) AND (type, id) > (?3, ?4)"
                         " ORDER BY tenant, type, id LIMIT ?5");
  if (!st)
    return sql_error(db_, "list");
  detail::stmt_guard g{st};
  detail::bind_args(st, tenant, type, after_type, after_id, limit);
  std::vector<std::pair<entity_key, int64_t>> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.emplace_back(
      entity_key{detail::col_text(st, 0), detail::col_text(st, 1), detail::col_text(st, 2)},
      sqlite3_column_int64(st, 3));
  if (rc != SQLITE_DONE)
    return sql_error(db_, "list");
  return out;
}

result<bool> tenant_index::flag(const char* name) {
  auto* st = stmts_->get("SELECT value FROM tenant_index_flags WHERE name=?");
  if (!st)
    return sql_error(db_, "flag");
  detail::stmt_guard g{st};
  detail::bind_args(st, std::string_view(name));
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return sql_error(db_, "flag");
  return rc == SQLITE_ROW && sqlite3_column_int64(st, 0) != 0;
}

status tenant_index::set_flag(const char* name, bool value) {
  if (auto st = injected("flag"); !st)
    return st;
  if (auto st = synchronous(mode_ == durability::full); !st)
    return st;
  auto* st = stmts_->get("INSERT OR REPLACE INTO tenant_index_flags(name, value) VALUES (?,?)");
  if (!st)
    return sql_error(db_, "set flag");
  detail::stmt_guard g{st};
  detail::bind_args(st, std::string_view(name), int64_t{value ? 1 : 0});
  if (sqlite3_step(st) != SQLITE_DONE)
    return sql_error(db_, "set flag");
  return status::ok();
}

result<fs::path> tenant_index::set_aside(const fs::path& data_dir) {
  return detail::set_aside_database(data_dir / "runtime" / "tenants.db", "tenant index");
}

result<tenant_index_rebuild_report> tenant_index::rebuild(const fs::path& data_dir) {
  tenant_index_rebuild_report report;
  if (auto st = set_flag("complete", false); !st)
    return st;
  if (auto st = exec("DELETE FROM tenant_entities", "clear"); !st)
    return st;
  store_options o;
  o.data_dir = data_dir;
  o.read_only = true;
  std::vector<tenant_index_change> batch;
  auto flush = [&]() -> status {
    auto st = apply(batch, false);
    report.entities += static_cast<int64_t>(batch.size());
    batch.clear();
    return st;
  };
  for (auto& file : list_entity_files(data_dir)) {
    ++report.entity_files;
    entity_key key;
    {
      auto s = entity_store::open_file(file, o);
      if (!s) {
        // not_found: an unclaimed file (a spare put in place, not yet claimed) holds no entity.
        if (s.error().code() != errc::not_found)
          ++report.unreadable;
        continue;
      }
      key = (*s)->key();
    } // closed before its bytes are measured
    // A file whose meta names another path's entity would never be opened by the runtime.
    if (key.file_path(data_dir) != file) {
      ++report.unreadable;
      continue;
    }
    batch.push_back({tenant_index_change::kind::add, key, entity_disk_bytes(file)});
    if (batch.size() >= 1000)
      if (auto st = flush(); !st)
        return st;
  }
  if (auto st = flush(); !st)
    return st;
  if (auto st = set_flag("complete", true); !st)
    return st;
  return report;
}

result<tenant_index_rescan_report> tenant_index::rescan(const fs::path& data_dir) {
  tenant_index_rescan_report report;
  std::vector<tenant_index_change> changes;
  {
    stmt s;
    if (sqlite3_prepare_v2(db_, "SELECT tenant, type, id, bytes FROM tenant_entities", -1, &s.st,
                           nullptr) != SQLITE_OK)
      return sql_error(db_, "rescan");
    int rc;
    while ((rc = sqlite3_step(s.st)) == SQLITE_ROW) {
      ++report.entries;
      entity_key key{detail::col_text(s.st, 0), detail::col_text(s.st, 1),
                     detail::col_text(s.st, 2)};
      auto file = key.file_path(data_dir);
      std::error_code ec;
      if (!fs::exists(file, ec)) {
        changes.push_back({tenant_index_change::kind::remove, std::move(key), 0});
        ++report.removed;
        continue;
      }
      auto bytes = entity_disk_bytes(file);
      if (bytes != sqlite3_column_int64(s.st, 3)) {
        changes.push_back({tenant_index_change::kind::set_bytes, std::move(key), bytes});
        ++report.resized;
      }
    }
    if (rc != SQLITE_DONE)
      return sql_error(db_, "rescan");
  }
  if (auto st = apply(changes, true); !st)
    return st;
  return report;
}

} // namespace factum
