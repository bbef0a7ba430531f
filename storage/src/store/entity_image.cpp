// entity_image.cpp: the template databases new entity files are copied from (entity_image.hpp).
// One per page size per process, each built at the first creation with its page size and kept
// until exit; any thread, under the template's mutex_ (the map of templates under its own).
#include "store/entity_image.hpp"

#include <map>
#include <memory>
#include <mutex>

#include <sqlite3.h>

#include "factum/storage/entity_store.hpp"
#include "store/schema.hpp"
#include "store/sqlite_global.hpp"

namespace factum::detail {

namespace {

/// The template: a private in-memory database ("memdb" VFS, whose pages are one contiguous
/// buffer that sqlite3_serialize can hand out without copying) holding the current schema,
/// placeholder meta rows and user_version, and the statement that replaces the per-file meta.
class entity_template {
 public:
  explicit entity_template(int page_size) : page_size_(page_size) {}

  result<std::string> unclaimed() {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!db_)
      if (auto st = build(); !st)
        return st;
    return unclaimed_;
  }

  result<std::string> image(const entity_key& key, int64_t created_at,
                            std::string_view fact_id_prefix) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!db_)
      if (auto st = build(); !st)
        return st;
    sqlite3_reset(upsert_);
    auto text = [&](int i, std::string_view s) {
      sqlite3_bind_text(upsert_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
    };
    text(1, key.tenant);
    text(2, key.type);
    text(3, key.id);
    sqlite3_bind_int64(upsert_, 4, created_at); // TEXT affinity: stored as its decimal text
    text(5, fact_id_prefix);
    int rc = sqlite3_step(upsert_);
    sqlite3_reset(upsert_);
    sqlite3_clear_bindings(upsert_);
    if (rc != SQLITE_DONE)
      return status{errc::internal,
                    std::string("entity file template: write meta: ") + sqlite3_errmsg(db_)};
    return pages();
  }

 private:
  // The template's current pages as a WAL-mode file image. Under mutex_.
  result<std::string> pages() {
    sqlite3_int64 size = 0;
    auto* pages = sqlite3_serialize(db_, "main", &size, SQLITE_SERIALIZE_NOCOPY);
    if (!pages)
      return status{errc::internal, "entity file template: serialize failed"};
    std::string out(reinterpret_cast<const char*>(pages), static_cast<size_t>(size));
    // The database header's "file format write/read version" (offsets 18, 19): 2 = WAL. An
    // in-memory database cannot be in WAL mode; a file with these bytes opens in it.
    if (out.size() < 100 || out.compare(0, 16, std::string_view("SQLite format 3\0", 16)) != 0)
      return status{errc::internal, "entity file template: not a database image"};
    out[18] = 2;
    out[19] = 2;
    return out;
  }

  status build() {
    sqlite3* db = nullptr;
    int rc =
      sqlite3_open_v2("factum-entity-template", &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, "memdb");
    // The page size first: it is fixed when the first table is made.
    std::string script = "PRAGMA page_size=" + std::to_string(page_size_) + ";BEGIN;";
    script += schema::fresh_v1;
    script += schema::v2;
    script += schema::v5;
    script += schema::v6;
    script += schema::v7;
    script += schema::v8;
    script += schema::v9;
    script += schema::v10;
    script += "INSERT INTO meta(key, value) VALUES ('format', 'factum-entity'), ('tenant', ''), "
              "('type', ''), ('id', ''), ('created_at', '0'), ('fact_id_prefix', '');"
              "PRAGMA user_version=" +
              std::to_string(current_schema_version) + ";COMMIT;";
    char* err = nullptr;
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(db, script.c_str(), nullptr, nullptr, &err);
    sqlite3_stmt* st = nullptr;
    if (rc == SQLITE_OK)
      rc = sqlite3_prepare_v3(
        db,
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('tenant', ?1), ('type', ?2), "
        "('id', ?3), ('created_at', ?4), ('fact_id_prefix', ?5)",
        -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = err ? err : db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
      sqlite3_free(err);
      sqlite3_close(db);
      return {errc::internal, "entity file template: " + msg};
    }
    db_ = db;
    upsert_ = st;
    auto unclaimed = pages(); // before any entity's meta: the same bytes in every process
    if (!unclaimed) {
      sqlite3_finalize(st);
      sqlite3_close(db);
      db_ = nullptr;
      upsert_ = nullptr;
      return unclaimed.error();
    }
    unclaimed_ = std::move(*unclaimed);
    return status::ok();
  }

  const int page_size_;
  std::mutex mutex_;
  sqlite3* db_ = nullptr; // built at the first image(); never closed
  sqlite3_stmt* upsert_ = nullptr;
  std::string unclaimed_; // the image with the placeholder meta rows
};

} // namespace

namespace {

// The template for `page_size` (valid), made at its first use. The templates live until exit,
// like SQLite itself.
entity_template& the_template(int page_size) {
  sqlite_global_init();
  static std::mutex mu;
  static auto* templates = new std::map<int, std::unique_ptr<entity_template>>;
  std::lock_guard<std::mutex> g(mu);
  auto& t = (*templates)[page_size];
  if (!t)
    t = std::make_unique<entity_template>(page_size);
  return *t;
}

} // namespace

result<std::string> fresh_entity_image(const entity_key& key, int64_t created_at,
                                       std::string_view fact_id_prefix, int page_size) {
  if (auto st = check_page_size(page_size); !st)
    return st;
  return the_template(page_size).image(key, created_at, fact_id_prefix);
}

result<std::string> unclaimed_entity_image(int page_size) {
  if (auto st = check_page_size(page_size); !st)
    return st;
  return the_template(page_size).unclaimed();
}

} // namespace factum::detail
