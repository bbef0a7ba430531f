// examples.cpp: registers every example entity type for `factum serve` and for embedders.
// Runs once, before the runtime starts.
#include "factum/examples/examples.hpp"

namespace factum::examples {

void add_example_types(entity_registry& registry) {
  add_counter_type(registry);
  add_telephony_types(registry);
  add_escrow_type(registry);
  add_workflow_type(registry);
  add_chat_types(registry);
}

} // namespace factum::examples
