// journal_rounds_driver.cpp: crash rounds for journaled handlers (docs/reliability.md, "Crash
// rounds for journaled handlers"). Starts one `factum-fake-vendor` for the whole run (healthy,
// answering each call after a seeded random 10..160 ms, so that kills land while steps wait on
// it) and, each round, the server with the `three_steps` type (reliability_journal_serve), whose
// keyed `run` appends a fact, awaits a tool, and so on three times. Client threads send calls
// with unique Idempotency-Keys over a few entities, first retrying every call not yet answered
// 2xx (same key, same body) and now and then sending an answered one again (its answer must be
// replayed, the same); the server is SIGKILLed at a seeded random moment. After the last round
// every call is retried until it is answered 2xx, every answered call is sent once more, the
// server is stopped, and journal_rounds_check.cpp checks the files on disk and the vendor's
// counters. Threads: the main thread drives the rounds; one client thread per connection.
//
// Usage: reliability_journal_rounds --factum PATH(reliability_journal_serve) --vendor PATH
//                                   [--rounds N] [--seed S] [--connections C] [--entities E]
//                                   [--keep]
#include <signal.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "crash_support.hpp"
#include "factum/storage/sha256.hpp"
#include "http/client.hpp"
#include "journal_rounds.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace factum::journal_rounds {

std::string entity_id(int e) {
  return "jr-e" + std::to_string(e);
}

entity_key entity_of(int e) {
  return {tenant, type, entity_id(e)};
}

std::string vendor_key(const call_record& c, int step) {
  return test::three_steps_vendor_key(entity_of(c.entity), c.key, step);
}

std::string answer_problem(const call_record& c, const json& a) {
  if (!a.is_object() || a.value("k", "") != c.key || !a.contains("now") || !a.contains("random") ||
      !a["steps"].is_array() || a["steps"].size() != 3)
    return "not an answer of three steps";
  for (int step = 1; step <= 3; ++step) {
    auto& s = a["steps"][static_cast<size_t>(step - 1)];
    if (!s.is_object() || s.value("idempotency_key", "") != vendor_key(c, step))
      return "step " + std::to_string(step) + " reached the vendor with another key than " +
             vendor_key(c, step);
    if (s.value("received", json()) != test::three_steps_payload(c.key, step))
      return "step " + std::to_string(step) + " sent another payload";
  }
  return {};
}

