// factum/storage/record_json.hpp: the one JSON form of each record an entity's store keeps
// (records.hpp: idempotency keys, alarms, schedules, circuit breakers, dead letters, the owner
// history, journal steps), used by the HTTP API's answers (the runtime's built-in reads) and by
// `factum inspect`. A fact's JSON view is fact.hpp's to_json: the bytes its hash covers.
//
// One rule for absent values: every member of a form is always there, and one whose stored
// column is NULL, or that does not apply to the record (a pending key's HTTP status), is null.
// (A fact's view is the exception: its absent fields are left out, as its hash covers them.)
// Times are integer milliseconds since the epoch. Pure functions; any thread.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/storage/records.hpp"

namespace factum {

/// Which members a form holds.
enum class record_view {
  api,    ///< what the HTTP API answers (docs/http-api.md)
  stored, ///< that, and what only a reader of the file sees (docs/inspect.md, "JSON fields")
};

/// JSON text as a value; text that is not JSON as a string; empty text as null.
nlohmann::json json_or_string(std::string_view text);

/// `key`, `state` (pending, completed or failed), `created_at`, `expires_at` (null: kept until
/// purged), `status` (the HTTP status a retry with the key replays: 200 when completed, the
/// stored problem's when failed; null while pending), `code` (a failed key's problem code, else
/// null), `response_bytes` (the stored reply's size). Stored view: also `fingerprint` and
/// `response` (the stored reply, see json_or_string).
nlohmann::json key_json(const idempotency_record& k, record_view v = record_view::api);

/// `name`, `due_ms`, `attempts`, `payload`. Stored view: also `created_at`.
nlohmann::json alarm_json(const alarm_record& a, record_view v = record_view::api);

/// A recurring schedule (docs/storage-format.md section 17): `name`, `spec` (as stored, every
/// default filled in), `missed` (its missed-fire policy), `next_at` (the next scheduled time,
/// without jitter), `last_at` (the scheduled time of the last fire that ran; null before the
/// first), `payload`. Stored view: also `created_at`, `updated_at`.
nlohmann::json schedule_json(const schedule_record& s, record_view v = record_view::api);

/// `tool`, `state`, `updated_at`. Stored view: also `data` (the breaker's state as the runtime
/// keeps it; the API shows its window's counts instead, which the runtime adds).
nlohmann::json breaker_json(const breaker_record& b, record_view v = record_view::api);

/// `id`, `status`, `operation`, `payload`, `idempotency_key`, `config_id`, `config_version` (null
/// without a config), `error_code`, `error_message`, `error_category`, `reason`, `attempts`,
/// `auto_retries`, `first_attempt_at`, `last_attempt_at`, `trace_id`, `next_retry_at`,
/// `expires_at`, `created_at`, `updated_at`.
nlohmann::json dead_letter_json(const dead_letter_record& d);

/// A row of the owner history: `epoch`, `node`, `first_seq`, `claimed_at`.
nlohmann::json owner_json(const owner_record& o);

/// A step of a journal: `journal`, `step`, `kind`, `what`, `fingerprint`, `runs`, `state`
/// (completed, or in flight), `started_at_ms`, `finished_at_ms` (null while in flight),
/// `entries`, `result` (null while in flight).
nlohmann::json journal_step_json(const journal_step& s);

/// A journal in a listing: `journal`, `steps`, `completed`, `last_started_ms`.
nlohmann::json journal_summary_json(const journal_summary& j);

} // namespace factum
