// shared_calls_test.cpp: shared (read-only) calls in a running runtime: a read answers while an
// exclusive call waits at an await for a vendor that has not answered, and a shared method that
// tries to write or to await fails with a clear error and writes nothing of its own. The vendor
// is a tool the test answers by hand (a promise), so nothing here waits on a clock. Test thread
// and the runtime's threads.
#include <doctest/doctest.h>

#include <future>
#include <mutex>

#include "factum/runtime/runtime.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using nlohmann::json;

namespace shared_calls_test {

namespace {

class slowpoke final : public entity {
 public:
  /// Appends "before", awaits the vendor, appends "after".
  task<json> slow(context& ctx, json) {
    fact_draft d;
    d.type = "before";
    ctx.append(d);
    tool_request req;
    req.tool = "vendor";
    req.operation = "slow";
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    d.type = "after";
    ctx.append(d);
    co_return json{{"ok", r.ok}};
  }
  /// Shared: the number of facts of each type committed so far.
  json count(context& ctx, json) {
    json out = json::object();
    fact_filter f;
    f.limit = 1000;
    for (auto& fa : ctx.query(f))
      out[fa.type] = out.value(fa.type, 0) + 1;
    return out;
  }
  /// Shared, and wrongly tries to append.
  json sneaky(context& ctx, json) {
    fact_draft d;
    d.type = "sneaky";
    ctx.append(d);
    return json{{"wrote", true}};
  }
  /// Shared, and wrongly awaits.
  task<json> waits(context& ctx, json) {
    auto op = ctx.sleep(std::chrono::milliseconds(1));
    co_await op;
    co_return json{{"waited", true}};
  }
};

struct fixture {
  test::temp_dir tmp;
  std::mutex mu;
  std::function<void(tool_reply)> held; ///< the vendor's pending answer
  std::promise<void> called;
  std::unique_ptr<runtime> rt;
  entity_key key = *entity_key::make("acme", "slowpoke", "s1");

  fixture() {
    runtime_config c;
    c.data_dir = tmp.path();
    method_options shared{.requires_idempotency_key = false, .shared = true};
    c.types.add(type_builder<slowpoke>("slowpoke")
                  .method("slow", &slowpoke::slow)
                  .method("count", &slowpoke::count, shared)
                  .method("sneaky", &slowpoke::sneaky, shared)
                  .method("waits", &slowpoke::waits, shared)
                  .build());
    c.tools["vendor"] = [this](const tool_request&, std::function<void(tool_reply)> done) {
      std::lock_guard<std::mutex> g(mu);
      held = std::move(done);
      called.set_value();
    };
    rt = test::start_ok(std::move(c));
  }
  call_reply call(const std::string& method, const std::string& idem = "") {
    call_options o;
    o.idempotency_key = idem;
    return rt->call_sync(key, method, "{}", o);
  }
};

} // namespace

TEST_CASE("shared: reads answer while an exclusive call waits at an await for a vendor that has "
          "not answered, and see what it committed before the await") {
  fixture f;
  std::promise<call_reply> slow_done;
  call_options o;
  o.idempotency_key = "slow-1";
  f.rt->call(f.key, "slow", "{}", o, [&](call_reply r) { slow_done.set_value(std::move(r)); });
  f.called.get_future().wait(); // the exclusive call waits at its await now
  auto slow_reply = slow_done.get_future();

  auto c = f.call("count");
  REQUIRE_MESSAGE(c.ok, c.body);
  CHECK(c.json() == json{{"before", 1}}); // committed at the await; "after" not yet
  auto facts = f.rt->call_sync(f.key, "@facts", R"({"type":"before"})", call_options{});
  REQUIRE_MESSAGE(facts.ok, facts.body);
  CHECK(facts.json().size() == 1);
  auto dls = f.rt->call_sync(f.key, "@dead_letters", "{}", call_options{});
  CHECK_MESSAGE(dls.ok, dls.body);
  auto breakers = f.rt->call_sync(f.key, "@breakers", "{}", call_options{});
  CHECK_MESSAGE(breakers.ok, breakers.body);
  // The exclusive call is still waiting: nothing answered it.
  CHECK(slow_reply.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);

  tool_reply r;
  r.ok = true;
  r.http_status = 200;
  {
    std::lock_guard<std::mutex> g(f.mu);
    f.held(std::move(r));
  }
  auto done = slow_reply.get();
  CHECK_MESSAGE(done.ok, done.body);
  auto after = f.call("count");
  CHECK(after.json() == json{{"after", 1}, {"before", 1}});
}

TEST_CASE("shared: a shared method that tries to append or to await fails SHARED_CALL_READ_ONLY "
          "and writes nothing but the error fact of its failure") {
  fixture f;
  auto w = f.call("sneaky", "k-sneaky");
  CHECK_FALSE(w.ok);
  CHECK(w.code == "SHARED_CALL_READ_ONLY");
  CHECK(w.http_status == 500);
  CHECK_FALSE(w.retryable);
  auto a = f.call("waits");
  CHECK_FALSE(a.ok);
  CHECK(a.code == "SHARED_CALL_READ_ONLY");
  // Each failure is an error fact (written by an exclusive turn of its own), and nothing else
  // was written. The key of a shared call is not recorded.
  auto c = f.call("count");
  REQUIRE_MESSAGE(c.ok, c.body);
  CHECK(c.json() == json{{"error", 2}});
  auto again = f.call("sneaky", "k-sneaky");
  CHECK_FALSE(again.replayed);
}

} // namespace shared_calls_test
