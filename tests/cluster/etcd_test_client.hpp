// etcd_test_client.hpp: the etcd client the cluster tests talk to a test etcd with (doctest
// REQUIREs that it could be made). The test's thread.
#pragma once

#include <doctest/doctest.h>

#include "factum/cluster/etcd_client.hpp"

namespace factum::test {

inline std::unique_ptr<cluster::etcd_client> client_of(std::vector<std::string> urls,
                                                       cluster::etcd_options o = {}) {
  auto c = cluster::etcd_client::make(std::move(urls), o);
  REQUIRE_MESSAGE(c.is_ok(), c.error().to_string());
  return std::move(c).value();
}

} // namespace factum::test
