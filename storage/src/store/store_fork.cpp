// store_fork.cpp: entity_store::fork_file, a new entity file that starts from another entity's
// state (docs/storage-format.md, "Forks"). Any thread, on files no other connection writes.
#include <sqlite3.h>

#include <array>
#include <cctype>
#include <string>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "file/file_io.hpp"
#include "store/store_sql.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

/// The tables a fork copies as they are besides the tenant's own (u_*): the entity's state.
/// Never its facts (the fork's log starts with its provenance), its meta rows (its key), its
/// owner claims, its journal and outbox cursors (they follow the source's calls and facts).
/// What would run side effects on its own (alarms, schedules, scheduled dead-letter retries)
/// is copied paused (copy_paused).
constexpr const char* forked_tables[] = {"idempotency_keys", "dead_letters", "breakers", "configs"};

/// The fork's alarms and schedules wait in paused_alarms and paused_schedules until an operator
/// resumes them (entity_store::resume_paused); its scheduled dead letters wait for an operator's
/// retry (pending, no retry alarm). The runtime's own alarms of the source go, but the purge of
/// expired keys.
constexpr const char* copy_paused_sql =
  "INSERT INTO main.paused_alarms SELECT * FROM src.alarms WHERE substr(name, 1, 1) <> '@';"
  "INSERT INTO main.paused_schedules SELECT * FROM src.schedules;"
  "INSERT INTO main.alarms SELECT * FROM src.alarms WHERE name = '@purge_keys';"
  "UPDATE main.dead_letters SET status = 'pending', next_retry_at = NULL "
  "WHERE status = 'scheduled';";

status sql_error(sqlite3* db, int rc, const std::string& what) {
  return {(rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ? errc::corruption
                                                                        : errc::io_error,
          what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc))};
}

/// A name SQLite may quote as "name": the tenant's tables are [A-Za-z0-9_] (store_tenant_sql),
/// and nothing else is copied.
bool plain_name(const std::string& n) {
  if (n.empty() || n.size() > 128)
    return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}

/// The tenant's tables of the attached source, with their CREATE statements and then their
/// indexes' (type, name, sql).
result<std::vector<std::array<std::string, 2>>> tenant_schema(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  const char* q = "SELECT name, sql FROM src.sqlite_master WHERE sql IS NOT NULL AND "
                  "tbl_name LIKE 'u\\_%' ESCAPE '\\' ORDER BY type DESC, name";
  if (int rc = sqlite3_prepare_v2(db, q, -1, &st, nullptr); rc != SQLITE_OK)
    return sql_error(db, rc, "read the source's tables");
  std::vector<std::array<std::string, 2>> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back({reinterpret_cast<const char*>(sqlite3_column_text(st, 0)),
                   reinterpret_cast<const char*>(sqlite3_column_text(st, 1))});
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return sql_error(db, rc, "read the source's tables");
  return out;
}

/// Copies the source's state tables into the new file at `out` (one transaction).
status copy_state(const fs::path& source, const fs::path& out) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(out.c_str(), &db, SQLITE_OPEN_READWRITE, "unix");
  auto close = [&] { sqlite3_close_v2(db); };
  auto exec = [&](const std::string& sql, const std::string& what) -> status {
    int r = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    return r == SQLITE_OK ? status::ok() : sql_error(db, r, what);
  };
  if (rc != SQLITE_OK) {
    auto st = sql_error(db, rc, "open " + out.string());
    close();
    return st;
  }
  char* quoted = sqlite3_mprintf("ATTACH %Q AS src", source.c_str());
  std::string attach = quoted ? quoted : "";
  sqlite3_free(quoted);
  status st = exec(attach, "attach " + source.string());
  sqlite3_stmt* ver = nullptr;
  if (st && sqlite3_prepare_v2(db, "PRAGMA src.user_version", -1, &ver, nullptr) == SQLITE_OK &&
      sqlite3_step(ver) == SQLITE_ROW && sqlite3_column_int(ver, 0) != current_schema_version)
    st = {errc::invalid_argument, source.string() + " is not at this build's schema version " +
                                    std::to_string(current_schema_version) + " (open it first)"};
  sqlite3_finalize(ver);
  if (st)
    st = exec("BEGIN IMMEDIATE", "begin the fork");
  for (const char* t : forked_tables)
    if (st)
      st = exec(std::string("INSERT INTO main.") + t + " SELECT * FROM src." + t,
                std::string("copy ") + t);
  if (st) {
    auto schema = tenant_schema(db);
    if (!schema)
      st = schema.error();
    for (size_t i = 0; st && schema && i < schema->size(); ++i) {
      const auto& [name, sql] = (*schema)[i];
      st = exec(sql, "create " + name);
      if (st && sql.rfind("CREATE TABLE", 0) == 0)
        st = plain_name(name)
               ? exec("INSERT INTO main.\"" + name + "\" SELECT * FROM src.\"" + name + "\"",
                      "copy " + name)
               : status{errc::corruption, "a tenant table named " + name};
    }
  }
  if (st) // calls in flight at the source are its own: the fork never runs them
    st = exec("DELETE FROM main.idempotency_keys WHERE status = 'pending'", "drop pending keys");
  if (st)
    st = exec(copy_paused_sql, "copy alarms and schedules paused");
  if (st)
    st = exec("COMMIT", "commit the fork");
  else
    (void)exec("ROLLBACK", "roll back the fork");
  if (st)
    st = exec("DETACH src", "detach");
  close();
  return st;
}

} // namespace

status entity_store::fork_file(const fs::path& source, const entity_key& key, const fs::path& out,
                               const fact_draft& first, const store_options& opts) {
  std::error_code ec;
  if (fs::exists(out, ec) || fs::exists(detail::with_suffix(out, "-wal"), ec))
    return {errc::conflict, out.string() + " exists"};
  auto o = opts;
  o.archive_dir.clear();
  o.read_only = false;
  o.defer_sync = false;
  o.wal_kept_on_close_kib = 0;
  o.owner_epoch = 0;
  auto fail = [&](status st) {
    for (const char* s : {"-wal", "-shm", ""})
      fs::remove(detail::with_suffix(out, s), ec);
    return st;
  };
  std::unique_ptr<entity_store> probe(new entity_store(o, key, out));
  if (auto st = detail::build_entity_file(out, key, now_ms(), current_schema_version, o.page_size,
                                          probe->vfs_name());
      !st)
    return st;
  if (auto st = copy_state(source, out); !st)
    return fail(st);
  auto s = open_file(out, o);
  if (!s)
    return fail(s.error());
  auto f = (*s)->append(first);
  if (!f)
    return fail(f.error());
  if (auto st = (*s)->commit(); !st)
    return fail(st);
  s.value().reset(); // the close checkpoints into the file and empties its -wal
  detail::scoped_fd fd(::open(out.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || ::fdatasync(fd.get()) != 0)
    return fail({errc::io_error, "fdatasync " + out.string()});
  return status::ok();
}

} // namespace factum
