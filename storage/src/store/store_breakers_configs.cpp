// store_breakers_configs.cpp: an entity's circuit breakers and versioned configs (see
// entity_store.hpp). Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <string>
#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::bind_text;
using detail::col_text;
using detail::sql_concat;
using detail::stmt_guard;

// -- breakers -----------------------------------------------------------------------------------

status entity_store::put_breaker(const breaker_record& b) {
  if (schema_version_ < 2)
    return {errc::internal, "breakers need schema version 2"};
  if (b.tool_id.empty() || b.tool_id.size() > 128)
    return {errc::invalid_argument, "tool id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(b.data))
    return {errc::invalid_argument, "breaker data must be JSON"};
  return write_bound("INSERT OR REPLACE INTO breakers(tool_id, state, data, updated_at) "
                     "VALUES (?,?,?,?)",
                     "put breaker", b.tool_id, b.state, b.data,
                     b.updated_at_ms ? b.updated_at_ms : now_ms());
}

result<std::vector<breaker_record>> entity_store::list_breakers() {
  std::vector<breaker_record> out;
  if (schema_version_ < 2)
    return out;
  if (auto st = read_rows("SELECT tool_id, state, data, updated_at FROM breakers ORDER BY tool_id",
                          "list breakers",
                          [&](sqlite3_stmt* row) {
                            out.push_back({col_text(row, 0), col_text(row, 1), col_text(row, 2),
                                           sqlite3_column_int64(row, 3)});
                          });
      !st)
    return st;
  return out;
}

// -- configs ------------------------------------------------------------------------------------

namespace {

constexpr char config_select[] = "SELECT config_id, version, body, created_at FROM configs ";

config_record read_config(sqlite3_stmt* st) {
  return config_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                       sqlite3_column_int64(st, 3)};
}

} // namespace

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
  static constexpr auto one = sql_concat(config_select, "WHERE config_id=? AND version=?");
  static constexpr auto latest =
    sql_concat(config_select, "WHERE config_id=? ORDER BY version DESC LIMIT 1");
  config_record c;
  auto row = [&](sqlite3_stmt* st) { c = read_config(st); };
  auto found = version > 0 ? read_row(one, "get config", row, config_id, version)
                           : read_row(latest, "get config", row, config_id);
  if (!found)
    return found.error();
  if (!*found)
    return status{errc::not_found, "no config " + std::string(config_id.substr(0, 128)) +
                                     (version ? " version " + std::to_string(version) : "")};
  return c;
}

result<std::vector<config_record>> entity_store::list_configs() {
  std::vector<config_record> out;
  if (schema_version_ < 2)
    return out;
  static constexpr auto sql = sql_concat(config_select, "ORDER BY config_id, version");
  if (auto st =
        read_rows(sql, "list configs", [&](sqlite3_stmt* row) { out.push_back(read_config(row)); });
      !st)
    return st;
  return out;
}

} // namespace factum
