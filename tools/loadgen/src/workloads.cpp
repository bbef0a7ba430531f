// workloads.cpp: what `factum bench` sends: the request generators (seeded entity choice, run
// keys, append bodies), the workloads (append, replay, mixed, cold, churn, alarms, read) as
// setup and measured phases, and the alarm sink. workload() runs on the calling thread; the
// generators also run on the target's threads (the closed loop makes the next request inside a
// completion) and only read the run's settings; sink::fired runs on CAF workers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "bench_run.hpp"

namespace factum::tools::loadgen {

// -- request generators --

std::string bench_run::entity(uint64_t n) const {
  return "e" + std::to_string(n);
}

uint64_t bench_run::pick(uint64_t i, uint64_t salt) const {
  return mix64(o_.seed * 0x9e3779b97f4a7c15ULL ^ (i + 1) * salt) % uint64_t(entities_);
}

std::string bench_run::key(const char* prefix, uint64_t i) const {
  return run_id_ + "-" + prefix + std::to_string(i);
}

item bench_run::append_item(std::string id, std::string k, uint64_t n) const {
  item it;
  it.k = kind::append;
  it.req.type = "ledger";
  it.req.id = std::move(id);
  it.req.method = "append";
  it.req.idempotency_key = std::move(k);
  it.req.body =
    R"({"type":"bench","data":{"n":)" + std::to_string(n) + R"(,"fill":")" + filler_ + "\"}}";
  return it;
}

item bench_run::replay_key_item(uint64_t j) const {
  return append_item(entity(j % uint64_t(entities_)), key("r", j), j);
}

// -- workloads --

void bench_run::workload() {
  auto E = uint64_t(entities_);
  const auto& w = o_.workload;
  if (w == "append" || w == "churn") {
    if (o_.warmup || w == "churn")
      setup_phase("one append per entity", entities_,
                  [&](uint64_t i) { return append_item(entity(i), key("w", i), i); });
    measure([&](uint64_t i) { return append_item(entity(pick(i, 7)), key("a", i), i); });
  } else if (w == "replay" || w == "mixed") {
    setup_phase("completed keys", o_.keys, [&](uint64_t j) { return replay_key_item(j); });
    auto K = uint64_t(o_.keys);
    measure([&, K, E](uint64_t i) {
      double u = double(mix64(o_.seed ^ (i + 1) * 0xd1b54a32d192ed03ULL) % 1'000'000) / 1e6;
      if (w == "replay" || u < o_.replay_share) {
        auto it = replay_key_item(mix64(o_.seed + i * 31 + 17) % K);
        it.k = kind::replay;
        return it;
      }
      if (u < o_.replay_share + o_.tool_share) {
        item it;
        it.k = kind::tool;
        it.req.type = "webhook";
        it.req.id = "w" + std::to_string(pick(i, 13) % E);
        it.req.method = "deliver";
        it.req.idempotency_key = key("t", i);
        it.req.body = R"({"tool":")" + o_.tool + R"(","payload":{"n":)" + std::to_string(i) + "}}";
        return it;
      }
      return append_item(entity(pick(i, 7)), key("a", i), i);
    });
  } else if (w == "cold") {
    if (inproc_) {
      setup_phase("create the entities", entities_,
                  [&](uint64_t i) { return append_item(entity(i), key("c", i), i); });
      if (progress_)
        err_ << "setup: restart the runtime (every entity hibernated)\n";
      inproc_->restart();
      measure_count([&](uint64_t i) { return append_item(entity(i), key("a", i), i); });
    } else {
      // Over HTTP the server cannot be restarted: fresh entities, i.e. a creation storm.
      measure_count([&](uint64_t i) {
        return append_item("c" + run_id_ + "-" + std::to_string(i), key("a", i), i);
      });
    }
  } else if (w == "read") {
    auto F = uint64_t(o_.facts_per_entity);
    setup_phase("facts to read", entities_ * o_.facts_per_entity, [&, E, F](uint64_t j) {
      (void)F;
      return append_item(entity(j % E), key("s", j), j);
    });
    measure([&](uint64_t i) {
      item it;
      it.k = kind::read;
      it.req.read = true;
      it.req.type = "ledger";
      it.req.id = entity(pick(i, 11));
      it.req.query = "type=bench&order=desc&limit=" + std::to_string(o_.read_limit);
      return it;
    });
  } else if (w == "alarms") {
    alarms();
  }
}

void bench_run::measure_count(const std::function<item(uint64_t)>& make) {
  auto saved = o_;
  o_.count = entities_;
  o_.rate = saved.rate;
  measure(make);
  o_ = saved;
}

void bench_run::alarms() {
  auto arm = [&](int64_t due) {
    return [&, due](uint64_t i) {
      item it;
      it.k = kind::arm;
      it.req.type = "bench_alarm";
      it.req.id = "a" + std::to_string(i);
      it.req.method = "arm";
      it.req.body = "{\"due_ms\":" + std::to_string(due) + "}";
      return it;
    };
  };
  // Create the entities with an alarm an hour away, then re-arm them all so that every alarm
  // falls due at the same instant, far enough ahead for the re-arming to finish first.
  auto t = clk::now();
  setup_phase("create the entities", entities_, arm(wall_ms() + 3'600'000));
  double per_s =
    double(entities_) / std::max(1e-3, std::chrono::duration<double>(clk::now() - t).count());
  int64_t lead = std::max<int64_t>(500, int64_t(2'000.0 * double(entities_) / per_s));
  due_ms_ = wall_ms() + lead;
  setup_phase("arm every alarm for one instant", entities_, arm(due_ms_));
  auto before = t_->usage();
  auto t0 = clk::now();
  auto deadline = t0 + std::chrono::milliseconds(lead) + std::chrono::seconds(60) +
                  std::chrono::milliseconds(int64_t(o_.timeout_s * 1000));
  while (sink_.count() < uint64_t(entities_) && clk::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto after = t_->usage();
  usage_known_ = true;
  cpu_s_ = after.cpu_s - before.cpu_s;
  peak_rss_kib_ = after.peak_rss_kib;
  elapsed_s_ = sink_.span_s(due_ms_);
  for (auto& l : sink_.lags_ms())
    lat_.record(uint64_t(std::max<int64_t>(0, l)) * 1'000'000);
  meas_.sent = uint64_t(entities_);
  meas_.answered = sink_.count();
  meas_.ok = sink_.count();
  if (sink_.count() < uint64_t(entities_)) {
    meas_.errors = uint64_t(entities_) - sink_.count();
    std::lock_guard<std::mutex> g(meas_.mu);
    meas_.codes["ALARM_NOT_FIRED"] = meas_.errors;
  }
  for (int64_t i = 0; i < entities_; ++i)
    alarm_ids_.push_back("a" + std::to_string(i));
  auto c = t_->counters();
  counters_known_ = c.known;
  dc_ = c;
}

// -- alarm sink --

void bench_run::sink::fired(const std::string& id, int64_t due, int64_t at) {
  std::lock_guard<std::mutex> g(mu);
  if (!seen.insert(id).second)
    return; // at least once: count each entity's first firing
  lags.push_back(at - due);
  last = std::max(last, at);
  n.fetch_add(1);
}

std::vector<int64_t> bench_run::sink::lags_ms() {
  std::lock_guard<std::mutex> g(mu);
  return lags;
}

double bench_run::sink::span_s(int64_t due) {
  std::lock_guard<std::mutex> g(mu);
  return last > due ? double(last - due) / 1e3 : 1e-3;
}

} // namespace factum::tools::loadgen
