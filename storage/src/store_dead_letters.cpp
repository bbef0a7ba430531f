// store_dead_letters.cpp: an entity's dead letters (see entity_store.hpp): their statuses,
// put, get, list and purge. Owned by the store's owner thread, one at a time; the status names
// (to_string, parse_dl_status) are for any thread.
#include "factum/storage/entity_store.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store_sql.hpp"

namespace factum {

using detail::bind_int_or_null;
using detail::bind_opt;
using detail::bind_text;
using detail::bind_text_or_null;
using detail::col_opt;
using detail::col_text;
using detail::sql_concat;
using detail::stmt_guard;

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
constexpr char dl_select[] =
  "SELECT id, operation, payload, idempotency_key, config_id, config_version, error_code, "
  "error_message, error_category, reason, attempts, first_attempt_at, last_attempt_at, trace_id, "
  "status, next_retry_at, expires_at, created_at, updated_at FROM dead_letters ";

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
  return d;
}
} // namespace

status entity_store::put_dead_letter(const dead_letter_record& d) {
  if (schema_version_ < 2)
    return {errc::internal, "dead letters need schema version 2"};
  if (d.id.empty() || d.id.size() > 128)
    return {errc::invalid_argument, "dead letter id must be 1 to 128 characters"};
  if (!nlohmann::json::accept(d.payload))
    return {errc::invalid_argument, "dead letter payload must be JSON"};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare(
    "INSERT OR REPLACE INTO dead_letters(id, operation, payload, idempotency_key, config_id, "
    "config_version, error_code, error_message, error_category, reason, attempts, "
    "first_attempt_at, last_attempt_at, trace_id, status, next_retry_at, expires_at, created_at, "
    "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  stmt_guard g{st};
  int64_t now = now_ms();
  bind_text(st, 1, d.id);
  bind_text(st, 2, d.operation);
  bind_text(st, 3, d.payload);
  bind_text_or_null(st, 4, d.idempotency_key);
  bind_text_or_null(st, 5, d.config_id);
  bind_int_or_null(st, 6, d.config_version);
  bind_text(st, 7, d.error_code);
  bind_text(st, 8, d.error_message);
  bind_text(st, 9, d.error_category);
  bind_text(st, 10, d.reason);
  sqlite3_bind_int64(st, 11, d.attempts);
  sqlite3_bind_int64(st, 12, d.first_attempt_ms);
  sqlite3_bind_int64(st, 13, d.last_attempt_ms);
  bind_text_or_null(st, 14, d.trace_id);
  bind_text(st, 15, to_string(d.status));
  bind_opt(st, 16, d.next_retry_ms);
  bind_opt(st, 17, d.expires_at_ms);
  sqlite3_bind_int64(st, 18, d.created_at_ms ? d.created_at_ms : now);
  sqlite3_bind_int64(st, 19, d.updated_at_ms ? d.updated_at_ms : now);
  return step_done(st, "put dead letter");
}

result<dead_letter_record> entity_store::get_dead_letter(std::string_view id) {
  if (schema_version_ < 2)
    return status{errc::not_found, "no such dead letter"};
  static constexpr auto sql = sql_concat(dl_select, "WHERE id=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare get dead letter");
  stmt_guard g{st};
  bind_text(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_dl(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such dead letter"};
  return fail(rc, "get dead letter");
}

result<std::vector<dead_letter_record>>
entity_store::list_dead_letters(std::optional<dl_status> filter, int64_t limit) {
  std::vector<dead_letter_record> out;
  if (schema_version_ < 2)
    return out;
  static constexpr auto all = sql_concat(dl_select, "ORDER BY created_at, id LIMIT ?2");
  static constexpr auto by =
    sql_concat(dl_select, "WHERE status=?1 ORDER BY created_at, id LIMIT ?2");
  auto st = filter ? prepare(by) : prepare(all);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare list dead letters");
  stmt_guard g{st};
  if (filter)
    bind_text(st, 1, to_string(*filter));
  sqlite3_bind_int64(st, 2, limit);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    out.push_back(read_dl(st));
  if (rc != SQLITE_DONE)
    return fail(rc, "list dead letters");
  return out;
}

result<int64_t> entity_store::purge_dead_letters(int64_t now) {
  if (schema_version_ < 2)
    return int64_t{0};
  if (auto st = ensure_batch(); !st)
    return st;
  auto st = prepare("DELETE FROM dead_letters WHERE expires_at IS NOT NULL AND expires_at <= ? "
                    "AND status IN ('resolved', 'discarded', 'acknowledged')");
  stmt_guard g{st};
  sqlite3_bind_int64(st, 1, now);
  if (auto s = step_done(st, "purge dead letters"); !s)
    return s;
  return static_cast<int64_t>(sqlite3_changes(db_));
}

result<std::optional<int64_t>> entity_store::next_dead_letter_expiry() {
  if (schema_version_ < 2)
    return std::optional<int64_t>{};
  auto st = prepare("SELECT MIN(expires_at) FROM dead_letters WHERE expires_at IS NOT NULL "
                    "AND status IN ('resolved', 'discarded', 'acknowledged')");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare next dead letter expiry");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW)
    return fail(rc, "next dead letter expiry");
  return col_opt(st, 0);
}

} // namespace factum
