// tenant_index_fleet.cpp: the tenant index's reads for the fleet views (see tenant_index.hpp):
// entities by last activity, dead letters and breakers across a tenant's entities, and the
// read of one entity file's summary. The index's reads run on its owner thread, one at a time;
// read_fleet_summary() on any thread.
#include <sqlite3.h>

#include "factum/storage/tenant_index.hpp"
#include "index/index_db.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

/// Runs cached statement `st` with `args`, `row` on each row; the error when it fails.
template <class Row, class... A>
status each_row(sqlite3* db, sqlite3_stmt* st, const char* what, Row&& row, const A&... args) {
  if (!st || detail::step_rows(st, row, args...) != SQLITE_DONE)
    return detail::tenant_index_error(db, what);
  return status::ok();
}

} // namespace

result<entity_fleet_summary> read_fleet_summary(const fs::path& file, const fs::path& data_dir) {
  store_options o;
  o.data_dir = data_dir;
  o.read_only = true;
  auto s = entity_store::open_file(file, o);
  if (!s)
    return s.error();
  if ((*s)->key().file_path(data_dir) != file)
    return status{errc::corruption, file.string() + " holds another path's entity"};
  return (*s)->fleet_summary();
}

result<std::vector<entity_activity>>
tenant_index::list_by_activity(std::string_view tenant, std::string_view type, int64_t before_ms,
                               std::string_view after_type, std::string_view after_id,
                               int64_t limit) {
  // Newest first; ties in (type, id) order. The cursor is the last row of the previous page.
  auto* st =
    stmts_->get("SELECT tenant, type, id, bytes, last_activity FROM tenant_entities"
                " WHERE tenant=?1 AND (?2='' OR type=?2) AND (?3 < 0 OR last_activity < ?3 OR"
                " (last_activity = ?3 AND (type, id) > (?4, ?5)))"
                " ORDER BY last_activity DESC, type, id LIMIT ?6");
  std::vector<entity_activity> out;
  auto st2 = each_row(
    db_, st, "list by activity",
    [&](sqlite3_stmt* row) {
      out.push_back({{detail::col_text(row, 0), detail::col_text(row, 1), detail::col_text(row, 2)},
                     sqlite3_column_int64(row, 3),
                     sqlite3_column_int64(row, 4)});
    },
    tenant, type, before_ms, after_type, after_id, limit);
  if (!st2)
    return st2;
  return out;
}

namespace {

/// The statement of `sql` for the filter's shape: [0] no status and no reason, [1] a status,
/// [2] a reason, [3] both. Each spells the filter out so that SQLite searches the index by the
/// values given (an "?='' OR" test would make it scan the tenant's rows).
const char* by_filter(const dead_letter_filter& f, const char* const (&sql)[4]) {
  return sql[(f.status.empty() ? 0 : 1) + (f.reason.empty() ? 0 : 2)];
}

/// Binds the filter's values that its shape's statement names, after the first `at - 1`.
void bind_filter(sqlite3_stmt* st, const dead_letter_filter& f, int at) {
  if (!f.status.empty())
    sqlite3_bind_text(st, at++, f.status.data(), static_cast<int>(f.status.size()),
                      SQLITE_TRANSIENT);
  if (!f.reason.empty())
    sqlite3_bind_text(st, at, f.reason.data(), static_cast<int>(f.reason.size()), SQLITE_TRANSIENT);
}

constexpr const char* dl_entities_sql[4] = {
  "SELECT type, id, SUM(count) FROM tenant_dead_letters WHERE tenant=?1 AND (?2='' OR type=?2)"
  " AND (type, id) >= (?3, ?4) GROUP BY type, id ORDER BY type, id LIMIT ?5",
  "SELECT type, id, SUM(count) FROM tenant_dead_letters WHERE tenant=?1 AND (?2='' OR type=?2)"
  " AND (type, id) >= (?3, ?4) AND status=?6 GROUP BY type, id ORDER BY type, id LIMIT ?5",
  "SELECT type, id, SUM(count) FROM tenant_dead_letters WHERE tenant=?1 AND (?2='' OR type=?2)"
  " AND (type, id) >= (?3, ?4) AND reason=?6 GROUP BY type, id ORDER BY type, id LIMIT ?5",
  "SELECT type, id, SUM(count) FROM tenant_dead_letters WHERE tenant=?1 AND (?2='' OR type=?2)"
  " AND (type, id) >= (?3, ?4) AND status=?6 AND reason=?7 GROUP BY type, id ORDER BY type, id"
  " LIMIT ?5"};

constexpr const char* dl_count_sql[4] = {
  "SELECT COALESCE(SUM(count), 0) FROM tenant_dead_letters WHERE tenant=?1",
  "SELECT COALESCE(SUM(count), 0) FROM tenant_dead_letters WHERE tenant=?1 AND status=?2",
  "SELECT COALESCE(SUM(count), 0) FROM tenant_dead_letters WHERE tenant=?1 AND reason=?2",
  ("SELECT COALESCE(SUM(count), 0) FROM tenant_dead_letters WHERE tenant=?1 AND status=?2"
   " AND reason=?3")};

} // namespace

