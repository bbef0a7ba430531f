// syscall_faults_test.cpp: power cuts after failed system calls. The recorded child's fault plan
// (write_log.hpp) fails chosen calls as a failing disk would: a WAL fdatasync with EIO (after
// which Linux has dropped what the failed writeback held: replay.hpp models it), the WAL's open
// for its sync with EMFILE, WAL writes short or with ENOSPC. The load goes on through the fault,
// its client retrying what fails retryably, and the parent then cuts the power and checks on the
// tree the cut leaves what durability `full` promises: no call answered 2xx that the failure
// lost, every key retried runs exactly once, every chain verifies (docs/reliability.md, "Power
// cuts after failed system calls"). The model's failed-sync rule and the plan itself are tested
// first, on plain file calls. The test's thread; the child's runtime runs in the forked child.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "powerloss/harness.hpp"
#include "powerloss/replay.hpp"
#include "powerloss/write_log.hpp"
#include "support/keyed_load.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;
using powerloss::fault;
using powerloss::op;

namespace syscall_faults_test {

namespace {

using powerloss::file_bytes;

// In a recorded child: each step's outcome is checked, a wrong one exits with its own code.
void expect(bool ok, int code) {
  if (!ok)
    _exit(code);
}

int open_rw(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  expect(fd >= 0, 9);
  return fd;
}

void put(int fd, const std::string& s, off_t at, int code) {
  expect(::pwrite(fd, s.data(), s.size(), at) == static_cast<ssize_t>(s.size()), code);
}

void sync_dir(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  expect(fd >= 0 && ::fsync(fd) == 0, 8);
  ::close(fd);
}

// A sync that must fail with EIO.
void sync_fails(int fd, int code) {
  expect(::fdatasync(fd) == -1 && errno == EIO, code);
}

fault sync_eio(const std::string& ends, uint64_t first, uint64_t count = 1) {
  fault f;
  f.what = fault::sync;
  f.path_ends = ends;
  f.error = EIO;
  f.first = first;
  f.count = count;
  return f;
}

} // namespace

TEST_CASE("power cut model, failed sync: what no sync had made durable when a sync failed is "
          "lost for good, even when a later sync of the file returns 0 (what is written again "
          "after it survives), and every other descriptor of the file learns of the failure "
          "once") {
  test::temp_dir tmp;
  auto root = tmp.path() / "root";
  fs::create_directories(root);
  auto base = powerloss::take_snapshot(root);
  auto log = tmp.path() / "log";
  std::vector<fault> plan = {sync_eio("/f", 2), sync_eio("/g", 1), sync_eio("/h", 1)};
  powerloss::record_child(
    root, log,
    [&] {
      // f: synced, then a write whose sync fails; the next sync returns 0 but cannot save it.
      int f = open_rw(root / "f");
      put(f, "aaaa", 0, 10);
      expect(::fdatasync(f) == 0, 11);
      put(f, "bbbb", 4, 12);
      sync_fails(f, 13);
      expect(::fdatasync(f) == 0, 14);
      put(f, "cccc", 8, 15);
      expect(::fdatasync(f) == 0, 16);
      // g: the same bytes written again after the failure, and synced: they survive.
      int g = open_rw(root / "g");
      put(g, "xxxx", 0, 20);
      sync_fails(g, 21);
      put(g, "xxxx", 0, 22);
      expect(::fdatasync(g) == 0, 23);
      // h: two descriptors open when the sync of one fails; the other's next sync fails too
      // (once), and one opened after the failure never hears of it.
      int h1 = open_rw(root / "h"), h2 = open_rw(root / "h");
      put(h1, "hhhh", 0, 30);
      sync_fails(h1, 31);
      sync_fails(h2, 32);
      expect(::fdatasync(h2) == 0 && ::fdatasync(h1) == 0, 33);
      int h3 = open_rw(root / "h");
      put(h3, "HH", 4, 34);
      expect(::fdatasync(h3) == 0, 35);
      sync_dir(root);
    },
    plan);
  auto out = tmp.path() / "cut";
  auto st = powerloss::rebuild(base, root, log, out);
  CHECK(file_bytes(out / "f") == std::string("aaaa\0\0\0\0cccc", 12));
  CHECK(file_bytes(out / "g") == "xxxx");
  CHECK(file_bytes(out / "h") == std::string("\0\0\0\0HH", 6));
  CHECK(st.injected == 3);
  CHECK(st.write_errors == 3);
  CHECK(st.failed_syncs == 4); // f, g, h twice
  CHECK(st.lost_to_errors == 3);
  // Every change as if synced: what the process left, failures or not.
  auto all = tmp.path() / "all";
  powerloss::rebuild(base, root, log, all, true);
  CHECK(file_bytes(all / "f") == "aaaabbbbcccc");
  CHECK(file_bytes(all / "h") == "hhhhHH");
}

namespace {

// A log written by hand (write_log.hpp's format), for orders of events a test cannot make
// happen on purpose with real calls.
class log_writer {
 public:
  explicit log_writer(const fs::path& p) : out_(p, std::ios::binary | std::ios::trunc) {}
  /// Appends a record; returns its seq.
  uint64_t put(op kind, uint64_t ino, uint64_t offset = 0, uint64_t len = 0,
               const std::string& data = {}) {
    powerloss::record_header h;
    h.kind = static_cast<uint8_t>(kind);
    h.ino = ino;
    h.offset = offset;
    h.len = len;
    h.data_len = static_cast<uint32_t>(data.size());
    out_.write(reinterpret_cast<const char*>(&h), sizeof h);
    out_.write(data.data(), static_cast<std::streamsize>(data.size()));
    out_.flush();
    return seq_++;
  }
  /// Appends an add_name of a new file `ino` at `path` in directory `dir`.
  uint64_t add_name(uint64_t ino, uint64_t dir, const std::string& path) {
    powerloss::record_header h;
    h.kind = static_cast<uint8_t>(op::add_name);
    h.ino = ino;
    h.dir = dir;
    h.offset = 1;
    h.path_len = static_cast<uint32_t>(path.size());
    out_.write(reinterpret_cast<const char*>(&h), sizeof h);
    out_.write(path.data(), static_cast<std::streamsize>(path.size()));
    out_.flush();
    return seq_++;
  }

