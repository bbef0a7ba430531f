// factum/resilience/time_buckets.hpp: two counters over a sliding time window, kept in fixed
// buckets so that the state stays small and serialisable (used by the circuit breaker's time
// window and by the retry budget). Plain value type; any single thread (not thread-safe).
#pragma once

#include <cstdint>
#include <deque>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::resilience {

/// Counts two kinds of events, `a` and `b` (e.g. calls and failures), over the last window_ms.
///
/// Time is cut into buckets [k * bucket_ms, (k + 1) * bucket_ms). A bucket counts while any
/// millisecond of it lies inside (now - window_ms, now], i.e. an event is forgotten window_ms to
/// window_ms + bucket_ms - 1 ms after it happened. A bucket_ms of 1 makes the window exact. An
/// event whose time lies before the newest bucket (a clock stepping back) joins the newest one.
class time_buckets {
 public:
  /// One bucket's counts.
  struct bucket {
    int64_t start_ms = 0; ///< a multiple of bucket_ms
    int64_t a = 0;        ///< events of the first kind
    int64_t b = 0;        ///< events of the second kind
    friend bool operator==(const bucket&, const bucket&) = default;
  };

  /// Sums over the window.
  struct totals {
    int64_t a = 0; ///< events of the first kind in the window
    int64_t b = 0; ///< events of the second kind in the window
  };

  /// A window of `window_ms` (default 60 s) in buckets of `bucket_ms` (default 1 s). Both must
  /// be positive with bucket_ms <= window_ms (checked by valid()).
  explicit time_buckets(int64_t window_ms = 60000, int64_t bucket_ms = 1000);

  /// Whether the window and bucket sizes are usable.
  static bool valid(int64_t window_ms, int64_t bucket_ms) noexcept {
    return window_ms > 0 && bucket_ms > 0 && bucket_ms <= window_ms;
  }

  /// Adds `da` and `db` at time `now_ms` and forgets what left the window.
  void add(int64_t now_ms, int64_t da, int64_t db);

  /// The sums of the buckets still inside the window at `now_ms` (does not forget anything).
  totals sum(int64_t now_ms) const;

  /// Forgets the buckets that left the window at `now_ms`.
  void expire(int64_t now_ms);

  /// Forgets everything.
  void clear() noexcept { buckets_.clear(); }

  int64_t window_ms() const noexcept { return window_ms_; }
  int64_t bucket_ms() const noexcept { return bucket_ms_; }
  const std::deque<bucket>& buckets() const noexcept { return buckets_; }

  /// [[start_ms, a, b], ...], oldest first.
  nlohmann::json to_json() const;
  /// Parses to_json()'s form for a window of the given sizes; INVALID_ARGUMENT on malformed
  /// input (not an array of three integers each, starts not increasing, negative counts).
  static result<time_buckets> from_json(const nlohmann::json& j, int64_t window_ms,
                                        int64_t bucket_ms);

 private:
  /// Whether no millisecond of `b` lies inside (now - window_ms, now].
  bool expired(const bucket& b, int64_t now_ms) const noexcept;

  int64_t window_ms_;
  int64_t bucket_ms_;
  std::deque<bucket> buckets_;
};

} // namespace factum::resilience
