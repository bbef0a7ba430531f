// store_journal.cpp: the journal of durable execution (see entity_store.hpp and
// docs/storage-format.md section 16): the steps of journaled calls, written when a step starts,
// completed with its result, read back by a replay, listed, purged. Owned by the store's owner
// thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <string>
#include <string_view>
#include <vector>

#include "factum/storage/utf8.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::col_opt;
using detail::col_text;
using detail::text_or_null;

namespace {

bool known_kind(std::string_view k) {
  return k == "tool" || k == "call" || k == "sleep";
}

} // namespace

status entity_store::put_journal_step(const journal_step& s) {
  if (schema_version_ < schema::journal_version)
    return {errc::invalid_argument, "this entity file (schema version " +
                                      std::to_string(schema_version_) + ") has no journal"};
  if (s.key.empty() || s.key.size() > 300 || !valid_utf8(s.key))
    return {errc::invalid_argument, "a journal key must be 1 to 300 bytes of UTF-8"};
  if (s.step < 1 || s.runs < 1 || !known_kind(s.kind))
    return {errc::invalid_argument, "a journal step needs step >= 1, runs >= 1 and a known kind"};
  if (!nlohmann::json::accept(s.entries) || (s.result && !nlohmann::json::accept(*s.result)))
    return {errc::invalid_argument, "journal entries and results must be JSON"};
  return write_bound("INSERT OR REPLACE INTO journal(key, step, kind, what, fingerprint, entries, "
                     "result, runs, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     "put journal step", s.key, s.step, s.kind, s.what, s.fingerprint, s.entries,
                     text_or_null{s.result ? std::string_view(*s.result) : std::string_view()},
                     s.runs, s.started_at_ms, s.finished_at_ms);
}

status entity_store::finish_journal_step(std::string_view key, int64_t step,
                                         std::string_view result, int64_t at_ms) {
  if (!nlohmann::json::accept(result))
    return {errc::invalid_argument, "a journal result must be JSON"};
  if (auto st = write_bound("UPDATE journal SET result=?, finished_at=? WHERE key=? AND step=?",
                            "finish journal step", result, at_ms, key, step);
      !st)
    return st;
  if (sqlite3_changes(db_) != 1)
    return {errc::not_found, "no journal step " + std::to_string(step) + " of this call"};
  return status::ok();
}

status entity_store::end_journal_step(std::string_view key, int64_t step, int64_t at_ms) {
  return write_bound("UPDATE journal SET finished_at=? WHERE key=? AND step=? AND result IS NULL",
                     "end journal step", at_ms, key, step);
}

result<std::vector<journal_step>> entity_store::journal(std::string_view key) {
  std::vector<journal_step> out;
  if (schema_version_ < schema::journal_version)
    return out;
  auto row = [&](sqlite3_stmt* st) {
    journal_step s;
    s.key = std::string(key);
    s.step = sqlite3_column_int64(st, 0);
    s.kind = col_text(st, 1);
    s.what = col_text(st, 2);
    s.fingerprint = col_text(st, 3);
    s.entries = col_text(st, 4);
    if (sqlite3_column_type(st, 5) != SQLITE_NULL)
      s.result = col_text(st, 5);
    s.runs = sqlite3_column_int64(st, 6);
    s.started_at_ms = sqlite3_column_int64(st, 7);
    s.finished_at_ms = col_opt(st, 8);
    out.push_back(std::move(s));
  };
  if (auto st =
        read_rows("SELECT step, kind, what, fingerprint, entries, result, runs, started_at, "
                  "finished_at FROM journal WHERE key=? ORDER BY step",
                  "read journal", row, key);
      !st)
    return st;
  return out;
}

result<std::vector<journal_summary>> entity_store::list_journals(int64_t limit) {
  std::vector<journal_summary> out;
  if (schema_version_ < schema::journal_version)
    return out;
  auto row = [&](sqlite3_stmt* st) {
    out.push_back(journal_summary{col_text(st, 0), sqlite3_column_int64(st, 1),
                                  sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3)});
  };
  if (auto st = read_rows("SELECT key, COUNT(*), COUNT(result), MAX(started_at) FROM journal "
                          "GROUP BY key ORDER BY MAX(started_at) DESC, key LIMIT ?",
                          "list journals", row, limit);
      !st)
    return st;
  return out;
}

result<std::vector<std::string>> entity_store::journal_keys(std::string_view prefix,
                                                            int64_t limit) {
  std::vector<std::string> out;
  if (schema_version_ < schema::journal_version)
    return out;
  auto row = [&](sqlite3_stmt* st) { out.push_back(col_text(st, 0)); };
  // A range of the primary key: every key that starts with `prefix` sorts (BINARY) at or after
  // it and before `prefix` followed by the largest byte, which no UTF-8 text holds.
  std::string end = std::string(prefix) + "\xff";
  if (auto st = read_rows("SELECT DISTINCT key FROM journal WHERE key >= ? AND key < ? "
                          "ORDER BY key LIMIT ?",
                          "list journal keys", row, prefix, end, limit);
      !st)
    return st;
  return out;
}

status entity_store::purge_journal(std::string_view key, int64_t after_step) {
  if (schema_version_ < schema::journal_version)
    return status::ok();
  return write_bound("DELETE FROM journal WHERE key=? AND step > ?", "purge journal", key,
                     after_step);
}

} // namespace factum
