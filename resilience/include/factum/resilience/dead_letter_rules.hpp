// factum/resilience/dead_letter_rules.hpp: what happens to a dead letter: retention and
// automatic retry by failure reason (the table of dead_letter_rules below), and the allowed
// moves between the states pending, scheduled, resolved, discarded and acknowledged. Plain
// values; any single thread (not thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "factum/resilience/classifier.hpp"
#include "factum/storage/records.hpp"

namespace factum::resilience {

/// The handling of one failure reason.
struct dead_letter_rule {
  int64_t retention_ms = 0; ///< kept this long after it became a dead letter
  /// Delay of each automatic retry; nullopt: never retried automatically (pending until an
  /// operator acts).
  std::optional<int64_t> auto_retry_after_ms;
  /// Whether a caller's hint (the Retry-After or the breaker's remaining cooldown) replaces
  /// auto_retry_after_ms when given (a retry "after the cooldown").
  bool use_cooldown_hint = false;
  int64_t max_auto_retries = 3; ///< automatic retries at most
  bool manual_review = false;   ///< an operator should look at it (informational)
  int64_t alert_per_hour = 0;   ///< alert threshold, dead letters per hour (informational)

  friend bool operator==(const dead_letter_rule&, const dead_letter_rule&) = default;
};

/// What an operator asks for (HTTP .../dead-letters/{id}/{retry|discard|acknowledge}).
enum class dl_action {
  retry,       ///< schedule a retry now: -> scheduled
  discard,     ///< give up for good: -> discarded
  acknowledge, ///< reviewed, no action: -> acknowledged
};

/// "retry", "discard", "acknowledge".
std::string_view to_string(dl_action a) noexcept;
/// The action named by to_string(), or nullopt.
std::optional<dl_action> parse_dl_action(std::string_view s) noexcept;

/// The dead-letter state machine (pending -> scheduled -> resolved/discarded, and acknowledged
/// for "reviewed, no action"):
///
///   pending      -> scheduled, discarded, acknowledged
///   scheduled    -> resolved (the retry succeeded), scheduled (failed, retried again),
///                   pending (failed, no automatic retry left), discarded, acknowledged
///   acknowledged -> scheduled (an operator retries it after all), discarded
///   resolved, discarded: final
///
/// Ok for an allowed move; CONFLICT ("dead letter cannot move from X to Y") otherwise,
/// including a move to the same state other than scheduled -> scheduled.
status validate_transition(dl_status from, dl_status to);

/// The states `from` may move to, in the order above.
std::vector<dl_status> allowed_transitions(dl_status from);

/// Whether no move leaves `s` (resolved, discarded).
bool is_final(dl_status s) noexcept;

/// The state an operator action leads to from `from`; CONFLICT if the move is not allowed
/// (e.g. discarding a resolved dead letter).
result<dl_status> apply_action(dl_status from, dl_action action);

/// Retention and automatic retry per failure reason. Defaults (budget is treated like
/// invalid_payload but kept 30 days for the accounts):
///
/// | reason          | retention | automatic retry              | manual review | alert/h |
/// |-----------------|-----------|------------------------------|---------------|---------|
/// | rate_limit      | 24 h      | after the cooldown hint, else 1 h | no       | 10      |
/// | server_error    | 7 d       | after 1 h                    | yes           | 50      |
/// | timeout         | 24 h      | after 5 min                  | no            | 20      |
/// | invalid_payload | 30 d      | never                        | yes           | 5       |
/// | unauthorized    | 24 h      | never (needs a token refresh)| yes           | 1       |
/// | budget          | 30 d      | never (needs more budget)    | yes           | 1       |
/// | unknown         | 30 d      | never (manual only)          | yes           | 10      |
///
/// Automatic retries: at most 3 each.
class dead_letter_rules {
 public:
  /// The defaults above.
  dead_letter_rules();

  /// The rule of a reason.
  const dead_letter_rule& rule(failure_reason r) const noexcept;
  /// Replaces the rule of a reason; INVALID_ARGUMENT (and no change) if a duration or count is
  /// negative.
  status set_rule(failure_reason r, dead_letter_rule rule);

  /// The status a new dead letter starts in: scheduled when its reason retries automatically,
  /// pending otherwise.
  dl_status initial_status(failure_reason r) const noexcept;

  /// When the next automatic retry is due: now + delay (the hint when the rule uses it and one
  /// is given, else auto_retry_after_ms), or nullopt when the reason never retries
  /// automatically or `auto_retries_done` >= max_auto_retries (then it stays pending).
  std::optional<int64_t> next_retry_at(failure_reason r, int64_t now_ms,
                                       int64_t auto_retries_done = 0,
                                       std::optional<int64_t> cooldown_hint_ms = {}) const;

  /// When a dead letter created at `created_at_ms` expires: created + retention.
  int64_t expires_at(failure_reason r, int64_t created_at_ms) const noexcept;

  /// Whether a dead letter in state `s` with expiry `expires_at_ms` may be purged at `now_ms`:
  /// only final or acknowledged ones whose retention has ended (pending and scheduled dead
  /// letters are never purged unseen, as in entity_store::purge_dead_letters).
  static bool purgeable(dl_status s, int64_t expires_at_ms, int64_t now_ms) noexcept;

  /// {"rate_limit":{"retention_ms":...,"auto_retry_after_ms":...|null,"use_cooldown_hint":...,
  /// "max_auto_retries":...,"manual_review":...,"alert_per_hour":...}, ...}: every reason.
  nlohmann::json to_json() const;
  /// Parses a JSON object keyed by reason (aliases accepted); members and reasons not given
  /// keep their defaults; INVALID_ARGUMENT names the bad member.
  static result<dead_letter_rules> from_json(const nlohmann::json& j);

  friend bool operator==(const dead_letter_rules&, const dead_letter_rules&) = default;

 private:
  std::array<dead_letter_rule, 7> rules_;
};

} // namespace factum::resilience
