// faults_test.cpp: storage faults end to end, through the runtime and the HTTP gateway (a real
// in-process server on a loopback port). The storage fault seam (runtime_config::storage_fault)
// fails the Nth SQLite operation from a moment on with IOERR, FULL, CORRUPT or READONLY; a
// commit fails for a while (disk full); entity files are overwritten with garbage while the
// server is stopped and while the entity is hibernated. Each time: a clear problem+json answer,
// no half-written call, the key released (retryable) or stored (terminal), the other entities
// and /healthz unaffected, and the files on disk hold every acknowledged fact once with a valid
// hash chain. Test thread; the fault hook runs on storage threads and CAF workers.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

#include "http/fixture.hpp"
#include "reliability/support.hpp"
#include "support/file_bytes.hpp"
#include "support/start_notes.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// A fault that the test arms from its thread and the storage hits on its threads.
struct fault_switch {
  std::atomic<int64_t> countdown{0}; ///< > 0: fail the op that brings it to 0
  std::atomic<int> code{SQLITE_OK};
  std::atomic<bool> persistent{false}; ///< fail every op matching `only` while set
  std::mutex mu;
  std::string only;       ///< with persistent: the op label to fail ("" = all)
  std::string last_label; ///< the label of the op that was failed last
  int64_t hits = 0;

  fault_hook hook() {
    return [this](uint64_t, std::string_view what) -> int {
      if (persistent.load()) {
        std::lock_guard<std::mutex> g(mu);
        if (only.empty() || what == only) {
          ++hits;
          last_label = std::string(what);
          return code.load();
        }
        return SQLITE_OK;
      }
      if (countdown.load() <= 0)
        return SQLITE_OK;
      if (countdown.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> g(mu);
        ++hits;
        last_label = std::string(what);
        return code.load();
      }
      return SQLITE_OK;
    };
  }
  void arm_nth(int64_t n, int c) {
    code.store(c);
    countdown.store(n);
  }
  /// Disarms; returns the label of the op that failed since arming, or "" when none did.
  std::string disarm() {
    countdown.store(0);
    persistent.store(false);
    std::lock_guard<std::mutex> g(mu);
    return std::exchange(last_label, std::string());
  }
};

std::string append_body(const std::string& key) {
  return json{{"type", "invocation"}, {"data", {{"k", key}}}}.dump();
}

/// What one key should have on disk.
struct expectation {
  std::string entity;
  bool acked = false; ///< answered 200 in the end
  int64_t seq = 0;
  std::string fact_id;
};

/// Opens every listed entity read-only and checks: a valid chain; per key, one invocation fact
/// when it was acknowledged (with its seq and fact_id), none when it failed for good.
void check_disk(const std::filesystem::path& data, const std::map<std::string, expectation>& keys,
                const std::set<std::string>& entities) {
  std::map<std::string, int> count;
  for (auto& id : entities) {
    store_options o;
    o.data_dir = data;
    o.read_only = true; // not immutable: a file may still have its -wal
    auto s = entity_store::open(o, entity_key{"acme", "ledger", id});
    REQUIRE_MESSAGE(s.is_ok(), id << ": " << s.error().to_string());
    auto v = (*s)->verify();
    REQUIRE(v.is_ok());
    CHECK_MESSAGE(v->ok, id << " chain broken at seq " << v->first_bad_seq);
    fact_filter f;
    f.limit = 10000;
    f.type = "invocation";
    auto facts = (*s)->query(f);
    REQUIRE(facts.is_ok());
    for (auto& fact : *facts) {
      auto it = keys.find(fact.idempotency_key);
      REQUIRE_MESSAGE(it != keys.end(), "unknown key " << fact.idempotency_key);
      CHECK(it->second.entity == id);
      ++count[fact.idempotency_key];
      if (it->second.acked) {
        CHECK_MESSAGE(fact.seq == it->second.seq, fact.idempotency_key);
        CHECK_MESSAGE(fact.fact_id == it->second.fact_id, fact.idempotency_key);
      }
    }
  }
  for (auto& [k, e] : keys) {
    INFO("key " << k);
    CHECK(count[k] == (e.acked ? 1 : 0));
  }
}

bool healthy(uint16_t port) {
  http_client c(port, 5s);
  return c.request("GET", "/healthz").status == 200;
}

