// factum/entities/problems.hpp: the error table. Every failure factum answers by itself (the
// gateway's refusals, the runtime's failed calls, a store's status) is one entry here: its
// stable upper-case code (the problem+json `code`; its `type` is urn:factum:problem:<code>), its
// HTTP status and its category, from which its retry rule follows (errors.hpp). A store's errc
// reaches a caller through problem_of(). docs/http-api.md, "Status codes and error codes", lists
// the same entries, and tests/http/problem_codes_test.cpp holds the two to each other. A
// handler's own call_error (a tenant's code, or a tool's failure it passes on) is not in the
// table: it keeps its code and status. Constants and pure functions; any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "factum/entities/call.hpp"
#include "factum/entities/errors.hpp"
#include "factum/error/status.hpp"

namespace factum {

/// One kind of failure factum answers with.
struct problem_kind {
  std::string_view code; ///< stable upper-case code, e.g. "INVALID_QUERY"
  int status = 500;      ///< HTTP status
  /// The failure category: by default the one the status implies (category_of_status); an entry
  /// that names another says why beside it.
  error_category category = category_of_status(status);

  /// Whether a failure of this kind may be retried (factum::retryable of its category).
  bool retryable() const noexcept { return factum::retryable(category); }
  /// The call_error of this kind, with `detail` as its message.
  call_error error(std::string detail) const {
    return call_error(category, std::string(code), std::move(detail), status);
  }
  /// A failed call_reply of this kind (its problem+json body), with `detail`.
  call_reply reply(std::string detail) const {
    return call_reply::failure(category, std::string(code), std::move(detail), status);
  }
};

/// Every kind of failure factum answers with, in the order of docs/http-api.md's table: by
/// status, then as the doc explains them. A code appears once, with one status and one category.
inline constexpr problem_kind problem_table[] = {
  // 400: the request is wrong; nothing ran.
  {"BAD_REQUEST", 400},
  {"INVALID_PATH", 400},
  {"INVALID_ENTITY_KEY", 400},
  {"INVALID_ARGUMENT", 400},
  {"INVALID_QUERY", 400},
  {"INVALID_JSON", 400},
  {"JSON_TOO_DEEP", 400},
  {"INVALID_IDEMPOTENCY_KEY", 400},
  {"IDEMPOTENCY_KEY_REQUIRED", 400},
  {"INVALID_LAST_EVENT_ID", 400},
  {"INVALID_ACTION", 400},
  {"INVALID_MOVE", 400},
  {"CHECKSUM_MISMATCH", 400},
  // 400: a handler asked the context for something it refuses.
  {"INVALID_ALARM", 400},
  {"INVALID_SCHEDULE", 400},
  {"INVALID_CONNECTION", 400},
  {"INVALID_MESSAGE", 400},
  {"INVALID_CLOSE_CODE", 400},
  {"INVALID_CLOSE_REASON", 400},
  {"TOO_MANY_FRAMES", 400},
  // 401, 403: who asks.
  {"UNAUTHORIZED", 401},
  {"CLUSTER_SECRET_INVALID", 401},
  {"INSUFFICIENT_SCOPE", 403},
  {"TENANT_MISMATCH", 403},
  // 404, 405: what is asked for does not exist.
  {"ROUTE_NOT_FOUND", 404},
  {"UNKNOWN_ENTITY_TYPE", 404},
  {"METHOD_NOT_FOUND", 404},
  {"ENTITY_NOT_FOUND", 404},
  {"NOT_FOUND", 404},
  {"DEAD_LETTER_NOT_FOUND", 404},
  {"WEBSOCKET_NOT_SUPPORTED", 404},
  {"NOT_CLUSTERED", 404},
  {"METHOD_NOT_ALLOWED", 405},
  {"REQUEST_TIMEOUT", 408},
  // 409: the stored state does not allow it.
  {"CONFLICT", 409},
  {"IDEMPOTENCY_KEY_IN_USE", 409},
  {"INVALID_DEAD_LETTER_TRANSITION", 409},
  {"MOVE_REFUSED", 409},
  // client, not data_integrity: the server's configuration refuses it, not stored state.
  {"DEGRADATION_NOT_ENABLED", 409, error_category::client},
  {"BODY_TOO_LARGE", 413},
  {"UNSUPPORTED_MEDIA_TYPE", 415},
  {"IDEMPOTENCY_KEY_MISMATCH", 422},
  {"MOVE_FILE_INVALID", 422},
  {"UPGRADE_REQUIRED", 426},
  // 429: too much at once.
  {"ENTITY_OVERLOADED", 429},
  {"CONNECTION_CAP_REACHED", 429},
  // client, not transient: waiting makes no room (no Retry-After); an operator must.
  {"TENANT_QUOTA_EXCEEDED", 429, error_category::client},
  {"HEADERS_TOO_LARGE", 431},
  // 500: factum, its storage or the handler failed.
  {"INTERNAL", 500},
  {"HANDLER_FAILED", 500},
  {"INVALID_CONNECT_DECISION", 500},
  {"ENTITY_STORAGE_CORRUPT", 500},
  {"ARCHIVE_CORRUPT", 500},
  // data_integrity, not server: the handler broke a rule, and running it again breaks it again.
  {"JOURNAL_MISMATCH", 500, error_category::data_integrity},
  {"SHARED_CALL_READ_ONLY", 500, error_category::data_integrity},
  {"OUTCOME_UNKNOWN", 502},
  // 503: not now; retry (most with Retry-After).
  {"UNAVAILABLE", 503},
  {"TOO_MANY_CONNECTIONS", 503},
  {"ENTITY_RESTORING", 503},
  {"ENTITY_BUSY", 503},
  {"STORAGE_FULL", 503},
  {"STORAGE_READ_ONLY", 503},
  {"STORAGE_UNAVAILABLE", 503},
  {"DEGRADED", 503},
  {"TOO_MANY_RESTORES", 503},
  {"NOT_OWNER", 503},
  {"SHARD_UNAVAILABLE", 503},
  {"CLUSTER_UNAVAILABLE", 503},
  {"STREAM_AT_OWNER", 503},
  {"CALL_TIMEOUT", 504},
  // client, not server: the tenant's data must shrink or its quota grow; a retry alone fails.
  {"TENANT_STORAGE_QUOTA_EXCEEDED", 507, error_category::client},
};

namespace detail {

/// The entry of `code`, at compile time: a name below whose code is not in the table does not
/// compile.
consteval const problem_kind& problem_entry(std::string_view code) {
  for (const auto& p : problem_table)
    if (p.code == code)
      return p;
  throw "no such code in problem_table";
}

} // namespace detail

/// The table's entries by name, for the code that answers with them.
namespace problems {
inline constexpr const problem_kind& bad_request = detail::problem_entry("BAD_REQUEST");
inline constexpr const problem_kind& invalid_path = detail::problem_entry("INVALID_PATH");
inline constexpr const problem_kind& invalid_entity_key =
  detail::problem_entry("INVALID_ENTITY_KEY");
inline constexpr const problem_kind& invalid_argument = detail::problem_entry("INVALID_ARGUMENT");
inline constexpr const problem_kind& invalid_query = detail::problem_entry("INVALID_QUERY");
inline constexpr const problem_kind& invalid_json = detail::problem_entry("INVALID_JSON");
inline constexpr const problem_kind& json_too_deep = detail::problem_entry("JSON_TOO_DEEP");
inline constexpr const problem_kind& invalid_idempotency_key =
  detail::problem_entry("INVALID_IDEMPOTENCY_KEY");
inline constexpr const problem_kind& idempotency_key_required =
  detail::problem_entry("IDEMPOTENCY_KEY_REQUIRED");
inline constexpr const problem_kind& invalid_last_event_id =
  detail::problem_entry("INVALID_LAST_EVENT_ID");
inline constexpr const problem_kind& invalid_action = detail::problem_entry("INVALID_ACTION");
inline constexpr const problem_kind& invalid_move = detail::problem_entry("INVALID_MOVE");
inline constexpr const problem_kind& checksum_mismatch = detail::problem_entry("CHECKSUM_MISMATCH");
inline constexpr const problem_kind& invalid_alarm = detail::problem_entry("INVALID_ALARM");
inline constexpr const problem_kind& invalid_schedule = detail::problem_entry("INVALID_SCHEDULE");
inline constexpr const problem_kind& invalid_connection =
  detail::problem_entry("INVALID_CONNECTION");
inline constexpr const problem_kind& invalid_message = detail::problem_entry("INVALID_MESSAGE");
inline constexpr const problem_kind& invalid_close_code =
  detail::problem_entry("INVALID_CLOSE_CODE");
inline constexpr const problem_kind& invalid_close_reason =
  detail::problem_entry("INVALID_CLOSE_REASON");
inline constexpr const problem_kind& too_many_frames = detail::problem_entry("TOO_MANY_FRAMES");
inline constexpr const problem_kind& unauthorized = detail::problem_entry("UNAUTHORIZED");
inline constexpr const problem_kind& cluster_secret_invalid =
  detail::problem_entry("CLUSTER_SECRET_INVALID");
inline constexpr const problem_kind& insufficient_scope =
  detail::problem_entry("INSUFFICIENT_SCOPE");
inline constexpr const problem_kind& tenant_mismatch = detail::problem_entry("TENANT_MISMATCH");
inline constexpr const problem_kind& route_not_found = detail::problem_entry("ROUTE_NOT_FOUND");
inline constexpr const problem_kind& unknown_entity_type =
  detail::problem_entry("UNKNOWN_ENTITY_TYPE");
inline constexpr const problem_kind& method_not_found = detail::problem_entry("METHOD_NOT_FOUND");
inline constexpr const problem_kind& entity_not_found = detail::problem_entry("ENTITY_NOT_FOUND");
inline constexpr const problem_kind& not_found = detail::problem_entry("NOT_FOUND");
inline constexpr const problem_kind& dead_letter_not_found =
  detail::problem_entry("DEAD_LETTER_NOT_FOUND");
inline constexpr const problem_kind& websocket_not_supported =
  detail::problem_entry("WEBSOCKET_NOT_SUPPORTED");
inline constexpr const problem_kind& not_clustered = detail::problem_entry("NOT_CLUSTERED");
inline constexpr const problem_kind& method_not_allowed =
  detail::problem_entry("METHOD_NOT_ALLOWED");
inline constexpr const problem_kind& request_timeout = detail::problem_entry("REQUEST_TIMEOUT");
inline constexpr const problem_kind& conflict = detail::problem_entry("CONFLICT");
inline constexpr const problem_kind& idempotency_key_in_use =
  detail::problem_entry("IDEMPOTENCY_KEY_IN_USE");
inline constexpr const problem_kind& invalid_dead_letter_transition =
  detail::problem_entry("INVALID_DEAD_LETTER_TRANSITION");
inline constexpr const problem_kind& move_refused = detail::problem_entry("MOVE_REFUSED");
inline constexpr const problem_kind& degradation_not_enabled =
  detail::problem_entry("DEGRADATION_NOT_ENABLED");
inline constexpr const problem_kind& body_too_large = detail::problem_entry("BODY_TOO_LARGE");
inline constexpr const problem_kind& unsupported_media_type =
  detail::problem_entry("UNSUPPORTED_MEDIA_TYPE");
inline constexpr const problem_kind& idempotency_key_mismatch =
  detail::problem_entry("IDEMPOTENCY_KEY_MISMATCH");
inline constexpr const problem_kind& move_file_invalid = detail::problem_entry("MOVE_FILE_INVALID");
inline constexpr const problem_kind& upgrade_required = detail::problem_entry("UPGRADE_REQUIRED");
inline constexpr const problem_kind& entity_overloaded = detail::problem_entry("ENTITY_OVERLOADED");
inline constexpr const problem_kind& connection_cap_reached =
  detail::problem_entry("CONNECTION_CAP_REACHED");
inline constexpr const problem_kind& tenant_quota_exceeded =
  detail::problem_entry("TENANT_QUOTA_EXCEEDED");
inline constexpr const problem_kind& headers_too_large = detail::problem_entry("HEADERS_TOO_LARGE");
inline constexpr const problem_kind& internal = detail::problem_entry("INTERNAL");
inline constexpr const problem_kind& handler_failed = detail::problem_entry("HANDLER_FAILED");
inline constexpr const problem_kind& invalid_connect_decision =
  detail::problem_entry("INVALID_CONNECT_DECISION");
inline constexpr const problem_kind& entity_storage_corrupt =
  detail::problem_entry("ENTITY_STORAGE_CORRUPT");
inline constexpr const problem_kind& archive_corrupt = detail::problem_entry("ARCHIVE_CORRUPT");
inline constexpr const problem_kind& journal_mismatch = detail::problem_entry("JOURNAL_MISMATCH");
inline constexpr const problem_kind& shared_call_read_only =
  detail::problem_entry("SHARED_CALL_READ_ONLY");
inline constexpr const problem_kind& outcome_unknown = detail::problem_entry("OUTCOME_UNKNOWN");
inline constexpr const problem_kind& unavailable = detail::problem_entry("UNAVAILABLE");
inline constexpr const problem_kind& too_many_connections =
  detail::problem_entry("TOO_MANY_CONNECTIONS");
inline constexpr const problem_kind& entity_restoring = detail::problem_entry("ENTITY_RESTORING");
inline constexpr const problem_kind& entity_busy = detail::problem_entry("ENTITY_BUSY");
inline constexpr const problem_kind& storage_full = detail::problem_entry("STORAGE_FULL");
inline constexpr const problem_kind& storage_read_only = detail::problem_entry("STORAGE_READ_ONLY");
inline constexpr const problem_kind& storage_unavailable =
  detail::problem_entry("STORAGE_UNAVAILABLE");
inline constexpr const problem_kind& degraded = detail::problem_entry("DEGRADED");
inline constexpr const problem_kind& too_many_restores = detail::problem_entry("TOO_MANY_RESTORES");
inline constexpr const problem_kind& not_owner = detail::problem_entry("NOT_OWNER");
inline constexpr const problem_kind& shard_unavailable = detail::problem_entry("SHARD_UNAVAILABLE");
inline constexpr const problem_kind& cluster_unavailable =
  detail::problem_entry("CLUSTER_UNAVAILABLE");
inline constexpr const problem_kind& stream_at_owner = detail::problem_entry("STREAM_AT_OWNER");
inline constexpr const problem_kind& call_timeout = detail::problem_entry("CALL_TIMEOUT");
inline constexpr const problem_kind& tenant_storage_quota_exceeded =
  detail::problem_entry("TENANT_STORAGE_QUOTA_EXCEEDED");
} // namespace problems

/// Where a status is answered. Most places answer every errc alike (`any`); a route that needs a
/// more specific problem for some codes has a scope, and its entries below name them.
enum class errc_scope {
  any,        ///< calls, and every route without a scope of its own
  restore,    ///< bookmarks, rollbacks and forks: a corruption is the continuous archive's
  shard_move, ///< a shard move's file, as the node checks the move: refused
  move_file,  ///< a shard move's file, as the runtime adopts it: refused, or not the entity's
};

/// One row of the errc table: `code`, answered in `scope`, is `kind`.
struct errc_entry {
  errc code;
  errc_scope scope;
  const problem_kind* kind;
};

/// How every errc is answered (errc::ok is never an error). Each code has one `any` row; a
/// scope's rows replace it there.
inline constexpr errc_entry errc_table[] = {
  {errc::invalid_argument, errc_scope::any, &problems::invalid_argument},
  {errc::not_found, errc_scope::any, &problems::not_found},
  {errc::conflict, errc_scope::any, &problems::conflict},
  {errc::corruption, errc_scope::any, &problems::entity_storage_corrupt},
  {errc::not_factum_file, errc_scope::any, &problems::entity_storage_corrupt},
  {errc::newer_schema, errc_scope::any, &problems::entity_storage_corrupt},
  {errc::io_error, errc_scope::any, &problems::storage_unavailable},
  {errc::full, errc_scope::any, &problems::storage_full},
  {errc::read_only, errc_scope::any, &problems::storage_read_only},
  // Someone else holds the entity's file (another process, or an activation a rollback waits
  // for): the storage did not fail, and a retry once it lets go runs.
  {errc::busy, errc_scope::any, &problems::entity_busy},
  // The runtime is stopping, or a part it needs (an index, the cluster's lease) is gone.
  {errc::unavailable, errc_scope::any, &problems::unavailable},
  {errc::internal, errc_scope::any, &problems::internal},
  // Cluster mode: the gateway answers it to a relaying node only (a client gets
  // SHARD_UNAVAILABLE).
  {errc::not_owner, errc_scope::any, &problems::not_owner},
  {errc::quota_exceeded, errc_scope::any, &problems::tenant_quota_exceeded},
  // Rollbacks and forks read the continuous archive: a corruption there leaves the entity as it
  // is, which ENTITY_STORAGE_CORRUPT would deny.
  {errc::corruption, errc_scope::restore, &problems::archive_corrupt},
  // PUT /v1/cluster/moves/...: etcd has no such move to this node (or refused the read), the
  // node serves the shard already (or removes a failed move's copies), or the key is not in the
  // shard: refused.
  {errc::conflict, errc_scope::shard_move, &problems::move_refused},
  {errc::invalid_argument, errc_scope::shard_move, &problems::move_refused},
  {errc::not_found, errc_scope::shard_move, &problems::move_refused},
  // The runtime adopts the file: the entity is active here, or a newer claim's file is here
  // (refused); the file is not an entity file, another entity's, of a newer schema, or not
  // claimed under the move's epoch (invalid).
  {errc::busy, errc_scope::move_file, &problems::move_refused},
  {errc::conflict, errc_scope::move_file, &problems::move_refused},
  {errc::invalid_argument, errc_scope::move_file, &problems::move_file_invalid},
  {errc::corruption, errc_scope::move_file, &problems::move_file_invalid},
  {errc::not_factum_file, errc_scope::move_file, &problems::move_file_invalid},
  {errc::newer_schema, errc_scope::move_file, &problems::move_file_invalid},
};

/// The problem a status of `code` is answered with in `scope`: the scope's own row, else the
/// `any` row; INTERNAL for a code without one (errc::ok: a bug).
constexpr const problem_kind& problem_of(errc code, errc_scope scope = errc_scope::any) noexcept {
  const problem_kind* any = &problems::internal;
  for (const auto& e : errc_table) {
    if (e.code != code)
      continue;
    if (e.scope == scope)
      return *e.kind;
    if (e.scope == errc_scope::any)
      any = e.kind;
  }
  return *any;
}

/// The entry of `code` at run time (a code another component carries as text, such as a cluster
/// router's), or nullptr when the table has none.
constexpr const problem_kind* find_problem(std::string_view code) noexcept {
  for (const auto& p : problem_table)
    if (p.code == code)
      return &p;
  return nullptr;
}

} // namespace factum
