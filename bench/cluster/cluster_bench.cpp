// cluster_bench.cpp: what cluster mode costs (docs/cluster.md, "Measurements"). Starts etcd and
// `factum serve` nodes on loopback (storage "local", durability full), then:
// - latency: one connection to node A, interleaving calls to entities A serves itself
//   (direct) and entities node B serves (relayed by A): a read (GET .../facts?limit=1, no
//   commit) and a keyed append (a durable commit); p50/p99 of each, and the difference;
// - scale: `factum bench append --mode http` against one node alone, then against three nodes
//   at once (the same total connections split over them, each process on its own entities):
//   the summed throughput over the single node's;
// - moves: node A alone gets E entities (one keyed append each); node B starts and `factum
//   cluster join B` moves to it the shards rendezvous hashing gives it, then `factum cluster
//   drain B` moves them back: wall time, shards and files of each, files per second.
// Usage: cluster_bench --factum PATH [--calls N] [--seconds S] [--connections C] [--entities E]
// The main thread only (the bench processes are children).
#include <algorithm>
#include <cstdio>
#include <map>

#include <CLI/CLI.hpp>

#include "factum/cluster/shard_map.hpp"
#include "http/client.hpp"
#include "reliability/crash_support.hpp"
#include "support/etcd_server.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* api_key = "bench-key";
constexpr uint32_t shards = 64;

struct node {
  std::string id;
  uint16_t port = 0;
  std::filesystem::path dir;
  std::unique_ptr<serve_process> proc;
};

/// Starts `n` nodes (n == 1 and no etcd: a node alone, no cluster), or only node `only` (1-based).
std::vector<node> start_nodes(int n, const std::string& factum, const std::filesystem::path& root,
                              const std::string& etcd_url, const std::string& name, int only = 0) {
  std::vector<node> nodes(n);
  for (int i = 0; i < n; ++i) {
    if (only && i + 1 != only)
      continue;
    auto& x = nodes[i];
    x.id = "n" + std::to_string(i + 1);
    x.port = free_ports(1).front(); // bound once and released: the node binds it
    x.dir = root / (name + "-" + x.id);
    std::filesystem::create_directories(x.dir);
    json cfg = {{"listen", "127.0.0.1:" + std::to_string(x.port)},
                {"data_dir", (x.dir / "data").string()},
                {"dev", true},
                {"tenants", {{"acme", {{"api_keys", {api_key}}}}}},
                {"types", {"ledger"}}};
    if (!etcd_url.empty())
      cfg["cluster"] = {{"name", name},
                        {"node_id", x.id},
                        {"etcd", {etcd_url}},
                        {"advertise", "127.0.0.1:" + std::to_string(x.port)},
                        {"shards", shards},
                        {"lease_ttl_ms", 5000},
                        {"secret", "bench-secret-0123456789"}};
    x.proc = std::make_unique<serve_process>(factum, x.dir);
    if (auto e = x.proc->start(cfg, "0"); !e.empty())
      throw std::runtime_error(x.id + ": " + e);
  }
  return nodes;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * double(v.size())))];
}

