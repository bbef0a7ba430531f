// retry_policy_test.cpp: backoff growth and caps, jitter bounds over many seeded samples,
// decorrelated jitter, Retry-After, preset policies, priorities and the JSON form. Single-threaded.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "factum/resilience/retry_policy.hpp"

using namespace factum;
using namespace factum::resilience;

namespace {

retry_policy plain(int64_t base, int64_t max, int attempts) {
  retry_policy p;
  p.base_delay_ms = base;
  p.max_delay_ms = max;
  p.max_attempts = attempts;
  p.jitter = jitter_kind::none;
  return p;
}

std::vector<int64_t> delays(const retry_policy& p, std::mt19937_64& rng) {
  std::vector<int64_t> out;
  std::optional<int64_t> prev;
  for (int attempt = 1;; ++attempt) {
    auto d = p.next_delay(attempt, prev, std::nullopt, rng);
    if (!d)
      break;
    out.push_back(*d);
    prev = d;
  }
  return out;
}

} // namespace

TEST_CASE("retry_policy: exponential backoff doubles, caps and gives up after max attempts") {
  std::mt19937_64 rng(1);
  auto p = plain(1000, 5000, 6);
  CHECK(delays(p, rng) == std::vector<int64_t>{1000, 2000, 4000, 5000, 5000});
  // max_attempts counts the first attempt: 1 means never retry.
  CHECK_FALSE(plain(1000, 5000, 1).next_delay(1, {}, {}, rng));
  CHECK_FALSE(p.next_delay(6, {}, {}, rng));
  CHECK(p.next_delay(5, {}, {}, rng) == 5000);
  p.multiplier = 3.0;
  CHECK(delays(p, rng) == std::vector<int64_t>{1000, 3000, 5000, 5000, 5000});
}

TEST_CASE("retry_policy: linear and constant backoff") {
  std::mt19937_64 rng(1);
  auto lin = plain(5000, 60000, 4);
  lin.backoff = backoff_kind::linear;
  CHECK(delays(lin, rng) == std::vector<int64_t>{5000, 10000, 15000});
  auto con = plain(60000, 60000, 4);
  con.backoff = backoff_kind::constant;
  CHECK(delays(con, rng) == std::vector<int64_t>{60000, 60000, 60000});
}

TEST_CASE("retry_policy: jitter stays within its bounds over many seeded samples") {
  std::mt19937_64 rng(42);
  auto p = plain(1000, 60000, 10);
  const int64_t d = 4000; // attempt 3
  auto sample = [&](jitter_kind k, double ratio, int64_t& lo, int64_t& hi, double& mean) {
    p.jitter = k;
    p.jitter_ratio = ratio;
    lo = INT64_MAX;
    hi = INT64_MIN;
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      int64_t v = *p.next_delay(3, {}, {}, rng);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += static_cast<double>(v);
    }
    mean = sum / n;
  };
  int64_t lo = 0, hi = 0;
  double mean = 0;

  sample(jitter_kind::full, 0, lo, hi, mean);
  CHECK(lo >= 0);
  CHECK(hi <= d);
  CHECK(lo < d / 10); // the whole range is used
  CHECK(hi > d * 9 / 10);
  CHECK(mean == doctest::Approx(d / 2.0).epsilon(0.03));

  sample(jitter_kind::equal, 0, lo, hi, mean);
  CHECK(lo >= d / 2);
  CHECK(hi <= d);
  CHECK(lo < d / 2 + d / 20);
  CHECK(mean == doctest::Approx(d * 0.75).epsilon(0.03));

  sample(jitter_kind::ratio, 0.5, lo, hi, mean); // [0.5 d, 1.5 d]
  CHECK(lo >= d / 2);
  CHECK(hi <= d * 3 / 2);
  CHECK(lo < d * 55 / 100);
  CHECK(hi > d * 145 / 100);
  CHECK(mean == doctest::Approx(static_cast<double>(d)).epsilon(0.03));

  sample(jitter_kind::ratio, 0.25, lo, hi, mean); // ±25 %, as the HTTP presets
  CHECK(lo >= d * 3 / 4);
  CHECK(hi <= d * 5 / 4);

  sample(jitter_kind::none, 0.5, lo, hi, mean);
  CHECK(lo == d);
  CHECK(hi == d);
}

