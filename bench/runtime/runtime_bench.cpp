// runtime_bench.cpp: in-process benchmark of the entity runtime against the runtime's bars
// (docs/performance.md, "Where the bars stand"), in the manner of leveldb's db_bench: named
// workloads, medians over runs. No HTTP. Closed loop with a fixed number of concurrent callers;
// each call appends one fact to a `ledger` entity with a unique idempotency key, exactly the hot
// path of `POST .../ledger/{id}/append`.
//
//   runtime_bench --benchmarks=append1,append1000,replay,cold,rss,churn --runs=3
//
// Threads: the main thread issues calls and waits on a condition variable; completions run on
// CAF workers. (Google Benchmark is installed, but whole-runtime workloads with their own
// concurrency and percentiles fit a db_bench-style driver better.)
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "factum/fake_vendor/fake_vendor.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/sinks/http_tool.hpp"
#include "fsync_probe.hpp"

using namespace factum;
using clk = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

struct args_t {
  std::vector<std::string> benchmarks{"append1", "append1000", "replay", "cold", "rss"};
  int runs = 3;
  int num = 20'000;
  int concurrency = 64;
  int rss_entities = 10'000;
  std::string durability_mode = "full";
  int cache_kib = 0;             // 0: the runtime's default
  int storage_threads = 0;       // 0: the runtime's default
  int sync_threads = 0;          // 0: the runtime's default
  int wal_checkpoint_frames = 0; // 0: the runtime's default
  int wal_grow_kib = -1;         // -1: the runtime's default
  bool tenant_quota = false;     // the bench tenant gets quotas no run reaches
  bool journal = true;           // keyed calls journal their awaits (runtime_config::journal)
  bool archive = false;          // a continuous archive beside the data directory
};

