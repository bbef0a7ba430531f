// metrics.cpp: the gateway's families that are collected from maps (requests by route and
// status, by tenant and status class; the dead letter gauges), and the text of /metrics through
// the metrics library (prometheus-cpp's TextSerializer). Any thread.
#include "metrics.hpp"

#include <algorithm>

namespace factum::http {

namespace {

std::vector<std::string> ws_end_labels() {
  std::vector<std::string> out;
  for (size_t i = 0; i < static_cast<size_t>(http_metrics::ws_end::count_); ++i)
    out.emplace_back(http_metrics::ws_end_label(static_cast<http_metrics::ws_end>(i)));
  return out;
}

std::vector<std::string> stream_end_labels() {
  std::vector<std::string> out;
  for (size_t i = 0; i < static_cast<size_t>(http_metrics::stream_end::count_); ++i)
    out.emplace_back(http_metrics::stream_end_label(static_cast<http_metrics::stream_end>(i)));
  return out;
}

} // namespace

http_metrics::http_metrics()
    : ws_closed_(reg, "factum_ws_closed_total", "WebSocket connections ended, by reason.", "reason",
                 ws_end_labels()),
      streams_closed_(reg, "factum_fact_streams_closed_total", "Fact streams ended, by reason.",
                      "reason", stream_end_labels()) {
  using metrics::kind;
  reg.add("factum_http_requests_total", "HTTP requests answered, by route and status.",
          kind::counter, {"route", "status"}, [this](metrics::sample_writer& w) {
            std::lock_guard<std::mutex> g(mu_);
            for (auto& [k, v] : requests_)
              w.add({k.first, std::to_string(k.second)}, static_cast<double>(v));
          });
  reg.add("factum_tenant_requests_total",
          "HTTP requests of an authenticated tenant, by status class (2xx, 4xx, 5xx).",
          kind::counter, {"tenant", "class"}, [this](metrics::sample_writer& w) {
            std::lock_guard<std::mutex> g(mu_);
            for (auto& [tenant, classes] : tenant_requests_)
              for (int c = 0; c < static_cast<int>(classes.size()); ++c)
                if (classes[c] > 0)
                  w.add({tenant, std::to_string(c) + "xx"}, static_cast<double>(classes[c]));
          });
}

void http_metrics::count_request(std::string_view route, int status, std::string_view tenant) {
  std::lock_guard<std::mutex> g(mu_);
  ++requests_[{route, status}];
  if (tenant.empty())
    return;
  auto it = tenant_requests_.find(tenant); // a string only the first time a tenant is seen
  if (it == tenant_requests_.end())
    it = tenant_requests_.emplace(std::string(tenant), per_class{}).first;
  ++it->second[std::clamp(status / 100, 0, 5)];
}

std::string_view http_metrics::ws_end_label(ws_end e) {
  switch (e) {
  case ws_end::client: return "client";
  case ws_end::entity: return "entity";
  case ws_end::rate_limit: return "rate_limit";
  case ws_end::too_big: return "too_big";
  case ws_end::slow_reader: return "slow_reader";
  case ws_end::protocol: return "protocol";
  case ws_end::idle: return "idle";
  case ws_end::failed_turn: return "failed_turn";
  case ws_end::stopping: return "stopping";
  case ws_end::moved: return "moved";
  case ws_end::count_: break;
  }
  return "unknown";
}

std::string_view http_metrics::stream_end_label(stream_end e) {
  switch (e) {
  case stream_end::client: return "client";
  case stream_end::overflow: return "overflow";
  case stream_end::failed: return "failed";
  case stream_end::slow_reader: return "slow_reader";
  case stream_end::stopping: return "stopping";
  case stream_end::count_: break;
  }
  return "unknown";
}

std::string http_metrics::render(const runtime& rt, const cluster_router* cluster,
                                 const metrics::registry* extra) const {
  return metrics::text({&reg, &rt.metrics(), cluster ? cluster->metrics() : nullptr, extra});
}

// -- dead letters (the tenant index's totals) ---------------------------------------------------

void http_metrics::add_dead_letters(metrics::registry& r,
                                    const std::map<std::string, dead_letter_totals>& totals,
                                    const std::vector<std::string>& tenants, int64_t now_ms) {
  using metrics::kind;
  static const dead_letter_totals none;
  auto of = [&totals](const std::string& t) -> const dead_letter_totals& {
    auto it = totals.find(t);
    return it == totals.end() ? none : it->second;
  };
  r.add("factum_dead_letters",
        "Dead letters of a tenant's entities by state, as the tenant index counts them (written "
        "after each commit that changes them).",
        kind::gauge, {"tenant", "state"}, [&tenants, of](metrics::sample_writer& w) {
          for (auto& t : tenants) {
            auto& tt = of(t);
            for (auto state : {"pending", "scheduled", "resolved", "discarded", "acknowledged"}) {
              auto n = tt.by_status.find(state);
              w.add({t, state}, n == tt.by_status.end() ? 0.0 : static_cast<double>(n->second));
            }
          }
        });
  r.add("factum_dead_letter_oldest_pending_seconds",
        "Age of a tenant's oldest pending dead letter (0: none pending).", kind::gauge, {"tenant"},
        [&tenants, of, now_ms](metrics::sample_writer& w) {
          for (auto& t : tenants) {
            auto& tt = of(t);
            int64_t ms =
              tt.oldest_pending_ms == 0 ? 0 : std::max<int64_t>(now_ms - tt.oldest_pending_ms, 0);
            w.add({t}, static_cast<double>(ms) / 1e3);
          }
        });
}

} // namespace factum::http
