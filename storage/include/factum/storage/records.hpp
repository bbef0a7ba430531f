// factum/storage/records.hpp: the records an entity's store keeps and hands out (idempotency
// keys, alarms, dead letters, circuit breakers, versioned configs, the owner history, the
// chain's check, an entity's summary), apart from the store itself (entity_store.hpp, which
// includes this): the tenant API (factum/entities/context.hpp) names them without seeing the
// store. Plain value types; any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum {

// -- records ------------------------------------------------------------------------------------

/// Status of an idempotency key as stored.
enum class key_status { pending, completed, failed };
std::string_view to_string(key_status s) noexcept;

struct idempotency_record {
  std::string key;
  key_status status = key_status::pending;
  std::string fingerprint;
  std::string response; ///< stored response (JSON text) for completed/failed
  int64_t created_at_ms = 0;
  std::optional<int64_t> expires_at_ms; ///< empty: kept until purged
};

struct alarm_record {
  std::string name;
  int64_t due_ms = 0;
  std::string payload = "{}"; ///< JSON text
  int64_t attempts = 0;       ///< failed handler runs so far
  int64_t created_at_ms = 0;
  // -- the fire of a recurring schedule (context::set_schedule); not columns of `alarms` --
  /// The turn fires the schedule `name`: `due_ms` is the scheduled time it stands for (without
  /// jitter), `payload` the schedule's payload.
  bool schedule = false;
  /// Scheduled times that were missed which this fire covers: 0 for a fire on time, 1 for each
  /// fire of `fire_all` catching up, all of them for `fire_once` (docs/architecture.md,
  /// "Schedules").
  int64_t missed = 0;
};

/// What an entity holds paused (entity_store::resume_paused).
struct paused_state;

