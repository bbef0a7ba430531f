// limits_test.cpp: what one entity refuses, through the runtime: reads of an entity that was
// never written create no file (404 ENTITY_NOT_FOUND); one call more than the queue cap is
// answered 429 ENTITY_OVERLOADED with a retry delay; a call whose caller was answered 504 while
// it waited never runs; the descriptors the cap on open entities leaves to connections. Test
// thread; replies arrive on CAF workers.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <future>

#include "factum/runtime/runtime.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace limits_test {

namespace {

std::unique_ptr<runtime> start(const std::filesystem::path& dir, size_t max_queued = 1000) {
  runtime_config c;
  c.data_dir = dir;
  test::add_test_types(c.types);
  c.max_queued_calls = max_queued;
  return test::start_ok(std::move(c));
}

/// Starts a call; its reply arrives in the future.
std::future<call_reply> start_call(runtime& rt, const entity_key& k, const std::string& method,
                                   json args, std::chrono::milliseconds timeout = 30s) {
  auto p = std::make_shared<std::promise<call_reply>>();
  auto f = p->get_future();
  call_options o;
  o.timeout = timeout;
  rt.call(k, method, args.dump(), o, [p](call_reply r) { p->set_value(std::move(r)); });
  return f;
}

} // namespace

TEST_CASE("limits: reads of an entity that was never written answer 404 ENTITY_NOT_FOUND and "
          "create no file") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key k{"acme", "counter", "never"};
  for (const char* m : {"@facts", "@dead_letters", "@breakers", "@alarms", "@verify"}) {
    INFO(m);
    auto r = rt->call_sync(k, m, "{}");
    CHECK_FALSE(r.ok);
    CHECK(r.http_status == 404);
    CHECK(r.code == "ENTITY_NOT_FOUND");
  }
  // An operator action on it is refused the same way.
  auto act = rt->call_sync(k, "@breaker", R"({"tool":"t","action":"force-open"})");
  CHECK(act.code == "ENTITY_NOT_FOUND");
  CHECK_FALSE(std::filesystem::exists(k.file_path(tmp.path())));
  // A write creates it; then it can be read.
  REQUIRE(rt->call_sync(k, "add", R"({"by":2})").ok);
  CHECK(std::filesystem::exists(k.file_path(tmp.path())));
  auto facts = rt->call_sync(k, "@facts", R"({"type":"counter"})");
  REQUIRE(facts.ok);
  CHECK(facts.json().size() == 1);
}

TEST_CASE("limits: one call more than the queue cap of an entity is answered 429 "
          "ENTITY_OVERLOADED with a retry delay, and the others run") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), 2);
  entity_key k{"acme", "probe", "busy"};
  // The first call holds the entity (it awaits a 300 ms timer); the next two queue.
  auto first = start_call(*rt, k, "slow_pair", {{"n", 0}, {"ms", 300}});
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (rt->metrics().value("factum_active_entities") == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms); // waiting for a gauge the runtime sets
  std::vector<std::future<call_reply>> queued;
  for (int i = 1; i <= 2; ++i)
    queued.push_back(start_call(*rt, k, "append_then", json::object()));
  auto over = start_call(*rt, k, "append_then", json::object()).get();
  CHECK_FALSE(over.ok);
  CHECK(over.http_status == 429);
  CHECK(over.code == "ENTITY_OVERLOADED");
  CHECK(over.retryable);
  CHECK(over.retry_after_ms > 0);
  CHECK(rt->metrics().value("factum_calls_overloaded_total") == 1);
  CHECK(first.get().ok);
  for (auto& q : queued)
    CHECK(q.get().ok);
}

TEST_CASE("limits: a call whose caller was answered 504 CALL_TIMEOUT while it waited never runs") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key k{"acme", "probe", "late"};
  auto first = start_call(*rt, k, "slow_pair", {{"n", 0}, {"ms", 400}});
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (rt->metrics().value("factum_active_entities") == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms); // waiting for a gauge the runtime sets
  auto late = start_call(*rt, k, "append_then", json::object(), 50ms).get();
  CHECK(late.http_status == 504);
  CHECK(late.code == "CALL_TIMEOUT");
  REQUIRE(first.get().ok);
  // The entity ran the first call only: the timed-out one was dropped, not run unseen.
  auto probes = rt->call_sync(k, "@facts", R"({"type":"probe"})");
  REQUIRE(probes.ok);
  CHECK(probes.json().size() == 2); // slow_pair's begin and end
  CHECK(rt->metrics().value("factum_calls_dropped_total") == 1);
}

TEST_CASE("limits: the connection budget is what RLIMIT_NOFILE leaves beside 4 descriptors per "
          "entity max_active_entities lets be open, so a lower cap leaves more to connections") {
  test::temp_dir tmp;
  runtime_config c;
  c.data_dir = tmp.path();
  add_builtin_types(c.types);
  c.max_active_entities = 100;
  auto rt = runtime::start(c);
  REQUIRE(rt.is_ok());
  struct rlimit rl {};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0); // start() raised the soft limit to the hard one
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1'000'000)
    rl.rlim_cur = 1'000'000;
  auto n = static_cast<size_t>(rl.rlim_cur);
  REQUIRE(n > 1000);
  CHECK((*rt)->connection_budget() == n - 4 * 100 - 64);
  (*rt)->stop();
  rt->reset();
  c.max_active_entities = 0; // the default cap: three quarters of the limit for entity files
  auto def = runtime::start(c);
  REQUIRE(def.is_ok());
  CHECK((*def)->connection_budget() == n - 4 * ((n - n / 4) / 4) - 64);
}

} // namespace limits_test
