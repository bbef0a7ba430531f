// drive.cpp: how `factum bench` sends: the closed loop (`concurrency` callers, each sending its
// next request from the previous one's completion) and the open loop (a fixed schedule, latency
// from the due time), judging each answer, the progress line, and the setup and measured phases.
// The loops and phases run on the calling thread; completions (and so judge(), and the closed
// loop's next send) run on the target's threads and touch only atomics, the histogram and
// mutex-guarded members; the progress line runs on its own thread and reads only atomics and the
// histogram.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "bench_run.hpp"

namespace factum::tools::loadgen {

namespace {

sent_item sent_of(const item& it) {
  sent_item s;
  s.k = it.k;
  if (it.k == kind::append) {
    s.id = it.req.id;
    s.key = it.req.idempotency_key;
  }
  return s;
}

} // namespace

// -- loops --

double bench_run::closed_loop(int64_t count, double seconds, int conc,
                              const std::function<item(uint64_t)>& make, bool measured) {
  struct state {
    std::atomic<uint64_t> next{0};
    std::atomic<int> active{0};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    clk::time_point end;
    uint64_t limit = 0;
  };
  auto s = std::make_shared<state>();
  s->limit = count > 0 ? uint64_t(count) : UINT64_MAX;
  auto t0 = clk::now();
  s->end =
    count > 0 ? clk::time_point::max() : t0 + std::chrono::nanoseconds(int64_t(seconds * 1e9));
  tally& ta = measured ? meas_ : setup_;
  // The completion that ends the phase still runs inside `issue` after main wakes up, so the
  // function lives in a shared_ptr that every in-flight completion holds.
  auto issue = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> weak = issue;
  *issue = [this, &make, &ta, measured, s, weak] {
    uint64_t i = s->next.fetch_add(1);
    if (i >= s->limit || clk::now() >= s->end) {
      if (s->active.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> g(s->mu);
        s->done = true;
        s->cv.notify_all();
      }
      return;
    }
    auto it = make(i);
    auto start = clk::now();
    ta.sent.fetch_add(1);
    // Made before it.req is moved: it reads the request (sent_of).
    auto done = on_answer([this, &ta, measured, next = weak.lock(), sn = sent_of(it),
                           start](response r) mutable {
      auto ns =
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - start).count());
      judge(ta, sn, r, ns, measured);
      (*next)();
    });
    t_->send(std::move(it.req), std::move(done));
  };
  int callers = int(std::min<int64_t>(conc, count > 0 ? count : conc));
  s->active = callers;
  auto prog = start_progress(measured, t0);
  for (int c = 0; c < callers; ++c)
    (*issue)();
  {
    std::unique_lock<std::mutex> g(s->mu);
    s->cv.wait(g, [&] { return s->done; });
  }
  stop_progress(prog);
  return std::chrono::duration<double>(clk::now() - t0).count();
}

double bench_run::open_loop(int64_t count, double seconds,
                            const std::function<item(uint64_t)>& make) {
  struct state {
    std::atomic<int64_t> inflight{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto s = std::make_shared<state>();
  auto t0 = clk::now();
  auto interval = std::chrono::duration<double, std::nano>(1e9 / o_.rate);
  auto end = t0 + std::chrono::nanoseconds(int64_t(seconds * 1e9));
  auto prog = start_progress(true, t0);
  for (uint64_t i = 0;; ++i) {
    auto due = t0 + std::chrono::duration_cast<clk::duration>(interval * double(i));
    if (count > 0 ? i >= uint64_t(count) : due >= end)
      break;
    std::this_thread::sleep_until(due);
    auto lag =
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - due).count());
    if (lag > 1'000'000)
      meas_.late.fetch_add(1);
    if (lag > meas_.max_send_lag_ns.load())
      meas_.max_send_lag_ns.store(lag);
    if (s->inflight.load() >= o_.max_inflight) {
      meas_.dropped.fetch_add(1);
      continue;
    }
    auto it = make(i);
    s->inflight.fetch_add(1);
    meas_.sent.fetch_add(1);
    auto done = on_answer([this, s, sn = sent_of(it), due](response r) mutable {
      auto ns =
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - due).count());
      judge(meas_, sn, r, ns, true);
      if (s->inflight.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> g(s->mu);
        s->cv.notify_all();
      }
    });
    t_->send(std::move(it.req), std::move(done));
  }
  {
    std::unique_lock<std::mutex> g(s->mu);
    s->cv.wait(g, [&] { return s->inflight.load() == 0; });
  }
  stop_progress(prog);
  return std::chrono::duration<double>(clk::now() - t0).count();
}

