// registry_test.cpp: the metrics library: each kind of metric registered once and written in the
// Prometheus text format by prometheus-cpp's serializer, values read back by name and labels,
// and the names the registry refuses. One thread.
#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <stdexcept>
#include <string>

#include "factum/metrics/metrics.hpp"

namespace registry_test {

constexpr std::array<double, 2> bounds = {0.001, 0.1};

/// Whether `text` has the line `line`.
bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

} // namespace registry_test

using namespace factum;
using namespace registry_test;

TEST_CASE(
  "registry: counters, gauges, labelled counters and histograms are written with their help "
  "and type, and read back by name") {
  metrics::registry r;
  metrics::counter calls{r, "t_calls_total", "Calls."};
  metrics::gauge open{r, "t_open", "Open things."};
  metrics::counter_by_label closed{
    r, "t_closed_total", "Closed, by reason.", "reason", {"client", "idle"}};
  metrics::histogram lat{r, "t_latency_seconds", "Latency.", bounds};
  calls.inc();
  calls.inc(2);
  open.add(5);
  open.add(-2);
  open.raise_to(1); // lower: no change
  closed.inc(1);
  lat.observe(std::chrono::microseconds(500)); // <= 0.001
  lat.observe(std::chrono::milliseconds(50));  // <= 0.1
  lat.observe(std::chrono::seconds(2));        // +Inf
  auto text = metrics::text({&r, nullptr});
  CHECK(has_line(text, "# HELP t_calls_total Calls."));
  CHECK(has_line(text, "# TYPE t_calls_total counter"));
  CHECK(has_line(text, "t_calls_total 3"));
  CHECK(has_line(text, "# TYPE t_open gauge"));
  CHECK(has_line(text, "t_open 3"));
  CHECK(has_line(text, "t_closed_total{reason=\"client\"} 0"));
  CHECK(has_line(text, "t_closed_total{reason=\"idle\"} 1"));
  CHECK(has_line(text, "# TYPE t_latency_seconds histogram"));
  CHECK(has_line(text, "t_latency_seconds_bucket{le=\"0.001\"} 1"));
  CHECK(has_line(text, "t_latency_seconds_bucket{le=\"0.1\"} 2"));
  CHECK(has_line(text, "t_latency_seconds_bucket{le=\"+Inf\"} 3"));
  CHECK(has_line(text, "t_latency_seconds_count 3"));
  CHECK(has_line(text, "t_latency_seconds_sum 2.0505"));
  CHECK(r.value("t_calls_total") == 3);
  CHECK(r.value("t_open") == 3);
  CHECK(r.value("t_closed_total", {{"reason", "idle"}}) == 1);
  CHECK(r.value("t_closed_total", {{"reason", "gone"}}) == 0); // no such sample
  CHECK(r.value("t_latency_seconds_count") == 3);
  CHECK(r.value("t_latency_seconds_sum") == doctest::Approx(2.0505));
  CHECK_THROWS_AS(r.value("t_nothing_total"), std::out_of_range);
  CHECK_THROWS_AS(r.value("t_latency_seconds"), std::out_of_range);
}

TEST_CASE("registry: a collector's samples carry their labels in order, values escaped") {
  metrics::registry r;
  r.add("t_requests_total", "Requests by route and status.", metrics::kind::counter,
        {"route", "status"}, [](metrics::sample_writer& w) {
          w.add({"call", "200"}, 6);
          w.add({"odd\"route", "500"}, 1);
        });
  auto text = metrics::text({&r});
  CHECK(has_line(text, "t_requests_total{route=\"call\",status=\"200\"} 6"));
  CHECK(has_line(text, "t_requests_total{route=\"odd\\\"route\",status=\"500\"} 1"));
  CHECK(r.value("t_requests_total", {{"status", "200"}, {"route", "call"}}) == 6);
}

TEST_CASE("registry: a name that breaks the conventions, or is registered twice, is refused") {
  metrics::registry r;
  auto none = [](metrics::sample_writer&) {};
  auto add = [&](const char* name, metrics::kind k, std::vector<std::string> labels = {},
                 const char* help = "Help.") { r.add(name, help, k, std::move(labels), none); };
  using metrics::kind;
  CHECK_NOTHROW(add("t_ok_total", kind::counter));
  CHECK_THROWS_AS(add("t_ok_total", kind::counter), std::invalid_argument); // twice
  CHECK_THROWS_AS(add("t_calls", kind::counter), std::invalid_argument);    // no _total
  CHECK_THROWS_AS(add("t_open_total", kind::gauge), std::invalid_argument); // _total, no counter
  CHECK_THROWS_AS(add("t_lag_ms_max", kind::gauge), std::invalid_argument); // abbreviated unit
  CHECK_THROWS_AS(add("t_lag_ms", kind::histogram), std::invalid_argument);
  CHECK_THROWS_AS(add("t_lag_seconds_sum", kind::gauge), std::invalid_argument);
  CHECK_THROWS_AS(add("t_things_count", kind::gauge), std::invalid_argument);
  CHECK_THROWS_AS(add("1_bad", kind::gauge), std::invalid_argument);
  CHECK_THROWS_AS(add("t_open", kind::gauge, {"bad-label"}), std::invalid_argument);
  CHECK_THROWS_AS(add("t_open", kind::histogram, {"le"}), std::invalid_argument);
  CHECK_THROWS_AS(add("t_open", kind::gauge, {}, "two\nlines"), std::invalid_argument);
  CHECK_NOTHROW(add("t_open", kind::gauge, {"tenant"}));
}
