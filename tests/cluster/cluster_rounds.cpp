// cluster_rounds.cpp: a Jepsen-style round against a real three-node factum cluster on loopback
// (docs/cluster.md, "Tests"). It starts etcd, a fake vendor and three `factum serve` nodes
// (storage "local": each its own data directory; with --storage shared, one entity root for
// all; with --storage replicated, three nats-servers beside etcd hold every shard's log and each
// node a copy), drives keyed ledger appends to many entities over every node while a nemesis
//   1. kill -9s a node and restarts it on its data directory (shared storage: first the others
//      must take its shards over and serve them while it is down; restarted, it joins again),
//   2. SIGSTOPs a node for three lease TTLs while it holds webhook deliveries mid-await, then
//      SIGCONTs it: the writes it had queued must be refused by the fence (fenced writes > 0),
//      and it must take its shards back under new epochs,
//   3. restarts etcd under the load,
//   4. starts a fourth node with a wrong cluster secret and `factum cluster join`s it (the moves
//      fail and the old homes serve their shards again), restarts it with the right secret and
//      joins it again (shards move to it), then `factum cluster drain`s the first node and
//      kill -9s it while it moves a shard out, restarts it and lets it finish the drain (all its
//      shards move away; it keeps relaying),
// (shared storage: the fourth node joins with the right secret, no file moves, and the first is
// drained without a kill; replicated storage: nemesis 1 also deletes the killed node's data
// directory, so that it restarts empty and rebuilds from the logs, and after nemesis 3 the NATS
// server leading a log is killed and restarted), then stops everything and checks the files
// offline (replicated: each entity's keys in its owner's copy, every other copy the owner's
// history, once the followers applied their logs): every acknowledged
// key is on disk exactly once, no key appears twice, no entity has a file on two nodes, every
// node's files verify
// (`factum inspect verify`: chains and owner histories), every entity file is in a shard whose
// home is its node (`factum inspect entities --shards`), GET /v1/entities through one node
// lists exactly the entities on all nodes' disks, and `factum cluster status` shows every node
// live and every used shard served by its home.
// Usage: cluster_rounds --factum PATH --vendor PATH [--etcd-members 1|3]
// [--storage local|shared|replicated] [--image-bytes N] [--rounds N] [--seed S] [--entities N]
// [--keep] (--image-bytes: storage replicated, an image of an entity's file every N bytes of its
// changes, so that the faults land on the log's compactions); --rounds
// repeats nemeses 1-3 (victims rotate).
// Threads: the main thread runs the nemesis and the checks; client threads drive the load.
#include <signal.h>

#include <atomic>
#include <map>
#include <random>
#include <set>

#include "factum/cluster/shard_map.hpp"
#include "factum/replication/shard_log.hpp"
#include "http/client.hpp"
#include "reliability/crash_support.hpp"
#include "support/etcd_server.hpp"
#include "support/nats_cluster.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

constexpr const char* api_key = "cluster-test-key";
constexpr int nodes_n = 3;
constexpr uint32_t shards = 16;
constexpr int ttl_ms = 2000;

struct node_proc {
  std::string id;
  uint16_t port = 0;
  std::filesystem::path dir;
  std::unique_ptr<serve_process> proc;
  pid_t pid = -1;
  bool secret = true; ///< whether its config has the cluster's secret (it may take moved shards)
};

/// Storage "shared": the entity root every node's config names (empty: storage "local").
std::filesystem::path shared_root;
/// Storage "replicated": the NATS servers of the log (empty: storage "local" or "shared").
std::vector<std::string> nats_urls;
/// Storage "replicated": cluster.replication.image_min_bytes with image_ratio 0 (--image-bytes;
/// 0: the server's defaults).
int64_t image_bytes = 0;

/// Storage "shared" or "replicated": a down node's shards are taken over by the others.
bool takes_over() {
  return !shared_root.empty() || !nats_urls.empty();
}

json node_config(const node_proc& n, const std::vector<std::string>& etcd_urls,
                 uint16_t vendor_port) {
  json hook = {{"url", "http://127.0.0.1:" + std::to_string(vendor_port) + "/hook"},
               {"connect_timeout_ms", 1000},
               {"request_timeout_ms", 5000},
               {"retry", {{"max_attempts", 1}}}};
  json c = {{"listen", "127.0.0.1:" + std::to_string(n.port)},
            {"data_dir", (n.dir / "data").string()},
            {"dev", true},
            {"storage_threads", 2},
            {"spare_files", 4},
            {"call_timeout_ms", 15000},
            {"tenants", {{"acme", {{"api_keys", {api_key}}}}}},
            {"types", {"ledger", "webhook"}},
            {"tools", {{"hook", hook}}},
            {"cluster",
             {{"name", "rounds"},
              {"node_id", n.id},
              {"etcd", etcd_urls},
              {"advertise", "127.0.0.1:" + std::to_string(n.port)},
              {"shards", shards},
              {"lease_ttl_ms", ttl_ms},
              {"min_nodes", nodes_n},
              {"secret", n.secret ? "rounds-secret-0123456789" : "another-secret-0123456789"}}}};
  if (!shared_root.empty()) {
    c["cluster"]["storage"] = "shared";
    c["cluster"]["shared_dir"] = shared_root.string();
  }
  if (!nats_urls.empty()) {
    c["cluster"]["storage"] = "replicated";
    c["cluster"]["replication"] = {
      {"servers", nats_urls}, {"replicas", 3}, {"ack_timeout_ms", 2000}};
    if (image_bytes > 0) { // images every few KiB of an entity's changes: faults land on them
      c["cluster"]["replication"]["image_min_bytes"] = image_bytes;
      c["cluster"]["replication"]["image_ratio"] = 0;
    }
  }
  return c;
}

/// One ledger append of the load: its entity and key, and whether a node acknowledged it.
struct call_log {
  std::mutex mu;
  std::map<std::string, int> acked;     ///< ledger appends: key -> entity (e<N>)
  std::map<std::string, int> delivered; ///< webhook deliveries: key -> entity (d<N>)
  std::set<std::string> unknown;        ///< keys whose last answer was not a 200
  std::atomic<uint64_t> sent{0}, ok{0}, retried{0};
  std::atomic<uint64_t> in_flight{0}; ///< retries answered 409: the earlier attempt still ran
  /// Whether the clients send webhook deliveries (one call in eight); off during the pause
  /// round, which counts the vendor calls of its own deliveries.
  std::atomic<bool> deliveries{true};
  std::atomic<int> deliveries_in_flight{0};
};

