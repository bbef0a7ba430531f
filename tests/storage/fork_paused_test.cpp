// fork_paused_test.cpp: a fork never runs its source's side effects on its own
// (entity_store::fork_file). The source's alarms and schedules arrive paused (listed, never due),
// its scheduled dead-letter retries wait for an operator (pending, no retry alarm), the runtime's
// own alarms of the source do not come along but the purge of expired keys, and resume_paused
// hands the paused ones back once. The test thread only.
#include "storage/store_support.hpp"

using namespace store_tests;

namespace fork_paused_test {

TEST_CASE("fork: alarms and schedules are copied paused and scheduled dead letters wait for an "
          "operator, until resume_paused hands them back") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.wal_kept_on_close_kib = 0;
  int64_t now = now_ms();
  {
    auto s = open_ok(o, key());
    REQUIRE(s->set_alarm({"tick", now + 1000, R"({"n":1})", 0, now}).is_ok());
    REQUIRE(s->set_alarm({"@purge_keys", now + 5000, "{}", 0, now}).is_ok());
    REQUIRE(s->set_alarm({"@dl:dl_1", now + 2000, "{}", 0, now}).is_ok());
    REQUIRE(s->set_alarm({"@schedule:daily", now + 3000, R"({"at":1})", 0, now}).is_ok());
    schedule_record sch;
    sch.name = "daily";
    sch.spec = R"({"every_ms":86400000})";
    sch.next_ms = now + 3000;
    sch.created_at_ms = sch.updated_at_ms = now;
    REQUIRE(s->put_schedule(sch).is_ok());
    dead_letter_record dl;
    dl.id = "dl_1";
    dl.operation = "send";
    dl.error_code = "E";
    dl.error_message = "m";
    dl.error_category = "transient";
    dl.reason = "timeout";
    dl.attempts = 3;
    dl.status = dl_status::scheduled;
    dl.next_retry_ms = now + 2000;
    dl.first_attempt_ms = dl.last_attempt_ms = dl.created_at_ms = dl.updated_at_ms = now;
    REQUIRE(s->put_dead_letter(dl).is_ok());
    REQUIRE(s->append(draft("f")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto fork = tmp.path() / "fork.db";
  fact_draft first = draft("lifecycle");
  first.subtype = "forked";
  REQUIRE(
    entity_store::fork_file(key().file_path(o.data_dir), key("a1-debug"), fork, first, o).is_ok());
  auto s = entity_store::open_file(fork, o).value();
  auto alarms = s->list_alarms().value();
  REQUIRE(alarms.size() == 1); // nothing of the source's is due here
  CHECK(alarms[0].name == "@purge_keys");
  CHECK(s->list_schedules().value().empty());
  auto pa = s->list_paused_alarms().value();
  REQUIRE(pa.size() == 1);
  CHECK(pa[0].name == "tick");
  CHECK(pa[0].payload == R"({"n":1})");
  auto ps = s->list_paused_schedules().value();
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].name == "daily");
  CHECK(ps[0].next_ms == now + 3000);
  auto d = s->get_dead_letter("dl_1").value();
  CHECK(d.status == dl_status::pending);
  CHECK_FALSE(d.next_retry_ms);

  auto back = s->resume_paused();
  REQUIRE(back.is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(back->alarms.size() == 1);
  CHECK(back->schedules.size() == 1);
  CHECK(s->list_paused_alarms().value().empty());
  CHECK(s->list_paused_schedules().value().empty());
  CHECK(s->resume_paused().value().alarms.empty()); // once
}

} // namespace fork_paused_test
