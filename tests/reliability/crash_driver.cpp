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
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/sha256.hpp"
#include "http/client.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// -- options and figures --

struct options {
  std::string factum;
  int rounds = 6;
  uint64_t seed = 0;
  int connections = 8;
  int entities = 4;
  bool keep = false;
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

int failures = 0;

void fail(const std::string& what) {
  ++failures;
  std::cerr << "reliability_crash: FAIL: " << what << '\n';
}

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

// -- the server process --

class server {
 public:
  server(const options& o, const std::filesystem::path& dir) : opt_(o), dir_(dir) {}
  ~server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }

  /// Starts `factum serve` and waits (bounded) for the start line with the port.
  bool start(int round, const std::string& durability) {
    auto cfg = dir_ / "serve.json";
    {
      json c = {{"listen", "127.0.0.1:0"},
                {"data_dir", (dir_ / "data").string()},
                {"durability", durability},
                {"storage_threads", 4},
                {"tenants", {{"acme", {{"api_keys", {"sha256:" + factum::sha256_hex(api_key)}}}}}},
                {"types", {"ledger"}}};
      std::ofstream(cfg) << c.dump(2);
    }
    log_ = dir_ / ("serve-" + std::to_string(round) + ".log");
    pid_t pid = ::fork();
    if (pid < 0)
      return false;
    if (pid == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 2);
        ::close(fd);
      }
      int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0)
        ::dup2(null, 1);
      ::execl(opt_.factum.c_str(), opt_.factum.c_str(), "serve", "--config", cfg.c_str(),
              static_cast<char*>(nullptr));
      _exit(127);
    }
    pid_ = pid;
    auto deadline = std::chrono::steady_clock::now() + 15s;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(log_);
      std::string line;
      while (std::getline(in, line)) {
        auto p = line.find("\"port\":");
        if (p != std::string::npos) {
          port_ = static_cast<uint16_t>(std::stoi(line.substr(p + 7)));
          return true;
        }
      }
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        fail("server exited at start; log: " + slurp());
        return false;
      }
      std::this_thread::sleep_for(10ms);
    }
    fail("no start line within 15 s; log: " + slurp());
    return false;
  }

  void kill_now() {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  /// SIGTERM and wait for exit code 0 (bounded: SIGKILL after 30 s).
  bool stop() {
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + 30s;
    int st = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          fail("server did not exit 0 after SIGTERM; log: " + slurp());
          return false;
        }
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    fail("server did not stop within 30 s after SIGTERM");
    kill_now();
    return false;
  }

  uint16_t port() const { return port_; }

  std::string slurp() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    auto s = ss.str();
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

 private:
  const options& opt_;
  std::filesystem::path dir_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

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
std::vector<call_record> load(server& srv, int round, const options& o, std::mt19937_64& rng,
                              int64_t kill_after, std::vector<call_record>& pending, figures& fig) {
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
    factum::store_options so;
    so.data_dir = data;
    so.read_only = true; // not immutable: an entity the last run did not open keeps its -wal
    factum::entity_key key{"acme", "ledger", entity_id(e)};
    auto s = factum::entity_store::open(so, key);
    if (!s) {
      fail("cannot open " + entity_id(e) + ": " + s.error().to_string());
      continue;
    }
    auto v = (*s)->verify();
    if (!v || !v->ok)
      fail("hash chain of " + entity_id(e) + " does not verify" +
           (v ? " (first bad seq " + std::to_string(v->first_bad_seq) + ")" : ""));
    int64_t after = 0;
    for (;;) {
      factum::fact_filter f;
      f.after_seq = after;
      f.limit = 10000;
      auto facts = (*s)->query(f);
      if (!facts) {
        fail("query " + entity_id(e) + ": " + facts.error().to_string());
        break;
      }
      if (facts->empty())
        break;
      for (auto& fact : *facts) {
        after = fact.seq;
        if (fact.type != "invocation") {
          fail(entity_id(e) + " has an unexpected " + fact.type + " fact at seq " +
               std::to_string(fact.seq) + ": " + fact.data);
          continue;
        }
        ++fig.facts;
        auto it = by_key.find(fact.idempotency_key);
        if (it == by_key.end()) {
          fail(entity_id(e) + " seq " + std::to_string(fact.seq) + " has an unknown key '" +
               fact.idempotency_key + "'");
          continue;
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
      }
    }
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
  o.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : std::string(); };
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
    else
      return usage();
  }
  if (o.factum.empty() || o.rounds < 1 || o.connections < 1 || o.entities < 1)
    return usage();
  std::cout << "reliability_crash: seed " << o.seed << ", " << o.rounds << " rounds, "
            << o.connections << " connections, " << o.entities << " entities" << std::endl;
  std::mt19937_64 rng(o.seed);
  factum::test::temp_dir tmp;
  figures fig;
  std::vector<call_record> all;
  std::vector<call_record> pending; // no response yet: retried in the next round
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 1; round <= o.rounds + 1 && failures == 0; ++round) {
    bool last = round == o.rounds + 1;
    // Alternate durability modes: both must survive a process crash.
    std::string durability = round % 2 ? "full" : "normal";
    server srv(o, tmp.path());
    if (!srv.start(round, durability))
      break;
    if (last) {
      retry_unanswered(pending, srv.port(), fig);
      srv.stop();
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
  if (failures == 0)
    check_on_disk(tmp.path() / "data", all, o, fig);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "reliability_crash: " << (failures ? "FAILED" : "ok") << ": seed " << o.seed
            << ", rounds " << o.rounds << ", kills " << fig.kills << ", calls " << fig.sent
            << ", acknowledged at once " << fig.acked << ", unanswered at the kill "
            << fig.unanswered << ", retries " << fig.retried << " (replayed "
            << fig.retried_replayed << ", cut by a kill " << fig.retries_cut << "), facts on disk "
            << fig.facts << ", " << secs << " s" << std::endl;
  if (o.keep) {
    auto keep = std::filesystem::temp_directory_path() / "factum-crash-kept";
    std::error_code ec;
    std::filesystem::remove_all(keep, ec);
    std::filesystem::rename(tmp.path(), keep, ec);
    std::filesystem::create_directories(tmp.path(), ec);
    std::cout << "data kept in " << keep << std::endl;
  }
  return failures ? 1 : 0;
}
