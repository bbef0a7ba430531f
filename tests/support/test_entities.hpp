// test_entities.hpp: entity types the runtime and HTTP tests drive, and an event log that
// handlers notify so that tests wait on conditions instead of sleeping.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "factum/entities/entity.hpp"

namespace factum::test {

/// Events reported by test handlers (any thread).
class event_log {
 public:
  static event_log& get() {
    static event_log log;
    return log;
  }
  void push(std::string e) {
    std::lock_guard<std::mutex> g(mu_);
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  /// Waits until `e` was pushed at least `n` times; false on timeout.
  bool wait_for(const std::string& e, size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, timeout, [&] { return count_locked(e) >= n; });
  }
  size_t count(const std::string& e) {
    std::lock_guard<std::mutex> g(mu_);
    return count_locked(e);
  }

 private:
  size_t count_locked(const std::string& e) const {
    size_t n = 0;
    for (auto& x : events_)
      n += x == e;
    return n;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> events_;
};

/// Probes the runtime's turn machinery.
class probe final : public entity {
 public:
  task<nlohmann::json> slow_pair(context& ctx, nlohmann::json a) {
    fact_draft b;
    b.type = "probe";
    b.subtype = "begin";
    b.data = {{"n", a.value("n", 0)}};
    ctx.append(b);
    co_await ctx.sleep(std::chrono::milliseconds(a.value("ms", 10)));
    fact_draft e = b;
    e.subtype = "end";
    ctx.append(e);
    co_return nlohmann::json{{"n", a.value("n", 0)}};
  }

  nlohmann::json append_then(context& ctx, nlohmann::json a) {
    fact_draft d;
    d.type = "probe";
    auto f = ctx.append(d);
    auto how = a.value("fail", "");
    if (how == "client")
      throw client_error("PROBE_CLIENT", "asked to fail");
    if (how == "throw")
      throw std::runtime_error("unexpected");
    return {{"seq", f.seq}};
  }

  nlohmann::json fail_then_succeed(context& ctx, nlohmann::json a) {
    if (failures_ < a.value("times", 1)) {
      ++failures_;
      fact_draft d;
      d.type = "probe";
      d.subtype = "attempt";
      ctx.append(d); // rolled back with the failing turn
      throw transient_error("PROBE_TRANSIENT", "try again");
    }
    fact_draft d;
    d.type = "probe";
    d.subtype = "done";
    return {{"seq", ctx.append(d).seq}};
  }

  task<nlohmann::json> call_counter(context& ctx, nlohmann::json a) {
    // (GCC 12 cannot keep string literals as temporaries of a co_await expression: name them.)
    std::string type = "counter", id = a.value("id", std::string("c")), method = "add";
    nlohmann::json args = {{"by", a.value("by", 1)}};
    auto r = co_await ctx.call(type, id, method, args);
    if (!r.ok)
      throw call_error(error_category::external, r.code, r.body);
    co_return r.json();
  }

 private:
  int failures_ = 0;
};

/// A counter whose value lives in facts and is rebuilt on activation.
class counter final : public entity {
 public:
  task<void> on_activate(context& ctx) override {
    fact_filter f;
    f.type = "counter";
    f.limit = 10000;
    value_ = 0;
    for (auto& fa : ctx.query(f))
      value_ += nlohmann::json::parse(fa.data).value("by", 0);
    co_return;
  }
  nlohmann::json add(context& ctx, nlohmann::json a) {
    fact_draft d;
    d.type = "counter";
    d.data = {{"by", a.value("by", 1)}};
    ctx.append(d);
    value_ += a.value("by", 1);
    return {{"value", value_}};
  }
  nlohmann::json get(context&, nlohmann::json) { return {{"value", value_}}; }
  /// An alarm an hour away (or delay_ms), never fired by the tests that set it.
  nlohmann::json remind(context& ctx, nlohmann::json a) {
    ctx.set_alarm(a.value("name", "r"), ctx.now_ms() + a.value("delay_ms", 3'600'000), {});
    return {{"armed", a.value("name", "r")}};
  }

 private:
  int64_t value_ = 0;
};

/// Sets alarms; its handler records each run and fails the first `fail_times` runs.
class alarmer final : public entity {
 public:
  nlohmann::json arm(context& ctx, nlohmann::json a) {
    auto name = a.value("name", "a");
    ctx.set_alarm(name, ctx.now_ms() + a.value("delay_ms", 100),
                  {{"fail_times", a.value("fail_times", 0)}, {"tag", a.value("tag", name)}});
    return {{"armed", name}};
  }
  task<void> on_alarm(context& ctx, const alarm_record& rec) override {
    auto p = nlohmann::json::parse(rec.payload);
    fact_draft d;
    d.type = "alarm_fired";
    d.data = {{"name", rec.name}, {"attempts", rec.attempts}};
    ctx.append(d);
    event_log::get().push("alarm:" + p.value("tag", rec.name));
    if (rec.attempts < p.value("fail_times", 0))
      throw external_error("ALARM_PROBE", "asked to fail");
    co_return;
  }
};

inline void add_test_types(entity_registry& r) {
  r.add(type_builder<probe>("probe")
          .method("slow_pair", &probe::slow_pair)
          .method("append_then", &probe::append_then)
          .method("fail_then_succeed", &probe::fail_then_succeed)
          .method("call_counter", &probe::call_counter)
          .build());
  r.add(type_builder<counter>("counter")
          .method("add", &counter::add)
          .method("get", &counter::get)
          .method("remind", &counter::remind)
          .build());
  r.add(type_builder<alarmer>("alarmer").method("arm", &alarmer::arm).build());
}

} // namespace factum::test