 private:
  std::ofstream out_;
  uint64_t seq_ = 0;
};

} // namespace

TEST_CASE("power cut model, failed sync: a sync that returned 0 saves a change of a file's bytes "
          "only if it returned before the writeback error, and a name in a directory whose sync "
          "failed is made durable by the next good sync (logs written by hand)") {
  test::temp_dir tmp;
  auto root = tmp.path() / "root";
  fs::create_directories(root);
  { std::ofstream(root / "w") << "old!"; }
  auto base = powerloss::take_snapshot(root);
  uint64_t ino = base.names.at("w").ino;
  auto replay = [&](const char* name, auto write_log) {
    auto log = tmp.path() / (std::string(name) + ".log");
    {
      log_writer w(log);
      write_log(w);
    }
    auto out = tmp.path() / name;
    powerloss::rebuild(base, root, log, out);
    return out;
  };
  auto w_of = [&](const char* name, auto write_log) {
    return file_bytes(replay(name, write_log) / "w");
  };
  // A sync that began after the write but returned after the error (another sync's): lost.
  CHECK(w_of("overlap", [&](log_writer& w) {
          w.put(op::write, ino, 0, 4, "new!");
          auto s = w.put(op::sync_begin, ino);
          w.put(op::write_error, ino);
          auto x = w.put(op::sync_begin, ino);
          w.put(op::sync_failed, ino, x, EIO);
          w.put(op::sync_end, ino, s);
        }) == "old!");
  // The same sync returned before the error: kept.
  CHECK(w_of("before", [&](log_writer& w) {
          w.put(op::write, ino, 0, 4, "new!");
          auto s = w.put(op::sync_begin, ino);
          w.put(op::sync_end, ino, s);
          w.put(op::write_error, ino);
          auto x = w.put(op::sync_begin, ino);
          w.put(op::sync_failed, ino, x, EIO);
        }) == "new!");
  // Written after the error and synced: kept.
  CHECK(w_of("after", [&](log_writer& w) {
          w.put(op::write_error, ino);
          w.put(op::write, ino, 0, 4, "new!");
          auto s = w.put(op::sync_begin, ino);
          w.put(op::sync_end, ino, s);
        }) == "new!");
  // A name: a failed sync of its directory does not undo it; the next good one makes it durable.
  uint64_t dir = base.names.at("").ino;
  CHECK(fs::exists(replay("name",
                          [&](log_writer& w) {
                            w.add_name(ino + 1000, dir, (root / "n").string());
                            w.put(op::write_error, dir);
                            auto x = w.put(op::sync_begin, dir);
                            w.put(op::sync_failed, dir, x, EIO);
                            auto s = w.put(op::sync_begin, dir);
                            w.put(op::sync_end, dir, s);
                          }) /
                   "n"));
}

TEST_CASE("power cut model, fault plan: the Nth matching open fails with EMFILE, a write comes "
          "back short or fails with ENOSPC, and each failure is in the log") {
  test::temp_dir tmp;
  auto root = tmp.path() / "root";
  fs::create_directories(root);
  auto base = powerloss::take_snapshot(root);
  auto log = tmp.path() / "log";
  fault emfile;
  emfile.what = fault::open;
  emfile.path_ends = "/o";
  emfile.accmode = O_RDONLY;
  emfile.error = EMFILE;
  emfile.first = 2;
  fault shorter;
  shorter.what = fault::write;
  shorter.path_has = "/p";
  shorter.first = 1;
  fault full = shorter;
  full.error = ENOSPC;
  full.first = 2;
  full.count = 2;
  powerloss::record_child(root, log,
                          [&] {
                            int o = open_rw(root / "o"); // read-write: not counted
                            int r1 = ::open((root / "o").c_str(), O_RDONLY | O_CLOEXEC);
                            int r2 = ::open((root / "o").c_str(), O_RDONLY | O_CLOEXEC);
                            expect(r2 == -1 && errno == EMFILE, 40);
                            int r3 = ::open((root / "o").c_str(), O_RDONLY | O_CLOEXEC);
                            expect(o >= 0 && r1 >= 0 && r3 >= 0, 41);
                            int p = open_rw(root / "p");
                            expect(::pwrite(p, "12345678", 8, 0) == 4, 42);
                            expect(::pwrite(p, "zz", 2, 4) == -1 && errno == ENOSPC, 43);
                            expect(::write(p, "zz", 2) == -1 && errno == ENOSPC, 44);
                            expect(::pwrite(p, "5678", 4, 4) == 4, 45);
                            expect(::fdatasync(p) == 0, 46);
                            sync_dir(root);
                          },
                          {emfile, shorter, full});
  auto out = tmp.path() / "cut";
  auto st = powerloss::rebuild(base, root, log, out);
  CHECK(file_bytes(out / "p") == "12345678");
  CHECK(st.injected == 4);
  CHECK(st.failed_syncs == 0);
  std::vector<std::string> failed;
  for (auto& n : powerloss::logged_names(log))
    if (n.kind == op::injected)
      failed.push_back(fs::path(n.path).filename().string());
  CHECK(failed == std::vector<std::string>{"o", "p", "p", "p"});
}

namespace {

// -- rounds -------------------------------------------------------------------------------------

constexpr int fault_keys = 600;
constexpr int fault_entities = 4;
constexpr int32_t quarantine_mark = -2; // the child's runtime logged entity_quarantined
constexpr int32_t fault_mark = -4;      // the fault plan failed a call

// With `churn`, at most 2 of the 4 entities are open (entities keep closing and opening) and
// WALs are checkpointed every 40 frames. `archive_dir`: the continuous archive's (none if empty).
runtime_config fault_config(const fs::path& dir, bool churn, const fs::path& archive_dir = {}) {
  runtime_config c;
  c.data_dir = dir;
  c.archive_dir = archive_dir;
  // With the archive, every close truncates the WAL: the first commit after a reopen is then
  // synced by the archive before the entity's own sync has opened its descriptor.
  if (!archive_dir.empty())
    c.wal_kept_on_close_kib = 0;
  c.mode = durability::full;
  add_builtin_types(c.types);
  c.storage_threads = 4;
  c.spare_files = 0; // the spare pool's files and syncs would be most of each round's time
  if (churn) {
    c.max_active_entities = 2;
    c.wal_checkpoint_frames = 40;
  }
  return c;
}

/// What the child reported on its pipe.
struct reports {
  std::set<int> acked;
  int quarantines = 0, retries = 0, recovered = 0, faults = 0;
  bool ended = false; ///< every call answered, or the pipe closed

