// inproc.cpp: the in-process target of `factum bench` (the embedded runtime), its `bench_alarm`
// entity type and fake vendor tool, and the verification of a stopped runtime's files through
// the storage library (read-only). send() runs on the bench's threads; call completions, alarm
// handlers and the tool run on CAF workers; verify_local runs on the caller's thread.
#include <sys/resource.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "target.hpp"

namespace factum::tools::loadgen {

namespace {

/// `arm {"due_ms": T}` sets the alarm "bench" due at T; its firing appends an `alarm_fired`
/// fact and reports due and firing time to the bench.
class bench_alarm final : public entity {
 public:
  bench_alarm() = default;
  explicit bench_alarm(alarm_sink* sink) : sink_(sink) {}

  nlohmann::json arm(context& ctx, nlohmann::json args) {
    if (!args.is_object() || !args.contains("due_ms") || !args["due_ms"].is_number_integer())
      throw client_error("INVALID_ARGUMENT", "'due_ms' (an integer) is required");
    auto due = args["due_ms"].get<int64_t>();
    ctx.set_alarm("bench", due);
    return {{"due_ms", due}};
  }

  task<void> on_alarm(context& ctx, const alarm_record& a) override {
    auto fired = ctx.now_ms();
    fact_draft d;
    d.type = "alarm_fired";
    d.data = {{"due_ms", a.due_ms}, {"fired_ms", fired}};
    ctx.append(std::move(d));
    if (sink_)
      sink_->fired(ctx.key().id, a.due_ms, fired);
    co_return;
  }

 private:
  alarm_sink* sink_ = nullptr;
};

class inproc final : public inproc_target {
 public:
  inproc(const bench_options& o, std::string dir, int64_t max_active, alarm_sink* sink)
      : opts_(o), dir_(std::move(dir)), max_active_(max_active), sink_(sink) {}

  bool start(std::string& error) {
    runtime_config c;
    c.data_dir = dir_;
    auto m = parse_durability(opts_.durability);
    if (!m) {
      error = "--durability must be full or normal";
      return false;
    }
    c.mode = *m;
    c.max_active_entities = static_cast<size_t>(max_active_);
    c.idle_timeout = std::chrono::minutes(10);
    add_builtin_types(c.types);
    auto* sink = sink_;
    entity_type alarm_type =
      type_builder<bench_alarm>("bench_alarm").method("arm", &bench_alarm::arm).build();
    alarm_type.factory = [sink] { return std::make_unique<bench_alarm>(sink); };
    c.types.add(std::move(alarm_type));
    // The fake vendor: answers at once, failing a seeded share of attempts with 503.
    auto seed = opts_.seed;
    auto fail_per_mille = static_cast<uint64_t>(opts_.fail_rate * 1000.0 + 0.5);
    auto counter = std::make_shared<std::atomic<uint64_t>>(0);
    c.tools[opts_.tool] = [seed, fail_per_mille, counter](const tool_request&,
                                                          std::function<void(tool_reply)> done) {
      auto n = counter->fetch_add(1, std::memory_order_relaxed);
      tool_reply r;
      bool fail = mix64(seed ^ (n * 0x2545f4914f6cdd1dULL)) % 1000 < fail_per_mille;
      r.ok = !fail;
      r.http_status = fail ? 503 : 200;
      r.body = fail ? nlohmann::json{{"error", "unavailable"}} : nlohmann::json{{"ok", true}};
      if (fail) {
        r.category = error_category::transient;
        r.error_message = "fake vendor: 503";
      }
      done(std::move(r));
    };
    tool_policy p;
    p.retry = {{"base_delay_ms", 1}, {"max_delay_ms", 5}, {"max_attempts", 2}, {"jitter", "none"}};
    p.price = "0.001";
    c.tool_policies[opts_.tool] = std::move(p);
    auto r = runtime::start(std::move(c));
    if (!r) {
      error = "runtime: " + r.error().to_string();
      return false;
    }
    rt_ = std::move(r.value());
    return true;
  }

  void send(request q, std::unique_ptr<answer_handler> done) override {
    auto* rt = rt_.get();
    if (!rt) {
      response s;
      s.code = "STOPPED";
      (*done)(std::move(s));
      return;
    }
    std::string method = std::move(q.method), body = std::move(q.body);
    if (q.read) {
      method = "recent";
      body = "{\"limit\":" + std::to_string(opts_.read_limit) + "}";
    }
    call_options co;
    co.idempotency_key = std::move(q.idempotency_key);
    co.timeout = std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000));
    rt->call(entity_key{opts_.tenant, q.type, q.id}, std::move(method), std::move(body),
             std::move(co), [h = done.release()](call_reply cr) {
               response s;
               s.ok = cr.ok;
               s.status = cr.http_status;
               s.replayed = cr.replayed;
               s.code = std::move(cr.code);
               s.body = std::move(cr.body);
               answer(h, std::move(s));
             });
  }

  server_usage usage() override {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    server_usage u;
    u.known = true;
    u.cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    u.peak_rss_kib = ru.ru_maxrss;
    return u;
  }

