// store_test.cpp: behaviour of entity_store on real files: facts and the hash chain, keys,
// alarms, dead letters, breakers, configs, turns, migrations, tenant SQL, faults.
#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "factum/storage/alarm_index.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "support/temp_dir.hpp"
#include "wal_vfs.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace {

store_options opts_for(const fs::path& dir) {
  store_options o;
  o.data_dir = dir;
  return o;
}

entity_key key(std::string id = "a1") {
  return entity_key{"acme", "ledger", std::move(id)};
}

std::unique_ptr<entity_store> open_ok(const store_options& o, const entity_key& k = key()) {
  auto r = entity_store::open(o, k);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

fact_draft draft(std::string type, nlohmann::json data = nlohmann::json::object()) {
  fact_draft d;
  d.type = std::move(type);
  d.data = std::move(data);
  return d;
}

// Runs one SQL statement on the file behind the store's back; returns the SQLite result code.
int raw_exec(const fs::path& file, const std::string& sql, std::string* err = nullptr) {
  sqlite3* db = nullptr;
  // Through factum's VFS: a live entity's wal-index is in this process's memory, where only
  // factum's connections find it.
  sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                  entity_store::default_vfs());
  char* e = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &e);
  if (err && e)
    *err = e;
  sqlite3_free(e);
  sqlite3_close(db);
  return rc;
}

// Runs one query on the file behind the store's back, read-only; each row's columns as text
// (NULL as ""). `arg`, when given, is bound to ?1.
std::vector<std::vector<std::string>> raw_rows(const fs::path& file, const std::string& sql,
                                               const std::string* arg = nullptr) {
  std::vector<std::vector<std::string>> out;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, entity_store::default_vfs()) ==
          SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  if (arg)
    sqlite3_bind_text(st, 1, arg->c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(st) == SQLITE_ROW) {
    auto& row = out.emplace_back();
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      auto t = sqlite3_column_text(st, i);
      row.emplace_back(t ? reinterpret_cast<const char*>(t) : "");
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// Syncs SQLite itself issues since reset() (the store's own fdatasync bypasses SQLite), on -wal
// files and on main database files, as factum's VFS counts them. The counters are process-wide:
// only the running test's stores are open.
struct sync_counter {
  static inline detail::wal_vfs_counters base{};
  static void reset() { base = detail::wal_vfs_stats(); }
  static uint64_t wal() { return detail::wal_vfs_stats().wal_syncs - base.wal_syncs; }
  static uint64_t db() { return detail::wal_vfs_stats().db_syncs - base.db_syncs; }
};

} // namespace

TEST_CASE("hashes: SHA-256 and HMAC-SHA256 give the published test vectors") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231, test cases 1 and 2.
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("entity keys: invalid parts are rejected and create no file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  std::string nul("a\0b", 3);
  for (std::string bad : {std::string(".."), std::string("a/b"), std::string("a\\b"), nul,
                          std::string(""), std::string(129, 'x'), std::string(".hidden"),
                          std::string("caf\xc3\xa9"), std::string("a b"), std::string("%2e%2e")}) {
    CAPTURE(bad);
    CHECK_FALSE(entity_key::make("acme", "ledger", bad).is_ok());
    CHECK_FALSE(entity_key::make(bad, "ledger", "a1").is_ok());
    CHECK_FALSE(entity_key::make("acme", bad, "a1").is_ok());
    auto r = entity_store::open(o, entity_key{"acme", "ledger", bad});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
  }
  CHECK_FALSE(fs::exists(tmp.path() / "entities"));
  CHECK(entity_key::make("acme", "ledger", std::string(128, 'x')).is_ok());
  CHECK(entity_key::make("a", "b", "A-z.0:9_").is_ok());
}

TEST_CASE("entity keys: the path is a digest under the data directory") {
  auto k = key();
  auto p = k.file_path("/data");
  CHECK(p.parent_path().parent_path() == fs::path("/data/entities"));
  CHECK(p.filename() == k.digest() + ".db");
  CHECK(entity_key::parse("acme/ledger/a1").value() == k);
  CHECK_FALSE(entity_key::parse("acme/ledger").is_ok());
  CHECK_FALSE(entity_key::parse("acme/ledger/a/b").is_ok());
  CHECK_FALSE(entity_key::parse("acme/../a1").is_ok());
}

TEST_CASE("ids: time_ordered_id is the prefix, 12 hex digits of the millisecond, then random "
          "hex digits, and sorts by its millisecond") {
  auto before = now_ms();
  auto a = time_ordered_id("x_", 20);
  auto b = time_ordered_id("x_", 20);
  REQUIRE(a.size() == 2 + 12 + 20);
  CHECK(a.substr(0, 2) == "x_");
  CHECK(a.find_first_not_of("0123456789abcdef", 2) == std::string::npos);
  CHECK(std::stoll(a.substr(2, 12), nullptr, 16) >= before);
  CHECK(a.substr(14) != b.substr(14));
  CHECK(time_ordered_id("", 16).size() == 28);
  CHECK(time_ordered_id("", 3).size() == 15);
  std::string c;
  do // the next millisecond, at most ~1 ms of spinning
    c = time_ordered_id("x_", 20);
  while (c.substr(0, 14) <= b.substr(0, 14));
  CHECK(c > a);
  CHECK(c > b);
}

TEST_CASE("facts: appended with contiguous seq and a valid hash chain") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->last_seq() == 0);
  CHECK(s->head_hash() == genesis_hash);
  std::vector<fact> got;
  for (int i = 0; i < 10; ++i) {
    auto d = draft("invocation", {{"i", i}});
    auto f = s->append(d);
    REQUIRE(f.is_ok());
    got.push_back(*f);
  }
  REQUIRE(s->commit().is_ok());
  for (int i = 0; i < 10; ++i) {
    CHECK(got[i].seq == i + 1);
    CHECK(got[i].prev_hash == (i == 0 ? std::string(genesis_hash) : got[i - 1].hash));
    CHECK(got[i].hash == compute_hash(got[i]));
    CHECK(got[i].fact_id.rfind("fct_", 0) == 0);
  }
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK(v->ok);
  CHECK(v->facts_checked == 10);
  // Reopen: the head is restored from the file.
  auto head = s->head_hash();
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->last_seq() == 10);
  CHECK(s2->head_hash() == head);
}

TEST_CASE("facts: canonical serialization equals sorted-key JSON without the hash") {
  fact f;
  f.seq = 3;
  f.fact_id = "fct_x";
  f.type = "cost";
  f.subtype = "tool_usage";
  f.timestamp_ms = 1705500000000;
  f.tenant_id = "acme";
  f.entity_type = "asset";
  f.entity_id = "a1";
  f.tool_id = "telephony";
  f.config_version = 3;
  f.config_id = "retry";
  f.amount = "0.005";
  f.currency = "USD";
  f.trace_id = "t\"1\n\x01";
  f.data = nlohmann::json{{"z", 1}, {"a", {{"b", "c"}}}}.dump();
  f.prev_hash = std::string(genesis_hash);
  f.hash = compute_hash(f);
  auto j = nlohmann::json::parse(to_json_text(f));
  CHECK(j.contains("hash"));
  j.erase("hash");
  CHECK(j.dump() == canonical_serialization(f));
  CHECK(compute_hash(f) == sha256_hex(canonical_serialization(f)));
  CHECK(j["amount"] == "0.005");
}

TEST_CASE("facts: validation refuses bad fields and writes nothing") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  auto bad = [&](fact_draft d) {
    auto r = s->append(d);
    CHECK_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
  };
  bad(draft(""));
  bad(draft("Bad Type"));
  bad(draft("ok", nlohmann::json::array()));
  auto d = draft("cost");
  d.amount = "0.1e3";
  d.currency = "USD";
  bad(d);
  d.amount = "1.50";
  d.currency = "usd";
  bad(d);
  d.currency = "USD";
  d.trace_id = "\xff\xfe";
  bad(d);
  auto d2 = draft("ok", {{"s", std::string("\xc3\x28")}});
  bad(d2);
  CHECK(s->last_seq() == 0);
  d.trace_id.clear();
  CHECK(s->append(d).is_ok());
  CHECK(s->commit().is_ok());
}

TEST_CASE("facts: queries filter by every field, with limit and order") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  for (int i = 1; i <= 30; ++i) {
    auto d = draft(i % 3 == 0 ? "error" : "invocation");
    d.subtype = i % 2 ? "odd" : "even";
    d.timestamp_ms = 1000 * i;
    d.trace_id = "tr" + std::to_string(i % 5);
    d.tool_id = i % 4 == 0 ? "crm" : "";
    d.idempotency_key = "k" + std::to_string(i);
    REQUIRE(s->append(d).is_ok());
  }
  REQUIRE(s->commit().is_ok());
  auto count = [&](fact_filter f) {
    f.limit = 1000;
    auto r = s->query(f);
    REQUIRE(r.is_ok());
    return r->size();
  };
  fact_filter f;
  CHECK(count(f) == 30);
  f.type = "error";
  CHECK(count(f) == 10);
  f.subtype = "odd";
  CHECK(count(f) == 5);
  f = {};
  f.since_ms = 5000;
  f.until_ms = 10000;
  CHECK(count(f) == 5);
  f = {};
  f.after_seq = 25;
  CHECK(count(f) == 5);
  f.before_seq = 28;
  CHECK(count(f) == 2);
  f = {};
  f.trace_id = "tr0";
  CHECK(count(f) == 6);
  f = {};
  f.tool_id = "crm";
  CHECK(count(f) == 7);
  f = {};
  f.idempotency_key = "k17";
  CHECK(count(f) == 1);
  f = {};
  f.limit = 3;
  f.newest_first = true;
  auto r = s->query(f);
  REQUIRE(r.is_ok());
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].seq == 30);
  CHECK((*r)[2].seq == 28);
  f.limit = 0;
  CHECK_FALSE(s->query(f).is_ok());
  f.limit = 10;
  f.after_seq = -1;
  CHECK_FALSE(s->query(f).is_ok());
  f.after_seq.reset();
  f.type = "x' OR 1=1 --";
  CHECK_FALSE(s->query(f).is_ok());
  auto one = s->get(7);
  REQUIRE(one.is_ok());
  auto by_id = s->get(one->fact_id);
  REQUIRE(by_id.is_ok());
  CHECK(by_id->seq == 7);
  CHECK(s->get(99).error().code() == errc::not_found);
}

