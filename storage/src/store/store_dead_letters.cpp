// store_dead_letters.cpp: an entity's dead letters (see entity_store.hpp): their statuses,
// put, get, list and purge. Owned by the store's owner thread, one at a time; the status names
// (to_string, parse_dl_status) are for any thread.
#include "factum/storage/entity_store.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_sql.hpp"

namespace factum {

using detail::col_opt;
using detail::col_text;
using detail::int_or_null;
using detail::sql_concat;
using detail::text_or_null;

// -- statuses -----------------------------------------------------------------------------------

std::string_view to_string(dl_status s) noexcept {
  switch (s) {
  case dl_status::pending: return "pending";
  case dl_status::scheduled: return "scheduled";
  case dl_status::resolved: return "resolved";
  case dl_status::discarded: return "discarded";
  case dl_status::acknowledged: return "acknowledged";
  }
  return "pending";
}

result<dl_status> parse_dl_status(std::string_view s) {
  for (auto v : {dl_status::pending, dl_status::scheduled, dl_status::resolved,
                 dl_status::discarded, dl_status::acknowledged})
    if (to_string(v) == s)
      return v;
  return status{errc::invalid_argument,
                "dead letter status must be pending, scheduled, resolved, discarded or "
                "acknowledged"};
}

// -- dead letters -------------------------------------------------------------------------------

namespace {
// Files at schema version 5 have auto_retries; older ones (a read-only open does not migrate)
// do not: their dead letters read as 0.
constexpr char dl_columns[] =
  "SELECT id, operation, payload, idempotency_key, config_id, config_version, error_code, "
  "error_message, error_category, reason, attempts, first_attempt_at, last_attempt_at, trace_id, "
  "status, next_retry_at, expires_at, created_at, updated_at";
constexpr char dl_from[] = ", auto_retries FROM dead_letters ";
constexpr char dl_from_v4[] = ", 0 FROM dead_letters ";

dead_letter_record read_dl(sqlite3_stmt* st) {
  dead_letter_record d;
  d.id = col_text(st, 0);
  d.operation = col_text(st, 1);
  d.payload = col_text(st, 2);
  d.idempotency_key = col_text(st, 3);
  d.config_id = col_text(st, 4);
  d.config_version = sqlite3_column_int64(st, 5);
  d.error_code = col_text(st, 6);
  d.error_message = col_text(st, 7);
  d.error_category = col_text(st, 8);
  d.reason = col_text(st, 9);
  d.attempts = sqlite3_column_int64(st, 10);
  d.first_attempt_ms = sqlite3_column_int64(st, 11);
  d.last_attempt_ms = sqlite3_column_int64(st, 12);
  d.trace_id = col_text(st, 13);
  auto s = parse_dl_status(col_text(st, 14));
  d.status = s ? *s : dl_status::pending;
  d.next_retry_ms = col_opt(st, 15);
  d.expires_at_ms = col_opt(st, 16);
  d.created_at_ms = sqlite3_column_int64(st, 17);
  d.updated_at_ms = sqlite3_column_int64(st, 18);
  d.auto_retries = sqlite3_column_int64(st, 19);
  return d;
}
} // namespace

status entity_store::put_dead_letter(const dead_letter_record& d) {
  if (schema_version_ < 5)
    return {errc::internal, "writing dead letters needs schema version 5"};
  if (d.id.empty() || d.id.size() > 128)
    return {errc::invalid_argument, "dead letter id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(d.payload))
    return {errc::invalid_argument, "dead letter payload must be JSON"};
  int64_t now = now_ms();
  fleet_changed_ = true;
  return write_bound(
    "INSERT OR REPLACE INTO dead_letters(id, operation, payload, idempotency_key, config_id, "
    "config_version, error_code, error_message, error_category, reason, attempts, "
    "first_attempt_at, last_attempt_at, trace_id, status, next_retry_at, expires_at, created_at, "
    "updated_at, auto_retries) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "put dead letter", d.id, d.operation, d.payload, text_or_null{d.idempotency_key},
    text_or_null{d.config_id}, int_or_null{d.config_version}, d.error_code, d.error_message,
    d.error_category, d.reason, d.attempts, d.first_attempt_ms, d.last_attempt_ms,
    text_or_null{d.trace_id}, to_string(d.status), d.next_retry_ms, d.expires_at_ms,
    d.created_at_ms ? d.created_at_ms : now, d.updated_at_ms ? d.updated_at_ms : now,
    d.auto_retries);
}

result<dead_letter_record> entity_store::get_dead_letter(std::string_view id) {
  if (schema_version_ < 2)
    return status{errc::not_found, "no such dead letter"};
  static constexpr auto sql = sql_concat(dl_columns, dl_from, "WHERE id=?");
  static constexpr auto sql_v4 = sql_concat(dl_columns, dl_from_v4, "WHERE id=?");
  dead_letter_record d;
  auto read = [&](sqlite3_stmt* row) { d = read_dl(row); };
  auto found = schema_version_ >= 5 ? read_row(sql, "get dead letter", read, id)
                                    : read_row(sql_v4, "get dead letter", read, id);
  if (!found)
    return found.error();
  if (!*found)
    return status{errc::not_found, "no such dead letter"};
  return d;
}

result<std::vector<dead_letter_record>>
entity_store::list_dead_letters(std::optional<dl_status> filter, int64_t limit) {
  std::vector<dead_letter_record> out;
  if (schema_version_ < 2)
    return out;
  static constexpr auto all = sql_concat(dl_columns, dl_from, "ORDER BY created_at, id LIMIT ?");
  static constexpr auto by =
    sql_concat(dl_columns, dl_from, "WHERE status=? ORDER BY created_at, id LIMIT ?");
  static constexpr auto all_v4 =
    sql_concat(dl_columns, dl_from_v4, "ORDER BY created_at, id LIMIT ?");
  static constexpr auto by_v4 =
    sql_concat(dl_columns, dl_from_v4, "WHERE status=? ORDER BY created_at, id LIMIT ?");
  auto row = [&](sqlite3_stmt* st) { out.push_back(read_dl(st)); };
  bool v5 = schema_version_ >= 5;
  auto st = filter ? (v5 ? read_rows(by, "list dead letters", row, to_string(*filter), limit)
                         : read_rows(by_v4, "list dead letters", row, to_string(*filter), limit))
                   : (v5 ? read_rows(all, "list dead letters", row, limit)
                         : read_rows(all_v4, "list dead letters", row, limit));
  if (!st)
    return st;
  return out;
}

result<int64_t> entity_store::purge_dead_letters(int64_t now) {
  if (schema_version_ < 2)
    return int64_t{0};
  if (auto st =
        write_bound("DELETE FROM dead_letters WHERE expires_at IS NOT NULL AND "
                    "expires_at <= ? AND status IN ('resolved', 'discarded', 'acknowledged')",
                    "purge dead letters", now);
      !st)
    return st;
  auto purged = static_cast<int64_t>(sqlite3_changes(db_));
  fleet_changed_ = fleet_changed_ || purged > 0;
  return purged;
}

result<std::optional<int64_t>> entity_store::next_dead_letter_expiry() {
  std::optional<int64_t> next;
  if (schema_version_ < 2)
    return next;
  if (auto found =
        read_row("SELECT MIN(expires_at) FROM dead_letters WHERE expires_at IS NOT NULL "
                 "AND status IN ('resolved', 'discarded', 'acknowledged')",
                 "next dead letter expiry", [&](sqlite3_stmt* row) { next = col_opt(row, 0); });
      !found)
    return found.error();
  return next;
}

// -- the fleet summary ---------------------------------------------------------------------------

result<entity_fleet_summary> entity_store::fleet_summary() {
  entity_fleet_summary out;
  if (last_seq_ > 0) {
    auto f = get(last_seq_);
    if (!f)
      return f.error();
    out.last_activity_ms = f->timestamp_ms;
  }
  if (schema_version_ < 2)
    return out;
  if (auto st = read_rows("SELECT status, reason, COUNT(*), MIN(created_at) FROM dead_letters "
                          "GROUP BY status, reason ORDER BY status, reason",
                          "dead letter summary",
                          [&](sqlite3_stmt* row) {
                            out.dead_letters.push_back({col_text(row, 0), col_text(row, 1),
                                                        sqlite3_column_int64(row, 2),
                                                        sqlite3_column_int64(row, 3)});
                          });
      !st)
    return st;
  if (auto st = read_rows("SELECT tool_id, state, updated_at FROM breakers ORDER BY tool_id",
                          "breaker summary",
                          [&](sqlite3_stmt* row) {
                            out.breakers.push_back({col_text(row, 0), col_text(row, 1), "",
                                                    sqlite3_column_int64(row, 2)});
                          });
      !st)
    return st;
  return out;
}

} // namespace factum
