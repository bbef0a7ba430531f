// fact_ids_test.cpp: fact ids are never given twice in an entity's life (fact_ids.hpp). The
// history of a file's fact-id prefixes alone (lineages, where two of them part, its meta text),
// then a store rebuilt as of an earlier commit, as a rollback rebuilds one: the facts after the
// rebuild point get ids under a new prefix, the ids of the facts it rolled away name nothing,
// the chain and the ids verify, and all of it holds across a reopen and a second rollback. The
// test thread only.
#include "storage/store_support.hpp"

using namespace store_tests;

namespace fact_ids_test {

namespace {

const std::string p0 = "fct_0000000000000000", p1 = "fct_1111111111111111",
                  p2 = "fct_2222222222222222", p3 = "fct_3333333333333333";

/// `s`'s facts' ids in seq order.
std::vector<std::string> ids_of(entity_store& s) {
  std::vector<std::string> out;
  for (int64_t q = 1; q <= s.last_seq(); ++q)
    out.push_back(s.get(q).value().fact_id);
  return out;
}

void append_n(entity_store& s, int n) {
  for (int i = 0; i < n; ++i)
    REQUIRE(s.append(draft("f", {{"i", i}})).is_ok());
  REQUIRE(s.commit().is_ok());
}

} // namespace

TEST_CASE("fact ids: a history's lineages, and where a client's lineage parts from the current "
          "one, also after a rollback to a bookmark of a branch rolled away since") {
  fact_id_history h(p0, 1);
  CHECK(h.prefix_at(7) == p0);
  CHECK(h.shared_until(0, 9) == 9);
  // Rolled back to 50: p1 from 51. Then to 60 (in p1's time): p2 from 61.
  h.begin(p1, 51, h);
  h.begin(p2, 61, h);
  CHECK(h.prefix_at(50) == p0);
  CHECK(h.prefix_at(55) == p1);
  CHECK(h.prefix_at(70) == p2);
  CHECK(h.shared_until(h.find(p0), 50) == 50); // a client that saw p0 up to 50 saw the same
  CHECK(h.shared_until(h.find(p0), 80) == 50); // one that saw p0's 51..80: rolled away
  CHECK(h.shared_until(h.find(p1), 70) == 60);
  CHECK(h.shared_until(h.find(p2), 90) == 90);
  CHECK(h.shared_until(-1, 90) == 0); // an unknown prefix shares nothing known
  // Then back to a bookmark at 58 of p1's branch, rebuilt from the archive: the rebuilt file's
  // own history ends at p1; the replaced file's (h) is carried over.
  fact_id_history rebuilt(p0, 1);
  rebuilt.begin(p1, 51, rebuilt);
  rebuilt.begin(p3, 59, h);
  CHECK(rebuilt.epochs().size() == 4);
  CHECK(rebuilt.prefix_at(40) == p0);
  CHECK(rebuilt.prefix_at(58) == p1); // not p2, which began later than p1 but is not its line
  CHECK(rebuilt.prefix_at(59) == p3);
  CHECK(rebuilt.shared_until(rebuilt.find(p2), 70) == 58);
  CHECK(rebuilt.shared_until(rebuilt.find(p1), 58) == 58);
  // The meta text round-trips; malformed ones are corruption.
  auto back = fact_id_history::parse(rebuilt.to_text());
  REQUIRE(back.is_ok());
  CHECK(back->to_text() == rebuilt.to_text());
  for (auto bad : {"", "[]", "[[\"fct_x\",1,-1]]", R"([["fct_0000000000000000",1,0]])",
                   R"([["fct_0000000000000000",1,-1],["fct_0000000000000000",5,0]])",
                   R"([["fct_0000000000000000",0,-1]])"})
    CHECK(fact_id_history::parse(bad).error().code() == errc::corruption);
}

TEST_CASE("fact ids: a file rebuilt as of an earlier commit numbers the facts after it under a "
          "new prefix: no id of a fact rolled away is given again or found, the ids verify, "
          "across a reopen and a second rollback") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.wal_kept_on_close_kib = 0;
  auto live = key().file_path(o.data_dir);
  auto bookmark = tmp.path() / "at3.db";
  std::vector<std::string> rolled_away;
  fact_id_history replaced;
  {
    auto s = open_ok(o, key());
    append_n(*s, 3);
    s.reset(); // the close folds the WAL into the file
    REQUIRE(entity_store::copy_files(live, bookmark).is_ok()); // the entity as of seq 3
    s = open_ok(o, key());
    append_n(*s, 3);
    auto ids = ids_of(*s);
    rolled_away.assign(ids.begin() + 3, ids.end());
    replaced = s->fact_ids();
  }
  auto kept_before = [&] {
    auto s = entity_store::open_file(bookmark, o).value();
    return ids_of(*s);
  }();
  auto at5 = tmp.path() / "at5.db";
  {
    auto s = entity_store::open_file(bookmark, o).value();
    REQUIRE(s->renew_fact_id_prefix(replaced).is_ok());
    append_n(*s, 2);
    s.reset();
    REQUIRE(entity_store::copy_files(bookmark, at5).is_ok()); // as of seq 5
    s = entity_store::open_file(bookmark, o).value();
    append_n(*s, 2);
    auto ids = ids_of(*s);
    CHECK(std::vector<std::string>(ids.begin(), ids.begin() + 3) == kept_before);
    for (int i = 3; i < 6; ++i) {
      CHECK(ids[i] != rolled_away[i - 3]); // the same seq, another id
      CHECK(s->get(rolled_away[i - 3]).error().code() == errc::not_found);
      CHECK(s->get(ids[i]).value().seq == i + 1);
    }
    CHECK(s->get(kept_before[1]).value().seq == 2);
    CHECK(s->verify().value().ok);
    CHECK(s->fact_ids().epochs().size() == 2);
  }
  { // Reopened: the same ids, verified; a second rollback (to seq 5) keeps every prefix known.
    auto s = entity_store::open_file(bookmark, o).value();
    CHECK(s->verify().value().ok);
    auto ids = ids_of(*s);
    REQUIRE(ids.size() == 7);
    CHECK(s->get(ids[6]).value().seq == 7);
    auto second = s->fact_ids();
    s.reset();
    auto r = entity_store::open_file(at5, o).value();
    REQUIRE(r->renew_fact_id_prefix(second).is_ok());
    append_n(*r, 1);
    CHECK(r->fact_ids().epochs().size() == 3);
    CHECK(r->get(6).value().fact_id != ids[5]);
    CHECK(r->get(ids[5]).error().code() == errc::not_found);
    CHECK(r->get(ids[6]).error().code() == errc::not_found);
    CHECK(r->get(ids[4]).value().seq == 5); // kept: the same id
    CHECK(r->verify().value().ok);
    // A fact id edited behind the store's back is caught by verify.
    r.reset();
    REQUIRE(raw_exec_factum(at5, "DROP TRIGGER facts_no_update") == SQLITE_OK);
    REQUIRE(raw_exec_factum(at5, "UPDATE facts SET fact_id='" + rolled_away[0] + "' WHERE seq=4") ==
            SQLITE_OK);
    auto v = entity_store::open_file(at5, o).value()->verify().value();
    CHECK(v.first_bad_seq == 4); // (the missing trigger is a problem too, of no seq)
  }
}

} // namespace fact_ids_test