struct run_result {
  double ops_per_s = 0;
  double p50_us = 0, p99_us = 0;
  double extra = 0;
  double ceiling = 0; ///< the disk's syncs/s at the same concurrency, just before; 0: not taken
  double ceiling_cpu_us = 0; ///< CPU per sync of that probe (its threads', user + system)
  double cpu_us = 0;         ///< the process's CPU (user + system, every thread) per call
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

fs::path fresh_dir() {
  auto p = fs::temp_directory_path() / ("factum-rtbench-" + std::to_string(getpid()) + "-" +
                                        std::to_string(clk::now().time_since_epoch().count()));
  fs::create_directories(p);
  return p;
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return 0;
}

runtime_config make_config(const fs::path& dir, const args_t& a, size_t max_active = 0) {
  runtime_config c;
  c.data_dir = dir;
  c.mode = *parse_durability(a.durability_mode);
  c.max_active_entities = max_active;
  c.idle_timeout = std::chrono::minutes(10);
  if (a.cache_kib > 0)
    c.cache_kib = a.cache_kib;
  if (a.storage_threads > 0)
    c.storage_threads = static_cast<size_t>(a.storage_threads);
  if (a.sync_threads > 0)
    c.sync_threads = static_cast<size_t>(a.sync_threads);
  if (a.wal_checkpoint_frames > 0)
    c.wal_checkpoint_frames = a.wal_checkpoint_frames;
  if (a.wal_grow_kib >= 0)
    c.wal_grow_kib = a.wal_grow_kib;
  c.journal = a.journal;
  if (a.archive)
    c.archive_dir = dir.string() + "-archive";
  if (a.tenant_quota) // creations check max_entities; every commit measures its -wal
    c.tenant_quotas["bench"] = {int64_t{1} << 40, int64_t{1} << 60};
  add_builtin_types(c.types);
  return c;
}

std::unique_ptr<runtime> start_with(runtime_config c) {
  auto r = runtime::start(std::move(c));
  if (!r) {
    std::fprintf(stderr, "start: %s\n", r.error().to_string().c_str());
    std::exit(1);
  }
  return std::move(r.value());
}

std::unique_ptr<runtime> start(const fs::path& dir, const args_t& a, size_t max_active = 0) {
  return start_with(make_config(dir, a, max_active));
}

/// Issues `n` calls with at most `conc` in flight; `make(i)` names the entity and key of call i.
template <class Make>
run_result closed_loop(runtime& rt, int n, int conc, Make make, bool expect_replay = false,
                       const std::string& method = "append") {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, failed = 0, wrong = 0;
  std::vector<double> lat(n);
  const std::string body =
    method == "append"
      ? R"({"type":"invocation","data":{"payload":"0123456789012345678901234567890123456789"}})"
      : "{}";
  auto t0 = clk::now();
  const double cpu0 = factum::bench::cpu_seconds(RUSAGE_SELF);
  for (int i = 0; i < n; ++i) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return in_flight < conc; });
      ++in_flight;
    }
    auto [key, idem] = make(i);
    call_options o;
    o.idempotency_key = std::move(idem);
    auto start = clk::now();
    rt.call(key, method, body, std::move(o), [&, i, start](call_reply r) {
      lat[i] = std::chrono::duration<double, std::micro>(clk::now() - start).count();
      std::lock_guard<std::mutex> g(mu);
      failed += !r.ok;
      wrong += r.replayed != expect_replay;
      --in_flight;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> g(mu);
  cv.wait(g, [&] { return in_flight == 0; });
  double secs = std::chrono::duration<double>(clk::now() - t0).count();
  const double cpu_us = (factum::bench::cpu_seconds(RUSAGE_SELF) - cpu0) * 1e6 / n;
  if (failed || wrong) { // a run with failed calls measures nothing: no figure, no verdict
    std::fprintf(stderr,
                 "runtime_bench: %d calls failed, %d had an unexpected replay flag: run invalid\n",
                 failed, wrong);
    std::exit(1);
  }
  std::sort(lat.begin(), lat.end());
  run_result r{n / secs, lat[n / 2], lat[std::min<size_t>(n - 1, n * 99 / 100)], 0};
  r.cpu_us = cpu_us;
  return r;
}

run_result bench_append(const args_t& a, int entities) {
  auto dir = fresh_dir();
  run_result r;
  {
    auto rt = start(dir, a);
    // warm: activate the entities first so the figure is steady-state appends
    closed_loop(*rt, entities, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "e" + std::to_string(i % entities)},
                       "warm-" + std::to_string(i)};
    });
    // Where every commit holds one fact and needs a sync of its own (many entities, durability
    // full), the disk's ceiling in the same minute: as many threads as callers, each
    // overwriting its own file with a one-fact commit's 7 WAL frames (of the ledger's 1 KiB
    // pages: 7 KiB) and syncing it, and the CPU each such sync costs.
    double ceiling = 0, ceiling_cpu_us = 0;
    if (entities >= a.concurrency && a.durability_mode == "full") {
      auto p =
        factum::bench::fsync_probe(dir, "ceiling", 7, a.concurrency, int64_t{100} * a.concurrency);
      if (!p.error.empty()) {
        std::fprintf(stderr, "runtime_bench: disk ceiling probe: %s\n", p.error.c_str());
        std::exit(1);
      }
      ceiling = p.rate();
      ceiling_cpu_us = p.cpu_us_per_sync();
    }
    r = closed_loop(*rt, a.num, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "e" + std::to_string(i % entities)},
                       "k-" + std::to_string(i)};
    });
    r.ceiling = ceiling;
    r.ceiling_cpu_us = ceiling_cpu_us;
    auto commits = rt->metrics().value("factum_commits_total");
    r.extra = commits > 0 ? rt->metrics().value("factum_facts_total") / commits : 0;
  }
  fs::remove_all(dir);
  fs::remove_all(dir.string() + "-archive");
  return r;
}

// -- the journal's cost --------------------------------------------------------------------------

/// A keyed call of one tool step to the loopback vendor, then one fact: with a journal, the
/// step's row is written at its start and completed with the vendor's reply.
class stepper final : public entity {
 public:
  task<nlohmann::json> step(context& ctx, nlohmann::json) {
    tool_request req;
    req.tool = "vendor";
    req.operation = "step";
    req.payload = {{"n", 1}};
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (!r.ok)
      throw transient_error("VENDOR", r.error_message);
    fact_draft d;
    d.type = "stepped";
    ctx.append(d);
    co_return nlohmann::json{{"ok", true}};
  }
};

