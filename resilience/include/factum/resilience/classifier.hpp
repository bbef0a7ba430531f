// factum/resilience/classifier.hpp: maps HTTP statuses, transport errors and tool-reported
// errors onto the error taxonomy (factum/entities/errors.hpp), a stable error code and the
// dead-letter failure reason (dead_letter_rules.hpp). Plain values; any single thread (not
// thread-safe while overrides are being changed; const use from several threads is fine).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/entities/context.hpp"
#include "factum/entities/errors.hpp"
#include "factum/error/status.hpp"

namespace factum::resilience {

/// A failure below HTTP: the request got no status line.
enum class transport_error {
  timeout,            ///< no answer in time (connect or read): TIMEOUT, transient
  connection_reset,   ///< the peer reset the connection: CONNECTION_RESET, transient
  connection_refused, ///< nothing listens: CONNECTION_REFUSED, transient (never reached it)
  dns_failure,        ///< the host name did not resolve: DNS_FAILURE, fail fast (network)
  tls,                ///< handshake or certificate failure: TLS_ERROR, fail fast (config)
  other,              ///< anything else: TRANSPORT_ERROR, external (retried with backoff)
};

/// "timeout", "connection_reset", "connection_refused", "dns_failure", "tls", "other".
std::string_view to_string(transport_error e) noexcept;
/// The transport error named by to_string(), or nullopt.
std::optional<transport_error> parse_transport_error(std::string_view s) noexcept;

/// Why an operation became a dead letter; selects its retention and automatic retry (the table
/// in dead_letter_rules.hpp).
enum class failure_reason {
  rate_limit,      ///< 429 / rate limited
  server_error,    ///< 5xx, connection failures, unavailable
  timeout,         ///< timeouts, 408, 504
  invalid_payload, ///< client and data-integrity errors: 400, 404, 409, 422 ...
  unauthorized,    ///< 401, 403 ("authentication" is accepted as its name too)
  budget,          ///< 402: budget exhausted
  unknown,         ///< anything else (e.g. a tool's unexplained failure)
};

/// "rate_limit", "server_error", "timeout", "invalid_payload", "unauthorized", "budget",
/// "unknown".
std::string_view to_string(failure_reason r) noexcept;
/// Parses the names above; also accepts the aliases "validation" (invalid_payload) and
/// "authentication" (unauthorized).
std::optional<failure_reason> parse_failure_reason(std::string_view s) noexcept;

/// The failure reason a category implies when nothing more specific is known: transient and
/// server -> server_error, external -> unknown, client and data_integrity -> invalid_payload,
/// authorization -> unauthorized, budget -> budget.
failure_reason default_reason(error_category c) noexcept;

/// Whether a failure of this category counts towards opening a circuit breaker: transient,
/// server and external do (the tool is unhealthy); client, data_integrity, authorization and
/// budget do not (the tool answered correctly to a bad request).
bool trips_breaker(error_category c) noexcept;

/// What the classifier concluded about one failure.
struct classification {
  error_category category = error_category::external;
  bool retryable = true; ///< may the operation be retried (already accounts for idempotency)
  std::string code;      ///< stable code: HTTP_503, RATE_LIMITED, TIMEOUT, CONNECTION_RESET ...
  failure_reason reason = failure_reason::unknown; ///< for the dead letter, if it becomes one

  /// trips_breaker(category).
  bool counts_for_breaker() const noexcept { return trips_breaker(category); }

  /// {"category","retryable","code","reason"}.
  nlohmann::json to_json() const;

  friend bool operator==(const classification&, const classification&) = default;
};

/// A per-tool replacement of the default classification of one HTTP status or one
/// tool-reported error code.
struct classification_override {
  error_category category = error_category::external;
  std::string code; ///< stable code; empty: the default code (HTTP_<status> or the tool's code)
  std::optional<failure_reason> reason; ///< unset: default_reason(category)
  std::optional<bool> retryable;        ///< unset: factum::retryable(category, idempotent)