result<std::vector<std::pair<entity_key, int64_t>>>
tenant_index::dead_letter_entities(std::string_view tenant, const dead_letter_filter& f,
                                   std::string_view type, std::string_view from_type,
                                   std::string_view from_id, int64_t limit) {
  auto* st = stmts_->get(by_filter(f, dl_entities_sql));
  if (st)
    bind_filter(st, f, 6);
  std::vector<std::pair<entity_key, int64_t>> out;
  auto s = each_row(
    db_, st, "dead letter entities",
    [&](sqlite3_stmt* row) {
      out.emplace_back(
        entity_key{std::string(tenant), detail::col_text(row, 0), detail::col_text(row, 1)},
        sqlite3_column_int64(row, 2));
    },
    tenant, type, from_type, from_id, limit);
  if (!s)
    return s;
  return out;
}

result<int64_t> tenant_index::count_dead_letters(std::string_view tenant,
                                                 const dead_letter_filter& f) {
  auto* st = stmts_->get(by_filter(f, dl_count_sql));
  if (st)
    bind_filter(st, f, 2);
  int64_t n = 0;
  auto s = each_row(
    db_, st, "count dead letters", [&](sqlite3_stmt* row) { n = sqlite3_column_int64(row, 0); },
    tenant);
  if (!s)
    return s;
  return n;
}

result<std::map<std::string, dead_letter_totals>> tenant_index::dead_letter_totals_by_tenant() {
  auto* st = stmts_->get("SELECT tenant, status, SUM(count), MIN(oldest) FROM tenant_dead_letters"
                         " GROUP BY tenant, status");
  std::map<std::string, dead_letter_totals> out;
  auto s = each_row(db_, st, "dead letter totals", [&](sqlite3_stmt* row) {
    auto& t = out[detail::col_text(row, 0)];
    auto status = detail::col_text(row, 1);
    t.by_status[status] = sqlite3_column_int64(row, 2);
    if (status == "pending")
      t.oldest_pending_ms = sqlite3_column_int64(row, 3);
  });
  if (!s)
    return s;
  return out;
}

result<std::vector<tool_breaker_states>> tenant_index::breaker_states(std::string_view tenant,
                                                                      std::string_view tool) {
  auto* st = stmts_->get("SELECT tool, state, COUNT(*) FROM tenant_breakers"
                         " WHERE tenant=?1 AND (?2='' OR tool=?2)"
                         " GROUP BY tool, state ORDER BY tool, state");
  std::vector<tool_breaker_states> out;
  auto s = each_row(
    db_, st, "breaker states",
    [&](sqlite3_stmt* row) {
      auto name = detail::col_text(row, 0);
      if (out.empty() || out.back().tool != name)
        out.push_back({name, {}});
      out.back().entities_by_state[detail::col_text(row, 1)] = sqlite3_column_int64(row, 2);
    },
    tenant, tool);
  if (!s)
    return s;
  return out;
}

result<std::vector<entity_breaker>>
tenant_index::open_breakers(std::string_view tenant, std::string_view tool, std::string_view state,
                            std::string_view after_tool, std::string_view after_type,
                            std::string_view after_id, int64_t limit) {
  // tenant_breakers_not_closed holds the few rows asked for, in the order asked for.
  auto* st = stmts_->get("SELECT tool, state, type, id, updated_at FROM tenant_breakers"
                         " INDEXED BY tenant_breakers_not_closed"
                         " WHERE tenant=?1 AND state <> 'CLOSED' AND (?2='' OR tool=?2)"
                         " AND (?3='' OR state=?3) AND (tool, type, id) > (?4, ?5, ?6)"
                         " ORDER BY tool, type, id LIMIT ?7");
  std::vector<entity_breaker> out;
  auto s = each_row(
    db_, st, "open breakers",
    [&](sqlite3_stmt* row) {
      out.push_back({detail::col_text(row, 0), detail::col_text(row, 1), detail::col_text(row, 2),
                     detail::col_text(row, 3), sqlite3_column_int64(row, 4)});
    },
    tenant, tool, state, after_tool, after_type, after_id, limit);
  if (!s)
    return s;
  return out;
}

} // namespace factum
