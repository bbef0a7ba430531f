// outbox_board.cpp: the configured outbox sinks of the process (outbox_board.hpp): validation of
// runtime_config::outbox at start, the routes an entity's facts take, each sink's breaker,
// backoff, counters and lag. Any thread: the breaker and the lag under the sink's mutex.
#include "outbox_board.hpp"

#include <algorithm>

#include "factum/storage/fact.hpp"

namespace factum::detail {

namespace {

status bad(const std::string& field, const std::string& why) {
  return {errc::invalid_argument, "outbox." + field + ": " + why};
}

bool valid_sink_name(const std::string& n) {
  if (n.empty() || n.size() > 64)
    return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

bool among(const std::vector<std::string>& list, const std::string& v) {
  return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
}

} // namespace

// -- one sink -----------------------------------------------------------------------------------

outbox_sink_state::outbox_sink_state(std::string name, outbox_sink sink,
                                     resilience::retry_policy retry,
                                     resilience::breaker_config breaker)
    : name_(std::move(name)), sink_(std::move(sink)), retry_(retry),
      breaker_("outbox:" + name_, breaker), rng_(std::random_device{}()) {}

resilience::breaker_decision outbox_sink_state::allow(int64_t now_ms) {
  std::lock_guard<std::mutex> g(mu_);
  auto d = breaker_.allow(now_ms);
  if (!d.allowed)
    fast_fails.fetch_add(1, std::memory_order_relaxed);
  return d;
}

void outbox_sink_state::record(const outbox_ack& ack, int64_t now_ms) {
  std::lock_guard<std::mutex> g(mu_);
  switch (ack.result) {
  case outbox_ack::outcome::acknowledged:
    delivered.fetch_add(1, std::memory_order_relaxed);
    (void)breaker_.on_success(now_ms);
    break;
  case outbox_ack::outcome::refused: // the sink answered: it is up
    refused.fetch_add(1, std::memory_order_relaxed);
    (void)breaker_.on_success(now_ms);
    break;
  case outbox_ack::outcome::retry:
    retried.fetch_add(1, std::memory_order_relaxed);
    (void)breaker_.on_failure(now_ms, true);
    break;
  }
}

void outbox_sink_state::forget_trial() {
  std::lock_guard<std::mutex> g(mu_);
  breaker_.forget_trials();
}

int64_t outbox_sink_state::backoff_ms(int64_t attempts, std::optional<int64_t> retry_after_ms) {
  std::lock_guard<std::mutex> g(mu_);
  // The policy's max_attempts does not end delivery: past it, the delay stays at its ceiling.
  auto p = retry_;
  p.max_attempts = std::numeric_limits<int>::max();
  auto a = static_cast<int>(std::clamp<int64_t>(attempts, 1, 1'000'000));
  auto d = p.next_delay(a, std::nullopt, retry_after_ms, rng_);
  return std::max<int64_t>(1, d.value_or(p.max_delay_ms));
}

void outbox_sink_state::set_lag(const std::string& entity, int64_t count, int64_t oldest_ms) {
  std::lock_guard<std::mutex> g(mu_);
  if (count <= 0)
    lag_.erase(entity);
  else
    lag_[entity] = lag{count, oldest_ms};
}

void outbox_sink_state::add_lag(const std::string& entity, int64_t count, int64_t oldest_ms) {
  if (count <= 0)
    return;
  std::lock_guard<std::mutex> g(mu_);
  auto& l = lag_[entity];
  l.oldest_ms = l.count == 0 ? oldest_ms : std::min(l.oldest_ms, oldest_ms);
  l.count += count;
}

outbox_snapshot outbox_sink_state::snapshot(int64_t now_ms) const {
  outbox_snapshot s;
  s.sink = name_;
  s.delivered = delivered.load(std::memory_order_relaxed);
  s.retried = retried.load(std::memory_order_relaxed);
  s.refused = refused.load(std::memory_order_relaxed);
  s.fast_fails = fast_fails.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> g(mu_);
  s.breaker = breaker_.state();
  std::optional<int64_t> oldest;
  for (auto& [_, l] : lag_) {
    s.lag += static_cast<uint64_t>(l.count);
    oldest = oldest ? std::min(*oldest, l.oldest_ms) : l.oldest_ms;
  }
  if (oldest)
    s.oldest_age_ms = std::max<int64_t>(0, now_ms - *oldest);
  return s;
}

// -- the board ----------------------------------------------------------------------------------

result<std::unique_ptr<outbox_board>> outbox_board::make(const outbox_config& cfg) {
  auto b = std::make_unique<outbox_board>();
  if (cfg.batch < 1 || cfg.batch > 10'000)
    return bad("batch", "must be between 1 and 10000");
  b->batch_ = cfg.batch;
  for (auto& [name, sink] : cfg.sinks) {
    std::string f = "sinks." + name;
    if (!valid_sink_name(name))
      return bad(f, "a sink name is 1 to 64 characters of [A-Za-z0-9._-]");
    if (!sink.deliver)
      return bad(f, "has no transport");
    resilience::retry_policy retry;
    if (!sink.retry.is_null()) {
      auto r = resilience::retry_policy::from_json(sink.retry);
      if (!r)
        return bad(f + ".retry", r.error().message());
      retry = *r;
    }
    resilience::breaker_config breaker;
    if (!sink.breaker.is_null()) {
      auto r = resilience::breaker_config::from_json(sink.breaker);
      if (!r)
        return bad(f + ".breaker", r.error().message());
      breaker = *r;
    }
    b->sinks_.emplace(name, std::make_unique<outbox_sink_state>(name, sink, retry, breaker));
  }
  for (size_t i = 0; i < cfg.routes.size(); ++i) {
    auto& r = cfg.routes[i];
    std::string f = "routes[" + std::to_string(i) + "]";
    if (!b->sinks_.count(r.sink))
      return bad(f + ".sink", "no sink named '" + r.sink + "'");
    if (r.fact_types.empty())
      return bad(f + ".fact_types", "must name at least one fact type");
    for (auto& t : r.fact_types)
      if (auto st = validate_fact_token(t, "fact type"); !st)
        return bad(f + ".fact_types", st.message());
    b->routes_.push_back(r);
  }
  return b;
}

std::vector<outbox_target> outbox_board::targets_for(const entity_key& key) const {
  std::vector<outbox_target> out;
  for (auto& r : routes_) {
    if (!among(r.tenants, key.tenant) || !among(r.entity_types, key.type))
      continue;
    auto* sink = sinks_.at(r.sink).get();
    auto it = std::find_if(out.begin(), out.end(), [&](auto& t) { return t.sink == sink; });
    if (it == out.end())
      it = out.insert(out.end(), outbox_target{sink, {}});
    it->types.insert(it->types.end(), r.fact_types.begin(), r.fact_types.end());
  }
  for (auto& t : out) {
    std::sort(t.types.begin(), t.types.end());
    t.types.erase(std::unique(t.types.begin(), t.types.end()), t.types.end());
  }
  std::sort(out.begin(), out.end(),
            [](auto& a, auto& b) { return a.sink->name() < b.sink->name(); });
  return out;
}

std::vector<outbox_snapshot> outbox_board::snapshot(int64_t now_ms) const {
  std::vector<outbox_snapshot> out;
  for (auto& [_, s] : sinks_)
    out.push_back(s->snapshot(now_ms));
  return out;
}

void register_outbox_metrics(metrics::registry& r, const outbox_board* board,
                             std::function<int64_t()> now) {
  using metrics::kind;
  auto each = [board, now](auto value) {
    return [board, now, value](metrics::sample_writer& w) {
      if (board)
        for (auto& s : board->snapshot(now()))
          w.add({s.sink}, value(s));
    };
  };
  using snap = const outbox_snapshot&;
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  r.add("factum_outbox_lag",
        "Facts committed and not yet acknowledged by the sink, over the entities this process "
        "has seen since it started.",
        kind::gauge, {"sink"}, each([n](snap o) { return n(o.lag); }));
  r.add("factum_outbox_oldest_unacked_age_seconds",
        "Age of the oldest fact the sink has not acknowledged (0 when none).", kind::gauge,
        {"sink"}, each([](snap o) { return static_cast<double>(o.oldest_age_ms) / 1e3; }));
  r.add("factum_outbox_delivered_total", "Facts the sink acknowledged.", kind::counter, {"sink"},
        each([n](snap o) { return n(o.delivered); }));
  r.add("factum_outbox_retries_total",
        "Deliveries that failed and are tried again after a backoff.", kind::counter, {"sink"},
        each([n](snap o) { return n(o.retried); }));
  r.add("factum_outbox_refused_total", "Facts the sink refused for good, each one a dead letter.",
        kind::counter, {"sink"}, each([n](snap o) { return n(o.refused); }));
  r.add("factum_outbox_fast_fails_total", "Deliveries the sink's open circuit breaker held back.",
        kind::counter, {"sink"}, each([n](snap o) { return n(o.fast_fails); }));
  r.add("factum_outbox_breaker_open",
        "1 while the sink's circuit breaker holds deliveries back (open or forced open).",
        kind::gauge, {"sink"}, each([](snap o) {
          return o.breaker == resilience::breaker_state::open ||
                     o.breaker == resilience::breaker_state::forced_open
                   ? 1.0
                   : 0.0;
        }));
}

} // namespace factum::detail
