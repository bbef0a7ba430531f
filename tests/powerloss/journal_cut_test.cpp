// journal_cut_test.cpp: power cuts while journaled handlers await their steps (tests only;
// docs/reliability.md, "Crash rounds for journaled handlers"). The test type `three_steps`
// (tests/support/three_steps.hpp) appends a fact, awaits a tool, three times, and appends a last
// fact. The tool is an in-process vendor whose state lives outside the directory the cut rolls
// back (a real vendor is another machine): per Idempotency-Key, a file with a line per call it
// received and a mark holding its first answer, which it replays to every later call of the key.
// A forked child loads the runtime (durability full) with keyed calls, writing each answer to a
// file outside the cut directory before it reports the call acknowledged; the parent cuts its
// power at a seeded random moment, rebuilds the tree the cut leaves (replay.hpp; some rounds with
// torn unsynced writes), reads every journal on it, restarts on it, retries every call and
// checks: each key's facts once, each answer acknowledged before the cut replayed the same, a
// step completed on the cut tree not run again (its runs and its vendor calls unchanged), a step
// in flight run once more, and no vendor call of a step whose row the cut lost. The test's
// thread, the child's threads and the vendor's answering threads.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "powerloss/harness.hpp"
#include "support/temp_dir.hpp"
#include "support/three_steps.hpp"

using namespace factum;
using nlohmann::json;
namespace fs = std::filesystem;

namespace journal_cut_test {

namespace {

constexpr int calls_per_round = 96;
constexpr int entities = 8;

entity_key entity_of(int k) {
  return {"acme", "three_steps", "j" + std::to_string(k % entities)};
}
std::string call_key(int round, int k) {
  return "jc" + std::to_string(round) + "-k" + std::to_string(k);
}
std::string vendor_key(int round, int k, int step) {
  return test::three_steps_vendor_key(entity_of(k), call_key(round, k), step);
}

// -- the vendor, outside the cut --

/// How many calls the vendor received with Idempotency-Key `key`.
int vendor_calls(const fs::path& vendor, const std::string& key) {
  std::ifstream in(vendor / "calls" / key);
  int n = 0;
  std::string line;
  while (std::getline(in, line))
    ++n;
  return n;
}

/// The vendor: answers each call 200 after 1..8 ms on a thread of its own. It first counts the
/// call (a line in calls/<key>: a write, which the cut stops), then answers fresh when it makes
/// the key's mark keys/<key> (a symlink holding the answer, made in one step or not at all) or
/// replays the mark's answer.
tool_fn vendor_tool(fs::path vendor) {
  return [vendor](const tool_request& req, std::function<void(tool_reply)> done) {
    auto key = req.idempotency_key;
    auto delay = std::chrono::milliseconds(1 + std::hash<std::string>{}(key) % 8);
    std::thread([vendor, key, payload = req.payload, delay, done = std::move(done)] {
      std::this_thread::sleep_for(delay);
      tool_reply r;
      { std::ofstream(vendor / "calls" / key, std::ios::app) << "call\n"; }
      auto nonce = std::chrono::steady_clock::now().time_since_epoch().count();
      auto fresh = json{{"idempotency_key", key}, {"received", payload}, {"nonce", nonce}}.dump();
      auto mark = vendor / "keys" / key;
      std::error_code ec;
      if (::symlink(fresh.c_str(), mark.c_str()) == 0)
        r.body = json::parse(fresh);
      else
        r.body = json::parse(fs::read_symlink(mark, ec).string(), nullptr, false);
      r.ok = !ec && r.body.is_object();
      r.http_status = r.ok ? 200 : 500;
      done(std::move(r));
    }).detach();
  };
}

runtime_config journal_config(const fs::path& dir, const fs::path& vendor) {
  runtime_config c;
  c.data_dir = dir;
  c.mode = durability::full;
  add_builtin_types(c.types);
  test::add_three_steps_type(c.types);
  c.storage_threads = 4;
  c.tools[test::three_steps_tool] = vendor_tool(vendor);
  tool_policy p;
  p.retry = {{"max_attempts", 1}}; // one vendor call per run of a step
  c.tool_policies[test::three_steps_tool] = p;
  return c;
}

/// The child: every call, 16 at once; each answer written to replies/<k> (outside the cut
/// directory) before its call number goes on `fd`; -1 once every call answered.
[[noreturn]] void child_runs(const fs::path& dir, const fs::path& vendor, int round, int fd) {
  auto r = runtime::start(journal_config(dir, vendor));
  if (!r)
    _exit(2);
  std::mutex mu;
  std::condition_variable cv;
  int open = 0;
  for (int k = 0; k < calls_per_round; ++k) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return open < 16; });
      ++open;
    }
    call_options o;
    o.idempotency_key = call_key(round, k);
    auto body = json{{"k", o.idempotency_key}}.dump();
    r.value()->call(entity_of(k), "run", body, o, [&, k](call_reply rep) {
      if (rep.ok) {
        std::ofstream(vendor / "replies" / std::to_string(k)) << rep.body;
        int32_t v = k;
        if (::write(fd, &v, sizeof v) != sizeof v)
          _exit(3);
      }
      std::lock_guard<std::mutex> g(mu);
      --open;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return open == 0; });
  }
  int32_t end = -1;
  (void)!::write(fd, &end, sizeof end);
  for (;;)
    ::pause(); // the parent cuts the power; the runtime is never stopped
}

