// crash_test.cpp: crash atomicity of the store. A child process appends a stream of
// transactions (several facts plus the completion of their idempotency key, as a runtime turn
// does) and reports each commit on a pipe; the parent SIGKILLs it at a random point, reopens the
// file and checks that only whole transactions are there, every reported commit is there, and
// the hash chain verifies. Several rounds on the same file.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/spare_pool.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

using namespace factum;

namespace {

constexpr int facts_per_txn = 3;

/// reopen_every > 0: the store is closed and opened again after that many transactions (the
/// close keeps a small WAL with its frames, and checkpoints a larger one).
[[noreturn]] void child_writer(const store_options& o, int fd, int64_t first_txn,
                               int reopen_every) {
  auto r = entity_store::open(o, entity_key{"acme", "ledger", "crash"});
  if (!r)
    _exit(2);
  auto store = std::move(r.value());
  for (int64_t t = first_txn;; ++t) {
    if (reopen_every > 0 && t > first_txn && t % reopen_every == 0) {
      store.reset();
      auto again = entity_store::open(o, entity_key{"acme", "ledger", "crash"});
      if (!again)
        _exit(8);
      store = std::move(again.value());
    }
    auto& s = *store;
    std::string k = "k" + std::to_string(t);
    if (!s.begin_turn() || !s.begin_key(k, "fp", 0, now_ms()).is_ok())
      _exit(3);
    for (int j = 0; j < facts_per_txn; ++j) {
      fact_draft d;
      d.type = "invocation";
      d.idempotency_key = k;
      d.data = {{"t", t}, {"j", j}, {"pad", std::string(100 + (t % 7) * 50, 'p')}};
      if (!s.append(d).is_ok())
        _exit(4);
    }
    if (!s.complete_key(k, "{}") || !s.end_turn(true))
      _exit(5);
    {
      if (!s.commit())
        _exit(6);
      if (write(fd, &t, sizeof t) != sizeof t)
        _exit(7);
    }
  }
}

/// Five rounds of: a child writes transactions (reopening the store every `reopen_every`), the
/// parent SIGKILLs it after a random number of acknowledged ones, reopens and checks.
void crash_rounds(int reopen_every, unsigned seed) {
  test::temp_dir tmp;
  store_options o;
  o.data_dir = tmp.path();
  o.mode = durability::normal; // a process crash must be survived in both modes
  std::mt19937 rng(seed);
  int64_t next_txn = 0;
  std::set<int64_t> acked;
  for (int round = 0; round < 5; ++round) {
    o.mode = round % 2 ? durability::full : durability::normal;
    test::child_process child;
    REQUIRE(child.run([&](int report) { child_writer(o, report, next_txn, reopen_every); }));
    int target = std::uniform_int_distribution<int>(5, 150)(rng);
    int64_t t = 0;
    int seen = 0;
    while (seen < target && read(child.reports(), &t, sizeof t) == sizeof t) {
      acked.insert(t);
      ++seen;
    }
    child.kill_now();
    CHECK(WIFSIGNALED(child.status()));
    REQUIRE(seen == target);

    auto r = entity_store::open(o, entity_key{"acme", "ledger", "crash"});
    REQUIRE(r.is_ok());
    auto& s = *r.value();
    auto v = s.verify();
    REQUIRE(v.is_ok());
    CHECK_MESSAGE(v->ok, v->problem);
    CHECK(s.last_seq() % facts_per_txn == 0);
    fact_filter all;
    all.limit = 10000;
    std::map<std::string, int> per_key;
    int64_t after = 0;
    for (;;) {
      all.after_seq = after;
      auto facts = s.query(all);
      REQUIRE(facts.is_ok());
      if (facts->empty())
        break;
      for (auto& f : *facts)
        ++per_key[f.idempotency_key];
      after = facts->back().seq;
    }
    for (auto& [k, n] : per_key) {
      CAPTURE(k);
      CHECK(n == facts_per_txn);
      auto rec = s.get_key(k);
      REQUIRE(rec.is_ok());
      CHECK(rec->status == key_status::completed);
    }
    for (auto a : acked)
      CHECK(per_key.count("k" + std::to_string(a)) == 1);
    next_txn = static_cast<int64_t>(per_key.size());
    CHECK(per_key.size() >= acked.size());
  }
}

} // namespace

TEST_CASE("crash: SIGKILL during a stream of transactions leaves only whole ones (5 rounds)") {
  crash_rounds(0, 12345);
}

TEST_CASE("crash: SIGKILL while the entity is closed and reopened every few transactions (WALs "
          "kept at close, and checkpointed) leaves only whole ones (5 rounds)") {
  crash_rounds(4, 4242);
}