run_result journal_run(const args_t& a, bool journal, const tool_fn& vendor) {
  auto dir = fresh_dir();
  run_result r;
  {
    auto c = make_config(dir, a);
    c.journal = journal;
    c.types.add(type_builder<stepper>("stepper").method("step", &stepper::step).build());
    c.tools["vendor"] = vendor;
    auto rt = start_with(std::move(c));
    constexpr int entities = 64;
    auto mk = [&](const char* prefix) {
      return [&, prefix](int i) {
        return std::pair{entity_key{"bench", "stepper", "s" + std::to_string(i % entities)},
                         prefix + std::to_string(i)};
      };
    };
    closed_loop(*rt, entities, a.concurrency, mk("warm-"), false, "step");
    r = closed_loop(*rt, a.num, a.concurrency, mk("k-"), false, "step");
  }
  fs::remove_all(dir);
  return r;
}

/// The same keyed tool calls with the journal and without it, in one run: the rate and CPU
/// per call with it; `extra` the CPU ratio (with / without).
run_result bench_journal(const args_t& a) {
  fake_vendor::vendor v;
  http_tool_client client;
  http_tool_options o;
  o.url = v.url() + "/bench";
  o.max_connections = static_cast<size_t>(a.concurrency);
  auto fn = client.make_tool("vendor", o);
  if (!fn) {
    std::fprintf(stderr, "runtime_bench: vendor: %s\n", fn.error().to_string().c_str());
    std::exit(1);
  }
  // Alternate which goes first from run to run: the first of a pair warms what both share.
  static int runs = 0;
  bool on_first = runs++ % 2 == 1;
  run_result on, off;
  if (on_first)
    on = journal_run(a, true, *fn);
  off = journal_run(a, false, *fn);
  if (!on_first)
    on = journal_run(a, true, *fn);
  on.extra = off.cpu_us > 0 ? on.cpu_us / off.cpu_us : 0;
  std::printf("  journal off: %8.0f calls/s  p50 %6.0f us  cpu %6.1f us/call\n", off.ops_per_s,
              off.p50_us, off.cpu_us);
  client.stop();
  return on;
}

run_result bench_replay(const args_t& a) {
  auto dir = fresh_dir();
  run_result r;
  {
    auto rt = start(dir, a);
    int keys = std::min(a.num, 5000);
    auto mk = [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "e" + std::to_string(i % 10)},
                       "k-" + std::to_string(i % keys)};
    };
    closed_loop(*rt, keys, a.concurrency, mk);
    r = closed_loop(*rt, a.num, a.concurrency, mk, true);
  }
  fs::remove_all(dir);
  return r;
}

run_result bench_cold(const args_t& a) {
  // Activations of entities whose files exist (hibernated): the steady state of a big fleet.
  auto dir = fresh_dir();
  int n = std::min(a.num, 5000);
  run_result r;
  {
    auto rt = start(dir, a);
    closed_loop(*rt, n, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "c" + std::to_string(i)},
                       "create-" + std::to_string(i)};
    });
  }
  {
    auto rt = start(dir, a);
    r = closed_loop(
      *rt, n, a.concurrency,
      [&](int i) {
        return std::pair{entity_key{"bench", "ledger", "c" + std::to_string(i)},
                         "create-" + std::to_string(i)};
      },
      true);
  }
  // And creations of brand-new entities (file created, schema migrated, first fact).
  {
    auto rt = start(dir, a);
    auto c = closed_loop(*rt, n, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "n" + std::to_string(i)},
                       "first-" + std::to_string(i)};
    });
    r.extra = c.ops_per_s;
    auto& m = rt->metrics(); // did the spare maker keep up with the creations?
    std::fprintf(stderr, "runtime_bench: cold creations: %.0f from a spare, %.0f without\n",
                 m.value("factum_spare_files_taken_total"),
                 m.value("factum_spare_files_missed_total"));
  }
  fs::remove_all(dir);
  return r;
}