// -- the journals and facts on a tree --

/// One step as a tree holds it: its runs (0: no row) and whether it completed.
struct step_seen {
  int64_t runs = 0;
  bool completed = false;
};

/// Every step of every call of `round` on the tree `dir`, by vendor key.
std::map<std::string, step_seen> steps_on(const fs::path& dir, int round) {
  std::map<std::string, step_seen> out;
  for (int k = 0; k < calls_per_round; ++k) {
    store_options ro;
    ro.data_dir = dir;
    ro.read_only = true;
    auto s = entity_store::open(ro, entity_of(k));
    if (!s) // an entity whose file never reached the disk
      continue;
    auto rows = s.value()->journal("key:" + call_key(round, k));
    REQUIRE(rows.is_ok());
    for (auto& row : *rows)
      if (row.step >= 1 && row.step <= 3)
        out[vendor_key(round, k, static_cast<int>(row.step))] = {row.runs, row.result.has_value()};
  }
  return out;
}

/// The facts a..d of call `k` each once and in order, agreeing with its answer `a`.
void check_facts(entity_store& store, int round, int k, const json& a) {
  fact_filter f;
  f.type = test::three_steps_fact;
  f.limit = 10000;
  auto facts = store.query(f);
  REQUIRE_MESSAGE(facts.is_ok(), facts.error().to_string());
  std::map<std::string, std::vector<fact>> mine;
  for (auto& fa : *facts)
    if (fa.idempotency_key == call_key(round, k))
      mine[fa.subtype].push_back(fa);
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    auto& v = mine[test::three_steps_subtype(i)];
    CHECK_MESSAGE(v.size() == 1,
                  "call " << k << " has " << v.size() << " facts " << test::three_steps_subtype(i));
    if (v.size() != 1)
      continue;
    CHECK(v[0].seq > last);
    last = v[0].seq;
    auto d = json::parse(v[0].data);
    if (i == 0)
      CHECK_MESSAGE((d["now"] == a["now"] && d["random"] == a["random"]),
                    "call " << k << " answered " << a.dump() << ", its fact a holds " << d.dump());
    else
      CHECK_MESSAGE(d["reply"] == a["steps"][static_cast<size_t>(i - 1)],
                    "call " << k << ": fact " << i << " holds " << d.dump());
  }
}

/// The answer of call `k`: its key, and per step the vendor's echo of its payload and key.
bool answer_ok(int round, int k, const json& a) {
  if (!a.is_object() || a.value("k", "") != call_key(round, k) || !a["steps"].is_array() ||
      a["steps"].size() != 3)
    return false;
  for (int step = 1; step <= 3; ++step) {
    auto& s = a["steps"][static_cast<size_t>(step - 1)];
    if (s.value("idempotency_key", "") != vendor_key(round, k, step) ||
        s.value("received", json()) != test::three_steps_payload(call_key(round, k), step))
      return false;
  }
  return true;
}

} // namespace

