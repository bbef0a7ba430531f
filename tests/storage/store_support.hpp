// store_support.hpp: helpers of the entity store's tests (store_test.cpp, store_create_test.cpp,
// store_io_test.cpp): options and keys, opening, drafts, SQL on a file behind the store's back,
// SQLite's own sync counts, a file's schema. The test thread only.
#pragma once

#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "factum/storage/alarm_index.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "support/raw_sql.hpp"
#include "support/temp_dir.hpp"
#include "wal/wal_vfs.hpp"

namespace store_tests {

using namespace factum;
namespace fs = std::filesystem;

inline store_options opts_for(const fs::path& dir) {
  store_options o;
  o.data_dir = dir;
  return o;
}

inline entity_key key(std::string id = "a1") {
  return entity_key{"acme", "ledger", std::move(id)};
}

inline std::unique_ptr<entity_store> open_ok(const store_options& o, const entity_key& k = key()) {
  auto r = entity_store::open(o, k);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

inline fact_draft draft(std::string type, nlohmann::json data = nlohmann::json::object()) {
  fact_draft d;
  d.type = std::move(type);
  d.data = std::move(data);
  return d;
}

// Runs one SQL statement on the file behind the store's back; returns the SQLite result code.
inline int raw_exec(const fs::path& file, const std::string& sql, std::string* err = nullptr) {
  return test::raw_exec(file, sql, err, entity_store::default_vfs());
}

// Runs one query on the file behind the store's back, read-only; each row's columns as text
// (NULL as ""). `arg`, when given, is bound to ?1.
inline std::vector<std::vector<std::string>> raw_rows(const fs::path& file, const std::string& sql,
                                                      const std::string* arg = nullptr) {
  std::vector<std::vector<std::string>> out;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, entity_store::default_vfs()) ==
          SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  if (arg)
    sqlite3_bind_text(st, 1, arg->c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(st) == SQLITE_ROW) {
    auto& row = out.emplace_back();
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      auto t = sqlite3_column_text(st, i);
      row.emplace_back(t ? reinterpret_cast<const char*>(t) : "");
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// Syncs SQLite itself issues since reset() (the store's own fdatasync bypasses SQLite), on -wal
// files and on main database files, as factum's VFS counts them. The counters are process-wide:
// only the running test's stores are open.
struct sync_counter {
  static inline detail::wal_vfs_counters base{};
  static void reset() { base = detail::wal_vfs_stats(); }
  static uint64_t wal() { return detail::wal_vfs_stats().wal_syncs - base.wal_syncs; }
  static uint64_t db() { return detail::wal_vfs_stats().db_syncs - base.db_syncs; }
};

// One line per schema object of `file` (type, name, table, SQL with whitespace collapsed), in
// name order; `skip` names objects left out.
inline std::vector<std::string> schema_lines(const fs::path& file, const std::string& skip = "") {
  std::vector<std::string> out;
  for (auto& row : raw_rows(file, "SELECT type, name, tbl_name, sql FROM sqlite_master "
                                  "ORDER BY name")) {
    std::string line;
    for (auto& v : row) {
      std::string norm;
      for (char c : v) {
        bool space = c == ' ' || c == '\n' || c == '\t';
        if (space && (norm.empty() || norm.back() == ' '))
          continue;
        norm.push_back(space ? ' ' : c);
      }
      line += norm + " | ";
    }
    if (skip.empty() || line.find(skip) == std::string::npos)
      out.push_back(line);
  }
  return out;
}

inline std::string meta_value(const fs::path& file, const std::string& k) {
  auto rows = raw_rows(file, "SELECT value FROM meta WHERE key=?", &k);
  return rows.empty() ? "(absent)" : rows[0][0];
}

inline std::string hex12(int64_t seq) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(seq));
  return buf;
}

inline uint64_t inode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_ino);
}

} // namespace store_tests
