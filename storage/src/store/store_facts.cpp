// store_facts.cpp: an entity's facts (see entity_store.hpp): append, append_many, query, get,
// verify, the chain head and fact ids, and time-ordered ids. Owned by the store's owner thread,
// one at a time; time_ordered_id and random_u64 are for any thread.
#include "factum/storage/entity_store.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/utf8.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::append_hex;
using detail::bind_text;
using detail::col_text;
using detail::int_or_null;
using detail::random_u64;
using detail::sql_concat;
using detail::stmt_guard;
using detail::text_or_null;

// -- ids ----------------------------------------------------------------------------------------

namespace detail {

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<uint64_t>(now_ms()) << 20) ^
                                   reinterpret_cast<uintptr_t>(&rng)};
  return rng();
}

} // namespace detail

std::string time_ordered_id(std::string_view prefix, int random_hex) {
  std::string out(prefix);
  out.reserve(prefix.size() + 12 + static_cast<size_t>(std::max(random_hex, 0)));
  append_hex(out, static_cast<uint64_t>(now_ms()), 12);
  for (int left = random_hex; left > 0; left -= 16)
    append_hex(out, random_u64(), std::min(left, 16));
  return out;
}

namespace {

/// Fact ids of schema version 4: a prefix of the file (`fct_` + 16 hex digits) + 12 hex digits
/// of seq (fact_ids.hpp). 2^48 facts per entity.
constexpr int64_t max_derived_seq = (int64_t{1} << 48) - 1;

constexpr char fact_columns[] =
  "seq, fact_id, type, subtype, ts, tool_id, config_id, config_version, trace_id, "
  "idempotency_key, amount, currency, from_entity, to_entity, data, prev_hash, hash";

fact read_fact(sqlite3_stmt* st, const entity_key& key) {
  fact f;
  f.seq = sqlite3_column_int64(st, 0);
  f.fact_id = col_text(st, 1);
  f.type = col_text(st, 2);
  f.subtype = col_text(st, 3);
  f.timestamp_ms = sqlite3_column_int64(st, 4);
  f.tenant_id = key.tenant;
  f.entity_type = key.type;
  f.entity_id = key.id;
  f.tool_id = col_text(st, 5);
  f.config_id = col_text(st, 6);
  f.config_version = sqlite3_column_int64(st, 7);
  f.trace_id = col_text(st, 8);
  f.idempotency_key = col_text(st, 9);
  f.amount = col_text(st, 10);
  f.currency = col_text(st, 11);
  f.from_entity = col_text(st, 12);
  f.to_entity = col_text(st, 13);
  f.data = col_text(st, 14);
  f.prev_hash = col_text(st, 15);
  f.hash = col_text(st, 16);
  return f;
}

status check_text_field(std::string_view v, std::string_view what, size_t max = 1024) {
  if (v.size() > max)
    return {errc::invalid_argument,
            std::string(what) + " is longer than " + std::to_string(max) + " bytes"};
  if (!valid_utf8(v))
    return {errc::invalid_argument, std::string(what) + " is not valid UTF-8"};
  return status::ok();
}

} // namespace

// -- chain head ---------------------------------------------------------------------------------

status entity_store::load_head() {
  sqlite3_stmt* st = prepare("SELECT seq, hash FROM facts ORDER BY seq DESC LIMIT 1");
  if (!st)
    return fail(sqlite3_errcode(db_), "read chain head");
  stmt_guard g{st};
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    last_seq_ = sqlite3_column_int64(st, 0);
    head_hash_ = col_text(st, 1);
  } else if (rc == SQLITE_DONE) {
    last_seq_ = 0;
    head_hash_ = genesis_hash;
  } else {
    return fail(rc, "read chain head");
  }
  return status::ok();
}

status entity_store::use_fact_id_meta(const std::string& prefix, const std::string& legacy_until,
                                      const std::string& history) {
  fact_ids_ = {};
  legacy_ids_until_ = 0;
  if (schema_version_ < 4) { // a file kept at an older version: every id is old-style
    legacy_ids_until_ = std::numeric_limits<int64_t>::max();
    return status::ok();
  }
  if (!legacy_until.empty())
    legacy_ids_until_ = std::strtoll(legacy_until.c_str(), nullptr, 10);
  // Checked in release builds: appending with a malformed prefix would write ids that get()
  // cannot find.
  if (!valid_fact_id_prefix(prefix))
    return {errc::corruption, path_.string() + ": meta fact_id_prefix is missing or malformed"};
  if (history.empty()) { // never rolled back: one prefix
    fact_ids_ = fact_id_history(prefix, legacy_ids_until_ + 1);
    return status::ok();
  }
  auto h = fact_id_history::parse(history);
  if (!h)
    return {errc::corruption, path_.string() + ": " + h.error().message()};
  if (h->current() != prefix)
    return {errc::corruption, path_.string() + ": meta fact_id_prefix is not the last prefix of "
                                               "fact_id_history"};
  fact_ids_ = std::move(*h);
  return status::ok();
}

