// keyed_load.hpp: the workload of the crash and power-cut rounds (tests only): concurrent
// appends to `ledger` entities, each call with an idempotency key of its own, its
// acknowledgement reported on a pipe; and the check after a restart: every key retried, the
// acknowledged ones must replay, one fact per key, every chain valid. run() and run_retrying()
// on the child's threads (the runtime's callbacks), the rest on the test's thread.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "factum/runtime/runtime.hpp"

namespace factum::test {

struct keyed_load {
  std::string prefix = "r"; ///< keys are "<prefix><round>-k<k>"
  int round = 0;
  int entities = 8; ///< ledger entities e0 .. e<entities-1>; call k goes to e<k % entities>
  int keys = 1500;  ///< calls per round
  int in_flight = 32;

  entity_key key_for(int k) const { return {"acme", "ledger", "e" + std::to_string(k % entities)}; }
  std::string idem(int k) const {
    return prefix + std::to_string(round) + "-k" + std::to_string(k);
  }
  std::string body(int k) const {
    return nlohmann::json{{"type", "invocation"}, {"data", {{"round", round}, {"k", k}}}}.dump();
  }

  /// Makes every call, `in_flight` at once; writes each acknowledged call's number to `fd` (an
  /// int32) and -1 once every call has answered. Exits the process (code 3) if `fd` fails.
  void run(runtime& rt, int fd) const {
    std::mutex mu;
    std::condition_variable cv;
    int open = 0;
    for (int k = 0; k < keys; ++k) {
      {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return open < in_flight; });
        ++open;
      }
      call_options o;
      o.idempotency_key = idem(k);
      rt.call(key_for(k), "append", body(k), o, [&, k](call_reply rep) {
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
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return open == 0; });
    int32_t end = -1;
    (void)!::write(fd, &end, sizeof end);
  }

  /// Marks run_retrying() writes to `fd` besides call numbers and the end (-1).
  static constexpr int32_t retried_mark = -3;   ///< a call failed retryably; it is made again
  static constexpr int32_t recovered_mark = -5; ///< a call acknowledged after a retry

  /// As run(), but a call answered with a retryable failure is made again with the same key, at
  /// once (a quarantined entity keeps the calls that reach it queued for its next activation),
  /// up to `attempts` times in all; each retry writes retried_mark to `fd`, and an
  /// acknowledgement after one its call number and then recovered_mark. `acked(n)` runs after
  /// the nth acknowledgement was written (on the thread that wrote it).
  void run_retrying(runtime& rt, int fd, int attempts,
                    const std::function<void(int)>& acked = {}) const {
    std::atomic<int> acks{0};
    std::mutex mu;
    std::condition_variable cv;
    int open = 0;
    auto mark = [fd](int32_t v) {
      if (::write(fd, &v, sizeof v) != sizeof v)
        _exit(3);
    };
    std::function<void(int, int)> issue = [&](int k, int attempt) {
      call_options o;
      o.idempotency_key = idem(k);
      rt.call(key_for(k), "append", body(k), o, [&, k, attempt](call_reply rep) {
        if (!rep.ok && rep.retryable && attempt < attempts) {
          mark(retried_mark);
          issue(k, attempt + 1);
          return;
        }
        if (rep.ok) {
          mark(k);
          if (attempt > 1)
            mark(recovered_mark);
          if (int n = ++acks; acked)
            acked(n);
        }
        std::lock_guard<std::mutex> g(mu);
        --open;
        cv.notify_all();
      });
    };
    for (int k = 0; k < keys; ++k) {
      {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return open < in_flight; });
        ++open;
      }
      issue(k, 1);
    }
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return open == 0; });
    mark(-1);
  }

  /// What retry_and_check() found.
  struct outcome {
    int replayed = 0;        ///< retries answered from a stored result
    int acked_ran_again = 0; ///< acknowledged keys whose retry ran the call again
    int wrong_effects = 0;   ///< keys with other than exactly one fact
    int bad_chains = 0;      ///< entities whose hash chain does not verify
    std::string first_problem;
  };

  /// Retries every key on `rt` (all must answer ok: a replay or a first run) and counts what is
  /// wrong, given the keys that were acknowledged before the crash.
  outcome retry_and_check(runtime& rt, const std::set<int>& acked) const {
    outcome out;
    auto note = [&](const std::string& what) {
      if (out.first_problem.empty())
        out.first_problem = what;
    };
    std::vector<std::future<call_reply>> replies;
    for (int k = 0; k < keys; ++k) {
      auto p = std::make_shared<std::promise<call_reply>>();
      replies.push_back(p->get_future());
      call_options o;
      o.idempotency_key = idem(k);
      rt.call(key_for(k), "append", body(k), o,
              [p](call_reply rep) { p->set_value(std::move(rep)); });
    }
    for (int k = 0; k < keys; ++k) {
      auto rep = replies[k].get();
      REQUIRE_MESSAGE(rep.ok, rep.body);
      out.replayed += rep.replayed;
      if (acked.count(k) && !rep.replayed) {
        ++out.acked_ran_again;
        note("acknowledged key " + idem(k) + " ran again");
      }
    }
    std::map<std::string, int> effects;
    for (int e = 0; e < entities; ++e) {
      auto k = key_for(e);
      int64_t after = 0;
      for (;;) {
        auto q =
          rt.call_sync(k, "@facts", nlohmann::json{{"after_seq", after}, {"limit", 5000}}.dump());
        REQUIRE_MESSAGE(q.ok, q.body);
        auto arr = q.json();
        if (arr.empty())
          break;
        for (auto& f : arr)
          ++effects[f.value("idempotency_key", "")];
        after = arr.back()["seq"].get<int64_t>();
      }
      auto ver = rt.call_sync(k, "@verify", "{}");
      if (!ver.ok || ver.json()["ok"] != true) {
        ++out.bad_chains;
        note("the chain of " + k.to_string() + " does not verify");
      }
    }
    for (int k = 0; k < keys; ++k)
      if (int n = effects[idem(k)]; n != 1) {
        ++out.wrong_effects;
        note("key " + idem(k) + " has " + std::to_string(n) + " facts");
      }
    return out;
  }
};

/// Reads acknowledged call numbers from `fd` into `acked` until it holds `until` of them, the
/// end marker (-1) comes, or the pipe ends (until < 0: to the end).
inline void read_acks(int fd, std::set<int>& acked, int until = -1) {
  int32_t v;
  while ((until < 0 || static_cast<int>(acked.size()) < until) &&
         ::read(fd, &v, sizeof v) == sizeof v) {
    if (v < 0) {
      if (until >= 0)
        return;
      continue;
    }
    acked.insert(v);
  }
}

} // namespace factum::test