TEST_CASE("facts: UPDATE and DELETE are refused even through raw SQL") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()));
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->append(draft("outcome")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  std::string err;
  CHECK(raw_exec(file, "UPDATE facts SET data='{\"x\":1}' WHERE seq=1", &err) != SQLITE_OK);
  CHECK(err.find("immutable") != std::string::npos);
  CHECK(raw_exec(file, "DELETE FROM facts WHERE seq=2", &err) != SQLITE_OK);
  CHECK(raw_exec(file, "UPDATE configs SET body='{}'") == SQLITE_OK); // no rows: nothing to stop
  auto s = open_ok(opts_for(tmp.path()));
  REQUIRE(s->put_config("retry", R"({"max":3})").is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  CHECK(raw_exec(file, "UPDATE configs SET body='{}'") != SQLITE_OK);
  CHECK(raw_exec(file, "DELETE FROM configs") != SQLITE_OK);
}

TEST_CASE("verify: a fact inserted behind the store's back breaks the chain at its seq") {
  // Since schema v3 no INSERT trigger guards the chain (the store computes it on append);
  // a raw INSERT that skips a seq or forges prev_hash is found by verify().
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()));
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->append(draft("outcome")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  REQUIRE(raw_exec(file, "INSERT INTO facts(seq, fact_id, type, ts, data, prev_hash, hash) "
                         "VALUES (3, 'fct_forged', 'a', 1, '{}', 'p', 'h')") == SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()));
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 3);
  CHECK(v->problem.find("prev_hash of seq 3") != std::string::npos);
  // The store's own appends continue the chain from the last row on disk; verify still reports
  // the forged fact, and only it.
  REQUIRE(s->append(draft("invocation")).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->last_seq() == 4);
  CHECK(s->verify()->first_bad_seq == 3);
}

TEST_CASE("schema: queries by type and subtype are served by indexes, in seq order, no sort") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()));
    file = s->path();
  }
  auto plan = [&](const char* where) {
    std::string out;
    for (auto& row : raw_rows(file, std::string("EXPLAIN QUERY PLAN SELECT * FROM facts WHERE ") +
                                      where + " ORDER BY seq ASC LIMIT 100"))
      out += row[3] + "; ";
    return out;
  };
  auto by_type = plan("type = 'x' AND seq > 10");
  CHECK(by_type.find("facts_by_type") != std::string::npos);
  CHECK(by_type.find("TEMP B-TREE") == std::string::npos);
  auto by_subtype = plan("type = 'x' AND subtype = 'y'");
  CHECK(by_subtype.find("facts_by_subtype") != std::string::npos);
  CHECK(by_subtype.find("TEMP B-TREE") == std::string::npos);
}

TEST_CASE("verify: detects a fact edited behind the store's back, naming its seq") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()));
    for (int i = 0; i < 5; ++i)
      REQUIRE(s->append(draft("invocation", {{"n", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  REQUIRE(raw_exec(file, "DROP TRIGGER facts_no_update") == SQLITE_OK);
  {
    auto s = open_ok(opts_for(tmp.path()));
    auto v = s->verify();
    REQUIRE(v.is_ok());
    CHECK_FALSE(v->ok);
    CHECK(v->problem.find("facts_no_update") != std::string::npos);
    CHECK(v->first_bad_seq == 0);
  }
  // With the trigger still missing, an edited row is found too.
  REQUIRE(raw_exec(file, "UPDATE facts SET data='{\"n\":77}' WHERE seq=2") == SQLITE_OK);
  {
    auto s = open_ok(opts_for(tmp.path()));
    auto v = s->verify();
    REQUIRE(v.is_ok());
    CHECK(v->first_bad_seq == 2);
    CHECK(v->problems.size() == 2);
  }
  REQUIRE(raw_exec(file, "UPDATE facts SET data='{\"n\":99}' WHERE seq=3") == SQLITE_OK);
  REQUIRE(raw_exec(file, "CREATE TRIGGER facts_no_update BEFORE UPDATE ON facts BEGIN SELECT "
                         "RAISE(ABORT, 'facts are immutable: UPDATE refused'); END") == SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()));
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 2); // seq 2 was edited while the trigger was gone
  CHECK(v->problem.find("altered") != std::string::npos);
}

TEST_CASE("turns: a failed turn rolls back its own writes and keeps the others") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->begin_key("k1", "fp", 0, 1).is_ok());
  REQUIRE(s->complete_key("k1", "{}").is_ok());
  REQUIRE(s->end_turn(true).is_ok());
  auto head = s->head_hash();
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->append(draft("c")).is_ok());
  REQUIRE(s->begin_key("k2", "fp", 0, 1).is_ok());
  REQUIRE(s->end_turn(false).is_ok());
  CHECK(s->last_seq() == 1);
  CHECK(s->head_hash() == head);
  REQUIRE(s->begin_turn().is_ok());
  auto d = s->append(draft("d"));
  REQUIRE(d.is_ok());
  CHECK(d->seq == 2);
  CHECK(d->prev_hash == head);
  REQUIRE(s->end_turn(true).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->last_seq() == 2);
  CHECK(s2->get_key("k1").is_ok());
  CHECK(s2->get_key("k2").error().code() == errc::not_found);
  CHECK(s2->verify()->ok);
}

TEST_CASE("batches: rollback restores the chain head and nothing is durable before commit") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()));
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->append(draft("b")).is_ok());
    REQUIRE(s->rollback().is_ok());
    CHECK(s->last_seq() == 1);
    REQUIRE(s->append(draft("c")).is_ok());
    // destroyed with an open batch: rolled back
  }
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->last_seq() == 1);
  CHECK(s->get(1)->type == "a");
}

TEST_CASE("idempotency keys: fresh, in flight, completed, failed, mismatch, release, expiry") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  auto b = s->begin_key("k", "fp1", 1000, 100);
  REQUIRE(b.is_ok());
  CHECK(b->outcome == key_outcome::fresh);
  CHECK(s->begin_key("k", "fp1", 1000, 101)->outcome == key_outcome::in_flight);
  CHECK(s->begin_key("k", "fp2", 1000, 101)->outcome == key_outcome::mismatch);
  REQUIRE(s->complete_key("k", R"({"seq":1})").is_ok());
  auto r = s->begin_key("k", "fp1", 1000, 102);
  CHECK(r->outcome == key_outcome::completed);
  CHECK(r->record.response == R"({"seq":1})");
  CHECK(s->begin_key("k", "fp2", 1000, 102)->outcome == key_outcome::mismatch);
  CHECK(s->complete_key("k", "{}").code() == errc::conflict);
  // terminal failure is stored
  REQUIRE(s->begin_key("f", "fp", 0, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->fail_key("f", R"({"code":"BAD"})").is_ok());
  auto f = s->begin_key("f", "fp", 0, 1'000'000'000);
  CHECK(f->outcome == key_outcome::failed);
  CHECK(f->record.response == R"({"code":"BAD"})");
  CHECK_FALSE(f->record.expires_at_ms.has_value());
  // retryable failure releases
  REQUIRE(s->begin_key("r", "fp", 1000, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->release_key("r").is_ok());
  CHECK(s->begin_key("r", "fp", 1000, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->complete_key("r", "{}").is_ok());
  // expiry: k expires at 1100
  CHECK(s->begin_key("k", "fp1", 1000, 1100)->outcome == key_outcome::fresh);
  REQUIRE(s->complete_key("k", "{}").is_ok());
  CHECK(s->next_key_expiry()->value() == 1100); // r expires at 1100 as well
  auto purged = s->purge_expired_keys(5000);
  REQUIRE(purged.is_ok());
  CHECK(*purged == 2);
  CHECK(s->get_key("f").is_ok()); // ttl 0: kept
  REQUIRE(s->commit().is_ok());
  CHECK(s->list_keys(10)->size() == 1);
}

TEST_CASE("idempotency keys: keys left pending by a dead activation are released on open") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()));
    REQUIRE(s->begin_key("p1", "fp", 0, 1)->outcome == key_outcome::fresh);
    REQUIRE(s->begin_key("done", "fp", 0, 1)->outcome == key_outcome::fresh);
    REQUIRE(s->complete_key("done", "{}").is_ok());
    REQUIRE(s->commit().is_ok()); // p1 committed as pending (a turn waiting on a tool)
  }
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->released_on_open() == 1);
  CHECK(s->get_key("p1").error().code() == errc::not_found);
  CHECK(s->begin_key("p1", "fp", 0, 2)->outcome == key_outcome::fresh);
  CHECK(s->begin_key("done", "fp", 0, 2)->outcome == key_outcome::completed);
}

TEST_CASE("alarms: set, replace, cancel, list, next") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  REQUIRE(s->set_alarm({"b", 200, R"({"x":1})", 0, 0}).is_ok());
  REQUIRE(s->set_alarm({"a", 300, "{}", 0, 0}).is_ok());
  CHECK(s->next_alarm()->value().name == "b");
  REQUIRE(s->set_alarm({"b", 400, "{}", 2, 0}).is_ok());
  CHECK(s->next_alarm()->value().name == "a");
  CHECK(s->get_alarm("b")->attempts == 2);
  CHECK(s->list_alarms()->size() == 2);
  REQUIRE(s->cancel_alarm("a").is_ok());
  REQUIRE(s->cancel_alarm("nope").is_ok());
  CHECK(s->list_alarms()->size() == 1);
  CHECK_FALSE(s->set_alarm({"", 1, "{}", 0, 0}).is_ok());
  CHECK_FALSE(s->set_alarm({"x", 1, "not json", 0, 0}).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->next_alarm()->value().due_ms == 400);
}