void bench_run::judge(tally& ta, sent_item& sn, response& r, uint64_t ns, bool measured) {
  if (measured)
    lat_.record(ns);
  ta.answered.fetch_add(1);
  bool good = false, expected_failure = false;
  std::string why;
  switch (sn.k) {
  case kind::append:
    if (r.ok && !r.replayed) {
      auto j = json::parse(r.body, nullptr, false);
      if (j.is_object() && j.contains("seq") && j["seq"].is_number_integer() &&
          j.contains("fact_id") && j["fact_id"].is_string()) {
        good = true;
        std::lock_guard<std::mutex> g(ack_mu_);
        acks_.push_back(ack{std::move(sn.id), std::move(sn.key), j["seq"].get<int64_t>(),
                            j["fact_id"].get<std::string>()});
      } else {
        why = "BAD_BODY";
      }
    } else if (r.ok) {
      why = "UNEXPECTED_REPLAY";
    }
    break;
  case kind::replay:
    good = r.ok && r.replayed;
    if (r.ok && !r.replayed)
      why = "NOT_REPLAYED";
    break;
  case kind::tool:
    good = r.ok;
    // The fake vendor's failures (and the breaker's fast fails) are the workload, not errors.
    expected_failure = !r.ok && r.status >= 500 && r.code != "TRANSPORT" && r.code != "TIMEOUT" &&
                       r.code != "CALL_TIMEOUT" && r.code != "UNAVAILABLE" && r.code != "INTERNAL";
    break;
  case kind::read:
  case kind::arm: good = r.ok; break;
  }
  if (r.replayed)
    ta.replayed.fetch_add(1);
  if (good) {
    ta.ok.fetch_add(1);
    return;
  }
  if (why.empty())
    why = r.code.empty() ? "HTTP_" + std::to_string(r.status) : r.code;
  if (expected_failure)
    ta.expected_failures.fetch_add(1);
  else
    ta.errors.fetch_add(1);
  if (r.status == 0 || r.code == "CALL_TIMEOUT")
    ta.unanswered.fetch_add(1);
  std::lock_guard<std::mutex> g(ta.mu);
  ++ta.codes[why];
  if (!expected_failure && ta.first_errors.size() < 5)
    ta.first_errors.push_back(why + " (" + std::to_string(r.status) +
                              "): " + r.body.substr(0, 300));
}

// -- progress line --

std::unique_ptr<bench_run::progress_thread> bench_run::start_progress(bool measured,
                                                                      clk::time_point t0) {
  if (!progress_ || !measured)
    return nullptr;
  auto p = std::make_unique<progress_thread>();
  p->th = std::thread([this, t0, pp = p.get()] {
    uint64_t last = 0;
    auto lt = t0;
    while (!pp->stop.load()) {
      for (int k = 0; k < 10 && !pp->stop.load(); ++k)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto now = clk::now();
      uint64_t n = meas_.answered.load();
      double dt = std::chrono::duration<double>(now - lt).count();
      char b[200];
      std::snprintf(b, sizeof b, "\r%s %6.1f s  %10.0f req/s  done %s  errors %s  p99 %s   ",
                    o_.workload.c_str(), std::chrono::duration<double>(now - t0).count(),
                    dt > 0 ? double(n - last) / dt : 0.0, fmt_int(n).c_str(),
                    fmt_int(meas_.errors.load()).c_str(), fmt_ns(lat_.percentile(99)).c_str());
      err_ << b << std::flush;
      last = n;
      lt = now;
    }
  });
  return p;
}

void bench_run::stop_progress(std::unique_ptr<progress_thread>& p) {
  if (!p)
    return;
  p->stop = true;
  p->th.join();
  err_ << "\n" << std::flush;
}

// -- phases --

void bench_run::setup_phase(const char* what, int64_t n,
                            const std::function<item(uint64_t)>& make) {
  if (n <= 0)
    return;
  if (progress_)
    err_ << "setup: " << what << " (" << fmt_int(uint64_t(n)) << " requests)\n" << std::flush;
  setup_s_ += closed_loop(n, 0, o_.concurrency, make, false);
  setup_errors_ = setup_.errors.load();
}

void bench_run::measure(const std::function<item(uint64_t)>& make) {
  auto before = t_->usage();
  auto c0 = t_->counters();
  if (o_.rate > 0)
    elapsed_s_ = open_loop(o_.count, o_.duration_s, make);
  else
    elapsed_s_ = closed_loop(o_.count, o_.duration_s, o_.concurrency, make, true);
  auto after = t_->usage();
  auto c1 = t_->counters();
  usage_known_ = before.known && after.known;
  cpu_s_ = after.cpu_s - before.cpu_s;
  peak_rss_kib_ = after.peak_rss_kib;
  if (c1.known) {
    counters_known_ = true;
    dc_.activations = c1.activations - c0.activations;
    dc_.hibernations = c1.hibernations - c0.hibernations;
    dc_.commits = c1.commits - c0.commits;
    dc_.facts = c1.facts - c0.facts;
    dc_.peak_active = c1.peak_active;
    dc_.tool_calls = c1.tool_calls - c0.tool_calls;
    dc_.tool_retries = c1.tool_retries - c0.tool_retries;
    dc_.fast_fails = c1.fast_fails - c0.fast_fails;
    dc_.dead_letters = c1.dead_letters - c0.dead_letters;
  }
}

} // namespace factum::tools::loadgen
