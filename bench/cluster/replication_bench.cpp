// replication_bench.cpp: what storage "replicated" costs and buys (docs/cluster.md,
// "Replication", and docs/performance.md). Starts etcd and three nats-servers (JetStream, each
// shard's log with 3 replicas) on loopback, then:
// - throughput: one `factum serve` node in a cluster of its own, storage "local", then
//   "replicated", in turns (local, replicated, local, ...) for --runs rounds; each node is
//   loaded by `factum bench append --mode http` with 32 connections on 1 entity, then on 1,000
//   entities (a warm-up first places every shard and creates its stream); the medians of the
//   rounds, and replicated over local;
// - failover: three replicated nodes; --kills times, an entity served by one node (not the one
//   the probe goes through) is written, its node is killed (-9), and a keyed append to it is
//   sent through another node every 10 ms until it is answered 200: the time from the kill, and
//   the node restarts and joins again (`factum cluster join`);
// - rebuild: a replicated node writes --rebuild-entities entities, then an empty directory is
//   rebuilt from the logs by the code a node uses (replication::apply_shard): entities/s, MB/s.
// Usage: replication_bench --factum PATH [--seconds S] [--runs N] [--kills N]
//        [--rebuild-entities N] [--image-bytes N]. The main thread only (the servers are
//        children).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include <CLI/CLI.hpp>

#include "factum/cluster/shard_map.hpp"
#include "factum/replication/log_applier.hpp"
#include "http/client.hpp"
#include "reliability/crash_support.hpp"
#include "support/etcd_server.hpp"
#include "support/nats_cluster.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* api_key = "bench-key";
constexpr uint32_t shards = 16;
constexpr int ttl_ms = 2000;

struct node {
  std::string id;
  uint16_t port = 0;
  std::filesystem::path dir;
  std::unique_ptr<serve_process> proc;
};

struct env {
  std::string factum;
  std::filesystem::path root;
  std::string etcd_url;
  std::vector<std::string> nats;
  int64_t image_bytes = -1; ///< cluster.replication.image_min_bytes; -1: the server's default
};

json node_config(const env& e, const node& x, const std::string& cluster,
                 const std::string& storage) {
  json cfg = {{"listen", "127.0.0.1:" + std::to_string(x.port)},
              {"data_dir", (x.dir / "data").string()},
              {"dev", true},
              {"tenants", {{"acme", {{"api_keys", {api_key}}}}}},
              {"types", {"ledger"}},
              {"cluster",
               {{"name", cluster},
                {"node_id", x.id},
                {"etcd", {e.etcd_url}},
                {"advertise", "127.0.0.1:" + std::to_string(x.port)},
                {"shards", shards},
                {"lease_ttl_ms", ttl_ms},
                {"storage", storage},
                {"secret", "bench-secret-0123456789"}}}};
  if (storage == "replicated")
    cfg["cluster"]["replication"] = {{"servers", e.nats}, {"replicas", 3}};
  if (storage == "replicated" && e.image_bytes >= 0)
    cfg["cluster"]["replication"]["image_min_bytes"] = e.image_bytes;
  return cfg;
}

void start(const env& e, node& x, const std::string& cluster, const std::string& storage,
           const std::string& tag = "0") {
  if (x.port == 0)
    x.port = free_ports(1).front();
  std::filesystem::create_directories(x.dir);
  x.proc = std::make_unique<serve_process>(e.factum, x.dir);
  if (auto err = x.proc->start(node_config(e, x, cluster, storage), tag); !err.empty())
    throw std::runtime_error(x.id + ": " + err);
}

/// `factum bench append --mode http` against `x`: its JSON report.
json bench(const env& e, const node& x, int entities, double seconds, const std::string& name) {
  child_process p;
  auto out = x.dir / (name + ".json");
  p.spawn({"/bin/sh", "-c",
           e.factum + " bench append --mode http --url http://127.0.0.1:" + std::to_string(x.port) +
             " --api-key " + api_key + " -c 32 --entities " + std::to_string(entities) +
             " --duration " + std::to_string(seconds) + " --no-verify --no-progress --json > " +
             out.string()},
          x.dir / (name + ".log"));
  while (!p.exited())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::ifstream in(out);
  auto j = json::parse(in, nullptr, false);
  if (!j.is_object())
    throw std::runtime_error("bench " + name + " wrote no JSON: " + p.log_tail());
  return j;
}

/// Why requests failed, from the node's log (its request_failed lines, by code).
void print_failures(const node& x) {
  std::map<std::string, int> codes;
  std::map<std::string, std::string> first;
  std::ifstream log(x.dir / "serve-0.log");
  for (std::string line; std::getline(log, line);)
    if (line.find("\"request_failed\"") != std::string::npos) {
      auto l = json::parse(line, nullptr, false);
      if (l.is_object()) {
        auto code = l.value("code", std::string("?"));
        if (codes[code]++ == 0)
          first[code] = l.value("detail", std::string());
      }
    }
  for (auto& [code, n] : codes)
    std::printf("    %d x %s (first: %s)\n", n, code.c_str(), first[code].substr(0, 200).c_str());
}

