// crash_await_driver.cpp: crash rounds for handlers that await (docs/reliability.md, "Crash
// rounds", "Handlers that await"). Starts one `factum-fake-vendor` for the whole run (slow, and
// flaky: some 503s, some calls it never answers) and, each round, the real `factum serve`
// hosting the built-in `webhook` type with one tool pointing at that vendor (short retries, a
// breaker, a retry budget, short automatic dead-letter retries). Each round first retries every
// earlier call that is not settled (same key, same body), then sends `webhook.deliver` calls
// with unique Idempotency-Keys over several entities, and SIGKILLs the server at a seeded random
// moment: while calls wait on the vendor, sometimes within a vendor outage, sometimes just after
// an operator retried dead letters (so that their retries are running). After the last round
// the vendor is healthy: every call is retried until it is settled and every dead letter is
// retried by the operator until it is resolved (bounded), the server is stopped, and
// crash_await_check.cpp checks the files on disk and the vendor's counters.
// Threads: the main thread drives the rounds and the vendor's mode; one client thread per
// connection sends calls; in some rounds an operator thread retries dead letters.
//
// Usage: reliability_crash_await --factum PATH --vendor PATH [--rounds N] [--seed S]
//                                [--connections C] [--entities E] [--trial-timeout-ms MS]
//                                [--lenient] [--keep]
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "crash_await.hpp"
#include "crash_support.hpp"
#include "factum/storage/sha256.hpp"
#include "http/client.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace factum::crash_await {

