// harness.hpp: the parent's side of the power-cut tests (tests only): a forked child
// (support/child_process.hpp) whose changes under a directory are logged (write_log.hpp), run to
// its end or reporting on a pipe until its power is cut, the log's own check against the tree
// the child left, and a file's bytes (support/file_bytes.hpp). The test's thread only.
#pragma once

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "powerloss/replay.hpp"
#include "powerloss/write_log.hpp"
#include "support/child_process.hpp"
#include "support/file_bytes.hpp"
#include "support/keyed_load.hpp"

namespace factum::powerloss {

using test::file_bytes;

/// Runs `body` in a child that records every change under `root` into `log`, meeting the faults
/// of `plan` (write_log.hpp), and waits for it: it must exit with 0.
template <class F>
void record_child(const std::filesystem::path& root, const std::filesystem::path& log, F body,
                  std::vector<fault> plan = {}) {
  test::child_process child;
  REQUIRE(child.run([&] {
    set_faults(std::move(plan));
    start(log, root);
    body();
    _exit(0);
  }));
  REQUIRE(child.wait());
  REQUIRE(WIFEXITED(child.status()));
  REQUIRE(WEXITSTATUS(child.status()) == 0);
}

/// A forked child whose changes under `root` are recorded in `log` (write_log.hpp), reporting
/// acknowledged call numbers (and, in some tests, other marks) on a pipe, and the parent's means
/// to read them and cut its power.
class recorded_child {
 public:
  /// Forks; the child starts the log and runs `body(report_fd)`, which must not return.
  template <class F>
  recorded_child(const std::filesystem::path& root, const std::filesystem::path& log, F body) {
    int control[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) == 0);
    bool forked = child_.run([&](int report) {
      ::close(control[0]);
      start(log, root, control[1]);
      body(report);
      _exit(4);
    });
    ::close(control[1]);
    control_ = control[0];
    REQUIRE(forked);
  }
  ~recorded_child() {
    if (control_ >= 0)
      ::close(control_);
  }
  recorded_child(const recorded_child&) = delete;
  recorded_child& operator=(const recorded_child&) = delete;

  /// The pipe the child reports on (read end), for a test that reads it itself.
  int reports() const noexcept { return child_.reports(); }

  /// Reads acknowledgements until `n` of them (or the child's end marker).
  void read_acks(int n) { test::read_acks(child_.reports(), acked_, n); }

  /// The power cut: the log frozen (no file changes from here on), the child killed. What it
  /// wrote on the pipe before stays there to be read.
  void power_off() {
    CHECK(freeze(control_));
    child_.kill_now();
    ::close(control_);
    control_ = -1;
  }

  /// The power cut, and the replies the child wrote before it read: returns every acknowledged
  /// call.
  const std::set<int>& cut() {
    power_off();
    test::read_acks(child_.reports(), acked_);
    return acked_;
  }

 private:
  test::child_process child_;
  int control_ = -1;
  std::set<int> acked_;
};

/// The log's own check: taken whole (every change as if synced), `log` must rebuild the tree the
/// child left in `dir` from `base`, every name and every byte (-shm files are written through
/// mmap, which the log does not see, and never synced). Rebuilds it in `scratch` (removed
/// after); returns the files whose bytes differ, each reported.
inline int whole_log_mismatches(const snapshot& base, const std::filesystem::path& dir,
                                const std::filesystem::path& log,
                                const std::filesystem::path& scratch) {
  int mismatches = 0;
  rebuild(base, dir, log, scratch, true);
  auto live = take_snapshot(dir), rebuilt = take_snapshot(scratch);
  auto shm = [](const std::string& p) { return p.size() > 4 && p.ends_with("-shm"); };
  for (auto& [rel, e] : live.names)
    if (!shm(rel)) {
      REQUIRE_MESSAGE(rebuilt.names.count(rel), "the log missed " << rel);
      if (!e.dir && live.content[e.ino] != rebuilt.content[rebuilt.names[rel].ino]) {
        ++mismatches;
        MESSAGE("the log does not give the bytes of "
                << rel << " (" << live.content[e.ino].size() << " bytes, rebuilt "
                << rebuilt.content[rebuilt.names[rel].ino].size() << ")");
      }
    }
  for (auto& [rel, e] : rebuilt.names)
    CHECK_MESSAGE(live.names.count(rel), "the log has " << rel << ", the tree has not");
  std::filesystem::remove_all(scratch);
  return mismatches;
}

} // namespace factum::powerloss
