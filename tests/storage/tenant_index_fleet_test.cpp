// tenant_index_fleet_test.cpp: what DATA/runtime/tenants.db keeps for the fleet views
// (factum/storage/tenant_index.hpp): entity summaries (dead letters by status and reason,
// breakers, last activity) written whole or not at all, the queries over them per tenant, the
// summaries read again from the files by a rebuild and by a rescan (a stale or lost summary
// corrected), and an index made before them migrated. Test thread only.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include "factum/storage/tenant_index.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace tenant_index_fleet_test {

namespace {

using k = tenant_index_change::kind;

using test::open_index;

dead_letter_record dead_letter(const std::string& id, dl_status st, const std::string& reason,
                               int64_t created) {
  dead_letter_record d;
  d.id = id;
  d.operation = "charge";
  d.error_code = "E";
  d.reason = reason;
  d.status = st;
  d.created_at_ms = d.updated_at_ms = created;
  return d;
}

/// Creates the entity's file with one fact and the given dead letters and breakers, committed.
void make_entity(const fs::path& dir, const entity_key& key,
                 const std::vector<dead_letter_record>& dls,
                 const std::vector<std::pair<std::string, std::string>>& breakers = {}) {
  auto s = test::open_ok(test::opts_for(dir), key);
  fact_draft d;
  d.type = "created";
  REQUIRE(s->append(d).is_ok());
  for (auto& dl : dls)
    REQUIRE(s->put_dead_letter(dl).is_ok());
  for (auto& [tool, state] : breakers)
    REQUIRE(s->put_breaker({tool, state, "{}", 5}).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->take_fleet_change() == !dls.empty());
  CHECK_FALSE(s->take_fleet_change()); // taken
}

entity_fleet_summary summary(std::vector<dead_letter_group> dls,
                             std::vector<breaker_record> breakers, int64_t last) {
  return {std::move(dls), std::move(breakers), last};
}

int64_t pending_of(tenant_index& ix, const std::string& tenant) {
  auto t = ix.dead_letter_totals_by_tenant();
  REQUIRE(t.is_ok());
  auto it = t->find(tenant);
  if (it == t->end())
    return 0;
  auto p = it->second.by_status.find("pending");
  return p == it->second.by_status.end() ? 0 : p->second;
}

} // namespace

