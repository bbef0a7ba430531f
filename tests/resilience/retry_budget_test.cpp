// retry_budget_test.cpp: the sliding-window retry budget with an injected clock: the floor, the
// ratio of calls, refusal once spent, recovery as the window slides, and the JSON state.
// Single-threaded.
#include <doctest/doctest.h>

#include "factum/resilience/retry_budget.hpp"

using namespace factum;
using namespace factum::resilience;

namespace retry_budget_test {

namespace {

constexpr int64_t t0 = 1705500000000;

retry_budget_config small() {
  retry_budget_config c;
  c.ratio = 0.2;
  c.min_per_window = 2;
  c.window_ms = 10000;
  c.bucket_ms = 1000;
  return c;
}

} // namespace

TEST_CASE("retry_budget: defaults") {
  retry_budget_config c;
  CHECK(c.ratio == 0.2);
  CHECK(c.min_per_window == 10);
  CHECK(c.window_ms == 60000);
  CHECK(c.validate().is_ok());
  retry_budget b;
  CHECK(b.available(t0) == 10);
}

TEST_CASE("retry_budget: the floor, then a ratio of the calls") {
  retry_budget b(small());
  CHECK(b.available(t0) == 2);
  CHECK(b.try_spend(t0));
  CHECK(b.try_spend(t0));
  CHECK_FALSE(b.try_spend(t0)); // spent: refused and not counted
  CHECK(b.retries(t0) == 2);
  for (int i = 0; i < 4; ++i)
    b.on_call(t0 + 100);
  CHECK(b.available(t0 + 100) == 0); // floor(0.2 * 4) = 0
  CHECK_FALSE(b.try_spend(t0 + 100));
  b.on_call(t0 + 100); // floor(0.2 * 5) = 1
  CHECK(b.available(t0 + 100) == 1);
  CHECK(b.try_spend(t0 + 200));
  CHECK_FALSE(b.try_spend(t0 + 200));
  for (int i = 0; i < 5; ++i)
    b.on_call(t0 + 300); // floor(0.2 * 10) + 2 = 4 allowed, 3 spent
  CHECK(b.available(t0 + 300) == 1);
  CHECK(b.try_spend(t0 + 300));
  CHECK_FALSE(b.try_spend(t0 + 300));
  CHECK(b.calls(t0 + 300) == 10);
  CHECK(b.retries(t0 + 300) == 4);
}

TEST_CASE("retry_budget: recovers when the window slides") {
  retry_budget b(small());
  for (int i = 0; i < 10; ++i)
    b.on_call(t0);
  for (int i = 0; i < 4; ++i)
    REQUIRE(b.try_spend(t0 + 5000));
  CHECK_FALSE(b.try_spend(t0 + 5000));
  // 1 s buckets: the bucket [t0, t0+1000) counts while it overlaps (now - 10 s, now], so the
  // calls of t0 are gone at t0+10999, while the retries of t0+5000 still count: only the
  // floor (2) is left and 4 retries are spent.
  CHECK(b.calls(t0 + 10998) == 10);
  CHECK_FALSE(b.try_spend(t0 + 10999));
  CHECK(b.calls(t0 + 10999) == 0);
  CHECK(b.retries(t0 + 10999) == 4);
  CHECK(b.available(t0 + 15998) == 0);
  // At t0+15999 the retries have left too.
  CHECK(b.available(t0 + 15999) == 2);
  CHECK(b.try_spend(t0 + 15999));
  CHECK(b.retries(t0 + 15999) == 1);
}

TEST_CASE("retry_budget: ratio arithmetic does not lose a retry to rounding") {
  retry_budget_config c;
  c.ratio = 0.29;
  c.min_per_window = 0;
  retry_budget b(c);
  for (int i = 0; i < 100; ++i)
    b.on_call(t0);
  CHECK(b.available(t0) == 29);
}

TEST_CASE("retry_budget: JSON state round trip keeps what was spent") {
  retry_budget b(small());
  for (int i = 0; i < 10; ++i)
    b.on_call(t0);
  REQUIRE(b.try_spend(t0 + 1000));
  REQUIRE(b.try_spend(t0 + 2000));
  REQUIRE(b.try_spend(t0 + 3000));
  auto restored = retry_budget::from_json(nlohmann::json::parse(b.to_json().dump()));
  REQUIRE(restored.is_ok());
  CHECK(restored->config() == b.config());
  CHECK(restored->to_json() == b.to_json());
  CHECK(restored->available(t0 + 3000) == 1);
  CHECK(restored->try_spend(t0 + 3000));
  CHECK_FALSE(restored->try_spend(t0 + 3000));

  auto refused = [](nlohmann::json j) { return !retry_budget::from_json(j).is_ok(); };
  CHECK(refused({{"config", {{"ratio", -1}}}}));
  CHECK(refused({{"config", {{"window_ms", 0}}}}));
  CHECK(refused({{"window", {{1, 2}}}}));
  CHECK(refused({{"window", {{2000, 1, 0}, {1000, 1, 0}}}}));
  CHECK(refused({{"window", {{1000, -1, 0}}}}));
  CHECK_FALSE(refused(nlohmann::json::object()));
  auto cfg = retry_budget_config::from_json(small().to_json());
  REQUIRE(cfg.is_ok());
  CHECK(*cfg == small());
}

TEST_CASE("time_buckets: granularity, a clock stepping back, and malformed JSON") {
  time_buckets w(10000, 1000);
  w.add(t0 + 500, 1, 0);
  w.add(t0 + 1500, 1, 1);
  w.add(t0 + 1200, 1, 0); // before the newest bucket: joins it
  REQUIRE(w.buckets().size() == 2);
  CHECK(w.buckets().back() == time_buckets::bucket{t0 + 1000, 2, 1});
  CHECK(w.sum(t0 + 10999).a == 2); // [t0, t0+1000) has left (t0+999, t0+10999]
  CHECK(w.sum(t0 + 10998).a == 3);
  CHECK(w.sum(t0 + 11999).a == 0);
  w.expire(t0 + 10999);
  CHECK(w.buckets().size() == 1);
  auto back = time_buckets::from_json(w.to_json(), 10000, 1000);
  REQUIRE(back.is_ok());
  CHECK(back->buckets() == w.buckets());
  CHECK_FALSE(time_buckets::from_json(w.to_json(), 1000, 10000).is_ok());
  CHECK_FALSE(time_buckets::from_json(nlohmann::json::object(), 10000, 1000).is_ok());
  CHECK_FALSE(time_buckets::from_json(nlohmann::json::parse("[[1,2,\"x\"]]"), 10000, 1000).is_ok());
}

} // namespace retry_budget_test
