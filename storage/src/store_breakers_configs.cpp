// store_breakers_configs.cpp: an entity's circuit breakers and versioned configs (see
// entity_store.hpp). Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <string>
#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store_sql.hpp"

namespace factum {

using detail::bind_text;
using detail::col_text;
using detail::stmt_guard;

// -- breakers -----------------------------------------------------------------------------------

status entity_store::put_breaker(const breaker_record& b) {
  if (schema_version_ < 2)
    return {errc::internal, "breakers need schema version 2"};
  if (b.tool_id.empty() || b.tool_id.size() > 128)
    return {errc::invalid_argument, "tool id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(b.data))
    return {errc::invalid_argument, "breaker data must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT OR REPLACE INTO breakers(tool_id, state, data, updated_at) "
                    "VALUES (?,?,?,?)");
  stmt_guard g{st};
  bind_text(st, 1, b.tool_id);
  bind_text(st, 2, b.state);
  bind_text(st, 3, b.data);
  sqlite3_bind_int64(st, 4, b.updated_at_ms ? b.updated_at_ms : now_ms());
  return step_done(st, "put breaker");
}

result<std::vector<breaker_record>> entity_store::list_breakers() {
  std::vector<breaker_record> out;
  if (schema_version_ < 2)
    return out;
  auto st = prepare("SELECT tool_id, state, data, updated_at FROM breakers ORDER BY tool_id");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list breakers");
  stmt_guard g{st};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back({col_text(st, 0), col_text(st, 1), col_text(st, 2), sqlite3_column_int64(st, 3)});
  if (rc != SQLITE_DONE)
    return fail(rc, "list breakers");
  return out;
}

// -- configs ------------------------------------------------------------------------------------

result<int64_t> entity_store::put_config(std::string_view config_id, std::string_view body) {
  if (schema_version_ < 2)
    return status{errc::internal, "configs need schema version 2"};
  if (config_id.empty() || config_id.size() > 128 || !valid_utf8(config_id))
    return status{errc::invalid_argument, "config id must be 1 to 128 bytes of UTF-8"};
  if (!nlohmann::json::accept(body))
    return status{errc::invalid_argument, "config body must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT INTO configs(config_id, version, body, created_at) "
                    "SELECT ?1, COALESCE(MAX(version), 0) + 1, ?2, ?3 FROM configs "
                    "WHERE config_id=?1 RETURNING version");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare put config");
  stmt_guard g{st};
  bind_text(st, 1, config_id);
  bind_text(st, 2, body);
  sqlite3_bind_int64(st, 3, now_ms());
  if (int frc = fault_check("put config"); frc != SQLITE_OK)
    return fail(frc, "put config");
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW)
    return fail(rc, "put config");
  int64_t v = sqlite3_column_int64(st, 0);
  rc = sqlite3_step(st);
  if (rc != SQLITE_DONE)
    return fail(rc, "put config");
  return v;
}

result<config_record> entity_store::get_config(std::string_view config_id, int64_t version) {
  if (schema_version_ < 2)
    return status{errc::not_found, "no such config"};
  auto st = version > 0 ? prepare("SELECT config_id, version, body, created_at FROM configs "
                                  "WHERE config_id=?1 AND version=?2")
                        : prepare("SELECT config_id, version, body, created_at FROM configs "
                                  "WHERE config_id=?1 ORDER BY version DESC LIMIT 1");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get config");
  stmt_guard g{st};
  bind_text(st, 1, config_id);
  if (version > 0)
    sqlite3_bind_int64(st, 2, version);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return config_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                         sqlite3_column_int64(st, 3)};
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no config " + std::string(config_id.substr(0, 128)) +
                                     (version ? " version " + std::to_string(version) : "")};
  return fail(rc, "get config");
}

result<std::vector<config_record>> entity_store::list_configs() {
  std::vector<config_record> out;
  if (schema_version_ < 2)
    return out;
  auto st = prepare("SELECT config_id, version, body, created_at FROM configs "
                    "ORDER BY config_id, version");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list configs");
  stmt_guard g{st};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(config_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                                sqlite3_column_int64(st, 3)});
  if (rc != SQLITE_DONE)
    return fail(rc, "list configs");
  return out;
}

} // namespace factum
