// archive_cut_test.cpp: power cuts with a continuous archive (docs/operations.md, "Point-in-time
// recovery and forks"). The archive is not synced per commit: a commit's WAL bytes are copied
// into it unsynced, and its copy of a WAL generation is fdatasynced only before the live WAL
// loses those frames (a restart, a truncating close); an open after a cut copies from the live
// WAL what the archive lost (the records of those commits merged into one). These rounds check
// that promise on the tree a cut leaves: a forked
// child loads `ledger` entities (durability full, entities closing and WALs starting over all the
// time) with data and archive under one recorded directory; the parent cuts its power at a
// seeded random moment and rebuilds the tree (replay.hpp: only what was synced survives), starts
// the runtime there (every acknowledged call replays) and stops it. Then, per entity: its
// archive reaches back to seq 0 without a gap, its newest commit is the entity file's last seq, and
// that commit rebuilt holds every call acknowledged before the cut and verifies; the newest commit
// of every epoch and sampled commits of every generation rebuild to exactly their seq with a
// verified chain; a sample of acknowledged calls is found at the first commit that reaches its
// fact. The test's thread and the child's threads.
#include <doctest/doctest.h>

#include <unistd.h>

#include <map>
#include <random>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/wal_archive.hpp"
#include "powerloss/harness.hpp"
#include "support/keyed_load.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace archive_cut_test {

