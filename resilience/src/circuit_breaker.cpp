// circuit_breaker.cpp: the breaker's state machine, its windows and rules, and its JSON state.
// Plain value type; any single thread (the entity's actor).
#include "factum/resilience/circuit_breaker.hpp"

#include "factum/resilience/classifier.hpp"
#include "json_util.hpp"

namespace factum::resilience {

namespace {

using nlohmann::json;

// Whether `failures` of `calls` reach `rate` (a fraction); tolerant of binary rounding.
bool rate_reached(int64_t failures, int64_t calls, double rate) {
  return calls > 0 && static_cast<double>(failures) + 1e-9 >= rate * static_cast<double>(calls);
}

// Which rule of one window trips, if any: "failures" or "failure_rate".
const char* tripped(int64_t calls, int64_t failures, int64_t min_calls, int64_t threshold,
                    double rate) {
  if (calls <= 0 || calls < min_calls)
    return nullptr;
  if (threshold > 0 && failures >= threshold)
    return "failures";
  if (rate > 0.0 && rate_reached(failures, calls, rate))
    return "failure_rate";
  return nullptr;
}

status check_rate(double rate, std::string_view field) {
  if (!(rate >= 0.0 && rate <= 1.0))
    return detail::invalid(field, "must be between 0 and 1");
  return status::ok();
}

} // namespace

std::string_view to_string(breaker_state s) noexcept {
  switch (s) {
  case breaker_state::closed: return "CLOSED";
  case breaker_state::open: return "OPEN";
  case breaker_state::half_open: return "HALF_OPEN";
  case breaker_state::forced_open: return "FORCED_OPEN";
  case breaker_state::disabled: return "DISABLED";
  }
  return "CLOSED";
}

std::optional<breaker_state> parse_breaker_state(std::string_view s) noexcept {
  for (auto v : {breaker_state::closed, breaker_state::open, breaker_state::half_open,
                 breaker_state::forced_open, breaker_state::disabled})
    if (to_string(v) == s)
      return v;
  return std::nullopt;
}

// -- breaker_config ------------------------------------------------------------------------------

status breaker_config::validate() const {
  const auto& c = count_window;
  if (c.size < 0)
    return detail::invalid("breaker.count_window.size", "must not be negative");
  if (c.size > 0) {
    if (c.min_calls < 0 || c.min_calls > c.size)
      return detail::invalid("breaker.count_window.min_calls", "must be between 0 and size");
    if (c.failure_threshold < 0 || c.failure_threshold > c.size)
      return detail::invalid("breaker.count_window.failure_threshold",
                             "must be between 0 and size");
  }
  if (auto s = check_rate(c.failure_rate, "breaker.count_window.failure_rate"); !s)
    return s;
  const auto& t = time_window;
  if (t.window_ms < 0)
    return detail::invalid("breaker.time_window.window_ms", "must not be negative");
  if (t.window_ms > 0 && !time_buckets::valid(t.window_ms, t.bucket_ms))
    return detail::invalid("breaker.time_window.bucket_ms",
                           "must be positive and at most window_ms");
  if (t.min_calls < 0)
    return detail::invalid("breaker.time_window.min_calls", "must not be negative");
  if (t.failure_threshold < 0)
    return detail::invalid("breaker.time_window.failure_threshold", "must not be negative");
  if (auto s = check_rate(t.failure_rate, "breaker.time_window.failure_rate"); !s)
    return s;
  if (cooldown_ms < 0)
    return detail::invalid("breaker.cooldown_ms", "must not be negative");
  if (half_open_max_trials < 1)
    return detail::invalid("breaker.half_open_max_trials", "must be at least 1");
  if (success_threshold < 1)
    return detail::invalid("breaker.success_threshold", "must be at least 1");
  if (trial_timeout_ms < 0)
    return detail::invalid("breaker.trial_timeout_ms", "must not be negative");
  return status::ok();
}

nlohmann::json breaker_config::to_json() const {
  return {{"count_window",
           {{"size", count_window.size},
            {"min_calls", count_window.min_calls},
            {"failure_threshold", count_window.failure_threshold},
            {"failure_rate", count_window.failure_rate}}},
          {"time_window",
           {{"window_ms", time_window.window_ms},
            {"bucket_ms", time_window.bucket_ms},
            {"min_calls", time_window.min_calls},
            {"failure_threshold", time_window.failure_threshold},
            {"failure_rate", time_window.failure_rate}}},
          {"cooldown_ms", cooldown_ms},
          {"half_open_max_trials", half_open_max_trials},
          {"success_threshold", success_threshold},
          {"trial_timeout_ms", trial_timeout_ms}};
}

result<breaker_config> breaker_config::from_json(const nlohmann::json& j) {
  if (auto s = detail::expect_object(j, "breaker"); !s)
    return s;
  breaker_config c;
  if (auto it = j.find("count_window"); it != j.end()) {
    constexpr std::string_view w = "breaker.count_window";
    if (auto s = detail::expect_object(*it, w); !s)
      return s;
    auto& cw = c.count_window;
    for (auto s : {detail::read_field(*it, "size", cw.size, w),
                   detail::read_field(*it, "min_calls", cw.min_calls, w),
                   detail::read_field(*it, "failure_threshold", cw.failure_threshold, w),
                   detail::read_field(*it, "failure_rate", cw.failure_rate, w)})
      if (!s)
        return s;
  }
  if (auto it = j.find("time_window"); it != j.end()) {
    constexpr std::string_view w = "breaker.time_window";
    if (auto s = detail::expect_object(*it, w); !s)
      return s;
    auto& tw = c.time_window;
    for (auto s : {detail::read_field(*it, "window_ms", tw.window_ms, w),
                   detail::read_field(*it, "bucket_ms", tw.bucket_ms, w),
                   detail::read_field(*it, "min_calls", tw.min_calls, w),
                   detail::read_field(*it, "failure_threshold", tw.failure_threshold, w),
                   detail::read_field(*it, "failure_rate", tw.failure_rate, w)})
      if (!s)
        return s;
  }
  constexpr std::string_view w = "breaker";
  for (auto s : {detail::read_field(j, "cooldown_ms", c.cooldown_ms, w),
                 detail::read_field(j, "half_open_max_trials", c.half_open_max_trials, w),
                 detail::read_field(j, "success_threshold", c.success_threshold, w),
                 detail::read_field(j, "trial_timeout_ms", c.trial_timeout_ms, w)})
    if (!s)
      return s;
  if (auto s = c.validate(); !s)
    return s;
  return c;
}

// -- transitions and errors ---------------------------------------------------------------------

nlohmann::json breaker_transition::fact_data() const {
  return {{"circuit_name", circuit_name},
          {"tool_id", circuit_name},
          {"previous_state", to_string(from)},
          {"new_state", to_string(to)},
          {"reason", reason},
          {"failure_count", counters.failure_count},
          {"success_count", counters.success_count},
          {"request_count", counters.request_count}};
}

call_error circuit_open_error(std::string_view circuit_name, const breaker_decision& d) {
  call_error e(error_category::transient, std::string(circuit_open_code),
               "circuit breaker '" + std::string(circuit_name) + "' is " +
                 std::string(to_string(d.state)),
               503);
  e.details["circuit_name"] = std::string(circuit_name);
  e.details["circuit_state"] = std::string(to_string(d.state));
  if (d.retry_after_ms > 0)
    e.details["retry_after_ms"] = d.retry_after_ms;
  return e;
}

// -- circuit_breaker ----------------------------------------------------------------------------

circuit_breaker::circuit_breaker(std::string name, breaker_config config, int64_t now_ms)
    : name_(std::move(name)), config_(config.validate() ? std::move(config) : breaker_config{}),
      state_since_ms_(now_ms) {
  if (config_.time_window.window_ms > 0)
    times_ = time_buckets(config_.time_window.window_ms, config_.time_window.bucket_ms);
}

void circuit_breaker::clear_windows() {
  outcomes_.clear();
  times_.clear();
}

void circuit_breaker::record(int64_t now_ms, bool failure) {
  if (config_.count_window.size > 0) {
    outcomes_.push_back(failure);
    while (static_cast<int64_t>(outcomes_.size()) > config_.count_window.size)
      outcomes_.pop_front();
  }
  if (config_.time_window.window_ms > 0)
    times_.add(now_ms, 1, failure ? 1 : 0);
}

breaker_counters circuit_breaker::count_counters() const {
  breaker_counters c;
  for (bool f : outcomes_)
    ++(f ? c.failure_count : c.success_count);
  c.request_count = static_cast<int64_t>(outcomes_.size());
  return c;
}

breaker_counters circuit_breaker::time_counters(int64_t now_ms) const {
  auto t = times_.sum(now_ms);
  return breaker_counters{t.b, t.a - t.b, t.a};
}

breaker_counters circuit_breaker::window_counters(int64_t now_ms) const {
  if (config_.count_window.size > 0)
    return count_counters();
  if (config_.time_window.window_ms > 0)
    return time_counters(now_ms);
  return {};
}

breaker_counters circuit_breaker::leaving_counters(int64_t now_ms) const {
  if (state_ == breaker_state::closed)
    return window_counters(now_ms);
  return breaker_counters{episode_.failures, episode_.successes, episode_.requests};
}

breaker_transition circuit_breaker::move_to(breaker_state to, std::string reason,
                                            breaker_counters counters, int64_t now_ms) {
  breaker_transition t{name_, state_, to, std::move(reason), counters, now_ms};
  state_ = to;
  state_since_ms_ = now_ms;
  episode_ = episode{};
  trials_in_flight_ = 0;
  trial_successes_ = 0;
  if (to == breaker_state::open)
    opened_at_ms_ = now_ms;
  if (to == breaker_state::closed)
    clear_windows();
  return t;
}

std::optional<breaker_transition> circuit_breaker::evaluate(int64_t now_ms) {
  const auto& cw = config_.count_window;
  if (cw.size > 0) {
    auto c = count_counters();
    if (auto rule = tripped(c.request_count, c.failure_count, cw.min_calls, cw.failure_threshold,
                            cw.failure_rate))
      return move_to(breaker_state::open, std::string("count_window_") + rule, c, now_ms);
  }
  const auto& tw = config_.time_window;
  if (tw.window_ms > 0) {
    auto c = time_counters(now_ms);
    if (auto rule = tripped(c.request_count, c.failure_count, tw.min_calls, tw.failure_threshold,
                            tw.failure_rate))
      return move_to(breaker_state::open, std::string("time_window_") + rule, c, now_ms);
  }
  return std::nullopt;
}

std::optional<breaker_transition> circuit_breaker::poll(int64_t now_ms) {
  if (state_ == breaker_state::open && now_ms - opened_at_ms_ >= config_.cooldown_ms)
    return move_to(breaker_state::half_open, "cooldown_elapsed", leaving_counters(now_ms), now_ms);
  return std::nullopt;
}

breaker_decision circuit_breaker::allow(int64_t now_ms) {
  breaker_decision d;
  d.transition = poll(now_ms);
  ++episode_.requests;
  d.state = state_;
  switch (state_) {
  case breaker_state::closed: d.reason = "closed"; break;
  case breaker_state::disabled: d.reason = "disabled"; break;
  case breaker_state::forced_open:
    d.allowed = false;
    d.reason = "forced_open";
    break;
  case breaker_state::open:
    d.allowed = false;
    d.reason = "open";
    d.retry_after_ms = opened_at_ms_ + config_.cooldown_ms - now_ms;
    break;
  case breaker_state::half_open:
    if (trials_in_flight_ > 0 && config_.trial_timeout_ms > 0 &&
        now_ms - last_trial_ms_ >= config_.trial_timeout_ms)
      trials_in_flight_ = 0; // their outcomes never came: presumed lost
    if (trials_in_flight_ < config_.half_open_max_trials) {
      ++trials_in_flight_;
      last_trial_ms_ = now_ms;
      d.reason = "half_open_trial";
    } else {
      d.allowed = false;
      d.reason = "half_open_busy";
    }
    break;
  }
  return d;
}

std::optional<breaker_transition> circuit_breaker::on_success(int64_t now_ms) {
  ++episode_.successes;
  switch (state_) {
  case breaker_state::closed: record(now_ms, false); return evaluate(now_ms);
  case breaker_state::half_open:
    if (trials_in_flight_ > 0)
      --trials_in_flight_;
    if (++trial_successes_ >= config_.success_threshold)
      return move_to(breaker_state::closed, "success_threshold_met", leaving_counters(now_ms),
                     now_ms);
    return std::nullopt;
  default: return std::nullopt;
  }
}

std::optional<breaker_transition> circuit_breaker::on_failure(int64_t now_ms, bool counts) {
  if (!counts)
    return on_success(now_ms);
  ++episode_.failures;
  switch (state_) {
  case breaker_state::closed: record(now_ms, true); return evaluate(now_ms);
  case breaker_state::half_open:
    return move_to(breaker_state::open, "half_open_trial_failed", leaving_counters(now_ms), now_ms);
  default: return std::nullopt;
  }
}

std::optional<breaker_transition> circuit_breaker::on_failure(int64_t now_ms,
                                                              error_category category) {
  return on_failure(now_ms, trips_breaker(category));
}

std::optional<breaker_transition> circuit_breaker::force_open(int64_t now_ms, std::string reason) {
  if (state_ == breaker_state::forced_open)
    return std::nullopt;
  return move_to(breaker_state::forced_open, std::move(reason), leaving_counters(now_ms), now_ms);
}

std::optional<breaker_transition> circuit_breaker::reset(int64_t now_ms, std::string reason) {
  if (state_ == breaker_state::closed) {
    clear_windows();
    return std::nullopt;
  }
  return move_to(breaker_state::closed, std::move(reason), leaving_counters(now_ms), now_ms);
}

std::optional<breaker_transition> circuit_breaker::disable(int64_t now_ms, std::string reason) {
  if (state_ == breaker_state::disabled)
    return std::nullopt;
  return move_to(breaker_state::disabled, std::move(reason), leaving_counters(now_ms), now_ms);
}

status circuit_breaker::set_config(breaker_config config) {
  if (auto s = config.validate(); !s)
    return s;
  if (config.count_window.size == 0)
    outcomes_.clear();
  while (static_cast<int64_t>(outcomes_.size()) > config.count_window.size)
    outcomes_.pop_front();
  const auto& tw = config.time_window;
  if (tw.window_ms == 0)
    times_.clear();
  else if (tw.window_ms != times_.window_ms() || tw.bucket_ms != times_.bucket_ms())
    times_ = time_buckets(tw.window_ms, tw.bucket_ms);
  config_ = std::move(config);
  return status::ok();
}

nlohmann::json circuit_breaker::to_json() const {
  std::string window;
  for (bool f : outcomes_)
    window.push_back(f ? 'F' : 'S');
  return {{"name", name_},
          {"config", config_.to_json()},
          {"state", to_string(state_)},
          {"state_since_ms", state_since_ms_},
          {"opened_at_ms", opened_at_ms_},
          {"count_window", window},
          {"time_window", times_.to_json()},
          {"trials_in_flight", trials_in_flight_},
          {"trial_successes", trial_successes_},
          {"last_trial_ms", last_trial_ms_},
          {"episode",
           {{"requests", episode_.requests},
            {"successes", episode_.successes},
            {"failures", episode_.failures}}}};
}

result<circuit_breaker> circuit_breaker::from_json(const nlohmann::json& j) {
  constexpr std::string_view w = "breaker state";
  if (auto s = detail::expect_object(j, w); !s)
    return s;
  for (const char* key : {"name", "config", "state"})
    if (!j.contains(key))
      return detail::invalid(w, std::string("lacks \"") + key + "\"");
  std::string name, state, window;
  if (auto s = detail::read_field(j, "name", name, w); !s)
    return s;
  auto cfg = breaker_config::from_json(j["config"]);
  if (!cfg)
    return cfg.error();
  circuit_breaker b(std::move(name), cfg.value());
  if (auto s = detail::read_field(j, "state", state, w); !s)
    return s;
  auto st = parse_breaker_state(state);
  if (!st)
    return detail::invalid(std::string(w) + ".state", "is not a breaker state");
  b.state_ = *st;
  for (auto s : {detail::read_field(j, "state_since_ms", b.state_since_ms_, w),
                 detail::read_field(j, "opened_at_ms", b.opened_at_ms_, w),
                 detail::read_field(j, "count_window", window, w),
                 detail::read_field(j, "trials_in_flight", b.trials_in_flight_, w),
                 detail::read_field(j, "trial_successes", b.trial_successes_, w),
                 detail::read_field(j, "last_trial_ms", b.last_trial_ms_, w)})
    if (!s)
      return s;
  if (static_cast<int64_t>(window.size()) > b.config_.count_window.size)
    return detail::invalid(std::string(w) + ".count_window", "is longer than the window size");
  for (char ch : window) {
    if (ch != 'S' && ch != 'F')
      return detail::invalid(std::string(w) + ".count_window", "must consist of S and F");
    b.outcomes_.push_back(ch == 'F');
  }
  if (auto it = j.find("time_window"); it != j.end() && b.config_.time_window.window_ms > 0) {
    auto t = time_buckets::from_json(*it, b.config_.time_window.window_ms,
                                     b.config_.time_window.bucket_ms);
    if (!t)
      return t.error();
    b.times_ = std::move(t.value());
  }
  if (auto it = j.find("episode"); it != j.end()) {
    constexpr std::string_view e = "breaker state.episode";
    if (auto s = detail::expect_object(*it, e); !s)
      return s;
    for (auto s : {detail::read_field(*it, "requests", b.episode_.requests, e),
                   detail::read_field(*it, "successes", b.episode_.successes, e),
                   detail::read_field(*it, "failures", b.episode_.failures, e)})
      if (!s)
        return s;
  }
  if (b.trials_in_flight_ < 0 || b.trial_successes_ < 0 || b.episode_.requests < 0 ||
      b.episode_.successes < 0 || b.episode_.failures < 0)
    return detail::invalid(w, "counters must not be negative");
  return b;
}

} // namespace factum::resilience