namespace {

using test::steady_ms;

// -- requests --

std::string run_path(const call_record& c) {
  return "/v1/entities/" + std::string(type) + "/" + entity_id(c.entity) + "/run";
}

test::header_list headers_of(const call_record& c) {
  return {{"X-API-Key", api_key}, {"Content-Type", "application/json"}, {"Idempotency-Key", c.key}};
}

std::string body_of(const call_record& c) {
  return json{{"k", c.key}}.dump();
}

enum class next_step { answered, retry_later, gone };

/// Applies one reply to its call (under the driver's mutex).
next_step apply_reply(call_record& c, const test::http_reply& r, figures& fig) {
  ++fig.requests;
  if (r.status == 0) {
    ++fig.unanswered;
    return next_step::gone;
  }
  if (r.status == 200) {
    auto j = r.json();
    bool replayed = r.header("idempotent-replayed") == "true";
    ++fig.acked;
    fig.replayed += replayed;
    if (auto p = answer_problem(c, j); !p.empty())
      fail("key " + c.key + ": " + p + ": " + r.body);
    if (c.acked && (j != c.answer || !replayed))
      fail("key " + c.key + " was answered " + c.answer.dump() + " and then " +
           (replayed ? "" : "(not replayed) ") + r.body);
    if (!c.acked) {
      c.acked = true;
      c.answer = j;
    }
    return next_step::answered;
  }
  auto j = r.json();
  auto category = j.is_object() ? j.value("category", "") : std::string();
  if ((r.status == 409 && r.code() == "IDEMPOTENCY_KEY_IN_USE") || category == "transient" ||
      category == "server" || category == "external") {
    ++fig.retryable;
    ++fig.codes[std::to_string(r.status) + " " + r.code()];
    return next_step::retry_later;
  }
  fail("key " + c.key + ": answered " + std::to_string(r.status) + " " + r.body);
  c.acked = true; // settled as a failure: not retried
  return next_step::answered;
}

// -- the server's configuration and the vendor --

json serve_config(const std::filesystem::path& dir, const std::string& durability,
                  uint16_t vendor_port) {
  // One attempt per run of a step, never a failure at a healthy vendor: every vendor call of a
  // step is one run of it (the journal counts the runs).
  json hook = {{"url", "http://127.0.0.1:" + std::to_string(vendor_port) + "/step"},
               {"connect_timeout_ms", 2000},
               {"request_timeout_ms", 10000},
               {"retry", {{"max_attempts", 1}}}};
  return {{"listen", "127.0.0.1:0"},
          {"data_dir", (dir / "data").string()},
          {"durability", durability},
          {"storage_threads", 4},
          {"call_timeout_ms", 20000},
          {"tenants",
           {{tenant,
             {{"api_keys",
               {{{"key", "sha256:" + sha256_hex(api_key)}, {"scopes", {"read", "write"}}}}}}}}},
          {"types", {type}},
          {"tools", {{test::three_steps_tool, hook}}}};
}

/// GET /_vendor/keys (the "keys" object), or null on failure.
json vendor_keys(uint16_t port) {
  test::http_client http(port, 10s);
  auto r = http.request("GET", "/_vendor/keys");
  auto j = r.json();
  if (r.status != 200 || !j.is_object() || !j["keys"].is_object()) {
    fail("vendor keys: " + std::to_string(r.status) + " " + r.error);
    return nullptr;
  }
  return j["keys"];
}

// -- the load of a round --

/// The clients of one round: each sends the first call due for a retry, else now and then an
/// answered call again, else a new call.
class load {
 public:
  load(call_list& calls, std::mutex& mu, figures& fig, const options& o, int round)
      : calls_(calls), mu_(mu), fig_(fig), o_(o), round_(round) {}

  /// Queues the calls not answered yet and starts the clients.
  void start(uint16_t port, std::mt19937_64& rng) {
    answered_before_ = calls_.size();
    for (size_t i = 0; i < calls_.size(); ++i)
      if (!calls_[i].acked)
        queue_.push_back(i);
    retries_ = queue_.size();
    for (int w = 0; w < o_.connections; ++w)
      threads_.emplace_back([this, w, port, seed = rng()] { client(w, port, seed); });
  }

  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      t.join();
    threads_.clear();
  }

  size_t retries() const { return retries_; }
  int64_t new_calls() const { return new_calls_; }

 private:
  /// The next call to send (under the mutex), or npos to wait a little.
  size_t next_call(int w, std::mt19937_64& wr, int& n) {
    auto now = steady_ms();
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (calls_[*it].not_before_ms <= now) {
        auto i = *it;
        queue_.erase(it);
        return i;
      }
    // One request in eight sends an answered call of an earlier round again.
    if (answered_before_ > 0 && wr() % 8 == 0) {
      auto i = static_cast<size_t>(wr() % answered_before_);
      if (calls_[i].acked) {
        ++fig_.replay_checks;
        return i;
      }
    }
    if (new_calls_ >= 400)
      return npos;
    call_record c;
    c.key = "r" + std::to_string(round_) + "-w" + std::to_string(w) + "-n" + std::to_string(n++);
    c.entity = static_cast<int>(wr() % static_cast<uint64_t>(o_.entities));
    calls_.push_back(std::move(c));
    ++fig_.calls;
    ++new_calls_;
    return calls_.size() - 1;
  }

  void client(int w, uint16_t port, uint64_t seed) {
    std::mt19937_64 wr(seed);
    test::http_client http(port, 30s);
    int n = 0;
    while (!stop_.load()) {
      size_t i = npos;
      std::string target, body;
      test::header_list headers;
      {
        std::lock_guard<std::mutex> g(mu_);
        i = next_call(w, wr, n);
        if (i != npos) {
          auto& c = calls_[i];
          c.sent = true;
          target = run_path(c);
          body = body_of(c);
          headers = headers_of(c);
        }
      }
      if (i == npos) {
        std::this_thread::sleep_for(10ms);
        continue;
      }
      auto r = http.request("POST", target, headers, body);
      std::lock_guard<std::mutex> g(mu_);
      auto& c = calls_[i];
      auto step = apply_reply(c, r, fig_);
      if (step == next_step::gone)
        return; // the server is gone; the call is retried in the next round
      if (step == next_step::retry_later) {
        c.not_before_ms = steady_ms() + 50 + static_cast<int64_t>(wr() % 100);
        queue_.push_back(i);
      }
    }
  }

