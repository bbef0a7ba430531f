// store_support.hpp: helpers of the entity store's tests (store_test.cpp, store_create_test.cpp,
// store_io_test.cpp): their keys, SQLite's own sync counts, a file's schema and meta values, and
// the store helpers every storage test shares (support/store_helpers.hpp: options, opening,
// drafts, SQL on a file behind the store's back). The test thread only.
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
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"
#include "wal/wal_vfs.hpp"

namespace store_tests {

using namespace factum;
namespace fs = std::filesystem;
using test::draft;
using test::open_ok;
using test::opts_for;
using test::raw_exec_factum;
using test::raw_rows;

inline entity_key key(std::string id = "a1") {
  return entity_key{"acme", "ledger", std::move(id)};
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
