// retry_policy.cpp: backoff, jitter and Retry-After arithmetic, the preset policies (per
// operation, per priority, per HTTP status), and the JSON form of a policy. Pure functions over
// plain values; any single thread.
#include "factum/resilience/retry_policy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "json_util.hpp"

namespace factum::resilience {

namespace {

using nlohmann::json;

constexpr double decorrelated_growth = 3.0; // AWS: sleep = min(cap, random(base, prev * 3))

int64_t to_ms(double v, int64_t lo, int64_t hi) {
  if (!(v == v)) // NaN: impossible with a validated policy; be safe
    return lo;
  v = std::clamp(v, static_cast<double>(lo), static_cast<double>(hi));
  return std::clamp(static_cast<int64_t>(std::llround(v)), lo, hi);
}

retry_policy make(int64_t base, int64_t max, int attempts) {
  retry_policy p;
  p.base_delay_ms = base;
  p.max_delay_ms = max;
  p.max_attempts = attempts;
  return p;
}

} // namespace

std::string_view to_string(backoff_kind k) noexcept {
  switch (k) {
  case backoff_kind::exponential: return "exponential";
  case backoff_kind::linear: return "linear";
  case backoff_kind::constant: return "constant";
  }
  return "exponential";
}

std::string_view to_string(jitter_kind k) noexcept {
  switch (k) {
  case jitter_kind::none: return "none";
  case jitter_kind::full: return "full";
  case jitter_kind::equal: return "equal";
  case jitter_kind::ratio: return "ratio";
  case jitter_kind::decorrelated: return "decorrelated";
  }
  return "none";
}

std::string_view to_string(retry_priority p) noexcept {
  switch (p) {
  case retry_priority::realtime: return "realtime";
  case retry_priority::normal: return "default";
  case retry_priority::background: return "background";
  }
  return "default";
}

std::string_view to_string(operation_kind k) noexcept {
  switch (k) {
  case operation_kind::fact_append: return "fact_append";
  case operation_kind::entity_create: return "entity_create";
  case operation_kind::config_update: return "config_update";
  case operation_kind::external_api: return "external_api";
  case operation_kind::webhook_delivery: return "webhook_delivery";
  case operation_kind::crm_sync: return "crm_sync";
  }
  return "external_api";
}

std::optional<backoff_kind> parse_backoff_kind(std::string_view s) noexcept {
  for (auto k : {backoff_kind::exponential, backoff_kind::linear, backoff_kind::constant})
    if (to_string(k) == s)
      return k;
  return std::nullopt;
}

std::optional<jitter_kind> parse_jitter_kind(std::string_view s) noexcept {
  for (auto k : {jitter_kind::none, jitter_kind::full, jitter_kind::equal, jitter_kind::ratio,
                 jitter_kind::decorrelated})
    if (to_string(k) == s)
      return k;
  return std::nullopt;
}

std::optional<retry_priority> parse_retry_priority(std::string_view s) noexcept {
  if (s == "normal")
    return retry_priority::normal;
  for (auto p : {retry_priority::realtime, retry_priority::normal, retry_priority::background})
    if (to_string(p) == s)
      return p;
  return std::nullopt;
}

std::optional<operation_kind> parse_operation_kind(std::string_view s) noexcept {
  for (auto k :
       {operation_kind::fact_append, operation_kind::entity_create, operation_kind::config_update,
        operation_kind::external_api, operation_kind::webhook_delivery, operation_kind::crm_sync})
    if (to_string(k) == s)
      return k;
  if (s == "telephony" || s == "voice_call" || s == "twilio" || s == "external")
    return operation_kind::external_api;
  if (s == "webhook")
    return operation_kind::webhook_delivery;
  if (s == "crm")
    return operation_kind::crm_sync;
  return std::nullopt;
}

double uniform01(std::mt19937_64& rng) noexcept {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int64_t retry_policy::backoff_delay(int attempt) const {
  int n = std::max(attempt, 1);
  double base = static_cast<double>(base_delay_ms);
  double d = base;
  switch (backoff) {
  case backoff_kind::exponential: d = base * std::pow(multiplier, n - 1); break;
  case backoff_kind::linear: d = base * n; break;
  case backoff_kind::constant: d = base; break;
  }
  if (!std::isfinite(d))
    d = static_cast<double>(max_delay_ms);
  return to_ms(d, 0, max_delay_ms);
}

std::optional<int64_t> retry_policy::next_delay(int attempt,
                                                std::optional<int64_t> previous_delay_ms,
                                                std::optional<int64_t> retry_after_ms,
                                                std::mt19937_64& rng) const {
  return next_delay(attempt, previous_delay_ms, retry_after_ms,
                    std::function<double()>([&rng] { return uniform01(rng); }));
}

std::optional<int64_t> retry_policy::next_delay(int attempt,
                                                std::optional<int64_t> previous_delay_ms,
                                                std::optional<int64_t> retry_after_ms,
                                                const std::function<double()>& uniform) const {
  if (!may_retry(attempt))
    return std::nullopt;
  if (retry_after_ms && honour_retry_after)
    return std::clamp<int64_t>(*retry_after_ms, 0, retry_after_cap_ms);

  auto u = [&] { return std::clamp(uniform(), 0.0, 1.0); };
  if (jitter == jitter_kind::decorrelated) {
    double base = static_cast<double>(base_delay_ms);
    double prev = static_cast<double>(previous_delay_ms.value_or(base_delay_ms));
    double upper = std::max(base, prev * decorrelated_growth);
    return to_ms(base + u() * (upper - base), base_delay_ms, max_delay_ms);
  }
  double d = static_cast<double>(backoff_delay(attempt));
  switch (jitter) {
  case jitter_kind::none: break;
  case jitter_kind::full: d = u() * d; break;
  case jitter_kind::equal: d = d / 2 + u() * (d / 2); break;
  case jitter_kind::ratio: d = d * (1.0 + (2.0 * u() - 1.0) * jitter_ratio); break;
  case jitter_kind::decorrelated: break;
  }
  return to_ms(d, 0, max_delay_ms);
}

retry_policy retry_policy::with_priority(retry_priority p) const {
  retry_policy out = *this;
  auto saturating = [](int64_t v, int64_t k) {
    constexpr int64_t top = std::numeric_limits<int64_t>::max();
    return v > top / k ? top : v * k;
  };
  switch (p) {
  case retry_priority::realtime:
    out.base_delay_ms = base_delay_ms / 2;
    out.max_delay_ms = std::max(out.base_delay_ms, std::min<int64_t>(max_delay_ms, 5000));
    out.max_attempts = std::min(max_attempts, 2);
    break;
  case retry_priority::normal: break;
  case retry_priority::background:
    out.base_delay_ms = saturating(base_delay_ms, 5);
    out.max_delay_ms = saturating(max_delay_ms, 5);
    constexpr int top = std::numeric_limits<int>::max();
    out.max_attempts = max_attempts > top / 2 ? top : max_attempts * 2;
    break;
  }
  return out;
}

status retry_policy::validate() const {
  auto bad = [](std::string_view field, std::string_view msg) {
    return detail::invalid("retry_policy." + std::string(field), msg);
  };
  if (base_delay_ms < 0)
    return bad("base_delay_ms", "must not be negative");
  if (max_delay_ms < base_delay_ms)
    return bad("max_delay_ms", "must be at least base_delay_ms");
  if (!(multiplier >= 1.0) || !std::isfinite(multiplier))
    return bad("multiplier", "must be a finite number >= 1");
  if (max_attempts < 1)
    return bad("max_attempts", "must be at least 1");
  if (!(jitter_ratio >= 0.0 && jitter_ratio <= 1.0))
    return bad("jitter_ratio", "must be between 0 and 1");
  if (retry_after_cap_ms < 0)
    return bad("retry_after_cap_ms", "must not be negative");
  return status::ok();
}

nlohmann::json retry_policy::to_json() const {
  return {{"base_delay_ms", base_delay_ms},
          {"max_delay_ms", max_delay_ms},
          {"multiplier", multiplier},
          {"max_attempts", max_attempts},
          {"backoff", to_string(backoff)},
          {"jitter", to_string(jitter)},
          {"jitter_ratio", jitter_ratio},
          {"honour_retry_after", honour_retry_after},
          {"retry_after_cap_ms", retry_after_cap_ms}};
}

result<retry_policy> retry_policy::from_json(const nlohmann::json& j) {
  constexpr std::string_view what = "retry_policy";
  if (auto s = detail::expect_object(j, what); !s)
    return s;
  retry_policy p;
  std::string backoff = std::string(to_string(p.backoff));
  std::string jitter = std::string(to_string(p.jitter));
  for (auto s : {detail::read_field(j, "base_delay_ms", p.base_delay_ms, what),
                 detail::read_field(j, "max_delay_ms", p.max_delay_ms, what),
                 detail::read_field(j, "multiplier", p.multiplier, what),
                 detail::read_field(j, "max_attempts", p.max_attempts, what),
                 detail::read_field(j, "backoff", backoff, what),
                 detail::read_field(j, "jitter", jitter, what),
                 detail::read_field(j, "jitter_ratio", p.jitter_ratio, what),
                 detail::read_field(j, "honour_retry_after", p.honour_retry_after, what),
                 detail::read_field(j, "retry_after_cap_ms", p.retry_after_cap_ms, what)})
    if (!s)
      return s;
  auto b = parse_backoff_kind(backoff);
  if (!b)
    return detail::invalid("retry_policy.backoff", "must be exponential, linear or constant");
  p.backoff = *b;
  auto k = parse_jitter_kind(jitter);
  if (!k)
    return detail::invalid("retry_policy.jitter",
                           "must be none, full, equal, ratio or decorrelated");
  p.jitter = *k;
  if (auto s = p.validate(); !s)
    return s;
  return p;
}

retry_policy operation_policy(operation_kind k) {
  switch (k) {
  case operation_kind::fact_append: return make(1000, 60000, 3);
  case operation_kind::entity_create: return make(1000, 60000, 3);
  case operation_kind::config_update: return make(1000, 30000, 3);
  case operation_kind::external_api: return make(2000, 120000, 5);
  case operation_kind::webhook_delivery: return make(5000, 300000, 5);
  case operation_kind::crm_sync: return make(10000, 600000, 10);
  }
  return retry_policy{};
}

retry_policy priority_policy(retry_priority p) {
  return retry_policy{}.with_priority(p);
}

std::optional<retry_policy> http_status_policy(int status) {
  retry_policy p;
  switch (status) {
  case 429:
    p = make(60000, 60000, 6);
    p.backoff = backoff_kind::constant;
    p.jitter = jitter_kind::none;
    return p;
  case 500:
    p = make(1000, 60000, 4);
    p.jitter_ratio = 0.25;
    return p;
  case 502:
  case 503:
    p = make(2000, 60000, 4);
    p.jitter_ratio = 0.25;
    return p;
  case 504:
    p = make(5000, 60000, 3);
    p.backoff = backoff_kind::linear;
    p.jitter = jitter_kind::none;
    return p;
  default: return std::nullopt;
  }
}

} // namespace factum::resilience
