// loadgen.cpp: `factum bench`: the command line (add_bench_command), run_bench, and the run's
// frame (bench_run.hpp): options checked, target opened (in-process or HTTP), workload, verify,
// report. Runs on the calling thread; the other parts of a run are in workloads.cpp, drive.cpp,
// verify_http.cpp and report.cpp.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <system_error>

#include "bench_run.hpp"
#include "factum/tools/loadgen.hpp"

namespace factum::tools {

namespace loadgen {

namespace {

namespace fs = std::filesystem;

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

} // namespace

bench_run::bench_run(const bench_options& o, std::ostream& out, std::ostream& err)
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

int bench_run::run() {
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

// -- options and target --

std::string bench_run::check() const {
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

bool bench_run::open_target() {
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

} // namespace loadgen

int run_bench(const bench_options& opts, std::ostream& out, std::ostream& err) {
  loadgen::bench_run r(opts, out, err);
  return r.run();
}

void add_bench_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<bench_options>();
  auto* sub = app.add_subcommand(
    "bench", "Load-test the runtime in-process or a server over HTTP (docs/bench.md)");
  sub
    ->add_option("workload", o->workload,
                 "The workload: append | replay | mixed | cold | churn | alarms | read")
    ->required();
  sub->add_option("--mode", o->mode, "Where the load runs: inproc (an embedded runtime) or http")
    ->capture_default_str();
  sub->add_option("--url", o->url, "Server base URL (http mode)")->capture_default_str();
  sub->add_option("--api-key", o->api_key, "X-API-Key (http mode)");
  sub->add_option("--data", o->data, "In-process data directory (default: a temp dir, removed)");
  sub->add_option("--entities", o->entities, "Entities to spread over (0: workload default)");
  sub->add_option("--concurrency,-c", o->concurrency, "Callers in flight / HTTP connections")
    ->capture_default_str();
  sub->add_option("--duration", o->duration_s, "Measured seconds (without --count)")
    ->capture_default_str();
  sub->add_option("--count,-n", o->count, "Measured requests (0: use --duration)");
  sub->add_option("--rate", o->rate, "Open loop at this many requests/s (0: closed loop)");
  sub->add_option("--durability", o->durability, "Durability in-process: full or normal")
    ->capture_default_str();
  sub->add_option("--payload", o->payload, "Filler bytes per appended fact")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of every random choice")->capture_default_str();
  sub->add_flag("--json", o->json, "One JSON object instead of the table");
  sub->add_flag("--csv", o->csv, "A CSV header and one row instead of the table");
  auto on = std::make_shared<bool>(false), off = std::make_shared<bool>(false),
       no_verify = std::make_shared<bool>(false);
  sub->add_flag("--progress", *on, "Live progress line on stderr (default: when a terminal)");
  sub->add_flag("--no-progress", *off, "No progress line");
  sub->add_flag("--warmup", o->warmup, "Append/churn: touch every entity before measuring");
  sub->add_flag("--no-verify", *no_verify, "Skip the verification of facts after the run");
  sub->add_option("--keys", o->keys, "Replay/mixed: completed keys")->capture_default_str();
  sub->add_option("--replay-share", o->replay_share, "Mixed: share of replays")
    ->capture_default_str();
  sub->add_option("--tool-share", o->tool_share, "Mixed: share of tool calls")
    ->capture_default_str();
  sub
    ->add_option("--fail-rate", o->fail_rate,
                 "Mixed, in-process: share of tool attempts failing with 503")
    ->capture_default_str();
  sub->add_option("--tool", o->tool, "Mixed: tool name of webhook deliveries")
    ->capture_default_str();
  sub->add_option("--active-cap", o->active_cap,
                  "Churn, in-process: cap on active entities (0: entities/20)");
  sub->add_option("--facts-per-entity", o->facts_per_entity, "Read: facts written per entity")
    ->capture_default_str();
  sub->add_option("--read-limit", o->read_limit, "Read: facts per query")->capture_default_str();
  sub->add_option("--server-pid", o->server_pid,
                  "Mode http: the server's pid, for its CPU and peak RSS");
  sub->add_option("--max-inflight", o->max_inflight, "Open loop: drop sends beyond this")
    ->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "Per-request timeout, seconds")->capture_default_str();
  sub->callback([o, on, off, no_verify, exit_code] {
    o->progress = *off ? 0 : *on ? 1 : -1;
    o->verify = !*no_verify;
    *exit_code = run_bench(*o, std::cout, std::cerr);
  });
}

} // namespace factum::tools
