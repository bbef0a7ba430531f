// factum/tools/histogram.hpp: a log-linear latency histogram in the manner of HdrHistogram
// (Debian ships no C/C++ HdrHistogram): values below 256 are exact, above that every power of two
// is split into 128 buckets, so a reported percentile is within 0.8% of the true value. record()
// is lock-free and may run on any thread at once; readers see a consistent-enough snapshot
// (counts are relaxed atomics), which is what a live progress line needs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace factum::tools {

/// A thread-safe log-linear histogram of non-negative integers (the bench records nanoseconds).
class histogram {
 public:
  /// Values below 2^sub_bits are counted exactly.
  static constexpr int sub_bits = 8;
  static constexpr uint64_t sub_count = uint64_t{1} << sub_bits;
  static constexpr uint64_t half_count = sub_count / 2;
  /// Buckets needed to cover every uint64_t.
  static constexpr size_t bucket_count = sub_count + (64 - sub_bits) * half_count;

  histogram();
  histogram(const histogram&) = delete;
  histogram& operator=(const histogram&) = delete;

  /// Counts one value. Thread-safe, lock-free.
  void record(uint64_t v) noexcept;
  /// Adds every count of `other` (other may be recorded into concurrently).
  void merge(const histogram& other) noexcept;
  /// Forgets every value. Not safe against concurrent record().
  void reset() noexcept;

  uint64_t count() const noexcept { return total_.load(std::memory_order_relaxed); }
  /// Largest value recorded (exact); 0 when empty.
  uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
  /// Smallest value recorded (exact); 0 when empty.
  uint64_t min() const noexcept;
  /// Mean of the values recorded (exact up to overflow of the sum); 0 when empty.
  double mean() const noexcept;
  /// The value at or below which `p` percent of the values lie (p in [0, 100]): the upper end
  /// of the bucket holding that rank, never above max(). 0 when empty.
  uint64_t percentile(double p) const noexcept;

  /// The bucket a value falls in.
  static size_t index_of(uint64_t v) noexcept;
  /// The smallest and largest value of a bucket.
  static uint64_t lowest_of(size_t index) noexcept;
  static uint64_t highest_of(size_t index) noexcept;

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> total_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
};

} // namespace factum::tools
