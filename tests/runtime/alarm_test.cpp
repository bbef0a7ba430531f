// alarm_test.cpp: durable alarms: fire once, wake hibernated entities, survive a restart, retry
// a failing handler with exponential backoff and then dead-letter it.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>

#include <condition_variable>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/alarm_index.hpp"
#include "support/runtime_helpers.hpp"
#include "support/start_notes.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace alarm_test {

namespace {

runtime_config alarm_config(const std::filesystem::path& dir) {
  runtime_config c;
  c.data_dir = dir;
  test::add_test_types(c.types);
  c.storage_threads = 2;
  c.alarm_poll = 100ms;
  return c;
}

using test::call_ok;
using test::facts_of;
using test::start_ok;

auto& events = test::event_log::get();

} // namespace

TEST_CASE("alarms: an alarm due in 200 ms fires once and is then gone") {
  test::temp_dir tmp;
  auto rt = start_ok(alarm_config(tmp.path()));
  auto k = entity_key{"acme", "alarmer", "once"};
  auto t0 = std::chrono::steady_clock::now();
  call_ok(*rt, k, "arm", {{"name", "a"}, {"delay_ms", 200}, {"tag", "once"}});
  REQUIRE(events.wait_for("alarm:once", 1, 10s));
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 190ms);
  // The alarm row left in the same commit as the handler's fact: it cannot fire again.
  CHECK(call_ok(*rt, k, "@alarms", json::object()).empty());
  CHECK(facts_of(*rt, k, {{"type", "alarm_fired"}}).size() == 1);
  CHECK(events.count("alarm:once") == 1);
}

TEST_CASE("alarms: an alarm of a hibernated entity wakes it") {
  test::temp_dir tmp;
  auto c = alarm_config(tmp.path());
  c.idle_timeout = 50ms;
  auto rt = start_ok(std::move(c));
  auto k = entity_key{"acme", "alarmer", "sleeper"};
  call_ok(*rt, k, "arm", {{"name", "wake"}, {"delay_ms", 1500}, {"tag", "sleeper"}});
  auto deadline = std::chrono::steady_clock::now() + 5s;
  // Hibernated, and its file closed: the gauge drops after the close on a storage thread,
  // a moment after the hibernation is counted.
  auto asleep = [&] {
    auto& st = rt->metrics();
    return st.value("factum_hibernations_total") >= 1 && st.value("factum_active_entities") == 0;
  };
  while (!asleep() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms); // waiting for counters that the runtime moves
  REQUIRE(asleep());
  auto activations = rt->metrics().value("factum_activations_total");
  REQUIRE(events.wait_for("alarm:sleeper", 1, 10s));
  CHECK(rt->metrics().value("factum_activations_total") > activations);
}

TEST_CASE("alarms: an alarm due after a restart fires after the restart") {
  test::temp_dir tmp;
  auto k = entity_key{"acme", "alarmer", "restart"};
  {
    auto rt = start_ok(alarm_config(tmp.path()));
    call_ok(*rt, k, "arm", {{"name", "later"}, {"delay_ms", 800}, {"tag", "restart"}});
  } // stopped before the alarm is due
  CHECK(events.count("alarm:restart") == 0);
  auto rt = start_ok(alarm_config(tmp.path()));
  REQUIRE(events.wait_for("alarm:restart", 1, 10s));
  CHECK(facts_of(*rt, k, {{"type", "alarm_fired"}}).size() == 1);
}

TEST_CASE("alarms: a damaged alarm index is rebuilt at start and the alarms still fire") {
  test::temp_dir tmp;
  auto k = entity_key{"acme", "alarmer", "index-lost"};
  {
    auto rt = start_ok(alarm_config(tmp.path()));
    call_ok(*rt, k, "arm", {{"name", "later"}, {"delay_ms", 800}, {"tag", "index-lost"}});
    CHECK(test::notes_about(rt->start_notes(), "alarm index").empty());
  }
  auto index = tmp.path() / "runtime" / "alarms.db";
  for (const char* suffix : {"-wal", "-shm"})
    std::filesystem::remove(index.string() + suffix);
  { std::ofstream(index, std::ios::binary | std::ios::trunc) << std::string(4096, 'Z'); }
  auto rt = start_ok(alarm_config(tmp.path()));
  auto notes = test::notes_about(rt->start_notes(), "alarm index");
  REQUIRE(notes.size() == 1);
  MESSAGE(notes[0]);
  CHECK(notes[0].find("rebuilt from 1 entity files: 1 entities with alarms") != std::string::npos);
  CHECK(rt->metrics().value("factum_alarm_index_rebuilds_total") == 1);
  REQUIRE(events.wait_for("alarm:index-lost", 1, 10s));
  CHECK(facts_of(*rt, k, {{"type", "alarm_fired"}}).size() == 1);
  int aside = 0;
  for (auto& e : std::filesystem::directory_iterator(tmp.path() / "runtime"))
    aside += e.path().filename().string().starts_with("alarms.db.corrupt-");
  CHECK(aside == 1);
}