TEST_CASE("power cut while journaled handlers await their steps (three_steps.run against a vendor "
          "outside the cut): after the restart and a retry of every call, each call's facts "
          "once, acknowledged answers replayed the same, completed steps not run again, steps "
          "in flight run once more, no vendor call of a step the cut lost (4 rounds)") {
  test::temp_dir tmp;
  std::mt19937 rng(2711);
  for (int round = 0; round < 4; ++round) {
    auto dir = tmp.path() / ("live" + std::to_string(round));
    auto vendor = tmp.path() / ("vendor" + std::to_string(round));
    auto cut = tmp.path() / ("cut" + std::to_string(round));
    fs::create_directories(dir);
    for (auto* sub : {"keys", "calls", "replies"})
      fs::create_directories(vendor / sub);
    auto base = powerloss::take_snapshot(dir);
    int cut_after = std::uniform_int_distribution<int>(4, calls_per_round * 3 / 4)(rng);
    uint32_t torn = round % 2 ? static_cast<uint32_t>(rng()) | 1u : 0u;
    powerloss::recorded_child child(dir, tmp.path() / "log",
                                    [&](int fd) { child_runs(dir, vendor, round, fd); });
    child.read_acks(cut_after);
    auto acked = child.cut();
    auto replay = powerloss::rebuild(base, dir, tmp.path() / "log", cut, false, torn);

    // What the cut left: the steps on the tree and the vendor's calls of each.
    auto before = steps_on(cut, round);
    std::map<std::string, int> calls_before;
    for (int k = 0; k < calls_per_round; ++k)
      for (int step = 1; step <= 3; ++step) {
        auto vk = vendor_key(round, k, step);
        calls_before[vk] = vendor_calls(vendor, vk);
        // The output gate: a step's call leaves only once its row is durable.
        CHECK_MESSAGE(calls_before[vk] <= before[vk].runs,
                      "call " << k << " step " << step << ": the vendor saw " << calls_before[vk]
                              << " calls, the cut tree has " << before[vk].runs << " runs");
      }

    // Restarted there, every call is made again until it answers 2xx.
    auto r = runtime::start(journal_config(cut, vendor));
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    std::map<int, json> answers;
    int replayed_equal = 0;
    for (int k = 0; k < calls_per_round; ++k) {
      call_options o;
      o.idempotency_key = call_key(round, k);
      call_reply rep;
      for (int attempt = 0; attempt < 5; ++attempt) {
        rep = r.value()->call_sync(entity_of(k), "run", json{{"k", o.idempotency_key}}.dump(), o);
        if (rep.ok || !rep.retryable)
          break;
      }
      REQUIRE_MESSAGE(rep.ok, "call " << k << ": " << rep.body);
      answers[k] = json::parse(rep.body);
      CHECK_MESSAGE(answer_ok(round, k, answers[k]), "call " << k << ": " << rep.body);
      if (acked.count(k)) {
        auto first = json::parse(powerloss::file_bytes(vendor / "replies" / std::to_string(k)),
                                 nullptr, false);
        CHECK_MESSAGE(rep.replayed, "acknowledged call " << k << " ran again after the restart");
        CHECK_MESSAGE(answers[k] == first, "acknowledged call " << k << " was answered "
                                                                << first.dump() << ", then "
                                                                << rep.body);
        replayed_equal += rep.replayed && answers[k] == first;
      }
    }
    r.value()->stop();

    // Each call's facts, and each step against what the cut left.
    auto after = steps_on(cut, round);
    int completed_kept = 0, rerun = 0, fresh = 0, unreached = 0;
    for (int k = 0; k < calls_per_round; ++k) {
      store_options ro;
      ro.data_dir = cut;
      ro.read_only = true;
      auto s = entity_store::open(ro, entity_of(k));
      REQUIRE(s.is_ok());
      auto v = s.value()->verify();
      CHECK((v && v->ok));
      check_facts(**s, round, k, answers[k]);
      for (int step = 1; step <= 3; ++step) {
        auto vk = vendor_key(round, k, step);
        auto b = before[vk], a = after[vk];
        int calls = vendor_calls(vendor, vk);
        std::error_code ec;
        CHECK_MESSAGE(fs::is_symlink(vendor / "keys" / vk, ec), "step " << vk << " never answered");
        CHECK_MESSAGE(a.completed, "call " << k << " step " << step << " is not completed");
        unreached += static_cast<int>(a.runs) - calls;
        if (b.completed) { // durable: not run again
          ++completed_kept;
          CHECK_MESSAGE((a.runs == b.runs && calls == calls_before[vk]),
                        "call " << k << " step " << step << " was completed on the cut tree and "
                                << "ran again: runs " << b.runs << " -> " << a.runs
                                << ", vendor calls " << calls_before[vk] << " -> " << calls);
        } else { // in flight or lost: run once more
          (b.runs > 0 ? rerun : fresh) += 1;
          CHECK_MESSAGE((a.runs == b.runs + 1 && calls == calls_before[vk] + 1),
                        "call " << k << " step " << step << ": runs " << b.runs << " -> " << a.runs
                                << ", vendor calls " << calls_before[vk] << " -> " << calls);
        }
      }
    }
    for (auto& e : fs::directory_iterator(vendor / "calls"))
      CHECK_MESSAGE(after.count(e.path().filename().string()),
                    "the vendor saw Idempotency-Key " << e.path().filename() << ", no step's");
    MESSAGE("round " << round << std::string(torn ? " (torn writes)" : "") << ": cut after "
                     << acked.size() << " acknowledged calls (" << replay.lost_writes
                     << " writes lost); steps "
                     << "completed on the cut tree " << completed_kept << ", in flight and run "
                     << "again " << rerun << ", lost and run afresh " << fresh
                     << "; acknowledged answers replayed equal " << replayed_equal
                     << "; runs the vendor never saw " << unreached);
    CHECK(rerun + fresh > 0); // the cut interrupted some steps: the round tested a resumption
  }
}

} // namespace journal_cut_test