/// Whether `x` serves every shard (and, replicated, from a copy caught up with its log).
bool ready(const node& x) {
  http_client c(x.port, std::chrono::seconds(3));
  auto r = c.request("GET", "/v1/cluster", {{"X-API-Key", api_key}});
  if (r.status != 200)
    return false;
  auto j = r.json();
  for (uint32_t k = 0; k < shards; ++k)
    if (j["shards"][k]["owner"] != x.id ||
        (j.contains("replica") && j["replica"]["shards"][k]["ready"] != true))
      return false;
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void throughput(const env& e, double seconds, int runs) {
  std::map<std::string, std::vector<double>> rate, p50, errors;
  for (int r = 0; r < runs; ++r)
    for (std::string storage : {"local", "replicated"}) {
      node x;
      x.id = "n1";
      x.dir = e.root / ("t" + std::to_string(r) + "-" + storage);
      start(e, x, "t" + std::to_string(r) + storage.substr(0, 1), storage);
      // Places every shard (a replicated shard's first acquisition creates its log: about
      // half a second each), until each one is served.
      for (int w = 0; w < 20 && !ready(x); ++w)
        (void)bench(e, x, 1000, 2, "warm" + std::to_string(w));
      for (int entities : {1, 1000}) {
        auto j = bench(e, x, entities, seconds, "e" + std::to_string(entities));
        auto what = storage + " " + std::to_string(entities);
        rate[what].push_back(j.value("throughput", 0.0));
        p50[what].push_back(j["latency_us"].value("p50", 0.0));
        errors[what].push_back(j.value("errors", 0.0));
        std::printf("  run %d %-16s %8.0f req/s  p50 %6.0f us  errors %.0f\n", r + 1, what.c_str(),
                    rate[what].back(), p50[what].back(), errors[what].back());
        if (errors[what].back() > 0)
          print_failures(x);
      }
      (void)x.proc->stop();
    }
  std::printf("append over HTTP, 32 connections, %.0f s, medians of %d runs\n", seconds, runs);
  std::printf("%-10s %-11s %10s %10s %12s %12s\n", "entities", "storage", "req/s", "p50 us",
              "vs local", "added p50");
  for (int entities : {1, 1000}) {
    auto l = std::to_string(entities);
    double lr = median(rate["local " + l]), lp = median(p50["local " + l]);
    double rr = median(rate["replicated " + l]), rp = median(p50["replicated " + l]);
    std::printf("%-10d %-11s %10.0f %10.0f %12s %12s\n", entities, "local", lr, lp, "", "");
    std::printf("%-10d %-11s %10.0f %10.0f %11.0f%% %9.0f us\n", entities, "replicated", rr, rp,
                lr > 0 ? 100 * rr / lr : 0, rp - lp);
  }
}

/// GET /v1/cluster through `port`.
json view(uint16_t port) {
  http_client c(port, std::chrono::seconds(3));
  auto r = c.request("GET", "/v1/cluster", {{"X-API-Key", api_key}});
  return r.status == 200 ? r.json() : json();
}

int append(uint16_t port, const std::string& id, const std::string& key) {
  http_client c(port, std::chrono::seconds(3));
  return c
    .request(
      "POST", "/v1/entities/ledger/" + id + "/append",
      {{"X-API-Key", api_key}, {"Content-Type", "application/json"}, {"Idempotency-Key", key}},
      R"({"type":"invocation"})")
    .status;
}

void failover(const env& e, int kills) {
  std::vector<node> nodes(3);
  for (int i = 0; i < 3; ++i) {
    nodes[i].id = "n" + std::to_string(i + 1);
    nodes[i].dir = e.root / ("f-" + nodes[i].id);
    start(e, nodes[i], "failover", "replicated");
  }
  std::vector<double> ms;
  for (int k = 0; k < kills; ++k) {
    int victim = k % 3, via = (k + 1) % 3;
    // An entity whose shard the victim serves (its first call places it, or it is placed).
    std::string id;
    for (int i = 0; i < 5000 && id.empty(); ++i) {
      auto cand = "f" + std::to_string(k) + "-" + std::to_string(i);
      if (append(nodes[via].port, cand, "warm-" + cand) != 200)
        continue;
      auto v = view(nodes[via].port);
      if (v.is_object() &&
          v["shards"][cluster::shard_of({"acme", "ledger", cand}, shards)]["owner"] ==
            nodes[victim].id)
        id = cand;
    }
    if (id.empty())
      throw std::runtime_error("no entity is served by " + nodes[victim].id);
    nodes[victim].proc->kill_now();
    auto t0 = clock_type::now();
    for (int n = 0;; ++n) {
      if (append(nodes[via].port, id, "after-" + std::to_string(n)) == 200)
        break;
      if (clock_type::now() - t0 > std::chrono::seconds(60))
        throw std::runtime_error(id + " was not served again within 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    std::printf("  kill %d of %s: %s served again after %.0f ms\n", k + 1, nodes[victim].id.c_str(),
                id.c_str(), ms.back());
    start(e, nodes[victim], "failover", "replicated", "k" + std::to_string(k));
    bool ok = false;
    child_process j;
    j.spawn({e.factum, "cluster", "join", nodes[victim].id, "--etcd", e.etcd_url, "--name",
             "failover", "--timeout", "60"},
            e.root / ("join-" + std::to_string(k) + ".log"));
    while (!j.exited())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ok = j.exit_code() == 0;
    if (!ok)
      throw std::runtime_error("cluster join " + nodes[victim].id + ": " + j.log_tail());
  }
  auto sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf("failover (kill -9 of the owner to its entity's first 2xx through another node), "
              "lease %d ms, %d kills: median %.0f ms, max %.0f ms\n",
              ttl_ms, kills, median(ms), sorted.back());
  for (auto& n : nodes)
    (void)n.proc->stop();
}

void rebuild(const env& e, int entities) {
  node x;
  x.id = "n1";
  x.dir = e.root / "r-n1";
  start(e, x, "rebuild", "replicated");
  // Every entity once (the bench spreads its calls at random: go on until all were written).
  // A shard's first call waits for its log to be created: retried (the same key) until it
  // is served.
  for (int i = 0; i < entities; ++i)
    for (int attempt = 0;; ++attempt) {
      if (append(x.port, "r" + std::to_string(i), "r-" + std::to_string(i)) == 200)
        break;
      if (attempt == 200)
        throw std::runtime_error("append r" + std::to_string(i) + " failed");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  (void)x.proc->stop();
  replication::log_options lo;
  lo.servers = e.nats;
  lo.stream_prefix = "FACTUM_LOG_REBUILD";
  lo.subject_prefix = "factum.log.rebuild";
  auto c = replication::log_connection::connect(lo);
  if (!c)
    throw std::runtime_error(c.error().to_string());
  store_options o;
  o.data_dir = e.root / "rebuilt" / "entities-root";
  std::filesystem::create_directories(o.data_dir);
  auto t0 = clock_type::now();
  uint64_t messages = 0;
  for (uint32_t k = 0; k < shards; ++k) {
    auto r =
      replication::apply_shard(**c, k, o, e.root / "rebuilt" / ("shard-" + std::to_string(k)));
    if (!r)
      throw std::runtime_error("rebuild shard " + std::to_string(k) + ": " + r.error().to_string());
    messages += r->applied;
  }
  double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  uint64_t bytes = 0;
  size_t files = 0;
  for (auto& f : std::filesystem::recursive_directory_iterator(o.data_dir))
    if (f.is_regular_file()) {
      bytes += f.file_size();
      files += f.path().extension() == ".db" ? 1 : 0;
    }
  std::printf("rebuild of an empty directory from the logs: %zu entities (%llu log messages, "
              "%.1f MB) in %.2f s: %.0f entities/s, %.1f MB/s\n",
              files, static_cast<unsigned long long>(messages), double(bytes) / 1e6, s,
              double(files) / s, double(bytes) / 1e6 / s);
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"replication_bench"};
  env e;
  double seconds = 10;
  int runs = 3, kills = 10, rebuild_entities = 5000;
  bool keep = false;
  app.add_option("--factum", e.factum, "the factum executable")->required();
  app.add_option("--seconds", seconds, "each throughput measurement");
  app.add_option("--runs", runs, "throughput rounds (medians)");
  app.add_option("--kills", kills, "failovers measured");
  app.add_option("--rebuild-entities", rebuild_entities, "entities the rebuild rebuilds");
  app.add_flag("--keep", keep, "keep the servers' files (in /tmp/factum-replication-bench)");
  app.add_option("--image-bytes", e.image_bytes,
                 "cluster.replication.image_min_bytes of the replicated nodes (0: no images; "
                 "default: the server's)");
  CLI11_PARSE(app, argc, argv);
  temp_dir tmp;
  e.root = tmp.path();
  try {
    etcd_server etcd(1);
    e.etcd_url = etcd.url();
    nats_cluster nats(3);
    e.nats = nats.urls();
    setvbuf(stdout, nullptr, _IOLBF, 0); // lines as they come, also into a file
    if (runs > 0)
      throughput(e, seconds, runs);
    if (kills > 0)
      failover(e, kills);
    if (rebuild_entities > 0)
      rebuild(e, rebuild_entities);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "replication_bench: %s\n", ex.what());
    if (keep)
      keep_files(tmp, "factum-replication-bench");
    return 1;
  }
  if (keep)
    keep_files(tmp, "factum-replication-bench");
  return 0;
}
