// retry_budget.cpp: the sliding-window retry budget and its JSON state. Plain value type; any
// single thread (the entity's actor).
#include "factum/resilience/retry_budget.hpp"

#include <cmath>

#include "json_util.hpp"

namespace factum::resilience {

status retry_budget_config::validate() const {
  if (!(ratio >= 0.0 && ratio <= 1000.0))
    return detail::invalid("retry_budget.ratio", "must be between 0 and 1000");
  if (min_per_window < 0)
    return detail::invalid("retry_budget.min_per_window", "must not be negative");
  if (window_ms <= 0)
    return detail::invalid("retry_budget.window_ms", "must be positive");
  if (!time_buckets::valid(window_ms, bucket_ms))
    return detail::invalid("retry_budget.bucket_ms", "must be positive and at most window_ms");
  return status::ok();
}

nlohmann::json retry_budget_config::to_json() const {
  return {{"ratio", ratio},
          {"min_per_window", min_per_window},
          {"window_ms", window_ms},
          {"bucket_ms", bucket_ms}};
}

result<retry_budget_config> retry_budget_config::from_json(const nlohmann::json& j) {
  constexpr std::string_view w = "retry_budget";
  if (auto s = detail::expect_object(j, w); !s)
    return s;
  retry_budget_config c;
  for (auto s : {detail::read_field(j, "ratio", c.ratio, w),
                 detail::read_field(j, "min_per_window", c.min_per_window, w),
                 detail::read_field(j, "window_ms", c.window_ms, w),
                 detail::read_field(j, "bucket_ms", c.bucket_ms, w)})
    if (!s)
      return s;
  if (auto s = c.validate(); !s)
    return s;
  return c;
}

retry_budget::retry_budget(retry_budget_config config)
    : config_(config.validate() ? config : retry_budget_config{}),
      window_(config_.window_ms, config_.bucket_ms) {}

void retry_budget::on_call(int64_t now_ms) {
  window_.add(now_ms, 1, 0);
}

int64_t retry_budget::available(int64_t now_ms) const {
  auto t = window_.sum(now_ms);
  // The epsilon keeps e.g. 0.29 * 100 from flooring to 28.
  double earned = std::floor(config_.ratio * static_cast<double>(t.a) + 1e-9);
  int64_t allowed = static_cast<int64_t>(earned) + config_.min_per_window;
  return allowed > t.b ? allowed - t.b : 0;
}

bool retry_budget::try_spend(int64_t now_ms) {
  window_.expire(now_ms);
  if (available(now_ms) <= 0)
    return false;
  window_.add(now_ms, 0, 1);
  return true;
}

nlohmann::json retry_budget::to_json() const {
  return {{"config", config_.to_json()}, {"window", window_.to_json()}};
}

result<retry_budget> retry_budget::from_json(const nlohmann::json& j) {
  if (auto s = detail::expect_object(j, "retry_budget state"); !s)
    return s;
  retry_budget_config cfg;
  if (auto it = j.find("config"); it != j.end()) {
    auto c = retry_budget_config::from_json(*it);
    if (!c)
      return c.error();
    cfg = c.value();
  }
  retry_budget b(cfg);
  if (auto it = j.find("window"); it != j.end()) {
    auto w = time_buckets::from_json(*it, cfg.window_ms, cfg.bucket_ms);
    if (!w)
      return w.error();
    b.window_ = std::move(w.value());
  }
  return b;
}

} // namespace factum::resilience
