// factum/examples/examples.hpp: the example entity types that `factum serve` hosts next to the
// built-in ones. Each example lives in its own folder under examples/. Registration runs before
// the runtime starts (any single thread).
#pragma once

#include "factum/entities/entity.hpp"

namespace factum::examples {

/// Adds every example type: counter, and the example applications `asset` (telephony),
/// `escrow` and `order_workflow`.
void add_example_types(entity_registry& registry);

/// examples/counter: the quick-start counter.
void add_counter_type(entity_registry& registry);

/// examples/telephony: `asset`, a call-tracking asset that places calls through the
/// `telephony` tool.
void add_telephony_types(entity_registry& registry);

/// examples/escrow: `escrow`, an escrow state machine whose payouts go through the `payout`
/// tool.
void add_escrow_type(entity_registry& registry);

/// examples/workflow: `order_workflow`, an order process whose steps call the tools
/// `inventory`, `payments` and `shipping`, each with its own retry policy.
void add_workflow_type(entity_registry& registry);

} // namespace factum::examples