  friend bool operator==(const classification_override&, const classification_override&) = default;
};

/// Maps failures onto the taxonomy. Without overrides it follows this table (its category column
/// is category_of_status's, factum/entities/errors.hpp: 507 is server like any other 5xx):
///
/// | HTTP status              | category       | code         | reason          | retried    |
/// |--------------------------|----------------|--------------|-----------------|------------|
/// | 408                      | transient      | HTTP_408     | timeout         | yes        |
/// | 429                      | transient      | RATE_LIMITED | rate_limit      | yes        |
/// | 503                      | transient      | HTTP_503     | server_error    | yes        |
/// | 504                      | transient      | HTTP_504     | timeout         | yes        |
/// | 500, 502, other 5xx      | server         | HTTP_<n>     | server_error    | idempotent |
/// | 400, 404, 422, other 4xx | client         | HTTP_<n>     | invalid_payload | no         |
/// | 409                      | data_integrity | HTTP_409     | invalid_payload | no         |
/// | 401, 403                 | authorization  | HTTP_<n>     | unauthorized    | no         |
/// | 402                      | budget         | HTTP_402     | budget          | no         |
/// | other (1xx-3xx, 0, >599) | external       | HTTP_<n>     | unknown         | no         |
///
/// Transport errors: see transport_error. Tool-reported errors without an HTTP status, in this
/// order: a per-tool code override; a well-known code, case-insensitive (TIMEOUT/ETIMEDOUT,
/// CONNECTION_RESET/ECONNRESET, CONNECTION_REFUSED/ECONNREFUSED, DNS_FAILURE/ENOTFOUND/
/// EAI_AGAIN, TLS_ERROR/TLS, RATE_LIMITED; so transport_error's names work too); the reply's
/// own category when it is not `external` (the default, which claims nothing); keyword
/// heuristics over code and message (`heuristic` in classifier.cpp); finally `external`,
/// retryable, with the tool's code (or TOOL_ERROR) and reason unknown.
class classifier {
 public:
  /// A classifier with the default table and no overrides.
  classifier() = default;

  /// Replaces how `tool`'s HTTP `status` is classified.
  void set_status_override(std::string tool, int status, classification_override o);
  /// Replaces how `tool`'s reported error `code` (exact match) is classified; applies whether or
  /// not the reply also carries an HTTP status, and wins over a status override.
  void set_code_override(std::string tool, std::string code, classification_override o);
  /// Removes all overrides of `tool`.
  void clear_overrides(std::string_view tool);

  /// Classifies an HTTP error status of `tool` ("" for no tool: defaults only). `idempotent`
  /// decides whether server errors (500, 502) are retryable.
  classification classify_http(std::string_view tool, int status, bool idempotent) const;

  /// Classifies a transport error (no overrides apply: they are properties of the network).
  classification classify_transport(transport_error e) const;

  /// Classifies an error a tool reported itself, with `http_status` 0 when it gave none. With a
  /// status (100..599) the status decides (after a code override) and the message is ignored;
  /// without one the order documented on the class applies.
  classification classify_tool_error(std::string_view tool, std::string_view code,
                                     std::string_view message, int http_status,
                                     error_category reported, bool idempotent) const;

  /// Classifies a failed tool reply (`reply.ok` is ignored: call this for failures only).
  classification classify(std::string_view tool, const tool_reply& reply, bool idempotent) const;

  /// The classification of a call the circuit breaker fast-failed: transient, retryable,
  /// CIRCUIT_OPEN, server_error (it must not count towards the breaker itself: callers do not
  /// report it with on_failure).
  static classification circuit_open();

  /// {"tools":{"crm":{"statuses":{"404":{"category":"transient","code":"...","reason":"...",
  /// "retryable":true}},"codes":{"E42":{...}}}}}; `code`, `reason`, `retryable` optional.
  nlohmann::json to_json() const;
  /// Parses to_json()'s form; INVALID_ARGUMENT names the bad member (unknown members too).
  static result<classifier> from_json(const nlohmann::json& j);
  /// Adds `tool`'s overrides in the form of one member of to_json()'s "tools"
  /// ({"statuses":{...},"codes":{...}}); INVALID_ARGUMENT names the bad member as `what` plus
  /// its path (the overrides before it are added: check a classifier of its own first).
  status add_rules(const std::string& tool, const nlohmann::json& rules, const std::string& what);

 private:
  struct tool_rules {
    std::map<int, classification_override> statuses;
    std::map<std::string, classification_override, std::less<>> codes;
  };

  classification apply(const classification_override& o, std::string default_code,
                       bool idempotent) const;

  std::map<std::string, tool_rules, std::less<>> tools_;
};

/// The stable code of a circuit-breaker fast fail.
inline constexpr std::string_view circuit_open_code = "CIRCUIT_OPEN";

} // namespace factum::resilience
