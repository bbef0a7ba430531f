// schedules_store_test.cpp: the `schedules` table of an entity file (schema version 8;
// docs/storage-format.md section 17): put, get, list, delete, what commits, and migration 8 of a
// version-7 file, read-only opens of which list no schedules.
#include <doctest/doctest.h>

#include "factum/storage/entity_store.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;

namespace schedules_store_test {

namespace {

using test::open_ok;
using test::opts_for;

const entity_key key{"acme", "ledger", "sched"};

schedule_record row(std::string name, int64_t next) {
  schedule_record s;
  s.name = std::move(name);
  s.spec = R"({"every_ms":60000,"anchor_ms":0,"missed":"skip","jitter_ms":0,"grace_ms":60000})";
  s.payload = R"({"report":"daily"})";
  s.next_ms = next;
  s.created_at_ms = 1'000;
  s.updated_at_ms = 2'000;
  return s;
}

} // namespace

TEST_CASE("schedules store: a schedule is put, replaced, listed by name and deleted") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()), key);
    REQUIRE(s->put_schedule(row("b", 120'000)).is_ok());
    auto a = row("a", 60'000);
    a.last_ms = 0;
    REQUIRE(s->put_schedule(a).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto s = open_ok(opts_for(tmp.path()), key);
  auto all = s->list_schedules();
  REQUIRE(all.is_ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].name == "a");
  CHECK((*all)[0].last_ms == 0);
  CHECK((*all)[1].name == "b");
  CHECK_FALSE((*all)[1].last_ms.has_value());
  auto b = s->get_schedule("b");
  REQUIRE(b.is_ok());
  CHECK(b->next_ms == 120'000);
  CHECK(b->payload == R"({"report":"daily"})");
  CHECK(b->created_at_ms == 1'000);
  b->next_ms = 180'000;
  REQUIRE(s->put_schedule(*b).is_ok()); // replaces
  CHECK(s->get_schedule("b")->next_ms == 180'000);
  REQUIRE(s->delete_schedule("a").is_ok());
  REQUIRE(s->delete_schedule("never").is_ok()); // absent: ok
  CHECK(s->get_schedule("a").error().code() == errc::not_found);
  CHECK(s->list_schedules()->size() == 1);
  // Checked: name length, JSON.
  CHECK(s->put_schedule(row("", 1)).code() == errc::invalid_argument);
  CHECK(s->put_schedule(row(std::string(119, 'n'), 1)).code() == errc::invalid_argument);
  auto bad = row("c", 1);
  bad.spec = "{not json";
  CHECK(s->put_schedule(bad).code() == errc::invalid_argument);
}

TEST_CASE("schedules store: a turn that fails takes its schedule writes with it") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key);
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->put_schedule(row("kept", 60'000)).is_ok());
  REQUIRE(s->end_turn(true).is_ok());
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->put_schedule(row("dropped", 60'000)).is_ok());
  REQUIRE(s->end_turn(false).is_ok());
  REQUIRE(s->commit().is_ok());
  auto all = s->list_schedules();
  REQUIRE(all->size() == 1);
  CHECK((*all)[0].name == "kept");
}

TEST_CASE("schedules store: migration 8 gives a version-7 file an empty schedules table, and "
          "a read-only open of the old file lists none") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 7; // the last version without the schedules table
  {
    auto s = open_ok(o, key);
    CHECK(s->schema_version() == 7);
    CHECK(s->put_schedule(row("x", 1)).code() == errc::invalid_argument);
    REQUIRE(s->commit().is_ok());
  }
  {
    auto ro = opts_for(tmp.path());
    ro.read_only = true;
    auto s = open_ok(ro, key);
    CHECK(s->schema_version() == 7);
    REQUIRE(s->list_schedules().is_ok());
    CHECK(s->list_schedules()->empty());
    CHECK(s->get_schedule("x").error().code() == errc::not_found);
  }
  auto s = open_ok(opts_for(tmp.path()), key);
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->list_schedules()->empty());
  REQUIRE(s->put_schedule(row("x", 1)).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

} // namespace schedules_store_test
