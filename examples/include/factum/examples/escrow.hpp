// factum/examples/escrow.hpp: the escrow state machine of examples/escrow as pure
// functions over facts, so that the entity, its tests and any reader rebuild one state the same
// way: the state is nothing but the fold of the escrow's `escrow.*` facts. Plain values; any
// thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/fact.hpp"

namespace factum::examples::escrow {

/// The states: AWAIT_FUNDS -> FUNDED -> DELIVERED -> RELEASED, with disputes
/// (FUNDED or DELIVERED -> DISPUTED -> RELEASED or REFUNDED). "" before `open`.
inline constexpr std::string_view await_funds = "AWAIT_FUNDS";
inline constexpr std::string_view funded = "FUNDED";
inline constexpr std::string_view delivered = "DELIVERED";
inline constexpr std::string_view disputed = "DISPUTED";
inline constexpr std::string_view released = "RELEASED";
inline constexpr std::string_view refunded = "REFUNDED";

/// The escrow's state, derived from its facts.
struct state {
  std::string status; ///< "" (not opened) or one of the states above
  std::string buyer, seller, arbiter;
  std::string amount, currency; ///< exact decimal string and ISO code
  std::string payout_ref;       ///< the transfer of a completed release or refund
  int64_t compensations = 0;    ///< payouts that failed after the state change and were undone
  int64_t applied = 0;          ///< escrow facts folded in
  int64_t last_seq = 0;         ///< seq of the last one

  nlohmann::json to_json() const;
  friend bool operator==(const state&, const state&) = default;
};

/// The commands and who may issue them:
///   open (anyone; only before the escrow exists), fund (buyer, or the payment provider's
///   PaymentSucceeded event), deliver (seller), dispute (buyer or seller), release (buyer, or
///   the arbiter; from DISPUTED the arbiter only), refund (arbiter; from DISPUTED).
/// Returns the state the command leads to, or "" when `command` is not allowed in `from`.
std::string_view next_status(std::string_view from, std::string_view command);

/// Whether `actor` may issue `command` on `s` (the role check).
bool actor_allowed(const state& s, std::string_view command, std::string_view actor);

/// Folds one fact into `s`: `escrow.*` facts change it, every other fact is ignored.
void apply(state& s, const fact& f);

/// The fold of a whole log (oldest first).
state replay(const std::vector<fact>& facts);

} // namespace factum::examples::escrow
