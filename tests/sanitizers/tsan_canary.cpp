// tsan_canary.cpp: proves that the TSan build can see what it is meant to see (built only with
// FACTUM_SANITIZE=thread; docs/reliability.md, "Sanitizers").
//
//   tsan_canary race      two CAF actors and the main thread bump one plain int: a real data
//                         race, which TSan must report (the ctest passes on the report).
//   tsan_canary handoff   a string built on the main thread travels in CAF messages through two
//                         actors, each of which rewrites it, and comes back: correct
//                         synchronisation that TSan must NOT report. It does report it when CAF
//                         is Debian's uninstrumented build, which is why scripts/tsan rebuilds it.
//
// Threads: the main thread, CAF's workers. Exit status: 0 when the run completed (TSan decides
// the rest through its own exit code and report).
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

int shared_counter = 0; // deliberately unsynchronised (mode "race")

caf::behavior bumper(caf::event_based_actor*) {
  return {[](int rounds) {
    for (int i = 0; i < rounds; ++i)
      ++shared_counter;
    return rounds;
  }};
}

caf::behavior rewriter(caf::event_based_actor*, char tag) {
  return {[tag](std::string& s) {
    s.push_back(tag);
    return std::move(s);
  }};
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "race") != 0 && std::strcmp(argv[1], "handoff") != 0)) {
    std::fprintf(stderr, "usage: tsan_canary race|handoff\n");
    return 2;
  }
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  if (std::strcmp(argv[1], "race") == 0) {
    auto a = sys.spawn(bumper);
    auto b = sys.spawn(bumper);
    self->send(a, 100000);
    self->send(b, 100000);
    for (int i = 0; i < 100000; ++i)
      ++shared_counter;
    for (int i = 0; i < 2; ++i)
      self->receive([](int) {});
    std::printf("race: counter %d\n", shared_counter);
    return 0;
  }
  auto a = sys.spawn(rewriter, 'a');
  auto b = sys.spawn(rewriter, 'b');
  std::string total;
  for (int i = 0; i < 200; ++i) {
    std::string s(64, 'x'); // heap-allocated; freed on another thread after the first hop
    self->request(a, std::chrono::seconds(10), std::move(s))
      .receive([&](std::string& r) { total = std::move(r); },
               [&](caf::error& e) { std::fprintf(stderr, "%s\n", sys.render(e).c_str()); });
    self->request(b, std::chrono::seconds(10), std::move(total))
      .receive([&](std::string& r) { total = std::move(r); },
               [&](caf::error& e) { std::fprintf(stderr, "%s\n", sys.render(e).c_str()); });
    if (total != std::string(64, 'x') + "ab") {
      std::fprintf(stderr, "handoff: wrong result %s\n", total.c_str());
      return 1;
    }
  }
  std::printf("handoff: 200 round trips\n");
  return 0;
}