/// The storage errors of the taxonomy (runtime/src/actor/entity_actor.cpp storage_error).
bool storage_problem(const http_reply& r) {
  auto c = r.code();
  bool known = (r.status == 503 &&
                (c == "STORAGE_UNAVAILABLE" || c == "STORAGE_FULL" || c == "STORAGE_READ_ONLY")) ||
               (r.status == 500 && c == "ENTITY_STORAGE_CORRUPT");
  return known && r.header("content-type") == "application/problem+json";
}

std::filesystem::path file_of(const std::filesystem::path& data, const std::string& id) {
  return entity_key{"acme", "ledger", id}.file_path(data);
}

/// Overwrites an entity file: all of it with random bytes, or (keep_header) all but SQLite's
/// 100-byte header; removes its -wal and -shm.
std::string garble(const std::filesystem::path& file, bool keep_header, uint64_t seed) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (bytes.size() < 4096)
    bytes.resize(4096);
  std::mt19937_64 rng(seed);
  for (size_t i = keep_header ? 100 : 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(rng());
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::error_code ec;
  std::filesystem::remove(file.string() + "-wal", ec);
  std::filesystem::remove(file.string() + "-shm", ec);
  return bytes;
}

/// An op label for the figures: its first line, at most 32 characters.
std::string first_words(std::string l) {
  l.erase(0, l.find_first_not_of(" \n\t"));
  return l.substr(0, std::min<size_t>(32, l.find_first_of("\n(")));
}

using test::file_bytes;

} // namespace

TEST_CASE("faults: the Nth SQLite operation of a call fails (IOERR, FULL, CORRUPT, READONLY)") {
  fault_switch fs;
  std::map<std::string, expectation> keys;
  std::set<std::string> entities;
  std::map<std::string, int> labels_hit;
  int failed = 0, replayed_terminal = 0, retried_ok = 0, replayed_after_sync = 0,
      replayed_after_release = 0, clean = 0;
  temp_dir data;
  {
    gateway_fixture f(
      [&](runtime_config& rc, http_server_config&) { rc.storage_fault = fs.hook(); }, data.path());
    http_client c(f.port());
    auto post = [&](const std::string& id, const std::string& key) {
      entities.insert(id);
      keys[key].entity = id;
      return c.request("POST", "/v1/entities/ledger/" + id + "/append", json_headers(acme_key, key),
                       append_body(key));
    };
    auto take = [&](const std::string& key, const http_reply& r) {
      auto j = r.json();
      keys[key].acked = true;
      keys[key].seq = j["seq"].get<int64_t>();
      keys[key].fact_id = j["fact_id"].get<std::string>();
    };
    const std::vector<std::pair<int, std::string>> codes = {{SQLITE_IOERR_WRITE, "ioerr"},
                                                            {SQLITE_FULL, "full"},
                                                            {SQLITE_CORRUPT, "corrupt"},
                                                            {SQLITE_READONLY, "readonly"}};
    for (auto& [code, name] : codes) {
      // A call on an entity already open, and (n == 1..) each operation in turn failing.
      std::string id = "nth-" + name;
      auto warm = post(id, id + "-warm");
      REQUIRE(warm.status == 200);
      take(id + "-warm", warm);
      for (int n = 1; n <= 16; ++n) {
        auto key = id + "-" + std::to_string(n);
        fs.arm_nth(n, code);
        auto r = post(id, key);
        auto label = fs.disarm();
        INFO(name << " at op " << n << " (" << label << "): " << r.status << " " << r.body);
        if (!label.empty())
          ++labels_hit[first_words(label)];
        if (r.status == 200) {
          ++clean;
          take(key, r);
        } else {
          ++failed;
          CHECK(storage_problem(r));
          CHECK(r.body.find("injected") != std::string::npos);
          // The same key again, the fault gone: a retryable failure released the key (the call
          // runs now, once); a terminal one was stored and is replayed.
          auto again = post(id, key);
          if (again.status == 200) {
            ++retried_ok;
            // Only a failed WAL sync (or the directory fsync before the first one) comes after
            // the commit: then the retry replays the committed result. A fault anywhere else
            // rolled the call back, so it runs now.
            bool replayed = again.header("idempotent-replayed") == "true";
            // A failed RELEASE of the turn leaves the turn open and the actor rolls it back
            // (fixed in entity_store::end_turn): the retry runs anew, like any other fault.
            CHECK(replayed == (label == "sync" || label == "sync_dir"));
            replayed_after_sync += replayed;
            if (label == "RELEASE turn")
              replayed_after_release += replayed;
            take(key, again);
          } else {
            ++replayed_terminal;
            CHECK(r.status == 500);
            CHECK(again.status == r.status);
            CHECK(again.code() == r.code());
            CHECK(again.header("idempotent-replayed") == "true");
          }
        }
        // Another entity is unaffected, and so is the server.
        auto other = post("bystander", "by-" + key);
        REQUIRE(other.status == 200);
        take("by-" + key, other);
        CHECK(healthy(f.port()));
      }
    }
    // Opening a file: the first operations of a cold entity fail.
    for (int n = 1; n <= 12; ++n) {
      auto id = "cold-" + std::to_string(n);
      auto key = id + "-k";
      fs.arm_nth(n, SQLITE_IOERR_READ);
      auto r = post(id, key);
      auto label = fs.disarm();
      if (!label.empty())
        ++labels_hit["(cold) " + first_words(label)];
      INFO("cold open, op " << n << " (" << label << "): " << r.status << " " << r.body);
      if (r.status == 200) {
        take(key, r);
        continue;
      }
      ++failed;
      CHECK(storage_problem(r));
      auto again = post(id, key);
      REQUIRE_MESSAGE(again.status == 200, again.body);
      take(key, again);
    }
  }
  std::string hit;
  for (auto& [l, n] : labels_hit)
    hit += l + " x" + std::to_string(n) + "; ";
  MESSAGE(failed << " calls failed by a fault, " << retried_ok << " succeeded on retry ("
                 << replayed_after_sync << " of them replays after a failed sync, "
                 << replayed_after_release << " after a failed RELEASE turn), " << replayed_terminal
                 << " replayed a stored terminal failure, " << clean
                 << " unaffected; ops hit: " << hit);
  CHECK(failed >= 20);
  check_disk(data.path(), keys, entities);
}

