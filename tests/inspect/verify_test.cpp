// verify_test.cpp: `factum inspect verify` on intact files, after a trigger is dropped, and
// after a fact is edited behind the store's back (trigger dropped, row updated, trigger
// restored): exit 1 and the first bad seq named; `verify` and `owners` on an entity claimed in
// turn by nodes of a cluster, one of them killed mid-stream, and on an owner history edited.
#include <doctest/doctest.h>

#include <unistd.h>

#include "support.hpp"
#include "support/child_process.hpp"
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
    auto o = opts_for(tmp.path(), durability::normal);
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

namespace {

/// acme/ledger/c1 claimed under epoch 3 by node "child" in a forked process that appends until
/// it is SIGKILLed, then under epoch 4 by "parent" here (one more fact); the file is closed on
/// return. Returns the last seq the child left.
int64_t claimed_in_turn(const fs::path& dir) {
  entity_key key{"acme", "ledger", "c1"};
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    auto r = entity_store::open(opts_for(dir, durability::normal), key);
    if (!r || !r.value()->claim_owner(3, "child"))
      _exit(2);
    for (int64_t i = 1;; ++i) {
      if (!r.value()->append(draft("invocation", "", t0 + i, "", "", "")) || !r.value()->commit())
        _exit(3);
      if (write(report, &i, sizeof i) != sizeof i)
        _exit(4);
    }
  }));
  int64_t acked = 0;
  for (int seen = 0; seen < 10 && read(child.reports(), &acked, sizeof acked) == sizeof acked;
       ++seen) {
  }
  child.kill_now();
  REQUIRE(acked == 10);
  auto o = opts_for(dir, durability::normal);
  o.owner_epoch = 4;
  o.owner_node = "parent";
  auto s = entity_store::open(o, key);
  REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
  int64_t left = (*s)->last_seq();
  REQUIRE((*s)->append(draft("outcome", "", t0 + 1000, "", "", "")).is_ok());
  REQUIRE((*s)->commit().is_ok());
  return left;
}

} // namespace

TEST_CASE("verify: an entity claimed in turn by two nodes, the first killed mid-stream, "
          "verifies with its owner epoch, and owners lists its history") {
  test::temp_dir tmp;
  auto data = tmp.path().string();
  int64_t left = claimed_in_turn(tmp.path());
  auto v = run_cli({"inspect", "verify", "--data", data, "acme/ledger/c1"});
  CHECK(v.code == 0);
  auto j = nlohmann::json::parse(v.out);
  CHECK(j["ok"] == true);
  CHECK(j["owner_epoch"] == 4);
  CHECK(j["facts_checked"] == left + 1);

  auto owners = run_cli({"inspect", "owners", "--data", data, "acme/ledger/c1"});
  CHECK(owners.code == 0);
  auto ls = lines(owners.out);
  REQUIRE(ls.size() == 2);
  auto first = nlohmann::json::parse(ls[0]), second = nlohmann::json::parse(ls[1]);
  CHECK(first["epoch"] == 3);
  CHECK(first["node"] == "child");
  CHECK(first["first_seq"] == 1);
  CHECK(second["epoch"] == 4);
  CHECK(second["node"] == "parent");
  CHECK(second["first_seq"] == left + 1);
  CHECK(second["claimed_at"].get<int64_t>() >= first["claimed_at"].get<int64_t>());
  auto table = run_cli({"inspect", "owners", "--data", data, "acme/ledger/c1", "--table"});
  auto tl = lines(table.out);
  REQUIRE(tl.size() == 3);
  CHECK(tl[0] == "EPOCH  NODE    FIRST_SEQ  CLAIMED");
  CHECK(tl[1].rfind("    3  child           1  ", 0) == 0);
  CHECK(tl[2].rfind("    4  parent  ", 0) == 0);

  auto entities = run_cli({"inspect", "entities", "--data", data});
  auto e = nlohmann::json::parse(entities.out);
  CHECK(e["owner_epoch"] == 4);
  CHECK(e["owner_node"] == "parent");
}

TEST_CASE("verify: an entity never claimed has no owner epoch and an empty owner history") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto data = tmp.path().string();
  auto v = run_cli({"inspect", "verify", "--data", data, "acme/ledger/a1"});
  CHECK(v.code == 0);
  CHECK(nlohmann::json::parse(v.out)["owner_epoch"].is_null());
  auto owners = run_cli({"inspect", "owners", "--data", data, "acme/ledger/a1"});
  CHECK(owners.code == 0);
  CHECK(owners.out == "");
  auto e = run_cli({"inspect", "entities", "--data", data, "globex"});
  CHECK(nlohmann::json::parse(e.out)["owner_epoch"].is_null());
  CHECK(nlohmann::json::parse(e.out)["owner_node"].is_null());
}

TEST_CASE("verify: an owner history edited behind the store's back is a problem (exit 1)") {
  test::temp_dir tmp;
  int64_t left = claimed_in_turn(tmp.path());
  auto file = entity_key{"acme", "ledger", "c1"}.file_path(tmp.path());
  std::string err;
  CHECK(raw_exec(file, "UPDATE owners SET first_seq=1 WHERE epoch=4", &err) != SQLITE_OK);
  CHECK(err.find("append-only") != std::string::npos);
  REQUIRE(raw_exec(file, "DROP TRIGGER owners_no_update") == SQLITE_OK);
  REQUIRE(raw_exec(file, "UPDATE owners SET first_seq=" + std::to_string(left + 5) +
                           " WHERE epoch=3") == SQLITE_OK);
  auto r = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/c1"});
  CHECK(r.code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == false);
  CHECK(j["first_bad_seq"].is_null());
  CHECK(j["problem"] ==
        "trigger owners_no_update is missing: the owner history can be edited; "
        "owners: epoch 3 starts at seq " +
          std::to_string(left + 5) + ", past the last fact (" + std::to_string(left + 1) +
          "): facts are missing; owners: epoch 4 "
          "starts at seq " +
          std::to_string(left + 1) + ", before epoch 3 (seq " + std::to_string(left + 5) + ")");
}