/// Webhook entities the load delivers through (d0 .. d49).
constexpr int webhook_entities = 50;

/// A client thread: appends to random ledger entities, and (one call in eight) delivers webhooks
/// through random webhook entities, through random nodes; a call answered 503 or not at all is
/// retried with the same key (through another node) until acknowledged or 20 s.
void drive(int t, uint64_t seed, int entities, const std::vector<node_proc>& nodes,
           std::atomic<bool>& stop, call_log& log) {
  std::mt19937_64 rng(seed + static_cast<uint64_t>(t) * 7919);
  std::vector<std::unique_ptr<http_client>> http;
  for (auto& n : nodes)
    http.push_back(std::make_unique<http_client>(n.port, std::chrono::seconds(4)));
  for (int n = 0; !stop.load(); ++n) {
    bool hook = rng() % 8 == 0;
    if (hook) {
      log.deliveries_in_flight.fetch_add(1);
      hook = log.deliveries.load(); // checked after the count: the pause round waits for it
      if (!hook)
        log.deliveries_in_flight.fetch_sub(1);
    }
    int e = static_cast<int>(rng() % static_cast<uint64_t>(hook ? webhook_entities : entities));
    auto key = "s" + std::to_string(seed) + "-t" + std::to_string(t) + "-" + std::to_string(n);
    auto target = hook ? "/v1/entities/webhook/d" + std::to_string(e) + "/deliver"
                       : "/v1/entities/ledger/e" + std::to_string(e) + "/append";
    auto body = hook ? json{{"tool", "hook"}, {"payload", {{"k", key}}}}.dump()
                     : json{{"type", "invocation"}, {"data", {{"k", key}}}}.dump();
    header_list h = {
      {"X-API-Key", api_key}, {"Content-Type", "application/json"}, {"Idempotency-Key", key}};
    log.sent.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool acked = false;
    for (int attempt = 0; std::chrono::steady_clock::now() < deadline; ++attempt) {
      auto& c = *http[(rng() + static_cast<uint64_t>(attempt)) % http.size()];
      auto r = c.request("POST", target, h, body);
      if (r.status == 200) {
        acked = true;
        break;
      }
      // 409 IDEMPOTENCY_KEY_IN_USE: an earlier attempt of this key (one this client gave up
      // waiting for) is still running at the owner; retried like a 503.
      bool in_flight = r.status == 409 &&
                       r.body.find("IDEMPOTENCY_KEY_IN_USE") != std::string::npos &&
                       r.body.find("dead_letter_id") == std::string::npos;
      if (in_flight)
        log.in_flight.fetch_add(1);
      if (r.status != 0 && r.status != 503 && r.status != 504 && !in_flight)
        fail(target + " " + key + ": unexpected " + std::to_string(r.status) + " " + r.body);
      log.retried.fetch_add(1);
      if (r.status == 0)
        c.close();
      std::this_thread::sleep_for(std::chrono::milliseconds(50)); // a client's backoff
    }
    if (hook)
      log.deliveries_in_flight.fetch_sub(1);
    std::lock_guard<std::mutex> g(log.mu);
    if (acked) {
      (hook ? log.delivered : log.acked)[key] = e;
      log.ok.fetch_add(1);
    } else {
      log.unknown.insert(key);
    }
  }
}

/// One keyed append through `port`: its status.
int json_write_probe(uint16_t port) {
  http_client c(port, std::chrono::seconds(3));
  return c
    .request("POST", "/v1/entities/ledger/probe/append",
             {{"X-API-Key", api_key},
              {"Content-Type", "application/json"},
              {"Idempotency-Key", "probe-" + std::to_string(port)}},
             R"({"type":"invocation"})")
    .status;
}

