// factum/entities/errors.hpp: the error taxonomy (seven categories, each with its retry rule and
// default HTTP status; the category of an HTTP status) and call_error, the exception a handler
// throws to fail a call. factum's own failures are the error table's (problems.hpp). Plain
// values; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace factum {

/// The seven failure categories. Retryability and HTTP status follow from the category.
enum class error_category {
  transient,      ///< retried: 429, 503, 504, timeouts, connection reset
  server,         ///< retried only when the call is idempotent: 500, 502
  external,       ///< retried with backoff: a tool's own failure
  client,         ///< never retried: 400, 404, 422
  data_integrity, ///< never retried: 409
  authorization,  ///< never retried: 401, 403
  budget,         ///< never retried: 402
};

std::string_view to_string(error_category c) noexcept;
std::optional<error_category> parse_error_category(std::string_view s) noexcept;

/// Whether a failure of this category may be retried (server: only when idempotent).
bool retryable(error_category c, bool idempotent = true) noexcept;

/// The HTTP status a failure of this category maps to by default.
int default_http_status(error_category c) noexcept;

/// The category of a failure known only by its HTTP status: the one place that decides it, for
/// the error table's entries (problems.hpp) and for a tool's answer (the resilience classifier).
/// 401/403 authorization, 402 budget, 408/429/503/504 transient, 409 data_integrity, other 4xx
/// client, other 5xx server; a status that is no error status (1xx-3xx, out of range) says
/// nothing of a failure: external. The other direction of default_http_status, kept beside it.
///
/// 507 (Insufficient Storage) is `server`, not `transient`: nothing says the answering server's
/// storage will have room soon (it has no Retry-After to give), so it is retried only when
/// idempotent, as a 500 is; factum's own 507 (TENANT_STORAGE_QUOTA_EXCEEDED) is `client` in the
/// error table, since only less data or a larger quota lets a retry through.
constexpr error_category category_of_status(int http_status) noexcept {
  switch (http_status) {
  case 401:
  case 403: return error_category::authorization;
  case 402: return error_category::budget;
  case 408:
  case 429:
  case 503:
  case 504: return error_category::transient;
  case 409: return error_category::data_integrity;
  default: break;
  }
  if (http_status >= 400 && http_status <= 499)
    return error_category::client;
  if (http_status >= 500 && http_status <= 599)
    return error_category::server;
  return error_category::external;
}

/// A failed call: thrown by handlers, stored for terminal failures, carried to callers.
class call_error : public std::runtime_error {
 public:
  call_error(error_category category, std::string code, std::string message, int http_status = 0)
      : std::runtime_error(message), category_(category), code_(std::move(code)),
        http_status_(http_status ? http_status : default_http_status(category)) {}

  error_category category() const noexcept { return category_; }
  const std::string& code() const noexcept { return code_; }
  int http_status() const noexcept { return http_status_; }
  /// Whether the runtime releases the idempotency key (a retry runs the call again) rather than
  /// storing the failure.
  bool retryable() const noexcept { return factum::retryable(category_); }

  /// Extra members of the problem body (e.g. retry_after_ms).
  nlohmann::json details = nlohmann::json::object();
  /// The turn keeps what it wrote although it fails: a saga that compensated before failing.
  /// By default (false) a failure rolls back what the turn wrote since its last await.
  bool keep_writes = false;

 private:
  error_category category_;
  std::string code_;
  int http_status_;
};

/// Shorthands for the common failures.
call_error client_error(std::string code, std::string message);
call_error not_found_error(std::string code, std::string message);
call_error conflict_error(std::string code, std::string message);
call_error transient_error(std::string code, std::string message);
call_error external_error(std::string code, std::string message);

} // namespace factum
