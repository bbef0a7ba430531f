// crash_driver.cpp: crash rounds over HTTP against the real `factum serve` binary.
// Each round starts the server on one data directory and runs a bounded load over several
// connections and ledger entities: first the retries of every earlier request that got no
// response (same Idempotency-Key, same body), then new requests with unique keys; it SIGKILLs
// the server at a seeded random moment (after a random number of acknowledged calls, while
// others are in flight; one round in four almost at once, among the retries).
// After the last round the server is started once more, every unanswered call is retried, the
// server is stopped with SIGTERM, and the files are opened read-only with the storage library:
// one fact per key, every acknowledged (seq, fact_id) present, every hash chain valid.
// Threads: the main thread drives rounds; one client thread per connection sends requests.
//
// Usage: reliability_crash --factum PATH [--rounds N] [--seed S] [--connections C]
//                          [--entities E] [--keep]
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "crash_support.hpp"
#include "factum/storage/sha256.hpp"
#include "http/client.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;
using factum::test::fail;
using factum::test::failure_count;
using nlohmann::json;

namespace {

// -- options and figures --

/// The flags are crash_support.hpp's; these are the defaults.
struct options : factum::test::driver_options {
  options() {
    rounds = 6;
    connections = 8;
    entities = 4;
  }
};

struct figures {
  int64_t sent = 0;
  int64_t acked = 0;
  int64_t unanswered = 0;
  int64_t retried = 0;
  int64_t retried_replayed = 0;
  int64_t retries_cut = 0; ///< retries that a kill cut off again
  int64_t kills = 0;
  int64_t facts = 0;
};

// -- one call: its key, entity and body; what the server acknowledged --

struct call_record {
  std::string key;
  int entity = 0;
  std::string body;
  bool acked = false;
  int64_t seq = 0;
  std::string fact_id;
};

std::string entity_id(int e) {
  return "crash-e" + std::to_string(e);
}

std::string target_of(const call_record& c) {
  return "/v1/entities/ledger/" + entity_id(c.entity) + "/append";
}

const char* api_key = "crash-key";

factum::test::header_list headers_of(const call_record& c) {
  return {{"X-API-Key", api_key}, {"Content-Type", "application/json"}, {"Idempotency-Key", c.key}};
}

/// Applies a 200 reply to the record; false (and a failure) when the body is not {seq, fact_id}.
bool take_ack(call_record& c, const factum::test::http_reply& r) {
  auto j = r.json();
  if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_integer() ||
      !j.contains("fact_id") || !j["fact_id"].is_string()) {
    fail("key " + c.key + ": 200 without seq/fact_id: " + r.body);
    return false;
  }
  c.acked = true;
  c.seq = j["seq"].get<int64_t>();
  c.fact_id = j["fact_id"].get<std::string>();
  return true;
}

// -- the server --

nlohmann::json serve_config(const std::filesystem::path& dir, const std::string& durability) {
  return {{"listen", "127.0.0.1:0"},
          {"data_dir", (dir / "data").string()},
          {"durability", durability},
          {"storage_threads", 4},
          {"tenants", {{"acme", {{"api_keys", {"sha256:" + factum::sha256_hex(api_key)}}}}}},
          {"types", {"ledger"}}};
}

// -- phases --

/// Retries every unanswered call with its key and body; each must now be answered 200.
void retry_unanswered(std::vector<call_record>& calls, uint16_t port, figures& fig) {
  factum::test::http_client client(port, 20s);
  for (auto& c : calls) {
    if (c.acked)
      continue;
    auto r = client.request("POST", target_of(c), headers_of(c), c.body);
    ++fig.retried;
    if (r.status != 200) {
      fail("retry of key " + c.key + " answered " + std::to_string(r.status) + " " + r.error + " " +
           r.body);
      continue;
    }
    fig.retried_replayed += r.header("idempotent-replayed") == "true";
    take_ack(c, r);
  }
}