TEST_CASE("alarms: entities arming alarms at once share alarm index writes, and every alarm is "
          "indexed") {
  test::temp_dir tmp;
  auto c = alarm_config(tmp.path());
  c.storage_threads = 8;
  constexpr int n = 200;
  {
    auto rt = start_ok(c);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0, failed = 0;
    for (int i = 0; i < n; ++i)
      rt->call(entity_key{"acme", "alarmer", "g" + std::to_string(i)}, "arm",
               json{{"name", "later"}, {"delay_ms", 3'600'000}, {"tag", "g"}}.dump(), {},
               [&](call_reply r) {
                 std::lock_guard<std::mutex> g(mu);
                 failed += !r.ok;
                 ++done;
                 cv.notify_all();
               });
    {
      std::unique_lock<std::mutex> g(mu);
      REQUIRE(cv.wait_for(g, 60s, [&] { return done == n; }));
    }
    CHECK(failed == 0);
    auto& st = rt->metrics();
    MESSAGE(st.value("factum_alarm_index_changes_total")
            << " index changes in " << st.value("factum_alarm_index_writes_total")
            << " transactions");
    CHECK(st.value("factum_alarm_index_changes_total") >= n);
    CHECK(st.value("factum_alarm_index_writes_total") >= 1);
    CHECK(st.value("factum_alarm_index_writes_total") <
          st.value("factum_alarm_index_changes_total")); // some shared a transaction
  }
  // Every entity is in the index on disk, due when its alarm is.
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto due = (*ix)->due(std::numeric_limits<int64_t>::max(), 10 * n);
  REQUIRE(due.is_ok());
  std::set<std::string> ids;
  for (auto& e : *due)
    if (e.key.id.rfind("g", 0) == 0)
      ids.insert(e.key.id);
  CHECK(ids.size() == n);
}

TEST_CASE("alarms: a failing handler is retried with exponential backoff, then dead-lettered") {
  test::temp_dir tmp;
  auto c = alarm_config(tmp.path());
  c.alarm_retry_base = 40ms;
  c.alarm_max_retries = 3;
  auto rt = start_ok(std::move(c));
  auto k = entity_key{"acme", "alarmer", "failing"};
  call_ok(*rt, k, "arm", {{"name", "bad"}, {"delay_ms", 10}, {"fail_times", 100}, {"tag", "bad"}});
  REQUIRE(events.wait_for("alarm:bad", 4, 20s)); // first run + 3 retries
  // Wait for the dead letter's commit: its lifecycle fact is queued behind the last run.
  json dl;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    dl = facts_of(*rt, k, {{"type", "lifecycle"}, {"subtype", "alarm_dead_lettered"}});
    if (!dl.empty())
      break;
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(dl.size() == 1);
  auto errs = facts_of(*rt, k, {{"type", "error"}, {"subtype", "alarm_failed"}});
  REQUIRE(errs.size() == 4);
  auto retries = facts_of(*rt, k, {{"type", "lifecycle"}, {"subtype", "alarm_retry_scheduled"}});
  REQUIRE(retries.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(retries[i]["data"]["delay_ms"] == 40 << i);
    // each retry ran no earlier than its backoff after the failure before it
    auto gap = errs[i + 1]["timestamp"].get<int64_t>() - errs[i]["timestamp"].get<int64_t>();
    CHECK(gap >= (40 << i) - 2);
  }
  CHECK(facts_of(*rt, k, {{"type", "error"}, {"subtype", "max_retries_exceeded"}}).size() == 1);
  CHECK(call_ok(*rt, k, "@alarms", json::object()).empty());
  CHECK(events.count("alarm:bad") == 4);
}

