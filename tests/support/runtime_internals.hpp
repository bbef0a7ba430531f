// runtime_internals.hpp (tests): what tests read of a runtime's private core
// (detail::runtime_testing; runtime/src on the include path): the alarm index's entry of an
// entity. Header-only; the test's thread, under the core's locks.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include "factum/runtime/runtime.hpp"
#include "runtime_core.hpp"

namespace factum::test {

/// The alarm index's due time for `k`, if it has an entry (the index must answer).
inline std::optional<int64_t> alarm_entry(runtime& rt, const entity_key& k) {
  auto& core = detail::runtime_testing::core(rt);
  std::lock_guard<std::mutex> g(core.alarms.mu);
  auto due = core.alarms.index->due_of(k);
  REQUIRE(due.is_ok());
  return *due;
}

} // namespace factum::test
