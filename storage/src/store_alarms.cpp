// store_alarms.cpp: an entity's alarms (see entity_store.hpp): set, cancel, list, the next
// one due. Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <optional>
#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store_sql.hpp"

namespace factum {

using detail::bind_text;
using detail::col_text;
using detail::sql_concat;
using detail::stmt_guard;

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
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("INSERT OR REPLACE INTO alarms(name, due_at, payload, attempts, created_at) "
                    "VALUES (?,?,?,?,?)");
  stmt_guard g{st};
  bind_text(st, 1, a.name);
  sqlite3_bind_int64(st, 2, a.due_ms);
  bind_text(st, 3, a.payload);
  sqlite3_bind_int64(st, 4, a.attempts);
  sqlite3_bind_int64(st, 5, a.created_at_ms ? a.created_at_ms : now_ms());
  return step_done(st, "set alarm");
}

status entity_store::cancel_alarm(std::string_view name) {
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM alarms WHERE name=?");
  stmt_guard g{st};
  bind_text(st, 1, name);
  return step_done(st, "cancel alarm");
}

result<std::vector<alarm_record>> entity_store::list_alarms() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list alarms");
  stmt_guard g{st};
  std::vector<alarm_record> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_alarm(st));
  if (rc != SQLITE_DONE)
    return fail(rc, "list alarms");
  return out;
}

result<std::optional<alarm_record>> entity_store::next_alarm() {
  static constexpr auto sql = sql_concat(alarm_select, "ORDER BY due_at, name LIMIT 1");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare next alarm");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return std::optional<alarm_record>(read_alarm(st));
  if (rc == SQLITE_DONE)
    return std::optional<alarm_record>();
  return fail(rc, "next alarm");
}

result<alarm_record> entity_store::get_alarm(std::string_view name) {
  static constexpr auto sql = sql_concat(alarm_select, "WHERE name=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get alarm");
  stmt_guard g{st};
  bind_text(st, 1, name);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_alarm(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such alarm"};
  return fail(rc, "get alarm");
}

} // namespace factum
