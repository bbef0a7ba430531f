// tool_call.hpp (private): the resilient tool call (retries, breaker, budget, failure and cost
// facts, dead letters) and the operator actions on dead letters and breakers. No CAF here: the
// entity actor implements tool_host. Runs on the entity's actor thread, inside a turn.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "counters.hpp"
#include "factum/entities/context.hpp"
#include "factum/resilience/circuit_breaker.hpp"
#include "factum/resilience/classifier.hpp"
#include "factum/resilience/dead_letter_rules.hpp"
#include "factum/resilience/retry_budget.hpp"
#include "factum/resilience/retry_policy.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "tenancy/degradation.hpp"
#include "turn/tool_board.hpp"

namespace factum::detail {

/// What the resilient call needs from its entity (implemented by the entity actor's context).
class tool_host {
 public:
  virtual ~tool_host() = default;
  virtual context& ctx() = 0;
  virtual entity_store& store() = 0;
  virtual const runtime_config& config() = 0;
  virtual counters& stats() = 0;
  virtual std::mt19937_64& rng() = 0;
  /// The breakers and budgets of this activation, loaded from the store on first use.
  virtual std::map<std::string, resilience::circuit_breaker>& breakers() = 0;
  virtual std::map<std::string, resilience::retry_budget>& budgets() = 0;
  virtual const resilience::classifier& classify() = 0;
  virtual const resilience::dead_letter_rules& dl_rules() = 0;
  /// The dead letter this turn is retrying (empty when none): exhausting again updates it
  /// instead of creating another.
  virtual std::string retrying_dead_letter() = 0;
  /// Sets / cancels a runtime-owned alarm (names start with '@'), keeping the alarm index and
  /// the entity's timer in step.
  virtual void set_internal_alarm(const std::string& name, int64_t due_ms) = 0;
  virtual void cancel_internal_alarm(const std::string& name) = 0;
  /// A dead letter was written in the running turn (created, rescheduled or moved by an
  /// operator): the entity keeps track of the idempotency keys that live ones own.
  virtual void dead_letter_written(const dead_letter_record& dl) = 0;
  /// The runtime's counters of `tool` (tool_board.hpp); null when it is not configured.
  virtual tool_counters* tool_stats(const std::string& tool) = 0;
  /// This entity's breaker of `tool` is in state `s` now (tool_board::breaker_seen).
  virtual void breaker_seen(const std::string& tool, resilience::breaker_state s) = 0;
  /// The feature of the degradation matrix that turns `tool` off at the tenant's level now.
  virtual std::optional<degradation_refusal> degraded(const std::string&) { return std::nullopt; }
  /// The Retry-After of such a refusal.
  virtual std::chrono::seconds degraded_retry_after() { return std::chrono::seconds(30); }
  /// Whether the running tool call is a journaled step run again: after a run that ended
  /// without a result (failed retryably, or in a dead letter), or after one that was cut off
  /// (the process died while the step was in flight: what its attempts were charged was never
  /// recorded).
  enum class step_rerun { no, after_end, after_cut_off };
  virtual step_rerun reruns_step() { return step_rerun::no; }
};

/// The Idempotency-Key a tool call sends when the entity set none (docs/tools.md): "fk_" + the
/// first 40 hex digits of SHA-256(entity key, `base` (the call's key, or a journal's name),
/// tool, operation, payload [, "#" + `step` from the second journaled step on]).
std::string derived_tool_key(const entity_key& entity, const std::string& base,
                             const tool_request& req, int64_t step);

/// ctx.call_tool(): see context::call_tool.
task<tool_reply> resilient_tool_call(tool_host& h, tool_request req);

/// The policy of `tool` as JSON body of config version 1 (`tool.<name>`).
nlohmann::json default_tool_config(const runtime_config& cfg, const std::string& tool);

/// The breaker of `tool`, loaded from the store (or created from `breaker_json`).
resilience::circuit_breaker& breaker_for(tool_host& h, const std::string& tool,
                                         const nlohmann::json& breaker_json);

/// Appends the lifecycle fact of a breaker transition (with `operator_fields`, an object, merged
/// into its data for an operator's action: actor and reason) and persists the breaker.
void record_breaker(tool_host& h, const std::string& tool,
                    const std::optional<resilience::breaker_transition>& t,
                    const nlohmann::json& operator_fields = nullptr);

/// Operator actions behind the HTTP API (internal methods @dead_letters, @dead_letter,
/// @breakers, @breaker). Each move is a fact. Throw call_error on bad input.
nlohmann::json list_dead_letters(tool_host& h, const nlohmann::json& args);
nlohmann::json act_on_dead_letter(tool_host& h, const nlohmann::json& args);
nlohmann::json list_breakers(tool_host& h);
nlohmann::json act_on_breaker(tool_host& h, const nlohmann::json& args);

/// Who asked for an operator action and why, for its lifecycle fact: {"actor", "reason"?}.
/// `actor` is what the HTTP gateway sets (the API key's id) or an embedder's own name, default
/// "operator"; `reason` is optional free text. Both are checked: strings, bounded, no control
/// characters (else INVALID_ARGUMENT).
nlohmann::json operator_record(const nlohmann::json& args);

/// The name of the journal a dead letter's retry replays (journal.hpp): its call's, its
/// alarm's run's (a new one when that run left none), or its own for a call without a key.
std::string dead_letter_journal(entity_store& store, const dead_letter_record& dl);

/// Name of the alarm that retries dead letter `id`.
std::string dead_letter_alarm(const std::string& id);

} // namespace factum::detail
