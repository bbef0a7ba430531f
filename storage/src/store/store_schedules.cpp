// store_schedules.cpp: an entity's recurring schedules (see entity_store.hpp; the table is
// docs/storage-format.md section 17): set, delete, get, list. The runtime keeps each one's alarm
// `@schedule:<name>` in step with its row. Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::col_opt;
using detail::col_text;
using detail::sql_concat;

// -- schedules ----------------------------------------------------------------------------------

namespace {
constexpr char schedule_select[] =
  "SELECT name, spec, payload, next_at, last_at, created_at, updated_at FROM schedules ";
schedule_record read_schedule(sqlite3_stmt* st) {
  schedule_record s;
  s.name = col_text(st, 0);
  s.spec = col_text(st, 1);
  s.payload = col_text(st, 2);
  s.next_ms = sqlite3_column_int64(st, 3);
  s.last_ms = col_opt(st, 4);
  s.created_at_ms = sqlite3_column_int64(st, 5);
  s.updated_at_ms = sqlite3_column_int64(st, 6);
  return s;
}
} // namespace

status entity_store::put_schedule(const schedule_record& s) {
  if (schema_version_ < schema::schedules_version)
    return {errc::invalid_argument, "schema version " + std::to_string(schema_version_) +
                                      " keeps no schedules (version " +
                                      std::to_string(schema::schedules_version) + " does)"};
  if (s.name.empty() || s.name.size() > 118 || !valid_utf8(s.name))
    return {errc::invalid_argument, "schedule name must be 1 to 118 bytes of UTF-8"};
  if (!nlohmann::json::accept(s.spec) || !nlohmann::json::accept(s.payload))
    return {errc::invalid_argument, "schedule spec and payload must be JSON"};
  int64_t now = now_ms();
  return write_bound("INSERT OR REPLACE INTO schedules(name, spec, payload, next_at, last_at, "
                     "created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
                     "put schedule", s.name, s.spec, s.payload, s.next_ms, s.last_ms,
                     s.created_at_ms ? s.created_at_ms : now,
                     s.updated_at_ms ? s.updated_at_ms : now);
}

status entity_store::delete_schedule(std::string_view name) {
  if (schema_version_ < schema::schedules_version)
    return {};
  return write_bound("DELETE FROM schedules WHERE name=?", "delete schedule", name);
}

result<schedule_record> entity_store::get_schedule(std::string_view name) {
  if (schema_version_ < schema::schedules_version)
    return status{errc::not_found, "no such schedule"};
  static constexpr auto sql = sql_concat(schedule_select, "WHERE name=?");
  schedule_record s;
  auto found = read_row(
    sql, "get schedule", [&](sqlite3_stmt* row) { s = read_schedule(row); }, name);
  if (!found)
    return found.error();
  if (!*found)
    return status{errc::not_found, "no such schedule"};
  return s;
}

result<std::vector<schedule_record>> entity_store::list_paused_schedules() {
  std::vector<schedule_record> out;
  if (schema_version_ < schema::paused_version)
    return out;
  static constexpr char sql[] = "SELECT name, spec, payload, next_at, last_at, created_at, "
                                "updated_at FROM paused_schedules ORDER BY name";
  if (auto st = read_rows(sql, "list paused schedules",
                          [&](sqlite3_stmt* row) { out.push_back(read_schedule(row)); });
      !st)
    return st;
  return out;
}

result<std::vector<schedule_record>> entity_store::list_schedules() {
  std::vector<schedule_record> out;
  if (schema_version_ < schema::schedules_version)
    return out;
  static constexpr auto sql = sql_concat(schedule_select, "ORDER BY name");
  if (auto st = read_rows(sql, "list schedules",
                          [&](sqlite3_stmt* row) { out.push_back(read_schedule(row)); });
      !st)
    return st;
  return out;
}

} // namespace factum