/// A metric's value in a node's /metrics ("" line absent: -1).
double metric(uint16_t port, const std::string& name) {
  http_client c(port, std::chrono::seconds(3));
  auto r = c.request("GET", "/metrics");
  auto at = r.body.find("\n" + name + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(r.body.substr(at + name.size() + 2));
}

/// GET /v1/cluster from a node (null when it does not answer).
json cluster_view(uint16_t port) {
  http_client c(port, std::chrono::seconds(3));
  auto r = c.request("GET", "/v1/cluster", {{"X-API-Key", api_key}});
  return r.status == 200 ? r.json() : json();
}

/// Polls `cond` every 20 ms for at most `limit`; whether it became true.
bool wait_for(const std::function<bool()>& cond, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

/// The nemesis' pause: webhook deliveries to entities of `victim`'s shards reach its vendor
/// (which answers only after 1.5 s), the node is stopped while they await, and continued once
/// another node sees its lease gone; then the writes those turns make must be fenced.
void pause_round(std::vector<node_proc>& nodes, int victim, const std::string& vendor_url,
                 call_log& log) {
  auto& v = nodes[victim];
  // The load's own deliveries stop meanwhile: the round counts the vendor calls of its own.
  log.deliveries.store(false);
  if (!wait_for([&] { return log.deliveries_in_flight.load() == 0; }, std::chrono::seconds(30)))
    fail("pause: the load's webhook deliveries did not end");
  struct resume_load {
    call_log& log;
    uint16_t vendor;
    ~resume_load() {
      http_client ctl(vendor);
      ctl.request("POST", "/_vendor/mode", {{"Content-Type", "application/json"}},
                  json{{"mode", "ok"}, {"delay_ms", 0}}.dump());
      log.deliveries.store(true);
    }
  } resume{log, static_cast<uint16_t>(std::stoi(vendor_url.substr(vendor_url.rfind(':') + 1)))};
  auto view = cluster_view(v.port);
  std::vector<std::string> ids;
  for (int i = 0; ids.size() < 6 && i < 2000; ++i) {
    entity_key k{"acme", "webhook", "w" + std::to_string(i)};
    auto s = cluster::shard_of(k, shards);
    auto& sh = view["shards"][s];
    if (sh["home"].is_null() || sh["home"] == v.id)
      ids.push_back(k.id);
  }
  {
    http_client ctl(static_cast<uint16_t>(std::stoi(vendor_url.substr(vendor_url.rfind(':') + 1))));
    ctl.request("POST", "/_vendor/mode", {{"Content-Type", "application/json"}},
                json{{"mode", "ok"}, {"delay_ms", 1500}}.dump());
  }
  auto tool_calls0 = metric(v.port, "factum_tool_calls_total");
  std::vector<std::thread> calls;
  std::atomic<int> answered{0};
  for (auto& id : ids)
    calls.emplace_back([&, id] {
      http_client c(v.port, std::chrono::seconds(30));
      c.request("POST", "/v1/entities/webhook/" + id + "/deliver",
                {{"X-API-Key", api_key},
                 {"Content-Type", "application/json"},
                 {"Idempotency-Key", "pause-" + id}},
                json{{"tool", "hook"}, {"payload", {{"id", id}}}}.dump());
      answered.fetch_add(1);
    });
  bool awaiting = wait_for(
    [&] { return metric(v.port, "factum_tool_calls_total") >= tool_calls0 + double(ids.size()); },
    std::chrono::seconds(10));
  if (!awaiting)
    fail("pause: the deliveries did not reach the vendor on " + v.id);
  auto fenced0 = metric(v.port, "factum_cluster_fenced_writes_total");
  ::kill(v.pid, SIGSTOP);
  // Another node sees the lease gone (bounded: the TTL plus polling).
  auto other = nodes[(victim + 1) % nodes_n].port;
  json seen;
  bool gone = wait_for(
    [&] {
      auto j = cluster_view(other);
      seen = j;
      if (!j.is_object())
        return false;
      for (auto& n : j["nodes"])
        if (n["id"] == v.id)
          return n["state"] == "down";
      return takes_over(); // not listed: its shards were taken over (shared, replicated)
    },
    std::chrono::seconds(3 * ttl_ms / 1000 + 5));
  if (!gone)
    fail("pause: no other node saw " + v.id + "'s lease expire (last view: " +
         (seen.is_object() ? seen["nodes"].dump() : std::string("no answer")) + ")");
  ::kill(v.pid, SIGCONT);
  for (auto& t : calls)
    t.join();
  bool fenced =
    wait_for([&] { return metric(v.port, "factum_cluster_fenced_writes_total") > fenced0; },
             std::chrono::seconds(10));
  if (!fenced)
    fail("pause: " + v.id + " committed writes it had queued while paused (no fenced write)");
  if (!wait_for([&] { return metric(v.port, "factum_cluster_leases_lost_total") >= 1; },
                std::chrono::seconds(10)))
    fail("pause: " + v.id + " did not notice that its lease was lost");
  // It takes its shards back (new lease, new epochs) and serves again.
  if (!wait_for([&] { return metric(v.port, "factum_cluster_lease_live") == 1; },
                std::chrono::seconds(10)))
    fail("pause: " + v.id + " did not get a new lease");
}

/// Runs `cmd` through the shell; its standard output, and whether it exited 0.
std::string capture(const std::string& cmd, bool& ok) {
  std::string out;
  ok = false;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0)
      out.append(buf, got);
    ok = ::pclose(f) == 0;
  }
  return out;
}

/// `factum cluster status --json` (read from etcd): every node live, every used shard served
/// by its home.
json check_status(const std::string& factum, const std::string& etcd_url,
                  const std::vector<node_proc>& nodes) {
  auto cmd = factum + " cluster status --etcd " + etcd_url + " --name rounds --json";
  bool ok = false;
  auto out = capture(cmd, ok);
  if (!ok)
    fail("factum cluster status failed: " + out);
  auto j = json::parse(out, nullptr, false);
  if (!j.is_object() || j["shard_count"] != shards) {
    fail("factum cluster status: unexpected " + out.substr(0, 500));
    return json();
  }
  std::set<std::string> live;
  for (auto& n : j["nodes"])
    if (n["state"] == "live")
      live.insert(n["id"].get<std::string>());
  for (auto& n : nodes)
    if (!live.count(n.id))
      fail("factum cluster status does not show " + n.id + " live: " + out.substr(0, 500));
  for (auto& s : j["shards"])
    if (!s["home"].is_null() && s["owner"] != s["home"])
      fail("shard " + s["shard"].dump() + " is not served by its home: " + s.dump());
  return j;
}

/// `factum inspect entities --shards` on each node's files: every entity there is in a shard
/// whose home is that node (`drained`: a node that must hold none).
void check_homes(const std::string& factum, const std::vector<node_proc>& nodes, const json& status,
                 const std::string& drained) {
  if (!status.is_object())
    return;
  for (auto& n : nodes) {
    auto cmd = factum + " inspect entities --data " + (n.dir / "data").string() + " --shards " +
               std::to_string(shards) + " --json";
    bool ok = false;
    auto out = capture(cmd, ok);
    if (!ok)
      fail("inspect entities on " + n.id + " failed");
    std::istringstream lines(out);
    int seen = 0;
    for (std::string line; std::getline(lines, line);) {
      auto e = json::parse(line, nullptr, false);
      if (!e.is_object() || !e.contains("shard"))
        continue;
      ++seen;
      auto home = status["shards"][e["shard"].get<size_t>()]["home"];
      if (home != n.id)
        fail(e["tenant"].get<std::string>() + "/" + e["type"].get<std::string>() + "/" +
             e["id"].get<std::string>() + " is on " + n.id + " but its shard's home is " +
             home.dump());
    }
    if (seen == 0 && n.id != drained)
      fail("inspect entities --shards listed no entity on " + n.id);
    if (seen > 0 && n.id == drained)
      fail(n.id + " was drained and still holds " + std::to_string(seen) + " entity files");
  }
}

/// The etcd member that leads now (asked of member 0's status; -1 when unknown).
int etcd_leader(etcd_server& etcd) {
  for (size_t m = 0; m < etcd.members(); ++m) {
    if (!etcd.running(m))
      continue;
    auto url = etcd.url(m);
    http_client c(static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1))),
                  std::chrono::seconds(3));
    auto st = c.request("POST", "/v3/maintenance/status", {}, "{}").json();
    if (!st.is_object() || !st.contains("leader"))
      continue;
    for (size_t k = 0; k < etcd.members(); ++k) {
      auto u = etcd.url(k);
      http_client ck(static_cast<uint16_t>(std::stoi(u.substr(u.rfind(':') + 1))),
                     std::chrono::seconds(3));
      auto sk = ck.request("POST", "/v3/maintenance/status", {}, "{}").json();
      if (sk.is_object() && sk["header"]["member_id"] == st["leader"])
        return static_cast<int>(k);
    }
  }
  return -1;
}

