// schedule_turns.hpp (private): how recurring schedules live on the alarm machinery. A schedule
// is a row of the entity's `schedules` table plus the alarm `@schedule:<name>`, due at its next
// scheduled time plus jitter; the alarm index wakes a hibernated entity for it like for any
// alarm. Its alarm turn (turn_runner::run_schedule) applies the missed-fire policy, keeps the
// chosen fire on the alarm while on_alarm runs it (a fire the process died in resumes, its
// journal replaying), then moves the row and the alarm on to the next time; a failing fire is
// retried by the alarm's own backoff and, once that is spent, dead-lettered while the schedule
// goes on (docs/architecture.md, "Schedules"). Touched only on the entity's actor thread, in a
// turn.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/records.hpp"
#include "schedule/schedule.hpp"

namespace factum::detail {

/// The prefix of a schedule's alarm name.
inline constexpr std::string_view schedule_alarm_prefix = "@schedule:";

inline bool is_schedule_alarm(std::string_view alarm_name) {
  return alarm_name.substr(0, schedule_alarm_prefix.size()) == schedule_alarm_prefix;
}
inline std::string schedule_alarm_name(std::string_view schedule_name) {
  return std::string(schedule_alarm_prefix) + std::string(schedule_name);
}
/// What a schedule's jitter is hashed from: the entity and the schedule's name.
inline std::string schedule_seed(const entity_key& key, std::string_view schedule_name) {
  return key.to_string() + ":" + std::string(schedule_name);
}

/// The fire a schedule's alarm turn runs, kept for the turn's failure: by then the turn's writes
/// (the row and the alarm moved on) are rolled back, and the retry must run this same fire.
struct schedule_turn {
  std::string name;    ///< the schedule's name
  schedule_step step;  ///< what the policy decided
  std::string payload; ///< the schedule's payload (JSON text)
  alarm_record record; ///< what on_alarm sees (kept here: the handler refers to it)
};

/// The alarm payload while a chosen fire runs, and of its retry and its dead letter:
/// {"fire": {"at", "missed"}, "next", "payload"}, so that a resumed or retried fire is the same.
nlohmann::json retry_payload(const schedule_turn& st);
/// The fire an alarm payload of retry_payload() holds (name left empty); nullopt for the payload
/// of an alarm waiting for its time ({"at": ...}).
std::optional<schedule_turn> chosen_fire(const std::string& alarm_payload);
/// The journal key of one fire (durable execution: its awaited steps replay when the fire is
/// resumed or retried; each fire has its own).
std::string schedule_journal_key(std::string_view schedule_name, int64_t scheduled_ms);
/// The record on_alarm sees for the retry of a dead-lettered fire (`dl_alarm` names the alarm
/// `@schedule:<name>` and carries retry_payload()).
alarm_record fire_of_dead_letter(const alarm_record& dl_alarm);
/// The entity's alarms for the `@alarms` route: each schedule's alarm also shows its schedule
/// (spec, policy, next and last fire, payload).
nlohmann::json alarms_json(entity_store& store);
/// What the entity holds paused (a fork's alarms and schedules), listed as alarms_json lists
/// alarms, each with "paused": true.
nlohmann::json paused_json(entity_store& store);

} // namespace factum::detail