status entity_store::renew_fact_id_prefix(const fact_id_history& known) {
  if (opts_.read_only || schema_version_ < schema::fact_id_history_version)
    return {errc::invalid_argument, "renew_fact_id_prefix: needs a writable file of schema "
                                    "version " +
                                      std::to_string(schema::fact_id_history_version) +
                                      " or later"};
  if (in_batch_)
    return {errc::invalid_argument, "renew_fact_id_prefix: inside a batch"};
  auto next = fact_ids_;
  next.begin(new_fact_id_prefix(), last_seq_ + 1, known);
  if (auto st = ensure_batch(); !st)
    return st;
  auto text = next.to_text();
  if (auto st = write_bound("INSERT OR REPLACE INTO meta(key, value) VALUES "
                            "('fact_id_prefix', ?), ('fact_id_history', ?)",
                            "renew fact id prefix", next.current(), text);
      !st) {
    (void)rollback();
    return st;
  }
  if (auto st = commit(); !st)
    return st;
  fact_ids_ = std::move(next);
  return status::ok();
}

// -- facts --------------------------------------------------------------------------------------

result<fact> entity_store::append(const fact_draft& d) {
  if (auto st = validate_fact_token(d.type, "type"); !st)
    return st;
  if (!d.subtype.empty())
    if (auto st = validate_fact_token(d.subtype, "subtype"); !st)
      return st;
  if (!d.amount.empty() || !d.currency.empty()) {
    if (auto st = validate_amount(d.amount); !st)
      return st;
    bool cur_ok = d.currency.size() >= 3 && d.currency.size() <= 8;
    for (char c : d.currency)
      cur_ok = cur_ok && c >= 'A' && c <= 'Z';
    if (!cur_ok)
      return status{errc::invalid_argument, "currency must be 3 to 8 upper-case letters"};
  }
  if (d.timestamp_ms < 0)
    return status{errc::invalid_argument, "timestamp must not be negative"};
  if (d.config_version < 0)
    return status{errc::invalid_argument, "config_version must not be negative"};
  for (auto [v, what] : {std::pair{&d.tool_id, "tool_id"},
                         {&d.config_id, "config_id"},
                         {&d.trace_id, "trace_id"},
                         {&d.idempotency_key, "idempotency_key"},
                         {&d.from_entity, "from_entity"},
                         {&d.to_entity, "to_entity"}})
    if (auto st = check_text_field(*v, what); !st)
      return st;
  if (!d.data.is_object())
    return status{errc::invalid_argument, "fact data must be a JSON object"};
  fact f;
  try {
    f.data = json_text(d.data);
  } catch (const nlohmann::json::exception& e) {
    return status{errc::invalid_argument, std::string("fact data: ") + e.what()};
  }
  if (auto st = ensure_batch(); !st)
    return st;
  // Compared before the sum: a hostile file's last seq may be the largest int64_t.
  if (last_seq_ >= max_derived_seq)
    return status{errc::full, "the entity holds the most facts a fact id can number (2^48 - 1)"};
  f.seq = last_seq_ + 1;
  // A file kept at an older schema version (migration tests only) gets old-style ids.
  f.fact_id =
    fact_ids_.empty() ? time_ordered_id("fct_", 16) : derived_fact_id(fact_ids_.current(), f.seq);
  f.type = d.type;
  f.subtype = d.subtype;
  f.timestamp_ms = d.timestamp_ms ? d.timestamp_ms : now_ms();
  f.tenant_id = key_.tenant;
  f.entity_type = key_.type;
  f.entity_id = key_.id;
  f.tool_id = d.tool_id;
  f.config_id = d.config_id;
  f.config_version = d.config_version;
  f.trace_id = d.trace_id;
  f.idempotency_key = d.idempotency_key;
  f.amount = d.amount;
  f.currency = d.currency;
  f.from_entity = d.from_entity;
  f.to_entity = d.to_entity;
  f.prev_hash = head_hash_;
  f.hash = compute_hash(f);

  if (auto st = step_bound(
        "INSERT INTO facts(seq, fact_id, type, subtype, ts, tool_id, config_id, config_version, "
        "trace_id, idempotency_key, amount, currency, from_entity, to_entity, data, prev_hash, "
        "hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        "append fact", f.seq, f.fact_id, f.type, text_or_null{f.subtype}, f.timestamp_ms,
        text_or_null{f.tool_id}, text_or_null{f.config_id}, int_or_null{f.config_version},
        text_or_null{f.trace_id}, text_or_null{f.idempotency_key}, text_or_null{f.amount},
        text_or_null{f.currency}, text_or_null{f.from_entity}, text_or_null{f.to_entity}, f.data,
        f.prev_hash, f.hash);
      !st)
    return st;
  last_seq_ = f.seq;
  head_hash_ = f.hash;
  return f;
}