namespace {

using test::print_mu;
using test::steady_ms;

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace

std::string entity_id(int e) {
  return "ca-e" + std::to_string(e);
}

std::string vendor_key_of(int entity, const std::string& key, const json& payload) {
  auto ek = std::string(tenant) + "/webhook/" + entity_id(entity);
  return "fk_" +
         sha256_hex(ek + "\n" + key + "\n" + tool + "\n" + "deliver" + "\n" + payload.dump())
           .substr(0, 40);
}

namespace {

// -- requests --

std::string entity_path(int e) {
  return "/v1/entities/webhook/" + entity_id(e);
}

test::header_list operator_headers() {
  return {{"X-API-Key", api_key}};
}

/// The next request of a call: its headers with a trace id of its own (recorded in the call),
/// so that the facts of each run name the request that ran it.
test::header_list next_request(call_record& c) {
  auto trace = "t-" + c.key + "-" + std::to_string(c.traces.size());
  c.traces.push_back(trace);
  return {{"X-API-Key", api_key},
          {"Content-Type", "application/json"},
          {"Idempotency-Key", c.key},
          {"X-Trace-Id", trace}};
}

enum class next_step { settled, retry_later, gone };

std::string dead_letter_of(const json& problem) {
  if (problem.is_object() && problem.contains("dead_letter_id") &&
      problem["dead_letter_id"].is_string())
    return problem["dead_letter_id"].get<std::string>();
  return {};
}

/// Applies one reply to its call (under the driver's mutex): settles it, or says to retry.
next_step apply_reply(call_record& c, const test::http_reply& r, figures& fig) {
  ++fig.requests;
  if (r.status == 0) {
    ++fig.unanswered;
    return next_step::gone;
  }
  if (r.status == 200) {
    auto j = r.json();
    if (!j.is_object() || j.value("delivered", false) != true)
      fail("key " + c.key + ": 200 without delivered: " + r.body);
    if (c.state == call_state::acked && json::parse(c.answer, nullptr, false) != j)
      fail("key " + c.key + " was answered " + c.answer + " and then " + r.body);
    c.state = call_state::acked;
    c.answer = r.body;
    ++fig.acked;
    fig.replayed += r.header("idempotent-replayed") == "true";
    return next_step::settled;
  }
  auto j = r.json();
  auto code = r.code();
  auto category = j.is_object() ? j.value("category", "") : std::string();
  if (auto dl = dead_letter_of(j); !dl.empty()) {
    if (r.status != 409 && !c.dead_letter.empty())
      fail("key " + c.key + " ran again while dead letter " + c.dead_letter +
           " owned it: answered " + std::to_string(r.status) + " " + r.body);
    else if (!c.dead_letter.empty() && dl != c.dead_letter)
      fail("key " + c.key + " is owned by dead letter " + dl + " after " + c.dead_letter);
    (r.status == 409 ? fig.refused_by_dead_letter : fig.dead_letter_replies) += 1;
    c.dead_letter = dl;
    c.state = call_state::dead_lettered;
    return next_step::settled;
  }
  if (r.status == 409 && code == "IDEMPOTENCY_KEY_IN_USE") {
    ++fig.in_flight_409;
    fig.in_flight_409_dead_lettered += !c.dead_letter.empty();
    return next_step::retry_later;
  }
  if (category == "transient" || category == "server" || category == "external") {
    ++fig.retryable;
    ++fig.codes[code];
    return next_step::retry_later;
  }
  if (r.status == 400 || r.status == 422 || r.status == 404) {
    fail("key " + c.key + ": answered " + std::to_string(r.status) + " " + r.body);
    return next_step::settled;
  }
  c.state = call_state::terminal; // a stored terminal failure: a retry replays it
  c.answer = r.body;
  ++fig.terminal;
  return next_step::settled;
}

// -- the server's configuration and the vendor's modes --

json serve_config(const std::filesystem::path& dir, const std::string& durability,
                  uint16_t vendor_port, const options& o) {
  json dl_rule = {{"auto_retry_after_ms", 250}, {"max_auto_retries", 2}};
  json hook = {{"url", "http://127.0.0.1:" + std::to_string(vendor_port) + "/hook"},
               {"connect_timeout_ms", 1000},
               {"request_timeout_ms", 500},
               {"retry", {{"base_delay_ms", 40}, {"max_delay_ms", 200}, {"max_attempts", 2}}},
               // A trial admitted before a kill is stored "in flight"; the next activation
               // must not wait trial_timeout_ms for it (docs/reliability.md).
               {"breaker",
                {{"count_window", {{"size", 10}, {"failure_threshold", 6}}},
                 {"cooldown_ms", 500},
                 {"trial_timeout_ms", o.trial_timeout_ms}}},
               {"budget", {{"ratio", 0.5}, {"min_per_window", 20}}},
               {"price", "0.001"}};
  return {{"listen", "127.0.0.1:0"},
          {"data_dir", (dir / "data").string()},
          {"durability", durability},
          {"storage_threads", 4},
          {"spare_files", 8},
          {"alarm_poll_ms", 100},
          {"call_timeout_ms", 15000},
          // The operator's retries of dead letters need the `operate` scope.
          {"tenants",
           {{tenant,
             {{"api_keys",
               {{{"key", "sha256:" + sha256_hex(api_key)},
                 {"scopes", {"read", "write", "operate"}}}}}}}}},
          {"types", {"webhook"}},
          {"dead_letter_rules", {{"server_error", dl_rule}, {"timeout", dl_rule}}},
          {"tools", {{tool, hook}}}};
}

/// The vendor's control API from the main thread.
class vendor_control {
 public:
  explicit vendor_control(uint16_t port) : client_(port, 10s) {}

  void mode(const json& m) {
    auto r =
      client_.request("POST", "/_vendor/mode", {{"Content-Type", "application/json"}}, m.dump());
    if (r.status != 200)
      fail("vendor mode " + m.dump() + ": " + std::to_string(r.status) + " " + r.body);
  }
  /// GET /_vendor/keys (the "keys" object), or null on failure.
  json keys() {
    auto r = client_.request("GET", "/_vendor/keys");
    auto j = r.json();
    if (r.status != 200 || !j.is_object() || !j["keys"].is_object()) {
      fail("vendor keys: " + std::to_string(r.status) + " " + r.error);
      return nullptr;
    }
    return j["keys"];
  }

