// crash_test.cpp: crash rounds. A child process runs the runtime under concurrent load with an
// idempotency key per call and reports every reply on a pipe; the parent SIGKILLs it at a
// random moment, restarts the runtime on the same data directory, retries every key (the ones
// without a reply, and the acknowledged ones again), and checks one effect per key and valid
// hash chains. Five rounds in the default run.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <random>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr int entities = 8;
constexpr int keys_per_round = 1500;

runtime_config crash_config(const std::filesystem::path& dir) {
  runtime_config c;
  c.data_dir = dir;
  add_builtin_types(c.types);
  c.storage_threads = 4;
  return c;
}

entity_key key_for(int k) {
  return {"acme", "ledger", "e" + std::to_string(k % entities)};
}
std::string idem(int round, int k) {
  return "r" + std::to_string(round) + "-k" + std::to_string(k);
}
std::string body(int round, int k) {
  return json{{"type", "invocation"}, {"data", {{"round", round}, {"k", k}}}}.dump();
}

[[noreturn]] void child_load(const std::filesystem::path& dir, int round, int fd) {
  auto r = runtime::start(crash_config(dir));
  if (!r)
    _exit(2);
  auto& rt = *r.value();
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  for (int k = 0; k < keys_per_round; ++k) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return in_flight < 32; });
      ++in_flight;
    }
    call_options o;
    o.idempotency_key = idem(round, k);
    rt.call(key_for(k), "append", body(round, k), o, [&, k](call_reply rep) {
      if (rep.ok) {
        int32_t v = k;
        if (write(fd, &v, sizeof v) != sizeof v)
          _exit(3);
      }
      std::lock_guard<std::mutex> g(mu);
      --in_flight;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> g(mu);
  cv.wait(g, [&] { return in_flight == 0; });
  int32_t end = -1;
  (void)!write(fd, &end, sizeof end);
  _exit(0);
}

} // namespace

TEST_CASE("crash: SIGKILL under load loses no acknowledged call and retries run exactly once "
          "(5 rounds)") {
  test::temp_dir tmp;
  std::mt19937 rng(4242);
  for (int round = 0; round < 5; ++round) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      child_load(tmp.path(), round, fds[1]);
    }
    close(fds[1]);
    int kill_after = std::uniform_int_distribution<int>(20, 900)(rng);
    std::set<int> acked;
    int32_t v;
    while (static_cast<int>(acked.size()) < kill_after && read(fds[0], &v, sizeof v) == sizeof v &&
           v >= 0)
      acked.insert(v);
    kill(pid, SIGKILL);
    int wst = 0;
    waitpid(pid, &wst, 0);
    // Replies written to the pipe before the kill landed are acknowledged too.
    while (read(fds[0], &v, sizeof v) == sizeof v)
      if (v >= 0)
        acked.insert(v);
    close(fds[0]);
    MESSAGE("round " << round << ": killed after " << acked.size() << " acknowledged calls");

    auto r = runtime::start(crash_config(tmp.path()));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    auto& rt = *r.value();
    // Retry every key of the round: unacknowledged ones run now (exactly once), acknowledged
    // ones must replay.
    std::vector<std::future<call_reply>> replies;
    for (int k = 0; k < keys_per_round; ++k) {
      auto p = std::make_shared<std::promise<call_reply>>();
      replies.push_back(p->get_future());
      call_options o;
      o.idempotency_key = idem(round, k);
      rt.call(key_for(k), "append", body(round, k), o,
              [p](call_reply rep) { p->set_value(std::move(rep)); });
    }
    int replayed = 0;
    for (int k = 0; k < keys_per_round; ++k) {
      auto rep = replies[k].get();
      REQUIRE_MESSAGE(rep.ok, rep.body);
      if (acked.count(k))
        CHECK_MESSAGE(rep.replayed, "acknowledged key " << k << " ran twice");
      replayed += rep.replayed;
    }
    CHECK(replayed >= static_cast<int>(acked.size()));
    // One effect per key on disk, and valid chains.
    std::map<std::string, int> effects;
    for (int e = 0; e < entities; ++e) {
      auto k = key_for(e);
      int64_t after = 0;
      for (;;) {
        auto q = rt.call_sync(k, "@facts", json{{"after_seq", after}, {"limit", 5000}}.dump());
        REQUIRE(q.ok);
        auto arr = q.json();
        if (arr.empty())
          break;
        for (auto& f : arr)
          ++effects[f.value("idempotency_key", "")];
        after = arr.back()["seq"].get<int64_t>();
      }
      auto ver = rt.call_sync(k, "@verify", "{}");
      CHECK(ver.json()["ok"] == true);
    }
    for (int k = 0; k < keys_per_round; ++k)
      CHECK_MESSAGE(effects[idem(round, k)] == 1,
                    "key " << idem(round, k) << " has " << effects[idem(round, k)] << " effects");
  }
}