/// Set in the environment of the child process that runs one rss measurement.
constexpr const char* rss_child_env = "FACTUM_RTBENCH_RSS_CHILD";

/// One rss run in a fresh process (this program again, with the same flags): RSS grows only
/// when the allocator has no free memory left over from earlier runs or workloads, so a second
/// run in one process would measure almost nothing (0.3 KiB per entity after `cold`, where a
/// fresh process measures ~190).
run_result rss_in_child(const args_t& a) {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    std::fprintf(stderr, "runtime_bench: rss: cannot find this program (/proc/self/exe)\n");
    std::exit(1);
  }
  exe[n] = '\0';
  // Started without a shell: the arguments reach it as they are, whatever the path holds.
  std::vector<std::string> args{exe,
                                "--benchmarks=rss",
                                "--runs=1",
                                "--concurrency=" + std::to_string(a.concurrency),
                                "--rss_entities=" + std::to_string(a.rss_entities),
                                "--durability=" + a.durability_mode,
                                "--cache_kib=" + std::to_string(a.cache_kib),
                                "--storage_threads=" + std::to_string(a.storage_threads),
                                "--sync_threads=" + std::to_string(a.sync_threads),
                                "--wal_checkpoint_frames=" +
                                  std::to_string(a.wal_checkpoint_frames),
                                "--wal_grow_kib=" + std::to_string(a.wal_grow_kib)};
  std::vector<char*> argv;
  for (auto& s : args)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string child_var = std::string(rss_child_env) + "=1";
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e)
    envp.push_back(*e);
  envp.push_back(child_var.data());
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) {
    std::fprintf(stderr, "runtime_bench: rss: pipe: %s\n", std::strerror(errno));
    std::exit(1);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, exe, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    std::fprintf(stderr, "runtime_bench: rss: cannot start %s: %s\n", exe, std::strerror(rc));
    std::exit(1);
  }
  FILE* p = ::fdopen(fds[0], "r");
  run_result r;
  bool got = false;
  char line[512];
  while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr)
    got = got || std::sscanf(line, "rss_child active=%lf kib=%lf", &r.ops_per_s, &r.extra) == 2;
  if (p != nullptr)
    std::fclose(p);
  int wst = 0;
  bool ok = ::waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
  if (!ok || !got) {
    std::fprintf(stderr, "runtime_bench: rss: the measuring process failed\n");
    std::exit(1);
  }
  return r;
}

run_result bench_rss(const args_t& a) {
  if (std::getenv(rss_child_env) == nullptr)
    return rss_in_child(a);
  auto dir = fresh_dir();
  run_result r;
  {
    auto rt = start(dir, a, a.rss_entities + 100);
    // one entity to warm up everything shared (CAF, SQLite globals)
    closed_loop(*rt, 1, 1, [&](int) {
      return std::pair{entity_key{"bench", "ledger", "warm"}, std::string("w")};
    });
    long before = rss_kib();
    closed_loop(*rt, a.rss_entities, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "r" + std::to_string(i)},
                       "r-" + std::to_string(i)};
    });
    long after = rss_kib();
    auto active = rt->metrics().value("factum_active_entities");
    r.extra = double(after - before) / (active > 1 ? active - 1 : 1);
    r.ops_per_s = active;
  }
  fs::remove_all(dir);
  std::printf("rss_child active=%.0f kib=%.3f\n", r.ops_per_s, r.extra); // to rss_in_child
  return r;
}

