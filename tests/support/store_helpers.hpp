// store_helpers.hpp (tests): what the tests that drive an entity store or a tenant index directly
// share: options for a data directory, opens that must succeed (a failed REQUIRE says why not),
// a fact draft, and SQL on a file behind the store's back through factum's VFS, which keeps the
// wal-index of a file open in this process in its memory (raw_sql.hpp runs it through another
// VFS). Header-only; the test's thread only.
#pragma once

#include <doctest/doctest.h>

#include <sqlite3.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/tenant_index.hpp"
#include "support/raw_sql.hpp"

namespace factum::test {

/// Options for entity files under `dir`, in durability `mode`, the rest as store_options has it.
inline store_options opts_for(const std::filesystem::path& dir,
                              durability mode = store_options{}.mode) {
  store_options o;
  o.data_dir = dir;
  o.mode = mode;
  return o;
}

/// Options for entity files under `root`/data with their WAL archive in `root`/archive, every
/// close checkpointing (so that the next commit starts a new WAL generation); `deferred`: syncs
/// deferred to the caller (store_options::defer_sync).
inline store_options archive_opts(const std::filesystem::path& root, bool deferred = false,
                                  durability mode = store_options{}.mode) {
  auto o = opts_for(root / "data", mode);
  o.archive_dir = root / "archive";
  o.defer_sync = deferred;
  o.wal_kept_on_close_kib = 0;
  return o;
}

/// The store of `k` opened with `o`, which must succeed.
inline std::unique_ptr<entity_store> open_ok(const store_options& o, const entity_key& k) {
  auto r = entity_store::open(o, k);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

/// The tenant index of the data directory `dir` (durability full), which must open.
inline std::unique_ptr<tenant_index> open_index(const std::filesystem::path& dir) {
  auto ix = tenant_index::open(dir, durability::full);
  REQUIRE_MESSAGE(ix.is_ok(), ix.error().to_string());
  return std::move(ix.value());
}

/// A draft of type `type` with `data`, nothing else set.
inline fact_draft draft(std::string type, nlohmann::json data = nlohmann::json::object()) {
  fact_draft d;
  d.type = std::move(type);
  d.data = std::move(data);
  return d;
}

/// raw_exec through factum's VFS: one SQL statement on `file` over a connection of its own,
/// beside the stores this process has open; the SQLite result code (its message in `err`).
inline int raw_exec_factum(const std::filesystem::path& file, const std::string& sql,
                           std::string* err = nullptr) {
  return raw_exec(file, sql, err, entity_store::default_vfs());
}

/// One query on `file` through factum's VFS, read-only: each row's columns as text (NULL as
/// ""). `arg`, when given, is bound to ?1.
inline std::vector<std::vector<std::string>> raw_rows(const std::filesystem::path& file,
                                                      const std::string& sql,
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

/// Every row of every table of `file`: tables by name, rows as text in primary-key order (two
/// copies of an entity hold the same content when these are equal).
inline std::map<std::string, std::vector<std::vector<std::string>>>
table_rows(const std::filesystem::path& file) {
  std::map<std::string, std::vector<std::vector<std::string>>> out;
  for (auto& t : raw_rows(file, "SELECT name FROM sqlite_schema WHERE type = 'table' AND "
                                "name NOT LIKE 'sqlite_%' ORDER BY name"))
    out[t[0]] = raw_rows(file, "SELECT * FROM \"" + t[0] + "\" ORDER BY 1, 2");
  return out;
}

} // namespace factum::test
