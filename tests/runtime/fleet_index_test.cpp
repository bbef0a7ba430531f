// fleet_index_test.cpp: what the tenant index keeps for the fleet views, through the runtime: an
// active entity's dead letters and breakers are in the index when the call that made them is
// answered; a damaged index is rebuilt with them from the files; a process killed (SIGKILL)
// after an entity's summary could not be written leaves an index that the next start corrects
// from the files. Test thread, a child process for the kill; replies arrive on CAF workers.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/tenant_index.hpp"
#include "support/child_process.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;
using nlohmann::json;

namespace fleet_index_test {

namespace {

/// The runtime with the webhook type and a tool that always answers 503 (one attempt: each
/// delivery is a dead letter, scheduled for an automatic retry in an hour); `fault` is the
/// tenant index's fault hook.
std::unique_ptr<runtime> start(const fs::path& dir, fault_hook fault = {}) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 4;
  add_builtin_types(c.types);
  c.tools["vendor"] = [](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.http_status = 503;
    done(std::move(r));
  };
  tool_policy p;
  p.retry = {{"max_attempts", 1}};
  c.tool_policies["vendor"] = std::move(p);
  c.tenant_index_fault = std::move(fault);
  return test::start_ok(std::move(c));
}

call_reply deliver(runtime& rt, const std::string& id, const std::string& key) {
  call_options o;
  o.idempotency_key = key;
  return rt.call_sync(entity_key{"acme", "webhook", id}, "deliver",
                      R"({"tool":"vendor","payload":{}})", o);
}

/// What the index says of acme now: dead letters by status, breakers not closed.
struct fleet_now {
  bool read = false; ///< the index answered
  std::map<std::string, int64_t> dead_letters;
  std::vector<entity_breaker> open;
};

/// Reads on a storage thread (no assertion there: a thrown one would leave the index taken).
fleet_now read_fleet(runtime& rt) {
  auto out = std::make_shared<fleet_now>();
  std::promise<void> done;
  rt.read_tenant_index(
    [out](tenant_index* ix) {
      auto t = ix ? ix->dead_letter_totals_by_tenant() : status{errc::unavailable, "closed"};
      auto open = ix ? ix->open_breakers("acme", "", "", "", "", "", 100)
                     : status{errc::unavailable, "closed"};
      if (!t || !open)
        return;
      out->read = true;
      if (auto it = t->find("acme"); it != t->end())
        out->dead_letters = it->second.by_status;
      out->open = std::move(open.value());
    },
    [&done] { done.set_value(); });
  done.get_future().wait();
  REQUIRE(out->read);
  return std::move(*out);
}

} // namespace

TEST_CASE("fleet index: an active entity's dead letters and breakers are in the index when the "
          "call is answered, and a damaged index is rebuilt with them") {
  test::temp_dir tmp;
  {
    auto rt = start(tmp.path());
    auto r = deliver(*rt, "w1", "k-1");
    REQUIRE_FALSE(r.ok);
    auto dl = r.json()["dead_letter_id"].get<std::string>();
    CHECK(read_fleet(*rt).dead_letters == std::map<std::string, int64_t>{{"scheduled", 1}});
    REQUIRE(rt->call_sync(entity_key{"acme", "webhook", "w1"}, "@breaker",
                          R"({"tool":"vendor","action":"force-open"})")
              .ok);
    auto f = read_fleet(*rt);
    REQUIRE(f.open.size() == 1);
    CHECK(f.open[0].id == "w1");
    CHECK(f.open[0].state == "FORCED_OPEN");
    REQUIRE(rt->call_sync(entity_key{"acme", "webhook", "w1"}, "@dead_letter",
                          json{{"id", dl}, {"action", "discard"}}.dump())
              .ok);
    CHECK(read_fleet(*rt).dead_letters == std::map<std::string, int64_t>{{"discarded", 1}});
  }
  // Damaged: set aside and rebuilt from the files, summaries included.
  for (const char* f : {"tenants.db-wal", "tenants.db-shm"})
    fs::remove(tmp.path() / "runtime" / f);
  {
    std::ofstream out(tmp.path() / "runtime" / "tenants.db", std::ios::binary | std::ios::trunc);
    out << std::string(8192, 'x');
  }
  auto rt = start(tmp.path());
  CHECK(rt->metrics().value("factum_tenant_index_rebuilds_total") == 1);
  auto f = read_fleet(*rt);
  CHECK(f.dead_letters == std::map<std::string, int64_t>{{"discarded", 1}});
  CHECK(f.open.size() == 1);
}

TEST_CASE("fleet index: a process killed after a summary could not be written leaves an index "
          "the next start corrects from the entity files") {
  test::temp_dir tmp;
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    static std::atomic<bool> failing{false};
    auto r = runtime::start([&] {
      runtime_config c; // as start() above, without doctest in the child
      c.data_dir = tmp.path();
      c.storage_threads = 4;
      add_builtin_types(c.types);
      c.tools["vendor"] = [](const tool_request&, std::function<void(tool_reply)> done) {
        tool_reply t;
        t.http_status = 503;
        done(std::move(t));
      };
      tool_policy p;
      p.retry = {{"max_attempts", 1}};
      c.tool_policies["vendor"] = std::move(p);
      c.tenant_index_fault = [](uint64_t, std::string_view what) {
        return failing && what == "apply" ? 13 : 0; // SQLITE_FULL
      };
      return c;
    }());
    if (!r)
      _exit(2);
    auto& rt = *r.value();
    call_options o;
    o.idempotency_key = "k-1";
    bool first = !rt.call_sync(entity_key{"acme", "webhook", "w1"}, "deliver",
                               R"({"tool":"vendor","payload":{}})", o)
                    .ok;
    failing = true; // the index is full from now on: w1's next summary is not written
    o.idempotency_key = "k-2";
    bool second = !rt.call_sync(entity_key{"acme", "webhook", "w1"}, "deliver",
                                R"({"tool":"vendor","payload":{}})", o)
                     .ok;
    char ok =
      first && second && rt.metrics().value("factum_tenant_index_failures_total") > 0 ? 'y' : 'n';
    (void)!write(report, &ok, 1);
    pause(); // killed here: nothing closes the index
    _exit(0);
  }));
  char ok = 0;
  REQUIRE(read(child.reports(), &ok, 1) == 1);
  child.kill_now();
  REQUIRE(ok == 'y');
  {
    // What the killed process left: one dead letter of the two.
    auto ix = tenant_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    CHECK_FALSE(*(*ix)->flag("clean"));
    CHECK(*(*ix)->count_dead_letters("acme", {}) == 1);
  }
  auto rt = start(tmp.path());
  CHECK(read_fleet(*rt).dead_letters == std::map<std::string, int64_t>{{"scheduled", 2}});
}

} // namespace fleet_index_test
