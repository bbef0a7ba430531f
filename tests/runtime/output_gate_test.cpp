// output_gate_test.cpp: the output gate (runtime/src/actor/output_gate.hpp) driven without an actor
// system: named interleavings of commits, syncs that succeed and syncs that fail, then seeded
// random schedules checked against a model of the kernel's writeback errors (an error is
// reported to one fdatasync of the descriptor only, and the pages it lost are never written
// again). Test thread only.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

#include "actor/output_gate.hpp"

using namespace factum;
using namespace factum::detail;

namespace output_gate_test {

namespace {

/// What the gate delivered, by reply id.
struct outcome_log {
  std::map<int, call_reply> got;
};

struct recorder {
  outcome_log* log = nullptr;
  int id = 0;
  void deliver(call_reply r) {
    REQUIRE_MESSAGE(log->got.count(id) == 0, "reply " << id << " delivered twice");
    log->got.emplace(id, std::move(r));
  }
};

using gate = output_gate<recorder>;

struct fixture {
  gate g;
  outcome_log log;
  uint64_t tickets = 0;

  /// A turn's reply, produced after the commits so far, handed to the gate.
  void reply(int id) {
    gate::reply_batch v;
    v.emplace_back(recorder{&log, id}, call_reply::success("{\"id\":" + std::to_string(id) + "}"));
    g.hold(v);
  }
  bool ok(int id) const {
    auto it = log.got.find(id);
    return it != log.got.end() && it->second.ok;
  }
  bool failed(int id) const {
    auto it = log.got.find(id);
    return it != log.got.end() && !it->second.ok;
  }
  bool waiting(int id) const { return log.got.count(id) == 0; }
};

sync_report report(uint64_t covers, uint64_t ticket, uint64_t started_by_end, status st = {}) {
  return sync_report{covers, ticket, started_by_end, std::move(st)};
}

status eio() {
  return status{errc::io_error, "fdatasync x.db-wal: Input/output error"};
}

} // namespace

TEST_CASE("output gate: a reply waits for the sync that covers its commit, and no longer") {
  fixture f;
  f.g.committed();
  f.reply(1);
  CHECK(f.waiting(1));
  auto s1 = f.g.want_sync();
  REQUIRE(s1);
  CHECK(*s1 == 1);
  CHECK_FALSE(f.g.want_sync()); // generation 1 is covered already
  f.g.committed();
  f.reply(2);
  auto s2 = f.g.want_sync();
  REQUIRE(s2);
  CHECK(*s2 == 2);
  f.g.synced(report(1, 1, 2));
  CHECK(f.waiting(1)); // sync 2 started before sync 1 returned: it may have taken 1's error
  f.g.synced(report(2, 2, 2));
  CHECK(f.ok(1));
  CHECK(f.ok(2));
  CHECK(f.g.held() == 0);
  CHECK(f.g.in_flight() == 0);
}

TEST_CASE("output gate: replicating, a reply waits for both its sync and the log, in either "
          "order, and a refused commit fails what it covers") {
  fixture f;
  f.g.replicate(true);
  auto g1 = f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync());
  f.g.synced(report(1, 1, 1));
  CHECK(f.waiting(1)); // durable here, not yet in the log
  CHECK(f.g.log_pending());
  f.g.replicated(g1);
  CHECK(f.ok(1));
  CHECK_FALSE(f.g.log_pending());
  auto g2 = f.g.committed();
  f.reply(2);
  f.g.replicated(g2); // the log first
  CHECK(f.waiting(2));
  REQUIRE(f.g.want_sync());
  f.g.synced(report(2, 2, 2));
  CHECK(f.ok(2));
  auto g3 = f.g.committed();
  f.reply(3);
  auto g4 = f.g.committed();
  f.reply(4);
  REQUIRE(f.g.want_sync());
  f.g.synced(report(g4, 3, 3));
  f.g.replicated(g3);
  CHECK(f.ok(3));
  CHECK(f.waiting(4));
  f.g.quarantine(status{errc::unavailable, "the log refused commit 4"});
  CHECK(f.failed(4));
  CHECK(f.log.got.at(4).http_status == 503);
}

