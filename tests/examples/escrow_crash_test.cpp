// escrow_crash_test.cpp: the escrow's payout saga across a SIGKILL. A child process runs the
// runtime, takes an escrow to DELIVERED and releases it; its payout vendor tells the parent over
// a pipe that the transfer was asked for, and never answers; the parent kills the child there,
// starts a runtime on the same files and retries the release with its key. The journal resumes
// the saga at the payout: the release is recorded once, a payout that then succeeds completes
// once, one that fails for good is compensated once, and a retry of the settled key replays it.
#include <unistd.h>

#include "support.hpp"
#include "support/child_process.hpp"

using namespace factum;
using nlohmann::json;
using test::example_fixture;
using test::scripted_vendor;

namespace {

/// Forks a child that releases escrow `id` and is killed while its payout is asked for.
void release_and_die(const std::filesystem::path& dir, const std::string& id) {
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    runtime_config c;
    c.data_dir = dir;
    examples::add_example_types(c.types);
    c.tools["payout"] = [fd = report](const tool_request&, std::function<void(tool_reply)>) {
      (void)!write(fd, "p", 1); // asked for the transfer: never answers
    };
    auto rt = runtime::start(std::move(c));
    if (!rt)
      _exit(2);
    auto key = *entity_key::make("acme", "escrow", id);
    auto step = [&](const char* m, const json& a) {
      call_options o;
      o.idempotency_key = id + "-" + m;
      if (!rt.value()->call_sync(key, m, a.dump(), o).ok)
        _exit(3);
    };
    step("open", {{"buyer", "bob"},
                  {"seller", "sue"},
                  {"arbiter", "ann"},
                  {"amount", "250.00"},
                  {"currency", "USD"}});
    step("fund", {{"actor", "bob"}, {"amount", "250"}});
    step("deliver", {{"actor", "sue"}});
    step("release", {{"actor", "bob"}}); // never returns
    _exit(4);
  }));
  char c = 0;
  REQUIRE_MESSAGE(read(child.reports(), &c, 1) == 1, "the child died before its payout");
  child.kill_now();
}

size_t count(example_fixture& f, const std::string& id, const std::string& type) {
  return f.facts("escrow", id, {{"type", type}}).size();
}

} // namespace

TEST_CASE("escrow: a release killed at its payout resumes there on retry: released once, paid "
          "once") {
  example_fixture f;
  scripted_vendor payout{"0"};
  f.tools["payout"] = payout.fn();
  release_and_die(f.tmp.path(), "c1");
  f.start();
  auto r = f.call("escrow", "c1", "release", {{"actor", "bob"}}, "c1-release");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK_FALSE(r.replayed);
  CHECK(r.json()["status"] == "RELEASED");
  CHECK(payout.calls() == 1);
  CHECK(count(f, "c1", "escrow.released") == 1);
  CHECK(count(f, "c1", "escrow.payout_completed") == 1);
  CHECK(count(f, "c1", "escrow.payout_compensated") == 0);
  auto again = f.call("escrow", "c1", "release", {{"actor", "bob"}}, "c1-release");
  CHECK(again.replayed);
  CHECK(payout.calls() == 1);
}

TEST_CASE("escrow: a release killed at its payout, whose payout then fails for good, is "
          "compensated once, also when retried again") {
  example_fixture f;
  scripted_vendor payout{"0"};
  payout.always({400});
  f.tools["payout"] = payout.fn();
  release_and_die(f.tmp.path(), "c2");
  f.start();
  auto r = f.call("escrow", "c2", "release", {{"actor", "bob"}}, "c2-release");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "PAYOUT_FAILED");
  CHECK_FALSE(r.retryable);
  auto again = f.call("escrow", "c2", "release", {{"actor", "bob"}}, "c2-release");
  CHECK(again.replayed);
  CHECK(again.code == "PAYOUT_FAILED");
  CHECK(count(f, "c2", "escrow.released") == 1);
  CHECK(count(f, "c2", "escrow.payout_compensated") == 1);
  CHECK(count(f, "c2", "escrow.payout_completed") == 0);
  CHECK(f.ok("escrow", "c2", "state", json::object())["status"] == "DELIVERED");
  CHECK(payout.calls() == 1);
}
