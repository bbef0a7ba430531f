// factum/storage/fact.hpp: the Fact (one immutable row of an entity's log), the draft a caller
// appends, the query filter, and the canonical serialization that the hash chain covers.
// Plain value types and pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum {

/// What a caller appends. Empty strings and a zero config_version mean "absent" (stored NULL).
struct fact_draft {
  std::string type;         ///< required: invocation, outcome, error, cost, lifecycle, config, or a
                            ///< tenant type; 1..64 chars of [a-z0-9_.:-]
  std::string subtype;      ///< optional, same alphabet as type
  int64_t timestamp_ms = 0; ///< 0: the store's clock at append
  std::string tool_id;
  std::string config_id;
  int64_t config_version = 0;
  std::string trace_id;
  std::string idempotency_key;
  std::string amount;   ///< exact decimal string, e.g. "0.005"; requires currency
  std::string currency; ///< 3..8 upper-case letters, e.g. "USD"
  std::string from_entity;
  std::string to_entity;
  nlohmann::json data = nlohmann::json::object(); ///< must be a JSON object
};

/// One stored fact. `data` is the canonical JSON text exactly as hashed.
struct fact {
  int64_t seq = 0;
  std::string fact_id;
  std::string type;
  std::string subtype;
  int64_t timestamp_ms = 0;
  std::string tenant_id;
  std::string entity_type;
  std::string entity_id;
  std::string tool_id;
  std::string config_id;
  int64_t config_version = 0;
  std::string trace_id;
  std::string idempotency_key;
  std::string amount;
  std::string currency;
  std::string from_entity;
  std::string to_entity;
  std::string data = "{}";
  std::string prev_hash;
  std::string hash;
};

/// The bytes the hash covers: a compact JSON object of every present field except `hash`, keys
/// in ascending byte order, `data` embedded verbatim (docs/storage-format.md, "Hash chain").
std::string canonical_serialization(const fact& f);

/// sha256_hex(canonical_serialization(f)).
std::string compute_hash(const fact& f);

/// The JSON view of a fact that the HTTP API and `factum inspect` show (canonical fields plus
/// `hash`), as compact JSON text.
std::string to_json_text(const fact& f);

/// The JSON view as a json value.
nlohmann::json to_json(const fact& f);

/// Filters for fact queries. Every field is optional; all present ones must match.
struct fact_filter {
  std::string type;
  std::string subtype;
  std::optional<int64_t> since_ms;   ///< timestamp >= since
  std::optional<int64_t> until_ms;   ///< timestamp < until
  std::optional<int64_t> after_seq;  ///< seq > after_seq
  std::optional<int64_t> before_seq; ///< seq < before_seq
  std::string trace_id;
  std::string tool_id;
  std::string idempotency_key;
  int64_t limit = 100; ///< 1..10000
  bool newest_first = false;
  /// Stop once the facts read hold about this many bytes (their data, ids, hashes and
  /// metadata); 0: no cap. At least one fact is returned whatever its size. Not read from JSON:
  /// the runtime sets it (runtime_config::max_facts_bytes).
  int64_t max_bytes = 0;

  /// Checks ranges (limit, negative seq or time); INVALID_ARGUMENT with the offending field.
  status validate() const;

  /// Builds and validates a filter from the JSON object that `@facts` and the HTTP facts route
  /// take: type, subtype, trace_id, tool_id, idempotency_key (strings), since, until,
  /// after_seq, before_seq, limit (integers; limit defaults to 100), order ("asc" or "desc").
  /// A member of the wrong kind, or out of range, is INVALID_ARGUMENT naming it.
  static result<fact_filter> from_json(const nlohmann::json& args);
};

/// Validates a fact type or subtype token ([a-z0-9_.:-], 1..64).
status validate_fact_token(std::string_view token, std::string_view what);

/// Validates an exact decimal amount: -?digits(.digits)?, at most 40 characters.
status validate_amount(std::string_view amount);

/// Current wall-clock time in milliseconds since the Unix epoch.
int64_t now_ms() noexcept;

/// `ms` since the epoch as UTC ISO 8601 with milliseconds: "2026-11-22T04:05:06.789Z".
std::string format_utc_ms(int64_t ms);

} // namespace factum