  target_counters counters() override {
    target_counters t;
    if (!rt_)
      return t;
    auto& m = rt_->metrics();
    auto n = [&m](std::string_view name) { return static_cast<uint64_t>(m.value(name)); };
    t.known = true;
    t.activations = n("factum_activations_total") + base_.activations;
    t.hibernations = n("factum_hibernations_total") + base_.hibernations;
    t.commits = n("factum_commits_total") + base_.commits;
    t.facts = n("factum_facts_total") + base_.facts;
    t.peak_active = std::max<uint64_t>(n("factum_peak_active_entities"), base_.peak_active);
    t.alarms_fired = n("factum_alarms_fired_total") + base_.alarms_fired;
    t.tool_calls = n("factum_tool_calls_total") + base_.tool_calls;
    t.tool_retries = n("factum_tool_retries_total") + base_.tool_retries;
    t.fast_fails = n("factum_breaker_fast_fails_total") + base_.fast_fails;
    t.dead_letters = n("factum_dead_letters_total") + base_.dead_letters;
    return t;
  }

  void restart() override {
    base_ = counters();
    rt_.reset();
    std::string error;
    if (!start(error))
      throw std::runtime_error(error);
  }

  void stop() override {
    if (rt_) {
      base_ = counters();
      rt_->stop();
      rt_.reset();
    }
  }

 private:
  bench_options opts_;
  std::string dir_;
  int64_t max_active_;
  alarm_sink* sink_;
  std::unique_ptr<runtime> rt_;
  target_counters base_; ///< counters of earlier runtimes on the same directory
};

} // namespace

std::unique_ptr<inproc_target> make_inproc_target(const bench_options& opts,
                                                  const std::string& data_dir, int64_t max_active,
                                                  alarm_sink* alarms, std::string& error) {
  auto t = std::make_unique<inproc>(opts, data_dir, max_active, alarms);
  if (!t->start(error))
    return nullptr;
  return t;
}

verify_result verify_local(const std::string& data_dir, const std::string& tenant,
                           const std::string& key_prefix, const std::vector<ack>& acks,
                           const std::string& fact_type, const std::vector<std::string>& alarm_ids,
                           int64_t allowed_extra) {
  verify_result v;
  v.ran = true;
  auto problem = [&](std::string p) {
    v.ok = false;
    if (v.problems.size() < 10)
      v.problems.push_back(std::move(p));
  };
  struct found_fact {
    std::string id;
    int64_t seq;
    std::string fact_id;
  };
  std::map<std::string, found_fact> by_key; // idempotency key -> the fact carrying it
  std::set<std::string> alarm_fired;
  store_options so;
  so.data_dir = data_dir;
  so.read_only = true;
  for (auto& file : list_entity_files(data_dir)) {
    auto st = entity_store::open_file(file, so);
    if (!st) {
      if (st.error().code() != errc::not_found) // not_found: an unclaimed spare, no entity
        problem("cannot open " + file.string() + ": " + st.error().to_string());
      continue;
    }
    auto& s = *st.value();
    if (s.key().tenant != tenant)
      continue;
    ++v.entities_checked;
    auto rep = s.verify();
    if (!rep || !rep.value().ok) {
      ++v.chains_bad;
      problem(s.key().to_string() +
              ": chain: " + (rep ? rep.value().problem : rep.error().to_string()));
    } else {
      ++v.chains_ok;
    }
    fact_filter f;
    f.limit = 10'000;
    int64_t after = 0;
    for (;;) {
      f.after_seq = after;
      auto page = s.query(f);
      if (!page) {
        problem(s.key().to_string() + ": query: " + page.error().to_string());
        break;
      }
      for (auto& fa : page.value()) {
        after = fa.seq;
        if (fa.type == "alarm_fired")
          alarm_fired.insert(fa.entity_id);
        if (fa.type != fact_type || fa.idempotency_key.rfind(key_prefix, 0) != 0)
          continue;
        auto [it, fresh] =
          by_key.emplace(fa.idempotency_key, found_fact{fa.entity_id, fa.seq, fa.fact_id});
        if (!fresh) {
          ++v.duplicates;
          problem("key " + fa.idempotency_key + " appended twice (" + it->second.id + " seq " +
                  std::to_string(it->second.seq) + ", " + fa.entity_id + " seq " +
                  std::to_string(fa.seq) + ")");
        }
      }
      if (page.value().size() < size_t(f.limit))
        break;
    }
  }
  v.acked = static_cast<int64_t>(acks.size());
  std::set<std::string> acked_keys;
  for (auto& a : acks) {
    if (!acked_keys.insert(a.key).second) {
      problem("key " + a.key + " acknowledged twice as a fresh append");
      continue;
    }
    auto it = by_key.find(a.key);
    if (it == by_key.end()) {
      ++v.missing;
      problem("acknowledged key " + a.key + " (" + a.id + " seq " + std::to_string(a.seq) +
              ") not on disk");
      continue;
    }
    ++v.found;
    if (it->second.id != a.id || it->second.seq != a.seq || it->second.fact_id != a.fact_id) {
      ++v.mismatched;
      problem("key " + a.key + ": acknowledged " + a.id + " seq " + std::to_string(a.seq) + " " +
              a.fact_id + ", on disk " + it->second.id + " seq " + std::to_string(it->second.seq) +
              " " + it->second.fact_id);
    }
  }
  v.extra = static_cast<int64_t>(by_key.size()) - v.found;
  if (v.extra > allowed_extra)
    problem(std::to_string(v.extra) + " facts on disk without an acknowledgement (at most " +
            std::to_string(allowed_extra) + " calls went unanswered)");
  v.alarms_expected = static_cast<int64_t>(alarm_ids.size());
  for (auto& id : alarm_ids) {
    if (alarm_fired.count(id))
      ++v.alarms_found;
    else
      problem("entity " + id + ": its alarm left no alarm_fired fact");
  }
  return v;
}

} // namespace factum::tools::loadgen