/// Whether every node's /healthz answers `status`.
bool every_health(const std::vector<node_proc>& nodes, int status) {
  for (auto& n : nodes) {
    http_client c(n.port, std::chrono::seconds(2));
    if (c.request("GET", "/healthz").status != status)
      return false;
  }
  return true;
}

/// A three-member etcd: its leader is killed (a short stall, then the load goes on), then a
/// second member too (no quorum: every node's lease runs out and it refuses, 503
/// CLUSTER_UNAVAILABLE, never serving unfenced), then both come back (every node serves again).
void quorum_round(etcd_server& etcd, std::vector<node_proc>& nodes, call_log& log) {
  int leader = etcd_leader(etcd);
  if (leader < 0) {
    fail("quorum: no etcd leader found");
    return;
  }
  std::cout << "nemesis: kill the etcd leader (member " << leader << ")\n";
  etcd.kill9(static_cast<size_t>(leader));
  auto before = log.ok.load();
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("quorum: the load stalled after the etcd leader was killed");
  auto second = static_cast<size_t>((leader + 1) % 3);
  std::cout << "nemesis: kill a second etcd member (no quorum)\n";
  etcd.kill9(second);
  if (!wait_for([&] { return every_health(nodes, 503); }, std::chrono::seconds(ttl_ms / 1000 + 8)))
    fail("quorum: a node still says it is healthy (a live lease) without an etcd quorum");
  // No write is acknowledged while no node has a lease (the load's threads keep trying).
  auto frozen = log.ok.load();
  auto h = json_write_probe(nodes.front().port);
  if (h == 200)
    fail("quorum: a write was acknowledged without an etcd quorum");
  if (log.ok.load() > frozen + 4) // calls answered just before the leases ran out may land
    fail("quorum: writes were acknowledged without an etcd quorum");
  std::cout << "nemesis: etcd members back\n";
  etcd.restart(static_cast<size_t>(leader));
  etcd.restart(second);
  if (!wait_for([&] { return every_health(nodes, 200); }, std::chrono::seconds(20)))
    fail("quorum: the nodes did not serve again once etcd had its quorum back");
  before = log.ok.load();
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("quorum: the load did not resume once etcd had its quorum back");
}

/// The tenant's entities as GET /v1/entities lists them through one node (every node's, merged),
/// page by page ("acme/TYPE/ID").
std::set<std::string> listed_entities(uint16_t port) {
  std::set<std::string> out;
  http_client c(port, std::chrono::seconds(10));
  std::string target = "/v1/entities?limit=100";
  for (int pages = 0; !target.empty() && pages < 100; ++pages) {
    auto r = c.request("GET", target, {{"X-API-Key", api_key}});
    if (r.status != 200) {
      fail("GET " + target + ": " + std::to_string(r.status) + " " + r.body);
      break;
    }
    for (auto& e : r.json())
      if (!out.insert("acme/" + e["type"].get<std::string>() + "/" + e["id"].get<std::string>())
             .second)
        fail("GET /v1/entities listed " + e.dump() + " twice");
    auto link = r.header("link");
    target = link.empty() ? "" : link.substr(1, link.find('>') - 1);
  }
  return out;
}

/// `factum cluster drain n1`, run in the background; n1 is killed (-9) while it moves a shard
/// out (its moving gauge seen at 1) and restarted: it resumes the move and the drain completes.
void drain_round(const std::string& factum, const std::string& etcd_url,
                 std::vector<node_proc>& nodes,
                 const std::function<std::string(node_proc&, const std::string&)>& start) {
  auto& n1 = nodes.front();
  std::cout << "nemesis: drain n1, kill -9 it mid-move, restart it\n";
  child_process drain;
  drain.spawn(
    {factum, "cluster", "drain", "n1", "--etcd", etcd_url, "--name", "rounds", "--timeout", "60"},
    n1.dir.parent_path() / "drain.log");
  http_client c(n1.port, std::chrono::seconds(2));
  bool caught = wait_for(
    [&] {
      auto r = c.request("GET", "/metrics");
      return r.body.find("\nfactum_cluster_shards_moving 1\n") != std::string::npos;
    },
    std::chrono::seconds(10));
  if (!caught)
    return fail("drain: n1 was never seen moving a shard out");
  n1.proc->kill_now();
  if (auto e = start(n1, "1"); !e.empty())
    return fail("n1 did not restart: " + e);
  if (!wait_for([&] { return drain.exited(); }, std::chrono::seconds(60)))
    return fail("drain: factum cluster drain n1 did not end");
  if (drain.exit_code() != 0)
    return fail("cluster drain n1 after its restart: " + drain.log_tail());
  if (metric(n1.port, "factum_cluster_shard_moves_total") <= 0)
    fail("n1 was drained and, restarted, handed over no shard");
}

/// Shared storage: the shard of entity e<i> (of the load) whose home is `id` (-1: none).
int entity_homed_on(uint16_t port, const std::string& id, int entities) {
  auto view = cluster_view(port);
  for (int i = 0; view.is_object() && i < entities; ++i) {
    auto s = cluster::shard_of(entity_key{"acme", "ledger", "e" + std::to_string(i)}, shards);
    if (view["shards"][s]["home"] == id)
      return i;
  }
  return -1;
}