/// Runs one round: first the retries of `pending` (calls of earlier rounds that got no response:
/// same key, same body), then new calls with unique keys, over `o.connections` connections;
/// SIGKILLs the server after `kill_after` acknowledgements, so a kill may also land among the
/// retries. Returns the new calls; `pending` is updated in place.
std::vector<call_record> load(factum::test::serve_process& srv, int round, const options& o,
                              std::mt19937_64& rng, int64_t kill_after,
                              std::vector<call_record>& pending, figures& fig) {
  const int64_t max_calls = 100000;
  std::mutex mu;
  std::vector<call_record> calls;
  std::atomic<int64_t> acks{0};
  std::atomic<int64_t> issued{0};
  std::atomic<size_t> next_pending{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  std::vector<uint64_t> seeds;
  for (int w = 0; w < o.connections; ++w)
    seeds.push_back(rng());
  for (int w = 0; w < o.connections; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 wr(seeds[w]);
      factum::test::http_client client(srv.port(), 10s);
      for (int n = 0; !stop.load();) {
        size_t pi = next_pending.fetch_add(1);
        bool retry = pi < pending.size();
        call_record c;
        if (retry) {
          std::lock_guard<std::mutex> g(mu);
          c = pending[pi];
        } else {
          if (issued.fetch_add(1) >= max_calls)
            break;
          c.key =
            "r" + std::to_string(round) + "-w" + std::to_string(w) + "-n" + std::to_string(n++);
          c.entity = static_cast<int>(wr() % static_cast<uint64_t>(o.entities));
          c.body =
            json{{"type", "invocation"},
                 {"subtype", "crash"},
                 {"data", {{"k", c.key}, {"round", round}, {"pad", std::string(wr() % 200, 'p')}}}}
              .dump();
        }
        auto r = client.request("POST", target_of(c), headers_of(c), c.body);
        if (r.status == 200) {
          take_ack(c, r);
          acks.fetch_add(1);
        } else if (r.status != 0) {
          fail("key " + c.key + " answered " + std::to_string(r.status) + ": " + r.body);
        }
        bool dead = r.status == 0;
        {
          std::lock_guard<std::mutex> g(mu);
          if (retry) {
            ++fig.retried;
            fig.retried_replayed += r.status == 200 && r.header("idempotent-replayed") == "true";
            fig.retries_cut += dead;
            pending[pi] = std::move(c);
          } else {
            calls.push_back(std::move(c));
          }
        }
        if (dead)
          break; // the server is gone; this connection's call stays unanswered
      }
    });
  }
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (acks.load() < kill_after && std::chrono::steady_clock::now() < deadline &&
         issued.load() < max_calls)
    std::this_thread::sleep_for(200us);
  srv.kill_now();
  ++fig.kills;
  stop.store(true);
  for (auto& t : workers)
    t.join();
  for (auto& c : calls) {
    ++fig.sent;
    fig.acked += c.acked;
    fig.unanswered += !c.acked;
  }
  return calls;
}

// -- the check on disk --

void check_on_disk(const std::filesystem::path& data, const std::vector<call_record>& calls,
                   const options& o, figures& fig) {
  std::map<std::string, const call_record*> by_key;
  for (auto& c : calls)
    by_key[c.key] = &c;
  std::map<std::string, int> seen;
  for (int e = 0; e < o.entities; ++e) {
    // Not immutable: an entity the last run did not open keeps its -wal.
    auto s = factum::test::open_read_only(data, {"acme", "ledger", entity_id(e)});
    if (!s) {
      fail("cannot open " + entity_id(e) + ": " + s.error().to_string());
      continue;
    }
    auto v = (*s)->verify();
    if (!v || !v->ok)
      fail("hash chain of " + entity_id(e) + " does not verify" +
           (v ? " (first bad seq " + std::to_string(v->first_bad_seq) + ")" : ""));
    auto err = factum::test::for_each_fact(**s, [&](const factum::fact& fact) {
      if (fact.type != "invocation") {
        fail(entity_id(e) + " has an unexpected " + fact.type + " fact at seq " +
             std::to_string(fact.seq) + ": " + fact.data);
        return;
      }
      ++fig.facts;
      auto it = by_key.find(fact.idempotency_key);
      if (it == by_key.end()) {
        fail(entity_id(e) + " seq " + std::to_string(fact.seq) + " has an unknown key '" +
             fact.idempotency_key + "'");
        return;
      }
      auto& c = *it->second;
      if (++seen[c.key] > 1)
        fail("key " + c.key + " has more than one fact");
      if (c.entity != e)
        fail("key " + c.key + " landed on the wrong entity");
      auto d = json::parse(fact.data, nullptr, false);
      if (!d.is_object() || d.value("k", "") != c.key)
        fail("key " + c.key + ": fact data does not match its request");
      if (c.acked && (c.seq != fact.seq || c.fact_id != fact.fact_id))
        fail("key " + c.key + " was acknowledged as seq " + std::to_string(c.seq) + " " +
             c.fact_id + " but is seq " + std::to_string(fact.seq) + " " + fact.fact_id);
    });
    if (!err.empty())
      fail("query " + entity_id(e) + ": " + err);
  }
  for (auto& c : calls)
    if (!seen.count(c.key))
      fail("key " + c.key + (c.acked ? " (acknowledged)" : "") + " has no fact");
}