namespace {

constexpr int keys_per_round = 900;

/// Data and archive under `root`; entities keep closing (3 open at most, for 8) and WALs keep
/// starting over, so that the cuts land in the archive's restarts and closes too.
runtime_config archive_config(const fs::path& root) {
  runtime_config c;
  c.data_dir = root / "data";
  c.archive_dir = root / "archive";
  c.mode = durability::full;
  add_builtin_types(c.types);
  c.storage_threads = 4;
  c.max_active_entities = 3;
  c.wal_checkpoint_frames = 40;
  return c;
}

/// The entity file rebuilt at `p` of the archive at `dir` (under a fresh name in `scratch`),
/// opened read-only.
std::unique_ptr<entity_store> rebuilt(const fs::path& dir, const archive_point& p,
                                      const fs::path& scratch) {
  static int made = 0;
  auto out = scratch / ("p" + std::to_string(++made) + ".db");
  auto st = materialize_archive_point(dir, p, out);
  REQUIRE_MESSAGE(st.is_ok(), p.bookmark() << ": " << st.to_string());
  store_options ro;
  ro.read_only = true;
  auto s = entity_store::open_file(out, ro);
  REQUIRE_MESSAGE(s.is_ok(), p.bookmark() << ": " << s.error().to_string());
  return std::move(s.value());
}

bool verifies(entity_store& s) {
  auto v = s.verify();
  return v.is_ok() && v->ok;
}

struct archive_check {
  int entities = 0;
  int points = 0;
  int epochs = 0;
  int generations = 0;
  int rebuilds = 0;
};

/// The archive of every entity of `load` under `root` (the runtime stopped), against the
/// entity files and the calls acknowledged before the cut.
archive_check check_archives(const fs::path& root, const test::keyed_load& load,
                             const std::set<int>& acked, std::mt19937& rng) {
  archive_check out;
  auto scratch = root / "scratch";
  for (int e = 0; e < load.entities; ++e) {
    fs::remove_all(scratch); // the last entity's rebuilt files (closed by now)
    fs::create_directories(scratch);
    auto key = load.key_for(e);
    store_options ro;
    ro.data_dir = root / "data";
    ro.read_only = true;
    auto live = entity_store::open(ro, key);
    REQUIRE_MESSAGE(live.is_ok(), key.to_string() << ": " << live.error().to_string());
    auto dir = entity_archive_dir(root / "archive", key);
    auto points = archive_points(dir);
    REQUIRE_MESSAGE(points.is_ok(), key.to_string() << ": " << points.error().to_string());
    const auto& pts = *points;
    ++out.entities;
    out.points += static_cast<int>(pts.size());
    INFO(key.to_string() << ": " << pts.size() << " archived commits");

    // The archive reaches back to the entity's first open (seq 0: nothing prunes here) without
    // a gap: seqs never go down, and an epoch that a cut made start anew (a lost note of the
    // archive's own close) begins where the last one ended. A cut may merge the records of
    // the commits after the archive's last sync into one (the catch-up at the next open),
    // never lose the commits themselves.
    CHECK(pts.front().seq == 0);
    for (size_t i = 1; i < pts.size(); ++i) {
      CHECK_MESSAGE(pts[i].seq >= pts[i - 1].seq, pts[i].bookmark());
      if (pts[i].epoch != pts[i - 1].epoch)
        CHECK_MESSAGE(pts[i].seq == pts[i - 1].seq,
                      "epoch " << pts[i].epoch << " starts at seq " << pts[i].seq
                               << ", the last one ended at " << pts[i - 1].seq);
    }

    // The newest commit is the entity file, and it holds every acknowledged call.
    CHECK(pts.back().seq == live.value()->last_seq());
    auto newest = rebuilt(dir, pts.back(), scratch);
    ++out.rebuilds;
    CHECK(newest->last_seq() == pts.back().seq);
    CHECK(newest->head_hash() == live.value()->head_hash());
    CHECK(verifies(*newest));
    for (int k : acked)
      if (load.key_for(k) == key) {
        auto r = newest->get_key(load.idem(k));
        CHECK_MESSAGE(r.is_ok(), "acknowledged " << load.idem(k) << " is not in the archive");
      }

    // The newest commit of each epoch (it replays every generation of the epoch) and one
    // commit drawn from each generation rebuild to exactly their seq, chains verified.
    std::map<std::pair<int64_t, int64_t>, std::vector<const archive_point*>> by_gen;
    std::map<int64_t, const archive_point*> last_of_epoch;
    for (const auto& p : pts) {
      by_gen[{p.epoch, p.gen}].push_back(&p);
      last_of_epoch[p.epoch] = &p;
    }
    out.epochs += static_cast<int>(last_of_epoch.size());
    out.generations += static_cast<int>(by_gen.size());
    std::vector<const archive_point*> sample;
    for (auto& [epoch, p] : last_of_epoch)
      sample.push_back(p);
    for (auto& [gen, ps] : by_gen)
      sample.push_back(ps[std::uniform_int_distribution<size_t>(0, ps.size() - 1)(rng)]);
    for (const auto* p : sample) {
      if (!archive_point_restorable(dir, *p))
        continue; // nothing prunes here; kept for clarity of what a rebuild needs
      auto s = rebuilt(dir, *p, scratch);
      ++out.rebuilds;
      CHECK_MESSAGE(s->last_seq() == p->seq, p->bookmark());
      CHECK_MESSAGE(verifies(*s), p->bookmark() << " does not verify");
      s.reset();
    }

    // A few acknowledged calls: the first archived commit that reaches the call's fact holds
    // its key (the archive has the commit itself, not only a later one; an epoch whose base
    // already held the fact is reached by its base).
    std::vector<int> mine;
    for (int k : acked)
      if (load.key_for(k) == key)
        mine.push_back(k);
    std::shuffle(mine.begin(), mine.end(), rng);
    if (mine.size() > 3)
      mine.resize(3);
    for (int k : mine) {
      fact_filter f;
      f.idempotency_key = load.idem(k);
      auto facts = live.value()->query(f);
      REQUIRE(facts.is_ok());
      REQUIRE(facts->size() == 1);
      int64_t seq = facts->front().seq;
      const archive_point* first = nullptr;
      for (const auto& p : pts)
        if (p.seq >= seq) {
          first = &p;
          break;
        }
      REQUIRE(first != nullptr);
      auto s = rebuilt(dir, *first, scratch);
      ++out.rebuilds;
      CHECK_MESSAGE(s->get_key(load.idem(k)).is_ok(), load.idem(k)
                                                        << " is not at " << first->bookmark()
                                                        << " (fact seq " << seq << ")");
      s.reset();
    }
  }
  fs::remove_all(scratch);
  return out;
}

} // namespace

