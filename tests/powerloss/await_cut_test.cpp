// await_cut_test.cpp: power cuts while handlers await a tool (tests only). The built-in
// `webhook` type's `deliver` calls a tool through the runtime's resilient call; the tool here is
// an in-process vendor whose state lives outside the directory the cut rolls back (a real
// vendor is another machine): under vendor/, a mark per Idempotency-Key it delivered (naming the
// call) and one file per call, holding a line per delivery or replay with the key it came with. A
// forked child loads the runtime (durability full) with calls that each await the vendor for a few
// milliseconds; the parent cuts its power, checks that the whole write log gives the tree the
// child left, rebuilds the tree the cut leaves (replay.hpp), checks what is on it, restarts on it,
// retries every call and checks the log of each call against the vendor's files. The test's thread,
// the child's threads and the vendor's answering threads.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "powerloss/harness.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int calls_per_round = 240;
constexpr int webhook_entities = 6;

/// What the vendor's files say about call `k`.
struct vendor_file {
  int delivered = 0; ///< calls it answered with a fresh delivery
  int replayed = 0;  ///< calls it answered from its de-duplication (same key, already delivered)
  std::set<std::string> keys; ///< the Idempotency-Keys the calls came with
};

/// The deliveries are the marks under keys/ that name call `k` (a kill never leaves a delivery
/// without its mark); the replays and the keys of every call are in the call's file.
vendor_file read_vendor(const fs::path& vendor, int k) {
  vendor_file v;
  auto call = "k" + std::to_string(k);
  for (auto& mark : fs::directory_iterator(vendor / "keys"))
    if (fs::read_symlink(mark.path()) == call) {
      ++v.delivered;
      v.keys.insert(mark.path().filename().string());
    }
  std::ifstream in(vendor / call);
  std::string what, key;
  while (in >> what >> key) {
    v.replayed += what == "replayed";
    v.keys.insert(key);
  }
  return v;
}

/// The vendor: answers each call 200 after 1..6 ms on a thread of its own, delivering on the
/// first call of an Idempotency-Key and replaying after that (a call that came with another key
/// would be delivered again). Its files are outside the cut's directory.
tool_fn vendor_tool(fs::path vendor) {
  return [vendor](const tool_request& req, std::function<void(tool_reply)> done) {
    int k = req.payload.value("k", -1);
    auto delay =
      std::chrono::milliseconds(1 + (k * 7 + static_cast<int>(req.idempotency_key.size())) % 6);
    std::thread([vendor, k, key = req.idempotency_key, delay, done = std::move(done)] {
      std::this_thread::sleep_for(delay);
      // De-duplication by Idempotency-Key, as the vendor would: the first call of a key
      // delivers. The delivery and its record are one step, as in a real vendor's database: a
      // symlink keys/<key> naming the call, which fails once the key has one. (A mark and a
      // line written after it would let the cut, which stops file changes and then kills the
      // child, keep a delivery without its line.) The call's file lists every call.
      auto call = "k" + std::to_string(k);
      bool fresh = ::symlink(call.c_str(), (vendor / "keys" / key).c_str()) == 0;
      auto path = vendor / call;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      auto line = std::string(fresh ? "delivered " : "replayed ") + key + "\n";
      bool written = fd >= 0 && ::write(fd, line.data(), line.size()) == ssize_t(line.size());
      if (fd >= 0)
        ::close(fd);
      tool_reply r;
      r.ok = written;
      r.http_status = written ? 200 : 500;
      r.body = json{{"delivered", fresh}};
      if (!written)
        r.error_message = "the vendor could not record the call";
      done(std::move(r));
    }).detach();
  };
}

runtime_config await_config(const fs::path& dir, const fs::path& vendor) {
  runtime_config c;
  c.data_dir = dir;
  c.mode = durability::full;
  add_builtin_types(c.types);
  c.storage_threads = 4;
  c.tools["hook"] = vendor_tool(vendor);
  tool_policy p;
  p.retry = {{"max_attempts", 2}, {"base_delay_ms", 5}};
  p.price = "0.001"; // each successful attempt is a cost fact: the log's record of a delivery
  c.tool_policies["hook"] = p;
  return c;
}

entity_key webhook_key(int k) {
  return {"acme", "webhook", "w" + std::to_string(k % webhook_entities)};
}
std::string call_key(int round, int k) {
  return "aw" + std::to_string(round) + "-k" + std::to_string(k);
}
std::string call_body(int k) {
  return json{{"tool", "hook"}, {"payload", {{"k", k}}}}.dump();
}

/// The child: every call, 24 at once; each acknowledged call's number on `fd`.
[[noreturn]] void child_delivers(const fs::path& dir, const fs::path& vendor, int round, int fd) {
  auto r = runtime::start(await_config(dir, vendor));
  if (!r)
    _exit(2);
  std::mutex mu;
  std::condition_variable cv;
  int open = 0;
  for (int k = 0; k < calls_per_round; ++k) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return open < 24; });
      ++open;
    }
    call_options o;
    o.idempotency_key = call_key(round, k);
    r.value()->call(webhook_key(k), "deliver", call_body(k), o, [&, k](call_reply rep) {
      if (rep.ok) {
        int32_t v = k;
        if (::write(fd, &v, sizeof v) != sizeof v)
          _exit(3);
      }
      std::lock_guard<std::mutex> g(mu);
      --open;
      cv.notify_all();
    });
  }
  for (;;)
    ::pause(); // the parent cuts the power; the runtime is never stopped
}

