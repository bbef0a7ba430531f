// follow_test.cpp: `tail` and `facts --follow` pick up facts that another process commits
// while they poll. The writer is a forked child that starts when the follower's first poll
// is done (a pipe, no sleeps); the follower stops after --max-facts (bounded by --timeout).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;

namespace {

/// Forks a child that waits for one byte on a pipe, then appends `n` "tick" facts to
/// acme/ledger/a1, each in its own commit, and exits 0 (non-zero on any failure).
struct writer_child {
  test::child_process child;
  bool told = false;

  writer_child(const fs::path& dir, int n) {
    REQUIRE(child.run([&](int, int go) {
      char c;
      if (::read(go, &c, 1) != 1)
        _exit(10);
      auto s =
        entity_store::open(opts_for(dir, durability::normal), entity_key{"acme", "ledger", "a1"});
      if (!s)
        _exit(11);
      for (int i = 0; i < n; ++i) {
        fact_draft d;
        d.type = "tick";
        d.timestamp_ms = t0 + 100'000 + i;
        d.data = {{"i", i}};
        if (!(*s)->append(d).is_ok() || !(*s)->commit().is_ok())
          _exit(12);
      }
      _exit(0);
    }));
  }

  void start() {
    if (!told) {
      told = true;
      REQUIRE(child.tell('g'));
      child.stop_telling();
    }
  }

  int wait() {
    start(); // never leave the child blocked
    child.wait();
    return WIFEXITED(child.status()) ? WEXITSTATUS(child.status()) : 100;
  }
};

} // namespace

TEST_CASE("follow: tail prints the last facts, then facts another process commits") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  writer_child child(tmp.path(), 5);
  tools::inspect_io io;
  int64_t polls = 0;
  io.on_poll = [&](int64_t) {
    ++polls;
    child.start(); // the follower has read the file once: now let the writer go
  };
  auto r = run_cli({"inspect", "tail", "--data", tmp.path().string(), "acme/ledger/a1", "--lines",
                    "2", "--max-facts", "5", "--timeout", "60", "--interval", "20"},
                   io);
  CHECK(child.wait() == 0);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<int64_t> seqs;
  std::vector<int> ticks;
  for (auto& l : lines(r.out)) {
    auto j = nlohmann::json::parse(l);
    seqs.push_back(j["seq"]);
    if (j["type"] == "tick")
      ticks.push_back(j["data"]["i"]);
  }
  CHECK(seqs == std::vector<int64_t>{11, 12, 13, 14, 15, 16, 17});
  CHECK(ticks == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(polls >= 1);
}

TEST_CASE("follow: facts --follow with a filter prints only new matching facts, as a table") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  writer_child child(tmp.path(), 4);
  tools::inspect_io io;
  io.on_poll = [&](int64_t) { child.start(); };
  auto r =
    run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/a1", "--type", "tick",
             "--follow", "--max-facts", "4", "--timeout", "60", "--interval", "20", "--table"},
            io);
  CHECK(child.wait() == 0);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  auto ls = lines(r.out);
  REQUIRE(ls.size() == 5); // header + 4 ticks
  CHECK(ls[0].rfind("   SEQ  TIME", 0) == 0);
  CHECK(ls[1].rfind("    13  2024-01-17T14:01:40.000Z  tick", 0) == 0);
  CHECK(ls[4].rfind("    16  2024-01-17T14:01:40.003Z  tick", 0) == 0);
}

TEST_CASE("follow: with nothing new it ends at --timeout, and --max-facts 0 means no bound") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  int64_t polls = 0;
  tools::inspect_io io;
  io.on_poll = [&](int64_t) { ++polls; };
  auto r = run_cli({"inspect", "tail", "--data", tmp.path().string(), "acme/ledger/a1", "--lines",
                    "1", "--timeout", "0.1", "--interval", "10"},
                   io);
  CHECK(r.code == 0);
  CHECK(lines(r.out).size() == 1);
  CHECK(polls >= 1);
  CHECK(polls <= 11);
  // --after-seq replays everything after it, then follows.
  auto after = run_cli({"inspect", "tail", "--data", tmp.path().string(), "acme/ledger/a1",
                        "--after-seq", "9", "--timeout", "0.05", "--interval", "10"});
  CHECK(after.code == 0);
  CHECK(lines(after.out).size() == 3);
  CHECK(run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/a1", "--follow",
                 "--newest"})
          .code == 2);
}

TEST_CASE("live: facts and verify read an entity that another process keeps committing, "
          "checkpointing and restarting its WAL, and each read is one whole committed state") {
  // The writer commits one fact at a time and checkpoints (letting the WAL restart) every 8
  // commits. It commits on credit: each round the reader grants 200 commits and at once reads,
  // so that the reads meet commits, checkpoints and restarts in flight; the writer stops when
  // the credit pipe closes (at most 25 x 200 commits: bounded, no sleeps).
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  // A writer that died would make a write to the pipe kill this process: a failed REQUIRE instead.
  struct sigaction ignore {
  }, old_pipe{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);
  test::child_process child;
  REQUIRE(child.run([&](int, int credit) {
    auto o = opts_for(tmp.path(), durability::normal);
    o.auto_checkpoint = false;
    auto s = entity_store::open(o, entity_key{"acme", "ledger", "a1"});
    if (!s)
      _exit(11);
    int left = 0;
    int checkpoints = 0; // done, not skipped: the WAL restarted after them
    for (int i = 0;; ++i) {
      if (left == 0) {
        char c;
        if (::read(credit, &c, 1) != 1)
          _exit(checkpoints > 0 ? 0 : 14); // the reader is done; 14: no restart was exercised
        left = 200;
      }
      --left;
      fact_draft d;
      d.type = "tick";
      d.timestamp_ms = t0 + 100'000 + i;
      d.data = {{"i", i}, {"pad", std::string(300, 'x')}};
      if (!(*s)->append(d).is_ok() || !(*s)->commit().is_ok())
        _exit(12);
      // BUSY: a reader was copying the file (a checkpoint waits for that: it is skipped).
      if (i % 8 == 7) {
        auto st = (*s)->checkpoint();
        if (!st.is_ok() && st.code() != errc::busy)
          _exit(13);
        checkpoints += st.is_ok();
      }
    }
  }));
  int64_t last = 0;
  for (int round = 0; round < 25; ++round) {
    CAPTURE(round);
    REQUIRE(child.tell('c'));
    auto r = run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/a1",
                      "--limit", "100000", "--json"});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    int64_t seq = 0;
    bool contiguous = true;
    for (auto& l : lines(r.out))
      contiguous = contiguous && nlohmann::json::parse(l)["seq"].get<int64_t>() == ++seq;
    CHECK(contiguous);  // from 1, none missing, none torn
    CHECK(seq >= 12);   // the fixture's facts at least
    CHECK(seq >= last); // never older than a state already read
    last = seq;
    auto v = run_cli({"inspect", "verify", "--data", tmp.path().string(), "acme/ledger/a1"});
    CHECK_MESSAGE(v.code == 0, v.out << v.err);
  }
  child.stop_telling();
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  REQUIRE(child.wait());
  REQUIRE(WIFEXITED(child.status()));
  CHECK(WEXITSTATUS(child.status()) == 0);
  // Every commit granted was made (the reads' own figures depend on the scheduler: reported).
  auto end = run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/a1",
                      "--limit", "100000", "--json"});
  REQUIRE(end.code == 0);
  CHECK(lines(end.out).size() == 12 + 25 * 200);
  MESSAGE("the last read during the writes saw " << last << " facts of " << 12 + 25 * 200);
}
