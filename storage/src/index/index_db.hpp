// index_db.hpp (private to storage/): what the runtime's index databases share
// (DATA/runtime/alarms.db, DATA/runtime/tenants.db): opening one, its errors, and its cached
// statements (statement_cache, store_sql.hpp). Each index has its own schema and owner
// thread; these helpers run on it.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "store/sqlite_global.hpp"
#include "store/store_sql.hpp"

namespace factum::detail {

/// The error of the index `owner` ("alarm index") at step `what`, from its connection.
inline status index_error(sqlite3* db, std::string_view owner, const char* what) {
  return {map_rc(sqlite3_errcode(db)),
          std::string(owner) + ": " + what + ": " + sqlite3_errmsg(db)};
}

/// index_error for the tenant index (tenant_index.cpp, tenant_index_fleet.cpp).
inline status tenant_index_error(sqlite3* db, const char* what) {
  return index_error(db, "tenant index", what);
}

/// Opens (creating DATA/runtime/ and the file) the index database `file` of `data_dir`, in
/// WAL mode with a 5 s busy timeout. `db` is set even on failure (close it).
inline status open_index_db(const std::filesystem::path& data_dir, const char* file,
                            std::string_view owner, sqlite3*& db) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir / "runtime", ec);
  if (ec)
    return status{errc::io_error, "cannot create " + (data_dir / "runtime").string()};
  sqlite_global_init();
  auto path = data_dir / "runtime" / file;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK ||
      sqlite3_exec(db, "PRAGMA journal_mode=WAL;PRAGMA busy_timeout=5000;", nullptr, nullptr,
                   nullptr) != SQLITE_OK)
    return index_error(db, owner, "open");
  return status::ok();
}

} // namespace factum::detail
