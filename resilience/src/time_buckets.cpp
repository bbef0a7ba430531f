// time_buckets.cpp: bucketed sliding-window counters and their JSON form. Plain value type; any
// single thread.
#include "factum/resilience/time_buckets.hpp"

#include <algorithm>

#include "json_util.hpp"

namespace factum::resilience {

namespace {

// floor(t / size) * size, also for negative t.
int64_t bucket_start(int64_t t, int64_t size) {
  int64_t q = t / size;
  if (t % size != 0 && t < 0)
    --q;
  return q * size;
}

} // namespace

time_buckets::time_buckets(int64_t window_ms, int64_t bucket_ms)
    : window_ms_(window_ms > 0 ? window_ms : 1),
      bucket_ms_(bucket_ms > 0 ? std::min(bucket_ms, window_ms_) : 1) {}

bool time_buckets::expired(const bucket& b, int64_t now_ms) const noexcept {
  // The bucket covers [start, start + size); the window is (now - window, now].
  return b.start_ms + bucket_ms_ <= now_ms - window_ms_ + 1;
}

void time_buckets::expire(int64_t now_ms) {
  while (!buckets_.empty() && expired(buckets_.front(), now_ms))
    buckets_.pop_front();
}

void time_buckets::add(int64_t now_ms, int64_t da, int64_t db) {
  expire(now_ms);
  int64_t start = bucket_start(now_ms, bucket_ms_);
  if (buckets_.empty() || buckets_.back().start_ms < start)
    buckets_.push_back(bucket{start, 0, 0});
  buckets_.back().a += da;
  buckets_.back().b += db;
}

time_buckets::totals time_buckets::sum(int64_t now_ms) const {
  totals t;
  for (const auto& b : buckets_)
    if (!expired(b, now_ms)) {
      t.a += b.a;
      t.b += b.b;
    }
  return t;
}

nlohmann::json time_buckets::to_json() const {
  auto arr = nlohmann::json::array();
  for (const auto& b : buckets_)
    arr.push_back({b.start_ms, b.a, b.b});
  return arr;
}

result<time_buckets> time_buckets::from_json(const nlohmann::json& j, int64_t window_ms,
                                             int64_t bucket_ms) {
  if (!valid(window_ms, bucket_ms))
    return detail::invalid("time window", "window_ms and bucket_ms must be positive, "
                                          "bucket_ms <= window_ms");
  if (!j.is_array())
    return detail::invalid("time window", "must be an array of [start_ms, a, b]");
  time_buckets out(window_ms, bucket_ms);
  for (const auto& e : j) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number_integer())
      return detail::invalid("time window", "each bucket must be [start_ms, a, b] (integers)");
    bucket b{e[0].get<int64_t>(), e[1].get<int64_t>(), e[2].get<int64_t>()};
    if (b.a < 0 || b.b < 0)
      return detail::invalid("time window", "counts must not be negative");
    if (!out.buckets_.empty() && out.buckets_.back().start_ms >= b.start_ms)
      return detail::invalid("time window", "bucket starts must increase");
    out.buckets_.push_back(b);
  }
  return out;
}

} // namespace factum::resilience