TEST_CASE("query: a byte cap ends a page early (never before its first fact) and says that more "
          "is left, like a full limit does") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  std::string big(3000, 'x');
  for (int i = 0; i < 10; ++i)
    REQUIRE(s->append(draft("blob", {{"i", i}, {"pad", big}})).is_ok());
  REQUIRE(s->commit().is_ok());
  fact_filter f;
  f.limit = 100;
  f.max_bytes = 10'000; // about three of these facts
  bool more = false;
  auto page = s->query(f, &more);
  REQUIRE(page.is_ok());
  CHECK(page->size() == 3);
  CHECK(more);
  // Walking on from the last seq reads every fact once.
  std::vector<int64_t> seen;
  for (auto& x : *page)
    seen.push_back(x.seq);
  while (more) {
    f.after_seq = seen.back();
    page = s->query(f, &more);
    REQUIRE(page.is_ok());
    REQUIRE_FALSE(page->empty());
    for (auto& x : *page)
      seen.push_back(x.seq);
  }
  REQUIRE(seen.size() == 10);
  for (size_t i = 0; i < seen.size(); ++i)
    CHECK(seen[i] == static_cast<int64_t>(i + 1));
  // A cap below one fact still returns one.
  f.after_seq.reset();
  f.max_bytes = 1;
  CHECK(s->query(f, &more)->size() == 1);
  CHECK(more);
  // The limit says more too, and nothing more when the limit is exactly reached by the end.
  f.max_bytes = 0;
  f.limit = 4;
  CHECK(s->query(f, &more)->size() == 4);
  CHECK(more);
  f.after_seq = 6;
  CHECK(s->query(f, &more)->size() == 4);
  CHECK_FALSE(more);
}

TEST_CASE("dead letters, breakers and configs round-trip") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  dead_letter_record d;
  d.id = "dl_1";
  d.operation = "deliver";
  d.payload = R"({"a":1})";
  d.error_code = "HTTP_503";
  d.error_message = "unavailable";
  d.error_category = "transient";
  d.reason = "server_error";
  d.attempts = 5;
  d.first_attempt_ms = 1;
  d.last_attempt_ms = 2;
  REQUIRE(s->put_dead_letter(d).is_ok());
  d.id = "dl_2";
  d.status = dl_status::scheduled;
  d.next_retry_ms = 99;
  REQUIRE(s->put_dead_letter(d).is_ok());
  CHECK(s->list_dead_letters(std::nullopt, 10)->size() == 2);
  CHECK(s->list_dead_letters(dl_status::scheduled, 10)->size() == 1);
  d.status = dl_status::resolved;
  d.expires_at_ms = 50;
  REQUIRE(s->put_dead_letter(d).is_ok());
  CHECK(s->get_dead_letter("dl_2")->status == dl_status::resolved);
  CHECK(*s->purge_dead_letters(100) == 1);
  CHECK(s->get_dead_letter("dl_2").error().code() == errc::not_found);

  REQUIRE(s->put_breaker({"crm", "OPEN", R"({"failures":5})", 0}).is_ok());
  CHECK_FALSE(s->put_breaker({"crm", "WEIRD", "{}", 0}).is_ok());
  CHECK(s->list_breakers()->at(0).state == "OPEN");

  CHECK(*s->put_config("retry", R"({"max":3})") == 1);
  CHECK(*s->put_config("retry", R"({"max":5})") == 2);
  CHECK(*s->put_config("other", "{}") == 1);
  CHECK(s->get_config("retry")->version == 2);
  CHECK(s->get_config("retry", 1)->body == R"({"max":3})");
  CHECK(s->get_config("retry", 9).error().code() == errc::not_found);
  CHECK(s->list_configs()->size() == 3);
  REQUIRE(s->commit().is_ok());
}

TEST_CASE("schema: migration 5 gives a version-4 file's dead letters an auto_retries count of 0, "
          "which a read-only open of the old file reads too") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 4;
  fs::path file;
  {
    auto s = open_ok(o);
    file = s->path();
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  REQUIRE(raw_exec(file, "INSERT INTO dead_letters(id, operation, payload, error_code, "
                         "error_message, error_category, reason, attempts, first_attempt_at, "
                         "last_attempt_at, status, created_at, updated_at) VALUES ('dl_old', "
                         "'deliver', '{}', 'HTTP_503', 'down', 'transient', 'server_error', 5, 1, "
                         "2, 'scheduled', 1, 2)") == SQLITE_OK);
  {
    auto ro = opts_for(tmp.path());
    ro.read_only = true;
    auto s = open_ok(ro);
    CHECK(s->schema_version() == 4);
    auto d = s->get_dead_letter("dl_old");
    REQUIRE(d.is_ok());
    CHECK(d->auto_retries == 0);
    CHECK(s->list_dead_letters(dl_status::scheduled, 10)->size() == 1);
  }
  {
    auto s = open_ok(opts_for(tmp.path()));
    CHECK(s->schema_version() == current_schema_version);
    auto d = s->get_dead_letter("dl_old");
    REQUIRE(d.is_ok());
    CHECK(d->auto_retries == 0);
    CHECK(d->attempts == 5);
    d->auto_retries = 2;
    REQUIRE(s->put_dead_letter(*d).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  // The migrated column holds what was written: read back from the file, not the handle.
  auto ro = opts_for(tmp.path());
  ro.read_only = true;
  auto s = open_ok(ro);
  CHECK(s->schema_version() == current_schema_version);
  auto d = s->get_dead_letter("dl_old");
  REQUIRE(d.is_ok());
  CHECK(d->auto_retries == 2);
  CHECK(d->attempts == 5);
}

TEST_CASE("schema: a version-1 file migrates to the current version and keeps its facts") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  {
    auto s = open_ok(o);
    CHECK(s->schema_version() == 1);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK_FALSE(s->put_config("x", "{}").is_ok()); // no configs table in v1
  }
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->last_seq() == 1);
  CHECK(s->verify()->ok);
  CHECK(s->put_config("x", "{}").is_ok());
  REQUIRE(s->append(draft("outcome")).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
  // v3: no INSERT trigger on facts, the type indexes rebuilt.
  auto file = s->path();
  s.reset();
  std::string names;
  for (auto& row : raw_rows(file, "SELECT name FROM sqlite_master WHERE name IN ('facts_chain', "
                                  "'facts_by_type', 'facts_by_subtype') ORDER BY name"))
    names += row[0] + " ";
  CHECK(names == "facts_by_subtype facts_by_type ");
}

namespace {

// One line per schema object of `file` (type, name, table, SQL with whitespace collapsed), in
// name order; `skip` names objects left out.
std::vector<std::string> schema_lines(const fs::path& file, const std::string& skip = "") {
  std::vector<std::string> out;
  for (auto& row : raw_rows(file, "SELECT type, name, tbl_name, sql FROM sqlite_master "
                                  "ORDER BY name")) {
    std::string line;
    for (auto& v : row) {
      std::string norm;
      for (char c : v) {
        bool space = c == ' ' || c == '\n' || c == '\t';
        if (space && (norm.empty() || norm.back() == ' '))
          continue;
        norm.push_back(space ? ' ' : c);
      }
      line += norm + " | ";
    }
    if (skip.empty() || line.find(skip) == std::string::npos)
      out.push_back(line);
  }
  return out;
}

std::string meta_value(const fs::path& file, const std::string& k) {
  auto rows = raw_rows(file, "SELECT value FROM meta WHERE key=?", &k);
  return rows.empty() ? "(absent)" : rows[0][0];
}

std::string hex12(int64_t seq) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(seq));
  return buf;
}

} // namespace

TEST_CASE("facts: ids are the file's prefix and the seq in hex, found without an index") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  std::vector<fact> got;
  for (int i = 0; i < 20; ++i)
    got.push_back(s->append(draft("invocation", {{"i", i}})).value());
  REQUIRE(s->commit().is_ok());
  auto prefix = meta_value(s->path(), "fact_id_prefix");
  REQUIRE(prefix.size() == 20);
  CHECK(prefix.rfind("fct_", 0) == 0);
  for (auto& f : got) {
    CHECK(f.fact_id == prefix + hex12(f.seq));
    auto by_id = s->get(f.fact_id);
    REQUIRE(by_id.is_ok());
    CHECK(by_id->seq == f.seq);
    CHECK(by_id->hash == f.hash);
  }
  // Well-formed ids that name no fact here, and malformed ones, are NOT_FOUND.
  auto other = open_ok(opts_for(tmp.path()), key("b1"));
  auto foreign = other->append(draft("invocation")).value();
  REQUIRE(other->commit().is_ok());
  CHECK(foreign.fact_id.substr(0, 20) != prefix); // a prefix per file
  for (std::string id :
       {prefix + hex12(21), prefix + hex12(0), foreign.fact_id, prefix + "00000000000g",
        prefix + "0000000000001", std::string("fct_"), std::string(""), got[3].fact_id + "0"})
    CHECK_MESSAGE(s->get(id).error().code() == errc::not_found, id);
  // No index on fact_id in a new file; the ids survive a reopen and continue.
  for (auto& line : schema_lines(s->path()))
    CHECK_MESSAGE((line.find("index") != 0 || line.find("fact_id") == std::string::npos), line);
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  auto next = s2->append(draft("outcome")).value();
  REQUIRE(s2->commit().is_ok());
  CHECK(next.fact_id == prefix + hex12(21));
  CHECK(s2->get(got[0].fact_id)->seq == 1);
  CHECK(s2->verify()->ok);
}

TEST_CASE(
  "schema: a version-4 file without a well-formed fact_id_prefix is refused, not appended to") {
  test::temp_dir tmp;
  fs::path file = open_ok(opts_for(tmp.path()))->path();
  for (auto sql : {"UPDATE meta SET value='fct_short' WHERE key='fact_id_prefix'",
                   "DELETE FROM meta WHERE key='fact_id_prefix'"}) {
    REQUIRE(raw_exec(file, sql) == SQLITE_OK);
    auto r = entity_store::open(opts_for(tmp.path()), key());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::corruption);
    CHECK(r.error().message().find("fact_id_prefix") != std::string::npos);
  }
  CHECK(raw_rows(file, "SELECT COUNT(*) FROM facts")[0][0] == "0");
}

TEST_CASE("verify: a fact id that is not derived from its seq is reported at its seq") {
  // Without a UNIQUE index, two facts could share an id if a writer bypassed the store: the
  // hash covers the id, so the forger must also rehash the fact; verify still finds it.
  test::temp_dir tmp;
  fs::path file;
  fact last;
  std::string first_id;
  {
    auto s = open_ok(opts_for(tmp.path()));
    first_id = s->append(draft("invocation")).value().fact_id;
    REQUIRE(s->append(draft("invocation")).is_ok());
    last = s->append(draft("outcome")).value();
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  fact forged = last;
  forged.fact_id = first_id;
  forged.hash = compute_hash(forged);
  REQUIRE(raw_exec(file, "DROP TRIGGER facts_no_update; UPDATE facts SET fact_id='" + first_id +
                           "', hash='" + forged.hash + "' WHERE seq=3") == SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()));
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 3);
  bool named = false;
  for (auto& p : v->problems)
    named |= p.find("fact_id of seq 3") != std::string::npos;
  CHECK(named);
}