/// Shared storage, after `victim` was killed (-9): the live nodes take its shards over once its
/// lease ran out, and an entity of one of them is served again while it is still down.
void takeover_round(std::vector<node_proc>& nodes, int victim, int probe_entity, call_log& log,
                    std::chrono::steady_clock::time_point killed) {
  auto& v = nodes[victim];
  auto other = nodes[(victim + 1) % nodes_n].port;
  bool taken = wait_for(
    [&] {
      auto j = cluster_view(other);
      if (!j.is_object())
        return false;
      for (auto& sh : j["shards"])
        if (sh["home"] == v.id || (!sh["home"].is_null() && sh["owner"].is_null()))
          return false;
      return true;
    },
    std::chrono::seconds(3 * ttl_ms / 1000 + 10));
  if (!taken)
    return fail("takeover: " + v.id + "'s shards were not taken over while it was down");
  double takeovers = 0;
  for (int i = 0; i < nodes_n; ++i)
    if (i != victim)
      takeovers += metric(nodes[i].port, "factum_cluster_shard_takeovers_total");
  if (takeovers <= 0)
    fail("takeover: the live nodes count no shard takeover");
  if (probe_entity >= 0) {
    http_client c(other, std::chrono::seconds(5));
    auto target = "/v1/entities/ledger/e" + std::to_string(probe_entity) + "/append";
    bool served = wait_for(
      [&] {
        return c.request("POST", target,
                         {{"X-API-Key", api_key},
                          {"Content-Type", "application/json"},
                          {"Idempotency-Key", "takeover-probe-" + std::to_string(probe_entity)}},
                         R"({"type":"invocation"})")
                 .status == 200;
      },
      std::chrono::seconds(10));
    if (!served)
      fail("takeover: e" + std::to_string(probe_entity) + ", of a shard " + v.id +
           " had, is not served while " + v.id + " is down");
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - killed)
                .count();
    std::cout << "takeover: e" << probe_entity << " served again " << ms
              << " ms after the kill (lease " << ttl_ms << " ms)\n";
  }
  auto before = log.ok.load();
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("takeover: the load stalled while " + v.id + " was down");
}

/// Shared storage: planned moves copy no file. A fourth node joins (shards move to it), then the
/// first node is drained (it serves none after).
void shared_move_round(const std::string& factum, const std::string& etcd_url,
                       std::vector<node_proc>& nodes, call_log& log,
                       const std::function<std::string(node_proc&, const std::string&)>& start) {
  bool ok = false;
  auto cli = [&](const std::string& args) {
    return capture(factum + " cluster " + args + " --etcd " + etcd_url + " --name rounds 2>&1", ok);
  };
  auto& n4 = nodes.emplace_back(); // reserved: the load's threads hold no reference into it
  n4.id = "n4";
  n4.port = free_ports(1).front();
  n4.dir = nodes.front().dir.parent_path() / n4.id;
  std::filesystem::create_directories(n4.dir);
  if (auto e = start(n4, "0"); !e.empty())
    return fail("n4 did not start: " + e);
  std::cout << "nemesis: join n4\n";
  auto before = log.ok.load();
  auto out = cli("join n4 --timeout 60");
  if (!ok)
    return fail("cluster join n4: " + out);
  std::cout << out;
  if (!wait_for([&] { return metric(n4.port, "factum_cluster_shards_owned") > 0; },
                std::chrono::seconds(10)))
    fail("n4 joined and serves no shard");
  if (metric(n4.port, "factum_cluster_move_files_total{direction=\"received\"}") != 0)
    fail("n4 received entity files, with shared storage");
  std::cout << "nemesis: drain n1\n";
  out = cli("drain n1 --timeout 60");
  if (!ok)
    return fail("cluster drain n1: " + out);
  if (metric(nodes.front().port, "factum_cluster_shards_owned") != 0)
    fail("n1 was drained and still serves shards");
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("moves: the load stalled while shards moved");
}

/// Shared storage: every node's listing and alarm indexes hold the files of the shards it serves.
bool indexes_settled(const std::vector<node_proc>& nodes) {
  for (auto& n : nodes)
    if (metric(n.port, "factum_cluster_shards_unindexed") != 0)
      return false;
  return true;
}

/// The nemesis' planned moves: a fourth node joins (rendezvous hashing gives it about a quarter
/// of the used shards, which move to it under the load), then the first node is drained (every
/// shard it holds moves to the others). Each command waits for its moves; the load goes on.
void move_round(const std::string& factum, const std::string& etcd_url,
                std::vector<node_proc>& nodes, call_log& log,
                const std::function<std::string(node_proc&, const std::string&)>& start) {
  bool ok = false;
  auto cli = [&](const std::string& args) {
    return capture(factum + " cluster " + args + " --etcd " + etcd_url + " --name rounds 2>&1", ok);
  };
  auto out = cli("join n9");
  if (ok)
    fail("cluster join of a node that is not live succeeded: " + out);
  auto& n4 = nodes.emplace_back(); // reserved: the load's threads hold no reference into it
  n4.id = "n4";
  n4.port = free_ports(1).front();
  n4.dir = nodes.front().dir.parent_path() / n4.id;
  n4.secret = false;
  std::filesystem::create_directories(n4.dir);
  if (auto e = start(n4, "0"); !e.empty())
    return fail("n4 did not start: " + e);
  std::cout << "nemesis: join n4 (with a wrong secret: its moves fail)\n";
  out = cli("join n4 --timeout 60");
  if (ok || out.find("CLUSTER_SECRET_INVALID") == std::string::npos)
    fail("cluster join of a node with another secret did not fail its moves: " + out);
  auto before = log.ok.load();
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("moves: the load stalled after moves failed");
  if (auto e = n4.proc->stop(); !e.empty())
    fail("n4: " + e);
  n4.secret = true;
  if (auto e = start(n4, "1"); !e.empty())
    return fail("n4 did not restart: " + e);
  std::cout << "nemesis: join n4\n";
  before = log.ok.load();
  out = cli("join n4 --timeout 60");
  if (!ok)
    return fail("cluster join n4: " + out);
  std::cout << out;
  if (metric(n4.port, "factum_cluster_move_files_total{direction=\"received\"}") <= 0)
    fail("n4 joined and received no entity file");
  drain_round(factum, etcd_url, nodes, start);
  if (metric(nodes.front().port, "factum_cluster_shards_owned") != 0)
    fail("n1 was drained and still serves shards");
  if (!wait_for([&] { return log.ok.load() > before + 50; }, std::chrono::seconds(15)))
    fail("moves: the load stalled while shards moved");
}

/// Storage "replicated": the nodes that keep a copy of each shard, as a node's GET /v1/cluster
/// (`view`) says: the R = 3 live nodes not draining that rendezvous hashing ranks first.
std::vector<std::vector<std::string>> shard_followers(const json& view) {
  std::vector<std::vector<std::string>> out(shards);
  std::vector<std::string> live;
  if (view.is_object())
    for (auto& n : view["nodes"])
      if (n["state"] == "live" && !n.value("draining", false))
        live.push_back(n["id"].get<std::string>());
  for (uint32_t k = 0; k < shards; ++k) {
    auto ranked = live;
    for (int i = 0; i < 3 && !ranked.empty(); ++i) {
      auto first = cluster::rendezvous_owner(k, ranked);
      out[k].push_back(first);
      ranked.erase(std::remove(ranked.begin(), ranked.end(), first), ranked.end());
    }
  }
  return out;
}

