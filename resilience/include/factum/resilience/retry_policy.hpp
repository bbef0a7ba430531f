// factum/resilience/retry_policy.hpp: how long to wait before the next attempt of a failed
// operation: exponential/linear/constant backoff, jitter (none, full, equal, ratio,
// decorrelated), Retry-After, per-operation defaults, presets per HTTP status and priorities.
// Plain value type; any single thread (not thread-safe; the rng is the caller's).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::resilience {

/// How the un-jittered delay grows with the attempt number n (1 = the first attempt failed).
enum class backoff_kind {
  exponential, ///< base * multiplier^(n-1)
  linear,      ///< base * n (the 504 preset of http_status_policy: 5 s, 10 s)
  constant,    ///< base every time (the 429 preset: exactly 60 s between attempts)
};

/// How randomness spreads the delay d (already capped at max_delay_ms).
enum class jitter_kind {
  none,         ///< d
  full,         ///< uniform in [0, d]
  equal,        ///< d/2 + uniform in [0, d/2]
  ratio,        ///< d * (1 + u * jitter_ratio), u uniform in [-1, 1] (jitter_ratio 0.5 gives
                ///< [0.5 d, 1.5 d]); clamped to max_delay_ms
  decorrelated, ///< AWS "decorrelated jitter": uniform in [base, 3 * previous], capped at
                ///< max_delay_ms; previous defaults to base; the backoff kind is not used
};

/// The caller's urgency. with_priority() derives a policy for it from a normal one.
enum class retry_priority {
  realtime,   ///< fail fast: half the delays, at most 5 s apart, at most 2 attempts
  normal,     ///< the policy as configured ("default" in JSON)
  background, ///< patient: 5x the delays and the ceiling, 2x the attempts
};

/// The operations with a default policy of their own (operation_policy; the per-operation table,
/// checked row by row in tests/resilience/retry_policy_test.cpp).
enum class operation_kind {
  fact_append,      ///< 1 s .. 60 s, 3 attempts: fast fail, facts critical
  entity_create,    ///< 1 s .. 60 s, 3 attempts: low retry, avoid duplicates
  config_update,    ///< 1 s .. 30 s, 3 attempts: fast fail, conflicts likely
  external_api,     ///< 2 s .. 120 s, 5 attempts: e.g. telephony (Twilio) voice calls
  webhook_delivery, ///< 5 s .. 300 s, 5 attempts: eventual consistency OK
  crm_sync,         ///< 10 s .. 600 s, 10 attempts: very eventual, high value
};

/// "exponential", "linear", "constant".
std::string_view to_string(backoff_kind k) noexcept;
/// "none", "full", "equal", "ratio", "decorrelated".
std::string_view to_string(jitter_kind k) noexcept;
/// "realtime", "default", "background".
std::string_view to_string(retry_priority p) noexcept;
/// "fact_append", "entity_create", "config_update", "external_api", "webhook_delivery",
/// "crm_sync".
std::string_view to_string(operation_kind k) noexcept;
/// The backoff kind named by to_string(), or nullopt.
std::optional<backoff_kind> parse_backoff_kind(std::string_view s) noexcept;
/// The jitter kind named by to_string(), or nullopt.
std::optional<jitter_kind> parse_jitter_kind(std::string_view s) noexcept;
/// Accepts "realtime", "default" (or "normal"), "background".
std::optional<retry_priority> parse_retry_priority(std::string_view s) noexcept;
/// Accepts the names above and the aliases "telephony", "voice_call", "twilio" and
/// "external" for external_api, "webhook" for webhook_delivery, "crm" for crm_sync.
std::optional<operation_kind> parse_operation_kind(std::string_view s) noexcept;

/// A uniform double in [0, 1) from 53 bits of `rng` (the same sequence on every platform).
double uniform01(std::mt19937_64& rng) noexcept;