TEST_CASE("tenant index fleet: summaries per entity, queried per tenant, replaced whole") {
  test::temp_dir tmp;
  auto ix = open_index(tmp.path());
  entity_key a1{"acme", "counter", "a1"}, a2{"acme", "ledger", "a2"}, g1{"globex", "counter", "g1"};
  entity_key none{"acme", "counter", "none"}; // no row: its summary is not kept
  REQUIRE(ix->apply({{k::add, a1, 0}, {k::add, a2, 0}, {k::add, g1, 0}}, true).is_ok());
  REQUIRE(
    ix->apply({{k::summary, a1, 0,
                summary({{"pending", "timeout", 2, 1000}, {"resolved", "timeout", 1, 500}},
                        {{"pay", "OPEN", "", 7}, {"mail", "CLOSED", "", 8}}, 3000)},
               {k::summary, a2, 0,
                summary({{"pending", "rate_limit", 1, 2000}}, {{"pay", "CLOSED", "", 9}}, 2000)},
               {k::summary, g1, 0,
                summary({{"pending", "timeout", 5, 10}}, {{"pay", "FORCED_OPEN", "", 1}}, 9000)},
               {k::summary, none, 0, summary({{"pending", "x", 1, 1}}, {}, 1)}},
              false)
      .is_ok());
  // Counts and the entities a filter takes: the tenant's own only.
  CHECK(*ix->count_dead_letters("acme", {}) == 4);
  CHECK(*ix->count_dead_letters("acme", {"pending", ""}) == 3);
  CHECK(*ix->count_dead_letters("acme", {"pending", "timeout"}) == 2);
  CHECK(*ix->count_dead_letters("acme", {"", "x"}) == 0);
  auto e = ix->dead_letter_entities("acme", {"pending", ""}, "", "", "", 10);
  REQUIRE(e.is_ok());
  REQUIRE(e->size() == 2);
  CHECK(e->at(0).first == a1);
  CHECK(e->at(0).second == 2);
  CHECK(e->at(1).first == a2);
  // From a cursor (included), and of one type.
  e = ix->dead_letter_entities("acme", {}, "", "ledger", "a2", 10);
  REQUIRE(e->size() == 1);
  CHECK(e->at(0).first == a2);
  CHECK(ix->dead_letter_entities("acme", {}, "ledger", "", "", 10)->size() == 1);
  auto totals = *ix->dead_letter_totals_by_tenant();
  CHECK(totals.size() == 2);
  CHECK(totals["acme"].by_status["pending"] == 3);
  CHECK(totals["acme"].by_status["resolved"] == 1);
  CHECK(totals["acme"].oldest_pending_ms == 1000);
  CHECK(totals["globex"].oldest_pending_ms == 10);
  // Breakers: per tool and state, and the ones not closed, paged.
  auto states = ix->breaker_states("acme", "");
  REQUIRE(states.is_ok());
  REQUIRE(states->size() == 2);
  CHECK(states->at(0).tool == "mail");
  CHECK(states->at(1).entities_by_state.at("OPEN") == 1);
  CHECK(states->at(1).entities_by_state.at("CLOSED") == 1);
  auto open = ix->open_breakers("acme", "", "", "", "", "", 10);
  REQUIRE(open->size() == 1);
  CHECK(open->at(0).id == "a1");
  CHECK(open->at(0).state == "OPEN");
  CHECK(ix->open_breakers("acme", "", "", "pay", "counter", "a1", 10)->empty());
  CHECK(ix->open_breakers("globex", "", "FORCED_OPEN", "", "", "", 10)->size() == 1);
  CHECK(ix->open_breakers("globex", "", "OPEN", "", "", "", 10)->empty());
  // Last activity: newest first, paged by (ms, type, id); an older activity does not go back.
  REQUIRE(ix->apply({{k::activity, a2, 4000}, {k::activity, a1, 100}}, false).is_ok());
  auto recent = ix->list_by_activity("acme", "", -1, "", "", 10);
  REQUIRE(recent->size() == 2);
  CHECK(recent->at(0).key == a2);
  CHECK(recent->at(0).last_activity_ms == 4000);
  CHECK(recent->at(1).last_activity_ms == 3000);
  auto page2 = ix->list_by_activity("acme", "", 4000, "ledger", "a2", 10);
  REQUIRE(page2->size() == 1);
  CHECK(page2->at(0).key == a1);
  // A new summary replaces the old one whole; a removed entity takes its summary along.
  REQUIRE(ix->apply({{k::summary, a1, 0, summary({}, {{"pay", "CLOSED", "", 11}}, 3500)}}, false)
            .is_ok());
  CHECK(*ix->count_dead_letters("acme", {}) == 1);
  CHECK(ix->open_breakers("acme", "", "", "", "", "", 10)->empty());
  REQUIRE(ix->apply({{k::remove, g1, 0}}, false).is_ok());
  CHECK(pending_of(*ix, "globex") == 0);
  CHECK(ix->breaker_states("globex", "")->empty());
  // A failed write (a full disk) changes nothing: no summary is ever half written.
  ix->set_fault([](uint64_t, std::string_view) { return 13; });
  CHECK_FALSE(ix->apply({{k::summary, a2, 0, summary({}, {}, 1)}}, false).is_ok());
  ix->set_fault({});
  CHECK(*ix->count_dead_letters("acme", {"pending", "rate_limit"}) == 1);
}

