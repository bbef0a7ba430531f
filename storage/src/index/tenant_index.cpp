// tenant_index.cpp: DATA/runtime/tenants.db (see tenant_index.hpp). One owner thread at a time;
// entity_disk_bytes() from any thread.
#include "factum/storage/tenant_index.hpp"

#include <sys/stat.h>

#include <sqlite3.h>

#include <chrono>

#include "file/file_io.hpp"
#include "index/index_db.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

/// A statement finalized at scope exit (statements run once: rebuild, rescan, totals).
struct stmt {
  sqlite3_stmt* st = nullptr;
  ~stmt() { sqlite3_finalize(st); }
};

constexpr const char* add_sql =
  "INSERT OR IGNORE INTO tenant_entities(digest, tenant, type, id, bytes) VALUES (?,?,?,?,?)";
constexpr const char* set_bytes_sql = "UPDATE tenant_entities SET bytes=? WHERE digest=?";
constexpr const char* remove_sql = "DELETE FROM tenant_entities WHERE digest=?";
constexpr const char* activity_sql =
  "UPDATE tenant_entities SET last_activity=MAX(last_activity, ?1) WHERE digest=?2";
constexpr const char* drop_dead_letters_sql = "DELETE FROM tenant_dead_letters WHERE digest=?";
constexpr const char* drop_breakers_sql = "DELETE FROM tenant_breakers WHERE digest=?";
constexpr const char* put_dead_letters_sql =
  "INSERT OR REPLACE INTO tenant_dead_letters(digest, tenant, type, id, status, reason, count,"
  " oldest) VALUES (?,?,?,?,?,?,?,?)";
constexpr const char* put_breaker_sql =
  "INSERT OR REPLACE INTO tenant_breakers(digest, tenant, type, id, tool, state, updated_at)"
  " VALUES (?,?,?,?,?,?,?)";

/// Runs a cached statement once with `args`: whether it was done.
template <class... A> bool step_once(sqlite3_stmt* st, const A&... args) {
  if (!st)
    return false;
  detail::bind_args(st, args...);
  bool ok = sqlite3_step(st) == SQLITE_DONE;
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return ok;
}

int64_t file_size(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

/// The later modification time (ms) of an entity's database file and its -wal (0: neither).
int64_t written_ms(const fs::path& db_file) {
  int64_t out = 0;
  for (auto& p : {db_file.native(), db_file.native() + "-wal"}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0)
      out =
        std::max<int64_t>(out, int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000);
  }
  return out;
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
  if (auto st = ix->migrate(); !st)
    return st;
  return ix;
}

status tenant_index::migrate() {
  bool has_activity = false;
  {
    stmt s;
    if (sqlite3_prepare_v2(db_,
                           "SELECT 1 FROM pragma_table_info('tenant_entities')"
                           " WHERE name='last_activity'",
                           -1, &s.st, nullptr) != SQLITE_OK)
      return detail::tenant_index_error(db_, "migrate");
    has_activity = sqlite3_step(s.st) == SQLITE_ROW;
  }
  if (!has_activity) {
    // An index made before the fleet views: its summaries are read from the files (the
    // "summaries" flag is not set) at the next rescan.
    if (auto st = exec("ALTER TABLE tenant_entities"
                       "  ADD COLUMN last_activity INTEGER NOT NULL DEFAULT 0",
                       "migrate");
        !st)
      return st;
  }
  // tenant_entities_by_activity: list_by_activity(); the summaries' indexes: the fleet views
  // (covering: the counts and the oldest are read from the index alone; the breakers not closed,
  // a few among many, have a partial index of their own).
  return exec("CREATE INDEX IF NOT EXISTS tenant_entities_by_activity"
              "  ON tenant_entities(tenant, last_activity, type, id);"
              "CREATE TABLE IF NOT EXISTS tenant_dead_letters("
              "  digest TEXT NOT NULL, tenant TEXT NOT NULL, type TEXT NOT NULL, id TEXT NOT NULL,"
              "  status TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,"
              "  oldest INTEGER NOT NULL, PRIMARY KEY (digest, status, reason)) WITHOUT ROWID;"
              "CREATE INDEX IF NOT EXISTS tenant_dead_letters_by_filter"
              "  ON tenant_dead_letters(tenant, status, reason, type, id, count, oldest);"
              "CREATE TABLE IF NOT EXISTS tenant_breakers("
              "  digest TEXT NOT NULL, tenant TEXT NOT NULL, type TEXT NOT NULL, id TEXT NOT NULL,"
              "  tool TEXT NOT NULL, state TEXT NOT NULL, updated_at INTEGER NOT NULL,"
              "  PRIMARY KEY (digest, tool)) WITHOUT ROWID;"
              "CREATE INDEX IF NOT EXISTS tenant_breakers_by_tool"
              "  ON tenant_breakers(tenant, tool, state, type, id);"
              "CREATE INDEX IF NOT EXISTS tenant_breakers_not_closed"
              "  ON tenant_breakers(tenant, tool, type, id, state, updated_at)"
              "  WHERE state <> 'CLOSED';",
              "migrate");
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
    return detail::tenant_index_error(db_, what);
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
    return detail::tenant_index_error(db_, "apply");
  using kind = tenant_index_change::kind;
  if (auto st = exec("BEGIN IMMEDIATE", "begin"); !st)
    return st;
  bool ok = true;
  for (auto& c : changes) {
    if (!ok)
      break;
    auto d = c.key.digest();
    if (c.what == kind::summary || c.what == kind::activity) {
      ok = apply_fleet(c, d);
      continue;
    }
    if (c.what == kind::remove)
      ok = step_once(stmts_->get(drop_dead_letters_sql), std::string_view(d)) &&
           step_once(stmts_->get(drop_breakers_sql), std::string_view(d));
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
    default: break;
    }
    ok = ok && sqlite3_step(st) == SQLITE_DONE;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  if (!ok || sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    auto err = detail::tenant_index_error(db_, "apply");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return err;
  }
  return status::ok();
}