TEST_CASE("alarms: 600 index entries the runtime cannot wake (a type no longer hosted, a file "
          "that does not open) are parked, and a healthy alarm behind them fires") {
  test::temp_dir tmp;
  auto healthy = entity_key{"acme", "alarmer", "healthy"};
  {
    auto rt = start_ok(alarm_config(tmp.path()));
    call_ok(*rt, healthy, "arm", {{"name", "h"}, {"delay_ms", 1500}, {"tag", "starved"}});
  } // stopped before it is due
  // 600 entries due long before it: 590 of a type this runtime does not host, 10 of hosted
  // entities whose files are garbage.
  int64_t now = factum::now_ms();
  {
    auto ix = alarm_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    std::vector<alarm_index_entry> junk;
    for (int i = 0; i < 590; ++i)
      junk.push_back({entity_key{"acme", "retired", "r" + std::to_string(i)}, now - 60'000 + i});
    for (int i = 0; i < 10; ++i) {
      entity_key k{"acme", "alarmer", "broken" + std::to_string(i)};
      auto file = k.file_path(tmp.path());
      std::filesystem::create_directories(file.parent_path());
      std::ofstream(file, std::ios::binary) << std::string(8192, 'Z');
      junk.push_back({k, now - 30'000 + i});
    }
    REQUIRE((*ix)->apply(junk).is_ok());
  }
  auto rt = start_ok(alarm_config(tmp.path()));
  // Before parking, the scheduler took the 512 oldest due entries at every scan, found none of
  // them wakeable, and never reached the healthy one.
  REQUIRE(events.wait_for("alarm:starved", 1, 20s));
  auto deadline = std::chrono::steady_clock::now() + 20s; // the garbage files' wakes fail later
  while (rt->metrics().value("factum_alarms_parked_total") < 600 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms); // waiting for a counter that the scheduler bumps
  CHECK(rt->metrics().value("factum_alarms_parked_total") >=
        600); // parked ones are tried again after their backoff
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto parked = (*ix)->parked();
  REQUIRE(parked.is_ok());
  CHECK(parked->size() == 600);
  int unknown = 0, unopenable = 0;
  for (auto& p : *parked) {
    CHECK(p.parked_until_ms > now);
    unknown += p.reason.rfind("UNKNOWN_ENTITY_TYPE", 0) == 0;
    unopenable += p.entry.key.type == "alarmer";
  }
  CHECK(unknown == 590);
  CHECK(unopenable == 10);
}

TEST_CASE("alarms: when the alarm index cannot be written (disk full), a call that sets an alarm "
          "is refused and nothing is kept, and once it can the alarm fires after hibernation") {
  test::temp_dir tmp;
  std::atomic<bool> full{true};
  auto c = alarm_config(tmp.path());
  c.idle_timeout = 50ms;
  c.alarm_index_fault = [&](uint64_t, std::string_view what) {
    return full.load() && what == "apply" ? SQLITE_FULL : SQLITE_OK;
  };
  auto rt = start_ok(std::move(c));
  auto k = entity_key{"acme", "alarmer", "index-full"};
  call_options o;
  o.idempotency_key = "arm-1";
  auto args = json{{"name", "x"}, {"delay_ms", 300}, {"tag", "index-full"}}.dump();
  auto r = rt->call_sync(k, "arm", args, o);
  // Before, the entity committed its alarm (200) while the index write failed: a hibernated
  // entity's alarm then never fired.
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 503);
  CHECK(r.code == "STORAGE_FULL");
  CHECK(r.retryable);
  CHECK(rt->metrics().value("factum_alarm_index_failures_total") >= 1);
  CHECK(call_ok(*rt, k, "@alarms", json::object()).empty());
  full = false;
  auto again = rt->call_sync(k, "arm", args, o);
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK_FALSE(again.replayed);
  REQUIRE(events.wait_for("alarm:index-full", 1, 10s));
  CHECK(rt->metrics().value("factum_hibernations_total") >=
        1); // it fired through the index, after hibernating
  CHECK(facts_of(*rt, k, {{"type", "alarm_fired"}}).size() == 1);
}

} // namespace alarm_test