namespace {

/// Five rounds of: a child creates entities e<n>, e<n+1>, ... (with spare files from a pool when
/// `spares`), the parent SIGKILLs it after a random number and checks every file.
void creation_storm(bool spares, unsigned seed) {
  test::temp_dir tmp;
  store_options o;
  o.data_dir = tmp.path();
  std::mt19937 rng(seed);
  std::set<int64_t> acked;
  int64_t next = 0;
  for (int round = 0; round < 5; ++round) {
    o.mode = round % 2 ? durability::full : durability::normal;
    test::child_process child;
    REQUIRE(child.run([&](int report) {
      if (spares) {
        auto pool = spare_pool::start(o.data_dir, 4);
        if (!pool)
          _exit(4);
        o.spares = *pool;
      }
      for (int64_t i = next;; ++i) {
        auto r = entity_store::open(o, entity_key{"acme", "ledger", "e" + std::to_string(i)});
        if (!r)
          _exit(2);
        r.value().reset();
        if (write(report, &i, sizeof i) != sizeof i)
          _exit(3);
      }
    }));
    int target = std::uniform_int_distribution<int>(3, 40)(rng);
    int64_t i = 0;
    for (int seen = 0; seen < target && read(child.reports(), &i, sizeof i) == sizeof i; ++seen)
      acked.insert(i);
    child.kill_now();
    // The child may have run ahead of the reads above (the pipe buffers its acknowledgements):
    // what it wrote before the kill is acknowledged too, and the creation cut short is the one
    // after the last of them.
    while (read(child.reports(), &i, sizeof i) == sizeof i)
      acked.insert(i);
    next = i + 2;
    // Every file present opens, names its own entity and verifies, or is a spare renamed into
    // place for the entity the child was creating (e<i+1>) and not yet claimed; every
    // acknowledged entity is there.
    auto check_files = [&](int& unclaimed) {
      std::set<std::string> ids;
      unclaimed = 0;
      for (auto& f : list_entity_files(tmp.path())) {
        store_options ro = o;
        ro.read_only = true;
        auto s = entity_store::open_file(f, ro);
        if (spares && !s && s.error().code() == errc::not_found) {
          CHECK(s.error().message().find("unclaimed") != std::string::npos);
          CHECK(f ==
                entity_key{"acme", "ledger", "e" + std::to_string(i + 1)}.file_path(tmp.path()));
          ++unclaimed;
          continue;
        }
        REQUIRE_MESSAGE(s.is_ok(), (f.string() + ": " + s.error().to_string()));
        CHECK(s.value()->verify()->ok);
        ids.insert(s.value()->key().id);
      }
      for (auto a : acked)
        CHECK(ids.count("e" + std::to_string(a)) == 1);
    };
    int unclaimed = 0;
    check_files(unclaimed);
    if (unclaimed > 0) { // the next writable open of that entity claims it
      store_options w = o;
      w.create_if_missing = false;
      auto s = entity_store::open(w, entity_key{"acme", "ledger", "e" + std::to_string(i + 1)});
      REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
      CHECK(s.value()->claimed_on_open());
      s.value().reset();
      check_files(unclaimed);
      CHECK(unclaimed == 0);
    }
    if (spares) { // the next pool keeps the whole spares and deletes what the kill cut short
      auto pool = spare_pool::start(o.data_dir, 4);
      REQUIRE(pool.is_ok());
      (*pool)->stop();
      auto st = (*pool)->get_stats();
      // Left: the ready spares' .db files, each with nothing but its empty -wal and -shm.
      int dbs = 0;
      // and making/ holds nothing: start() dropped what the kill left there, and the batch
      // the maker began before stop() finished whole.
      CHECK(std::filesystem::is_empty(tmp.path() / "spares" / "making"));
      for (auto& e : std::filesystem::directory_iterator(tmp.path() / "spares")) {
        if (e.is_directory())
          continue; // making/
        auto ext = e.path().extension();
        CHECK((ext == ".db" || ext == ".db-wal" || ext == ".db-shm"));
        dbs += ext == ".db";
        auto db = e.path();
        CHECK(std::filesystem::exists(db.replace_extension(".db")));
        if (ext != ".db")
          CHECK(std::filesystem::file_size(e.path()) == 0);
      }
      CHECK(dbs == st.reused + st.made);
      for (int k = 0; k < dbs; ++k) { // each kept one is an unclaimed entity file
        auto sp = (*pool)->take();
        REQUIRE(sp.has_value());
        store_options ro = o;
        ro.read_only = true;
        ro.immutable = true; // no -wal or -shm beside it
        auto s = entity_store::open_file(*sp, ro);
        REQUIRE_FALSE(s.is_ok());
        CHECK(s.error().message().find("unclaimed") != std::string::npos);
      }
    }
  }
}

} // namespace

TEST_CASE("crash: SIGKILL during a storm of entity creations leaves every file whole (5 rounds)") {
  // A new entity file is built aside and renamed into place: a kill at any moment leaves either
  // no file or a complete one (plus, at most, a stray *.tmp-* that is never taken for an entity).
  creation_storm(false, 777);
}

TEST_CASE("crash: SIGKILL during a storm of creations from spare files leaves every file whole "
          "or an unclaimed spare that the next open claims, and the pool's files whole (5 "
          "rounds)") {
  creation_storm(true, 778);
}
