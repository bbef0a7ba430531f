// raw_sql.hpp: SQL run on a database file behind factum's back, as tests that damage or inspect
// a file need it. The calling thread only.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <string>

namespace factum::test {

/// Runs `sql` on `file` over a read-write connection of its own (through the VFS named `vfs`,
/// SQLite's default when null); the SQLite result code, and its message in `err` when given.
inline int raw_exec(const std::filesystem::path& file, const std::string& sql,
                    std::string* err = nullptr, const char* vfs = nullptr) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs);
  char* e = nullptr;
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &e);
  else if (err)
    *err = sqlite3_errmsg(db);
  if (err && e)
    *err = e;
  sqlite3_free(e);
  sqlite3_close(db);
  return rc;
}

} // namespace factum::test
