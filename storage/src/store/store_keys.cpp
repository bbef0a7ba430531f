// store_keys.cpp: an entity's idempotency keys (see entity_store.hpp): begin, peek, record,
// settle, release, purge and list them. Owned by the store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::bind_text;
using detail::col_opt;
using detail::col_text;
using detail::sql_concat;
using detail::stmt_guard;

// -- idempotency keys ---------------------------------------------------------------------------

std::string_view to_string(key_status s) noexcept {
  switch (s) {
  case key_status::pending: return "pending";
  case key_status::completed: return "completed";
  case key_status::failed: return "failed";
  }
  return "pending";
}

namespace {

key_status parse_key_status(std::string_view s) {
  if (s == "completed")
    return key_status::completed;
  if (s == "failed")
    return key_status::failed;
  return key_status::pending;
}

constexpr char key_select[] =
  "SELECT key, status, fingerprint, response, created_at, expires_at FROM idempotency_keys ";

idempotency_record read_key(sqlite3_stmt* st) {
  idempotency_record r;
  r.key = col_text(st, 0);
  r.status = parse_key_status(col_text(st, 1));
  r.fingerprint = col_text(st, 2);
  r.response = col_text(st, 3);
  r.created_at_ms = sqlite3_column_int64(st, 4);
  r.expires_at_ms = col_opt(st, 5);
  return r;
}

/// When a key stored at `now` expires: never when `ttl_ms` is 0.
std::optional<int64_t> expiry(int64_t now, int64_t ttl_ms) {
  return ttl_ms > 0 ? std::optional<int64_t>(now + ttl_ms) : std::nullopt;
}

} // namespace

result<key_begin_result> entity_store::peek_key(std::string_view key, std::string_view fingerprint,
                                                int64_t now) {
  key_begin_result out;
  auto r = get_key(key);
  if (!r) {
    if (r.error().code() != errc::not_found)
      return r.error();
    return out;
  }
  out.record = std::move(r.value());
  bool expired = out.record.expires_at_ms && *out.record.expires_at_ms <= now &&
                 out.record.status != key_status::pending;
  if (expired)
    out.outcome = key_outcome::fresh;
  else if (out.record.fingerprint != fingerprint)
    out.outcome = key_outcome::mismatch;
  else if (out.record.status == key_status::pending)
    out.outcome = key_outcome::in_flight;
  else if (out.record.status == key_status::completed)
    out.outcome = key_outcome::completed;
  else
    out.outcome = key_outcome::failed;
  return out;
}

result<key_begin_result> entity_store::begin_key(std::string_view key, std::string_view fingerprint,
                                                 int64_t ttl_ms, int64_t now) {
  if (key.empty() || key.size() > 255)
    return status{errc::invalid_argument, "idempotency key must be 1 to 255 characters"};
  if (ttl_ms < 0)
    return status{errc::invalid_argument, "idempotency key TTL must not be negative"};
  auto peek = peek_key(key, fingerprint, now);
  if (!peek)
    return peek;
  if (peek->outcome != key_outcome::fresh)
    return peek;
  // Fresh means no record or an expired settled one: REPLACE drops the expired record.
  if (auto st =
        write_bound("INSERT OR REPLACE INTO idempotency_keys(key, status, fingerprint, "
                    "response, created_at, expires_at) VALUES (?, 'pending', ?, NULL, ?, ?)",
                    "insert key", key, fingerprint, now, expiry(now, ttl_ms));
      !st)
    return st;
  key_begin_result out;
  out.outcome = key_outcome::fresh;
  out.record = idempotency_record{
    std::string(key), key_status::pending, std::string(fingerprint), "", now, expiry(now, ttl_ms)};
  return out;
}

status entity_store::record_key(std::string_view key, key_status st_, std::string_view fingerprint,
                                std::string_view response, int64_t ttl_ms, int64_t now) {
  if (key.empty() || key.size() > 255)
    return {errc::invalid_argument, "idempotency key must be 1 to 255 characters"};
  if (st_ == key_status::pending || ttl_ms < 0)
    return {errc::invalid_argument, "record_key stores completed or failed keys"};
  return write_bound("INSERT OR REPLACE INTO idempotency_keys(key, status, fingerprint, response, "
                     "created_at, expires_at) VALUES (?,?,?,?,?,?)",
                     "record key", key, to_string(st_), fingerprint, response, now,
                     expiry(now, ttl_ms));
}

