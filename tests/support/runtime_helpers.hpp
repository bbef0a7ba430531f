// runtime_helpers.hpp (tests): what the tests that drive a runtime in this process share: a start
// that must succeed, a synchronous call that must succeed and its reply's JSON, an entity's
// facts, and a selector of every key (runtime::entities_where). A failed REQUIRE says why.
// Header-only; the test's thread (replies arrive on the runtime's threads, call_sync waits).
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "factum/runtime/runtime.hpp"

namespace factum::test {

/// runtime::start(c), which must succeed.
inline std::unique_ptr<runtime> start_ok(runtime_config c) {
  auto r = runtime::start(std::move(c));
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

/// Calls `method` of `k` with `args` ("{}" when null) and options `o`, and waits: the call must
/// succeed; its reply's JSON.
inline nlohmann::json call_ok(runtime& rt, const entity_key& k, const std::string& method,
                              const nlohmann::json& args = {}, const call_options& o = {}) {
  auto r = rt.call_sync(k, method, args.is_null() ? "{}" : args.dump(), o);
  REQUIRE_MESSAGE(r.ok, std::string(k.to_string() + " " + method + ": " + r.body));
  return r.json();
}

/// The facts of `k` that `filter` selects (@facts), at most `limit` of them.
inline nlohmann::json facts_of(runtime& rt, const entity_key& k,
                               nlohmann::json filter = nlohmann::json::object(), int limit = 1000) {
  filter["limit"] = limit;
  auto j = call_ok(rt, k, "@facts", filter);
  return j.is_array() ? j : j["facts"];
}

/// Selects every key (runtime::entities_where, release_where...).
inline bool all_keys(const entity_key&) {
  return true;
}

} // namespace factum::test
