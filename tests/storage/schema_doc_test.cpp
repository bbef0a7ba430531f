// schema_doc_test.cpp: docs/storage-format.md section 4 against the schema: the SQL of the
// migrations the doc lists, run in order on an empty database, must give the tables and columns
// (and the indexes and triggers) a new entity file has, and no others; and the doc lists as many
// migrations as storage/src/store/schema.hpp has. The test thread only.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "store/schema.hpp"
#include "support/temp_dir.hpp"

namespace schema_doc_test {

using namespace factum;

namespace {

/// One migration as the doc lists it: its number and its SQL.
struct doc_migration {
  int number = 0;
  std::string sql;
};

/// The ```sql blocks of the doc's section 4 that follow a line "Migration N (...)", in order.
std::vector<doc_migration> doc_migrations(const std::string& doc) {
  auto start = doc.find("\n## 4. Schema");
  REQUIRE_MESSAGE(start != std::string::npos, "no section \"## 4. Schema\" in the doc");
  auto end = doc.find("\n## ", start + 1);
  std::istringstream in(doc.substr(start, end == std::string::npos ? end : end - start));
  std::vector<doc_migration> out;
  std::string line, last_text;
  while (std::getline(in, line)) {
    if (line != "```sql") {
      if (!line.empty())
        last_text = line;
      continue;
    }
    std::string sql;
    while (std::getline(in, line) && line != "```")
      sql += line + "\n";
    if (last_text.rfind("Migration ", 0) == 0)
      out.push_back({std::stoi(last_text.substr(10)), sql});
  }
  return out;
}

/// Every row of `sql` on `db`, each column as text (NULL as "NULL").
std::vector<std::vector<std::string>> rows(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  REQUIRE_MESSAGE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK,
                  sqlite3_errmsg(db));
  std::vector<std::vector<std::string>> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    auto& row = out.emplace_back();
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      auto t = sqlite3_column_text(st, i);
      row.emplace_back(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
  }
  sqlite3_finalize(st);
  return out;
}

/// What a database holds, one line per item: "table T", "column T.C TYPE [NOT NULL] [DEFAULT D]
/// [PK n]", "index I ON T", "trigger R ON T" (SQLite's own objects left out).
std::set<std::string> layout(sqlite3* db) {
  std::set<std::string> out;
  for (auto& o : rows(db, "SELECT type, name, tbl_name FROM sqlite_master "
                          "WHERE name NOT LIKE 'sqlite_%' ORDER BY name")) {
    if (o[0] != "table") {
      out.insert(o[0] + " " + o[1] + " ON " + o[2]);
      continue;
    }
    out.insert("table " + o[1]);
    // cid, name, type, notnull, dflt_value, pk
    for (auto& c : rows(db, "SELECT * FROM pragma_table_info('" + o[1] + "')"))
      out.insert("column " + o[1] + "." + c[1] + " " + c[2] + (c[3] == "1" ? " NOT NULL" : "") +
                 (c[4] == "NULL" ? "" : " DEFAULT " + c[4]) + (c[5] == "0" ? "" : " PK " + c[5]));
  }
  return out;
}

std::string lines_of(const std::set<std::string>& items) {
  std::string out;
  for (auto& i : items)
    out += "\n  " + i;
  return out;
}

} // namespace

TEST_CASE("schema doc: docs/storage-format.md section 4 gives the tables and columns of a new "
          "entity file and no others") {
  std::ifstream f(FACTUM_STORAGE_FORMAT_DOC);
  REQUIRE_MESSAGE(f.good(), "cannot read " FACTUM_STORAGE_FORMAT_DOC);
  std::string doc{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  auto migrations = doc_migrations(doc);
  REQUIRE(migrations.size() == std::size(schema::migrations));
  for (size_t i = 0; i < migrations.size(); ++i)
    CHECK(migrations[i].number == static_cast<int>(i + 1));

  // The doc's migrations, in order, on an empty database.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
  for (auto& m : migrations) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, m.sql.c_str(), nullptr, nullptr, &err);
    CHECK_MESSAGE(rc == SQLITE_OK,
                  "migration " << m.number << " of the doc: " << (err ? err : "failed"));
    sqlite3_free(err);
  }
  auto from_doc = layout(db);
  sqlite3_close(db);

  // A new entity file, as the store makes it.
  test::temp_dir tmp;
  store_options o;
  o.data_dir = tmp.path();
  entity_key key{"acme", "ledger", "a1"};
  {
    auto s = entity_store::open(o, key);
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
  }
  REQUIRE(sqlite3_open_v2(key.file_path(tmp.path()).c_str(), &db, SQLITE_OPEN_READONLY,
                          entity_store::default_vfs()) == SQLITE_OK);
  auto from_file = layout(db);
  sqlite3_close(db);

  std::set<std::string> only_doc, only_file;
  for (auto& i : from_doc)
    if (!from_file.count(i))
      only_doc.insert(i);
  for (auto& i : from_file)
    if (!from_doc.count(i))
      only_file.insert(i);
  CHECK(from_file.count("table facts") == 1);
  CHECK_MESSAGE(only_doc.empty(), "in docs/storage-format.md section 4, not in a new entity file:"
                                    << lines_of(only_doc));
  CHECK_MESSAGE(only_file.empty(), "in a new entity file, not in docs/storage-format.md section 4:"
                                     << lines_of(only_file));
}

} // namespace schema_doc_test
