// factum/examples/examples.hpp: the example entity types that `factum serve` hosts next to the
// built-in ones. Each example lives in its own folder under examples/. Registration runs before
// the runtime starts (any single thread).
#pragma once

#include <string_view>
#include <vector>

#include "factum/entities/entity.hpp"

namespace factum::examples {

/// Every fact of the calling entity that matches `f` (its limit is ignored), oldest first, read
/// in pages of 1000. Runs inside a handler, on the entity's actor.
inline std::vector<fact> all_facts(context& ctx, fact_filter f = {}) {
  std::vector<fact> out;
  f.limit = 1000;
  for (;;) {
    auto batch = ctx.query(f);
    for (auto& x : batch)
      out.push_back(std::move(x));
    if (batch.size() < static_cast<size_t>(f.limit))
      break;
    f.after_seq = out.back().seq;
  }
  return out;
}

/// Adds every example type: counter, and the example applications `asset` (telephony),
/// `escrow` and `order_workflow`.
void add_example_types(entity_registry& registry);

/// examples/chat: `room`, a chat room over WebSocket connections.
void add_chat_types(entity_registry& registry);

/// examples/chat/index.html, compiled in: a page for trying `room` by hand in a browser
/// (`factum serve` answers it at /examples/chat when it hosts `room`).
std::string_view chat_page();

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
