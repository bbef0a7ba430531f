// factum/entities/call.hpp: what a call carries (options) and what it answers (call_reply).
// Plain values; any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "factum/entities/errors.hpp"

namespace factum {

/// Per-call options.
struct call_options {
  /// Idempotency key (1..255 printable ASCII); empty: the call is not de-duplicated.
  std::string idempotency_key;
  /// Trace id carried into every fact of the call; empty: the runtime generates one.
  std::string trace_id;
  /// Fingerprint of the request for key mismatch detection; empty: SHA-256 of method and args.
  std::string fingerprint;
  /// How long the caller waits for the reply (the call itself is not cancelled).
  std::chrono::milliseconds timeout{30'000};
};

/// The answer to a call: a result, or a problem (RFC 9457 members plus a stable code).
struct call_reply {
  bool ok = false;
  /// ok: the result as JSON text. Error: the problem body as JSON text
  /// ({"type","title","status","detail","code","category",...}).
  std::string body;
  std::string code;     ///< error code; empty when ok
  std::string category; ///< error category name; empty when ok
  int http_status = 200;
  bool retryable = false; ///< a retry with the same key may succeed
  bool replayed = false;  ///< answered from the idempotency record, not run again
  /// How long the caller should wait before retrying, in ms (0: no advice); HTTP sends it as
  /// Retry-After.
  int64_t retry_after_ms = 0;
  /// A read whose page was full (its limit, or the runtime's byte cap): where the next page
  /// starts, as a query fragment ("after_seq=42", or "before_seq=17" newest first); empty when
  /// there is nothing more. HTTP sends it as a Link header (rel="next").
  std::string cursor;

  /// The body parsed (result or problem).
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }

  static call_reply success(std::string result_json);
  static call_reply failure(const call_error& e);
  /// A failure built from its parts (code, category, status, detail).
  static call_reply failure(error_category c, std::string code, std::string detail,
                            int http_status = 0);
};

} // namespace factum