TEST_CASE("schema: a version-3 file migrates to 4 and on: old ids keep their index, new ids are "
          "derived") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 3;
  std::vector<std::string> old_ids;
  {
    auto s = open_ok(o);
    for (int i = 0; i < 3; ++i)
      old_ids.push_back(s->append(draft("invocation")).value().fact_id);
    REQUIRE(s->commit().is_ok());
  }
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->schema_version() == current_schema_version);
  auto prefix = meta_value(s->path(), "fact_id_prefix");
  REQUIRE(prefix.size() == 20);
  CHECK(meta_value(s->path(), "fact_id_legacy_until") == "3");
  auto f4 = s->append(draft("outcome")).value();
  REQUIRE(s->commit().is_ok());
  CHECK(f4.fact_id == prefix + hex12(4));
  for (size_t i = 0; i < old_ids.size(); ++i) {
    CHECK(old_ids[i].substr(0, 20) != prefix);
    auto f = s->get(old_ids[i]);
    REQUIRE(f.is_ok());
    CHECK(f->seq == static_cast<int64_t>(i) + 1);
  }
  CHECK(s->get(f4.fact_id)->seq == 4);
  CHECK(s->verify()->ok);
  // The UNIQUE index of the old ids stays: a duplicate is still refused by SQLite.
  auto file = s->path();
  s.reset();
  CHECK(raw_exec(file, "INSERT INTO facts(seq, fact_id, type, ts, data, prev_hash, hash) "
                       "VALUES (5, '" +
                         old_ids[0] + "', 'a', 1, '{}', 'p', 'h')") != SQLITE_OK);
}

TEST_CASE("schema: a new file has the schema of a migrated one, but no UNIQUE on fact_id") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  fs::path migrated, fresh;
  migrated = open_ok(o, key("old"))->path();
  migrated = open_ok(opts_for(tmp.path()), key("old"))->path(); // 1 -> 4
  fresh = open_ok(opts_for(tmp.path()), key("new"))->path();
  auto a = schema_lines(migrated, "sqlite_autoindex_facts_1");
  auto b = schema_lines(fresh);
  for (auto& line : a) { // the one difference
    auto at = line.find("fact_id TEXT NOT NULL UNIQUE");
    if (at != std::string::npos)
      line.replace(at, 28, "fact_id TEXT NOT NULL");
  }
  CHECK(a == b);
  CHECK(a.size() == 28);                                // 11 tables, 10 indexes, 7 triggers
  CHECK(schema_lines(migrated).size() == a.size() + 1); // the UNIQUE index of old ids
}

TEST_CASE("create: a new file is a whole WAL-mode database with its own meta and nothing of "
          "another entity's") {
  // New files are copies of one in-memory template whose meta rows are replaced per entity
  // (entity_image.cpp); the header is patched to WAL. Long keys and short ones, in turn.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto long_key = entity_key{std::string(128, 't'), std::string(128, 'y'), std::string(128, 'i')};
  std::vector<entity_key> keys = {key("short"), long_key, key("x"), key("short-again")};
  std::set<std::string> prefixes;
  for (auto& k : keys) {
    auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    auto syncs = detail::wal_vfs_stats().db_syncs;
    fs::path file = open_ok(o, k)->path();
    // Already a WAL-mode file: SQLite did not have to switch it (a rollback-journal write with
    // syncs through the VFS).
    CHECK(detail::wal_vfs_stats().db_syncs == syncs);
    auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    CAPTURE(file);
    CHECK(raw_rows(file, "PRAGMA integrity_check") ==
          std::vector<std::vector<std::string>>{{"ok"}});
    CHECK(raw_rows(file, "PRAGMA journal_mode")[0][0] == "wal");
    CHECK(raw_rows(file, "PRAGMA user_version")[0][0] == std::to_string(current_schema_version));
    CHECK(raw_rows(file, "PRAGMA freelist_count")[0][0] == "0");
    auto pages = std::stoll(raw_rows(file, "PRAGMA page_count")[0][0]);
    CHECK(static_cast<int64_t>(fs::file_size(file)) ==
          pages * std::stoll(raw_rows(file, "PRAGMA page_size")[0][0]));
    auto meta = raw_rows(file, "SELECT key, value FROM meta ORDER BY key");
    REQUIRE(meta.size() == 6);
    CHECK(meta[0] == std::vector<std::string>{"created_at", meta[0][1]});
    auto created = std::stoll(meta[0][1]);
    CHECK(created >= before);
    CHECK(created <= after);
    CHECK(meta[1][0] == "fact_id_prefix");
    CHECK(meta[1][1].size() == 20);
    CHECK(meta[1][1].rfind("fct_", 0) == 0);
    prefixes.insert(meta[1][1]);
    CHECK(meta[2] == std::vector<std::string>{"format", "factum-entity"});
    CHECK(meta[3] == std::vector<std::string>{"id", k.id});
    CHECK(meta[4] == std::vector<std::string>{"tenant", k.tenant});
    CHECK(meta[5] == std::vector<std::string>{"type", k.type});
    // And the store reads it as its own: facts get ids from its prefix.
    auto s = open_ok(o, k);
    auto f = s->append(draft("created"));
    REQUIRE(f.is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK(f->fact_id.rfind(meta[1][1], 0) == 0);
  }
  CHECK(prefixes.size() == keys.size());
  // A schema version this build does not know is refused before any file is made.
  auto bad = o;
  bad.target_schema_version = current_schema_version + 1;
  auto r = entity_store::open(bad, key("unknown-version"));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK_FALSE(fs::exists(key("unknown-version").file_path(tmp.path())));
}

TEST_CASE("create: threads creating entities at once each get a file naming their own entity") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  constexpr int threads = 4, per_thread = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto k = key("t" + std::to_string(t) + "-" + std::to_string(i));
        auto r = entity_store::open(o, k);
        if (!r || !(r.value()->key() == k))
          ++failures;
      }
    });
  for (auto& t : ts)
    t.join();
  CHECK(failures == 0);
  auto files = list_entity_files(tmp.path());
  CHECK(files.size() == threads * per_thread);
  std::set<std::string> ids;
  for (auto& f : files) {
    auto ro = o;
    ro.read_only = true;
    auto s = entity_store::open_file(f, ro);
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
    CHECK(s.value()->key().file_path(tmp.path()) == f); // the file names the entity it is for
    ids.insert(s.value()->key().id);
  }
  CHECK(ids.size() == threads * per_thread);
}

// -- spare files (spare_pool.hpp) ----------------------------------------------------------------

namespace {

uint64_t inode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_ino);
}

// The inode numbers of the .db files in `dir`.
std::set<uint64_t> inodes_in(const fs::path& dir) {
  std::set<uint64_t> out;
  for (auto& e : fs::directory_iterator(dir)) {
    struct stat st {};
    if (e.path().extension() == ".db" && ::stat(e.path().c_str(), &st) == 0)
      out.insert(st.st_ino);
  }
  return out;
}

std::shared_ptr<spare_pool> full_pool(const fs::path& data_dir, int target, int page_size = 4096) {
  auto pool = spare_pool::start(data_dir, target, page_size);
  REQUIRE_MESSAGE(pool.is_ok(), pool.error().to_string());
  REQUIRE((*pool)->wait_ready(target, std::chrono::seconds(30)) == target);
  return *pool;
}

} // namespace

TEST_CASE("create: a new file has the store's page size, from the template or a spare of that "
          "size only, and keeps it, and sizes SQLite cannot have are refused") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto reference = open_ok(o, key("p4096"))->path();
  for (int page : {512, 1024, 8192, 65536}) {
    CAPTURE(page);
    o.page_size = page;
    auto k = key("p" + std::to_string(page));
    auto path = open_ok(o, k)->path();
    CHECK(raw_rows(path, "PRAGMA page_size")[0][0] == std::to_string(page));
    CHECK(raw_rows(path, "PRAGMA integrity_check")[0][0] == "ok");
    CHECK(raw_rows(path, "PRAGMA journal_mode")[0][0] == "wal");
    CHECK(schema_lines(path) == schema_lines(reference));
    // A file keeps the size it was made with, whatever the opener asks for new files.
    o.page_size = 4096;
    auto s = open_ok(o, k);
    REQUIRE(s->append(draft("after-reopen")).is_ok());
    REQUIRE(s->commit().is_ok());
    s.reset();
    CHECK(raw_rows(path, "PRAGMA page_size")[0][0] == std::to_string(page));
  }
  // An older schema version (built with SQL, for migration tests) gets the size too.
  auto old = o;
  old.page_size = 1024;
  old.target_schema_version = 1;
  CHECK(raw_rows(open_ok(old, key("old-1024"))->path(), "PRAGMA page_size")[0][0] == "1024");
  // Spares of 1 KiB live apart and serve only stores that make files of 1 KiB.
  auto pool = full_pool(tmp.path(), 2, 1024);
  CHECK(pool->page_size() == 1024);
  CHECK(pool->dir() == tmp.path() / "spares-1024");
  for (auto& e : fs::directory_iterator(pool->dir()))
    if (e.path().extension() == ".db")
      CHECK(raw_rows(e.path(), "PRAGMA page_size")[0][0] == "1024");
  o.spares = pool;
  o.page_size = 4096;
  CHECK_FALSE(open_ok(o, key("not-from-spare"))->claimed_on_open());
  CHECK(pool->get_stats().taken == 0);
  o.page_size = 1024;
  auto from_spare = open_ok(o, key("from-spare"));
  CHECK(from_spare->claimed_on_open());
  CHECK(pool->get_stats().taken == 1);
  CHECK(raw_rows(from_spare->path(), "PRAGMA page_size")[0][0] == "1024");
  for (int bad : {0, 256, 1000, 131072}) {
    CAPTURE(bad);
    auto b = opts_for(tmp.path());
    b.page_size = bad;
    auto r = entity_store::open(b, key("bad"));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
    CHECK_FALSE(spare_pool::start(tmp.path(), 1, bad).is_ok());
  }
  CHECK_FALSE(fs::exists(key("bad").file_path(tmp.path())));
}