  void take(int32_t v) {
    if (v >= 0)
      acked.insert(v);
    else if (v == -1)
      ended = true;
    else if (v == quarantine_mark)
      ++quarantines;
    else if (v == test::keyed_load::retried_mark)
      ++retries;
    else if (v == test::keyed_load::recovered_mark)
      ++recovered;
    else if (v == fault_mark)
      ++faults;
  }
};

/// Reads `fd` into `r` until `enough(r)`, the end, or `deadline` (false then).
bool read_reports(int fd, reports& r, const std::function<bool(const reports&)>& enough,
                  std::chrono::steady_clock::time_point deadline) {
  while (!r.ended && !enough(r)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int n = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    int32_t v;
    if (::read(fd, &v, sizeof v) != sizeof v) {
      r.ended = true;
      break;
    }
    r.take(v);
  }
  return true;
}

/// One round: what fails, and when the power is cut.
struct fault_round {
  int arm_after = 100; ///< acknowledgements before the plan is set (its calls counted from then)
  std::vector<fault> plan;
  bool churn = false;
  /// The child archives every commit (store_options::archive_dir), in a directory beside the
  /// recorded one: the archive fdatasyncs each entity's WAL on a descriptor of its own.
  bool archive = false;
  int want_faults = 1;        ///< failures to wait for (the plan's whole window)
  int want_quarantines = 0;   ///< quarantines to wait for (and to find in the log)
  bool wait_recovered = true; ///< and a call acknowledged after a retry (a re-sync, if any)
  int after = 100;            ///< acknowledgements after all that before the cut
};

struct fault_result {
  reports seen;
  bool timed_out = false;
  int log_mismatches = 0;
  powerloss::replay_stats replay;
  int markers_made = 0, markers_removed = 0; ///< "-unsynced" names added and dropped
  test::keyed_load::outcome check;           ///< the retries on the tree the cut left
};

// Loads `dir` in a recording child that meets `spec.plan` from its `spec.arm_after`th
// acknowledgement on, retrying what fails retryably; cuts once the faults happened (and what
// else `spec` waits for) and `spec.after` more calls were acknowledged; rebuilds the tree the
// cut leaves into `cut`, starts a runtime there, retries every key and counts what is wrong.
fault_result run_fault_round(const fault_round& spec, const fs::path& dir, const fs::path& cut,
                             const fs::path& log, int round) {
  fault_result res;
  auto base = powerloss::take_snapshot(dir);
  test::keyed_load load{"f", round, fault_entities, fault_keys};
  powerloss::recorded_child child(dir, log, [&](int fd) {
    auto c = fault_config(dir, spec.churn,
                          spec.archive ? fs::path(dir.string() + "-archive") : fs::path());
    c.log = [fd](std::string_view line) {
      int32_t v = quarantine_mark;
      if (line.find("\"entity_quarantined\"") != std::string_view::npos &&
          ::write(fd, &v, sizeof v) != sizeof v)
        _exit(3);
    };
    auto r = runtime::start(c);
    if (!r)
      _exit(2);
    // The plan is set once the load has run a while: the fault lands in its middle however
    // many syncs and writes this machine's speed makes of it.
    load.run_retrying(*r.value(), fd, 100, [&](int acked) {
      if (acked == spec.arm_after)
        powerloss::set_faults(spec.plan, fd, fault_mark);
    });
    for (;;)
      ::pause(); // the parent cuts the power; the runtime is never stopped
  });
  size_t from = SIZE_MAX;
  auto ready = [&](const reports& r) {
    if (r.faults < spec.want_faults || r.quarantines < spec.want_quarantines ||
        (spec.wait_recovered && r.recovered == 0))
      return false;
    from = std::min(from, r.acked.size());
    return r.acked.size() >= from + static_cast<size_t>(spec.after);
  };
  auto now = std::chrono::steady_clock::now();
  res.timed_out = !read_reports(child.reports(), res.seen, ready, now + std::chrono::seconds(60));
  child.power_off();
  // What the child wrote before the cut, to the pipe's end (the child is gone).
  read_reports(
    child.reports(), res.seen, [](const reports&) { return false; },
    std::chrono::steady_clock::now() + std::chrono::seconds(60));
  ::close(child.reports());

  res.log_mismatches = powerloss::whole_log_mismatches(base, dir, log, cut.string() + "-whole");
  res.replay = powerloss::rebuild(base, dir, log, cut);
  for (auto& n : powerloss::logged_names(log))
    if (n.path.ends_with("-unsynced")) {
      res.markers_made += n.kind == op::add_name;
      res.markers_removed += n.kind == op::drop_name;
    }
  auto r = runtime::start(fault_config(cut, spec.churn));
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  res.check = load.retry_and_check(*r.value(), res.seen.acked);
  r.value()->stop();
  return res;
}

// Runs the round and checks what every round must show.
fault_result check_fault_round(const char* name, const fault_round& spec, const fs::path& dir,
                               const fs::path& cut, const fs::path& log, int round) {
  auto res = run_fault_round(spec, dir, cut, log, round);
  auto& s = res.seen;
  MESSAGE(std::string(name) << ", round " << round << " (faults from acknowledgement "
                            << spec.arm_after << " on): " << s.faults << " calls failed, "
                            << s.quarantines << " quarantines, " << s.retries << " retries, "
                            << s.recovered << " calls acknowledged after a retry; cut after "
                            << s.acked.size() << " acknowledged of " << fault_keys << "; "
                            << res.replay.records << " records, " << res.replay.failed_syncs
                            << " failed syncs, writes kept " << res.replay.kept_writes << " lost "
                            << res.replay.lost_writes << " (of which a later sync covered "
                            << res.replay.lost_to_errors << "), " << res.markers_made
                            << " -unsynced markers made, " << res.markers_removed
                            << " removed by a re-sync");
  CHECK_FALSE(res.timed_out);
  CHECK(res.log_mismatches == 0);
  // Every failure the child reported is in the log, and the window was met.
  CHECK(res.replay.injected == static_cast<uint64_t>(s.faults));
  CHECK(s.faults >= spec.want_faults);
  // The load went on through the fault: calls failed retryably (and came through on retry).
  CHECK(s.retries > 0);
  if (spec.wait_recovered)
    CHECK(s.recovered > 0);
  // Entities quarantined, closed marked unsynced (and re-synced before they served again).
  if (spec.want_quarantines > 0) {
    CHECK(s.quarantines >= spec.want_quarantines);
    CHECK(res.markers_made > 0);
    if (spec.wait_recovered)
      CHECK(res.markers_removed > 0);
  }
  CHECK_MESSAGE(res.check.acked_ran_again == 0, res.check.first_problem);
  CHECK_MESSAGE(res.check.wrong_effects == 0, res.check.first_problem);
  CHECK_MESSAGE(res.check.bad_chains == 0, res.check.first_problem);
  return res;
}

// `rounds` rounds, each on the tree the last one's cut left (the first on a new one), planned
// by `make` (with a generator seeded by `seed`); each checked (check_fault_round).
std::vector<fault_result> fault_rounds(const char* name, int rounds, uint32_t seed,
                                       const std::function<fault_round(std::mt19937&)>& make) {
  test::temp_dir tmp;
  std::mt19937 rng(seed);
  auto dir = tmp.path() / "round0";
  fs::create_directories(dir);
  std::vector<fault_result> out;
  for (int round = 0; round < rounds; ++round) {
    auto next = tmp.path() / ("round" + std::to_string(round + 1));
    auto spec = make(rng);
    out.push_back(check_fault_round(name, spec, dir, next, tmp.path() / "log", round));
    fs::remove_all(dir);
    dir = next;
  }
  return out;
}

// A fault of the entities' WALs (not the alarm index's).
fault wal_fault(fault::call what, int error, uint64_t first, uint64_t count = 1) {
  fault f;
  f.what = what;
  f.path_has = "/entities/";
  f.path_ends = ".db-wal";
  f.error = error;
  f.first = first;
  f.count = count;
  return f;
}

int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

} // namespace

constexpr int rounds_per_case = 4;

TEST_CASE("power cut after a failed WAL sync (one fdatasync of an entity's WAL returns EIO): "
          "the entity is quarantined and re-synced, no call is acknowledged that the failure "
          "lost, every retry runs exactly once, chains verify (4 rounds, each on the last one's "
          "tree)") {
  auto all = fault_rounds("one failed sync", rounds_per_case, 11, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 300);
    spec.plan = {wal_fault(fault::sync, EIO, pick(rng, 1, 10))};
    spec.want_quarantines = 1;
    spec.after = pick(rng, 20, 150);
    return spec;
  });
  // The failed-sync rule dropped what a later sync (the re-sync's) covered. Not in every round:
  // a failing sync may find nothing to write when an earlier one, late on its thread, took it.
  uint64_t dropped = 0;
  for (auto& res : all) {
    CHECK(res.replay.write_errors == 1);
    dropped += res.replay.lost_to_errors;
  }
  CHECK(dropped > 0);
}

