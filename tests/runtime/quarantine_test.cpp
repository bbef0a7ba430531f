// quarantine_test.cpp: what a failed WAL sync does to an entity, through the runtime: the
// calls it may not answer truthfully fail 503 (retryable, with a retry delay), the entity closes
// and marks its file, and the next activation re-syncs the files before it serves, so that a
// retry that replays a result replays a durable one. The storage fault seam fails "sync" (the
// fdatasync of the WAL), "sync_dir" and "resync"; the hook runs on sync and storage threads.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>
#include <mutex>
#include <set>

#include "factum/entities/entity.hpp"
#include "factum/runtime/runtime.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

/// Fails the named operations while armed; counts every call of each name.
struct sync_faults {
  std::mutex mu;
  std::set<std::string> failing;
  std::map<std::string, int> seen;
  fault_hook hook() {
    return [this](uint64_t, std::string_view what) {
      std::lock_guard<std::mutex> g(mu);
      std::string w(what);
      if (w == "sync" || w == "sync_dir" || w == "resync")
        ++seen[w];
      return failing.count(w) ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    };
  }
  void fail(const std::string& what, bool on) {
    std::lock_guard<std::mutex> g(mu);
    if (on)
      failing.insert(what);
    else
      failing.erase(what);
  }
  int count(const std::string& what) {
    std::lock_guard<std::mutex> g(mu);
    return seen[what];
  }
};

runtime_config config(const std::filesystem::path& dir, sync_faults& f) {
  runtime_config c;
  c.data_dir = dir;
  add_builtin_types(c.types);
  c.storage_fault = f.hook();
  c.log = [](std::string_view) {}; // the quarantine's log line is checked through the counters
  return c;
}

call_reply append(runtime& rt, const entity_key& k, const std::string& key) {
  call_options o;
  o.idempotency_key = key;
  return rt.call_sync(k, "append", json{{"type", "invocation"}, {"data", {{"k", key}}}}.dump(), o);
}

std::filesystem::path marker_of(const std::filesystem::path& dir, const entity_key& k) {
  return k.file_path(dir).string() + "-unsynced";
}

} // namespace

TEST_CASE("quarantine: a failed WAL sync fails the call 503 with a retry delay, and the retry "
          "replays the call only after the files were re-synced") {
  test::temp_dir tmp;
  sync_faults f;
  auto rt = runtime::start(config(tmp.path(), f));
  REQUIRE(rt.is_ok());
  entity_key k{"acme", "ledger", "q1"};
  REQUIRE(append(**rt, k, "warm").ok);
  f.fail("sync", true);
  auto r = append(**rt, k, "k1");
  f.fail("sync", false);
  REQUIRE_FALSE(r.ok);
  CHECK(r.http_status == 503);
  CHECK(r.code == "STORAGE_UNAVAILABLE");
  CHECK(r.retryable);
  CHECK(r.retry_after_ms > 0);
  // The reply leaves before the actor counts the quarantine: wait for the counter.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((*rt)->metrics().value("factum_quarantines_total") == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms); // waiting for a counter the entity's actor bumps
  CHECK((*rt)->metrics().value("factum_quarantines_total") == 1);
  // The commit landed in the WAL; whether it is on disk nobody knows. The retry waits for the
  // next activation, which writes the WAL again and syncs it before reading it: then the replay
  // is true.
  int resyncs_before = f.count("resync");
  auto again = append(**rt, k, "k1");
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK(again.replayed);
  CHECK(f.count("resync") == resyncs_before + 1);
  CHECK((*rt)->metrics().value("factum_resyncs_total") == 1);
  CHECK_FALSE(std::filesystem::exists(marker_of(tmp.path(), k)));
  // One invocation fact for k1, and the entity serves on.
  auto facts = (*rt)->call_sync(k, "@facts", R"({"idempotency_key":"k1","type":"invocation"})");
  REQUIRE(facts.ok);
  CHECK(facts.json().size() == 1);
  CHECK(append(**rt, k, "k2").ok);
}

TEST_CASE("quarantine: a failed directory sync quarantines a new entity like a failed WAL sync") {
  test::temp_dir tmp;
  sync_faults f;
  auto rt = runtime::start(config(tmp.path(), f));
  REQUIRE(rt.is_ok());
  entity_key k{"acme", "ledger", "fresh"};
  f.fail("sync_dir", true);
  auto r = append(**rt, k, "k1");
  f.fail("sync_dir", false);
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == "STORAGE_UNAVAILABLE");
  auto again = append(**rt, k, "k1");
  REQUIRE_MESSAGE(again.ok, again.body);
  CHECK((*rt)->metrics().value("factum_quarantines_total") == 1);
  CHECK((*rt)->metrics().value("factum_resyncs_total") == 1);
}

TEST_CASE("quarantine: while the re-sync itself fails the entity refuses to serve, and serves "
          "once it succeeds") {
  test::temp_dir tmp;
  sync_faults f;
  auto rt = runtime::start(config(tmp.path(), f));
  REQUIRE(rt.is_ok());
  entity_key k{"acme", "ledger", "stubborn"};
  REQUIRE(append(**rt, k, "warm").ok);
  f.fail("sync", true);
  f.fail("resync", true);
  REQUIRE_FALSE(append(**rt, k, "k1").ok);
  f.fail("sync", false);
  for (int i = 0; i < 3; ++i) {
    auto r = append(**rt, k, "k1");
    CHECK_FALSE(r.ok);
    CHECK(r.http_status == 503);
  }
  CHECK(std::filesystem::exists(marker_of(tmp.path(), k)));
  f.fail("resync", false);
  auto ok = append(**rt, k, "k1");
  REQUIRE_MESSAGE(ok.ok, ok.body);
  CHECK_FALSE(std::filesystem::exists(marker_of(tmp.path(), k)));
}

TEST_CASE("quarantine: the mark survives a restart: the next process re-syncs before it reads") {
  test::temp_dir tmp;
  sync_faults f;
  entity_key k{"acme", "ledger", "restart"};
  {
    auto rt = runtime::start(config(tmp.path(), f));
    REQUIRE(rt.is_ok());
    REQUIRE(append(**rt, k, "warm").ok);
    f.fail("sync", true);
    f.fail("resync", true); // nothing re-syncs it in this process
    REQUIRE_FALSE(append(**rt, k, "k1").ok);
    f.fail("sync", false);
    (*rt)->stop();
  }
  REQUIRE(std::filesystem::exists(marker_of(tmp.path(), k)));
  f.fail("resync", false);
  auto rt = runtime::start(config(tmp.path(), f));
  REQUIRE(rt.is_ok());
  int before = f.count("resync");
  auto r = append(**rt, k, "k1");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK(r.replayed);
  CHECK(f.count("resync") == before + 1);
  CHECK_FALSE(std::filesystem::exists(marker_of(tmp.path(), k)));
}
