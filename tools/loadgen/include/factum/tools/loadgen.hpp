// factum/tools/loadgen.hpp: the load generator behind the `factum bench` subcommand: named
// workloads against the embedded runtime (in-process) or a running `factum serve` (HTTP), closed
// or open loop, with a latency histogram, server CPU and peak RSS, and a verification that the
// facts on disk equal the acknowledged calls. Registration runs on the thread that builds the
// command line; run_bench runs on the calling thread and uses its own worker threads (CAF or the
// HTTP client's I/O thread) for completions.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

namespace factum::tools {

/// Every parameter of one bench run (docs/bench.md documents each).
struct bench_options {
  /// append, replay, mixed, cold, churn, alarms or read. Required.
  std::string workload;
  /// inproc (links the runtime) or http (a running server at `url`). Default inproc.
  std::string mode = "inproc";
  /// Base URL of the server (http mode). Default http://127.0.0.1:8080.
  std::string url = "http://127.0.0.1:8080";
  /// X-API-Key sent in http mode. Default empty.
  std::string api_key;
  /// In-process data directory; empty: a fresh temp dir removed after the run.
  std::string data;
  /// Entities the workload spreads over; 0: the workload's default.
  int64_t entities = 0;
  /// Closed loop: callers in flight. Http: connections. Default 16.
  int concurrency = 16;
  /// Measured phase length in seconds (ignored when count > 0). Default 5.
  double duration_s = 5;
  /// Measured requests; 0: run for duration_s. Default 0.
  int64_t count = 0;
  /// Open loop: requests per second scheduled at fixed intervals; 0: closed loop. Default 0.
  double rate = 0;
  /// full or normal (in-process runtime). Default full.
  std::string durability = "full";
  /// Bytes of filler in each appended fact's data. Default 100.
  int payload = 100;
  /// Seed of every random choice (entity, replay key, failing tool calls). Default 1.
  uint64_t seed = 1;
  /// Output: one JSON object instead of the table. Default false.
  bool json = false;
  /// Output: a CSV header and one row instead of the table. Default false.
  bool csv = false;
  /// Live progress line on stderr: 1 on, 0 off, -1 when stderr is a terminal. Default -1.
  int progress = -1;
  /// Touch every entity once before measuring (append, churn), so creations are not measured.
  bool warmup = false;
  /// Verify facts against acknowledgements after the run. Default true.
  bool verify = true;
  /// replay/mixed: completed keys created before measuring. Default 1000.
  int64_t keys = 1000;
  /// mixed: share of replays and of tool calls (the rest are appends). Defaults 0.3 and 0.2.
  double replay_share = 0.3;
  double tool_share = 0.2;
  /// mixed, in-process: share of tool attempts the fake vendor fails with 503. Default 0.5.
  double fail_rate = 0.5;
  /// mixed: the tool name webhook deliveries use (http: the server must configure it).
  std::string tool = "bench_vendor";
  /// churn, in-process: cap on active entities; 0: entities / 20 (at least 1).
  int64_t active_cap = 0;
  /// read: facts per entity written before measuring; and facts per query. Defaults 100, 10.
  int64_t facts_per_entity = 100;
  int read_limit = 10;
  /// http: pid of the server, for its CPU time and peak RSS (/proc). 0: not measured.
  int64_t server_pid = 0;
  /// Open loop: requests in flight beyond this are dropped (counted). Default 100000.
  int64_t max_inflight = 100'000;
  /// Per-request timeout in seconds. Default 30.
  double timeout_s = 30;
  /// Tenant of in-process entities. Default bench.
  std::string tenant = "bench";
};

/// Runs one bench; writes the table, JSON or CSV to `out` and progress/messages to `err`.
/// Returns 0 when every request got its expected answer and the verification passed, 1 when
/// not, 2 on bad options.
int run_bench(const bench_options& opts, std::ostream& out, std::ostream& err);

/// Adds `bench <workload> [flags]` to `app`; it writes its exit code to *exit_code.
void add_bench_command(CLI::App& app, int* exit_code);

} // namespace factum::tools