/// A retry policy. The defaults are the balanced policy of normal priority: 1 s base,
/// 60 s ceiling, 5 attempts, multiplier 2, ratio jitter 0.5. Retry-After is honoured and capped
/// at 5 minutes.
///
/// Attempts are numbered from 1: next_delay(n, ...) is asked after attempt n failed and answers
/// the wait before attempt n + 1, or nullopt once n >= max_attempts (max_attempts counts every
/// attempt, the first included).
struct retry_policy {
  int64_t base_delay_ms = 1000;                     ///< first delay (and decorrelated floor)
  int64_t max_delay_ms = 60000;                     ///< ceiling of every computed delay
  double multiplier = 2.0;                          ///< growth of exponential backoff (>= 1)
  int max_attempts = 5;                             ///< attempts in all, the first included
  backoff_kind backoff = backoff_kind::exponential; ///< growth of the un-jittered delay
  jitter_kind jitter = jitter_kind::ratio;          ///< spread of the delay
  double jitter_ratio = 0.5;                        ///< for jitter_kind::ratio, in [0, 1]
  bool honour_retry_after = true;                   ///< use a server's Retry-After when given
  int64_t retry_after_cap_ms = 300000;              ///< longest Retry-After honoured (5 min)

  /// The delay before attempt `attempt + 1`, or nullopt when `attempt` >= max_attempts (give
  /// up). `previous_delay_ms` is the delay used before `attempt` (for decorrelated jitter; unset
  /// for the first retry). A `retry_after_ms` (the server's Retry-After, already converted to
  /// ms by the caller; negative counts as 0) wins over the computed delay when
  /// honour_retry_after, capped at retry_after_cap_ms, without jitter. Deterministic given the
  /// rng's state; draws at most one number.
  std::optional<int64_t> next_delay(int attempt, std::optional<int64_t> previous_delay_ms,
                                    std::optional<int64_t> retry_after_ms,
                                    std::mt19937_64& rng) const;

  /// The same with a supplier of uniform doubles in [0, 1) (called at most once).
  std::optional<int64_t> next_delay(int attempt, std::optional<int64_t> previous_delay_ms,
                                    std::optional<int64_t> retry_after_ms,
                                    const std::function<double()>& uniform) const;

  /// The un-jittered delay after attempt `attempt` (>= 1), capped at max_delay_ms.
  int64_t backoff_delay(int attempt) const;

  /// Whether another attempt follows attempt `attempt`.
  bool may_retry(int attempt) const noexcept { return attempt < max_attempts; }

  /// This policy scaled for a priority (document of retry_priority): realtime halves
  /// base_delay_ms, caps max_delay_ms at 5 s (never below the new base) and max_attempts at 2;
  /// background multiplies both delays by 5 and max_attempts by 2; normal changes nothing.
  /// Applied to the default policy this yields the three priority policies (priority_policy).
  retry_policy with_priority(retry_priority p) const;

  /// Ok, or INVALID_ARGUMENT naming the first bad field (negative delays, max < base,
  /// multiplier < 1, attempts < 1, jitter_ratio outside [0, 1], negative cap).
  status validate() const;

  /// All fields: {"base_delay_ms","max_delay_ms","multiplier","max_attempts","backoff",
  /// "jitter","jitter_ratio","honour_retry_after","retry_after_cap_ms"}.
  nlohmann::json to_json() const;
  /// Parses to_json()'s form; a missing member keeps its default; validates the result.
  static result<retry_policy> from_json(const nlohmann::json& j);

  friend bool operator==(const retry_policy&, const retry_policy&) = default;
};

/// The per-operation defaults of operation_kind (multiplier 2, ratio jitter 0.5, exponential
/// backoff).
retry_policy operation_policy(operation_kind k);

/// The default policy for a priority (= retry_policy{}.with_priority(p)).
retry_policy priority_policy(retry_priority p);

/// The retry policy for an HTTP status, or nullopt for a status not retried. max_attempts counts
/// every attempt, the first included (5 retries of a 429 are 6 attempts): 429: constant 60 s, no
/// jitter, 6 attempts; 500: exponential 1 s, ±25 % jitter, 4 attempts; 502 and 503: exponential
/// 2 s, ±25 %, 4 attempts; 504: linear 5 s (5 s, 10 s), no jitter, 3 attempts. 401 ("refresh the
/// token, retry once") is left to the caller: authorization failures are not retried by factum.
std::optional<retry_policy> http_status_policy(int status);

} // namespace factum::resilience