bool tenant_index::apply_fleet(const tenant_index_change& c, const std::string& digest) {
  std::string_view d(digest);
  if (c.what == tenant_index_change::kind::activity)
    return step_once(stmts_->get(activity_sql), c.bytes, d);
  auto has = contains(c.key); // an entity the index does not list has no summary either
  if (!has)
    return false;
  if (!*has)
    return true;
  auto& k = c.key;
  auto& sum = c.summary;
  bool ok = step_once(stmts_->get(drop_dead_letters_sql), d) &&
            step_once(stmts_->get(drop_breakers_sql), d) &&
            step_once(stmts_->get(activity_sql), sum.last_activity_ms, d);
  for (auto& g : sum.dead_letters)
    ok =
      ok && step_once(stmts_->get(put_dead_letters_sql), d, std::string_view(k.tenant),
                      std::string_view(k.type), std::string_view(k.id), std::string_view(g.status),
                      std::string_view(g.reason), g.count, g.oldest_ms);
  for (auto& b : sum.breakers)
    ok = ok && step_once(stmts_->get(put_breaker_sql), d, std::string_view(k.tenant),
                         std::string_view(k.type), std::string_view(k.id),
                         std::string_view(b.tool_id), std::string_view(b.state), b.updated_at_ms);
  return ok;
}

result<bool> tenant_index::contains(const entity_key& key) {
  auto* st = stmts_->get("SELECT 1 FROM tenant_entities WHERE digest=?");
  if (!st)
    return detail::tenant_index_error(db_, "contains");
  detail::stmt_guard g{st};
  auto d = key.digest();
  detail::bind_args(st, std::string_view(d));
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return detail::tenant_index_error(db_, "contains");
  return rc == SQLITE_ROW;
}

result<std::map<std::string, tenant_totals>> tenant_index::totals() {
  stmt s;
  if (sqlite3_prepare_v2(db_,
                         "SELECT tenant, COUNT(*), SUM(bytes) FROM tenant_entities GROUP BY tenant",
                         -1, &s.st, nullptr) != SQLITE_OK)
    return detail::tenant_index_error(db_, "totals");
  std::map<std::string, tenant_totals> out;
  int rc;
  while ((rc = sqlite3_step(s.st)) == SQLITE_ROW)
    out[detail::col_text(s.st, 0)] = {sqlite3_column_int64(s.st, 1), sqlite3_column_int64(s.st, 2)};
  if (rc != SQLITE_DONE)
    return detail::tenant_index_error(db_, "totals");
  return out;
}

result<std::vector<std::pair<entity_key, int64_t>>>
tenant_index::list(std::string_view tenant, std::string_view type, std::string_view after_type,
                   std::string_view after_id, int64_t limit) {
  auto* st = stmts_->get("SELECT tenant, type, id, bytes FROM tenant_entities"
                         " WHERE tenant=?1 AND (?2='' OR type=?2) AND (type, id) > (?3, ?4)"
                         " ORDER BY tenant, type, id LIMIT ?5");
  if (!st)
    return detail::tenant_index_error(db_, "list");
  detail::stmt_guard g{st};
  detail::bind_args(st, tenant, type, after_type, after_id, limit);
  std::vector<std::pair<entity_key, int64_t>> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.emplace_back(
      entity_key{detail::col_text(st, 0), detail::col_text(st, 1), detail::col_text(st, 2)},
      sqlite3_column_int64(st, 3));
  if (rc != SQLITE_DONE)
    return detail::tenant_index_error(db_, "list");
  return out;
}

result<bool> tenant_index::flag(const char* name) {
  auto n = number(name);
  if (!n)
    return n.error();
  return *n != 0;
}