  static constexpr size_t npos = static_cast<size_t>(-1);
  call_list& calls_;
  std::mutex& mu_;
  figures& fig_;
  const options& o_;
  int round_;
  size_t answered_before_ = 0; // calls of earlier rounds
  std::deque<size_t> queue_;   // guarded by mu_
  size_t retries_ = 0;
  int64_t new_calls_ = 0; // guarded by mu_
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// One round against a started server: the load, then the kill after `kill_after_ms`. Returns
/// how many vendor calls were in progress just before the kill.
int64_t run_round(test::serve_process& srv, uint16_t vendor_port, std::mutex& mu, call_list& calls,
                  int64_t kill_after_ms, std::mt19937_64& rng, load& l) {
  l.start(srv.port(), rng);
  std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_ms));
  auto keys = vendor_keys(vendor_port);
  srv.kill_now();
  {
    // Every call a request was sent for and not answered 2xx may have been cut by this kill.
    std::lock_guard<std::mutex> g(mu);
    for (auto& c : calls)
      c.kills_while_open += c.sent && !c.acked;
  }
  l.stop();
  int64_t in_flight = 0;
  if (keys.is_object())
    for (auto& [k, v] : keys.items())
      in_flight += v.value("in_flight", int64_t{0});
  return in_flight;
}

// -- the end --

/// Retries every call not answered 2xx until each is (bounded: 40 s), then sends every
/// answered call once more (its answer must be replayed).
void settle(uint16_t port, call_list& calls, std::mutex& mu, figures& fig) {
  test::http_client http(port, 30s);
  auto deadline = steady_ms() + 40'000;
  auto send = [&](call_record& c) {
    auto r = http.request("POST", run_path(c), headers_of(c), body_of(c));
    std::lock_guard<std::mutex> g(mu);
    return apply_reply(c, r, fig);
  };
  int64_t open = 0;
  do {
    open = 0;
    for (auto& c : calls) {
      if (c.acked)
        continue;
      if (send(c) == next_step::gone)
        return fail("the server stopped answering while the calls were settled");
      open += !c.acked;
    }
    if (open > 0)
      std::this_thread::sleep_for(100ms);
  } while (open > 0 && steady_ms() < deadline);
  if (open > 0)
    return fail(std::to_string(open) + " calls not answered 2xx within 40 s");
  for (auto& c : calls) {
    ++fig.replay_checks;
    if (send(c) == next_step::gone)
      return fail("the server stopped answering while the answers were sent again");
  }
}

void report(const figures& f, const options& o, double secs) {
  std::cout << "reliability_journal_rounds: " << (failure_count() ? "FAILED" : "ok") << ": seed "
            << o.seed << ", rounds " << o.rounds << ", kills " << f.kills << ", " << secs
            << " s\n  calls " << f.calls << " (unique keys), requests " << f.requests
            << ", unanswered at a kill " << f.unanswered << ", 2xx " << f.acked << " (replayed "
            << f.replayed << "; answered calls sent again " << f.replay_checks
            << "), retryable failures " << f.retryable << " (by status and code:";
  for (auto& [code, n] : f.codes)
    std::cout << ' ' << code << ' ' << n;
  std::cout << ")\n  at the kills: vendor calls in flight " << f.vendor_in_flight_at_kills
            << "\n  on disk: facts " << f.facts << ", journal steps " << f.steps
            << ", steps run again " << f.steps_rerun << " (reruns " << f.reruns << ", in "
            << f.keys_rerun << " keys, most runs of a step " << f.max_runs << ")"
            << "\n  vendor: calls " << f.vendor_calls << ", answered from its de-duplication "
            << f.vendor_replayed << "; runs the vendor never saw " << f.unreached << std::endl;
}

