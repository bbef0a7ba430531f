// target.hpp: what the bench drives: a request/response seam with two implementations, the
// embedded runtime (inproc.cpp) and factum's HTTP client (http_target.cpp). send() may be called
// from any thread; `done` runs exactly once on a worker thread of the target (CAF or the HTTP
// client's I/O thread) and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "factum/tools/loadgen.hpp"

namespace factum::tools::loadgen {

/// splitmix64's finaliser: spreads consecutive numbers over 64 bits (ids, keys and picks of the
/// workloads, deterministic for a seed).
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// One request: a call of `method` on entity `type`/`id`, or (read) a fact query.
struct request {
  bool read = false;  ///< a fact query (GET .../facts, in-process ledger.recent)
  std::string type;   ///< entity type
  std::string id;     ///< entity id
  std::string method; ///< method (calls)
  std::string body;   ///< JSON arguments (calls)
  std::string idempotency_key;
  std::string query; ///< read: query string without '?', e.g. "limit=10&order=desc"
};

/// One answer.
struct response {
  bool ok = false;       ///< 2xx
  int status = 0;        ///< HTTP status (in-process: the call's http_status); 0: no answer
  bool replayed = false; ///< Idempotent-Replayed
  std::string code;      ///< problem code, or "TRANSPORT" / "TIMEOUT" when there was no answer
  std::string body;
  bool more = false; ///< read over HTTP: a `Link: <...>; rel="next"` header, i.e. a next page
};

/// What runs when a request's answer arrives: exactly once, on a thread of the target, and
/// must not block. Allocated once per request (on_answer); a target hands the raw pointer to
/// its transport's completion, where it fits std::function's inline storage, so no second
/// allocation wraps it, and deletes it after the call (answer()).
class answer_handler {
 public:
  virtual ~answer_handler() = default;
  virtual void operator()(response r) = 0;
};

/// `f`, a callable taking a response, as an answer_handler.
template <class F> std::unique_ptr<answer_handler> on_answer(F f) {
  struct impl final : answer_handler {
    explicit impl(F g) : f_(std::move(g)) {}
    void operator()(response r) override { f_(std::move(r)); }
    F f_;
  };
  return std::make_unique<impl>(std::move(f));
}

/// Runs `h`, released from its unique_ptr when the request was handed to the transport, with
/// `r`; then deletes it.
inline void answer(answer_handler* h, response r) {
  std::unique_ptr<answer_handler> own(h);
  (*own)(std::move(r));
}

/// Resource use of the server process.
struct server_usage {
  bool known = false;
  double cpu_s = 0;         ///< user + system CPU seconds so far
  int64_t peak_rss_kib = 0; ///< VmHWM / ru_maxrss
};

/// CPU seconds (utime + stime) and peak RSS (VmHWM) of process `pid`, from /proc; not known
/// when pid <= 0 or /proc has no such process (proc_usage.cpp).
server_usage proc_usage(int64_t pid);

/// Runtime counters that some workloads report (in-process only).
struct target_counters {
  bool known = false;
  uint64_t activations = 0, hibernations = 0, commits = 0, facts = 0, peak_active = 0;
  uint64_t alarms_fired = 0, tool_calls = 0, tool_retries = 0, fast_fails = 0, dead_letters = 0;
};

class target {
 public:
  virtual ~target() = default;
  virtual void send(request r, std::unique_ptr<answer_handler> done) = 0;
  virtual server_usage usage() = 0;
  virtual target_counters counters() { return {}; }
};

/// Alarm firings reported by the in-process alarm entity (due and fired times, ms).
struct alarm_sink {
  virtual ~alarm_sink() = default;
  virtual void fired(const std::string& id, int64_t due_ms, int64_t fired_ms) = 0;
};

/// The embedded runtime on a data directory, with the built-in types plus `bench_alarm`, and the
/// fake vendor tool `opts.tool` (fails opts.fail_rate of attempts with 503).
class inproc_target : public target {
 public:
  virtual void restart() = 0; ///< stop and start on the same directory (everything hibernated)
  virtual void stop() = 0;    ///< graceful stop (drains); send() answers errors afterwards
};

std::unique_ptr<inproc_target> make_inproc_target(const bench_options& opts,
                                                  const std::string& data_dir, int64_t max_active,
                                                  alarm_sink* alarms, std::string& error);

/// A keep-alive HTTP/1.1 client with opts.concurrency connections on one I/O thread.
std::unique_ptr<target> make_http_target(const bench_options& opts, std::string& error);

/// An acknowledged append: which entity, which key, what the server answered.
struct ack {
  std::string id;
  std::string key;
  int64_t seq = 0;
  std::string fact_id;
};

/// What the verification found.
struct verify_result {
  bool ran = false;
  bool ok = true;
  int64_t entities_checked = 0;
  int64_t chains_ok = 0, chains_bad = 0;
  int64_t acked = 0, found = 0, missing = 0, mismatched = 0, duplicates = 0, extra = 0;
  int64_t alarms_expected = 0, alarms_found = 0;
  std::vector<std::string> problems; ///< the first few problems, for the report
};

/// Verifies a stopped runtime's data directory against the acknowledgements: every ack's key
/// present exactly once among `fact_type` facts with the acked seq and fact_id, no duplicate keys,
/// every hash chain intact; `alarm_ids` entities each hold an alarm_fired fact. Only keys starting
/// with `key_prefix` (this run's) count. Reads read-only.
verify_result verify_local(const std::string& data_dir, const std::string& tenant,
                           const std::string& key_prefix, const std::vector<ack>& acks,
                           const std::string& fact_type, const std::vector<std::string>& alarm_ids,
                           int64_t allowed_extra);

} // namespace factum::tools::loadgen
