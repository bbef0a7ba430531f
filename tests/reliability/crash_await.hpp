// crash_await.hpp: what the crash rounds for awaiting handlers share between their driver
// (crash_await_driver.cpp: the rounds, the load, the settling) and their checks
// (crash_await_check.cpp: the files on disk and the vendor's counters): the options, one
// record per logical call, the figures, and the names and keys every part must agree on.
// Records and figures are guarded by the driver's mutex while client threads run; the checks
// run on the main thread after every thread has ended.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "crash_support.hpp"

namespace factum::crash_await {

using test::fail;
using test::failure_count;

// -- options --

/// The flags both crash drivers take (crash_support.hpp), with these defaults, and this
/// driver's own.
struct options : test::driver_options {
  options() {
    rounds = 8;
    connections = 12;
    entities = 6;
  }
  std::string vendor;               ///< the `factum-fake-vendor` binary (--vendor, required)
  int64_t trial_timeout_ms = 60000; ///< the breaker's (the runtime's default)
  /// A scheduled dead letter that lost its alarm is counted and retried by the operator
  /// instead of failing the run.
  bool lenient = false;
};

// -- one logical call: a client key, retried with the same body until it is settled --

enum class call_state {
  open,          ///< no settled answer yet (no response, or a retryable failure)
  dead_lettered, ///< a reply named the dead letter that owns the key
  acked,         ///< answered 2xx
  terminal,      ///< answered a stored terminal failure
};

struct call_record {
  std::string key; ///< the client's Idempotency-Key
  int entity = 0;
  std::string body;                ///< the request body, the same for every retry
  std::string vendor_key;          ///< the Idempotency-Key the runtime derives for its tool call
  std::vector<std::string> traces; ///< the X-Trace-Id of every request sent with the key
  call_state state = call_state::open;
  std::string dead_letter;   ///< the dead letter a reply named (at most one per key)
  std::string answer;        ///< the settled answer's body
  int64_t not_before_ms = 0; ///< a retryable failure waits before the next retry
  // Filled by the check: what the entity's log and the vendor say about the call.
  int64_t deliveries_recorded = 0;    ///< successful deliveries in the entity's log
  int64_t failures_recorded = 0;      ///< failed vendor attempts in the entity's log
  int64_t dead_letter_created_ms = 0; ///< when its dead letter was made (wall clock), or 0
};

/// Stable addresses: client threads keep indexes, the vector of a round grows.
using call_list = std::deque<call_record>;

// -- figures --

struct figures {
  int64_t kills = 0;
  int64_t calls = 0;      ///< logical calls (unique client keys)
  int64_t requests = 0;   ///< HTTP requests of the load (first sends and retries)
  int64_t unanswered = 0; ///< requests a kill left without a response
  int64_t acked = 0;      ///< 2xx answers
  int64_t replayed = 0;   ///< of them marked Idempotent-Replayed
  int64_t retryable = 0;  ///< retryable failures (503 CIRCUIT_OPEN, HTTP_503, TIMEOUT, ...)
  int64_t dead_letter_replies = 0;         ///< 5xx answers naming a new dead letter
  int64_t refused_by_dead_letter = 0;      ///< 409 IDEMPOTENCY_KEY_IN_USE naming the key's owner
  int64_t in_flight_409 = 0;               ///< 409 IDEMPOTENCY_KEY_IN_USE without a dead letter
  int64_t in_flight_409_dead_lettered = 0; ///< of them for a key a dead letter owns
  int64_t terminal = 0;
  std::map<std::string, int64_t> codes;       ///< retryable failures by code
  int64_t operator_retries = 0;               ///< operator retries of dead letters answered 200
  int64_t vendor_in_flight_at_kills = 0;      ///< vendor calls in progress just before kills
  int64_t dead_letter_in_flight_at_kills = 0; ///< of them for keys a dead letter owned
  int64_t kills_during_dead_letter_retries = 0;
  int64_t settle_passes = 0;
  int64_t lost_alarms = 0; ///< scheduled dead letters never retried: the operator retried them
  // From the files on disk.
  int64_t facts = 0;
  int64_t deliveries = 0;     ///< successful deliveries recorded (cost facts, failed false)
  int64_t attempt_errors = 0; ///< failed vendor attempts recorded (error facts of the tool)
  int64_t fast_fails = 0;     ///< CIRCUIT_OPEN error facts
  int64_t exhausted = 0;      ///< max_retries_exceeded error facts
  int64_t budget = 0;         ///< RETRY_BUDGET_EXHAUSTED error facts
  int64_t resolved_after_retry = 0;
  int64_t breaker_changes = 0;
  int64_t dead_letters = 0;
  int64_t dead_letter_retry_failed = 0;
  int64_t operator_retry_facts = 0;
  // From the vendor's counters.
  int64_t vendor_calls = 0;
  int64_t vendor_delivered = 0;
  int64_t vendor_replayed = 0;
  int64_t vendor_failed = 0;
  int64_t vendor_no_answer = 0;
  int64_t keys_replayed = 0;   ///< calls the vendor delivered and then saw again
  int64_t unrecorded = 0;      ///< vendor calls the entity's log has no attempt for
  int64_t recorded_unseen = 0; ///< recorded attempts beyond the vendor's count of calls
  std::map<int64_t, int64_t> vendor_calls_per_key; ///< calls -> number of client keys
};

// -- names --

constexpr const char* api_key = "crash-await-key";
constexpr const char* tenant = "acme";
constexpr const char* tool = "hook";

std::string entity_id(int e);
/// "fk_" + the first 40 hex digits of SHA-256(entity key, call key, tool, operation, payload),
/// as the runtime's resilient call derives it (docs/tools.md, "Idempotency-Key").
std::string vendor_key_of(int entity, const std::string& key, const nlohmann::json& payload);

// -- the checks at the end (crash_await_check.cpp) --

/// Opens every entity read-only: chains, one recorded delivery per acknowledged key, no run of
/// a key outside its dead letter while the dead letter owned it, every dead letter resolved,
/// every acknowledged key's stored answer.
void check_on_disk(const std::filesystem::path& data, call_list& calls, const options& o,
                   figures& fig);
/// Against GET /_vendor/keys: every acknowledged call delivered, no call with more attempts in
/// its log than the vendor saw for its key, no key no call derives, the per-key counts.
void check_vendor(const nlohmann::json& keys, call_list& calls, figures& fig);

} // namespace factum::crash_await