status tenant_index::set_flag(const char* name, bool value) {
  return set_number(name, value ? 1 : 0);
}

result<int64_t> tenant_index::number(const char* name) {
  auto* st = stmts_->get("SELECT value FROM tenant_index_flags WHERE name=?");
  if (!st)
    return detail::tenant_index_error(db_, "flag");
  detail::stmt_guard g{st};
  detail::bind_args(st, std::string_view(name));
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return detail::tenant_index_error(db_, "flag");
  return rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : int64_t{0};
}

status tenant_index::set_number(const char* name, int64_t value) {
  if (auto st = injected("flag"); !st)
    return st;
  if (auto st = synchronous(mode_ == durability::full); !st)
    return st;
  auto* st = stmts_->get("INSERT OR REPLACE INTO tenant_index_flags(name, value) VALUES (?,?)");
  if (!st)
    return detail::tenant_index_error(db_, "set flag");
  detail::stmt_guard g{st};
  detail::bind_args(st, std::string_view(name), value);
  if (sqlite3_step(st) != SQLITE_DONE)
    return detail::tenant_index_error(db_, "set flag");
  return status::ok();
}

result<fs::path> tenant_index::set_aside(const fs::path& data_dir) {
  return detail::set_aside_database(data_dir / "runtime" / "tenants.db", "tenant index");
}

result<tenant_index_rebuild_report> tenant_index::rebuild(const fs::path& data_dir) {
  tenant_index_rebuild_report report;
  if (auto st = set_flag("complete", false); !st)
    return st;
  if (auto st = exec("DELETE FROM tenant_entities; DELETE FROM tenant_dead_letters;"
                     " DELETE FROM tenant_breakers;",
                     "clear");
      !st)
    return st;
  store_options o;
  o.data_dir = data_dir;
  o.read_only = true;
  std::vector<tenant_index_change> batch;
  auto flush = [&]() -> status {
    auto st = apply(batch, false);
    for (auto& c : batch)
      report.entities += c.what == tenant_index_change::kind::add ? 1 : 0;
    batch.clear();
    return st;
  };
  for (auto& file : list_entity_files(data_dir)) {
    ++report.entity_files;
    entity_key key;
    entity_fleet_summary summary;
    {
      auto s = entity_store::open_file(file, o);
      if (!s) {
        // not_found: an unclaimed file (a spare put in place, not yet claimed) holds no entity.
        if (s.error().code() != errc::not_found)
          ++report.unreadable;
        continue;
      }
      key = (*s)->key();
      auto sum = (*s)->fleet_summary();
      if (!sum) {
        ++report.unreadable;
        continue;
      }
      summary = std::move(sum.value());
    } // closed before its bytes are measured
    // A file whose meta names another path's entity would never be opened by the runtime.
    if (key.file_path(data_dir) != file) {
      ++report.unreadable;
      continue;
    }
    batch.push_back({tenant_index_change::kind::add, key, entity_disk_bytes(file)});
    batch.push_back({tenant_index_change::kind::summary, key, 0, std::move(summary)});
    if (batch.size() >= 2000)
      if (auto st = flush(); !st)
        return st;
  }
  if (auto st = flush(); !st)
    return st;
  if (auto st = set_flag("summaries", true); !st)
    return st;
  if (auto st = set_flag("complete", true); !st)
    return st;
  return report;
}

result<tenant_index_rescan_report> tenant_index::rescan(const fs::path& data_dir,
                                                        std::optional<int64_t> summaries_since) {
  tenant_index_rescan_report report;
  std::vector<tenant_index_change> changes;
  {
    stmt s;
    if (sqlite3_prepare_v2(db_, "SELECT tenant, type, id, bytes FROM tenant_entities", -1, &s.st,
                           nullptr) != SQLITE_OK)
      return detail::tenant_index_error(db_, "rescan");
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
      if (summaries_since && written_ms(file) >= *summaries_since) {
        // Read before the bytes are measured: the open may move the -wal's bytes.
        auto sum = read_fleet_summary(file, data_dir);
        if (sum) {
          changes.push_back({tenant_index_change::kind::summary, key, 0, std::move(sum.value())});
          ++report.summarized;
        } else {
          ++report.unreadable;
        }
      }
      auto bytes = entity_disk_bytes(file);
      if (bytes != sqlite3_column_int64(s.st, 3)) {
        changes.push_back({tenant_index_change::kind::set_bytes, std::move(key), bytes});
        ++report.resized;
      }
    }
    if (rc != SQLITE_DONE)
      return detail::tenant_index_error(db_, "rescan");
  }
  if (auto st = apply(changes, true); !st)
    return st;
  if (summaries_since && report.unreadable == 0)
    if (auto st = set_flag("summaries", true); !st)
      return st;
  return report;
}

} // namespace factum