TEST_CASE("power cut with a continuous archive: after the restart every acknowledged call is in "
          "the archive at its own commit and at the newest, which is the entity file, and every "
          "sampled commit rebuilds to its seq with a verified chain (3 rounds, each on the last "
          "one's tree, entities closing and WALs starting over all the time)") {
  test::temp_dir tmp;
  std::mt19937 rng(36);
  auto dir = tmp.path() / "round0";
  fs::create_directories(dir / "data");
  for (int round = 0; round < 3; ++round) {
    auto next = tmp.path() / ("round" + std::to_string(round + 1));
    int kill_after = std::uniform_int_distribution<int>(100, 700)(rng);
    test::keyed_load load{"a", round, 8, keys_per_round};
    auto base = powerloss::take_snapshot(dir);
    auto log = tmp.path() / "log";
    powerloss::recorded_child child(dir, log, [&](int fd) {
      auto r = runtime::start(archive_config(dir));
      if (!r)
        _exit(2);
      load.run(*r.value(), fd);
      for (;;)
        ::pause(); // the parent cuts the power; the runtime is never stopped
    });
    child.read_acks(kill_after);
    auto acked = child.cut();
    // The log's own check: taken whole, it rebuilds the tree the child left (the archive's
    // base copies included).
    CHECK(powerloss::whole_log_mismatches(base, dir, log, next.string() + "-whole") == 0);
    auto replay = powerloss::rebuild(base, dir, log, next);
    CHECK(replay.lost_writes > 0);

    auto r = runtime::start(archive_config(next));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    auto res = load.retry_and_check(*r.value(), acked);
    r.value()->stop();
    CHECK_MESSAGE(res.acked_ran_again == 0, res.first_problem);
    CHECK_MESSAGE(res.wrong_effects == 0, res.first_problem);
    CHECK_MESSAGE(res.bad_chains == 0, res.first_problem);

    auto a = check_archives(next, load, acked, rng);
    MESSAGE("round " << round << ": cut after " << acked.size() << " acknowledged calls; writes "
                     << "kept " << replay.kept_writes << " lost " << replay.lost_writes << "; "
                     << a.points << " archived commits in " << a.epochs << " epochs and "
                     << a.generations << " generations of " << a.entities << " entities, "
                     << a.rebuilds << " rebuilt");
    CHECK(a.entities == load.entities);
    fs::remove_all(dir);
    dir = next;
  }
}

namespace {

/// One commit of a key and its fact, as a turn writes it; not synced (the output gate's sync is
/// entity_store::sync()). Any failure ends the child (code 5).
void commit_key(entity_store& s, const std::string& k) {
  fact_draft d;
  d.type = "invocation";
  d.idempotency_key = k;
  d.data = {{"k", k}};
  if (!s.begin_turn() || !s.begin_key(k, "fp", 0, now_ms()) || !s.append(d) ||
      !s.complete_key(k, "{}") || !s.end_turn(true) || !s.commit())
    _exit(5);
}

} // namespace

TEST_CASE("power cut right after the archive syncs a generation's first commit, before the output "
          "gate syncs the live WAL: the archive is not past the entity file (it kept a commit the "
          "file lost, and the next open started an epoch below it)") {
  test::temp_dir tmp;
  auto dir = tmp.path() / "cut";
  fs::create_directories(dir / "data");
  store_options o;
  o.data_dir = dir / "data";
  o.archive_dir = dir / "archive";
  o.defer_sync = true;
  o.wal_kept_on_close_kib = 0; // the close truncates the WAL: the next commit starts a new one
  const entity_key key{"acme", "ledger", "first"};
  auto base = powerloss::take_snapshot(dir);
  auto log = tmp.path() / "log";
  powerloss::recorded_child child(dir, log, [&](int fd) {
    {
      auto s = entity_store::open(o, key);
      if (!s)
        _exit(2);
      commit_key(*s.value(), "k0");
      if (!s.value()->sync())
        _exit(5);
    } // closed: the WAL is truncated
    auto s = entity_store::open(o, key);
    if (!s)
      _exit(2);
    commit_key(*s.value(), "k1"); // a WAL header with new salts: the archive syncs this commit
    int32_t v = 0;
    if (::write(fd, &v, sizeof v) != sizeof v)
      _exit(3);
    for (;;)
      ::pause(); // cut before the store's own sync()
  });
  child.read_acks(1);
  child.cut();
  auto next = tmp.path() / "next";
  powerloss::rebuild(base, dir, log, next);

  auto reopened = o;
  reopened.data_dir = next / "data";
  reopened.archive_dir = next / "archive";
  auto s = entity_store::open(reopened, key);
  REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
  auto live_seq = s.value()->last_seq();
  auto pts = archive_points(entity_archive_dir(reopened.archive_dir, key));
  REQUIRE_MESSAGE(pts.is_ok(), pts.error().to_string());
  REQUIRE_FALSE(pts->empty());
  for (size_t i = 0; i < pts->size(); ++i) {
    const auto& p = (*pts)[i];
    CHECK_MESSAGE(p.seq <= live_seq, p.bookmark() << " is past the entity file's seq " << live_seq);
    if (i > 0 && p.epoch != (*pts)[i - 1].epoch)
      CHECK_MESSAGE(p.seq == (*pts)[i - 1].seq, "epoch " << p.epoch << " starts at seq " << p.seq
                                                         << ", the last one ended at "
                                                         << (*pts)[i - 1].seq);
  }
  CHECK(pts->back().seq == live_seq);
}

} // namespace archive_cut_test