TEST_CASE("faults: disk full at every commit for a while, then space again") {
  fault_switch fs;
  std::map<std::string, expectation> keys;
  std::set<std::string> entities = {"full-a", "full-b", "full-c"};
  temp_dir data;
  {
    gateway_fixture f(
      [&](runtime_config& rc, http_server_config&) { rc.storage_fault = fs.hook(); }, data.path());
    http_client c(f.port());
    auto post = [&](const std::string& id, const std::string& key) {
      keys[key].entity = id;
      return c.request("POST", "/v1/entities/ledger/" + id + "/append", json_headers(acme_key, key),
                       append_body(key));
    };
    auto take = [&](const std::string& key, const http_reply& r) {
      REQUIRE_MESSAGE(r.status == 200, r.body);
      keys[key].acked = true;
      keys[key].seq = r.json()["seq"].get<int64_t>();
      keys[key].fact_id = r.json()["fact_id"].get<std::string>();
    };
    for (auto& id : entities)
      take(id + "-before", post(id, id + "-before"));
    {
      std::lock_guard<std::mutex> g(fs.mu);
      fs.only = "COMMIT";
    }
    fs.code.store(SQLITE_FULL);
    fs.persistent.store(true);
    std::vector<std::string> refused;
    for (int i = 0; i < 5; ++i)
      for (auto& id : entities) {
        auto key = id + "-during-" + std::to_string(i);
        auto r = post(id, key);
        CHECK(r.status == 503);
        CHECK(r.code() == "STORAGE_FULL");
        CHECK(r.header("content-type") == "application/problem+json");
        refused.push_back(key);
      }
    // Reads and health still answer while no write can commit.
    CHECK(healthy(f.port()));
    auto facts = c.request("GET", "/v1/entities/ledger/full-a/facts", {{"X-API-Key", acme_key}});
    CHECK(facts.status == 200);
    CHECK(facts.json().size() == 1);
    fs.disarm();
    // Space again: every refused key runs now, once (its key was released).
    for (auto& key : refused) {
      auto r = post(keys[key].entity, key);
      CHECK(r.header("idempotent-replayed") != "true");
      take(key, r);
    }
  }
  check_disk(data.path(), keys, entities);
}