TEST_CASE("spares: a creation renames a synced spare into place and claims it with one unsynced "
          "WAL transaction, and the pool refills") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 3);
  // The maker made every shard directory, so that no creation makes one.
  int shards = 0;
  for (auto& e : fs::directory_iterator(tmp.path() / "entities"))
    shards += e.is_directory();
  CHECK(shards == 256);
  for (auto mode : {durability::full, durability::normal}) {
    o.mode = mode;
    auto k = key(mode == durability::full ? "from-spare-full" : "from-spare-normal");
    CAPTURE(k.id);
    auto spares = inodes_in(o.spares->dir());
    REQUIRE(spares.size() == 3);
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> companions; // .db -> its -wal, -shm
    for (auto& e : fs::directory_iterator(o.spares->dir()))
      if (e.path().extension() == ".db") {
        auto wal = e.path(), shm = e.path();
        wal += "-wal";
        shm += "-shm";
        companions[inode_of(e.path())] = {inode_of(wal), inode_of(shm)};
      }
    auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    sync_counter::reset();
    auto s = open_ok(o, k);
    // Neither the claim nor anything else in the creation synced through SQLite (in full the
    // directory and the WAL become durable with the first commit, below).
    CHECK(sync_counter::wal() == 0);
    CHECK(sync_counter::db() == 0);
    CHECK(s->claimed_on_open());
    CHECK(spares.count(inode_of(s->path())) == 1); // the file is one of the spares
    CHECK(inodes_in(o.spares->dir()).count(inode_of(s->path())) == 0);
    { // and its -wal and -shm are the spare's: the open created no file
      auto wal = s->path(), shm = s->path();
      wal += "-wal";
      shm += "-shm";
      CHECK(companions[inode_of(s->path())] == std::make_pair(inode_of(wal), inode_of(shm)));
    }
    auto f = s->append(draft("created"));
    REQUIRE(f.is_ok());
    REQUIRE(s->commit().is_ok());
    if (mode == durability::full)
      CHECK(sync_counter::wal() >= 1);
    auto path = s->path();
    s.reset();
    CHECK(raw_rows(path, "PRAGMA integrity_check") ==
          std::vector<std::vector<std::string>>{{"ok"}});
    CHECK(raw_rows(path, "PRAGMA journal_mode")[0][0] == "wal");
    auto meta = raw_rows(path, "SELECT key, value FROM meta ORDER BY key");
    REQUIRE(meta.size() == 6);
    CHECK(std::stoll(meta[0][1]) >= before);
    CHECK(meta[1][0] == "fact_id_prefix");
    CHECK(meta[1][1].rfind("fct_", 0) == 0);
    CHECK(meta[1][1].size() == 20);
    CHECK(f->fact_id.rfind(meta[1][1], 0) == 0);
    CHECK(meta[3] == std::vector<std::string>{"id", k.id});
    CHECK(meta[4] == std::vector<std::string>{"tenant", k.tenant});
    CHECK(meta[5] == std::vector<std::string>{"type", k.type});
    auto again = open_ok(o, k); // claimed once: a reopen reads it as any entity
    CHECK_FALSE(again->claimed_on_open());
    CHECK(again->last_seq() == 1);
    CHECK(again->verify()->ok);
    CHECK(o.spares->wait_ready(3, std::chrono::seconds(30)) == 3);
    // The spare's -wal and -shm went with it: with the pool full again (its maker idle), every
    // file in spares/ is a .db or the -wal or -shm of one, and the maker's making/ is empty.
    CHECK(fs::is_empty(o.spares->dir() / "making"));
    int files = 0;
    for (auto& e : fs::directory_iterator(o.spares->dir())) {
      if (e.is_directory())
        continue;
      auto db = e.path();
      CHECK(fs::exists(db.replace_extension(".db")));
      ++files;
    }
    CHECK(files == 9);
  }
  auto st = o.spares->get_stats();
  CHECK(st.taken == 2);
  CHECK(st.made == 5);
  CHECK(st.missed == 0);
  // Older schema versions (tests) never take a spare.
  auto old = o;
  old.target_schema_version = 3;
  CHECK(open_ok(old, key("old-version"))->schema_version() == 3);
  CHECK(o.spares->get_stats().taken == 2);
}

TEST_CASE("spares: a spare put in place but never claimed (a crash between) holds no entity for "
          "readers and is claimed by the next writable open of its key") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto pool = full_pool(tmp.path(), 1);
  pool->stop();
  auto spare = pool->take();
  REQUIRE(spare.has_value());
  auto k = key("unclaimed");
  auto path = k.file_path(tmp.path());
  fs::rename(*spare, path);
  // Readers: no entity there yet.
  auto ro = o;
  ro.read_only = true;
  auto r1 = entity_store::open(ro, k);
  REQUIRE_FALSE(r1.is_ok());
  CHECK(r1.error().code() == errc::not_found);
  auto r2 = entity_store::open_file(path, ro);
  REQUIRE_FALSE(r2.is_ok());
  CHECK(r2.error().code() == errc::not_found);
  CHECK(r2.error().message().find("unclaimed") != std::string::npos);
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto rep = (*ix)->rebuild(tmp.path());
  REQUIRE(rep.is_ok());
  CHECK(rep->entity_files == 1);
  CHECK(rep->unreadable == 0); // not an unreadable file: no entity yet
  // A writable open, even one that would not create, claims it.
  auto w = o;
  w.create_if_missing = false;
  auto s = open_ok(w, k);
  CHECK(s->claimed_on_open());
  CHECK(s->key() == k);
  REQUIRE(s->append(draft("x")).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto r3 = entity_store::open_file(path, ro);
  REQUIRE_MESSAGE(r3.is_ok(), r3.error().to_string());
  CHECK(r3.value()->key() == k);
  CHECK(r3.value()->last_seq() == 1);
}