status entity_store::complete_key(std::string_view key, std::string_view response) {
  return settle_key(key, key_status::completed, response);
}

status entity_store::fail_key(std::string_view key, std::string_view response) {
  return settle_key(key, key_status::failed, response);
}

status entity_store::settle_key(std::string_view key, key_status to, std::string_view response) {
  const char* what = to == key_status::completed ? "complete key" : "fail key";
  if (auto st = write_bound("UPDATE idempotency_keys SET status=?, response=? "
                            "WHERE key=? AND status='pending'",
                            what, to_string(to), response, key);
      !st)
    return st;
  if (sqlite3_changes(db_) != 1)
    return {errc::conflict, "idempotency key is not pending"};
  return status::ok();
}

status entity_store::release_key(std::string_view key) {
  return write_bound("DELETE FROM idempotency_keys WHERE key=? AND status='pending'", "release key",
                     key);
}

result<int64_t> entity_store::purge_expired_keys(int64_t now) {
  if (schema_version_ < schema::journal_version) {
    if (auto st = write_bound("DELETE FROM idempotency_keys WHERE expires_at IS NOT NULL AND "
                              "expires_at <= ? AND status <> 'pending'",
                              "purge keys", now);
        !st)
      return st;
    return static_cast<int64_t>(sqlite3_changes(db_));
  }
  // A pending key with a journal belongs to a call interrupted at an await (no call runs while
  // the purge does): it expires like a settled one.
  if (auto st = write_bound("DELETE FROM idempotency_keys WHERE expires_at IS NOT NULL AND "
                            "expires_at <= ? AND (status <> 'pending' OR "
                            "'key:' || key IN (SELECT key FROM journal))",
                            "purge keys", now);
      !st)
    return st;
  auto purged = static_cast<int64_t>(sqlite3_changes(db_));
  // The journals of calls whose key is gone, unless a live dead letter owns the key (its retry
  // replays the journal).
  if (auto st = write_bound(
        "DELETE FROM journal WHERE substr(key, 1, 4) = 'key:' AND substr(key, 5) NOT IN "
        "(SELECT key FROM idempotency_keys) AND substr(key, 5) NOT IN (SELECT idempotency_key "
        "FROM dead_letters WHERE idempotency_key IS NOT NULL AND status IN ('pending', "
        "'scheduled', 'acknowledged'))",
        "purge journals");
      !st)
    return st;
  return purged;
}

result<idempotency_record> entity_store::get_key(std::string_view key) {
  static constexpr auto sql = sql_concat(key_select, "WHERE key=?");
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare key lookup");
  stmt_guard g{st};
  bind_text(st, 1, key);
  if (int frc = fault_check("key lookup"); frc != SQLITE_OK)
    return fail(frc, "key lookup");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return read_key(st);
  if (rc == SQLITE_DONE)
    return status{errc::not_found, "no such idempotency key"};
  return fail(rc, "key lookup");
}

result<std::vector<idempotency_record>> entity_store::list_keys(int64_t limit) {
  static constexpr auto sql = sql_concat(key_select, "ORDER BY created_at DESC LIMIT ?");
  std::vector<idempotency_record> out;
  if (auto st = read_rows(
        sql, "list keys", [&](sqlite3_stmt* row) { out.push_back(read_key(row)); }, limit);
      !st)
    return st;
  return out;
}

result<std::vector<idempotency_record>> entity_store::list_keys_after(std::string_view after,
                                                                      int64_t limit, bool& more) {
  static constexpr auto sql = sql_concat(key_select, "WHERE key > ? ORDER BY key LIMIT ?");
  more = false;
  if (limit < 1)
    return status{errc::invalid_argument, "a page of keys holds at least one key"};
  std::vector<idempotency_record> out;
  // One row past the page says whether more follow; the primary key serves the order.
  if (auto st = read_rows(
        sql, "list keys after", [&](sqlite3_stmt* row) { out.push_back(read_key(row)); }, after,
        limit + 1);
      !st)
    return st;
  if (static_cast<int64_t>(out.size()) > limit) {
    out.pop_back();
    more = true;
  }
  return out;
}

result<std::optional<int64_t>> entity_store::next_key_expiry() {
  std::optional<int64_t> next;
  if (auto found =
        read_row("SELECT MIN(expires_at) FROM idempotency_keys WHERE expires_at IS NOT NULL",
                 "next key expiry", [&](sqlite3_stmt* row) { next = col_opt(row, 0); });
      !found)
    return found.error();
  return next;
}

} // namespace factum
