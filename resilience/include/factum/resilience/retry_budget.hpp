// factum/resilience/retry_budget.hpp: the retry budget of one (entity, tool) pair (Finagle/gRPC
// style): retries may add at most a fraction of the calls, plus a
// small floor, over a sliding window, so retries cannot multiply the load on a failing tool.
// Plain value type; any single thread (not thread-safe): the entity's actor.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "factum/resilience/time_buckets.hpp"

namespace factum::resilience {

/// Budget settings. Defaults: 20 % of the calls plus 10 retries per minute, 1 s buckets.
struct retry_budget_config {
  double ratio = 0.2;          ///< retries allowed per call made in the window, [0, 1000]
  int64_t min_per_window = 10; ///< retries always allowed per window, even with no calls
  int64_t window_ms = 60000;   ///< sliding window length (> 0)
  int64_t bucket_ms = 1000;    ///< granularity (see time_buckets), in (0, window_ms]

  /// Ok, or INVALID_ARGUMENT naming the first bad field.
  status validate() const;
  /// {"ratio","min_per_window","window_ms","bucket_ms"}.
  nlohmann::json to_json() const;
  /// Parses to_json()'s form; missing members keep their defaults; validates the result.
  static result<retry_budget_config> from_json(const nlohmann::json& j);

  friend bool operator==(const retry_budget_config&, const retry_budget_config&) = default;
};

/// A retry budget. Call on_call(now) for every first attempt of an operation on the tool and
/// try_spend(now) before every retry: it answers whether the retry may go and, if so, counts
/// it. Within any window the retries spent never exceed floor(ratio * calls) + min_per_window
/// (calls and retries counted over the same window; retries are not calls). A refused retry
/// should fail the operation (or send it to the dead-letter queue) instead of retrying.
class retry_budget {
 public:
  /// An empty budget; an invalid `config` is replaced by the defaults.
  explicit retry_budget(retry_budget_config config = {});

  /// Records a first attempt (deposits `ratio` of a retry).
  void on_call(int64_t now_ms);
  /// Takes one retry from the budget if available; false (and nothing recorded) otherwise.
  bool try_spend(int64_t now_ms);
  /// Retries that try_spend would grant now.
  int64_t available(int64_t now_ms) const;
  /// First attempts inside the window.
  int64_t calls(int64_t now_ms) const { return window_.sum(now_ms).a; }
  /// Retries spent inside the window.
  int64_t retries(int64_t now_ms) const { return window_.sum(now_ms).b; }

  const retry_budget_config& config() const noexcept { return config_; }

  /// {"config":{...},"window":[[start_ms, calls, retries], ...]}.
  nlohmann::json to_json() const;
  /// Restores to_json()'s form; INVALID_ARGUMENT on malformed input.
  static result<retry_budget> from_json(const nlohmann::json& j);

 private:
  retry_budget_config config_;
  time_buckets window_; ///< a = calls, b = retries
};

} // namespace factum::resilience