TEST_CASE("a -wal left at a key's path without its database file is refused, not replayed "
          "into a new entity, with or without a spare") {
  // Only an operator deleting a .db by hand leaves this: the store never deletes entity files.
  // SQLite cannot tell a foreign WAL from the database's own and would copy its frames into the
  // new file; the WAL may also hold the lost entity's last commits. So a creation refuses.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto k = key("lost");
  auto path = k.file_path(tmp.path());
  {
    auto s = open_ok(o, k);
    for (int i = 0; i < 5; ++i)
      REQUIRE(s->append(draft("x", {{"i", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
  } // closed with its small WAL kept (wal_kept_on_close_kib)
  auto wal = path;
  wal += "-wal";
  REQUIRE(fs::file_size(wal) > 0);
  auto wal_bytes = [&] {
    std::ifstream in(wal, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string before = wal_bytes();
  CHECK(list_orphan_wals(tmp.path()).empty());
  fs::remove(path);
  CHECK(list_orphan_wals(tmp.path()) == std::vector<fs::path>{wal});
  for (bool with_spares : {false, true}) {
    CAPTURE(with_spares);
    auto oc = o;
    if (with_spares)
      oc.spares = full_pool(tmp.path(), 2);
    auto r = entity_store::open(oc, k);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::corruption);
    CHECK(r.error().message().find("-wal") != std::string::npos);
    CHECK_FALSE(fs::exists(path)); // nothing created, no spare consumed
    CHECK(wal_bytes() == before);  // the WAL untouched
    if (with_spares) {
      CHECK(oc.spares->get_stats().taken == 0);
      oc.spares->stop();
    }
  }
  // Read-only opens answer as for any missing entity.
  auto ro = o;
  ro.read_only = true;
  auto r = entity_store::open(ro, k);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::not_found);
  // Moved away by the operator: the key can be created again, empty.
  fs::rename(wal, tmp.path() / "lost.wal.saved");
  CHECK(list_orphan_wals(tmp.path()).empty());
  auto s = open_ok(o, k);
  CHECK(s->last_seq() == 0);
  // An empty -wal is no WAL: SQLite ignores it, and so does the check.
  s.reset();
  fs::remove(path);
  fs::remove(wal);
  { std::ofstream(wal).flush(); }
  REQUIRE(fs::file_size(wal) == 0);
  auto s2 = open_ok(o, k);
  CHECK(s2->last_seq() == 0);
}

TEST_CASE("spares: a restarted pool keeps the whole spares an earlier one left and deletes "
          "unfinished, damaged, written-beside, twice-named and foreign files") {
  test::temp_dir tmp;
  fs::path dir;
  std::vector<fs::path> spares;
  {
    auto pool = full_pool(tmp.path(), 4);
    pool->stop();
    dir = pool->dir();
  }
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".db")
      spares.push_back(e.path());
  std::sort(spares.begin(), spares.end());
  REQUIRE(spares.size() == 4);
  for (auto& p : spares) { // each with its empty -wal and -shm
    for (const char* suffix : {"-wal", "-shm"}) {
      auto c = p;
      c += suffix;
      REQUIRE(fs::exists(c));
      CHECK(fs::file_size(c) == 0);
    }
  }
  std::string whole;
  {
    std::ifstream in(spares[0], std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  { std::ofstream(dir / "cut-short.tmp", std::ios::binary) << whole.substr(0, 4096); }
  { std::ofstream(dir / "truncated.db", std::ios::binary) << whole.substr(0, whole.size() - 1); }
  {
    auto flipped = whole;
    flipped[flipped.size() / 2] ^= 1;
    std::ofstream(dir / "flipped.db", std::ios::binary) << flipped;
  }
  // Something wrote beside spare 0: its three files go.
  { std::ofstream(dir / (spares[0].filename().string() + "-wal"), std::ios::binary) << "x"; }
  { std::ofstream(dir / "orphan.db-shm", std::ios::binary); }           // its .db is gone
  { std::ofstream(dir / "README", std::ios::binary) << "not a spare"; } // left alone
  // What the maker had not finished (a kill mid-batch) is in making/.
  { std::ofstream(dir / "making" / "unfinished.tmp", std::ios::binary) << whole; }
  { std::ofstream(dir / "making" / "unfinished.db-wal", std::ios::binary); }
  // A spare with a second name (a crash kept both names of a take's rename, as can happen
  // where renames are not atomic on disk): an entity owns it. Spare 1's .db, spare 2's -wal.
  fs::create_directories(tmp.path() / "elsewhere");
  auto owned_db = tmp.path() / "elsewhere" / "owned.db";
  auto owned_wal = tmp.path() / "elsewhere" / "owned.db-wal";
  fs::create_hard_link(spares[1], owned_db);
  fs::create_hard_link(fs::path(spares[2]) += "-wal", owned_wal);
  auto kept = inode_of(spares[3]);
  auto again = spare_pool::start(tmp.path(), 4);
  REQUIRE(again.is_ok());
  auto st = (*again)->get_stats();
  CHECK(st.reused == 1);
  // 3 of spare 0, cut-short, truncated, flipped, the orphan, 3 each of spares 1 and 2, the
  // two in making/.
  CHECK(st.discarded == 15);
  (*again)->stop();
  CHECK(inodes_in(dir).size() == 1 + static_cast<size_t>((*again)->get_stats().made));
  CHECK(inodes_in(dir).count(kept) == 1);
  for (const char* gone : {"cut-short.tmp", "truncated.db", "flipped.db", "orphan.db-shm"})
    CHECK_FALSE(fs::exists(dir / gone));
  CHECK(fs::is_empty(dir / "making"));
  for (size_t i = 0; i < 3; ++i)
    CHECK_FALSE(fs::exists(spares[i]));
  // Only the spares/ names went: the owners' files are whole.
  CHECK(fs::file_size(owned_db) == whole.size());
  CHECK(fs::hard_link_count(owned_db) == 1);
  CHECK(fs::hard_link_count(owned_wal) == 1);
  CHECK(fs::exists(dir / "README"));
  CHECK_FALSE(spare_pool::start(tmp.path(), 0).is_ok());
  CHECK_FALSE(spare_pool::start(tmp.path(), 1025).is_ok());
  CHECK_FALSE(spare_pool::start("", 1).is_ok());
}

TEST_CASE("spares: a maker that cannot write counts an error, creations build their own files "
          "meanwhile, and the pool refills once it can again") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 2);
  auto making = o.spares->dir() / "making";
  REQUIRE(fs::is_empty(making)); // idle: its batch is done
  fs::remove(making);
  { std::ofstream(making, std::ios::binary) << "in the way"; } // a file where the dir goes
  for (int i = 0; i < 3; ++i) { // two from the pool, then one built by the creation
    auto s = open_ok(o, key("while-broken-" + std::to_string(i)));
    CHECK(s->claimed_on_open() == (i < 2));
    REQUIRE(s->append(draft("made")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  // The maker woke at the first take and failed.
  auto st = o.spares->wait_stats([](const spare_pool::stats& s) { return s.errors >= 1; },
                                 std::chrono::seconds(20));
  CHECK(st.errors >= 1);
  CHECK(st.missed == 1);
  CHECK(st.ready == 0);
  fs::remove(making); // the cause goes: the maker (retrying each second) makes making/ again
  CHECK(o.spares->wait_ready(2, std::chrono::seconds(30)) == 2);
  CHECK(fs::is_directory(making));
  auto s = open_ok(o, key("after"));
  CHECK(s->claimed_on_open());
  CHECK(list_entity_files(tmp.path()).size() == 4);
}

TEST_CASE("spares: threads creating the same entities at once get one file each, and no spare "
          "is lost") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 8);
  constexpr int keys = 30, threads = 4;
  std::atomic<int> failures{0}, claims{0};
  std::atomic<int> round{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < keys; ++i) {
        while (round.load() < i) // start each key together
          std::this_thread::yield();
        auto k = key("same-" + std::to_string(i));
        auto r = entity_store::open(o, k);
        if (!r || !(r.value()->key() == k))
          ++failures;
        else
          claims += r.value()->claimed_on_open();
        if (round.load() == i && i + 1 < keys)
          round.compare_exchange_strong(i, i + 1);
      }
    });
  for (auto& t : ts)
    t.join();
  CHECK(failures == 0);
  CHECK(claims <= keys); // one claim per file at most (an entity built without a spare has none)
  CHECK(list_entity_files(tmp.path()).size() == keys);
  o.spares->stop();
  auto st = o.spares->get_stats();
  CHECK(st.taken == claims); // a spare that lost its rename went back to the pool
  CHECK(static_cast<int64_t>(inodes_in(o.spares->dir()).size()) == st.made + st.reused - st.taken);
  for (auto& f : list_entity_files(tmp.path())) {
    auto ro = o;
    ro.read_only = true;
    auto s = entity_store::open_file(f, ro);
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
    CHECK(s.value()->key().file_path(tmp.path()) == f);
  }
}

TEST_CASE("deferred sync: a creation fsyncs no directory, the first sync() does, once") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  std::mutex mu;
  std::vector<std::string> seen;
  o.fault = [&](uint64_t, std::string_view what) {
    if (what == "sync" || what == "sync_dir") {
      std::lock_guard<std::mutex> g(mu);
      seen.emplace_back(what);
    }
    return SQLITE_OK;
  };
  for (bool with_spares : {true, false}) {
    CAPTURE(with_spares);
    auto oo = o;
    if (with_spares)
      oo.spares = full_pool(tmp.path(), 1);
    auto s = open_ok(oo, key(with_spares ? "spare" : "built"));
    CHECK(s->claimed_on_open() == with_spares);
    CHECK(seen.empty());
    REQUIRE(s->append(draft("x")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    CHECK(seen == std::vector<std::string>{"sync_dir", "sync"});
    REQUIRE(s->append(draft("y")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    CHECK(seen == std::vector<std::string>{"sync_dir", "sync", "sync"});
    seen.clear();
  }
  // A failed directory fsync fails the sync (nothing may be acknowledged) and is tried again.
  int fail_dir = 1;
  o.fault = [&](uint64_t, std::string_view what) {
    return what == "sync_dir" && fail_dir-- > 0 ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  };
  auto s = open_ok(o, key("dir-fault"));
  REQUIRE(s->append(draft("x")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto bad = s->sync();
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("injected") != std::string::npos);
  CHECK(s->sync().is_ok());
  CHECK(fail_dir == -1); // asked again at the second sync
}

TEST_CASE("schema: newer, foreign, garbage and missing files are clear errors") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  fs::path file;
  {
    auto s = open_ok(o);
    file = s->path();
  }
  REQUIRE(raw_exec(file, "PRAGMA user_version=99") == SQLITE_OK);
  auto r = entity_store::open(o, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::newer_schema);

  auto foreign = tmp.path() / "foreign.db";
  REQUIRE(raw_exec(foreign, "CREATE TABLE t(x)") == SQLITE_OK);
  auto r2 = entity_store::open_file(foreign, o);
  REQUIRE_FALSE(r2.is_ok());
  CHECK(r2.error().code() == errc::not_factum_file);
  // With a schema version set (every factum file has one, and then its meta rows are read
  // without a look at sqlite_master): no meta table, a meta table of another shape, or meta
  // rows of another format are foreign all the same.
  for (const char* sql : {"CREATE TABLE t(x); PRAGMA user_version=3",
                          "CREATE TABLE meta(x, y); PRAGMA user_version=3",
                          "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                          "INSERT INTO meta VALUES ('format', 'other'); PRAGMA user_version=4"}) {
    CAPTURE(sql);
    auto versioned = tmp.path() / "versioned.db";
    fs::remove(versioned);
    REQUIRE(raw_exec(versioned, sql) == SQLITE_OK);
    auto r = entity_store::open_file(versioned, o);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::not_factum_file);
  }

  auto garbage = key("g").file_path(tmp.path());
  fs::create_directories(garbage.parent_path());
  std::ofstream(garbage) << std::string(8192, 'Z');
  auto r3 = entity_store::open(o, key("g"));
  REQUIRE_FALSE(r3.is_ok());
  CHECK(r3.error().code() == errc::corruption);

  auto ro = o;
  ro.read_only = true;
  auto r4 = entity_store::open(ro, key("never"));
  REQUIRE_FALSE(r4.is_ok());
  CHECK(r4.error().code() == errc::not_found);
  CHECK_FALSE(fs::exists(key("never").file_path(tmp.path())));

  // A file moved to another key's path is refused.
  auto other = key("b1").file_path(tmp.path());
  fs::create_directories(other.parent_path());
  fs::copy_file(key("a1").file_path(tmp.path()), other);
  REQUIRE(raw_exec(other, "PRAGMA user_version=2") == SQLITE_OK);
  auto r5 = entity_store::open(o, key("b1"));
  REQUIRE_FALSE(r5.is_ok());
  CHECK(r5.error().code() == errc::corruption);
}

TEST_CASE("read-only stores: immutable mode creates no -wal or -shm and changes neither") {
  test::temp_dir tmp;
  fs::path file;
  auto w = opts_for(tmp.path());
  {
    auto s = open_ok(w);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  } // a small WAL is kept at the close, with its frame
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  auto o = opts_for(tmp.path());
  o.read_only = true;
  o.immutable = true;
  // immutable=1 would not read the WAL: refused while it holds anything.
  REQUIRE(fs::file_size(wal) > 0);
  auto r = entity_store::open(o, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK(r.error().message().find("-wal") != std::string::npos);
  w.wal_kept_on_close_kib = 0; // a close that checkpoints and empties the WAL
  open_ok(w).reset();
  // The emptied companions a clean close keeps: untouched.
  REQUIRE(fs::file_size(wal) == 0);
  REQUIRE(fs::file_size(shm) == 0);
  auto wal_time = fs::last_write_time(wal), shm_time = fs::last_write_time(shm);
  {
    auto s = open_ok(o);
    CHECK(s->last_seq() == 1);
    CHECK(s->verify()->ok);
  }
  CHECK(fs::file_size(wal) == 0);
  CHECK(fs::file_size(shm) == 0);
  CHECK(fs::last_write_time(wal) == wal_time);
  CHECK(fs::last_write_time(shm) == shm_time);
  // Without them (a file copied elsewhere, or a stopped server's data from before they were
  // kept): none is created.
  fs::remove(wal);
  fs::remove(shm);
  {
    auto s = open_ok(o);
    CHECK(s->last_seq() == 1);
  }
  CHECK_FALSE(fs::exists(wal));
  CHECK_FALSE(fs::exists(shm));
}

namespace {

/// `n` facts in `file`, as plain SQLite reads it (through any -wal) and as the store does, with a
/// valid chain.
void check_facts_on_disk(const fs::path& file, const store_options& o, int n) {
  CHECK(raw_rows(file, "SELECT count(*) FROM facts") ==
        std::vector<std::vector<std::string>>{{std::to_string(n)}});
  auto s = open_ok(o);
  CHECK(s->last_seq() == n);
  CHECK(s->verify()->ok);
}

} // namespace

TEST_CASE("store files: a closed entity keeps its -wal emptied and its -shm (never written: the "
          "wal-index is in memory), so a reopen creates no file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.wal_kept_on_close_kib = 0; // every close checkpoints (a small WAL is kept: next test)
  fs::path file;
  {
    auto s = open_ok(o);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  REQUIRE(fs::exists(wal));
  REQUIRE(fs::exists(shm));
  CHECK(fs::file_size(wal) == 0); // checkpointed into the database, then truncated
  CHECK(fs::file_size(shm) == 0); // only its DMS byte is used, as a lock
  auto wal_inode = inode_of(wal), shm_inode = inode_of(shm);
  for (int round = 0; round < 3; ++round) {
    auto s = open_ok(o);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK(fs::file_size(shm) == 0); // the wal-index is in the process's memory
    s.reset();
    CHECK(inode_of(wal) == wal_inode);
    CHECK(inode_of(shm) == shm_inode);
    CHECK(fs::file_size(wal) == 0);
    CHECK(fs::file_size(shm) == 0);
  }
  // Nothing was lost by emptying them: the facts are in the database file itself.
  check_facts_on_disk(file, o, 4);
}

TEST_CASE("store files: the connections of one process share one wal-index: a reader goes on "
          "after the writer closes, and sees its last commit") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto writer = open_ok(o);
  REQUIRE(writer->append(draft("invocation")).is_ok());
  REQUIRE(writer->commit().is_ok());
  fs::path shm = writer->path().string() + "-shm";
  auto ro = o;
  ro.read_only = true;
  auto reader = open_ok(ro);
  REQUIRE(reader->verify()->ok);
  REQUIRE(writer->append(draft("invocation")).is_ok());
  REQUIRE(writer->commit().is_ok());
  writer.reset(); // not the last connection: the wal-index stays with the reader
  CHECK(fs::file_size(shm) == 0);
  // The reader goes on reading through it, and sees the writer's last commit, which may still
  // be only in the -wal.
  auto v = reader->verify();
  REQUIRE(v.is_ok());
  CHECK(v->ok);
  CHECK(v->facts_checked == 2);
}

TEST_CASE("store files: a close keeps a small WAL with its frames and no sync, checkpoints and "
          "empties a large one, and never writes the -shm") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path()); // durability full: each commit syncs the WAL
  fs::path file;
  {
    auto s = open_ok(o);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
    sync_counter::reset();
  }
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  CHECK(sync_counter::wal() == 0); // no checkpoint: nothing to sync, the frames already are
  CHECK(sync_counter::db() == 0);
  CHECK(fs::file_size(wal) > 0);
  CHECK(fs::file_size(wal) <= 256 * 1024);
  CHECK(fs::file_size(shm) == 0); // the next opener rebuilds its wal-index from the WAL
  // The database file does not have the fact yet; SQLite reads it from the WAL.
  CHECK(raw_rows(file, "SELECT count(*) FROM facts") ==
        std::vector<std::vector<std::string>>{{"1"}});
  {
    auto s = open_ok(o);
    CHECK(s->last_seq() == 1);
    for (int i = 0; i < 10; ++i) { // ~600 KiB of WAL
      for (int j = 0; j < 30; ++j)
        REQUIRE(s->append(draft("big", {{"pad", std::string(1500, 'a' + j % 26)}})).is_ok());
      REQUIRE(s->commit().is_ok());
    }
    REQUIRE(fs::file_size(wal) > 256 * 1024);
    sync_counter::reset();
  }
  CHECK(sync_counter::wal() >= 1); // checkpointed: the WAL synced, then the database
  CHECK(sync_counter::db() >= 1);
  CHECK(fs::file_size(wal) == 0);
  CHECK(fs::file_size(shm) == 0);
  check_facts_on_disk(file, o, 301);
}

TEST_CASE("read-only stores read and refuse writes") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()));
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto o = opts_for(tmp.path());
  o.read_only = true;
  auto s = open_ok(o);
  CHECK(s->last_seq() == 1);
  CHECK(s->verify()->ok);
  CHECK(s->append(draft("x")).error().code() == errc::read_only);
  CHECK(s->begin_key("k", "f", 0, 1).error().code() == errc::read_only);
  auto files = list_entity_files(tmp.path());
  REQUIRE(files.size() == 1);
  auto by_file = entity_store::open_file(files[0], o);
  REQUIRE(by_file.is_ok());
  CHECK((*by_file)->key() == key());
}

TEST_CASE("tenant SQL: own u_* tables, read-only queries, system tables refused") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  using nlohmann::json;
  REQUIRE(s->tenant_sql("CREATE TABLE u_items(name TEXT, qty INTEGER)", json(), false).is_ok());
  REQUIRE(
    s->tenant_sql("INSERT INTO u_items VALUES (?, ?)", json::array({"apple", 3}), false).is_ok());
  auto rows = s->tenant_sql("SELECT name, qty FROM u_items", json(), true);
  REQUIRE(rows.is_ok());
  CHECK((*rows)[0]["qty"] == 3);
  REQUIRE(s->append(draft("invocation")).is_ok());
  CHECK(s->tenant_sql("SELECT COUNT(*) AS n FROM facts", json(), true)->at(0)["n"] == 1);
  for (const char* bad :
       {"DELETE FROM facts", "UPDATE idempotency_keys SET status='completed'",
        "INSERT INTO alarms VALUES ('x', 1, '{}', 0, 1)", "CREATE TABLE evil(x)",
        "DROP TABLE facts", "PRAGMA writable_schema=1", "ATTACH DATABASE '/tmp/x.db' AS x",
        "CREATE TRIGGER u_t AFTER INSERT ON u_items BEGIN DELETE FROM facts; END",
        "SELECT 1; DELETE FROM u_items"}) {
    CAPTURE(bad);
    auto r = s->tenant_sql(bad, json(), false);
    CHECK_FALSE(r.is_ok());
  }
  CHECK_FALSE(s->tenant_sql("INSERT INTO u_items VALUES ('x', 1)", json(), true).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: a failed COMMIT rolls the batch back and the store recovers") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view sql) {
    return armed && sql == "COMMIT" ? SQLITE_FULL : SQLITE_OK;
  };
  auto s = open_ok(o);
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto head = s->head_hash();
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->begin_key("kb", "fp", 0, 1).is_ok());
  armed = true;
  auto st = s->commit();
  CHECK(st.code() == errc::full);
  CHECK(st.message().find("injected") != std::string::npos);
  CHECK_FALSE(s->in_batch());
  CHECK(s->last_seq() == 1);
  CHECK(s->head_hash() == head);
  armed = false;
  auto c = s->append(draft("c"));
  REQUIRE(c.is_ok());
  CHECK(c->seq == 2);
  CHECK(c->prev_hash == head);
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->last_seq() == 2);
  CHECK(s2->get(2)->type == "c");
  CHECK(s2->get_key("kb").error().code() == errc::not_found);
  CHECK(s2->verify()->ok);
}