/// Latency of direct and relayed calls through node A, interleaved.
void latency(const std::string& factum, const std::filesystem::path& root,
             const std::string& etcd_url, int calls) {
  auto nodes = start_nodes(2, factum, root, etcd_url, "lat");
  http_client a(nodes[0].port);
  header_list h = {{"X-API-Key", api_key}, {"Content-Type", "application/json"}};
  // Place shards: the first call to each entity places its shard on a node (rendezvous over
  // the live members), so touch entities until each side has 20 of them.
  std::vector<std::string> direct, relayed;
  for (int i = 0; (direct.size() < 20 || relayed.size() < 20) && i < 5000; ++i) {
    auto id = "L" + std::to_string(i);
    auto hh = h;
    hh.emplace_back("Idempotency-Key", "warm-" + id);
    a.request("POST", "/v1/entities/ledger/" + id + "/append", hh, R"({"type":"invocation"})");
    auto view = a.request("GET", "/v1/cluster", {{"X-API-Key", api_key}}).json();
    auto s = cluster::shard_of({"acme", "ledger", id}, shards);
    auto owner = view["shards"][s]["owner"];
    auto& side = owner == nodes[0].id ? direct : relayed;
    if (side.size() < 20)
      side.push_back(id);
  }
  std::map<std::string, std::vector<double>> us;
  for (int i = 0; i < calls; ++i) {
    for (int which = 0; which < 2; ++which) {
      auto& ids = which == 0 ? direct : relayed;
      auto& id = ids[static_cast<size_t>(i) % ids.size()];
      std::string side = which == 0 ? "direct" : "relayed";
      auto t0 = clock_type::now();
      auto r = a.request("GET", "/v1/entities/ledger/" + id + "/facts?limit=1", h);
      auto t1 = clock_type::now();
      auto hh = h;
      hh.emplace_back("Idempotency-Key", "b" + std::to_string(i) + "-" + side);
      auto w =
        a.request("POST", "/v1/entities/ledger/" + id + "/append", hh, R"({"type":"invocation"})");
      auto t2 = clock_type::now();
      if (r.status != 200 || w.status != 200)
        throw std::runtime_error(side + " call failed: " + std::to_string(r.status) + " " +
                                 std::to_string(w.status) + " " + w.body);
      us[side + " read"].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      us[side + " append"].push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
  }
  std::printf("latency through one node, 1 connection, %d calls each (microseconds)\n", calls);
  std::printf("%-16s %10s %10s\n", "", "p50", "p99");
  for (const char* what : {"read", "append"}) {
    auto& d = us[std::string("direct ") + what];
    auto& f = us[std::string("relayed ") + what];
    double d50 = percentile(d, 50), d99 = percentile(d, 99);
    double f50 = percentile(f, 50), f99 = percentile(f, 99);
    std::printf("%-16s %10.0f %10.0f\n", (std::string("direct ") + what).c_str(), d50, d99);
    std::printf("%-16s %10.0f %10.0f\n", (std::string("relayed ") + what).c_str(), f50, f99);
    std::printf("%-16s %10.0f %10.0f\n", (std::string("added ") + what).c_str(), f50 - d50,
                f99 - d99);
  }
  for (auto& n : nodes)
    (void)n.proc->stop();
}

/// `factum bench append --mode http` against each node at once; the summed throughput.
double run_benches(const std::string& factum, const std::vector<node>& nodes, int connections,
                   double seconds, const std::filesystem::path& dir) {
  std::vector<std::unique_ptr<child_process>> procs;
  int per = std::max(1, connections / static_cast<int>(nodes.size()));
  for (size_t i = 0; i < nodes.size(); ++i) {
    procs.push_back(std::make_unique<child_process>());
    auto out = dir / ("bench-" + std::to_string(i) + ".json");
    // stdout is /dev/null for a child_process: the shell redirects it to the file.
    procs.back()->spawn({"/bin/sh", "-c",
                         factum + " bench append --mode http --url http://127.0.0.1:" +
                           std::to_string(nodes[i].port) + " --api-key " + api_key + " -c " +
                           std::to_string(per) + " --entities 1000 --duration " +
                           std::to_string(seconds) + " --seed " + std::to_string(i + 1) +
                           " --no-verify --no-progress --json > " + out.string()},
                        dir / ("bench-" + std::to_string(i) + ".log"));
  }
  double sum = 0;
  for (size_t i = 0; i < procs.size(); ++i) {
    while (!procs[i]->exited())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(dir / ("bench-" + std::to_string(i) + ".json"));
    auto j = json::parse(in, nullptr, false);
    if (!j.is_object())
      throw std::runtime_error("bench " + std::to_string(i) + " wrote no JSON");
    sum += j.value("throughput", 0.0);
    // Why requests failed, from the node's log (its request_failed lines, by code).
    std::map<std::string, int> codes;
    std::map<std::string, std::string> first;
    std::ifstream log(nodes[i].dir / "serve-0.log");
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
      std::printf("    %s answered %d x %s (first: %s)\n", nodes[i].id.c_str(), n, code.c_str(),
                  first[code].c_str());
    std::printf("  node %s: %.0f req/s, p50 %.0f us, p99 %.0f us, errors %lld\n",
                nodes[i].id.c_str(), j.value("throughput", 0.0), j["latency_us"].value("p50", 0.0),
                j["latency_us"].value("p99", 0.0), static_cast<long long>(j.value("errors", 0)));
  }
  return sum;
}

void scale(const std::string& factum, const std::filesystem::path& root,
           const std::string& etcd_url, int connections, double seconds) {
  std::printf("append over HTTP, 1000 entities, %d connections in all, %.0f s\n", connections,
              seconds);
  double one, three;
  {
    auto nodes = start_nodes(1, factum, root, "", "alone");
    std::printf("one node alone:\n");
    one = run_benches(factum, nodes, connections, seconds, nodes[0].dir);
    for (auto& n : nodes)
      (void)n.proc->stop();
  }
  {
    auto nodes = start_nodes(3, factum, root, etcd_url, "three");
    std::printf("three nodes, clients spread over them:\n");
    three = run_benches(factum, nodes, connections, seconds, nodes[0].dir);
    for (auto& n : nodes)
      (void)n.proc->stop();
  }
  std::printf("one node %.0f req/s; three nodes %.0f req/s; ratio %.2f\n", one, three,
              one > 0 ? three / one : 0.0);
}

/// A metric's value in a node's /metrics (-1 when absent).
double metric_of(uint16_t port, const std::string& name) {
  http_client c(port, std::chrono::seconds(5));
  auto body = c.request("GET", "/metrics").body;
  auto at = body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(body.substr(at + name.size() + 2));
}

/// Runs `factum cluster VERB NODE` and prints how long its moves took.
void timed_move(const std::string& factum, const std::string& etcd_url, const char* verb,
                const std::string& id, uint16_t sender, uint16_t receiver) {
  auto files0 = metric_of(receiver, "factum_cluster_move_files_total{direction=\"received\"}");
  auto shards0 = metric_of(sender, "factum_cluster_shard_moves_total");
  auto t0 = clock_type::now();
  auto cmd = factum + " cluster " + verb + " " + id + " --etcd " + etcd_url +
             " --name moves --timeout 600 >/dev/null";
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error(std::string("factum cluster ") + verb + " " + id + " failed");
  double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto files =
    metric_of(receiver, "factum_cluster_move_files_total{direction=\"received\"}") - files0;
  auto moved = metric_of(sender, "factum_cluster_shard_moves_total") - shards0;
  std::printf("%-5s %s: %.0f shards, %.0f files in %.2f s: %.0f files/s\n", verb, id.c_str(), moved,
              files, s, s > 0 ? files / s : 0.0);
}

/// Planned moves of a node's shards, with `entities` entities on it.
void moves(const std::string& factum, const std::filesystem::path& root,
           const std::string& etcd_url, int entities) {
  auto nodes = start_nodes(2, factum, root, etcd_url, "moves", 1);
  {
    http_client c(nodes[0].port, std::chrono::seconds(10));
    for (int i = 0; i < entities; ++i) {
      auto r = c.request("POST", "/v1/entities/ledger/m" + std::to_string(i) + "/append",
                         {{"X-API-Key", api_key},
                          {"Content-Type", "application/json"},
                          {"Idempotency-Key", "m" + std::to_string(i)}},
                         R"({"type":"invocation","data":{"n":1}})");
      if (r.status != 200)
        throw std::runtime_error("append: " + std::to_string(r.status) + " " + r.body);
    }
  }
  auto second = start_nodes(2, factum, root, etcd_url, "moves", 2);
  nodes[1] = std::move(second[1]);
  std::printf("moves: %d entities (one append each) on n1, then n2 joins and is drained\n",
              entities);
  timed_move(factum, etcd_url, "join", "n2", nodes[0].port, nodes[1].port);
  timed_move(factum, etcd_url, "drain", "n2", nodes[1].port, nodes[0].port);
  for (auto& n : nodes)
    (void)n.proc->stop();
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"cluster_bench: what cluster mode costs (docs/cluster.md)"};
  std::string factum;
  int calls = 2000, connections = 24;
  double seconds = 10;
  bool only_latency = false, only_moves = false;
  int entities = 2000;
  app.add_option("--factum", factum, "the factum binary")->required();
  app.add_option("--calls", calls, "latency: calls of each kind");
  app.add_option("--seconds", seconds, "scale: seconds per run");
  app.add_option("--connections", connections, "scale: connections in all");
  app.add_flag("--latency-only", only_latency, "skip the scale runs");
  app.add_flag("--moves-only", only_moves, "only the planned moves");
  app.add_option("--entities", entities, "moves: entities on the first node");
  CLI11_PARSE(app, argc, argv);
  temp_dir tmp;
  try {
    etcd_server etcd;
    if (!only_moves)
      latency(factum, tmp.path(), etcd.url(), calls);
    if (!only_latency && !only_moves)
      scale(factum, tmp.path(), etcd.url(), connections, seconds);
    if (!only_latency)
      moves(factum, tmp.path(), etcd.url(), entities);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