int usage() {
  std::cerr << "usage: reliability_crash --factum PATH [--rounds N] [--seed S] "
               "[--connections C] [--entities E] [--keep]\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  options o;
  if (!factum::test::parse_options("reliability_crash", argc, argv, o))
    return usage();
  std::cout << "reliability_crash: seed " << o.seed << ", " << o.rounds << " rounds, "
            << o.connections << " connections, " << o.entities << " entities" << std::endl;
  std::mt19937_64 rng(o.seed);
  factum::test::temp_dir tmp;
  figures fig;
  std::vector<call_record> all;
  std::vector<call_record> pending; // no response yet: retried in the next round
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 1; round <= o.rounds + 1 && failure_count() == 0; ++round) {
    bool last = round == o.rounds + 1;
    // Alternate durability modes: both must survive a process crash.
    std::string durability = round % 2 ? "full" : "normal";
    factum::test::serve_process srv(o.factum, tmp.path());
    if (auto e = srv.start(serve_config(tmp.path(), durability), std::to_string(round));
        !e.empty()) {
      fail(e);
      break;
    }
    if (last) {
      retry_unanswered(pending, srv.port(), fig);
      if (auto e = srv.stop(); !e.empty())
        fail(e);
      break;
    }
    // Mostly a kill after some hundred acknowledgements; one round in four kills almost at once,
    // while the previous round's calls are being retried.
    auto kill_after = static_cast<int64_t>(rng() % 4 == 0 ? 1 + rng() % 8 : 20 + rng() % 400);
    size_t retrying = pending.size();
    auto calls = load(srv, round, o, rng, kill_after, pending, fig);
    std::vector<call_record> next;
    size_t acked = 0, retried_ok = 0;
    for (auto& c : pending) {
      retried_ok += c.acked;
      (c.acked ? all : next).push_back(std::move(c));
    }
    for (auto& c : calls) {
      acked += c.acked;
      (c.acked ? all : next).push_back(std::move(c));
    }
    pending = std::move(next);
    std::cout << "round " << round << " (" << durability << "): " << retried_ok << "/" << retrying
              << " earlier calls answered on retry, killed after " << acked
              << " new acknowledged calls, " << pending.size() << " without a response"
              << std::endl;
  }
  for (auto& c : pending)
    all.push_back(std::move(c));
  for (auto& c : all)
    if (!c.acked)
      fail("key " + c.key + " never got a response");
  if (failure_count() == 0)
    check_on_disk(tmp.path() / "data", all, o, fig);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "reliability_crash: " << (failure_count() ? "FAILED" : "ok") << ": seed " << o.seed
            << ", rounds " << o.rounds << ", kills " << fig.kills << ", calls " << fig.sent
            << ", acknowledged at once " << fig.acked << ", unanswered at the kill "
            << fig.unanswered << ", retries " << fig.retried << " (replayed "
            << fig.retried_replayed << ", cut by a kill " << fig.retries_cut << "), facts on disk "
            << fig.facts << ", " << secs << " s" << std::endl;
  if (o.keep)
    factum::test::keep_files(tmp, "factum-crash-kept");
  return failure_count() ? 1 : 0;
}