TEST_CASE("retry_policy: ratio jitter never exceeds the ceiling") {
  std::mt19937_64 rng(7);
  auto p = plain(1000, 3000, 20);
  p.jitter = jitter_kind::ratio;
  p.jitter_ratio = 0.5;
  for (int i = 0; i < 5000; ++i) {
    auto v = *p.next_delay(10, {}, {}, rng);
    CHECK(v >= 1500);
    CHECK(v <= 3000);
  }
}

TEST_CASE("retry_policy: decorrelated jitter stays within [base, max] and follows the previous") {
  std::mt19937_64 rng(99);
  auto p = plain(100, 10000, 1000);
  p.jitter = jitter_kind::decorrelated;
  bool reached_high = false;
  for (int chain = 0; chain < 200; ++chain) {
    std::optional<int64_t> prev;
    for (int attempt = 1; attempt < 30; ++attempt) {
      auto d = p.next_delay(attempt, prev, std::nullopt, rng);
      REQUIRE(d);
      CHECK(*d >= 100);
      CHECK(*d <= 10000);
      // AWS: uniform in [base, 3 * previous].
      CHECK(*d <= std::max<int64_t>(100, 3 * prev.value_or(100)));
      reached_high = reached_high || *d > 5000;
      prev = d;
    }
  }
  CHECK(reached_high);
  // The first retry with no previous delay lies in [base, 3 * base].
  for (int i = 0; i < 1000; ++i) {
    auto d = *p.next_delay(1, std::nullopt, std::nullopt, rng);
    CHECK(d >= 100);
    CHECK(d <= 300);
  }
}

TEST_CASE("retry_policy: deterministic given the rng") {
  retry_policy p; // ratio jitter 0.5
  std::mt19937_64 a(5), b(5), c(6);
  auto da = delays(p, a);
  CHECK(da == delays(p, b));
  CHECK(da != delays(p, c));
  // The supplier overload uses exactly the supplied number.
  auto lo = p.next_delay(1, {}, {}, std::function<double()>([] { return 0.0; }));
  auto mid = p.next_delay(1, {}, {}, std::function<double()>([] { return 0.5; }));
  CHECK(lo == 500);
  CHECK(mid == 1000);
}

TEST_CASE("retry_policy: Retry-After wins over the computed delay and is capped") {
  std::mt19937_64 rng(3);
  auto p = plain(1000, 60000, 5);
  p.retry_after_cap_ms = 120000;
  CHECK(p.next_delay(1, {}, 7000, rng) == 7000);     // longer than computed
  CHECK(p.next_delay(3, {}, 200, rng) == 200);       // shorter than computed: still wins
  CHECK(p.next_delay(1, {}, 500000, rng) == 120000); // capped
  CHECK(p.next_delay(1, {}, -5, rng) == 0);
  // Jitter is not applied to a server's explicit instruction.
  p.jitter = jitter_kind::full;
  CHECK(p.next_delay(2, {}, 7000, rng) == 7000);
  // Not when the policy says so, and never past the attempt limit.
  p.jitter = jitter_kind::none;
  p.honour_retry_after = false;
  CHECK(p.next_delay(1, {}, 7000, rng) == 1000);
  p.honour_retry_after = true;
  CHECK_FALSE(p.next_delay(5, {}, 7000, rng));
}

TEST_CASE("retry_policy: the per-operation table, exactly") {
  struct row {
    operation_kind op;
    int64_t base, max;
    int attempts;
  };
  for (auto r : {row{operation_kind::fact_append, 1000, 60000, 3},
                 row{operation_kind::entity_create, 1000, 60000, 3},
                 row{operation_kind::config_update, 1000, 30000, 3},
                 row{operation_kind::external_api, 2000, 120000, 5},
                 row{operation_kind::webhook_delivery, 5000, 300000, 5},
                 row{operation_kind::crm_sync, 10000, 600000, 10}}) {
    CAPTURE(to_string(r.op));
    auto p = operation_policy(r.op);
    CHECK(p.base_delay_ms == r.base);
    CHECK(p.max_delay_ms == r.max);
    CHECK(p.max_attempts == r.attempts);
    CHECK(p.multiplier == 2.0);
    CHECK(p.jitter == jitter_kind::ratio);
    CHECK(p.jitter_ratio == 0.5);
    CHECK(parse_operation_kind(to_string(r.op)) == r.op);
  }
  CHECK(parse_operation_kind("telephony") == operation_kind::external_api);
  CHECK(parse_operation_kind("voice_call") == operation_kind::external_api);
  CHECK(parse_operation_kind("webhook") == operation_kind::webhook_delivery);
  CHECK_FALSE(parse_operation_kind("email"));
}