int usage() {
  std::cerr << "usage: reliability_journal_rounds --factum PATH --vendor PATH [--rounds N] "
               "[--seed S] [--connections C] [--entities E] [--keep]\n";
  return 2;
}

std::optional<options> parse(int argc, char** argv) {
  options o;
  auto own = [&o](const std::string& flag, const std::function<std::string()>& next) {
    if (flag != "--vendor")
      return false;
    o.vendor = next();
    return true;
  };
  if (!test::parse_options("reliability_journal_rounds", argc, argv, o, own) || o.vendor.empty())
    return std::nullopt;
  return o;
}

/// Starts the vendor: healthy, each answer after 10..160 ms (seeded).
bool start_vendor(test::vendor_process& vp, const options& o, const std::filesystem::path& dir,
                  std::mt19937_64& rng) {
  if (auto e = vp.start(o.vendor, dir); !e.empty()) {
    fail(e);
    return false;
  }
  test::http_client http(vp.port(), 10s);
  json mode = {{"mode", "ok"}, {"delay_ms", 10}, {"delay_jitter_ms", 150}, {"seed", rng() >> 1}};
  auto r =
    http.request("POST", "/_vendor/mode", {{"Content-Type", "application/json"}}, mode.dump());
  if (r.status != 200)
    fail("vendor mode: " + std::to_string(r.status) + " " + r.body);
  return r.status == 200;
}

/// The rounds, the settling and the checks; the exit code.
int run(const options& o) {
  std::cout << "reliability_journal_rounds: seed " << o.seed << ", " << o.rounds << " rounds, "
            << o.connections << " connections, " << o.entities << " entities" << std::endl;
  std::mt19937_64 rng(o.seed);
  test::temp_dir tmp;
  test::vendor_process vp;
  if (!start_vendor(vp, o, tmp.path(), rng))
    return 1;
  call_list calls;
  std::mutex mu;
  figures fig;
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 1; round <= o.rounds + 1 && failure_count() == 0; ++round) {
    // Alternate durability modes: both must survive a process crash.
    std::string durability = round % 2 ? "full" : "normal";
    test::serve_process srv(o.factum, tmp.path());
    if (auto e = srv.start(serve_config(tmp.path(), durability, vp.port()), std::to_string(round));
        !e.empty()) {
      fail(e);
      break;
    }
    if (round == o.rounds + 1) {
      settle(srv.port(), calls, mu, fig);
      if (auto e = srv.stop(); !e.empty())
        fail(e);
      break;
    }
    // One round in four kills almost at once: among the replays of the earlier rounds' calls.
    auto kill_after = rng() % 4 == 0 ? 20 + static_cast<int64_t>(rng() % 200)
                                     : 300 + static_cast<int64_t>(rng() % 1200);
    load l(calls, mu, fig, o, round);
    auto in_flight = run_round(srv, vp.port(), mu, calls, kill_after, rng, l);
    ++fig.kills;
    fig.vendor_in_flight_at_kills += in_flight;
    size_t open = 0;
    for (auto& c : calls)
      open += !c.acked;
    std::cout << "round " << round << " (" << durability << "): " << l.retries()
              << " earlier calls retried, " << l.new_calls() << " new calls; killed after "
              << kill_after << " ms with " << in_flight << " vendor calls in flight; " << open
              << " calls open" << std::endl;
  }
  json keys = vendor_keys(vp.port());
  if (auto e = vp.stop(); !e.empty())
    fail(e);
  for (auto& c : calls)
    if (!c.acked)
      fail("key " + c.key + " was never answered 2xx");
  if (failure_count() == 0) {
    std::map<std::string, int64_t> runs;
    check_on_disk(tmp.path() / "data", calls, o, fig, runs);
    check_vendor(keys, calls, runs, fig);
  }
  report(fig, o, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (o.keep)
    test::keep_files(tmp, "factum-journal-rounds-kept");
  return failure_count() ? 1 : 0;
}

} // namespace

} // namespace factum::journal_rounds

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  auto o = factum::journal_rounds::parse(argc, argv);
  if (!o)
    return factum::journal_rounds::usage();
  return factum::journal_rounds::run(*o);
}
