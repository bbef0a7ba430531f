// metrics.hpp: factum's metrics. Each metric is registered once, with its name, help, type and
// label names, in a `registry`, where it is counted; /metrics writes every registered family in
// the Prometheus text format through prometheus-cpp's TextSerializer, and tests and tools read
// values by the same names. Counters, gauges and histograms count with relaxed atomics (the hot
// path); a family whose values live elsewhere (a map of routes, the tools' boards, a storage
// pool) registers a collector that writes its samples at each scrape. Any thread: counting is
// lock-free, registration and collection take the registry's mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prometheus {
struct MetricFamily;
} // namespace prometheus

namespace factum::metrics {

enum class kind { counter, gauge, histogram };

/// Label names and values of one sample, e.g. {{"tool", "vendor"}, {"outcome", "attempted"}}.
using labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

/// A histogram's values at one instant: upper bounds in seconds (+Inf implicit), the count in
/// each bucket (not cumulative; one more than the bounds, for +Inf), the sum in seconds and the
/// count.
struct histogram_value {
  std::span<const double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
};

/// What a family's collector writes at a scrape: its samples, each with its label values in the
/// order of the family's label names. Label values are escaped by the serializer.
class sample_writer {
 public:
  void add(std::initializer_list<std::string_view> label_values, double value);
  void add(double value) { add({}, value); }
  void add(std::initializer_list<std::string_view> label_values, const histogram_value& h);
  void add(const histogram_value& h) { add({}, h); }

 private:
  friend class registry;
  sample_writer(prometheus::MetricFamily& f, const std::vector<std::string>& label_names)
      : f_(f), label_names_(label_names) {}
  prometheus::MetricFamily& f_;
  const std::vector<std::string>& label_names_;
};

/// Writes a family's samples at a scrape.
using collector = std::function<void(sample_writer&)>;

/// A set of metric families, each registered once. Registered objects (counters, collectors'
/// captures) must outlive the registry's last scrape.
class registry {
 public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  /// Registers the family `name`. Throws std::invalid_argument when the name is registered
  /// already or breaks Prometheus's conventions as checked here: a valid metric name, valid label
  /// names, `_total` on counters and only on them, no `_sum`, `_count`, `_bucket` or abbreviated
  /// unit (`_ms`, `_us`, `_ns`) at the end, one line of help.
  void add(std::string name, std::string help, kind k, std::vector<std::string> label_names,
           collector collect);

  /// Every family, collected now, in the order of registration (a family with no sample too).
  void collect(std::vector<prometheus::MetricFamily>& out) const;

  /// The value of one sample, collected now, for tests and tools: the family `name` (for a
  /// histogram `X`: `X_count` or `X_sum`), the sample with exactly these labels (in any order).
  /// 0 when the family has no such sample; throws std::out_of_range when no family is `name`.
  double value(std::string_view name, labels l = {}) const;

 private:
  struct family;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<family>> families_;
};

/// The Prometheus text exposition (format 0.0.4) of the registries' families, collected now and
/// written by prometheus-cpp's TextSerializer, in order; null entries are skipped.
std::string text(std::initializer_list<const registry*> registries);

/// A monotonic counter without labels.
class counter {
 public:
  counter(registry& r, std::string name, std::string help);
  counter(const counter&) = delete;
  counter& operator=(const counter&) = delete;
  void inc(uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

/// A gauge without labels.
class gauge {
 public:
  gauge(registry& r, std::string name, std::string help);
  gauge(const gauge&) = delete;
  gauge& operator=(const gauge&) = delete;
  void set(int64_t v) noexcept { v_.store(v, std::memory_order_relaxed); }
  /// Adds `n` (negative: subtracts); returns the new value.
  int64_t add(int64_t n) noexcept { return v_.fetch_add(n, std::memory_order_relaxed) + n; }
  /// Sets the value to `v` when `v` is larger (a high-water mark).
  void raise_to(int64_t v) noexcept;
  int64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

/// Counters of one family with one label whose values are fixed at registration, counted by
/// index (an enum's value): e.g. WebSocket connections closed, by reason.
class counter_by_label {
 public:
  counter_by_label(registry& r, std::string name, std::string help, std::string label,
                   std::vector<std::string> values);
  counter_by_label(const counter_by_label&) = delete;
  counter_by_label& operator=(const counter_by_label&) = delete;
  void inc(size_t i, uint64_t n = 1) noexcept { v_[i].fetch_add(n, std::memory_order_relaxed); }
  uint64_t value(size_t i) const noexcept { return v_[i].load(std::memory_order_relaxed); }

 private:
  std::vector<std::string> values_;
  std::unique_ptr<std::atomic<uint64_t>[]> v_;
};

/// A histogram of durations without labels; `bounds` (seconds, ascending, +Inf implicit) must
/// outlive it (a static array).
class histogram {
 public:
  histogram(registry& r, std::string name, std::string help, std::span<const double> bounds);
  histogram(const histogram&) = delete;
  histogram& operator=(const histogram&) = delete;
  void observe(std::chrono::nanoseconds d) noexcept;
  histogram_value value() const;

 private:
  std::span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> ns_sum_{0};
};

} // namespace factum::metrics
