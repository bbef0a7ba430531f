// loadgen.cpp: `factum bench`: the command line, the workloads, the closed- and open-loop
// drivers, and the report (table, JSON, CSV). Runs on the calling thread; request completions
// run on the target's threads (CAF workers or the HTTP client's I/O thread) and only touch
// atomics, the histogram and mutex-guarded collections here; the progress line has its own thread.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "factum/tools/histogram.hpp"
#include "factum/tools/loadgen.hpp"
#include "target.hpp"

namespace factum::tools {

using namespace loadgen;

namespace {

using clk = std::chrono::steady_clock;
namespace fs = std::filesystem;
using json = nlohmann::json;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// How a response is judged.
enum class kind { append, replay, tool, read, arm };

struct item {
  request req;
  kind k = kind::append;
};

/// What judge() needs of a request once sent: its kind and, for an append (whose
/// acknowledgement verification checks), its entity and key. Other kinds copy nothing.
struct sent_item {
  kind k = kind::append;
  std::string id, key;
};

sent_item sent_of(const item& it) {
  sent_item s;
  s.k = it.k;
  if (it.k == kind::append) {
    s.id = it.req.id;
    s.key = it.req.idempotency_key;
  }
  return s;
}

/// Counters of one phase. Completions update them from any thread.
struct tally {
  std::atomic<uint64_t> sent{0}, answered{0}, ok{0}, errors{0}, expected_failures{0}, replayed{0},
    dropped{0}, late{0}, unanswered{0};
  std::atomic<uint64_t> max_send_lag_ns{0};
  std::mutex mu;
  std::map<std::string, uint64_t> codes; ///< answers by code (errors and expected failures)
  std::vector<std::string> first_errors;
};

const char* workload_names[] = {"append", "replay", "mixed", "cold", "churn", "alarms", "read"};

int64_t default_entities(const std::string& w) {
  if (w == "append")
    return 1;
  if (w == "cold" || w == "alarms")
    return 1000;
  if (w == "churn")
    return 2000;
  return 10;
}

std::string fmt_int(uint64_t v) {
  auto s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3)
    s.insert(size_t(i), ",");
  return s;
}

std::string fmt_ns(uint64_t ns) {
  char b[32];
  if (ns < 1'000)
    std::snprintf(b, sizeof b, "%llu ns", (unsigned long long)ns);
  else if (ns < 1'000'000)
    std::snprintf(b, sizeof b, "%.0f us", double(ns) / 1e3);
  else if (ns < 1'000'000'000)
    std::snprintf(b, sizeof b, "%.2f ms", double(ns) / 1e6);
  else
    std::snprintf(b, sizeof b, "%.2f s", double(ns) / 1e9);
  return b;
}

/// One bench run: the target, the request generators and the collected results.
class bench_run {
 public:
  bench_run(const bench_options& o, std::ostream& out, std::ostream& err)
      : o_(o), out_(out), err_(err) {
    entities_ = o.entities > 0 ? o.entities : default_entities(o.workload);
    // Keys and fresh entity ids carry a run id, so that runs against one server (or one --data)
    // never replay each other's keys and verification counts only this run's facts.
    std::random_device rd;
    char b[32];
    std::snprintf(b, sizeof b, "%08x", unsigned(rd() ^ unsigned(getpid()) ^ unsigned(wall_ms())));
    run_id_ = b;
    filler_.assign(size_t(std::max(0, o.payload)), 'x');
    progress_ = o.progress < 0 ? isatty(STDERR_FILENO) == 1 : o.progress == 1;
  }

  int run() {
    if (auto e = check(); !e.empty()) {
      err_ << "factum bench: " << e << "\n";
      return 2;
    }
    if (!open_target())
      return 1;
    try {
      workload();
    } catch (const std::exception& e) {
      err_ << "factum bench: " << e.what() << "\n";
      return 1;
    }
    verify();
    report();
    if (!tmp_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_dir_, ec);
    }
    bool good = meas_.errors == 0 && setup_errors_ == 0 && (!ver_.ran || ver_.ok);
    return good ? 0 : 1;
  }

 private:
  // -- options and target --

  std::string check() {
    if (std::find(std::begin(workload_names), std::end(workload_names), o_.workload) ==
        std::end(workload_names))
      return "unknown workload \"" + o_.workload +
             "\" (append, replay, mixed, cold, churn, alarms, read)";
    if (o_.mode != "inproc" && o_.mode != "http")
      return "--mode must be inproc or http";
    if (o_.mode == "http" && o_.workload == "alarms")
      return "the alarms workload runs in-process only (a server has no bench_alarm type)";
    if (o_.concurrency < 1 || o_.concurrency > 100'000)
      return "--concurrency must be 1..100000";
    if (o_.entities < 0 || o_.entities > 100'000'000)
      return "--entities must be 1..100000000";
    if (o_.count < 0 || o_.duration_s <= 0 || o_.duration_s > 86'400)
      return "--count must be >= 0 and --duration in (0, 86400] seconds";
    if (o_.rate < 0 || o_.rate > 10'000'000)
      return "--rate must be 0 (closed loop) or up to 10000000 requests/s";
    if (o_.payload < 0 || o_.payload > 1'000'000)
      return "--payload must be 0..1000000 bytes";
    if (o_.durability != "full" && o_.durability != "normal")
      return "--durability must be full or normal";
    if (o_.replay_share < 0 || o_.tool_share < 0 || o_.replay_share + o_.tool_share > 1)
      return "--replay-share and --tool-share must be >= 0 and sum to at most 1";
    if (o_.fail_rate < 0 || o_.fail_rate > 1)
      return "--fail-rate must be in [0, 1]";
    if (o_.keys < 1 || o_.facts_per_entity < 1 || o_.read_limit < 1 || o_.read_limit > 1000)
      return "--keys and --facts-per-entity must be >= 1, --read-limit 1..1000";
    if (o_.timeout_s <= 0 || o_.max_inflight < 1)
      return "--timeout and --max-inflight must be positive";
    return {};
  }

  bool open_target() {
    std::string error;
    if (o_.mode == "http") {
      http_ = make_http_target(o_, error);
      t_ = http_.get();
    } else {
      dir_ = o_.data;
      if (dir_.empty()) {
        tmp_dir_ = (fs::temp_directory_path() / ("factum-bench-" + run_id_)).string();
        dir_ = tmp_dir_;
      }
      int64_t cap = 0;
      if (o_.workload == "churn")
        cap = o_.active_cap > 0 ? o_.active_cap : std::max<int64_t>(1, entities_ / 20);
      active_cap_ = cap;
      inproc_ = make_inproc_target(o_, dir_, cap, &sink_, error);
      t_ = inproc_.get();
    }
    if (!t_) {
      err_ << "factum bench: " << error << "\n";
      if (!tmp_dir_.empty()) {
        std::error_code ec;
        fs::remove_all(tmp_dir_, ec);
      }
      return false;
    }
    return true;
  }

  // -- request generators --

  std::string entity(uint64_t n) const { return "e" + std::to_string(n); }
  uint64_t pick(uint64_t i, uint64_t salt) const {
    return mix64(o_.seed * 0x9e3779b97f4a7c15ULL ^ (i + 1) * salt) % uint64_t(entities_);
  }
  std::string key(const char* prefix, uint64_t i) const {
    return run_id_ + "-" + prefix + std::to_string(i);
  }
  item append_item(std::string id, std::string k, uint64_t n) const {
    item it;
    it.k = kind::append;
    it.req.type = "ledger";
    it.req.id = std::move(id);
    it.req.method = "append";
    it.req.idempotency_key = std::move(k);
    it.req.body =
      R"({"type":"bench","data":{"n":)" + std::to_string(n) + R"(,"fill":")" + filler_ + "\"}}";
    return it;
  }
  /// Completed key j of the replay set: always the same entity, key and body.
  item replay_key_item(uint64_t j) const {
    return append_item(entity(j % uint64_t(entities_)), key("r", j), j);
  }

  // -- phases --

  /// Runs `make(0..)` closed loop with `conc` callers, until `count` requests (count > 0) or
  /// `seconds`. Measured phases record latency into meas_lat_ and counts into meas_.
  double closed_loop(int64_t count, double seconds, int conc,
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
      auto done = on_answer(
        [this, &ta, measured, next = weak.lock(), sn = sent_of(it), start](response r) mutable {
          auto ns = uint64_t(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - start).count());
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

  /// Open loop: request i is due at t0 + i / rate; latency runs from that due time, so a slow
  /// answer delays no measurement (no coordinated omission). A send more than 1 ms behind its
  /// schedule counts as late; beyond max_inflight outstanding requests a send is dropped.
  double open_loop(int64_t count, double seconds, const std::function<item(uint64_t)>& make) {
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

  /// Judges one answer against what its kind expects; records acks of fresh appends (moving
  /// the entity and key out of `sn`).
  void judge(tally& ta, sent_item& sn, response& r, uint64_t ns, bool measured) {
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
                         r.code != "CALL_TIMEOUT" && r.code != "UNAVAILABLE" &&
                         r.code != "INTERNAL";
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

  struct progress_thread {
    std::thread th;
    std::atomic<bool> stop{false};
  };

  std::unique_ptr<progress_thread> start_progress(bool measured, clk::time_point t0) {
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

  void stop_progress(std::unique_ptr<progress_thread>& p) {
    if (!p)
      return;
    p->stop = true;
    p->th.join();
    err_ << "\n" << std::flush;
  }

  void setup_phase(const char* what, int64_t n, const std::function<item(uint64_t)>& make) {
    if (n <= 0)
      return;
    if (progress_)
      err_ << "setup: " << what << " (" << fmt_int(uint64_t(n)) << " requests)\n" << std::flush;
    setup_s_ += closed_loop(n, 0, o_.concurrency, make, false);
    setup_errors_ = setup_.errors.load();
  }

  void measure(const std::function<item(uint64_t)>& make) {
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

  // -- workloads --

  void workload() {
    auto E = uint64_t(entities_);
    const auto& w = o_.workload;
    if (w == "append" || w == "churn") {
      if (o_.warmup || w == "churn")
        setup_phase("one append per entity", entities_,
                    [&](uint64_t i) { return append_item(entity(i), key("w", i), i); });
      measure([&](uint64_t i) { return append_item(entity(pick(i, 7)), key("a", i), i); });
    } else if (w == "replay" || w == "mixed") {
      setup_phase("completed keys", o_.keys, [&](uint64_t j) { return replay_key_item(j); });
      auto K = uint64_t(o_.keys);
      measure([&, K, E](uint64_t i) {
        double u = double(mix64(o_.seed ^ (i + 1) * 0xd1b54a32d192ed03ULL) % 1'000'000) / 1e6;
        if (w == "replay" || u < o_.replay_share) {
          auto it = replay_key_item(mix64(o_.seed + i * 31 + 17) % K);
          it.k = kind::replay;
          return it;
        }
        if (u < o_.replay_share + o_.tool_share) {
          item it;
          it.k = kind::tool;
          it.req.type = "webhook";
          it.req.id = "w" + std::to_string(pick(i, 13) % E);
          it.req.method = "deliver";
          it.req.idempotency_key = key("t", i);
          it.req.body =
            R"({"tool":")" + o_.tool + R"(","payload":{"n":)" + std::to_string(i) + "}}";
          return it;
        }
        return append_item(entity(pick(i, 7)), key("a", i), i);
      });
    } else if (w == "cold") {
      if (inproc_) {
        setup_phase("create the entities", entities_,
                    [&](uint64_t i) { return append_item(entity(i), key("c", i), i); });
        if (progress_)
          err_ << "setup: restart the runtime (every entity hibernated)\n";
        inproc_->restart();
        measure_count([&](uint64_t i) { return append_item(entity(i), key("a", i), i); });
      } else {
        // Over HTTP the server cannot be restarted: fresh entities, i.e. a creation storm.
        measure_count([&](uint64_t i) {
          return append_item("c" + run_id_ + "-" + std::to_string(i), key("a", i), i);
        });
      }
    } else if (w == "read") {
      auto F = uint64_t(o_.facts_per_entity);
      setup_phase("facts to read", entities_ * o_.facts_per_entity, [&, E, F](uint64_t j) {
        (void)F;
        return append_item(entity(j % E), key("s", j), j);
      });
      measure([&](uint64_t i) {
        item it;
        it.k = kind::read;
        it.req.read = true;
        it.req.type = "ledger";
        it.req.id = entity(pick(i, 11));
        it.req.query = "type=bench&order=desc&limit=" + std::to_string(o_.read_limit);
        return it;
      });
    } else if (w == "alarms") {
      alarms();
    }
  }

  /// cold: exactly one request per entity, whatever --count and --duration say.
  void measure_count(const std::function<item(uint64_t)>& make) {
    auto saved = o_;
    o_.count = entities_;
    o_.rate = saved.rate;
    measure(make);
    o_ = saved;
  }

  void alarms() {
    auto arm = [&](int64_t due) {
      return [&, due](uint64_t i) {
        item it;
        it.k = kind::arm;
        it.req.type = "bench_alarm";
        it.req.id = "a" + std::to_string(i);
        it.req.method = "arm";
        it.req.body = "{\"due_ms\":" + std::to_string(due) + "}";
        return it;
      };
    };
    // Create the entities with an alarm an hour away, then re-arm them all so that every alarm
    // falls due at the same instant, far enough ahead for the re-arming to finish first.
    auto t = clk::now();
    setup_phase("create the entities", entities_, arm(wall_ms() + 3'600'000));
    double per_s =
      double(entities_) / std::max(1e-3, std::chrono::duration<double>(clk::now() - t).count());
    int64_t lead = std::max<int64_t>(500, int64_t(2'000.0 * double(entities_) / per_s));
    due_ms_ = wall_ms() + lead;
    setup_phase("arm every alarm for one instant", entities_, arm(due_ms_));
    auto before = t_->usage();
    auto t0 = clk::now();
    auto deadline = t0 + std::chrono::milliseconds(lead) + std::chrono::seconds(60) +
                    std::chrono::milliseconds(int64_t(o_.timeout_s * 1000));
    while (sink_.count() < uint64_t(entities_) && clk::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto after = t_->usage();
    usage_known_ = true;
    cpu_s_ = after.cpu_s - before.cpu_s;
    peak_rss_kib_ = after.peak_rss_kib;
    elapsed_s_ = sink_.span_s(due_ms_);
    for (auto& l : sink_.lags_ms())
      lat_.record(uint64_t(std::max<int64_t>(0, l)) * 1'000'000);
    meas_.sent = uint64_t(entities_);
    meas_.answered = sink_.count();
    meas_.ok = sink_.count();
    if (sink_.count() < uint64_t(entities_)) {
      meas_.errors = uint64_t(entities_) - sink_.count();
      std::lock_guard<std::mutex> g(meas_.mu);
      meas_.codes["ALARM_NOT_FIRED"] = meas_.errors;
    }
    for (int64_t i = 0; i < entities_; ++i)
      alarm_ids_.push_back("a" + std::to_string(i));
    auto c = t_->counters();
    counters_known_ = c.known;
    dc_ = c;
  }

  // -- verification --

  void verify() {
    if (!o_.verify)
      return;
    int64_t allowed_extra = int64_t(meas_.unanswered.load() + setup_.unanswered.load());
    if (inproc_) {
      inproc_->stop();
      ver_ =
        verify_local(dir_, o_.tenant, run_id_ + "-", acks_, "bench", alarm_ids_, allowed_extra);
    } else {
      verify_http(allowed_extra);
    }
  }

  response sync_send(request r) {
    std::promise<response> p;
    auto f = p.get_future();
    t_->send(std::move(r), on_answer([&p](response s) { p.set_value(std::move(s)); }));
    return f.get();
  }

  /// Over HTTP: every acked key once among the entity's `bench` facts (facts route, paged by
  /// `after_seq` for as long as the answer links a next page);
  /// chains are not checked here (`factum inspect verify` on the stopped server's data does).
  void verify_http(int64_t allowed_extra) {
    ver_.ran = true;
    auto problem = [&](std::string p) {
      ver_.ok = false;
      if (ver_.problems.size() < 10)
        ver_.problems.push_back(std::move(p));
    };
    std::map<std::string, std::vector<const ack*>> by_entity;
    for (auto& a : acks_)
      by_entity[a.id].push_back(&a);
    std::string prefix = run_id_ + "-";
    int64_t on_disk = 0;
    for (auto& [id, list] : by_entity) {
      ++ver_.entities_checked;
      std::map<std::string, std::pair<int64_t, std::string>> found;
      int64_t after = 0;
      for (;;) {
        request r;
        r.read = true;
        r.type = "ledger";
        r.id = id;
        r.query = "type=bench&limit=10000&after_seq=" + std::to_string(after);
        auto s = sync_send(std::move(r));
        if (!s.ok) {
          problem("facts of " + id + ": " + std::to_string(s.status) + " " + s.code);
          break;
        }
        auto arr = json::parse(s.body, nullptr, false);
        if (!arr.is_array()) {
          problem("facts of " + id + ": not a JSON array");
          break;
        }
        for (auto& f : arr) {
          after = f.value("seq", after);
          auto k = f.value("idempotency_key", std::string());
          if (k.rfind(prefix, 0) != 0)
            continue;
          ++on_disk;
          if (!found
                 .emplace(k,
                          std::pair{f.value("seq", int64_t(0)), f.value("fact_id", std::string())})
                 .second) {
            ++ver_.duplicates;
            problem("key " + k + " appended twice on " + id);
          }
        }
        // A page ends at `limit` facts or at the server's byte cap (max_facts_bytes), whichever
        // comes first; either way a full page carries a Link to the next one, and only its
        // absence means the facts are all read.
        if (!s.more || arr.empty())
          break;
      }
      for (auto* a : list) {
        ++ver_.acked;
        auto it = found.find(a->key);
        if (it == found.end()) {
          ++ver_.missing;
          problem("acknowledged key " + a->key + " on " + id + " not found");
          continue;
        }
        ++ver_.found;
        if (it->second.first != a->seq || it->second.second != a->fact_id) {
          ++ver_.mismatched;
          problem("key " + a->key + ": acknowledged seq " + std::to_string(a->seq) +
                  ", stored seq " + std::to_string(it->second.first));
        }
      }
    }
    ver_.extra = on_disk - ver_.found - ver_.duplicates;
    if (ver_.extra > allowed_extra)
      problem(std::to_string(ver_.extra) + " facts of this run without an acknowledgement");
  }

  // -- report --

  json result_json() {
    json j;
    j["workload"] = o_.workload;
    j["mode"] = o_.mode;
    j["loop"] = o_.rate > 0 ? "open" : "closed";
    j["rate_target"] = o_.rate;
    j["entities"] = entities_;
    j["concurrency"] = o_.concurrency;
    j["durability"] = o_.mode == "inproc" ? json(o_.durability) : json(nullptr);
    j["payload"] = o_.payload;
    j["seed"] = o_.seed;
    j["run_id"] = run_id_;
    if (active_cap_)
      j["active_cap"] = active_cap_;
    j["setup_s"] = setup_s_;
    j["duration_s"] = elapsed_s_;
    uint64_t done = meas_.ok + meas_.expected_failures;
    j["requests"] = meas_.sent.load();
    j["ok"] = meas_.ok.load();
    j["errors"] = meas_.errors.load();
    j["setup_errors"] = setup_.errors.load();
    j["expected_failures"] = meas_.expected_failures.load();
    j["replayed"] = meas_.replayed.load();
    j["dropped"] = meas_.dropped.load();
    j["late"] = meas_.late.load();
    j["max_send_lag_us"] = double(meas_.max_send_lag_ns.load()) / 1e3;
    j["throughput"] = elapsed_s_ > 0 ? double(done) / elapsed_s_ : 0.0;
    j["latency_us"] = {{"p50", lat_.percentile(50) / 1e3}, {"p90", lat_.percentile(90) / 1e3},
                       {"p99", lat_.percentile(99) / 1e3}, {"p99.9", lat_.percentile(99.9) / 1e3},
                       {"max", double(lat_.max()) / 1e3},  {"min", double(lat_.min()) / 1e3},
                       {"mean", lat_.mean() / 1e3},        {"count", lat_.count()}};
    if (o_.workload == "alarms")
      j["latency_is"] = "alarm lag: firing time minus due time";
    {
      std::lock_guard<std::mutex> g(meas_.mu);
      j["codes"] = meas_.codes;
      j["first_errors"] = meas_.first_errors;
    }
    if (usage_known_)
      j["server"] = {{"cpu_s", cpu_s_},
                     {"cpu_cores", elapsed_s_ > 0 ? cpu_s_ / elapsed_s_ : 0.0},
                     {"peak_rss_kib", peak_rss_kib_},
                     {"includes_client", o_.mode == "inproc"}};
    else
      j["server"] = nullptr;
    if (counters_known_)
      j["runtime"] = {
        {"activations", dc_.activations},
        {"hibernations", dc_.hibernations},
        {"commits", dc_.commits},
        {"facts", dc_.facts},
        {"facts_per_commit", dc_.commits ? double(dc_.facts) / double(dc_.commits) : 0.0},
        {"peak_active", dc_.peak_active},
        {"tool_calls", dc_.tool_calls},
        {"tool_retries", dc_.tool_retries},
        {"breaker_fast_fails", dc_.fast_fails},
        {"dead_letters", dc_.dead_letters}};
    else
      j["runtime"] = nullptr;
    if (ver_.ran)
      j["verify"] = {{"ok", ver_.ok},
                     {"entities_checked", ver_.entities_checked},
                     {"chains_ok", ver_.chains_ok},
                     {"chains_bad", ver_.chains_bad},
                     {"chains_checked", o_.mode == "inproc"},
                     {"acked", ver_.acked},
                     {"found", ver_.found},
                     {"missing", ver_.missing},
                     {"mismatched", ver_.mismatched},
                     {"duplicates", ver_.duplicates},
                     {"extra", ver_.extra},
                     {"alarms_expected", ver_.alarms_expected},
                     {"alarms_found", ver_.alarms_found},
                     {"problems", ver_.problems}};
    else
      j["verify"] = nullptr;
    return j;
  }

  void report() {
    auto j = result_json();
    if (o_.json) {
      out_ << j.dump() << "\n";
      return;
    }
    auto lat = j["latency_us"];
    auto num = [](const json& v) { return v.is_null() ? std::string() : v.dump(); };
    if (o_.csv) {
      out_ << "workload,mode,loop,rate_target,entities,concurrency,durability,payload,seed,"
              "duration_s,requests,ok,errors,expected_failures,dropped,late,throughput,p50_us,"
              "p90_us,p99_us,p999_us,max_us,mean_us,cpu_s,peak_rss_kib,activations,"
              "facts_per_commit,verify_ok\n";
      auto& s = j["server"];
      auto& rt = j["runtime"];
      out_ << o_.workload << "," << o_.mode << "," << j["loop"].get<std::string>() << "," << o_.rate
           << "," << entities_ << "," << o_.concurrency << ","
           << (o_.mode == "inproc" ? o_.durability : "") << "," << o_.payload << "," << o_.seed
           << "," << elapsed_s_ << "," << meas_.sent << "," << meas_.ok << "," << meas_.errors
           << "," << meas_.expected_failures << "," << meas_.dropped << "," << meas_.late << ","
           << j["throughput"].get<double>() << "," << num(lat["p50"]) << "," << num(lat["p90"])
           << "," << num(lat["p99"]) << "," << num(lat["p99.9"]) << "," << num(lat["max"]) << ","
           << num(lat["mean"]) << "," << (s.is_null() ? "" : num(s["cpu_s"])) << ","
           << (s.is_null() ? "" : num(s["peak_rss_kib"])) << ","
           << (rt.is_null() ? "" : num(rt["activations"])) << ","
           << (rt.is_null() ? "" : num(rt["facts_per_commit"])) << ","
           << (ver_.ran ? (ver_.ok ? "true" : "false") : "") << "\n";
      return;
    }
    auto& o = out_;
    char b[400];
    std::snprintf(b, sizeof b, "factum bench %s: %s, %s loop%s, %s entities, concurrency %d%s",
                  o_.workload.c_str(), o_.mode.c_str(), o_.rate > 0 ? "open" : "closed",
                  o_.rate > 0 ? (" at " + fmt_int(uint64_t(o_.rate)) + " req/s").c_str() : "",
                  fmt_int(uint64_t(entities_)).c_str(), o_.concurrency,
                  o_.mode == "inproc" ? (", durability " + o_.durability).c_str() : "");
    o << b << "\n";
    auto row = [&](const char* k, const std::string& v) {
      o << "  " << std::left << std::setw(14) << k << v << "\n";
    };
    std::ostringstream s;
    s << fmt_int(meas_.sent) << " in " << std::fixed << std::setprecision(2) << elapsed_s_
      << " s (setup " << setup_s_ << " s)";
    row("requests", s.str());
    s.str("");
    s << std::setprecision(0) << j["throughput"].get<double>()
      << (o_.workload == "alarms" ? " alarms/s" : " req/s") << "  ok " << fmt_int(meas_.ok)
      << "  errors " << fmt_int(meas_.errors) << "  expected failures "
      << fmt_int(meas_.expected_failures) << "  replayed " << fmt_int(meas_.replayed);
    row("rate", s.str());
    if (o_.rate > 0) {
      s.str("");
      s << "dropped " << fmt_int(meas_.dropped) << "  late (>1 ms behind schedule) "
        << fmt_int(meas_.late) << "  max send lag " << fmt_ns(meas_.max_send_lag_ns);
      row("open loop", s.str());
    }
    s.str("");
    s << "p50 " << fmt_ns(lat_.percentile(50)) << "  p90 " << fmt_ns(lat_.percentile(90))
      << "  p99 " << fmt_ns(lat_.percentile(99)) << "  p99.9 " << fmt_ns(lat_.percentile(99.9))
      << "  max " << fmt_ns(lat_.max()) << "  mean " << fmt_ns(uint64_t(lat_.mean()));
    row(o_.workload == "alarms" ? "alarm lag" : "latency", s.str());
    if (!meas_.codes.empty()) {
      s.str("");
      for (auto& [c, n] : meas_.codes)
        s << c << " " << fmt_int(n) << "  ";
      row("answers", s.str());
    }
    for (auto& e : meas_.first_errors)
      row("error", e);
    if (usage_known_) {
      s.str("");
      s << std::setprecision(2) << "cpu " << cpu_s_ << " s ("
        << (elapsed_s_ > 0 ? cpu_s_ / elapsed_s_ : 0) << " cores)  peak rss "
        << fmt_int(uint64_t(peak_rss_kib_)) << " KiB"
        << (o_.mode == "inproc" ? "  (in-process: includes the bench client)" : "");
      row("server", s.str());
    }
    if (counters_known_) {
      s.str("");
      s << "activations " << fmt_int(dc_.activations) << "  hibernations "
        << fmt_int(dc_.hibernations) << "  commits " << fmt_int(dc_.commits) << "  facts "
        << fmt_int(dc_.facts) << std::setprecision(1) << " ("
        << (dc_.commits ? double(dc_.facts) / double(dc_.commits) : 0) << "/commit)";
      if (dc_.tool_calls)
        s << "  tool calls " << fmt_int(dc_.tool_calls) << "  fast fails "
          << fmt_int(dc_.fast_fails) << "  dead letters " << fmt_int(dc_.dead_letters);
      row("runtime", s.str());
    }
    if (ver_.ran) {
      s.str("");
      s << (ver_.ok ? "ok: " : "FAILED: ") << fmt_int(uint64_t(ver_.found)) << " of "
        << fmt_int(uint64_t(ver_.acked)) << " acknowledged appends on disk, " << ver_.duplicates
        << " duplicates, " << ver_.extra << " unacknowledged";
      if (o_.mode == "inproc")
        s << ", " << ver_.chains_ok << " of " << ver_.entities_checked << " chains intact";
      if (ver_.alarms_expected)
        s << ", " << ver_.alarms_found << " of " << ver_.alarms_expected << " alarms fired";
      row("verification", s.str());
      for (auto& p : ver_.problems)
        row("problem", p);
    } else {
      row("verification", "skipped (--no-verify)");
    }
  }

  // -- alarm sink --

  struct sink final : alarm_sink {
    void fired(const std::string& id, int64_t due, int64_t at) override {
      std::lock_guard<std::mutex> g(mu);
      if (!seen.insert(id).second)
        return; // at least once: count each entity's first firing
      lags.push_back(at - due);
      last = std::max(last, at);
      n.fetch_add(1);
    }
    uint64_t count() const { return n.load(); }
    std::vector<int64_t> lags_ms() {
      std::lock_guard<std::mutex> g(mu);
      return lags;
    }
    double span_s(int64_t due) {
      std::lock_guard<std::mutex> g(mu);
      return last > due ? double(last - due) / 1e3 : 1e-3;
    }
    std::mutex mu;
    std::set<std::string> seen;
    std::vector<int64_t> lags;
    int64_t last = 0;
    std::atomic<uint64_t> n{0};
  };

  bench_options o_;
  std::ostream& out_;
  std::ostream& err_;
  int64_t entities_ = 1;
  int64_t active_cap_ = 0;
  std::string run_id_;
  std::string filler_;
  bool progress_ = false;
  std::string dir_, tmp_dir_;
  std::unique_ptr<target> http_;
  std::unique_ptr<inproc_target> inproc_;
  target* t_ = nullptr;
  sink sink_;
  int64_t due_ms_ = 0;
  std::vector<std::string> alarm_ids_;
  histogram lat_;
  tally meas_, setup_;
  uint64_t setup_errors_ = 0;
  double setup_s_ = 0, elapsed_s_ = 0;
  bool usage_known_ = false, counters_known_ = false;
  double cpu_s_ = 0;
  int64_t peak_rss_kib_ = 0;
  target_counters dc_;
  std::mutex ack_mu_;
  std::vector<ack> acks_;
  verify_result ver_;
};

} // namespace

int run_bench(const bench_options& opts, std::ostream& out, std::ostream& err) {
  bench_run r(opts, out, err);
  return r.run();
}

void add_bench_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<bench_options>();
  auto* sub = app.add_subcommand(
    "bench", "load-test the runtime in-process or a server over HTTP (docs/bench.md)");
  sub->add_option("workload", o->workload, "append | replay | mixed | cold | churn | alarms | read")
    ->required();
  sub->add_option("--mode", o->mode, "inproc (embedded runtime) or http")->capture_default_str();
  sub->add_option("--url", o->url, "server base URL (http mode)")->capture_default_str();
  sub->add_option("--api-key", o->api_key, "X-API-Key (http mode)");
  sub->add_option("--data", o->data, "in-process data directory (default: a temp dir, removed)");
  sub->add_option("--entities", o->entities, "entities to spread over (0: workload default)");
  sub->add_option("--concurrency,-c", o->concurrency, "callers in flight / HTTP connections")
    ->capture_default_str();
  sub->add_option("--duration", o->duration_s, "measured seconds (without --count)")
    ->capture_default_str();
  sub->add_option("--count,-n", o->count, "measured requests (0: use --duration)");
  sub->add_option("--rate", o->rate, "open loop at this many requests/s (0: closed loop)");
  sub->add_option("--durability", o->durability, "full or normal (in-process)")
    ->capture_default_str();
  sub->add_option("--payload", o->payload, "filler bytes per appended fact")->capture_default_str();
  sub->add_option("--seed", o->seed, "seed of every random choice")->capture_default_str();
  sub->add_flag("--json", o->json, "one JSON object instead of the table");
  sub->add_flag("--csv", o->csv, "a CSV header and one row instead of the table");
  auto on = std::make_shared<bool>(false), off = std::make_shared<bool>(false);
  sub->add_flag("--progress", *on, "live progress line on stderr (default: when a terminal)");
  sub->add_flag("--no-progress", *off, "no progress line");
  sub->add_flag("--warmup", o->warmup, "append/churn: touch every entity before measuring");
  sub->add_flag("!--no-verify", o->verify, "skip the verification of facts after the run");
  sub->add_option("--keys", o->keys, "replay/mixed: completed keys")->capture_default_str();
  sub->add_option("--replay-share", o->replay_share, "mixed: share of replays")
    ->capture_default_str();
  sub->add_option("--tool-share", o->tool_share, "mixed: share of tool calls")
    ->capture_default_str();
  sub
    ->add_option("--fail-rate", o->fail_rate,
                 "mixed, in-process: share of tool attempts failing with 503")
    ->capture_default_str();
  sub->add_option("--tool", o->tool, "mixed: tool name of webhook deliveries")
    ->capture_default_str();
  sub->add_option("--active-cap", o->active_cap,
                  "churn, in-process: cap on active entities (0: entities/20)");
  sub->add_option("--facts-per-entity", o->facts_per_entity, "read: facts written per entity")
    ->capture_default_str();
  sub->add_option("--read-limit", o->read_limit, "read: facts per query")->capture_default_str();
  sub->add_option("--server-pid", o->server_pid, "http: server pid for CPU and peak RSS");
  sub->add_option("--max-inflight", o->max_inflight, "open loop: drop sends beyond this")
    ->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "per-request timeout, seconds")->capture_default_str();
  sub->callback([o, on, off, exit_code] {
    o->progress = *off ? 0 : *on ? 1 : -1;
    *exit_code = run_bench(*o, std::cout, std::cerr);
  });
}

} // namespace factum::tools
