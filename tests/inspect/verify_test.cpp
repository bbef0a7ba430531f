// verify_test.cpp: `factum inspect verify` on intact files, after a trigger is dropped, and
// after a fact is edited behind the store's back (trigger dropped, row updated, trigger
// restored): exit 1 and the first bad seq named.
#include <doctest/doctest.h>

#include "support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;

namespace {

const char* restore_update_trigger =
  "CREATE TRIGGER facts_no_update BEFORE UPDATE ON facts BEGIN SELECT RAISE(ABORT, 'facts are "
  "immutable: UPDATE refused'); END";

} // namespace

TEST_CASE("verify: intact entities pass, one or all") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto one =
    run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/a1", "--table"});
  CHECK(one.code == 0);
  CHECK(one.err == "");
  // The file is made at the current schema version, right-aligned under SCHEMA (six wide).
  auto schema = std::to_string(current_schema_version);
  REQUIRE(schema.size() <= 6);
  CHECK(one.out == "ENTITY          RESULT  FACTS  SCHEMA  FIRST_BAD_SEQ  PROBLEM\n"
                   "acme/ledger/a1  ok         12  " +
                     std::string(6 - schema.size(), ' ') + schema + "              -  -\n");
  auto all = run_cli({"inspect", "verify", "--data", tmp.path().string()});
  CHECK(all.code == 0);
  auto ls = lines(all.out);
  REQUIRE(ls.size() == 3);
  for (auto& l : ls)
    CHECK(nlohmann::json::parse(l)["ok"] == true);
  auto tenant = run_cli({"inspect", "verify", "--data", tmp.path().string(), "globex"});
  CHECK(tenant.code == 0);
  CHECK(lines(tenant.out).size() == 1);
}

TEST_CASE("verify: a dropped immutability trigger is a problem (exit 1)") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto file = entity_key{"acme", "webhook", "w1"}.file_path(tmp.path());
  REQUIRE(raw_exec(file, "DROP TRIGGER facts_no_delete") == SQLITE_OK);
  auto r = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/webhook/w1"});
  CHECK(r.code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  CHECK(j["first_bad_seq"].is_null());
  CHECK(j["problem"].get<std::string>().find("facts_no_delete") != std::string::npos);
  CHECK(r.err.find("factum inspect: verify acme/webhook/w1: trigger facts_no_delete is missing") ==
        0);
  // A sweep of the data directory finds it among intact entities.
  auto all = run_cli({"inspect", "verify", "--data", tmp.path().string(), "--table"});
  CHECK(all.code == 1);
  auto ls = lines(all.out);
  REQUIRE(ls.size() == 4);
  CHECK(ls[1].rfind("acme/ledger/a1    ok", 0) == 0);
  CHECK(ls[2].rfind("acme/webhook/w1   FAIL", 0) == 0);
  CHECK(ls[3].rfind("globex/ledger/g1  ok", 0) == 0);
}

TEST_CASE("verify: a fact edited behind the store's back names the first bad seq") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto file = entity_key{"acme", "ledger", "a1"}.file_path(tmp.path());
  std::string err;
  CHECK(raw_exec(file, "UPDATE facts SET data='{\"ok\":false}' WHERE seq=7", &err) != SQLITE_OK);
  CHECK(err.find("immutable") != std::string::npos);
  REQUIRE(raw_exec(file, "DROP TRIGGER facts_no_update") == SQLITE_OK);
  REQUIRE(raw_exec(file, "UPDATE facts SET data='{\"ok\":false}' WHERE seq=7") == SQLITE_OK);
  REQUIRE(raw_exec(file, "UPDATE facts SET amount='0.001' WHERE seq=8") == SQLITE_OK);
  // With the trigger still missing, both problems are named, and the first bad seq.
  auto both = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/a1"});
  CHECK(both.code == 1);
  auto jb = nlohmann::json::parse(both.out);
  CHECK(jb["first_bad_seq"] == 7);
  CHECK(jb["problem"] == "trigger facts_no_update is missing: facts can be edited; hash of seq 7 "
                         "does not match its contents: the fact was altered");
  REQUIRE(raw_exec(file, restore_update_trigger) == SQLITE_OK);
  auto r = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/a1"});
  CHECK(r.code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["first_bad_seq"] == 7);
  CHECK(j["facts_checked"] == 12);
  CHECK(j["problem"].get<std::string>().find("altered") != std::string::npos);
  CHECK(r.err.rfind("factum inspect: verify acme/ledger/a1: first bad seq 7: ", 0) == 0);
  // show flags the edited row too.
  auto show =
    run_cli({"inspect", "show", "--data", tmp.path().string(), "acme/ledger/a1", "7", "--table"});
  CHECK(show.code == 0);
  CHECK(show.out.find("hash check:      MISMATCH") != std::string::npos);
  // And a tampered file is still left as it was.
  auto before = snapshot_dir(tmp.path());
  (void)run_cli({"inspect", "verify", "--data", tmp.path().string()});
  CHECK(snapshot_dir(tmp.path()) == before);
}

TEST_CASE("verify: an older schema version is reported") {
  test::temp_dir tmp;
  {
    auto o = opts_for(tmp.path());
    o.target_schema_version = 1;
    auto s = entity_store::open(o, entity_key{"acme", "ledger", "old"});
    REQUIRE(s.is_ok());
    REQUIRE((*s)->append(draft("invocation", "", t0, "", "", "")).is_ok());
    REQUIRE((*s)->commit().is_ok());
  }
  auto r = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/old"});
  CHECK(r.code == 1);
  CHECK(nlohmann::json::parse(r.out)["problem"] ==
        "schema version 1, expected " + std::to_string(current_schema_version));
  // The old file is still readable (no dead letters or breakers tables: empty lists).
  auto dl = run_cli({"inspect", "dead-letters", "--data", tmp.path().string(), "acme/ledger/old"});
  CHECK(dl.code == 0);
  CHECK(dl.out == "");
}