TEST_CASE("retry_policy: priorities give the realtime, default and background policies") {
  auto rt = priority_policy(retry_priority::realtime);
  CHECK(rt.base_delay_ms == 500);
  CHECK(rt.max_delay_ms == 5000);
  CHECK(rt.max_attempts == 2);
  auto def = priority_policy(retry_priority::normal);
  CHECK(def == retry_policy{});
  CHECK(def.base_delay_ms == 1000);
  CHECK(def.max_delay_ms == 60000);
  CHECK(def.max_attempts == 5);
  auto bg = priority_policy(retry_priority::background);
  CHECK(bg.base_delay_ms == 5000);
  CHECK(bg.max_delay_ms == 300000);
  CHECK(bg.max_attempts == 10);
  // Scaling an operation's policy: realtime never exceeds its own ceiling.
  auto crm = operation_policy(operation_kind::crm_sync).with_priority(retry_priority::realtime);
  CHECK(crm.base_delay_ms == 5000);
  CHECK(crm.max_delay_ms == 5000);
  CHECK(crm.max_attempts == 2);
  CHECK(crm.validate().is_ok());
  CHECK(parse_retry_priority("default") == retry_priority::normal);
  CHECK(to_string(retry_priority::normal) == "default");
}

TEST_CASE("retry_policy: presets per HTTP status") {
  std::mt19937_64 rng(1);
  auto p429 = http_status_policy(429);
  REQUIRE(p429);
  CHECK(delays(*p429, rng) == std::vector<int64_t>(5, 60000)); // 5 retries, 60 s apart
  auto p504 = http_status_policy(504);
  REQUIRE(p504);
  CHECK(delays(*p504, rng) == std::vector<int64_t>{5000, 10000});
  auto p503 = http_status_policy(503);
  REQUIRE(p503);
  auto d503 = delays(*p503, rng);
  REQUIRE(d503.size() == 3);
  CHECK(d503[0] >= 1500);
  CHECK(d503[0] <= 2500); // 2 s ± 25 %
  CHECK(d503[2] >= 6000);
  CHECK(d503[2] <= 10000); // 8 s ± 25 %
  CHECK(http_status_policy(500)->base_delay_ms == 1000);
  CHECK_FALSE(http_status_policy(400));
  CHECK_FALSE(http_status_policy(401));
  CHECK_FALSE(http_status_policy(409));
}

TEST_CASE("retry_policy: JSON round trip and validation") {
  retry_policy p;
  p.base_delay_ms = 250;
  p.max_delay_ms = 9000;
  p.multiplier = 1.5;
  p.max_attempts = 7;
  p.backoff = backoff_kind::linear;
  p.jitter = jitter_kind::decorrelated;
  p.jitter_ratio = 0.3;
  p.honour_retry_after = false;
  p.retry_after_cap_ms = 1234;
  auto back = retry_policy::from_json(nlohmann::json::parse(p.to_json().dump()));
  REQUIRE(back.is_ok());
  CHECK(*back == p);
  // Same behaviour after the round trip.
  std::mt19937_64 a(11), b(11);
  CHECK(delays(p, a) == delays(*back, b));

  // Missing members keep their defaults.
  auto partial = retry_policy::from_json(nlohmann::json{{"max_attempts", 2}});
  REQUIRE(partial.is_ok());
  CHECK(partial->max_attempts == 2);
  CHECK(partial->base_delay_ms == 1000);

  auto refused = [](nlohmann::json j) { return !retry_policy::from_json(j).is_ok(); };
  CHECK(refused({{"base_delay_ms", 5000}, {"max_delay_ms", 1000}}));
  CHECK(refused({{"base_delay_ms", -1}}));
  CHECK(refused({{"multiplier", 0.5}}));
  CHECK(refused({{"max_attempts", 0}}));
  CHECK(refused({{"jitter", "wild"}}));
  CHECK(refused({{"backoff", "quadratic"}}));
  CHECK(refused({{"jitter_ratio", 1.5}}));
  CHECK(refused({{"max_attempts", "3"}}));
  CHECK(refused({{"max_attempts", 1e12}}));
  CHECK(refused(nlohmann::json::array()));
}
