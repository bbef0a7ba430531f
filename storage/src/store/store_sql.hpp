// store_sql.hpp (private to storage/): what the entity store's source files (entity_store.cpp
// and store_*.cpp) share besides the class: SQLite result codes as errc (alarm_index.cpp maps
// them here too), binding and column helpers, the statement guard, SQL texts joined at compile
// time, the building of a new file, and the entity_store member templates that prepare, bind and
// step one cached statement. The free functions are stateless (any thread); the member templates
// run on the store's owner thread, one at a time, like every member of entity_store.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::detail {

// -- result codes -------------------------------------------------------------------------------

/// The errc of a SQLite result code (primary or extended): storage's one mapping.
inline errc map_rc(int rc) {
  switch (rc & 0xff) {
  case SQLITE_FULL: return errc::full;
  case SQLITE_IOERR:
  case SQLITE_CANTOPEN:
  case SQLITE_PROTOCOL: return errc::io_error;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: return errc::corruption;
  case SQLITE_READONLY: return errc::read_only;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return errc::busy;
  case SQLITE_CONSTRAINT: return errc::conflict;
  case SQLITE_AUTH:
  case SQLITE_ERROR: return errc::invalid_argument;
  default: return errc::internal;
  }
}

/// What a fault hook injects into the step `what` of `owner` (an index's name): ok, or the
/// injected SQLite result code as an error that says it was injected.
inline status injected_fault(const fault_hook& fault, std::string_view owner, const char* what) {
  int rc = fault ? fault(0, what) : SQLITE_OK;
  if (rc == SQLITE_OK)
    return status::ok();
  return {map_rc(rc), std::string(owner) + ": " + what + ": " + sqlite3_errstr(rc) + " (injected)"};
}

// -- ids ----------------------------------------------------------------------------------------

/// A random number from a generator of the calling thread (store_facts.cpp). Any thread.
uint64_t random_u64();

/// Appends the low `digits` hex digits of `v` (lowercase, zero-padded) to `out`.
inline void append_hex(std::string& out, uint64_t v, int digits) {
  static constexpr char hex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i)
    out.push_back(hex[(v >> (i * 4)) & 0xf]);
}

// -- binding and columns ------------------------------------------------------------------------

// Binding helpers: empty strings and zero optionals become NULL.
inline void bind_text(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}
inline void bind_text_or_null(sqlite3_stmt* st, int i, std::string_view s) {
  if (s.empty())
    sqlite3_bind_null(st, i);
  else
    bind_text(st, i, s);
}
inline void bind_int_or_null(sqlite3_stmt* st, int i, int64_t v) {
  if (v == 0)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_int64(st, i, v);
}
inline void bind_opt(sqlite3_stmt* st, int i, const std::optional<int64_t>& v) {
  if (v)
    sqlite3_bind_int64(st, i, *v);
  else
    sqlite3_bind_null(st, i);
}

/// A text that bind_args binds as NULL when it is empty.
struct text_or_null {
  std::string_view text;
};
/// A number that bind_args binds as NULL when it is 0.
struct int_or_null {
  int64_t value;
};

inline void bind_arg(sqlite3_stmt* st, int i, std::string_view s) {
  bind_text(st, i, s);
}
inline void bind_arg(sqlite3_stmt* st, int i, int64_t v) {
  sqlite3_bind_int64(st, i, v);
}
inline void bind_arg(sqlite3_stmt* st, int i, const std::optional<int64_t>& v) {
  bind_opt(st, i, v);
}
inline void bind_arg(sqlite3_stmt* st, int i, text_or_null v) {
  bind_text_or_null(st, i, v.text);
}
inline void bind_arg(sqlite3_stmt* st, int i, int_or_null v) {
  bind_int_or_null(st, i, v.value);
}

/// Binds `args` to the parameters ?1, ?2, ... of `st`, in order: texts (std::string_view),
/// numbers (int64_t), optional numbers (NULL when empty), text_or_null, int_or_null.
template <class... A> void bind_args([[maybe_unused]] sqlite3_stmt* st, const A&... args) {
  [[maybe_unused]] int i = 0;
  (bind_arg(st, ++i, args), ...);
}

inline std::string col_text(sqlite3_stmt* st, int i) {
  auto p = sqlite3_column_text(st, i);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(st, i)))
           : std::string();
}
inline std::optional<int64_t> col_opt(sqlite3_stmt* st, int i) {
  if (sqlite3_column_type(st, i) == SQLITE_NULL)
    return std::nullopt;
  return sqlite3_column_int64(st, i);
}

