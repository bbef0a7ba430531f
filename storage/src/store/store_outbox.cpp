// store_outbox.cpp: an entity's outbox cursors (see entity_store.hpp; the table is
// docs/storage-format.md section 18), one per sink its facts are relayed to, and the count of
// facts a sink has still to acknowledge. The runtime writes a cursor only in a commit made after
// its sink acknowledged. Owned by the store's owner thread, one at a time.
#include <string_view>
#include <utility>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::col_text;
using detail::sql_concat;

// -- outbox cursors -----------------------------------------------------------------------------

namespace {
constexpr char cursor_select[] =
  "SELECT sink, seq, attempts, next_at, last_error, updated_at FROM outbox_cursors ";
outbox_cursor read_cursor(sqlite3_stmt* st) {
  outbox_cursor c;
  c.sink = col_text(st, 0);
  c.seq = sqlite3_column_int64(st, 1);
  c.attempts = sqlite3_column_int64(st, 2);
  c.next_ms = sqlite3_column_int64(st, 3);
  c.last_error = col_text(st, 4);
  c.updated_at_ms = sqlite3_column_int64(st, 5);
  return c;
}
} // namespace

status entity_store::put_outbox_cursor(const outbox_cursor& c) {
  if (schema_version_ < schema::outbox_version)
    return {errc::invalid_argument, "schema version " + std::to_string(schema_version_) +
                                      " keeps no outbox cursors (version " +
                                      std::to_string(schema::outbox_version) + " does)"};
  if (c.sink.empty() || c.seq < 0 || c.attempts < 0)
    return {errc::invalid_argument, "outbox cursor: a sink name, seq >= 0 and attempts >= 0"};
  return write_bound("INSERT OR REPLACE INTO outbox_cursors(sink, seq, attempts, next_at, "
                     "last_error, updated_at) VALUES (?,?,?,?,?,?)",
                     "put outbox cursor", c.sink, c.seq, c.attempts, c.next_ms,
                     detail::text_or_null{c.last_error},
                     c.updated_at_ms ? c.updated_at_ms : now_ms());
}

result<outbox_cursor> entity_store::get_outbox_cursor(std::string_view sink) {
  outbox_cursor c;
  c.sink = std::string(sink);
  if (schema_version_ < schema::outbox_version)
    return c;
  static constexpr auto sql = sql_concat(cursor_select, "WHERE sink=?");
  auto found = read_row(
    sql, "get outbox cursor", [&](sqlite3_stmt* row) { c = read_cursor(row); }, sink);
  if (!found)
    return found.error();
  return c;
}

result<std::vector<outbox_cursor>> entity_store::list_outbox_cursors() {
  std::vector<outbox_cursor> out;
  if (schema_version_ < schema::outbox_version)
    return out;
  static constexpr auto sql = sql_concat(cursor_select, "ORDER BY sink");
  if (auto st = read_rows(sql, "list outbox cursors",
                          [&](sqlite3_stmt* row) { out.push_back(read_cursor(row)); });
      !st)
    return st;
  return out;
}

result<std::pair<int64_t, int64_t>> entity_store::count_facts_after(std::string_view type,
                                                                    int64_t after_seq) {
  std::pair<int64_t, int64_t> out{0, 0};
  auto found = read_row(
    "SELECT COUNT(*), COALESCE(MIN(ts), 0) FROM facts WHERE type=? AND seq>?", "count facts",
    [&](sqlite3_stmt* row) {
      out.first = sqlite3_column_int64(row, 0);
      out.second = sqlite3_column_int64(row, 1);
    },
    type, after_seq);
  if (!found)
    return found.error();
  return out;
}

} // namespace factum