TEST_CASE("power cut after a run of failed WAL syncs (6 fdatasyncs of entities' WALs in a row "
          "return EIO, entities closing and checkpointing meanwhile): quarantines and re-syncs, "
          "no call acknowledged that a failure lost, retries exactly once, chains verify (4 "
          "rounds, each on the last one's tree)") {
  auto all = fault_rounds("failed syncs in a row", rounds_per_case, 21, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 250);
    spec.plan = {wal_fault(fault::sync, EIO, pick(rng, 1, 10), 6)};
    spec.churn = true;
    spec.want_faults = 6;
    spec.want_quarantines = 1;
    spec.after = pick(rng, 20, 150);
    return spec;
  });
  uint64_t dropped = 0;
  for (auto& res : all) {
    CHECK(res.replay.write_errors == 6);
    dropped += res.replay.lost_to_errors;
  }
  CHECK(dropped > 0);
}

TEST_CASE("power cut after failed WAL syncs with the continuous archive on (4 single "
          "fdatasyncs of entities' WALs return EIO, most of them the archive's own, entities "
          "closing and opening meanwhile): entities quarantined and re-synced, no call "
          "acknowledged that a failure lost, retries exactly once, chains verify (3 rounds, "
          "each on the last one's tree)") {
  auto all = fault_rounds("failed syncs, archive on", 3, 61, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 250);
    // Single failures apart: a run of them would fail the entity's own sync right after the
    // archive's, whatever the archive passes on.
    int first = pick(rng, 1, 6);
    for (int i = 0; i < 4; ++i)
      spec.plan.push_back(wal_fault(fault::sync, EIO, first + 5 * i));
    spec.churn = true;
    spec.archive = true;
    spec.want_faults = 4;
    spec.want_quarantines = 1;
    spec.after = pick(rng, 20, 150);
    return spec;
  });
  for (auto& res : all)
    CHECK(res.replay.write_errors == 4);
}