 private:
  test::http_client client_;
};

const json slow_and_flaky = {{"mode", "flaky"}, {"fail_ratio", 0.2},      {"timeout_ratio", 0.06},
                             {"delay_ms", 30},  {"delay_jitter_ms", 220}, {"hold_ms", 600}};
const json outage = {{"fail_ratio", 0.8}, {"timeout_ratio", 0.15}};
const json outage_over = {{"fail_ratio", 0.2}, {"timeout_ratio", 0.06}};
const json healthy = {{"mode", "ok"}, {"delay_ms", 0}, {"delay_jitter_ms", 20}};

// -- one round --

/// What a round does, drawn from the seed.
struct round_plan {
  int64_t kill_after_ms = 0; ///< after the load started
  int64_t outage_at_ms = 0;  ///< a vendor outage starts then ...
  int64_t outage_ms = 0;     ///< ... and lasts this long (0: none)
  bool operator_retries = false;
  int64_t kill_after_operator_ms = 0; ///< after the first operator retry was answered
};

round_plan plan_round(std::mt19937_64& rng) {
  round_plan p;
  // One round in four kills almost at once: among the retries of the earlier rounds and the
  // dead-letter retries due at the restart.
  bool quick = rng() % 4 == 0;
  p.kill_after_ms =
    quick ? 50 + static_cast<int64_t>(rng() % 300) : 600 + static_cast<int64_t>(rng() % 2000);
  if (!quick && rng() % 3 != 0) {
    p.outage_at_ms = 100 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.kill_after_ms));
    p.outage_ms = 400 + static_cast<int64_t>(rng() % 800);
  }
  p.operator_retries = rng() % 2 == 0;
  p.kill_after_operator_ms = 20 + static_cast<int64_t>(rng() % 200);
  return p;
}

/// The clients of one round: each takes the first call due for a retry, else a new call.
class load {
 public:
  load(call_list& calls, std::mutex& mu, figures& fig, const options& o, int round)
      : calls_(calls), mu_(mu), fig_(fig), o_(o), round_(round) {}