TEST_CASE("faults: a failed RELEASE of a turn leaves it to be rolled back, facts and key too") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view what) {
    return armed && what == "RELEASE turn" ? SQLITE_IOERR_WRITE : SQLITE_OK;
  };
  auto s = open_ok(o);
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->begin_key("k1", "fp", 0, now_ms()).is_ok());
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->complete_key("k1", "{}").is_ok());
  armed = true;
  CHECK_FALSE(s->end_turn(true).is_ok());
  armed = false;
  REQUIRE(s->end_turn(false).is_ok()); // what the runtime does with a turn that failed
  REQUIRE(s->commit().is_ok());
  CHECK(s->last_seq() == 1);
  CHECK(s->get_key("k1").error().code() == errc::not_found);
  CHECK(s->append(draft("c"))->seq == 2);
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: an injected IOERR on a fact insert fails only that append") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view what) {
    return armed && what == "append fact" ? SQLITE_IOERR_WRITE : SQLITE_OK;
  };
  auto s = open_ok(o);
  REQUIRE(s->append(draft("a")).is_ok());
  armed = true;
  auto r = s->append(draft("b"));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::io_error);
  armed = false;
  CHECK(s->append(draft("c"))->seq == 2);
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE(
  "faults: a migration that fails at its last step leaves the file whole at its old version") {
  // Migrations 2, 3 and 4 run in one transaction: a failure in migration 4 undoes 2 and 3 too.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  std::string old_id;
  fs::path file;
  {
    auto s = open_ok(o);
    old_id = s->append(draft("invocation")).value().fact_id;
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  auto faulty = opts_for(tmp.path());
  int migration4_runs = 0;
  faulty.fault = [&](uint64_t, std::string_view sql) {
    if (sql.find("'fact_id_prefix'") == std::string_view::npos)
      return SQLITE_OK;
    ++migration4_runs;
    return SQLITE_IOERR_WRITE;
  };
  auto r = entity_store::open(faulty, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(migration4_runs == 1);
  CHECK(r.error().code() == errc::io_error);
  CHECK(r.error().message().find("schema version 4") != std::string::npos);
  CHECK(raw_rows(file, "PRAGMA user_version")[0][0] == "1");
  CHECK(raw_rows(file, "SELECT name FROM sqlite_master WHERE name IN ('configs', "
                       "'facts_by_subtype')")
          .empty());
  CHECK(meta_value(file, "fact_id_prefix") == "(absent)");
  // Without the fault the same file migrates, and its fact is still found by its old id.
  auto s = open_ok(opts_for(tmp.path()));
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->get(old_id)->seq == 1);
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: a full disk (max_page_count) fails the write and leaves a valid file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.max_page_count = 64; // 256 KiB
  auto s = open_ok(o);
  std::string blob(2000, 'x');
  status last;
  int64_t committed = 0;
  for (int i = 0; i < 1000 && last.is_ok(); ++i) {
    auto r = s->append(draft("blob", {{"b", blob}}));
    if (!r) {
      last = r.error();
      break;
    }
    last = s->commit();
    if (last)
      committed = s->last_seq();
  }
  CHECK(last.code() == errc::full);
  CHECK(s->last_seq() == committed);
  (void)s->rollback();
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->last_seq() == committed);
  CHECK(s2->verify()->ok);
}

