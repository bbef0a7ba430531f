// crash_support.hpp: what the crash drivers (crash_driver.cpp, crash_await_driver.cpp,
// journal_rounds_driver.cpp) share: their failure count and its lines, the flags they all take
// and --keep, the steady clock in ms, the child processes they start and kill by pid
// (support/child_process.hpp: `factum serve` on a configuration of the driver's making, its port
// read from the start log line; `factum-fake-vendor`, its port read from --port-file), and a
// read-only walk over an entity's facts with the storage library. Header-only. `fail` may be
// called from any thread (the drivers' client threads call it); the rest is used on the driver's
// main thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_store.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

namespace factum::test {

// -- failures --

/// Held while a line that threads of a driver may print concurrently is written.
inline std::mutex print_mu;

namespace detail {
inline std::atomic<int> failures{0};
/// Starts each failure line; set by parse_options before any thread starts.
inline std::string driver_name = "crash driver";
} // namespace detail

/// Counts a failure and prints it as one line ("<driver>: FAIL: <what>"); any thread.
inline void fail(const std::string& what) {
  detail::failures.fetch_add(1);
  std::lock_guard<std::mutex> g(print_mu);
  std::cerr << detail::driver_name << ": FAIL: " << what << '\n';
}

/// How many failures were counted so far.
inline int failure_count() {
  return detail::failures.load();
}

// -- time --

/// Milliseconds on the steady clock (for the drivers' deadlines and pacing).
inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

// -- options --

/// The flags both drivers take. Each driver sets its defaults before parse_options.
struct driver_options {
  std::string factum; ///< the `factum` binary (--factum, required)
  int rounds = 1;
  uint64_t seed = 0; ///< default: drawn from the clock by parse_options
  int connections = 1;
  int entities = 1;
  bool keep = false; ///< keep the run's files (keep_files)
};

/// A driver's own flag: `next()` takes its value; true when the driver knows `flag`.
using extra_flag =
  std::function<bool(const std::string& flag, const std::function<std::string()>& next)>;

/// Parses the flags of the driver `name` (which starts its failure lines): --factum PATH,
/// --rounds N, --seed S, --connections C, --entities E and --keep into `o`, every other flag
/// through `extra`. False on a flag neither knows, a number that does not parse, no --factum,
/// or rounds, connections or entities below 1.
inline bool parse_options(const std::string& name, int argc, char** argv, driver_options& o,
                          const extra_flag& extra = {}) {
  detail::driver_name = name;
  o.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      std::function<std::string()> next = [&]() -> std::string {
        return i + 1 < argc ? argv[++i] : std::string();
      };
      if (a == "--factum")
        o.factum = next();
      else if (a == "--rounds")
        o.rounds = std::stoi(next());
      else if (a == "--seed")
        o.seed = std::stoull(next());
      else if (a == "--connections")
        o.connections = std::stoi(next());
      else if (a == "--entities")
        o.entities = std::stoi(next());
      else if (a == "--keep")
        o.keep = true;
      else if (!extra || !extra(a, next))
        return false;
    }
  } catch (const std::exception&) { // std::stoi and std::stoull on a bad number
    return false;
  }
  return !o.factum.empty() && o.rounds >= 1 && o.connections >= 1 && o.entities >= 1;
}

/// --keep: moves the run's files out of `tmp` to $TMPDIR/`name` (replacing those of an earlier
/// run) and says where; `tmp` stays, empty, for its own removal.
inline void keep_files(const temp_dir& tmp, const std::string& name) {
  auto keep = std::filesystem::temp_directory_path() / name;
  std::error_code ec;
  std::filesystem::remove_all(keep, ec);
  std::filesystem::rename(tmp.path(), keep, ec);
  std::filesystem::create_directories(tmp.path(), ec);
  std::cout << "data kept in " << keep << std::endl;
}

// -- child processes --

/// Polls `ready` every 10 ms until it is true, the child exited or `limit` passed; "" when
/// ready, else why not (`what` names the wait).
inline std::string wait_ready(child_process& p, const std::function<bool()>& ready,
                              std::chrono::seconds limit, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready())
      return {};
    if (p.exited())
      return what + ": the process exited; log: " + p.log_tail();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return what + ": nothing within " + std::to_string(limit.count()) + " s; log: " + p.log_tail();
}