  /// Queues the unsettled calls (open ones first, then dead-lettered ones once, to see that
  /// their dead letter still owns the key) and starts the clients.
  void start(uint16_t port, std::mt19937_64& rng) {
    for (size_t i = 0; i < calls_.size(); ++i)
      if (calls_[i].state == call_state::open)
        queue_.push_back(i);
    for (size_t i = 0; i < calls_.size(); ++i)
      if (calls_[i].state == call_state::dead_lettered)
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
  /// The next call to send (under the mutex): a queued one that is due, else a new one while
  /// few calls wait for a retry (fast failures, e.g. of an open breaker, would otherwise make
  /// thousands of calls); none (npos) when the client should wait a little.
  size_t next_call(int w, std::mt19937_64& wr, int& n) {
    auto now = steady_ms();
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (calls_[*it].not_before_ms <= now) {
        auto i = *it;
        queue_.erase(it);
        return i;
      }
    if (queue_.size() >= static_cast<size_t>(3 * o_.connections) || new_calls_ >= 5000)
      return npos;
    call_record c;
    c.key = "r" + std::to_string(round_) + "-w" + std::to_string(w) + "-n" + std::to_string(n++);
    c.entity = static_cast<int>(wr() % static_cast<uint64_t>(o_.entities));
    json payload = {{"k", c.key}, {"pad", std::string(wr() % 100, 'p')}};
    c.body = json{{"tool", tool}, {"payload", payload}}.dump();
    c.vendor_key = vendor_key_of(c.entity, c.key, payload);
    calls_.push_back(std::move(c));
    ++fig_.calls;
    ++new_calls_;
    return calls_.size() - 1;
  }

  void client(int w, uint16_t port, uint64_t seed) {
    std::mt19937_64 wr(seed);
    test::http_client http(port, 20s);
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
          target = entity_path(c.entity) + "/deliver";
          body = c.body;
          headers = next_request(c);
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
        c.not_before_ms = steady_ms() + 100 + static_cast<int64_t>(wr() % 200);
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
  std::deque<size_t> queue_; // guarded by mu_
  size_t retries_ = 0;
  int64_t new_calls_ = 0; // guarded by mu_
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// Lists `status` dead letters of every entity and retries those `retry_if` picks; returns how
/// many it found that are not final, or -1 when the server is gone. Counts the retries
/// answered 200 (an operator's retry races automatic ones: 409 when it moved meanwhile).
int sweep_dead_letters(test::http_client& http, const options& o, const std::string& status,
                       const std::function<bool(const json&)>& retry_if,
                       const std::function<void()>& retried) {
  int open = 0;
  for (int e = 0; e < o.entities; ++e) {
    auto r = http.request("GET",
                          entity_path(e) + "/dead-letters" +
                            (status.empty() ? std::string() : "?status=" + status),
                          operator_headers());
    if (r.status == 0)
      return -1;
    if (r.status == 404 && r.code() == "ENTITY_NOT_FOUND")
      continue; // no call reached it yet
    auto list = r.json();
    if (r.status != 200 || !list.is_array()) {
      fail("dead letters of " + entity_id(e) + ": " + std::to_string(r.status) + " " + r.body);
      continue;
    }
    for (auto& d : list) {
      auto st = d.value("status", "");
      if (st == "resolved")
        continue;
      if (st == "discarded")
        fail("dead letter " + d.value("id", "") + " was discarded");
      ++open;
      if (!retry_if(d))
        continue;
      auto id = d.value("id", "");
      auto rr =
        http.request("POST", entity_path(e) + "/dead-letters/" + id + "/retry", operator_headers());
      if (rr.status == 0)
        return -1;
      if (rr.status == 200)
        retried();
      else if (rr.code() != "INVALID_DEAD_LETTER_TRANSITION")
        fail("operator retry of " + id + ": " + std::to_string(rr.status) + " " + rr.body);
    }
  }
  return open;
}

/// The operator of a round: retries every pending dead letter (their automatic retries ran
/// out) every 100 ms; notes when the first retry was answered.
void operator_loop(uint16_t port, const options& o, std::atomic<bool>& stop,
                   std::atomic<int64_t>& first_retry_ms, std::mutex& mu, figures& fig) {
  test::http_client http(port, 10s);
  while (!stop.load()) {
    int r = sweep_dead_letters(
      http, o, "pending", [](const json&) { return true; },
      [&] {
        std::lock_guard<std::mutex> g(mu);
        ++fig.operator_retries;
        int64_t zero = 0;
        first_retry_ms.compare_exchange_strong(zero, steady_ms());
      });
    if (r < 0)
      return;
    for (int i = 0; i < 10 && !stop.load(); ++i)
      std::this_thread::sleep_for(10ms);
  }
}

/// What was at the vendor when a kill came: its wall time and the vendor keys in progress.
struct kill_mark {
  int64_t wall_ms = 0;
  int64_t after_ms = 0;        ///< after the load started
  bool after_operator = false; ///< just after an operator's retry of dead letters
  bool in_outage = false;      ///< while the vendor failed most calls
  std::vector<std::string> in_flight;
};

/// Runs one round against a started server: the load, the vendor's outage, the operator, the
/// kill. Returns what was at the vendor just before the kill.
kill_mark run_round(test::serve_process& srv, vendor_control& vendor, std::mutex& mu, figures& fig,
                    const options& o, const round_plan& p, std::mt19937_64& rng, load& l) {
  std::atomic<bool> stop_operator{false};
  std::atomic<int64_t> first_retry_ms{0};
  std::thread op;
  l.start(srv.port(), rng);
  if (p.operator_retries)
    op = std::thread([&] { operator_loop(srv.port(), o, stop_operator, first_retry_ms, mu, fig); });
  auto t0 = steady_ms();
  bool outage_on = false;
  kill_mark m;
  for (;;) {
    auto t = steady_ms() - t0;
    if (p.outage_ms > 0 && !outage_on && t >= p.outage_at_ms && t < p.outage_at_ms + p.outage_ms) {
      vendor.mode(outage);
      outage_on = true;
    } else if (outage_on && t >= p.outage_at_ms + p.outage_ms) {
      vendor.mode(outage_over);
      outage_on = false;
    }
    m.after_ms = t;
    if (auto f = first_retry_ms.load(); f != 0 && t >= f - t0 + p.kill_after_operator_ms)
      m.after_operator = true;
    if (m.after_operator || t >= p.kill_after_ms)
      break;
    std::this_thread::sleep_for(2ms);
  }
  m.in_outage = outage_on;
  auto keys = vendor.keys();
  m.wall_ms = wall_ms();
  srv.kill_now();
  if (keys.is_object())
    for (auto& [k, v] : keys.items())
      if (v.value("in_flight", 0) > 0)
        m.in_flight.push_back(k);
  stop_operator.store(true);
  l.stop();
  if (op.joinable())
    op.join();
  if (outage_on)
    vendor.mode(outage_over);
  return m;
}

// -- the end: settle every call --

/// A scheduled dead letter is retried by its alarm when its time comes. One whose time passed
/// 2 s ago, while this server has run for 2 s, has lost its alarm: a runtime defect, which
/// fails the run; with --lenient the operator retries it (scheduled -> scheduled) instead.
class lost_alarms {
 public:
  lost_alarms(figures& fig, const options& o) : fig_(fig), o_(o), started_(wall_ms()) {}

  /// Whether the operator should retry `d` (a dead letter as the HTTP API lists it).
  bool retry(const json& d) {
    auto now = wall_ms();
    auto due = d.value("next_retry_at", now);
    if (d.value("status", "") != "scheduled" || now - started_ < 2000 || due + 2000 > now)
      return false;
    auto id = d.value("id", "");
    if (seen_.insert(id).second) {
      ++fig_.lost_alarms;
      std::lock_guard<std::mutex> g(print_mu);
      std::cout << "dead letter " << id << " of key " << d.value("idempotency_key", "")
                << " is scheduled for " << due << " (" << now - due
                << " ms ago) and was not retried" << std::endl;
    }
    if (!o_.lenient)
      fail("dead letter " + id + " lost its alarm");
    return o_.lenient;
  }

 private:
  figures& fig_;
  const options& o_;
  int64_t started_;
  std::set<std::string> seen_;
};

/// Sends every call that is not settled once more; how many are still not settled, or -1 when
/// the server is gone.
int64_t retry_open_calls(test::http_client& http, call_list& calls, std::mutex& mu, figures& fig) {
  int64_t open = 0;
  for (auto& c : calls) {
    if (c.state == call_state::acked || c.state == call_state::terminal)
      continue;
    test::header_list headers;
    {
      std::lock_guard<std::mutex> g(mu);
      headers = next_request(c);
    }
    auto r = http.request("POST", entity_path(c.entity) + "/deliver", headers, c.body);
    std::lock_guard<std::mutex> g(mu);
    if (apply_reply(c, r, fig) == next_step::gone)
      return -1;
    open += c.state != call_state::acked && c.state != call_state::terminal;
  }
  return open;
}

/// With the vendor healthy: retries every call that is not settled and has the operator retry
/// every dead letter that waits for one, until every call is answered 2xx (or a stored
/// terminal failure) and every dead letter is resolved (bounded: 40 s).
void settle(uint16_t port, call_list& calls, std::mutex& mu, figures& fig, const options& o) {
  test::http_client http(port, 20s);
  auto deadline = steady_ms() + 40'000;
  lost_alarms lost(fig, o);
  int open_dead_letters = 0;
  int64_t open_calls = 0;
  while (steady_ms() < deadline) {
    ++fig.settle_passes;
    open_calls = retry_open_calls(http, calls, mu, fig);
    if (open_calls >= 0)
      open_dead_letters = sweep_dead_letters(
        http, o, "",
        [&](const json& d) {
          auto st = d.value("status", "");
          return st == "pending" || st == "acknowledged" || lost.retry(d);
        },
        [&] {
          std::lock_guard<std::mutex> g(mu);
          ++fig.operator_retries;
        });
    if (open_calls < 0 || open_dead_letters < 0)
      return fail("factum serve stopped answering while the calls were settled");
    if (open_calls == 0 && open_dead_letters == 0)
      return;
    std::this_thread::sleep_for(100ms);
  }
  fail("not settled within 40 s: " + std::to_string(open_calls) + " calls, " +
       std::to_string(open_dead_letters) + " dead letters");
}

// -- the report --

/// Vendor calls in progress at a kill whose key a dead letter owned then (created before it):
/// dead-letter retries the kill cut off mid-await.
void count_dead_letter_kills(const std::vector<kill_mark>& kills, const call_list& calls,
                             figures& fig) {
  std::map<std::string, const call_record*> by_vendor_key;
  for (auto& c : calls)
    by_vendor_key[c.vendor_key] = &c;
  for (auto& k : kills) {
    fig.vendor_in_flight_at_kills += static_cast<int64_t>(k.in_flight.size());
    int64_t dl = 0;
    for (auto& vk : k.in_flight)
      if (auto it = by_vendor_key.find(vk); it != by_vendor_key.end())
        dl +=
          it->second->dead_letter_created_ms > 0 && it->second->dead_letter_created_ms < k.wall_ms;
    fig.dead_letter_in_flight_at_kills += dl;
    fig.kills_during_dead_letter_retries += dl > 0;
  }
}

void report(const figures& f, const options& o, double secs) {
  std::cout << "reliability_crash_await: " << (failure_count() ? "FAILED" : "ok") << ": seed "
            << o.seed << ", rounds " << o.rounds << ", kills " << f.kills << ", " << secs << " s\n"
            << "  calls " << f.calls << " (unique keys), requests " << f.requests
            << ", unanswered at a kill " << f.unanswered << ", 2xx " << f.acked << " (replayed "
            << f.replayed << "), retryable failures " << f.retryable
            << ", 5xx naming a new dead letter " << f.dead_letter_replies
            << ", 409 naming the owning dead letter " << f.refused_by_dead_letter
            << ", 409 in flight " << f.in_flight_409 << " (for a dead-lettered key "
            << f.in_flight_409_dead_lettered << "), terminal " << f.terminal
            << "\n  retryable failures by code:";
  for (auto& [code, n] : f.codes)
    std::cout << ' ' << code << ' ' << n;
  std::cout << "\n  at the kills: vendor calls in flight " << f.vendor_in_flight_at_kills
            << ", of them dead-letter retries " << f.dead_letter_in_flight_at_kills << " (in "
            << f.kills_during_dead_letter_retries << " kills); operator retries "
            << f.operator_retries << ", settle passes " << f.settle_passes
            << ", scheduled dead letters that lost their alarm " << f.lost_alarms
            << "\n  on disk: facts " << f.facts << ", deliveries " << f.deliveries
            << ", failed attempts " << f.attempt_errors << ", circuit-open fast fails "
            << f.fast_fails << ", exhausted " << f.exhausted << ", budget " << f.budget
            << ", resolved after retry " << f.resolved_after_retry << ", breaker changes "
            << f.breaker_changes << ", dead letters " << f.dead_letters << " (retries failed "
            << f.dead_letter_retry_failed << ", operator retries " << f.operator_retry_facts
            << ")\n  vendor: calls " << f.vendor_calls << ", delivered " << f.vendor_delivered
            << ", replayed " << f.vendor_replayed
            << " (keys delivered and called again: " << f.keys_replayed << "), failed "
            << f.vendor_failed << ", no answer " << f.vendor_no_answer
            << "; calls the log has no attempt for " << f.unrecorded
            << ", recorded attempts the vendor did not see " << f.recorded_unseen
            << "\n  vendor calls per key:";
  for (auto& [n, keys] : f.vendor_calls_per_key)
    std::cout << ' ' << n << ':' << keys;
  std::cout << std::endl;
}

int usage() {
  std::cerr << "usage: reliability_crash_await --factum PATH --vendor PATH [--rounds N] [--seed S] "
               "[--connections C] [--entities E] [--trial-timeout-ms MS] [--lenient] [--keep]\n";
  return 2;
}

/// The common flags (crash_support.hpp) and --vendor, --trial-timeout-ms, --lenient.
std::optional<options> parse(int argc, char** argv) {
  options o;
  auto own = [&o](const std::string& flag, const std::function<std::string()>& next) {
    if (flag == "--vendor")
      o.vendor = next();
    else if (flag == "--trial-timeout-ms")
      o.trial_timeout_ms = std::stoll(next());
    else if (flag == "--lenient")
      o.lenient = true;
    else
      return false;
    return true;
  };
  if (!test::parse_options("reliability_crash_await", argc, argv, o, own) || o.vendor.empty())
    return std::nullopt;
  return o;
}

/// The rounds, the settling and the checks; the exit code.
int run(const options& o) {
  std::cout << "reliability_crash_await: seed " << o.seed << ", " << o.rounds << " rounds, "
            << o.connections << " connections, " << o.entities << " webhook entities" << std::endl;
  std::mt19937_64 rng(o.seed);
  test::temp_dir tmp;
  test::vendor_process vp;
  if (auto e = vp.start(o.vendor, tmp.path()); !e.empty()) {
    fail(e);
    return 1;
  }
  vendor_control vendor(vp.port());
  auto mode = slow_and_flaky;
  mode["seed"] = rng();
  vendor.mode(mode);
  call_list calls;
  std::mutex mu;
  figures fig;
  std::vector<kill_mark> kills;
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 1; round <= o.rounds + 1 && failure_count() == 0; ++round) {
    bool last = round == o.rounds + 1;
    // Alternate durability modes: both must survive a process crash.
    std::string durability = round % 2 ? "full" : "normal";
    test::serve_process srv(o.factum, tmp.path());
    if (auto e =
          srv.start(serve_config(tmp.path(), durability, vp.port(), o), std::to_string(round));
        !e.empty()) {
      fail(e);
      break;
    }
    if (last) {
      vendor.mode(healthy);
      settle(srv.port(), calls, mu, fig, o);
      if (auto e = srv.stop(); !e.empty())
        fail(e);
      break;
    }
    auto p = plan_round(rng);
    load l(calls, mu, fig, o, round);
    kills.push_back(run_round(srv, vendor, mu, fig, o, p, rng, l));
    ++fig.kills;
    size_t open = 0, dead_lettered = 0;
    for (auto& c : calls) {
      open += c.state == call_state::open;
      dead_lettered += c.state == call_state::dead_lettered;
    }
    auto& k = kills.back();
    std::cout << "round " << round << " (" << durability << "): " << l.retries()
              << " earlier calls retried, " << l.new_calls() << " new calls; killed after "
              << k.after_ms << " ms" << (k.in_outage ? ", in a vendor outage" : "")
              << (k.after_operator ? ", just after an operator retried dead letters" : "") << ", "
              << k.in_flight.size() << " vendor calls in flight; " << open << " calls open, "
              << dead_lettered << " owned by a dead letter" << std::endl;
  }
  json vendor_keys = vendor.keys();
  if (auto e = vp.stop(); !e.empty())
    fail(e);
  for (auto& c : calls)
    if (c.state != call_state::acked && c.state != call_state::terminal)
      fail("key " + c.key + " was never settled");
  if (failure_count() == 0) {
    check_on_disk(tmp.path() / "data", calls, o, fig);
    check_vendor(vendor_keys, calls, fig);
    count_dead_letter_kills(kills, calls, fig);
  }
  report(fig, o, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (failure_count() == 0 && fig.kills_during_dead_letter_retries == 0)
    std::cout << "reliability_crash_await: WARNING: no kill came while a dead letter's retry was "
                 "at the vendor: this run did not test a kill during dead-letter retries (it "
                 "depends on timing; another --seed or more --rounds may)"
              << std::endl;
  if (o.keep)
    test::keep_files(tmp, "factum-crash-await-kept");
  return failure_count() ? 1 : 0;
}

} // namespace

} // namespace factum::crash_await

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  auto o = factum::crash_await::parse(argc, argv);
  if (!o)
    return factum::crash_await::usage();
  return factum::crash_await::run(*o);
}
