// histogram_test.cpp: the bench's log-linear histogram (tools/loadgen): bucket boundaries, exact
// small values, percentile error bound, merge, concurrent recording. One thread unless stated.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "factum/tools/histogram.hpp"

using factum::tools::histogram;

TEST_CASE("histogram: buckets tile the value range without gaps or overlaps") {
  for (size_t i = 1; i < 5000; ++i)
    CHECK(histogram::lowest_of(i) == histogram::highest_of(i - 1) + 1);
  for (uint64_t v :
       {0ull, 1ull, 255ull, 256ull, 257ull, 1000ull, 123456789ull, (1ull << 40) + 12345, ~0ull}) {
    auto i = histogram::index_of(v);
    CHECK(i < histogram::bucket_count);
    CHECK(histogram::lowest_of(i) <= v);
    CHECK(v <= histogram::highest_of(i));
  }
  CHECK(histogram::index_of(~0ull) == histogram::bucket_count - 1);
}

TEST_CASE("histogram: small values are exact, empty reads zero") {
  histogram h;
  CHECK(h.count() == 0);
  CHECK(h.percentile(99) == 0);
  CHECK(h.max() == 0);
  CHECK(h.min() == 0);
  for (uint64_t v = 1; v <= 100; ++v)
    h.record(v);
  CHECK(h.count() == 100);
  CHECK(h.percentile(50) == 50);
  CHECK(h.percentile(99) == 99);
  CHECK(h.percentile(100) == 100);
  CHECK(h.percentile(0) == 1);
  CHECK(h.min() == 1);
  CHECK(h.max() == 100);
  CHECK(h.mean() == doctest::Approx(50.5));
}

TEST_CASE("histogram: percentiles of a wide distribution are within 0.8% of the exact ones") {
  histogram h;
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> d(13.0, 1.5); // ~0.4 ms median in ns, long tail
  std::vector<uint64_t> vs;
  for (int i = 0; i < 200'000; ++i) {
    auto v = uint64_t(d(rng));
    vs.push_back(v);
    h.record(v);
  }
  std::sort(vs.begin(), vs.end());
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    auto exact = vs[size_t(std::ceil(p / 100 * double(vs.size()))) - 1];
    auto got = h.percentile(p);
    CAPTURE(p);
    CHECK(got >= exact);
    CHECK(double(got) <= double(exact) * 1.008 + 1);
  }
  CHECK(h.max() == vs.back());
  CHECK(h.percentile(100) == vs.back());
}

TEST_CASE("histogram: merge adds counts, reset forgets them") {
  histogram a, b;
  for (uint64_t v = 0; v < 1000; ++v)
    (v % 2 ? a : b).record(v * 1000);
  a.merge(b);
  CHECK(a.count() == 1000);
  CHECK(a.min() == 0);
  CHECK(a.max() == 999'000);
  CHECK(double(a.percentile(50)) == doctest::Approx(499'000).epsilon(0.008));
  a.reset();
  CHECK(a.count() == 0);
  CHECK(a.percentile(50) == 0);
}

TEST_CASE("histogram: concurrent record loses no value") {
  histogram h;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 50'000; ++i)
        h.record(i * 10 + uint64_t(t));
    });
  for (auto& t : ts)
    t.join();
  CHECK(h.count() == 200'000);
  CHECK(h.max() == 499'993);
  CHECK(h.min() == 0);
}