result<std::vector<fact>> entity_store::append_many(const std::vector<fact_draft>& drafts) {
  std::vector<fact> out;
  out.reserve(drafts.size());
  bool own_turn = !in_turn_;
  if (own_turn)
    if (auto st = begin_turn(); !st)
      return st;
  for (auto& d : drafts) {
    auto r = append(d);
    if (!r) {
      if (own_turn)
        (void)end_turn(false);
      return r.error();
    }
    out.push_back(std::move(r.value()));
  }
  if (own_turn)
    if (auto st = end_turn(true); !st)
      return st;
  return out;
}

result<std::vector<fact>> entity_store::query(const fact_filter& f, bool* more) {
  if (auto st = f.validate(); !st)
    return st;
  // The SQL text is built only from constant fragments; every value is a bound parameter.
  std::string sql = "SELECT ";
  sql += fact_columns;
  sql += " FROM facts WHERE 1";
  if (!f.type.empty())
    sql += " AND type = ?1";
  if (!f.subtype.empty())
    sql += " AND subtype = ?2";
  if (f.since_ms)
    sql += " AND ts >= ?3";
  if (f.until_ms)
    sql += " AND ts < ?4";
  if (f.after_seq)
    sql += " AND seq > ?5";
  if (f.before_seq)
    sql += " AND seq < ?6";
  if (!f.trace_id.empty())
    sql += " AND trace_id = ?7";
  if (!f.tool_id.empty())
    sql += " AND tool_id = ?8";
  if (!f.idempotency_key.empty())
    sql += " AND idempotency_key = ?9";
  sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?10" : " ORDER BY seq ASC LIMIT ?10";
  auto st = prepare_text(sql);
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare fact query");
  stmt_guard g{st};
  if (!f.type.empty())
    bind_text(st, 1, f.type);
  if (!f.subtype.empty())
    bind_text(st, 2, f.subtype);
  if (f.since_ms)
    sqlite3_bind_int64(st, 3, *f.since_ms);
  if (f.until_ms)
    sqlite3_bind_int64(st, 4, *f.until_ms);
  if (f.after_seq)
    sqlite3_bind_int64(st, 5, *f.after_seq);
  if (f.before_seq)
    sqlite3_bind_int64(st, 6, *f.before_seq);
  if (!f.trace_id.empty())
    bind_text(st, 7, f.trace_id);
  if (!f.tool_id.empty())
    bind_text(st, 8, f.tool_id);
  if (!f.idempotency_key.empty())
    bind_text(st, 9, f.idempotency_key);
  // One row past the limit says whether there is more.
  sqlite3_bind_int64(st, 10, more ? f.limit + 1 : f.limit);
  if (more)
    *more = false;
  std::vector<fact> out;
  int64_t bytes = 0;
  int rc;
  if (int frc = fault_check("query facts"); frc != SQLITE_OK)
    return fail(frc, "query facts");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (static_cast<int64_t>(out.size()) == f.limit) { // the row past the limit
      if (more)
        *more = true;
      break;
    }
    // What a fact costs in memory and in a response: its data plus ~300 bytes of ids, hashes,
    // names and timestamps. Counted before it is read, so a cap is never overrun by more than
    // one fact (and the first is always taken).
    int64_t size = sqlite3_column_bytes(st, 14) + 300; // column 14: data
    if (f.max_bytes > 0 && !out.empty() && bytes + size > f.max_bytes) {
      if (more)
        *more = true;
      break;
    }
    bytes += size;
    out.push_back(read_fact(st, key_));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return fail(rc, "query facts");
  return out;
}

result<fact> entity_store::get(int64_t seq) {
  static constexpr auto sql = sql_concat("SELECT ", fact_columns, " FROM facts WHERE seq=?");
  fact f;
  auto found = read_row(
    sql, "get fact", [&](sqlite3_stmt* row) { f = read_fact(row, key_); }, seq);
  if (!found)
    return found.error();
  if (!*found)
    return status{errc::not_found, "no fact with seq " + std::to_string(seq)};
  return f;
}