TEST_CASE("output gate: a sync alone in flight releases what it covers at once") {
  fixture f;
  f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync());
  f.g.committed();
  f.reply(2);
  f.g.synced(report(1, 1, 1)); // nothing else had started when it returned
  CHECK(f.ok(1));
  CHECK(f.waiting(2)); // its commit came after the sync began
  // A reply that writes nothing still waits behind the last commit (it may reveal it).
  f.reply(3);
  CHECK(f.waiting(3));
  REQUIRE(f.g.want_sync());
  f.g.synced(report(2, 2, 2));
  CHECK(f.ok(2));
  CHECK(f.ok(3));
  f.reply(4); // everything is durable: it leaves at once
  CHECK(f.ok(4));
}

TEST_CASE("output gate: a failed sync quarantines: held replies fail 503, retryable, and stay "
          "failed") {
  fixture f;
  f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync());
  f.g.committed();
  f.reply(2);
  REQUIRE(f.g.want_sync());
  f.g.synced(report(1, 1, 2, eio()));
  REQUIRE(f.g.quarantined());
  for (int id : {1, 2}) {
    REQUIRE(f.failed(id));
    auto& r = f.log.got.at(id);
    CHECK(r.http_status == 503);
    CHECK(r.code == "STORAGE_UNAVAILABLE");
    CHECK(r.retryable);
    CHECK(r.retry_after_ms > 0);
    CHECK(r.json()["detail"].get<std::string>().find("Input/output error") != std::string::npos);
  }
  // The overlapping sync returns 0 (the error went to the other one): nothing is released.
  f.g.synced(report(2, 2, 2));
  CHECK(f.g.in_flight() == 0);
  // Later replies fail at once; no sync is asked for.
  f.g.committed();
  f.reply(3);
  CHECK(f.failed(3));
  CHECK_FALSE(f.g.want_sync());
}

TEST_CASE("output gate: a sync that returned 0 while an overlapping one took the error releases "
          "nothing (the error may have been its pages')") {
  fixture f;
  f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync()); // sync A, ticket 1
  f.g.committed();
  f.reply(2);
  REQUIRE(f.g.want_sync()); // sync B, ticket 2
  // B's fdatasync returns 0 and is reported first; A had started, so B waits for A.
  f.g.synced(report(2, 2, 2));
  CHECK(f.waiting(1));
  CHECK(f.waiting(2));
  // A reports the error.
  f.g.synced(report(1, 1, 2, eio()));
  CHECK(f.failed(1));
  CHECK(f.failed(2));
}

TEST_CASE("output gate: a sync that started after another returned does not wait for it") {
  fixture f;
  f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync()); // ticket 1
  f.g.committed();
  f.reply(2);
  REQUIRE(f.g.want_sync()); // ticket 2
  // Ticket 2 returned when only 2 tickets existed; ticket 1 is still out: 2 waits.
  f.g.synced(report(2, 2, 2));
  CHECK(f.waiting(2));
  f.g.synced(report(1, 1, 1));
  CHECK(f.ok(1));
  CHECK(f.ok(2));
}

TEST_CASE("output gate: a commit synced in its own job (the slow path) counts like any sync") {
  fixture f;
  f.g.committed();
  f.reply(1);
  REQUIRE(f.g.want_sync()); // ticket 1, still out
  gate::reply_batch v;
  v.emplace_back(recorder{&f.log, 2}, call_reply::success("{}"));
  // The slow path commits and syncs (ticket 2) while ticket 1 runs, then its replies are held.
  f.g.committed_and_synced(report(0, 2, 2));
  f.g.hold(v);
  CHECK(f.waiting(1));
  CHECK(f.waiting(2));
  f.g.synced(report(1, 1, 2));
  CHECK(f.ok(1));
  CHECK(f.ok(2));
  CHECK_FALSE(f.g.want_sync()); // the slow path's sync covered its own commit
}

TEST_CASE("output gate: durability normal releases at commit") {
  fixture f;
  f.g.committed_durable();
  f.reply(1);
  CHECK(f.ok(1));
  CHECK_FALSE(f.g.want_sync());
}

