// records.hpp (private to factum_inspect): the JSON forms of the records the tool prints
// (idempotency keys, alarms and schedules, breakers, dead letters, owner history, entity
// summaries), and the lenient readers of the same records from a server's JSON. Pure functions; any
// thread.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/status.hpp"

namespace factum::tools {

/// JSON text as a value, or the text itself as a string when it is not JSON.
nlohmann::json json_or_string(std::string_view text);

/// Output forms; times are integer milliseconds since the epoch, absent ones null.
nlohmann::json key_json(const idempotency_record& k, int64_t now);
nlohmann::json alarm_json(const alarm_record& a, int64_t now);
/// A recurring schedule (docs/storage-format.md section 17): name, spec, its missed-fire policy,
/// next and last scheduled time, payload.
nlohmann::json schedule_json(const schedule_record& s);
/// A schedule's spec in a few words: "every 60000 ms", "cron 30 2 * * * Europe/Berlin", plus
/// the jitter when there is one.
std::string schedule_spec_text(const schedule_record& s);
nlohmann::json breaker_json(const breaker_record& b);
nlohmann::json dead_letter_json(const dead_letter_record& d);
nlohmann::json owner_json(const owner_record& o);

/// Reads a fact in its JSON view (docs/storage-format.md sections 6 and 7), as the HTTP API
/// sends it. `timestamp` may be milliseconds or an ISO 8601 string; `amount` a decimal string (or
/// an integer).
result<fact> fact_from_json(const nlohmann::json& j);
/// Reads a dead letter as dead_letter_json writes it (times as x_at or x_ms, ms or ISO).
result<dead_letter_record> dead_letter_from_json(const nlohmann::json& j);
/// Reads a breaker as breaker_json writes it (`tool_id` or `tool`; `data` or the other fields).
result<breaker_record> breaker_from_json(const nlohmann::json& j);

/// The array in a server answer: the answer itself, or its member `name` (or "items").
result<nlohmann::json> json_list(const nlohmann::json& body, std::string_view name);

} // namespace factum::tools
