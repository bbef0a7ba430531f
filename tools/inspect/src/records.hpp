// records.hpp (private to factum_inspect): the lenient readers of records from a server's JSON
// (facts, dead letters, breakers) and a schedule's spec in words; the JSON forms the tool prints
// are the store's (factum/storage/record_json.hpp). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/record_json.hpp"

namespace factum::tools {

/// A schedule's spec in a few words: "every 60000 ms", "cron 30 2 * * * Europe/Berlin", plus
/// the jitter when there is one.
std::string schedule_spec_text(const schedule_record& s);

/// Reads a fact in its JSON view (docs/storage-format.md sections 6 and 7), as the HTTP API
/// sends it. `timestamp` may be milliseconds or an ISO 8601 string; `amount` a decimal string (or
/// an integer).
result<fact> fact_from_json(const nlohmann::json& j);
/// Reads a dead letter as dead_letter_json writes it (times as x_at or x_ms, ms or ISO).
result<dead_letter_record> dead_letter_from_json(const nlohmann::json& j);
/// Reads a breaker as breaker_json writes it (`tool`, or `tool_id` as earlier versions wrote it;
/// `data`, or else the other members, as the API's window counts).
result<breaker_record> breaker_from_json(const nlohmann::json& j);

/// The array in a server answer: the answer itself, or its member `name` (or "items").
result<nlohmann::json> json_list(const nlohmann::json& body, std::string_view name);

} // namespace factum::tools