/// `factum serve` on a configuration the driver writes to `dir`/serve.json.
class serve_process {
 public:
  serve_process(std::string factum, std::filesystem::path dir)
      : factum_(std::move(factum)), dir_(std::move(dir)) {}

  /// Writes `config` (which should listen on 127.0.0.1:0) and starts the server with its log in
  /// `dir`/serve-`tag`.log; waits (bounded) for the start line with the port. "" or why not.
  std::string start(const nlohmann::json& config, const std::string& tag) {
    auto cfg = dir_ / "serve.json";
    std::ofstream(cfg) << config.dump(2);
    auto log = dir_ / ("serve-" + tag + ".log");
    if (!proc_.spawn({factum_, "serve", "--config", cfg.string()}, log))
      return "fork failed";
    port_ = 0;
    return wait_ready(
      proc_,
      [&] {
        std::ifstream in(log);
        std::string line;
        while (std::getline(in, line))
          if (auto p = line.find("\"port\":"); p != std::string::npos) {
            port_ = static_cast<uint16_t>(std::stoi(line.substr(p + 7)));
            return true;
          }
        return false;
      },
      std::chrono::seconds(15), "factum serve start line");
  }

  void kill_now() { proc_.kill_now(); }
  /// SIGTERM; "" when it exited 0 within 30 s, else why not (with the log's tail).
  std::string stop() {
    auto e = proc_.stop(std::chrono::seconds(30));
    return e.empty() ? e : "factum serve " + e + "; log: " + proc_.log_tail();
  }
  uint16_t port() const { return port_; }
  pid_t pid() const { return proc_.pid(); }
  std::string log_tail() const { return proc_.log_tail(); }

 private:
  std::string factum_;
  std::filesystem::path dir_;
  child_process proc_;
  uint16_t port_ = 0;
};

/// `factum-fake-vendor --listen 127.0.0.1:0 --port-file F` (tools/fake_vendor/README.md).
class vendor_process {
 public:
  /// Starts the vendor with its files in `dir`; waits (bounded) for its port. "" or why not.
  std::string start(const std::string& binary, const std::filesystem::path& dir) {
    auto port_file = dir / "vendor.port";
    if (!proc_.spawn({binary, "--listen", "127.0.0.1:0", "--port-file", port_file.string()},
                     dir / "vendor.log"))
      return "fork failed";
    return wait_ready(
      proc_,
      [&] {
        std::ifstream in(port_file);
        int p = 0;
        if (!(in >> p) || p <= 0)
          return false;
        port_ = static_cast<uint16_t>(p);
        return true;
      },
      std::chrono::seconds(10), "fake vendor port file");
  }

  /// SIGTERM; "" when it exited 0 within 10 s.
  std::string stop() {
    auto e = proc_.stop(std::chrono::seconds(10));
    return e.empty() ? e : "fake vendor " + e;
  }
  uint16_t port() const { return port_; }

 private:
  child_process proc_;
  uint16_t port_ = 0;
};

// -- the files on disk --

/// Calls `each` with every fact of `store` in seq order (pages of 10,000); "" or the query's
/// error.
inline std::string for_each_fact(entity_store& store,
                                 const std::function<void(const fact&)>& each) {
  int64_t after = 0;
  for (;;) {
    fact_filter f;
    f.after_seq = after;
    f.limit = 10000;
    auto facts = store.query(f);
    if (!facts)
      return facts.error().to_string();
    if (facts->empty())
      return {};
    for (auto& fact : *facts) {
      after = fact.seq;
      each(fact);
    }
  }
}

/// Opens one entity read-only, as the crash checks do: not `immutable`, so that a `-wal` left
/// by a killed process is read (docs/reliability.md, "Crash rounds").
inline result<std::unique_ptr<entity_store>> open_read_only(const std::filesystem::path& data,
                                                            const entity_key& key) {
  store_options so;
  so.data_dir = data;
  so.read_only = true;
  return entity_store::open(so, key);
}

} // namespace factum::test
