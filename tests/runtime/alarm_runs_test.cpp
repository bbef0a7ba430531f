// alarm_runs_test.cpp: an alarm that sets itself again runs its effects again. Each run of an
// alarm is journaled under a key of its own, so the keys its steps derive (the callee's
// idempotency key, the vendor's Idempotency-Key) differ from one run to the next, while the retry
// of one run after a SIGKILL keeps that run's keys. A real runtime, in this process and in a child
// process killed mid-run. Test thread only (and the child).
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using nlohmann::json;

namespace alarm_runs_test {

namespace {

/// Each run of the alarm "tick" adds 1 to counter c1 and asks the vendor to notify "ops", both
/// with the same arguments every time, appends "tick.ran" and sets "tick" again, due at once,
/// until it ran `of` times: after its awaits, or before them with `first`.
class ticker final : public entity {
 public:
  json start(context& ctx, json a) {
    ctx.set_alarm("tick", ctx.now_ms(),
                  {{"run", 1}, {"of", a.value("of", 5)}, {"first", a.value("first", false)}});
    return json::object();
  }
  task<void> on_alarm(context& ctx, const alarm_record& a) override {
    auto p = json::parse(a.payload);
    int64_t run = p.value("run", 1), of = p.value("of", 5);
    bool first = p.value("first", false);
    auto again = [&] {
      if (run < of)
        ctx.set_alarm("tick", ctx.now_ms(), {{"run", run + 1}, {"of", of}, {"first", first}});
    };
    if (first)
      again();
    auto add = ctx.call("counter", "c1", "add", json{{"by", 1}});
    call_reply c = co_await add;
    if (!c.ok)
      throw transient_error("COUNTER", c.body);
    tool_request req;
    req.tool = "vendor";
    req.operation = "notify";
    req.payload = {{"to", "ops"}};
    auto notify = ctx.call_tool(std::move(req));
    tool_reply r = co_await notify;
    if (!r.ok)
      throw transient_error("VENDOR", r.error_message);
    fact_draft d;
    d.type = "tick.ran";
    d.data = {{"run", run}};
    ctx.append(d);
    if (!first)
      again();
  }
};

runtime_config ticker_config(const std::filesystem::path& dir, tool_fn vendor) {
  runtime_config c;
  c.data_dir = dir;
  test::add_test_types(c.types);
  c.types.add(type_builder<ticker>("ticker").method("start", &ticker::start).build());
  c.tools["vendor"] = std::move(vendor);
  return c;
}

const entity_key ticker_key{"acme", "ticker", "t1"};
const entity_key counter_key{"acme", "counter", "c1"};

/// A vendor that de-duplicates by Idempotency-Key, as docs/tools.md asks of one: the keys it
/// saw, each with how often.
struct vendor_log {
  std::mutex m;
  std::map<std::string, int> keys;
  tool_fn fn() {
    return [this](const tool_request& req, std::function<void(tool_reply)> done) {
      {
        std::lock_guard g(m);
        ++keys[req.idempotency_key];
      }
      tool_reply r;
      r.ok = true;
      r.http_status = 200;
      r.body = json::object();
      done(std::move(r));
    };
  }
};

size_t ticks_ran(runtime& rt) {
  auto r = rt.call_sync(ticker_key, "@facts", json{{"type", "tick.ran"}, {"limit", 100}}.dump());
  REQUIRE_MESSAGE(r.ok, r.body);
  return r.json().size();
}

/// Waits (20 s at most) until the ticker ran `n` times.
bool wait_for_ticks(runtime& rt, size_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ticks_ran(rt) < n) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int64_t counter_value(runtime& rt) {
  auto r = rt.call_sync(counter_key, "get", "{}");
  REQUIRE_MESSAGE(r.ok, r.body);
  return r.json().value("value", int64_t{-1});
}

} // namespace

TEST_CASE("alarm runs: an alarm that sets itself again 5 times calls its entity and its vendor 5 "
          "times, each run with keys of its own") {
  test::temp_dir tmp;
  vendor_log vendor;
  auto rt = runtime::start(ticker_config(tmp.path(), vendor.fn()));
  REQUIRE_MESSAGE(rt.is_ok(), rt.error().to_string());
  auto& r = *rt.value();
  REQUIRE(r.call_sync(ticker_key, "start", R"({"of":5})").ok);
  REQUIRE(wait_for_ticks(r, 5));
  CHECK(counter_value(r) == 5); // a run that sent an earlier run's key was replayed: no add
  std::lock_guard g(vendor.m);
  CHECK(vendor.keys.size() == 5); // a vendor that de-duplicates notified 5 times
  for (auto& [k, n] : vendor.keys)
    CHECK_MESSAGE(n == 1, k);
  r.stop();
}

namespace {

/// Runs the ticker (`first`: it sets its alarm again before its awaits) in a child process that
/// is SIGKILLed while the third run awaits its vendor, then in a new runtime over the same files
/// until the fifth run: what a vendor that de-duplicates and counter c1 saw.
void kill_mid_run(bool first) {
  test::temp_dir tmp;
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    // Reports each key it is sent ("k" + key + "\n"); never answers the third run's, after
    // reporting it ("h\n"): the process is killed there.
    auto calls = std::make_shared<int>(0);
    auto vendor = [fd = report, calls](const tool_request& req,
                                       std::function<void(tool_reply)> done) {
      auto line = "k" + req.idempotency_key + "\n";
      (void)!write(fd, line.data(), line.size());
      if (++*calls == 3) {
        (void)!write(fd, "h\n", 2);
        return;
      }
      tool_reply r;
      r.ok = true;
      r.http_status = 200;
      r.body = json::object();
      done(std::move(r));
    };
    auto rt = runtime::start(ticker_config(tmp.path(), vendor));
    if (!rt)
      _exit(2);
    (void)rt.value()->call_sync(ticker_key, "start", json{{"of", 5}, {"first", first}}.dump());
    pause();
    _exit(3);
  }));
  std::vector<std::string> child_keys;
  {
    std::string line;
    char c = 0;
    while (read(child.reports(), &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line == "h")
        break;
      child_keys.push_back(line.substr(1));
      line.clear();
    }
  }
  child.kill_now();
  REQUIRE(child_keys.size() == 3);

  vendor_log vendor;
  auto rt = runtime::start(ticker_config(tmp.path(), vendor.fn()));
  REQUIRE_MESSAGE(rt.is_ok(), rt.error().to_string());
  auto& r = *rt.value();
  REQUIRE(wait_for_ticks(r, 5));
  CHECK(counter_value(r) == 5);
  std::set<std::string> all(child_keys.begin(), child_keys.end());
  {
    std::lock_guard g(vendor.m);
    CHECK(vendor.keys.size() == 3); // the third run's again, the fourth's, the fifth's
    CHECK(vendor.keys.count(child_keys[2]) == 1); // the interrupted run kept its key
    for (auto& [k, n] : vendor.keys)
      all.insert(k);
  }
  CHECK(all.size() == 5); // what a vendor that de-duplicates did: 5 notifications
  CHECK(ticks_ran(r) == 5);
  r.stop();
}

} // namespace

TEST_CASE("alarm runs: a SIGKILL while the third run awaits its vendor still gives exactly 5 "
          "effects: the retry of that run sends its keys again, the runs after it new ones") {
  kill_mid_run(false);
}

TEST_CASE("alarm runs: a run that set its alarm again before its awaits and was SIGKILLed at "
          "its vendor is retried as itself, not replaced by the occurrence it set: exactly 5 "
          "effects") {
  kill_mid_run(true);
}

} // namespace alarm_runs_test