TEST_CASE("output gate: random schedules of commits, syncs, writeback errors and reports never "
          "release a reply whose commit the kernel lost, and release every other one") {
  // The kernel model: a writeback error loses the commits not yet made durable by a sync that
  // returned before it; the first fdatasync to return after it reports it (once), every later
  // one returns 0; lost pages are never written again. Syncs take their ticket when their
  // thread starts them, return in any order, and are reported to the gate in any order.
  int schedules = 0, with_errors = 0, released_after_overlap = 0;
  for (uint64_t seed = 1; seed <= 4000; ++seed) {
    std::mt19937_64 rng(seed);
    fixture f;
    struct sync_job {
      uint64_t covers = 0;
      uint64_t ticket = 0; // 0: queued, not started
      bool returned = false;
      sync_report rep;
    };
    std::vector<sync_job> jobs;
    std::map<int, uint64_t> gen_of; // reply -> generation it was held at
    std::set<uint64_t> lost;
    bool error_pending = false;
    uint64_t kernel_durable = 0; // highest generation a sync returned for (truly written)
    int next_reply = 1, errors = 0;
    int commits = 2 + static_cast<int>(rng() % 5);
    for (int step = 0; step < 200; ++step) {
      std::vector<int> options;
      if (commits > 0)
        options.push_back(0); // commit + reply
      options.push_back(1);   // ask for a sync
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (jobs[i].ticket == 0)
          options.push_back(2); // a sync thread starts a job
        else if (!jobs[i].returned)
          options.push_back(3); // a fdatasync returns
        else
          options.push_back(4); // a report reaches the gate
      }
      if (errors == 0 && rng() % 8 == 0)
        options.push_back(5); // writeback error
      if (commits == 0 && jobs.empty() && f.g.held() == 0)
        break;
      int pick = options[rng() % options.size()];
      if (pick == 0) {
        --commits;
        f.g.committed();
        gen_of[next_reply] = f.g.commit_gen();
        f.reply(next_reply++);
      } else if (pick == 1) {
        if (auto c = f.g.want_sync())
          jobs.push_back(sync_job{*c, 0, false, {}});
      } else if (pick == 5) {
        ++errors;
        error_pending = true;
        for (uint64_t g = kernel_durable + 1; g <= f.g.commit_gen(); ++g)
          lost.insert(g);
      } else {
        // Act on a random job in the state that `pick` names.
        std::vector<size_t> idx;
        for (size_t i = 0; i < jobs.size(); ++i) {
          bool st = jobs[i].ticket == 0 ? pick == 2 : !jobs[i].returned ? pick == 3 : pick == 4;
          if (st)
            idx.push_back(i);
        }
        auto i = idx[rng() % idx.size()];
        auto& j = jobs[i];
        if (pick == 2) {
          j.ticket = ++f.tickets;
        } else if (pick == 3) {
          j.returned = true;
          j.rep.covers = j.covers;
          j.rep.ticket = j.ticket;
          j.rep.started_by_end = f.tickets;
          if (error_pending) {
            error_pending = false;
            j.rep.st = eio();
          } else {
            kernel_durable = std::max(kernel_durable, j.covers);
          }
        } else {
          f.g.synced(j.rep);
          jobs.erase(jobs.begin() + static_cast<long>(i));
        }
      }
      // Safety, at every step: nothing released whose commit was lost.
      for (auto& [id, r] : f.log.got)
        if (r.ok)
          REQUIRE_MESSAGE(lost.count(gen_of[id]) == 0, "seed " << seed << ": reply " << id
                                                               << " released, its commit "
                                                               << gen_of[id] << " lost");
    }
    // Drain: start, return and report every job left; ask for syncs until none is wanted.
    for (int round = 0; round < 50; ++round) {
      if (auto c = f.g.want_sync())
        jobs.push_back(sync_job{*c, 0, false, {}});
      if (jobs.empty())
        break;
      auto& j = jobs.front();
      if (j.ticket == 0)
        j.ticket = ++f.tickets;
      if (!j.returned) {
        j.returned = true;
        j.rep = sync_report{j.covers, j.ticket, f.tickets, {}};
        if (error_pending) {
          error_pending = false;
          j.rep.st = eio();
        } else {
          kernel_durable = std::max(kernel_durable, j.covers);
        }
      }
      f.g.synced(j.rep);
      jobs.erase(jobs.begin());
    }
    ++schedules;
    with_errors += errors > 0;
    // Liveness: every reply answered; without an error, every one of them ok.
    for (int id = 1; id < next_reply; ++id) {
      INFO("seed " << seed << " reply " << id);
      REQUIRE_FALSE(f.waiting(id));
      if (f.ok(id))
        REQUIRE(lost.count(gen_of[id]) == 0);
      if (errors == 0)
        REQUIRE(f.ok(id));
    }
    if (errors > 0 && !f.g.quarantined())
      ++released_after_overlap; // an error no sync reported (it came after the last return)
  }
  MESSAGE(schedules << " schedules, " << with_errors << " with a writeback error, "
                    << released_after_overlap << " of those with the error after the last sync");
  CHECK(with_errors > 100);
}

} // namespace output_gate_test