/// Storage "replicated": whether every shard is placed and served by an owner whose copy caught
/// up with its log (the first acquisition of a shard creates its stream: about half a second).
bool all_shards_ready(const std::vector<node_proc>& nodes) {
  std::vector<bool> ready(shards, false);
  for (auto& n : nodes) {
    auto j = cluster_view(n.port);
    if (!j.is_object() || !j.contains("replica"))
      return false;
    for (uint32_t k = 0; k < shards; ++k)
      if (j["shards"][k]["owner"] == n.id && j["replica"]["shards"][k]["ready"] == true)
        ready[k] = true;
  }
  return std::all_of(ready.begin(), ready.end(), [](bool b) { return b; });
}

/// Storage "replicated": whether every node's copy of each shard it does not serve applied the
/// shard's whole log (as its GET /v1/cluster says, against the log's last sequence).
bool replicas_converged(const std::vector<node_proc>& nodes, replication::log_connection& log) {
  auto followers = shard_followers(cluster_view(nodes.front().port));
  for (auto& n : nodes) {
    auto j = cluster_view(n.port);
    if (!j.is_object() || !j.contains("replica"))
      return false;
    for (uint32_t k = 0; k < shards; ++k) {
      auto& f = followers[k];
      if (j["shards"][k]["owner"] == n.id || j["shards"][k]["home"].is_null() ||
          std::find(f.begin(), f.end(), n.id) == f.end())
        continue; // the owner writes the log; an unused shard has none; n keeps no copy
      auto last = log.last_seq(k);
      if (!last && last.error().code() == errc::not_found)
        continue;
      if (!last || j["replica"]["shards"][k]["applied_seq"].get<uint64_t>() < *last)
        return false;
    }
  }
  return true;
}

/// Every node's files: each key's facts, and which node has each entity. Storage
/// "replicated": every node has a copy of each entity; each key is counted in the copy of the
/// shard's owner (`status`), and every other copy must hold the same chain (the same last fact
/// and head hash: one history, applied whole).
std::set<std::string> check_files(const std::vector<node_proc>& nodes, const std::string& factum,
                                  const call_log& log, const json& status,
                                  const std::vector<std::vector<std::string>>& followers) {
  struct copy_of {
    std::string node;
    int64_t last_seq;
    std::string head;
  };
  std::map<std::string, std::vector<copy_of>> copies;
  std::map<std::string, std::vector<std::string>> owner_chain; ///< entity -> hash of fact 1, 2, ...
  std::map<std::string, int> facts_per_key;
  std::map<std::string, std::string> entity_node;
  std::map<std::string, std::string> delivered_keys; ///< completed delivery key -> webhook id
  // Shared storage: one directory holds every entity file, and no node's own has any.
  std::vector<std::pair<std::string, std::filesystem::path>> dirs;
  for (auto& n : nodes)
    dirs.emplace_back(n.id, n.dir / "data");
  if (!shared_root.empty()) {
    for (auto& [id, data] : dirs)
      for (auto& f : std::filesystem::recursive_directory_iterator(data / "entities"))
        if (f.path().extension() == ".db")
          fail(id + "'s own data directory holds an entity file: " + f.path().string());
    dirs = {{"shared", shared_root}};
  }
  for (auto& [id, data] : dirs) {
    node_proc n;
    n.id = id;
    n.dir = data.parent_path();
    for (auto& f : std::filesystem::recursive_directory_iterator(data / "entities")) {
      if (f.path().extension() != ".db")
        continue;
      store_options so;
      so.read_only = true;
      auto st = entity_store::open_file(f.path(), so);
      if (!st) {
        fail("open " + f.path().string() + ": " + st.error().to_string());
        continue;
      }
      auto ek = (*st)->key().to_string();
      if (!nats_urls.empty()) {
        copies[ek].push_back({n.id, (*st)->last_seq(), (*st)->head_hash()});
        auto k = cluster::shard_of((*st)->key(), shards);
        if (!status.is_object() || status["shards"][k]["owner"] != n.id)
          continue; // a follower's copy: compared below
      }
      if ((*st)->key().type == "webhook") {
        auto keys = (*st)->list_keys(1'000'000);
        if (!keys)
          fail("keys of " + ek + ": " + keys.error().to_string());
        else
          for (auto& k : *keys)
            if (k.status == key_status::completed)
              delivered_keys[k.key] = (*st)->key().id;
      }
      if (auto [it, fresh] = entity_node.emplace(ek, n.id); !fresh && nats_urls.empty())
        fail(ek + " has files on two nodes: " + it->second + " and " + n.id);
      auto& chain = owner_chain[ek];
      auto err = for_each_fact(**st, [&](const fact& x) {
        chain.push_back(x.hash);
        if (!x.idempotency_key.empty() && x.type == "invocation")
          ++facts_per_key[x.idempotency_key];
      });
      if (!err.empty())
        fail("read " + ek + ": " + err);
    }
    child_process v;
    v.spawn({factum, "inspect", "verify", "--data", data.string()},
            n.dir / ("verify-" + n.id + ".log"));
    if (!wait_for([&] { return v.exited(); }, std::chrono::seconds(60)))
      fail("inspect verify on " + n.id + " did not end");
    if (v.exit_code() != 0)
      fail("inspect verify on " + n.id + ": " + v.log_tail());
  }
  for (auto& [ek, list] : copies) {
    auto owner = std::find_if(list.begin(), list.end(), [&](const copy_of& c) {
      auto key = entity_key::parse(ek);
      return key && status["shards"][cluster::shard_of(*key, shards)]["owner"] == c.node;
    });
    if (owner == list.end()) {
      fail(ek + " has no copy on its shard's owner");
      continue;
    }
    // A follower's copy is the owner's; a node that follows the shard no longer (drained) may
    // have stopped earlier, but on the same history: its last fact is the owner's fact there.
    auto key = entity_key::parse(ek);
    auto k = cluster::shard_of(*key, shards);
    auto& chain = owner_chain[ek];
    for (auto& c : list) {
      bool follower =
        std::find(followers[k].begin(), followers[k].end(), c.node) != followers[k].end();
      bool same = c.last_seq == owner->last_seq && c.head == owner->head;
      bool prefix = c.last_seq >= 0 && c.last_seq <= static_cast<int64_t>(chain.size()) &&
                    (c.last_seq == 0 || chain[static_cast<size_t>(c.last_seq - 1)] == c.head);
      if (follower ? !same : !prefix)
        fail(ek + ": " + c.node + "'s copy ends at fact " + std::to_string(c.last_seq) + " (" +
             c.head.substr(0, 12) + "), the owner " + owner->node + "'s at " +
             std::to_string(owner->last_seq) + " (" + owner->head.substr(0, 12) + ")" +
             (follower ? "" : ": not a prefix of its history"));
    }
  }
  for (auto& [key, e] : log.acked) {
    auto it = facts_per_key.find(key);
    int c = it == facts_per_key.end() ? 0 : it->second;
    if (c != 1)
      fail("acknowledged " + key + " (entity e" + std::to_string(e) + ") has " + std::to_string(c) +
           " facts");
  }
  for (auto& [key, c] : facts_per_key)
    if (c > 1)
      fail(key + " has " + std::to_string(c) + " facts");
  for (auto& [key, e] : log.delivered) {
    auto it = delivered_keys.find(key);
    if (it == delivered_keys.end() || it->second != "d" + std::to_string(e))
      fail("acknowledged delivery " + key + " (entity d" + std::to_string(e) +
           ") is not a completed key of its entity on disk");
  }
  std::set<std::string> entities;
  for (auto& [key, _] : entity_node)
    entities.insert(key);
  std::cout << "files: " << entity_node.size() << " entities, " << facts_per_key.size()
            << " keys on disk, " << delivered_keys.size() << " deliveries completed\n";
  return entities;
}

} // namespace

