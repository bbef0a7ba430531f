// factum/examples/examples.hpp: the example entity types that `factum serve` hosts next to the
// built-in ones. Each example lives in its own folder under examples/.
#pragma once

#include "factum/entities/entity.hpp"

namespace factum::examples {

/// Adds every example type (counter, and the example applications as they land).
void add_example_types(entity_registry& registry);

} // namespace factum::examples
