// store_alarms.cpp: an entity's alarms (see entity_store.hpp): set, cancel, list, the next
// one due. Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <optional>
#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::col_text;
using detail::sql_concat;

// -- alarms -------------------------------------------------------------------------------------

namespace {
constexpr char alarm_select[] = "SELECT name, due_at, payload, attempts, created_at FROM alarms ";
alarm_record read_alarm(sqlite3_stmt* st) {
  return alarm_record{col_text(st, 0), sqlite3_column_int64(st, 1), col_text(st, 2),
                      sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4)};
}
} // namespace

status entity_store::set_alarm(const alarm_record& a) {
  if (a.name.empty() || a.name.size() > 128 || !valid_utf8(a.name))
    return {errc::invalid_argument, "alarm name must be 1 to 128 bytes of UTF-8"};
  if (a.due_ms < 0 || a.attempts < 0)
    return {errc::invalid_argument, "alarm due time and attempts must not be negative"};
  if (!nlohmann::json::accept(a.payload))
    return {errc::invalid_argument, "alarm payload must be JSON"};
  return write_bound("INSERT OR REPLACE INTO alarms(name, due_at, payload, attempts, created_at) "
                     "VALUES (?,?,?,?,?)",
                     "set alarm", a.name, a.due_ms, a.payload, a.attempts,
                     a.created_at_ms ? a.created_at_ms : now_ms());
}

status entity_store::cancel_alarm(std::string_view name) {
  return write_bound("DELETE FROM alarms WHERE name=?", "cancel alarm", name);
}

result<std::vector<alarm_record>> entity_store::list_alarms() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name");
  std::vector<alarm_record> out;
  if (auto st =
        read_rows(sql, "list alarms", [&](sqlite3_stmt* row) { out.push_back(read_alarm(row)); });
      !st)
    return st;
  return out;
}

result<std::vector<alarm_record>> entity_store::list_paused_alarms() {
  std::vector<alarm_record> out;
  if (schema_version_ < schema::paused_version)
    return out;
  static constexpr char sql[] =
    "SELECT name, due_at, payload, attempts, created_at FROM paused_alarms ORDER BY due_at, name";
  if (auto st = read_rows(sql, "list paused alarms",
                          [&](sqlite3_stmt* row) { out.push_back(read_alarm(row)); });
      !st)
    return st;
  return out;
}

result<paused_state> entity_store::resume_paused() {
  paused_state out;
  auto a = list_paused_alarms();
  if (!a)
    return a.error();
  auto s = list_paused_schedules();
  if (!s)
    return s.error();
  out.alarms = std::move(*a);
  out.schedules = std::move(*s);
  if (out.alarms.empty() && out.schedules.empty())
    return out;
  status st = write_bound("DELETE FROM paused_alarms", "resume paused alarms");
  if (st)
    st = write_bound("DELETE FROM paused_schedules", "resume paused schedules");
  if (!st)
    return st;
  return out;
}

result<std::optional<alarm_record>> entity_store::next_alarm() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name LIMIT 1");
  std::optional<alarm_record> next;
  if (auto found = read_row(sql, "next alarm", [&](sqlite3_stmt* row) { next = read_alarm(row); });
      !found)
    return found.error();
  return next;
}

result<alarm_record> entity_store::get_alarm(std::string_view name) {
  static constexpr auto sql = sql_concat(alarm_select, "WHERE name=?");
  alarm_record a;
  auto found = read_row(
    sql, "get alarm", [&](sqlite3_stmt* row) { a = read_alarm(row); }, name);
  if (!found)
    return found.error();
  if (!*found)
    return status{errc::not_found, "no such alarm"};
  return a;
}

} // namespace factum
