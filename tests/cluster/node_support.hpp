// node_support.hpp: what the cluster node's tests (node_test.cpp, handover_test.cpp) share: a
// node started or the test fails, and a bounded poll of a condition. The test's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <doctest/doctest.h>

#include "factum/cluster/node.hpp"

namespace factum::test {

/// `c`'s node, started (the test fails when it does not start).
inline std::shared_ptr<cluster::node> started(cluster::node_config c) {
  auto n = cluster::node::start(std::move(c));
  REQUIRE_MESSAGE(n.is_ok(), n.error().to_string());
  return *n;
}

/// Polls `cond` every 20 ms for at most `limit`.
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

} // namespace factum::test