result<fact> entity_store::get(std::string_view fact_id) {
  auto not_found = [&] {
    return status{errc::not_found, "no fact with id " + std::string(fact_id.substr(0, 80))};
  };
  // A derived id (schema version 4) names its seq: a rowid lookup, no index on fact_id. Its
  // prefix must number that seq in the entity's current lineage (an id of a fact a rollback
  // took away names no fact).
  auto prefix = fact_id.substr(0, std::min(fact_id.size(), fact_id_prefix_size));
  if (int64_t seq = seq_of_derived_id(fact_id, prefix);
      seq > legacy_ids_until_ && fact_ids_.prefix_at(seq) == prefix) {
    auto f = get(seq);
    if (!f && f.error().code() == errc::not_found)
      return not_found();
    if (f && f.value().fact_id != fact_id)
      return not_found();
    return f;
  }
  // Old-style ids exist only in files from before version 4, which keep the UNIQUE index.
  if (legacy_ids_until_ == 0)
    return not_found();
  static constexpr auto sql = sql_concat("SELECT ", fact_columns, " FROM facts WHERE fact_id=?");
  fact f;
  auto found = read_row(
    sql, "get fact", [&](sqlite3_stmt* row) { f = read_fact(row, key_); }, fact_id);
  if (!found)
    return found.error();
  if (!*found)
    return not_found();
  return f;
}

result<verify_report> entity_store::verify() {
  verify_report rep;
  // Every check runs: a missing trigger must not hide an edited row.
  bool chain_bad = false;
  auto problem = [&](int64_t seq, std::string what) {
    if (seq > 0) {
      if (chain_bad)
        return; // report the first bad fact only
      chain_bad = true;
      rep.first_bad_seq = seq;
    }
    if (rep.ok) {
      rep.ok = false;
      rep.problem = what;
    }
    rep.problems.push_back(std::move(what));
  };
  if (schema_version_ != current_schema_version)
    problem(0, "schema version " + std::to_string(schema_version_) + ", expected " +
                 std::to_string(current_schema_version));
  {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type='trigger'", -1, &st,
                       nullptr);
    bool upd = false, del = false, owner_upd = false, owner_del = false;
    while (st && sqlite3_step(st) == SQLITE_ROW) {
      auto n = col_text(st, 0);
      upd |= n == "facts_no_update";
      del |= n == "facts_no_delete";
      owner_upd |= n == "owners_no_update";
      owner_del |= n == "owners_no_delete";
    }
    sqlite3_finalize(st);
    if (!upd)
      problem(0, "trigger facts_no_update is missing: facts can be edited");
    if (!del)
      problem(0, "trigger facts_no_delete is missing: facts can be deleted");
    if (schema_version_ >= schema::owners_version && !owner_upd)
      problem(0, "trigger owners_no_update is missing: the owner history can be edited");
    if (schema_version_ >= schema::owners_version && !owner_del)
      problem(0, "trigger owners_no_delete is missing: the owner history can be deleted");
  }
  std::string sql = std::string("SELECT ") + fact_columns + " FROM facts ORDER BY seq";
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
  if (rc != SQLITE_OK)
    return fail(rc, "verify");
  int64_t expect = 1, last = 0;
  std::string prev(genesis_hash);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    fact f = read_fact(st, key_);
    ++rep.facts_checked;
    if (f.seq != expect)
      problem(f.seq, "seq " + std::to_string(f.seq) + " follows " + std::to_string(last) +
                       ": facts are missing");
    else if (f.prev_hash != prev)
      problem(f.seq, "prev_hash of seq " + std::to_string(f.seq) +
                       " does not equal the hash of the fact before it");
    else if (compute_hash(f) != f.hash)
      problem(f.seq, "hash of seq " + std::to_string(f.seq) +
                       " does not match its contents: the fact was altered");
    else if (f.seq > legacy_ids_until_ &&
             f.fact_id != derived_fact_id(fact_ids_.prefix_at(f.seq), f.seq))
      problem(f.seq, "fact_id of seq " + std::to_string(f.seq) + " is not " +
                       fact_ids_.prefix_at(f.seq) + " + its seq in hex: two facts could share it");
    last = f.seq;
    // No seq follows the largest int64_t (only a hostile file holds it: it breaks the chain).
    expect = f.seq < std::numeric_limits<int64_t>::max() ? f.seq + 1 : f.seq;
    prev = f.hash;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return fail(rc, "verify");
  auto owners = owner_history_problems(last, rep.owner_epoch);
  if (!owners)
    return owners.error();
  for (auto& p : *owners)
    problem(0, std::move(p));
  return rep;
}

} // namespace factum