int main(int argc, char** argv) {
  driver_options o;
  o.entities = 300;
  std::string vendor_bin;
  size_t members = 1;
  std::string storage = "local";
  if (!parse_options("cluster rounds", argc, argv, o,
                     [&](const std::string& f, const std::function<std::string()>& next) {
                       if (f == "--vendor")
                         vendor_bin = next();
                       else if (f == "--etcd-members")
                         members = std::stoul(next());
                       else if (f == "--storage")
                         storage = next();
                       else if (f == "--image-bytes")
                         image_bytes = std::stoll(next());
                       else
                         return false;
                       return true;
                     }) ||
      vendor_bin.empty() || (members != 1 && members != 3) ||
      (storage != "local" && storage != "shared" && storage != "replicated")) {
    std::cerr << "usage: cluster_rounds --factum PATH --vendor PATH [--etcd-members 1|3] "
                 "[--storage local|shared|replicated] [--image-bytes N] [--rounds N] [--seed S] "
                 "[--entities N] [--keep]\n";
    return 2;
  }
  std::cout << "cluster rounds: seed " << o.seed << ", " << o.entities << " entities, storage "
            << storage << "\n";
  temp_dir tmp;
  if (storage == "shared") {
    shared_root = tmp.path() / "shared";
    std::filesystem::create_directories(shared_root);
  }
  std::unique_ptr<etcd_server> etcd_ptr;
  try {
    etcd_ptr = std::make_unique<etcd_server>(members);
  } catch (const std::exception& e) {
    std::cerr << "etcd: " << e.what() << '\n';
    return 1;
  }
  auto& etcd = *etcd_ptr;
  std::unique_ptr<nats_cluster> nats;
  if (storage == "replicated") {
    try {
      nats = std::make_unique<nats_cluster>(3);
    } catch (const std::exception& e) {
      std::cerr << "nats: " << e.what() << '\n';
      return 1;
    }
    nats_urls = nats->urls();
  }
  vendor_process vendor;
  std::filesystem::create_directories(tmp.path() / "vendor");
  if (auto e = vendor.start(vendor_bin, tmp.path() / "vendor"); !e.empty()) {
    std::cerr << e << '\n';
    return 1;
  }
  std::vector<node_proc> nodes(nodes_n);
  nodes.reserve(nodes_n + 1); // the move round adds a fourth
  auto start_node = [&](node_proc& n, const std::string& tag) {
    n.proc = std::make_unique<serve_process>(o.factum, n.dir);
    auto e = n.proc->start(node_config(n, etcd.urls(), vendor.port()), tag);
    if (!e.empty())
      return e;
    n.pid = n.proc->pid();
    return std::string();
  };
  for (int i = 0; i < nodes_n; ++i) {
    nodes[i].id = "n" + std::to_string(i + 1);
    nodes[i].port = free_ports(1).front(); // bound once and released: the node binds it
    nodes[i].dir = tmp.path() / nodes[i].id;
    std::filesystem::create_directories(nodes[i].dir);
    if (auto e = start_node(nodes[i], "0"); !e.empty()) {
      std::cerr << nodes[i].id << ": " << e << '\n';
      return 1;
    }
  }
  // Shards are placed at their first request among the nodes the placing node sees live: the
  // load starts once every node sees all three (else one may start with no shard at all).
  bool all_seen = wait_for(
    [&] {
      for (auto& n : nodes) {
        auto j = cluster_view(n.port);
        if (!j.is_object() || j["nodes"].size() != static_cast<size_t>(nodes_n))
          return false;
      }
      return true;
    },
    std::chrono::seconds(10));
  if (!all_seen) {
    std::cerr << "the nodes did not all see each other live within 10 s\n";
    return 1;
  }
  call_log log;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] { drive(t, o.seed, o.entities, nodes, stop, log); });
  auto run_for = [&](int ms) { // the load runs meanwhile; the nemesis waits its turn
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  run_for(2000);
  if (nats && !wait_for([&] { return all_shards_ready(nodes); }, std::chrono::seconds(60)))
    fail("the shards were not all placed and ready within 60 s");
  // Nemeses 1-3, --rounds times (the victims rotate); then the moves (or the quorum round).
  for (int r = 0; r < o.rounds; ++r) {
    int kv = (1 + r) % nodes_n, pv = (2 + r) % nodes_n;
    auto& k = nodes[kv];
    auto tag = "r" + std::to_string(r);
    // 1. kill -9 and restart.
    std::cout << "nemesis: kill -9 " << k.id << (nats ? " and delete its data directory" : "")
              << "\n";
    int probe = takes_over() ? entity_homed_on(nodes[pv].port, k.id, o.entities) : -1;
    k.proc->kill_now();
    auto killed = std::chrono::steady_clock::now();
    if (!takes_over())
      run_for(1500);
    else
      takeover_round(nodes, kv, probe, log, killed);
    if (nats) // a lost disk: it starts empty and rebuilds its copies from the logs
      std::filesystem::remove_all(k.dir / "data");
    if (auto e = start_node(k, tag); !e.empty())
      fail(k.id + " did not restart: " + e);
    if (takes_over()) { // its shards stay where they went, until it joins again
      bool ok = false;
      auto out = capture(o.factum + " cluster join " + k.id + " --etcd " + etcd.url() +
                           " --name rounds --timeout 60 2>&1",
                         ok);
      if (!ok || !wait_for([&] { return metric(k.port, "factum_cluster_shards_owned") > 0; },
                           std::chrono::seconds(10)))
        fail("cluster join " + k.id + " after its restart: " + out);
    }
    run_for(2000);
    // 2. pause past the lease.
    std::cout << "nemesis: SIGSTOP " << nodes[pv].id << " past its lease\n";
    pause_round(nodes, pv, "http://127.0.0.1:" + std::to_string(vendor.port()), log);
    run_for(2000);
    // 3. etcd restarts under the load: the nodes keep their leases (etcd keeps them across a
    // restart and renews their TTL) or take new ones, and serve on.
    std::cout << "nemesis: restart etcd\n";
    auto acked_before = log.ok.load();
    etcd.restart(0);
    run_for(2000);
    if (log.ok.load() == acked_before)
      fail("no call was acknowledged in the 2 s after etcd restarted");
    if (nats) {
      // 4. the NATS server leading a shard's log is killed under the load, then restarted: the
      // log elects another leader; commits in flight fail 503 and are retried.
      auto stream = "FACTUM_LOG_ROUNDS_" +
                    std::to_string(cluster::shard_of(entity_key{"acme", "ledger", "e0"}, shards));
      int leader = nats->stream_leader(stream);
      std::cout << "nemesis: kill -9 NATS server " << leader << " (leads " << stream << ")\n";
      if (leader < 0) {
        fail("no leader for " + stream);
      } else {
        nats->kill9(static_cast<size_t>(leader));
        acked_before = log.ok.load();
        auto t0 = std::chrono::steady_clock::now();
        // Calls of the shards it led fail (or wait) until their logs elect another leader, and
        // a node connected to it reconnects to another server: a few seconds.
        if (!wait_for([&] { return log.ok.load() > acked_before + 50; }, std::chrono::seconds(60)))
          fail("the load stalled for 60 s after a NATS server was killed");
        std::cout << "load: 50 calls acknowledged "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count()
                  << " ms after the NATS server was killed\n";
        nats->restart(static_cast<size_t>(leader));
      }
      run_for(1000);
    }
  }
  auto restart = [&](node_proc& n, const std::string& tag) { return start_node(n, tag); };
  if (members == 3)
    quorum_round(etcd, nodes, log);
  else if (!takes_over())
    move_round(o.factum, etcd.url(), nodes, log, restart);
  else
    shared_move_round(o.factum, etcd.url(), nodes, log, restart);
  stop.store(true);
  for (auto& t : clients)
    t.join();
  std::cout << "load: " << log.sent << " calls (" << log.delivered.size()
            << " webhook deliveries acknowledged), " << log.ok << " acknowledged, " << log.retried
            << " retries (" << log.in_flight << " of them while an earlier attempt still ran), "
            << log.unknown.size() << " unacknowledged\n";
  if (log.ok < 100)
    fail("fewer than 100 acknowledged appends: the cluster barely served");
  auto status = check_status(o.factum, etcd.url(), nodes);
  if (takes_over() && !wait_for([&] { return indexes_settled(nodes); }, std::chrono::seconds(20)))
    fail("a node's indexes do not hold the files of every shard it serves");
  if (nats) {
    replication::log_options lo;
    lo.servers = nats_urls;
    lo.stream_prefix = "FACTUM_LOG_ROUNDS";
    lo.subject_prefix = "factum.log.rounds";
    auto c = replication::log_connection::connect(lo);
    if (!c)
      fail("connect to the log: " + c.error().to_string());
    else if (!wait_for([&] { return replicas_converged(nodes, **c); }, std::chrono::seconds(30)))
      fail("the followers' copies did not apply their shards' whole logs");
  }
  auto listed = listed_entities(nodes.front().port);
  // Storage "replicated": which nodes keep a copy of each shard.
  std::vector<std::vector<std::string>> followers(shards);
  if (nats)
    followers = shard_followers(cluster_view(nodes.front().port));
  for (auto& n : nodes)
    if (auto e = n.proc->stop(); !e.empty())
      fail(n.id + ": " + e);
  { // at least once to the vendor: each acknowledged delivery made a fresh 2xx there
    http_client ctl(vendor.port(), std::chrono::seconds(10));
    auto keys = ctl.request("GET", "/_vendor/keys").json();
    size_t fresh = 0;
    if (keys.is_object())
      for (auto& [_, c] : keys["keys"].items())
        fresh += c.value("delivered", 0) > 0 ? 1 : 0;
    if (fresh < log.delivered.size())
      fail("the vendor answered " + std::to_string(fresh) + " deliveries fresh, fewer than the " +
           std::to_string(log.delivered.size()) + " acknowledged");
  }
  (void)vendor.stop();
  etcd.stop();
  auto on_disk = check_files(nodes, o.factum, log, status, followers);
  if (listed != on_disk)
    fail("GET /v1/entities listed " + std::to_string(listed.size()) + " entities, the nodes' " +
         "files hold " + std::to_string(on_disk.size()));
  if (!takes_over())
    check_homes(o.factum, nodes, status, members == 3 ? "" : "n1");
  if (o.keep)
    keep_files(tmp, "factum-cluster-rounds");
  if (failure_count() > 0) {
    std::cout << "cluster rounds: " << failure_count() << " failures (seed " << o.seed << ")\n";
    return 1;
  }
  std::cout << "cluster rounds: ok\n";
  return 0;
}
