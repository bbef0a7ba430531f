// serve_types.hpp: the entity types `factum serve` hosts (the built-in ones and the examples),
// for the tests of its configuration (tests only). Any thread.
#pragma once

#include "factum/examples/examples.hpp"
#include "factum/runtime/runtime.hpp"

namespace factum::test {

inline const entity_registry& serve_types() {
  static const entity_registry types = [] {
    entity_registry r;
    add_builtin_types(r);
    examples::add_example_types(r);
    return r;
  }();
  return types;
}

} // namespace factum::test