namespace fact_ids_test {

TEST_CASE("fact ids: a hostile file whose last fact has the largest seq is reported by verify and "
          "refused by append, with no seq past it computed") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.wal_kept_on_close_kib = 0;
  auto file = key().file_path(o.data_dir);
  {
    auto s = open_ok(o, key());
    append_n(*s, 1);
  }
  // A copy of fact 1 at seq 2^63 - 1, written behind the store's back.
  std::string err;
  REQUIRE_MESSAGE(raw_exec_factum(file,
                                  "CREATE TEMP TABLE t AS SELECT * FROM facts WHERE seq=1; "
                                  "UPDATE t SET seq=9223372036854775807, fact_id='fct_hostile'; "
                                  "INSERT INTO facts SELECT * FROM t",
                                  &err) == SQLITE_OK,
                  err);
  auto s = open_ok(o, key());
  CHECK(s->last_seq() == std::numeric_limits<int64_t>::max());
  auto rep = s->verify();
  REQUIRE(rep.is_ok());
  CHECK_FALSE(rep.value().ok);
  CHECK(rep.value().first_bad_seq == std::numeric_limits<int64_t>::max());
  auto appended = s->append(draft("f"));
  REQUIRE_FALSE(appended.is_ok());
  CHECK(appended.error().code() == errc::full);
  CHECK(s->last_seq() == std::numeric_limits<int64_t>::max());
}

} // namespace fact_ids_test
