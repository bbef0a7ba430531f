// support.hpp: what the example tests share: a scripted in-process vendor (a tool_fn whose
// answers, charges and call times are recorded), and a runtime fixture hosting the example
// types with such vendors as tools. The vendor is thread-safe; the fixture is used by the test's
// thread only.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "factum/examples/examples.hpp"
#include "factum/resilience/money.hpp"
#include "factum/runtime/runtime.hpp"
#include "support/eventually.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

namespace factum::test {

/// A vendor whose answers are scripted per request; it charges `price` for every call it
/// answered (and for timeouts: it did the work), but not for 429 (refused before any work).
class scripted_vendor {
 public:
  struct answer {
    answer(int s = 200, std::string t = {}, std::optional<int64_t> ra = {})
        : status(s), transport(std::move(t)), retry_after_ms(ra) {}
    int status;
    std::string transport; // "timeout", "connection_reset": no HTTP answer
    std::optional<int64_t> retry_after_ms;
  };

  explicit scripted_vendor(std::string price = "0") : price_(std::move(price)) {}

  void script(std::vector<answer> a) {
    std::lock_guard<std::mutex> g(mu_);
    script_.assign(a.begin(), a.end());
  }
  void always(answer a) {
    std::lock_guard<std::mutex> g(mu_);
    script_.clear();
    default_ = a;
  }
  tool_fn fn() {
    return [this](const tool_request& req, std::function<void(tool_reply)> done) {
      answer a;
      std::string charge;
      int n;
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!script_.empty()) {
          a = script_.front();
          script_.pop_front();
        } else {
          a = default_;
        }
        n = ++calls_;
        times_.push_back(factum::now_ms());
        payloads_.push_back(req.payload);
        charge = a.status == 429 && a.transport.empty() ? "0" : price_;
        charged_.add("USD", resilience::decimal::parse(charge).value());
      }
      tool_reply r;
      r.http_status = a.transport.empty() ? a.status : 0;
      r.ok = a.transport.empty() && a.status < 300;
      r.error_code = a.transport;
      r.error_message = r.ok ? "" : "vendor says " + std::to_string(a.status);
      r.retry_after_ms = a.retry_after_ms;
      if (a.transport.empty())
        r.cost_amount = charge; // the X-Cost of an answer; a timeout reports nothing
      r.body = {{"status", a.status}, {"id", "v-" + std::to_string(n)}};
      done(std::move(r));
    };
  }
  int calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }
  std::vector<int64_t> times() {
    std::lock_guard<std::mutex> g(mu_);
    return times_;
  }
  std::vector<nlohmann::json> payloads() {
    std::lock_guard<std::mutex> g(mu_);
    return payloads_;
  }
  std::string charged() {
    std::lock_guard<std::mutex> g(mu_);
    return charged_.total("USD").to_string();
  }

 private:
  std::mutex mu_;
  std::string price_;
  std::deque<answer> script_;
  answer default_;
  int calls_ = 0;
  std::vector<int64_t> times_;
  std::vector<nlohmann::json> payloads_;
  resilience::money_totals charged_;
};

/// A runtime hosting the example types, with tools added by the test before start().
struct example_fixture {
  temp_dir tmp;
  std::map<std::string, tool_fn> tools;
  std::map<std::string, tool_policy> policies;
  nlohmann::json dead_letter_rules;
  std::chrono::milliseconds alarm_retry_base{2'000};
  int alarm_max_retries = 6;
  std::unique_ptr<runtime> rt;

  void start() {
    runtime_config c;
    c.data_dir = tmp.path();
    c.storage_threads = 2;
    c.alarm_poll = std::chrono::milliseconds(50);
    c.alarm_retry_base = alarm_retry_base;
    c.alarm_max_retries = alarm_max_retries;
    c.dead_letter_rules = dead_letter_rules;
    add_builtin_types(c.types);
    examples::add_example_types(c.types);
    c.tools = tools;
    c.tool_policies = policies;
    rt = start_ok(std::move(c));
  }
  void restart() {
    rt.reset();
    start();
  }

  call_reply call(const std::string& type, const std::string& id, const std::string& method,
                  const nlohmann::json& args, const std::string& key = "") {
    call_options o;
    o.idempotency_key = key;
    return rt->call_sync({"acme", type, id}, method, args.dump(), o);
  }
  nlohmann::json ok(const std::string& type, const std::string& id, const std::string& method,
                    const nlohmann::json& args, const std::string& key = "") {
    auto r = call(type, id, method, args, key);
    REQUIRE_MESSAGE(r.ok, method << ": " << r.body);
    return r.json();
  }
  nlohmann::json facts(const std::string& type, const std::string& id,
                       nlohmann::json filter = nlohmann::json::object()) {
    filter["limit"] = 10000;
    return ok(type, id, "@facts", filter);
  }
  nlohmann::json dead_letters(const std::string& type, const std::string& id) {
    return ok(type, id, "@dead_letters", nlohmann::json::object());
  }
};

} // namespace factum::test