/// Each call's deliveries in its entity's log: cost `tool_usage` facts with `failed` false.
std::map<std::string, int> deliveries_on_disk(const fs::path& dir, int& bad_chains) {
  std::map<std::string, int> out;
  for (int e = 0; e < webhook_entities; ++e) {
    store_options ro;
    ro.data_dir = dir;
    ro.read_only = true;
    auto s = entity_store::open(ro, webhook_key(e));
    if (!s) // an entity whose file never reached the disk
      continue;
    auto v = s.value()->verify();
    bad_chains += !v || !v->ok;
    fact_filter f;
    f.type = "cost";
    f.subtype = "tool_usage";
    f.limit = 10000;
    auto facts = s.value()->query(f);
    REQUIRE(facts.is_ok());
    for (auto& fa : *facts)
      if (json::parse(fa.data).value("failed", true) == false)
        ++out[fa.idempotency_key];
  }
  return out;
}

/// Whether the tree the cut left has call `k`'s key stored completed.
bool key_completed(const fs::path& dir, int round, int k) {
  store_options ro;
  ro.data_dir = dir;
  ro.read_only = true;
  auto s = entity_store::open(ro, webhook_key(k));
  if (!s)
    return false;
  auto rec = s.value()->get_key(call_key(round, k));
  return rec && rec->status == key_status::completed;
}

} // namespace

TEST_CASE("power cut mid-await (webhook.deliver against a vendor outside the cut): an "
          "acknowledged delivery is on the tree the cut leaves, and after the restart and a "
          "retry of every call each call has one delivery in its log and one at the vendor "
          "(4 rounds)") {
  test::temp_dir tmp;
  std::mt19937 rng(2611);
  for (int round = 0; round < 4; ++round) {
    auto dir = tmp.path() / ("live" + std::to_string(round));
    auto vendor = tmp.path() / ("vendor" + std::to_string(round));
    auto cut = tmp.path() / ("cut" + std::to_string(round));
    fs::create_directories(dir);
    fs::create_directories(vendor / "keys");
    auto base = powerloss::take_snapshot(dir);
    int kill_after = std::uniform_int_distribution<int>(20, 160)(rng);
    powerloss::recorded_child child(dir, tmp.path() / "log",
                                    [&](int fd) { child_delivers(dir, vendor, round, fd); });
    child.read_acks(kill_after);
    auto acked = child.cut();
    // The log's own check: taken whole, it rebuilds the tree the child left.
    CHECK(powerloss::whole_log_mismatches(base, dir, tmp.path() / "log", cut.string() + "-whole") ==
          0);
    auto replay = powerloss::rebuild(base, dir, tmp.path() / "log", cut);
    REQUIRE(static_cast<int>(acked.size()) >= kill_after);

    // On the cut tree, before anything runs: every acknowledged call's key is completed.
    int lost = 0;
    for (int k : acked)
      if (!key_completed(cut, round, k)) {
        ++lost;
        FAIL_CHECK("acknowledged call " << k << " is not completed on the tree the cut left");
      }

    // Restarted there, every call is made again until it answers 2xx (the vendor answers).
    auto r = runtime::start(await_config(cut, vendor));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    int ran_again = 0, unanswered = 0;
    for (int k = 0; k < calls_per_round; ++k) {
      call_options o;
      o.idempotency_key = call_key(round, k);
      call_reply rep;
      for (int attempt = 0; attempt < 5; ++attempt) {
        rep = r.value()->call_sync(webhook_key(k), "deliver", call_body(k), o);
        if (rep.ok || !rep.retryable)
          break;
      }
      unanswered += !rep.ok;
      CHECK_MESSAGE(rep.ok, "call " << k << ": " << rep.body);
      if (acked.count(k) && !rep.replayed) {
        ++ran_again;
        FAIL_CHECK("acknowledged call " << k << " ran again after the restart");
      }
    }
    r.value()->stop();

    // The log of each call against the vendor's files.
    int bad_chains = 0, vendor_calls = 0, called_again = 0;
    auto on_disk = deliveries_on_disk(cut, bad_chains);
    CHECK(bad_chains == 0);
    for (int k = 0; k < calls_per_round; ++k) {
      auto v = read_vendor(vendor, k);
      vendor_calls += v.delivered + v.replayed;
      called_again += v.replayed > 0;
      CHECK_MESSAGE(on_disk[call_key(round, k)] == 1, "call " << k << " has "
                                                              << on_disk[call_key(round, k)]
                                                              << " deliveries in its log");
      CHECK_MESSAGE(v.delivered == 1,
                    "call " << k << " was delivered " << v.delivered << " times by the vendor");
      CHECK_MESSAGE(v.keys.size() == 1, "call " << k << " reached the vendor with " << v.keys.size()
                                                << " Idempotency-Keys");
    }
    MESSAGE("round " << round << ": cut after " << acked.size() << " acknowledged calls ("
                     << replay.lost_writes << " writes lost); " << vendor_calls
                     << " vendor calls for " << calls_per_round << " calls, " << called_again
                     << " calls reached it again after their delivery; lost " << lost
                     << ", ran again " << ran_again << ", unanswered " << unanswered);
    CHECK(replay.lost_writes > 0); // the cut dropped something: the round tested a loss
  }
}