// Resets a statement when it leaves scope so that it never holds a read transaction open.
struct stmt_guard {
  sqlite3_stmt* st;
  ~stmt_guard() {
    if (st) {
      sqlite3_reset(st);
      sqlite3_clear_bindings(st);
    }
  }
};

/// Binds `args` to prepared statement `st`, calls `row(st)` on each row it yields and resets
/// it; answers the last sqlite3_step result (SQLITE_DONE when every row was read).
template <class Row, class... A> int step_rows(sqlite3_stmt* st, Row&& row, const A&... args) {
  stmt_guard g{st};
  bind_args(st, args...);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    row(st);
  return rc;
}

/// The prepared statements of one index connection (the alarm index, the tenant index), by the
/// address of their literal SQL text, prepared once (SQLITE_PREPARE_PERSISTENT) and finalized
/// with the cache; each use resets its statement (stmt_guard). The connection's owner thread.
class statement_cache {
 public:
  explicit statement_cache(sqlite3* db) : db_(db) {}
  ~statement_cache() {
    for (auto& [_, st] : stmts_)
      sqlite3_finalize(st);
  }
  statement_cache(const statement_cache&) = delete;
  statement_cache& operator=(const statement_cache&) = delete;

  /// The statement of `sql` (a string literal), or nullptr when it does not prepare
  /// (sqlite3_errmsg of the connection says why).
  sqlite3_stmt* get(const char* sql) {
    auto& st = stmts_[sql];
    if (!st &&
        sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK) {
      sqlite3_finalize(st);
      st = nullptr;
    }
    return st;
  }

 private:
  sqlite3* db_;
  std::unordered_map<const char*, sqlite3_stmt*> stmts_;
};

/// Literal SQL texts joined at compile time. Kept in a `static constexpr` array, the result is
/// a literal text for entity_store::prepare (cached by its address, like a string literal).
template <std::size_t... N>
consteval std::array<char, (N + ...) - sizeof...(N) + 1> sql_concat(const char (&... parts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> out{}; // the last char stays '\0'
  std::size_t at = 0;
  ((std::copy_n(parts, N - 1, out.begin() + at), at += N - 1), ...);
  return out;
}

// -- new files ----------------------------------------------------------------------------------

/// Creates `tmp` (it must not exist), writes `bytes` to it and fdatasyncs it (store_schema.cpp;
/// `sync` false: the caller syncs it later, e.g. with the whole file system). A failure leaves
/// no file.
status write_new_file(const std::filesystem::path& tmp, std::string_view bytes, bool sync = true);

/// Builds a new entity file at `tmp` (store_schema.cpp; the caller renames it into place; a
/// failure leaves no file), at schema version `version`, with pages of `page_size` bytes,
/// through the SQLite VFS `vfs` when it takes SQL. Any thread.
status build_entity_file(const std::filesystem::path& tmp, const entity_key& key, int64_t now,
                         int version, int page_size, const char* vfs);

} // namespace factum::detail

namespace factum {

// -- one statement: prepare, bind, step ---------------------------------------------------------

template <class... A>
status entity_store::step_bound(sql_literal sql, const char* what, const A&... args) {
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), std::string("prepare ") + what);
  detail::stmt_guard g{st};
  detail::bind_args(st, args...);
  return step_done(st, what);
}

template <class... A>
status entity_store::write_bound(sql_literal sql, const char* what, const A&... args) {
  if (auto st = ensure_batch(); !st)
    return st;
  return step_bound(sql, what, args...);
}

template <class Row, class... A>
result<bool> entity_store::read_row(sql_literal sql, const char* what, Row&& row,
                                    const A&... args) {
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), std::string("prepare ") + what);
  detail::stmt_guard g{st};
  detail::bind_args(st, args...);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    row(st);
    return true;
  }
  if (rc == SQLITE_DONE)
    return false;
  return fail(rc, what);
}

template <class Row, class... A>
status entity_store::read_rows(sql_literal sql, const char* what, Row&& row, const A&... args) {
  auto st = prepare(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), std::string("prepare ") + what);
  int rc = detail::step_rows(st, row, args...);
  if (rc != SQLITE_DONE)
    return fail(rc, what);
  return status::ok();
}

} // namespace factum
