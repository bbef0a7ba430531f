// tenant_index_test.cpp: DATA/runtime/tenants.db (factum/storage/tenant_index.hpp): changes and
// per-tenant totals, the flags, a rebuild from the entity files (unclaimed and foreign files
// left out), a rescan that drops rows without a file and corrects sizes, and a damaged file
// reported as corruption. Test thread only.
#include <doctest/doctest.h>

#include <fstream>

#include "factum/storage/tenant_index.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace {

/// Creates the entity's file (with one fact, committed) and closes it.
void make_entity(const fs::path& dir, const entity_key& key) {
  auto s = test::open_ok(test::opts_for(dir), key);
  fact_draft d;
  d.type = "created";
  REQUIRE(s->append(d).is_ok());
  REQUIRE(s->commit().is_ok());
}

using test::open_index;

} // namespace

TEST_CASE("tenant index: changes, totals and flags") {
  test::temp_dir tmp;
  auto ix = open_index(tmp.path());
  CHECK_FALSE(*ix->flag("complete"));
  CHECK_FALSE(*ix->flag("clean"));
  entity_key a1{"acme", "counter", "a1"}, a2{"acme", "counter", "a2"}, g1{"globex", "ledger", "g1"};
  using k = tenant_index_change::kind;
  REQUIRE(ix->apply({{k::add, a1, 0}, {k::add, a2, 0}, {k::add, g1, 0}}, true).is_ok());
  // An add of a row that exists keeps it as it is; set_bytes of no row does nothing.
  REQUIRE(ix->apply({{k::set_bytes, a1, 100},
                     {k::add, a1, 7},
                     {k::set_bytes, g1, 50},
                     {k::set_bytes, entity_key{"x", "y", "z"}, 9}},
                    false)
            .is_ok());
  auto t = ix->totals();
  REQUIRE(t.is_ok());
  CHECK(t->size() == 2);
  CHECK((*t)["acme"].entities == 2);
  CHECK((*t)["acme"].bytes == 100);
  CHECK((*t)["globex"].bytes == 50);
  CHECK(*ix->contains(a2));
  REQUIRE(ix->apply({{k::remove, a2, 0}}, false).is_ok());
  CHECK_FALSE(*ix->contains(a2));
  CHECK(ix->totals()->at("acme").entities == 1);
  REQUIRE(ix->set_flag("clean", true).is_ok());
  CHECK(*ix->flag("clean"));
  // A failed write changes nothing.
  ix->set_fault([](uint64_t, std::string_view) { return 13; }); // SQLITE_FULL
  auto st = ix->apply({{k::add, a2, 0}}, true);
  CHECK(st.code() == errc::full);
  ix->set_fault({});
  CHECK_FALSE(*ix->contains(a2));
}

TEST_CASE("tenant index: a rebuild reads the tenant of every entity file, then a rescan drops rows "
          "without a file and corrects sizes") {
  test::temp_dir tmp;
  entity_key a1{"acme", "counter", "a1"}, a2{"acme", "counter", "a2"}, g1{"globex", "ledger", "g1"};
  for (auto& k : {a1, a2, g1})
    make_entity(tmp.path(), k);
  // A foreign file where an entity's file would be: not a factum file, counted as unreadable.
  auto foreign = entity_key{"acme", "counter", "foreign"}.file_path(tmp.path());
  fs::create_directories(foreign.parent_path());
  std::ofstream(foreign, std::ios::binary) << std::string(4096, 'f');
  auto ix = open_index(tmp.path());
  auto rep = ix->rebuild(tmp.path());
  REQUIRE_MESSAGE(rep.is_ok(), rep.error().to_string());
  CHECK(rep->entity_files == 4);
  CHECK(rep->entities == 3);
  CHECK(rep->unreadable == 1);
  CHECK(*ix->flag("complete"));
  auto t = *ix->totals();
  CHECK(t["acme"].entities == 2);
  CHECK(t["globex"].entities == 1);
  CHECK(t["acme"].bytes ==
        entity_disk_bytes(a1.file_path(tmp.path())) + entity_disk_bytes(a2.file_path(tmp.path())));
  // A row whose creation never made a file, and a file that grew behind the index's back.
  using k = tenant_index_change::kind;
  entity_key ghost{"acme", "counter", "ghost"};
  REQUIRE(ix->apply({{k::add, ghost, 0}, {k::set_bytes, g1, 1}}, true).is_ok());
  auto scan = ix->rescan(tmp.path());
  REQUIRE(scan.is_ok());
  CHECK(scan->entries == 4);
  CHECK(scan->removed == 1);
  CHECK(scan->resized == 1);
  CHECK_FALSE(*ix->contains(ghost));
  CHECK(ix->totals()->at("globex").bytes == entity_disk_bytes(g1.file_path(tmp.path())));
  // A second rescan finds nothing to change.
  scan = ix->rescan(tmp.path());
  CHECK(scan->removed + scan->resized == 0);
}

TEST_CASE("tenant index: a damaged file is corruption, and set_aside makes room for a new one") {
  test::temp_dir tmp;
  fs::create_directories(tmp.path() / "runtime");
  std::ofstream(tmp.path() / "runtime" / "tenants.db", std::ios::binary) << std::string(8192, 'x');
  auto ix = tenant_index::open(tmp.path(), durability::full);
  REQUIRE_FALSE(ix.is_ok());
  CHECK(ix.error().code() == errc::corruption);
  auto aside = tenant_index::set_aside(tmp.path());
  REQUIRE(aside.is_ok());
  CHECK(fs::exists(*aside));
  auto fresh = open_index(tmp.path());
  CHECK_FALSE(*fresh->flag("complete"));
}