TEST_CASE("faults: an entity file overwritten with garbage while the server is stopped") {
  temp_dir data;
  std::map<std::string, std::string> garbage;
  for (bool keep_header : {false, true}) {
    CAPTURE(keep_header);
    std::string victim = keep_header ? "victim-pages" : "victim-all";
    {
      gateway_fixture f({}, data.path());
      http_client c(f.port());
      for (auto id : {victim, std::string("bystander")})
        for (int i = 0; i < 20; ++i)
          REQUIRE(c.request("POST", "/v1/entities/ledger/" + id + "/append",
                            json_headers(acme_key, id + std::to_string(i) + victim),
                            append_body(id))
                    .status == 200);
    }
    garbage[victim] = garble(file_of(data.path(), victim), keep_header, 42);
    gateway_fixture f({}, data.path());
    http_client c(f.port());
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto r =
        c.request("POST", "/v1/entities/ledger/" + victim + "/append",
                  json_headers(acme_key, "after-" + std::to_string(attempt)), append_body("after"));
      INFO(r.body);
      CHECK(r.status == 500);
      CHECK(r.code() == "ENTITY_STORAGE_CORRUPT");
      CHECK(r.header("content-type") == "application/problem+json");
      auto g =
        c.request("GET", "/v1/entities/ledger/" + victim + "/facts", {{"X-API-Key", acme_key}});
      CHECK(g.status == 500);
      CHECK(g.code() == "ENTITY_STORAGE_CORRUPT");
    }
    auto b = c.request("POST", "/v1/entities/ledger/bystander/append",
                       json_headers(acme_key, "by-after-" + victim), append_body("b"));
    CHECK(b.status == 200);
    CHECK(healthy(f.port()));
    CHECK(c.request("GET", "/metrics").status == 200);
  }
  // factum never "repaired" a garbage file by writing over it.
  for (auto& [id, bytes] : garbage)
    CHECK(file_bytes(file_of(data.path(), id)) == bytes);
}

TEST_CASE("faults: an entity file overwritten with garbage while the entity is hibernated") {
  temp_dir data;
  gateway_fixture f([](runtime_config& rc,
                       http_server_config&) { rc.idle_timeout = std::chrono::milliseconds(150); },
                    data.path());
  http_client c(f.port());
  for (auto id : {"sleeper", "awake"})
    for (int i = 0; i < 10; ++i)
      REQUIRE(c.request("POST", std::string("/v1/entities/ledger/") + id + "/append",
                        json_headers(acme_key, std::string(id) + std::to_string(i)),
                        append_body(id))
                .status == 200);
  REQUIRE(eventually([&] { return f.rt().metrics().value("factum_active_entities") == 0; }, 10s));
  CHECK(f.rt().metrics().value("factum_hibernations_total") >= 2);
  auto bytes = garble(file_of(data.path(), "sleeper"), false, 7);
  auto r = c.request("POST", "/v1/entities/ledger/sleeper/append", json_headers(acme_key, "z"),
                     append_body("z"));
  CHECK(r.status == 500);
  CHECK(r.code() == "ENTITY_STORAGE_CORRUPT");
  CHECK(r.header("content-type") == "application/problem+json");
  auto a = c.request("POST", "/v1/entities/ledger/awake/append", json_headers(acme_key, "z"),
                     append_body("z"));
  CHECK(a.status == 200);
  CHECK(a.json()["seq"] == 11);
  CHECK(healthy(f.port()));
  CHECK(file_bytes(file_of(data.path(), "sleeper")) == bytes);
}

TEST_CASE("faults: a garbage alarm index is set aside and rebuilt, the entities untouched") {
  temp_dir data;
  {
    gateway_fixture f({}, data.path());
    http_client c(f.port());
    REQUIRE(c.request("POST", "/v1/entities/ledger/keep/append", json_headers(acme_key, "k1"),
                      append_body("k1"))
              .status == 200);
  }
  auto index = data.path() / "runtime" / "alarms.db";
  REQUIRE(std::filesystem::exists(index));
  auto before = file_bytes(file_of(data.path(), "keep"));
  garble(index, false, 3);
  runtime_config rc;
  rc.data_dir = data.path();
  add_builtin_types(rc.types);
  auto r = runtime::start(std::move(rc));
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto notes = test::notes_about((*r)->start_notes(), "alarm index");
  REQUIRE(notes.size() == 1);
  MESSAGE("start on a garbage alarm index: " << notes[0]);
  CHECK((*r)->metrics().value("factum_alarm_index_rebuilds_total") == 1);
  (*r)->stop();
  r.value().reset();
  // The entity file was only read by the rebuild.
  CHECK(file_bytes(file_of(data.path(), "keep")) == before);
  store_options o;
  o.data_dir = data.path();
  o.read_only = true;
  auto s = entity_store::open(o, entity_key{"acme", "ledger", "keep"});
  REQUIRE(s.is_ok());
  CHECK((*s)->last_seq() == 1);
  CHECK((*s)->verify()->ok);
}