TEST_CASE("alarm index: due entries, removal, next due, survives reopen") {
  test::temp_dir tmp;
  {
    auto ix = alarm_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    REQUIRE((*ix)->apply({{key("a"), 100}, {key("b"), 50}, {key("c"), 300}}).is_ok());
    REQUIRE((*ix)->apply({{key("c"), -1}}).is_ok());
  }
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  CHECK((*ix)->next_due()->value() == 50);
  auto due = (*ix)->due(100, 10);
  REQUIRE(due->size() == 2);
  CHECK(due->at(0).key == key("b"));
  CHECK((*ix)->all()->size() == 2);
}

TEST_CASE("alarm index: a damaged index is set aside and rebuilt from the entity files") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  {
    auto a = open_ok(o, key("a")); // two alarms: the index holds the earliest
    REQUIRE(a->set_alarm({"late", 9000, "{}", 0, 0}).is_ok());
    REQUIRE(a->set_alarm({"early", 700, "{}", 0, 0}).is_ok());
    REQUIRE(a->commit().is_ok());
    auto b = open_ok(o, key("b")); // no alarm: no entry
    REQUIRE(b->append(draft("x")).is_ok());
    REQUIRE(b->commit().is_ok());
    auto c = open_ok(o, key("c")); // unreadable below
    REQUIRE(c->set_alarm({"x", 5, "{}", 0, 0}).is_ok());
    REQUIRE(c->commit().is_ok());
  }
  {
    std::ofstream(key("c").file_path(tmp.path()), std::ios::binary | std::ios::trunc)
      << std::string(8192, 'Z');
  }
  auto db = tmp.path() / "runtime" / "alarms.db";
  {
    auto ix = alarm_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    REQUIRE((*ix)->apply({{key("stale"), 1}}).is_ok());
  }
  { std::ofstream(db, std::ios::binary | std::ios::trunc) << std::string(4096, '\x5a'); }
  auto bad = alarm_index::open(tmp.path(), durability::full);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.error().code() == errc::corruption);

  auto aside = alarm_index::set_aside(tmp.path());
  REQUIRE(aside.is_ok());
  CHECK_FALSE(fs::exists(db));
  CHECK(fs::file_size(*aside) == 4096); // kept as it was, for a post-mortem
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto rep = (*ix)->rebuild(tmp.path());
  REQUIRE(rep.is_ok());
  CHECK(rep->entity_files == 3);
  CHECK(rep->entries == 1);
  CHECK(rep->unreadable == 1);
  auto all = (*ix)->all();
  REQUIRE(all->size() == 1);
  CHECK(all->at(0).key == key("a"));
  CHECK(all->at(0).due_ms == 700);
  // The entity files were only read.
  auto a = open_ok(o, key("a"));
  CHECK(a->list_alarms()->size() == 2);
}

TEST_CASE("idempotency keys: record_key stores a finished key in one statement") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()));
  REQUIRE(s->record_key("done", key_status::completed, "fp", R"({"ok":1})", 1000, 100).is_ok());
  auto r = s->peek_key("done", "fp", 200);
  REQUIRE(r.is_ok());
  CHECK(r->outcome == key_outcome::completed);
  CHECK(r->record.response == R"({"ok":1})");
  CHECK(r->record.expires_at_ms.value() == 1100);
  CHECK(s->peek_key("done", "other", 200)->outcome == key_outcome::mismatch);
  CHECK(s->peek_key("done", "fp", 1100)->outcome == key_outcome::fresh); // expired
  CHECK(s->peek_key("never", "fp", 200)->outcome == key_outcome::fresh);
  // a pending row (a turn that awaited) is replaced by the finished record
  REQUIRE(s->begin_key("p", "fp", 0, 1)->outcome == key_outcome::fresh);
  CHECK(s->peek_key("p", "fp", 2)->outcome == key_outcome::in_flight);
  REQUIRE(s->record_key("p", key_status::failed, "fp", R"({"code":"X"})", 0, 2).is_ok());
  CHECK(s->peek_key("p", "fp", 3)->outcome == key_outcome::failed);
  CHECK_FALSE(s->record_key("q", key_status::pending, "fp", "{}", 0, 1).is_ok());
  CHECK_FALSE(s->record_key("", key_status::completed, "fp", "{}", 0, 1).is_ok());
  REQUIRE(s->commit().is_ok());
}

TEST_CASE("deferred sync: commit without fsync, sync() from another thread, checkpoint") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  std::atomic<int> syncs{0}; // sync() runs on another thread than the steps that call the hook
  o.fault = [&](uint64_t, std::string_view what) {
    if (what == "sync")
      ++syncs;
    return SQLITE_OK;
  };
  auto s = open_ok(o);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  CHECK(s->wal_frames() > 0);
  // sync runs on another thread while the owner keeps writing
  std::thread t([&] { CHECK(s->sync().is_ok()); });
  REQUIRE(s->append(draft("b")).is_ok());
  t.join();
  REQUIRE(s->commit().is_ok());
  CHECK(s->sync().is_ok());
  CHECK(syncs == 2);
  REQUIRE(s->checkpoint().is_ok());
  CHECK(s->wal_frames() == 0);
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()));
  CHECK(s2->last_seq() == 51);
  CHECK(s2->verify()->ok);
}

TEST_CASE("deferred sync: commits never sync inside SQLite, checkpoints and the close do") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true; // durability full (opts_for)
  {
    auto s = open_ok(o);
    sync_counter::reset();
    for (int round = 0; round < 2; ++round) {
      // A commit into a new WAL generation (the first after the open, then the first after a
      // checkpoint): SQLite would sync the WAL header here with synchronous=NORMAL.
      for (int i = 0; i < 3; ++i) {
        REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
        REQUIRE(s->commit().is_ok());
      }
      CHECK(sync_counter::wal() == 0);
      CHECK(sync_counter::db() == 0);
      REQUIRE(s->sync().is_ok()); // the store's own fdatasync, not through SQLite
      REQUIRE(s->checkpoint().is_ok());
      CHECK(sync_counter::wal() >= 1); // the WAL before its pages go into the database
      CHECK(sync_counter::db() >= 1);  // the database before the WAL restarts
      sync_counter::reset();
    }
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
  } // a small WAL: the close leaves it as it is, without a sync
  CHECK(sync_counter::wal() == 0);
  CHECK(sync_counter::db() == 0);
  {
    auto s = open_ok(o);
    CHECK(s->last_seq() == 7); // the kept frame is read back
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
  } // with none kept, the close checkpoints: with its syncs
  o.wal_kept_on_close_kib = 0;
  {
    auto s = open_ok(o);
    CHECK(s->last_seq() == 8);
    sync_counter::reset();
  }
  CHECK(sync_counter::wal() >= 1);
  CHECK(sync_counter::db() >= 1);
  auto s = open_ok(o);
  CHECK(s->last_seq() == 8);
  CHECK(s->verify()->ok);
}

TEST_CASE("deferred sync: a checkpoint through its own connection runs beside the owner's "
          "commits, syncs the WAL and the database, and lets the WAL restart") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true; // durability full (opts_for)
  int64_t n = 0;
  {
    auto s = open_ok(o);
    auto append_commit = [&] {
      REQUIRE(s->append(draft("a", {{"i", n}})).is_ok());
      REQUIRE(s->commit().is_ok());
      ++n;
    };
    for (int i = 0; i < 40; ++i)
      append_commit();
    int frames = s->wal_frames();
    CHECK(frames >= 40);
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
    std::thread t([&] { CHECK(s->checkpoint_concurrently().is_ok()); });
    for (int i = 0; i < 10; ++i) // the owner keeps committing meanwhile
      append_commit();
    t.join();
    CHECK(sync_counter::wal() >= 1); // the WAL before its pages go into the database
    // The database is synced by the checkpoint that reaches the WAL's end: the one above if it
    // ran after the commits, else this one (the owner idle), which copies what they added.
    REQUIRE(s->sync().is_ok());
    REQUIRE(s->checkpoint_concurrently().is_ok());
    CHECK(sync_counter::db() >= 1); // the database before the WAL may restart
    // Once every frame is in the database, the owner's next commit starts the WAL over.
    append_commit();
    CHECK(s->wal_frames() < frames / 4);
    CHECK(s->last_seq() == n);
  }
  auto s = open_ok(o);
  CHECK(s->last_seq() == 51);
  CHECK(s->verify()->ok);
  auto ro = o;
  ro.read_only = true;
  CHECK(open_ok(ro)->checkpoint_concurrently().error().code() == errc::invalid_argument);
}

TEST_CASE("auto_checkpoint off: no commit checkpoints past 1,000 WAL frames (durability "
          "normal), the owner's checkpoint does, with its syncs") {
  test::temp_dir tmp;
  auto run = [&](bool auto_checkpoint, const std::string& id) {
    auto o = opts_for(tmp.path());
    o.mode = durability::normal;
    o.auto_checkpoint = auto_checkpoint;
    auto s = open_ok(o, key(id));
    sync_counter::reset();
    for (int i = 0; i < 400; ++i) { // 3+ frames per commit: past SQLite's 1,000
      REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
      REQUIRE(s->commit().is_ok());
    }
    return s;
  };
  {
    auto s = run(true, "auto"); // the control: SQLite checkpoints inside a commit, with syncs
    CHECK(sync_counter::db() >= 1);
  }
  auto s = run(false, "owner");
  // synchronous=NORMAL syncs a new WAL's header once, in its first commit; nothing else.
  CHECK(sync_counter::wal() <= 1);
  CHECK(sync_counter::db() == 0);
  CHECK(s->wal_frames() > 1000);
  REQUIRE(s->checkpoint_concurrently().is_ok());
  CHECK(sync_counter::wal() >= 1);
  CHECK(sync_counter::db() >= 1);
  s.reset();
  auto again = open_ok(opts_for(tmp.path()), key("owner"));
  CHECK(again->last_seq() == 400);
  CHECK(again->verify()->ok);
}

TEST_CASE("deferred sync: an injected fsync failure is reported") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  o.fault = [](uint64_t, std::string_view what) {
    return what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  };
  auto s = open_ok(o);
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto st = s->sync();
  CHECK(st.code() == errc::io_error);
}
