// restore_cut_test.cpp: power cuts during rollbacks and forks (docs/operations.md,
// "Point-in-time recovery and forks"). A rollback builds the entity's file at a bookmark from
// the archive in a temporary file and renames it over the live one; a fork builds a new entity's
// file the same way and renames it into a directory that may be new. Each is acknowledged once
// the rename and its directory are synced. A forked child (data and archive under one recorded
// directory) keeps rolling `ledger` entities back and forking them, reporting each one it got
// an answer for; the parent cuts its power at a seeded moment, rebuilds the tree (replay.hpp:
// only what was synced survives) and starts the runtime there. Then every acknowledged rollback
// has its `rolled_back` fact right after its bookmark's seq, every acknowledged fork its entity
// with its `forked` fact first; an unacknowledged fork is wholly there or not at all; every
// chain verifies. Three rounds, each on the last one's tree. And a cluster move's adopt, the
// same rename, into a shard directory that does not exist yet. The test's thread and the
// child's.
#include <doctest/doctest.h>

#include <unistd.h>

#include <future>
#include <random>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "powerloss/harness.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;
using nlohmann::json;

namespace restore_cut_test {

namespace {

constexpr int sources = 3; ///< ledger entities rolled back and forked, per round
constexpr int max_ops = 40;

runtime_config cut_config(const fs::path& root) {
  runtime_config c;
  c.data_dir = root / "data";
  c.archive_dir = root / "archive";
  c.mode = durability::full;
  add_builtin_types(c.types);
  c.storage_threads = 2;
  return c;
}

entity_key source(int round, int s) {
  return {"acme", "ledger", "s" + std::to_string(round) + "-" + std::to_string(s)};
}
entity_key fork_of(int round, int op) {
  return {"acme", "ledger", "f" + std::to_string(round) + "-" + std::to_string(op)};
}
std::string op_note(int round, int op) {
  return "round " + std::to_string(round) + " op " + std::to_string(op);
}
/// Even ops fork, odd ones roll back; op `op` works on source op % sources.
bool is_fork(int op) {
  return op % 2 == 0;
}

/// `n` appends to `k`, in the child: any failure ends it (code 5).
void append(runtime& rt, const entity_key& k, int n) {
  for (int i = 0; i < n; ++i)
    if (!rt.call_sync(k, "append", json{{"type", "invocation"}, {"data", {{"i", i}}}}.dump()).ok)
      _exit(5);
}

/// The child's load: every op on a bookmark three commits before its source's newest; after a
/// rollback, five appends, so that the next rollback's bookmark is past this one's fact. Writes
/// each acknowledged op's number to `fd`; any failure ends the process (code 6), which the
/// parent sees as acknowledgements missing.
void run_ops(runtime& rt, int round, int fd) {
  for (int s = 0; s < sources; ++s)
    append(rt, source(round, s), 6);
  for (int op = 0; op < max_ops; ++op) {
    auto src = source(round, op % sources);
    auto newest = rt.bookmark(src, {std::nullopt, int64_t{1'000'000'000}});
    if (!newest)
      _exit(6);
    auto at = rt.bookmark(src, {std::nullopt, newest->seq - 3});
    if (!at)
      _exit(6);
    if (is_fork(op)) {
      if (!rt.fork_entity(src, fork_of(round, op), *at, op_note(round, op)))
        _exit(6);
    } else {
      if (!rt.rollback_entity(src, *at, op_note(round, op)))
        _exit(6);
    }
    int32_t v = op;
    if (::write(fd, &v, sizeof v) != sizeof v)
      _exit(3);
    if (!is_fork(op))
      append(rt, src, 5);
  }
}

using test::facts_of;

bool verifies(runtime& rt, const entity_key& k) {
  auto v = rt.call_sync(k, "@verify", "{}");
  return v.ok && v.json()["ok"] == true;
}

/// What the restarted runtime holds of round `round`'s ops, against those acknowledged.
struct op_check {
  int forks_found = 0, rollbacks_found = 0;
};

op_check check_ops(runtime& rt, const fs::path& entity_dir, int round, const std::set<int>& acked) {
  op_check out;
  std::set<std::string> rolled_back; // notes of the rolled_back facts found
  for (int s = 0; s < sources; ++s) {
    auto k = source(round, s);
    CHECK_MESSAGE(verifies(rt, k), k.to_string() << " does not verify");
    for (auto& f : facts_of(rt, k))
      if (f.value("type", "") == "lifecycle" && f.value("subtype", "") == "rolled_back") {
        auto d = f["data"];
        rolled_back.insert(d.value("note", ""));
        // The rolled-back file is the bookmark's commit, its fact right after it.
        CHECK_MESSAGE(f["seq"].get<int64_t>() == d["to_seq"].get<int64_t>() + 1, f.dump());
      }
  }
  for (int op = 0; op < max_ops; ++op) {
    bool acknowledged = acked.count(op) > 0;
    if (!is_fork(op)) {
      bool found = rolled_back.count(op_note(round, op)) > 0;
      out.rollbacks_found += found;
      if (acknowledged)
        CHECK_MESSAGE(found, "acknowledged rollback " << op_note(round, op) << " is lost");
      continue;
    }
    auto k = fork_of(round, op);
    std::error_code ec;
    if (!fs::exists(k.file_path(entity_dir), ec)) {
      CHECK_MESSAGE(!acknowledged, "acknowledged fork " << op_note(round, op) << " is lost");
      continue;
    }
    ++out.forks_found;
    auto fs_ = facts_of(rt, k);
    REQUIRE_MESSAGE(!fs_.empty(), k.to_string() << " has no fact");
    CHECK(fs_[0]["subtype"] == "forked");
    CHECK(fs_[0]["data"].value("note", "") == op_note(round, op));
    CHECK_MESSAGE(verifies(rt, k), k.to_string() << " does not verify");
  }
  return out;
}

} // namespace

TEST_CASE("power cut during rollbacks and forks: after the restart every acknowledged rollback "
          "has its fact right after its bookmark, every acknowledged fork its entity, forked "
          "first, the others whole or absent, and every chain verifies (3 rounds, each on "
          "the last one's tree)") {
  test::temp_dir tmp;
  std::mt19937 rng(43);
  auto dir = tmp.path() / "round0";
  fs::create_directories(dir / "data");
  for (int round = 0; round < 3; ++round) {
    auto next = tmp.path() / ("round" + std::to_string(round + 1));
    int kill_after = std::uniform_int_distribution<int>(2, max_ops - 1)(rng);
    auto base = powerloss::take_snapshot(dir);
    auto log = tmp.path() / "log";
    powerloss::recorded_child child(dir, log, [&](int fd) {
      auto r = runtime::start(cut_config(dir));
      if (!r)
        _exit(2);
      run_ops(*r.value(), round, fd);
      for (;;)
        ::pause(); // the parent cuts the power; the runtime is never stopped
    });
    child.read_acks(kill_after);
    auto acked = child.cut();
    REQUIRE_MESSAGE(static_cast<int>(acked.size()) >= kill_after,
                    "the child ended after " << acked.size() << " ops (a failed op)");
    CHECK(powerloss::whole_log_mismatches(base, dir, log, next.string() + "-whole") == 0);
    auto replay = powerloss::rebuild(base, dir, log, next);

    auto cfg = cut_config(next);
    auto entity_dir = cfg.entity_dir();
    auto r = runtime::start(std::move(cfg));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    auto c = check_ops(*r.value(), entity_dir, round, acked);
    r.value()->stop();
    MESSAGE("round " << round << ": cut after " << acked.size() << " acknowledged ops; writes "
                     << "kept " << replay.kept_writes << " lost " << replay.lost_writes << "; "
                     << c.forks_found << " forks and " << c.rollbacks_found << " rollbacks found");
    fs::remove_all(dir);
    dir = next;
  }
}

TEST_CASE("power cut after a move's adopt into a data directory with no spare pool (which makes "
          "the shard directories at its start): the adopted entity is there after the restart, "
          "the shard directory its rename made synced into its parent") {
  test::temp_dir tmp;
  const entity_key k{"acme", "ledger", "moved"};
  std::string bytes; // the entity's export from another node's data directory
  {
    auto cfg = cut_config(tmp.path() / "source");
    cfg.archive_dir.clear();
    {
      auto a = runtime::start(cfg);
      REQUIRE_MESSAGE(a.is_ok(), a.error().to_string());
      for (int i = 0; i < 3; ++i)
        REQUIRE(a.value()->call_sync(k, "append", json{{"type", "invocation"}}.dump()).ok);
      a.value()->stop(); // the export wants no live activation
    }
    auto a = runtime::start(cfg);
    REQUIRE_MESSAGE(a.is_ok(), a.error().to_string());
    auto e = a.value()->export_entity(k, 1, "n-a");
    REQUIRE_MESSAGE(e.is_ok(), e.error().to_string());
    bytes = std::move(e.value());
    a.value()->stop();
  }
  auto dir = tmp.path() / "home";
  fs::create_directories(dir / "data");
  auto base = powerloss::take_snapshot(dir);
  auto log = tmp.path() / "log";
  powerloss::recorded_child child(dir, log, [&](int fd) {
    auto cfg = cut_config(dir);
    cfg.archive_dir.clear();
    cfg.spare_files = 0; // a spare pool makes every shard directory at its start
    auto r = runtime::start(std::move(cfg));
    if (!r)
      _exit(2);
    std::promise<status> adopted;
    r.value()->adopt_entity(k, bytes, 1, [&](status st) { adopted.set_value(std::move(st)); });
    if (!adopted.get_future().get())
      _exit(6);
    int32_t v = 0;
    if (::write(fd, &v, sizeof v) != sizeof v)
      _exit(3);
    for (;;)
      ::pause(); // the parent cuts the power
  });
  child.read_acks(1);
  REQUIRE(child.cut().count(0) == 1);
  auto next = tmp.path() / "next";
  powerloss::rebuild(base, dir, log, next);

  auto cfg = cut_config(next);
  cfg.archive_dir.clear();
  REQUIRE_MESSAGE(fs::exists(k.file_path(cfg.entity_dir())), "the acknowledged adopt is lost");
  auto r = runtime::start(std::move(cfg));
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK(facts_of(*r.value(), k).size() == 3);
  CHECK(verifies(*r.value(), k));
  r.value()->stop();
}

} // namespace restore_cut_test