TEST_CASE("tenant index fleet: a rebuild reads every file's summary, and a rescan corrects a stale "
          "or lost one") {
  test::temp_dir tmp;
  entity_key a1{"acme", "counter", "a1"}, a2{"acme", "counter", "a2"};
  make_entity(tmp.path(), a1,
              {dead_letter("dl_1", dl_status::pending, "timeout", 100),
               dead_letter("dl_2", dl_status::pending, "timeout", 50),
               dead_letter("dl_3", dl_status::discarded, "server_error", 70)},
              {{"pay", "OPEN"}});
  make_entity(tmp.path(), a2, {});
  auto ix = open_index(tmp.path());
  CHECK_FALSE(*ix->flag("summaries"));
  auto rep = ix->rebuild(tmp.path());
  REQUIRE_MESSAGE(rep.is_ok(), rep.error().to_string());
  CHECK(rep->entities == 2);
  CHECK(*ix->flag("summaries"));
  CHECK(*ix->count_dead_letters("acme", {"pending", "timeout"}) == 2);
  CHECK(ix->dead_letter_totals_by_tenant()->at("acme").oldest_pending_ms == 50);
  CHECK(ix->open_breakers("acme", "", "", "", "", "", 10)->size() == 1);
  auto recent = ix->list_by_activity("acme", "", -1, "", "", 10);
  REQUIRE(recent->size() == 2);
  CHECK(recent->at(0).last_activity_ms > 0);
  // A crash after an entity's commit and before its summary was written: the index says what
  // the file no longer does (and misses what it now has). The rescan after the unclean stop
  // reads every summary again.
  REQUIRE(ix->apply({{k::summary, a1, 0, summary({}, {}, 1)},
                     {k::summary, a2, 0, summary({{"pending", "ghost", 9, 1}}, {}, 1)}},
                    false)
            .is_ok());
  CHECK(*ix->count_dead_letters("acme", {"", "ghost"}) == 9);
  // Files written before `since` keep their summaries as the index has them.
  auto later = ix->rescan(tmp.path(), now_ms() + 60'000);
  REQUIRE(later.is_ok());
  CHECK(later->summarized == 0);
  CHECK(*ix->count_dead_letters("acme", {"", "ghost"}) == 9);
  auto scan = ix->rescan(tmp.path(), now_ms() - 60'000);
  REQUIRE_MESSAGE(scan.is_ok(), scan.error().to_string());
  CHECK(scan->summarized == 2);
  CHECK(scan->unreadable == 0);
  CHECK(*ix->count_dead_letters("acme", {"", "ghost"}) == 0);
  CHECK(*ix->count_dead_letters("acme", {"pending", "timeout"}) == 2);
  CHECK(*ix->count_dead_letters("acme", {"discarded", ""}) == 1);
  // Without summaries the rescan stays a stat of each file.
  CHECK(ix->rescan(tmp.path(), std::nullopt)->summarized == 0);
  // The number beside the flags: when the runtime last opened the index.
  CHECK(*ix->number("opened_at") == 0);
  REQUIRE(ix->set_number("opened_at", 1234).is_ok());
  CHECK(*ix->number("opened_at") == 1234);
}

TEST_CASE("tenant index fleet: an index made before the fleet views gains their tables and reads "
          "its summaries at the next rescan") {
  test::temp_dir tmp;
  entity_key a1{"acme", "counter", "a1"};
  make_entity(tmp.path(), a1, {dead_letter("dl_1", dl_status::pending, "timeout", 100)});
  {
    // The format before: tenant_entities without last_activity, no summary tables.
    fs::create_directories(tmp.path() / "runtime");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((tmp.path() / "runtime" / "tenants.db").c_str(), &db) == SQLITE_OK);
    auto sql = "CREATE TABLE tenant_entities(digest TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
               " type TEXT NOT NULL, id TEXT NOT NULL, bytes INTEGER NOT NULL DEFAULT 0)"
               " WITHOUT ROWID;"
               "CREATE TABLE tenant_index_flags(name TEXT PRIMARY KEY, value INTEGER NOT NULL)"
               " WITHOUT ROWID;"
               "INSERT INTO tenant_index_flags VALUES ('complete', 1), ('clean', 1);"
               "INSERT INTO tenant_entities VALUES ('" +
               a1.digest() + "', 'acme', 'counter', 'a1', 10);";
    REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto ix = open_index(tmp.path());
  CHECK(*ix->flag("complete"));
  CHECK_FALSE(*ix->flag("summaries"));
  CHECK(*ix->count_dead_letters("acme", {}) == 0);
  auto scan = ix->rescan(tmp.path(), 0);
  REQUIRE(scan.is_ok());
  CHECK(scan->summarized == 1);
  CHECK(*ix->flag("summaries"));
  CHECK(*ix->count_dead_letters("acme", {"pending", ""}) == 1);
}

} // namespace tenant_index_fleet_test