TEST_CASE("power cut after the open of an entity's WAL for its sync fails (EMFILE): the entity is "
          "quarantined and re-synced, no call acknowledged that no sync covered, retries exactly "
          "once, chains verify (4 rounds, each on the last one's tree)") {
  fault_rounds("failed open for a sync", rounds_per_case, 31, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 250);
    auto f = wal_fault(fault::open, EMFILE, pick(rng, 1, 3));
    f.accmode = O_RDONLY; // the sync's own descriptor (SQLite opens the WAL read-write)
    spec.plan = {f};
    spec.churn = true;
    spec.want_quarantines = 1;
    spec.after = pick(rng, 20, 150);
    return spec;
  });
}

TEST_CASE("power cut after WAL writes come back short, then fail with ENOSPC, for a while: the "
          "commits that could not be written fail retryably, no call acknowledged that is not "
          "on the cut tree, retries exactly once, chains verify (4 rounds, each on the last "
          "one's tree)") {
  fault_rounds("short writes, then a full disk", rounds_per_case, 41, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 250);
    int first = pick(rng, 1, 15);
    spec.plan = {wal_fault(fault::write, 0, first, 6),
                 wal_fault(fault::write, ENOSPC, first + 10, 6)};
    spec.churn = true;
    spec.want_faults = 12;
    spec.after = pick(rng, 20, 150);
    return spec;
  });
}

TEST_CASE("power cut after a WAL's disk goes bad for good (every fdatasync of an entity's WAL "
          "from one on returns EIO): every entity that syncs is quarantined and none re-syncs, "
          "yet no acknowledged call is missing from the cut tree, retries exactly once, chains "
          "verify (4 rounds, each on the last one's tree)") {
  auto all = fault_rounds("syncs failing for good", rounds_per_case, 51, [](std::mt19937& rng) {
    fault_round spec;
    spec.arm_after = pick(rng, 60, 250);
    spec.plan = {wal_fault(fault::sync, EIO, pick(rng, 1, 10), 1000000)};
    spec.want_faults = 30; // re-syncs failing too
    spec.want_quarantines = 2;
    spec.wait_recovered = false;
    spec.after = 0;
    return spec;
  });
  for (auto& res : all) {
    CHECK(res.markers_removed == 0); // no re-sync can succeed
    CHECK(res.replay.failed_syncs > 0);
  }
}

} // namespace syscall_faults_test