run_result bench_churn(const args_t& a) {
  // Activation churn under a small cap: each call activates a new entity and evicts an idle
  // one. RSS growth per ended activation shows what an ended activation leaves in memory (no
  // bar; the idle timeout is 10 min, so no activation ends by it).
  auto dir = fresh_dir();
  run_result r;
  {
    auto rt = start(dir, a, 100);
    closed_loop(*rt, 200, a.concurrency, [&](int i) { // fill the cap, warm the allocator
      return std::pair{entity_key{"bench", "ledger", "w" + std::to_string(i)},
                       "w-" + std::to_string(i)};
    });
    long before = rss_kib();
    int n = std::min(a.num, 10'000);
    r = closed_loop(*rt, n, a.concurrency, [&](int i) {
      return std::pair{entity_key{"bench", "ledger", "ch" + std::to_string(i)},
                       "ch-" + std::to_string(i)};
    });
    r.extra = double(rss_kib() - before) / n;
  }
  fs::remove_all(dir);
  return r;
}

void print(const char* name, std::vector<run_result>& rs, const char* unit, const char* extra_name,
           double bar, bool higher_is_better, bool bar_on_extra) {
  std::vector<double> ops, p50, p99, ex, cpu;
  for (auto& r : rs) {
    ops.push_back(r.ops_per_s);
    p50.push_back(r.p50_us);
    p99.push_back(r.p99_us);
    ex.push_back(r.extra);
    cpu.push_back(r.cpu_us);
  }
  double v = bar_on_extra ? median(ex) : median(ops);
  bool pass = higher_is_better ? v >= bar : v <= bar;
  char cpu_text[32] = "     -"; // rss times no calls
  if (median(cpu) > 0)
    std::snprintf(cpu_text, sizeof cpu_text, "%6.1f", median(cpu));
  std::printf("%-12s %12.0f %-10s p50 %8.0f us  p99 %8.0f us  %s %8.2f  cpu %s us/call  "
              "[min %.0f max %.0f]  ",
              name, median(ops), unit, median(p50), median(p99), extra_name, median(ex), cpu_text,
              *std::min_element(ops.begin(), ops.end()), *std::max_element(ops.begin(), ops.end()));
  if (bar < 0)
    std::printf("no bar\n");
  else
    std::printf("bar %s %g: %s\n", higher_is_better ? ">=" : "<=", bar, pass ? "PASS" : "MISS");
  std::vector<double> ceil, ceil_cpu;
  for (auto& r : rs)
    if (r.ceiling > 0) {
      ceil.push_back(r.ceiling);
      ceil_cpu.push_back(r.ceiling_cpu_us);
    }
  if (!ceil.empty()) {
    std::printf("  disk ceiling in the same runs: %.0f syncs/s [min %.0f max %.0f] (one thread per "
                "caller, each overwriting a file of its own with 7 KiB and syncing it): the "
                "figure above is %.0f%% of it\n",
                median(ceil), *std::min_element(ceil.begin(), ceil.end()),
                *std::max_element(ceil.begin(), ceil.end()), 100 * median(ops) / median(ceil));
    // The kernel's work per sync bounds the rate on this machine's cores whatever the disk.
    double per_sync = median(ceil_cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    std::printf("  CPU per such sync: %.1f us (pwrite + fdatasync, the probe's threads): %ld cores "
                "allow at most %.0f syncs/s with no other work\n",
                per_sync, cores, per_sync > 0 ? double(cores) * 1e6 / per_sync : 0.0);
  }
  std::fflush(stdout);
}

/// A named workload: how one run goes and how its runs are reported against its bar
/// (docs/performance.md, "Where the bars stand").
struct workload {
  const char* name;
  run_result (*run)(const args_t&);
  const char* unit;       ///< of the rate
  const char* extra_name; ///< of run_result::extra
  double bar;             ///< < 0: no bar
  bool higher_is_better;
  bool bar_on_extra; ///< the bar applies to `extra`, not to the rate
};

const std::vector<workload>& workloads() {
  static const std::vector<workload> all{
    {"append1", [](const args_t& a) { return bench_append(a, 1); }, "facts/s", "facts/commit",
     100'000, true, false},
    {"append1000", [](const args_t& a) { return bench_append(a, 1000); }, "facts/s", "facts/commit",
     20'000, true, false},
    // The same with a continuous archive (runtime_config::archive_dir): the bar is relative,
    // at most 20 % fewer facts/s than append1000 in the same invocation (docs/operations.md).
    {"append1000_archive",
     [](const args_t& a) {
       auto b = a;
       b.archive = true;
       return bench_append(b, 1000);
     },
     "facts/s", "facts/commit", -1, true, false},
    {"replay", bench_replay, "calls/s", "-", -1, true, false}, // no bar for replays
    {"cold", bench_cold, "act/s", "creates/s", 5'000, true, false},
    {"rss", bench_rss, "active", "KiB/entity", 200, false, true},
    // No bar: the figure to watch is KiB per ended activation.
    {"churn", bench_churn, "act/s", "KiB/ended", -1, false, true},
    // The bar: journaling a step costs at most 15 % more CPU per call.
    {"journal", bench_journal, "calls/s", "cpu ratio", 1.15, false, true},
  };
  return all;
}

const workload* find_workload(const std::string& name) {
  for (auto& w : workloads())
    if (name == w.name)
      return &w;
  return nullptr;
}

} // namespace

int main(int argc, char** argv) {
  args_t a;
  std::vector<std::string> names;
  for (auto& w : workloads())
    names.push_back(w.name);
  CLI::App app{"In-process benchmark of the entity runtime: named workloads, medians over runs, "
               "each against its bar (docs/performance.md, \"Where the bars stand\").",
               "runtime_bench"};
  app.option_defaults()->always_capture_default();
  app.add_option("--benchmarks", a.benchmarks, "comma-separated workloads, run in this order")
    ->delimiter(',')
    ->check(CLI::IsMember(names));
  app.add_option("--runs", a.runs, "runs per workload; the median and min/max are reported")
    ->check(CLI::Range(1, INT_MAX));
  app.add_option("--num", a.num, "calls per run (activations for cold, churn)")
    ->check(CLI::Range(1, INT_MAX));
  app.add_option("--concurrency", a.concurrency, "concurrent callers")
    ->check(CLI::Range(1, INT_MAX));
  app.add_option("--rss_entities", a.rss_entities, "entities kept active by rss")
    ->check(CLI::Range(1, INT_MAX));
  app.add_option("--durability", a.durability_mode, "full or normal")
    ->check(CLI::IsMember({"full", "normal"}));
  app.add_option("--cache_kib", a.cache_kib, "page cache per entity (0: the runtime's default)")
    ->check(CLI::NonNegativeNumber);
  app
    .add_option("--storage_threads", a.storage_threads,
                "storage threads (0: the runtime's default)")
    ->check(CLI::NonNegativeNumber);
  app.add_option("--sync_threads", a.sync_threads, "WAL sync threads (0: the runtime's default)")
    ->check(CLI::NonNegativeNumber);
  app
    .add_option("--wal_checkpoint_frames", a.wal_checkpoint_frames,
                "WAL frames before a checkpoint (0: the runtime's default)")
    ->check(CLI::NonNegativeNumber);
  app
    .add_option("--wal_grow_kib", a.wal_grow_kib,
                "chunk a growing WAL is extended by (0: off; -1: the runtime's default)")
    ->check(CLI::Range(-1, 65536));
  app.add_flag("--tenant_quota", a.tenant_quota,
               "give the bench tenant quotas no run reaches (max_entities, max_bytes), so that "
               "creations are checked against them and every commit measures its -wal");
  app.add_option("--journal", a.journal,
                 "journal keyed calls (runtime_config::journal; the journal workload sets it "
                 "itself)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // --help: 0; anything refused: its message, and 2
  }
  std::vector<const workload*> chosen;
  for (auto& b : a.benchmarks)
    chosen.push_back(find_workload(b)); // IsMember checked every name
  std::printf("runtime_bench: durability %s, %d callers, %d calls per run, %d runs, %ld cores\n",
              a.durability_mode.c_str(), a.concurrency, a.num, a.runs,
              sysconf(_SC_NPROCESSORS_ONLN));
  for (auto* w : chosen) {
    std::vector<run_result> rs;
    for (int r = 0; r < a.runs; ++r)
      rs.push_back(w->run(a));
    print(w->name, rs, w->unit, w->extra_name, w->bar, w->higher_is_better, w->bar_on_extra);
  }
  return 0;
}
