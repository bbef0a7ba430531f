// node_support.hpp: what the cluster node's tests (node_test.cpp, handover_test.cpp) share: a
// node started or the test fails, and a bounded poll of a condition (support/eventually.hpp).
// The test's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <doctest/doctest.h>

#include "factum/cluster/node.hpp"
#include "support/eventually.hpp"

namespace factum::test {

/// `c`'s node, started (the test fails when it does not start).
inline std::shared_ptr<cluster::node> started(cluster::node_config c) {
  auto n = cluster::node::start(std::move(c));
  REQUIRE_MESSAGE(n.is_ok(), n.error().to_string());
  return *n;
}

} // namespace factum::test
