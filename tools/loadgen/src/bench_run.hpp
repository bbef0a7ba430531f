// bench_run.hpp (private to factum_loadgen): one `factum bench` run (bench_run) and the types
// its files share. Its members are defined by concern: loadgen.cpp (options, target, the run's
// frame), workloads.cpp (request generators, workloads, the alarm sink), drive.cpp (closed and
// open loops, judging answers, progress line, setup and measured phases), verify_http.cpp (the
// verification), report.cpp (table, JSON, CSV). Threads: run() and what it calls run on the
// calling thread; completions (judge, and in the closed loop the next request's generator) run on
// the target's threads and touch only atomics, the histogram and mutex-guarded members; the
// progress line has its own thread; the alarm sink is called on CAF workers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/tools/histogram.hpp"
#include "factum/tools/loadgen.hpp"
#include "target.hpp"

namespace factum::tools::loadgen {

using clk = std::chrono::steady_clock;
using json = nlohmann::json;

/// Milliseconds since the epoch, wall clock (alarm due times, the run id's seed).
inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// How a response is judged.
enum class kind { append, replay, tool, read, arm };

/// One request of a workload and how its answer is judged.
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

/// Counters of one phase. Completions update them from any thread.
struct tally {
  std::atomic<uint64_t> sent{0}, answered{0}, ok{0}, errors{0}, expected_failures{0}, replayed{0},
    dropped{0}, late{0}, unanswered{0};
  std::atomic<uint64_t> max_send_lag_ns{0};
  std::mutex mu;
  std::map<std::string, uint64_t> codes; ///< answers by code (errors and expected failures)
  std::vector<std::string> first_errors;
};

/// 1234567 as "1,234,567" (report.cpp).
std::string fmt_int(uint64_t v);
/// Nanoseconds in the largest unit that keeps them readable: "850 ns", "12 us", "3.25 ms",
/// "1.50 s" (report.cpp).
std::string fmt_ns(uint64_t ns);

/// One bench run: the target, the request generators and the collected results.
class bench_run {
 public:
  bench_run(const bench_options& o, std::ostream& out, std::ostream& err);

  /// Checks the options, opens the target, runs the workload, verifies and reports. Returns
  /// the exit code (run_bench).
  int run();

 private:
  // -- options and target (loadgen.cpp) --

  /// A message for the first bad option, or "".
  std::string check() const;
  /// Starts the HTTP client or the embedded runtime; false (after a message) when it fails.
  bool open_target();

  // -- request generators (workloads.cpp) --

  std::string entity(uint64_t n) const;
  /// The seeded entity number of request i (salt: one sequence per use).
  uint64_t pick(uint64_t i, uint64_t salt) const;
  /// A key of this run: "{run id}-{prefix}{i}".
  std::string key(const char* prefix, uint64_t i) const;
  /// An append of a `bench` fact {n, fill} on ledger `id` with key `k`.
  item append_item(std::string id, std::string k, uint64_t n) const;
  /// Completed key j of the replay set: always the same entity, key and body.
  item replay_key_item(uint64_t j) const;

  // -- workloads (workloads.cpp) --

  /// The setup phases and the measured phase of o_.workload.
  void workload();
  /// cold: exactly one request per entity, whatever --count and --duration say.
  void measure_count(const std::function<item(uint64_t)>& make);
  /// alarms: arms every entity's alarm for one instant and measures the firing lag (sink_).
  void alarms();

  // -- driving the requests (drive.cpp) --

  /// Runs `make(0..)` closed loop with `conc` callers, until `count` requests (count > 0) or
  /// `seconds`. Measured phases record latency into lat_ and counts into meas_.
  double closed_loop(int64_t count, double seconds, int conc,
                     const std::function<item(uint64_t)>& make, bool measured);
  /// Open loop: request i is due at t0 + i / rate; latency runs from that due time, so a slow
  /// answer delays no measurement (no coordinated omission). A send more than 1 ms behind its
  /// schedule counts as late; beyond max_inflight outstanding requests a send is dropped.
  double open_loop(int64_t count, double seconds, const std::function<item(uint64_t)>& make);
  /// Judges one answer against what its kind expects; records acks of fresh appends (moving
  /// the entity and key out of `sn`).
  void judge(tally& ta, sent_item& sn, response& r, uint64_t ns, bool measured);

  struct progress_thread {
    std::thread th;
    std::atomic<bool> stop{false};
  };
  /// The progress line's thread (measured phases, when progress_); null otherwise.
  std::unique_ptr<progress_thread> start_progress(bool measured, clk::time_point t0);
  void stop_progress(std::unique_ptr<progress_thread>& p);

  /// An unmeasured closed-loop phase of `n` requests (setup_s_, setup_errors_).
  void setup_phase(const char* what, int64_t n, const std::function<item(uint64_t)>& make);
  /// The measured phase (open loop with --rate, closed otherwise), with usage and counters.
  void measure(const std::function<item(uint64_t)>& make);

  // -- verification (verify_http.cpp) --

  /// The facts against the acknowledgements (unless --no-verify): verify_local in-process,
  /// verify_http over HTTP.
  void verify();
  /// Sends `r` and waits for its answer.
  response sync_send(request r);
  /// Over HTTP: every acked key once among the entity's `bench` facts (facts route, paged by
  /// `after_seq` for as long as the answer links a next page); chains are not checked here
  /// (`factum inspect verify` on the stopped server's data does).
  void verify_http(int64_t allowed_extra);

  // -- report (report.cpp) --

  json result_json();
  /// The table, or --json, or --csv, on out_.
  void report();

  // -- alarm sink (workloads.cpp) --

  /// Alarm firings: fired() on CAF workers, the rest on the calling thread.
  struct sink final : alarm_sink {
    void fired(const std::string& id, int64_t due, int64_t at) override;
    uint64_t count() const { return n.load(); }
    std::vector<int64_t> lags_ms();
    double span_s(int64_t due);
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

} // namespace factum::tools::loadgen