/// A recurring schedule of an entity (docs/storage-format.md section 17). Its fires go through
/// the alarm `@schedule:<name>`.
struct schedule_record {
  std::string name;
  std::string spec = "{}";        ///< the spec as JSON text, every default filled in
  std::string payload = "{}";     ///< JSON text handed to each fire
  int64_t next_ms = 0;            ///< the next scheduled time (without jitter)
  std::optional<int64_t> last_ms; ///< the scheduled time of the last fire that ran
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

struct paused_state {
  std::vector<alarm_record> alarms;
  std::vector<schedule_record> schedules;
};

/// Where an entity's facts stand with one outbox sink (docs/storage-format.md section 18).
struct outbox_cursor {
  std::string sink;
  int64_t seq = 0;        ///< the last fact the sink acknowledged or that was dead-lettered
  int64_t attempts = 0;   ///< failed deliveries of the fact after `seq` since its last success
  int64_t next_ms = 0;    ///< no delivery to this sink before this time (backoff); 0: now
  std::string last_error; ///< the last failure, "CODE: message"; empty after a success
  int64_t updated_at_ms = 0;
};

/// Dead letter states (their moves: factum/resilience/dead_letter_rules.hpp).
enum class dl_status { pending, scheduled, resolved, discarded, acknowledged };
std::string_view to_string(dl_status s) noexcept;
result<dl_status> parse_dl_status(std::string_view text);

struct dead_letter_record {
  std::string id;        ///< "dl_..."
  std::string operation; ///< method or tool operation name
  std::string payload = "{}";
  std::string idempotency_key;
  std::string config_id;
  int64_t config_version = 0;
  std::string error_code;
  std::string error_message;
  std::string error_category;
  std::string reason; ///< failure reason (rate_limit, server_error, timeout, ...)
  int64_t attempts = 0;
  int64_t first_attempt_ms = 0;
  int64_t last_attempt_ms = 0;
  std::string trace_id;
  dl_status status = dl_status::pending;
  std::optional<int64_t> next_retry_ms;
  std::optional<int64_t> expires_at_ms;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  /// Retries run since it was made or an operator last retried it: automatic retries stop at
  /// the cap of its reason's rule (schema version 5; 0 in older files).
  int64_t auto_retries = 0;
};

struct breaker_record {
  std::string tool_id;
  std::string state;       ///< CLOSED, OPEN, HALF_OPEN, FORCED_OPEN, DISABLED
  std::string data = "{}"; ///< JSON: counters, window, opened_at (owned by the runtime)
  int64_t updated_at_ms = 0;
};

/// An entity's dead letters of one status and failure reason (entity_store::fleet_summary).
struct dead_letter_group {
  std::string status; ///< to_string(dl_status)
  std::string reason;
  int64_t count = 0;
  int64_t oldest_ms = 0; ///< the earliest created_at among them
};

/// What the tenant index keeps of an entity for the fleet views (docs/storage-format.md, the
/// tenant index): its dead letters by status and reason, its breakers' states, its last fact.
struct entity_fleet_summary {
  std::vector<dead_letter_group> dead_letters;
  std::vector<breaker_record> breakers; ///< `data` left empty
  int64_t last_activity_ms = 0;         ///< the timestamp of its last fact (0: none)
};

struct config_record {
  std::string config_id;
  int64_t version = 0;
  std::string body = "{}"; ///< JSON text; a version is immutable
  int64_t created_at_ms = 0;
};

/// One claim of the entity by a node in cluster mode: a row of the file's owner history
/// (entity_store::claim_owner; docs/storage-format.md section 15).
struct owner_record {
  int64_t epoch = 0;      ///< the claim's epoch (> 0); the largest one is the file's owner epoch
  std::string node;       ///< the node that claimed it
  int64_t first_seq = 0;  ///< the seq the first fact written under this epoch has (or will have)
  int64_t claimed_ms = 0; ///< when the claim committed
};

/// One awaited step of a journaled call (entity_store's journal; docs/storage-format.md
/// section 16): written when the step starts, completed with its result, replayed by a retry.
struct journal_step {
  std::string key;         ///< the journal's call: an idempotency key, "@alarm:NAME" or "@dl:ID"
  int64_t step = 0;        ///< 1, 2, ... in the order the handler awaited
  std::string kind;        ///< "tool", "call" or "sleep"
  std::string what;        ///< tool/operation, type/id/method, or the sleep's duration
  std::string fingerprint; ///< SHA-256 (hex) of the request
  /// What the handler did since the step before (reads, writes, clock, random numbers), each
  /// with its result: a JSON array (docs/storage-format.md section 16).
  std::string entries = "[]";
  std::optional<std::string> result;     ///< the step's result (JSON); none while in flight
  int64_t runs = 1;                      ///< how many times the step was started
  int64_t started_at_ms = 0;             ///< when it last started
  std::optional<int64_t> finished_at_ms; ///< when it completed
};

/// A journal in a listing: its key, how many steps, and when its last step started.
struct journal_summary {
  std::string key;
  int64_t steps = 0;
  int64_t completed = 0; ///< steps with a result
  int64_t last_started_ms = 0;
};

/// What verify() found.
struct verify_report {
  bool ok = true;
  int64_t facts_checked = 0;
  int64_t owner_epoch = 0;           ///< the file's owner epoch (0: never claimed)
  int64_t first_bad_seq = 0;         ///< first fact that fails the chain; 0 when none does
  std::string problem;               ///< the first problem; empty when ok
  std::vector<std::string> problems; ///< every problem found (schema, triggers, first bad fact)
};

/// Summary of an entity for listings.
struct entity_info {
  entity_key key;
  std::filesystem::path path;
  int schema_version = 0;
  int64_t fact_count = 0;
  int64_t last_fact_ms = 0;
  int64_t created_at_ms = 0;
  uint64_t file_bytes = 0; ///< the database file plus its -wal
  int64_t owner_epoch = 0; ///< the file's owner epoch (0: never claimed in cluster mode)
  std::string owner_node;  ///< the node holding owner_epoch (empty when 0)
};

} // namespace factum
