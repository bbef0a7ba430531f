// registry.cpp: the registry of metric families, their collection into prometheus-cpp's
// MetricFamily and the text exposition (prometheus::TextSerializer), and the atomic counters,
// gauges and histograms that register themselves. The only file that includes prometheus-cpp.
// Any thread.
#include "factum/metrics/metrics.hpp"

#include <prometheus/check_names.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace factum::metrics {

struct registry::family {
  std::string name;
  std::string help;
  kind k;
  std::vector<std::string> label_names;
  collector collect;
};

namespace {

prometheus::MetricType type_of(kind k) {
  switch (k) {
  case kind::counter: return prometheus::MetricType::Counter;
  case kind::gauge: return prometheus::MetricType::Gauge;
  case kind::histogram: return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// Why `name` breaks the conventions checked at registration; empty when it does not.
std::string convention_error(const std::string& name, const std::string& help, kind k,
                             const std::vector<std::string>& label_names) {
  if (!prometheus::CheckMetricName(name))
    return "not a valid metric name";
  for (auto& l : label_names)
    if (!prometheus::CheckLabelName(l) || l == "le")
      return "label name '" + l + "' is not valid here";
  if ((k == kind::counter) != ends_with(name, "_total"))
    return "counters, and only counters, end in _total";
  for (auto* s : {"_sum", "_count", "_bucket", "_ms", "_us", "_ns"})
    if (ends_with(name, s) || name.find(std::string(s) + "_") != std::string::npos)
      return std::string("ends in or holds ") + s + " (base units, histograms for latencies)";
  if (help.empty() || help.find_first_of("\n\\") != std::string::npos)
    return "help must be one line without backslashes";
  return {};
}

prometheus::ClientMetric labelled(const std::vector<std::string>& names,
                                  std::initializer_list<std::string_view> values) {
  if (values.size() != names.size())
    throw std::invalid_argument("a sample's label values do not match its family's label names");
  prometheus::ClientMetric m;
  size_t i = 0;
  for (auto v : values)
    m.label.push_back({names[i++], std::string(v)});
  return m;
}

} // namespace

void sample_writer::add(std::initializer_list<std::string_view> label_values, double value) {
  auto m = labelled(label_names_, label_values);
  if (f_.type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f_.metric.push_back(std::move(m));
}

void sample_writer::add(std::initializer_list<std::string_view> label_values,
                        const histogram_value& h) {
  auto m = labelled(label_names_, label_values);
  m.histogram.sample_count = h.count;
  m.histogram.sample_sum = h.sum;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    m.histogram.bucket.push_back(
      {cumulative, i < h.bounds.size() ? h.bounds[i] : std::numeric_limits<double>::infinity()});
  }
  f_.metric.push_back(std::move(m));
}

registry::registry() = default;
registry::~registry() = default;

void registry::add(std::string name, std::string help, kind k, std::vector<std::string> label_names,
                   collector collect) {
  if (auto why = convention_error(name, help, k, label_names); !why.empty())
    throw std::invalid_argument("metric " + name + ": " + why);
  std::lock_guard<std::mutex> g(mu_);
  for (auto& f : families_)
    if (f->name == name)
      throw std::invalid_argument("metric " + name + " is registered twice");
  families_.push_back(std::make_unique<family>(
    family{std::move(name), std::move(help), k, std::move(label_names), std::move(collect)}));
}

void registry::collect(std::vector<prometheus::MetricFamily>& out) const {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& f : families_) {
    prometheus::MetricFamily mf{f->name, f->help, type_of(f->k), {}};
    sample_writer w(mf, f->label_names);
    f->collect(w);
    out.push_back(std::move(mf));
  }
}

double registry::value(std::string_view name, labels l) const {
  std::string_view base = name;
  bool count = false, sum = false;
  if (ends_with(name, "_count"))
    base = name.substr(0, name.size() - 6), count = true;
  else if (ends_with(name, "_sum"))
    base = name.substr(0, name.size() - 4), sum = true;
  std::lock_guard<std::mutex> g(mu_);
  for (auto& f : families_) {
    if (f->name != name && !(f->k == kind::histogram && f->name == base))
      continue;
    prometheus::MetricFamily mf{f->name, f->help, type_of(f->k), {}};
    sample_writer w(mf, f->label_names);
    f->collect(w);
    for (auto& m : mf.metric) {
      bool match = m.label.size() == l.size() && std::all_of(l.begin(), l.end(), [&](auto& p) {
                     return std::any_of(m.label.begin(), m.label.end(), [&](auto& ml) {
                       return ml.name == p.first && ml.value == p.second;
                     });
                   });
      if (!match)
        continue;
      if (f->k != kind::histogram)
        return f->k == kind::counter ? m.counter.value : m.gauge.value;
      if (count)
        return static_cast<double>(m.histogram.sample_count);
      if (sum)
        return m.histogram.sample_sum;
      throw std::out_of_range(std::string(name) + " is a histogram: read its _count or _sum");
    }
    return 0;
  }
  throw std::out_of_range("no metric family " + std::string(name));
}

std::string text(std::initializer_list<const registry*> registries) {
  std::vector<prometheus::MetricFamily> families;
  for (auto* r : registries)
    if (r)
      r->collect(families);
  return prometheus::TextSerializer().Serialize(families);
}

counter::counter(registry& r, std::string name, std::string help) {
  r.add(std::move(name), std::move(help), kind::counter, {},
        [this](sample_writer& w) { w.add(static_cast<double>(value())); });
}

gauge::gauge(registry& r, std::string name, std::string help) {
  r.add(std::move(name), std::move(help), kind::gauge, {},
        [this](sample_writer& w) { w.add(static_cast<double>(value())); });
}

void gauge::raise_to(int64_t v) noexcept {
  auto cur = v_.load(std::memory_order_relaxed);
  while (v > cur && !v_.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

counter_by_label::counter_by_label(registry& r, std::string name, std::string help,
                                   std::string label, std::vector<std::string> values)
    : values_(std::move(values)), v_(new std::atomic<uint64_t>[values_.size()]) {
  for (size_t i = 0; i < values_.size(); ++i)
    v_[i].store(0, std::memory_order_relaxed);
  r.add(std::move(name), std::move(help), kind::counter, {std::move(label)},
        [this](sample_writer& w) {
          for (size_t i = 0; i < values_.size(); ++i)
            w.add({values_[i]}, static_cast<double>(value(i)));
        });
}

histogram::histogram(registry& r, std::string name, std::string help,
                     std::span<const double> bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i)
    counts_[i].store(0, std::memory_order_relaxed);
  r.add(std::move(name), std::move(help), kind::histogram, {},
        [this](sample_writer& w) { w.add(value()); });
}

void histogram::observe(std::chrono::nanoseconds d) noexcept {
  double s = std::chrono::duration<double>(d).count();
  size_t i = 0;
  while (i < bounds_.size() && s > bounds_[i])
    ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  ns_sum_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, d.count())),
                    std::memory_order_relaxed);
}

histogram_value histogram::value() const {
  histogram_value h;
  h.bounds = bounds_;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    h.counts.push_back(counts_[i].load(std::memory_order_relaxed));
    h.count += h.counts.back(); // so that the +Inf bucket is the count, whatever runs meanwhile
  }
  h.sum = static_cast<double>(ns_sum_.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

} // namespace factum::metrics
