// crash_test.cpp: crash rounds. A child process runs the runtime under concurrent load with an
// idempotency key per call and reports every reply on a pipe; the parent SIGKILLs it at a
// random moment, restarts the runtime on the same data directory, retries every key (the ones
// without a reply, and the acknowledged ones again), and checks one effect per key and valid
// hash chains. Five rounds in the default run.
#include <doctest/doctest.h>

#include <random>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "support/child_process.hpp"
#include "support/keyed_load.hpp"
#include "support/temp_dir.hpp"

using namespace factum;

namespace {

constexpr int keys_per_round = 1500;

runtime_config crash_config(const std::filesystem::path& dir) {
  runtime_config c;
  c.data_dir = dir;
  add_builtin_types(c.types);
  c.storage_threads = 4;
  return c;
}

[[noreturn]] void child_load(const std::filesystem::path& dir, int round, int fd) {
  auto r = runtime::start(crash_config(dir));
  if (!r)
    _exit(2);
  test::keyed_load{"r", round, 8, keys_per_round}.run(*r.value(), fd);
  _exit(0);
}

} // namespace

TEST_CASE("crash: SIGKILL under load loses no acknowledged call and retries run exactly once "
          "(5 rounds)") {
  test::temp_dir tmp;
  std::mt19937 rng(4242);
  for (int round = 0; round < 5; ++round) {
    test::child_process child;
    REQUIRE(child.run([&](int report) { child_load(tmp.path(), round, report); }));
    int kill_after = std::uniform_int_distribution<int>(20, 900)(rng);
    std::set<int> acked;
    test::read_acks(child.reports(), acked, kill_after);
    child.kill_now();
    // Replies written to the pipe before the kill landed are acknowledged too.
    test::read_acks(child.reports(), acked);
    MESSAGE("round " << round << ": killed after " << acked.size() << " acknowledged calls");

    auto r = runtime::start(crash_config(tmp.path()));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    // Retry every key of the round: unacknowledged ones run now (exactly once), acknowledged
    // ones must replay; one effect per key on disk, and valid chains.
    auto out = test::keyed_load{"r", round, 8, keys_per_round}.retry_and_check(*r.value(), acked);
    CHECK_MESSAGE(out.acked_ran_again == 0, out.first_problem);
    CHECK(out.replayed >= static_cast<int>(acked.size()));
    CHECK_MESSAGE(out.wrong_effects == 0, out.first_problem);
    CHECK_MESSAGE(out.bad_chains == 0, out.first_problem);
  }
}
