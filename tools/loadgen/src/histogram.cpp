// histogram.cpp: the log-linear histogram of the bench (factum/tools/histogram.hpp). Any thread.
#include "factum/tools/histogram.hpp"

#include <bit>
#include <cmath>

namespace factum::tools {

histogram::histogram() : counts_(new std::atomic<uint64_t>[bucket_count]) {
  reset();
}

size_t histogram::index_of(uint64_t v) noexcept {
  if (v < sub_count)
    return static_cast<size_t>(v);
  int msb = 63 - std::countl_zero(v);
  int e = msb - (sub_bits - 1); // v >> e lies in [half_count, sub_count)
  return static_cast<size_t>(sub_count + uint64_t(e - 1) * half_count + (v >> e) - half_count);
}

uint64_t histogram::lowest_of(size_t index) noexcept {
  if (index < sub_count)
    return index;
  uint64_t e = (index - sub_count) / half_count + 1;
  uint64_t m = (index - sub_count) % half_count + half_count;
  return m << e;
}

uint64_t histogram::highest_of(size_t index) noexcept {
  if (index < sub_count)
    return index;
  uint64_t e = (index - sub_count) / half_count + 1;
  return lowest_of(index) + ((uint64_t{1} << e) - 1);
}

void histogram::record(uint64_t v) noexcept {
  counts_[index_of(v)].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  uint64_t m = max_.load(std::memory_order_relaxed);
  while (v > m && !max_.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
  }
  m = min_.load(std::memory_order_relaxed);
  while (v < m && !min_.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
  }
  total_.fetch_add(1, std::memory_order_relaxed);
}

void histogram::merge(const histogram& other) noexcept {
  for (size_t i = 0; i < bucket_count; ++i)
    if (auto c = other.counts_[i].load(std::memory_order_relaxed))
      counts_[i].fetch_add(c, std::memory_order_relaxed);
  sum_.fetch_add(other.sum_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  auto om = other.max();
  uint64_t m = max_.load(std::memory_order_relaxed);
  while (om > m && !max_.compare_exchange_weak(m, om, std::memory_order_relaxed)) {
  }
  auto on = other.min_.load(std::memory_order_relaxed);
  m = min_.load(std::memory_order_relaxed);
  while (on < m && !min_.compare_exchange_weak(m, on, std::memory_order_relaxed)) {
  }
  total_.fetch_add(other.count(), std::memory_order_relaxed);
}

void histogram::reset() noexcept {
  for (size_t i = 0; i < bucket_count; ++i)
    counts_[i].store(0, std::memory_order_relaxed);
  total_.store(0);
  sum_.store(0);
  max_.store(0);
  min_.store(UINT64_MAX);
}

uint64_t histogram::min() const noexcept {
  auto m = min_.load(std::memory_order_relaxed);
  return m == UINT64_MAX ? 0 : m;
}

double histogram::mean() const noexcept {
  auto n = count();
  return n ? double(sum_.load(std::memory_order_relaxed)) / double(n) : 0.0;
}

uint64_t histogram::percentile(double p) const noexcept {
  // Sum the buckets first: concurrent record() calls may have bumped a bucket but not yet the
  // total, so the ranks are taken against what the buckets hold.
  uint64_t n = 0;
  for (size_t i = 0; i < bucket_count; ++i)
    n += counts_[i].load(std::memory_order_relaxed);
  if (n == 0)
    return 0;
  if (p < 0)
    p = 0;
  if (p > 100)
    p = 100;
  auto rank = static_cast<uint64_t>(std::ceil(p / 100.0 * double(n)));
  if (rank < 1)
    rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < bucket_count; ++i) {
    seen += counts_[i].load(std::memory_order_relaxed);
    if (seen >= rank) {
      auto hi = highest_of(i);
      auto mx = max();
      return hi < mx || mx == 0 ? hi : mx;
    }
  }
  return max();
}

} // namespace factum::tools
