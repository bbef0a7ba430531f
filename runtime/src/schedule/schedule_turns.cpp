// schedule_turns.cpp: recurring schedules on the alarm machinery (schedule_turns.hpp): the
// context's set_schedule and cancel_schedule, the alarm turn of a schedule and its failure, the
// `@alarms` listing. Runs on the entity's actor thread, inside a turn.
#include "schedule/schedule_turns.hpp"
#include "turn/call_errors.hpp"

#include <limits>

#include "factum/storage/record_json.hpp"
#include "factum/storage/utf8.hpp"
#include "turn/entity_context.hpp"
#include "turn/turn_runner.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// The stored spec of a schedule, parsed (it was checked when it was set).
schedule stored_spec(const schedule_record& row) {
  auto s = schedule::parse_text(row.spec, row.created_at_ms);
  if (!s)
    throw problems::invalid_schedule.error("stored schedule " + row.name + ": " +
                                           s.error().message());
  return std::move(s.value());
}

} // namespace

// -- helpers ------------------------------------------------------------------------------------

json retry_payload(const schedule_turn& st) {
  json p = {{"next", st.step.next_ms}, {"payload", json_or_string(st.payload)}};
  if (st.step.fire)
    p["fire"] = {{"at", st.step.fire->scheduled_ms}, {"missed", st.step.fire->missed}};
  return p;
}

std::optional<schedule_turn> chosen_fire(const std::string& alarm_payload) {
  auto p = json::parse(alarm_payload, nullptr, false);
  if (!p.is_object() || !p.contains("fire") || !p["fire"].is_object())
    return std::nullopt;
  schedule_turn st;
  st.step.fire =
    schedule_fire{p["fire"].value("at", int64_t{0}), p["fire"].value("missed", int64_t{0})};
  st.step.next_ms = p.value("next", st.step.fire->scheduled_ms);
  st.payload = p.value("payload", json::object()).dump();
  return st;
}

std::string schedule_journal_key(std::string_view schedule_name, int64_t scheduled_ms) {
  return "schedule:" + std::to_string(scheduled_ms) + ":" + std::string(schedule_name);
}

alarm_record fire_of_dead_letter(const alarm_record& dl_alarm) {
  alarm_record a = dl_alarm;
  a.name = dl_alarm.name.substr(schedule_alarm_prefix.size());
  a.schedule = true;
  if (auto st = chosen_fire(dl_alarm.payload)) {
    a.due_ms = st->step.fire->scheduled_ms;
    a.missed = st->step.fire->missed;
    a.payload = st->payload;
  }
  return a;
}

json alarms_json(entity_store& store) {
  json out = json::array();
  for (auto& a : value_or_throw(store.list_alarms())) {
    json e = alarm_json(a);
    if (is_schedule_alarm(a.name))
      if (auto row = store.get_schedule(a.name.substr(schedule_alarm_prefix.size())))
        e["schedule"] = schedule_json(*row);
    out.push_back(std::move(e));
  }
  for (auto& e : paused_json(store))
    out.push_back(std::move(e));
  return out;
}

// -- paused alarms and schedules -----------------------------------------------------------------

json turn_runner::resume_paused(const json& args) {
  auto who = operator_record(args);
  auto& store = this->store();
  auto p = value_or_throw(store.resume_paused());
  json alarms = json::array(), schedules = json::array();
  // Set again unless one of the same name was set since the fork (it keeps its own).
  auto absent = [](const auto& r) {
    if (!r && r.error().code() != errc::not_found)
      throw storage_error(r.error());
    return !r;
  };
  for (auto& a : p.alarms)
    if (absent(store.get_alarm(a.name))) {
      ctx_->set_alarm_internal(a.name, a.due_ms, a.payload, a.attempts);
      alarms.push_back(a.name);
    }
  for (auto& row : p.schedules) {
    auto spec = schedule::parse(json::parse(row.spec, nullptr, false), now());
    if (!spec || !absent(store.get_schedule(row.name)))
      continue;
    throw_if(store.put_schedule(row));
    ctx_->set_alarm_internal(schedule_alarm_name(row.name),
                             spec->due_ms(schedule_seed(*env_.key, row.name), row.next_ms),
                             json{{"at", row.next_ms}}.dump(), 0);
    schedules.push_back(row.name);
  }
  json out = {{"alarms", alarms}, {"schedules", schedules}};
  fact_draft d;
  d.type = "lifecycle";
  d.subtype = "paused_resumed";
  d.data = out;
  d.data.update(who);
  ctx_->append(std::move(d));
  return out;
}

json paused_json(entity_store& store) {
  json out = json::array();
  for (auto& a : value_or_throw(store.list_paused_alarms())) {
    auto e = alarm_json(a);
    e["paused"] = true;
    out.push_back(std::move(e));
  }
  for (auto& row : value_or_throw(store.list_paused_schedules()))
    out.push_back({{"name", schedule_alarm_name(row.name)},
                   {"due_ms", row.next_ms},
                   {"attempts", 0},
                   {"paused", true},
                   {"schedule", schedule_json(row)}});
  return out;
}

// -- the context --------------------------------------------------------------------------------

void entity_context::set_schedule(std::string name, const json& spec, json payload) {
  if (name.empty() || name[0] == '@' || name.size() > 118 || !valid_utf8(name))
    throw problems::invalid_schedule.error(
      "schedule names must be 1 to 118 bytes of UTF-8 and not start with '@'");
  int64_t now = now_ms(); // journaled: a replay computes the same next time
  auto s = schedule::parse(spec, now);
  if (!s)
    throw problems::invalid_schedule.error(s.error().message());
  auto next = s->next_after(now);
  if (!next)
    throw problems::invalid_schedule.error("the schedule never fires");
  // A journaled turn's write: a replay finds it done (its row and alarm committed).
  auto* j = journal();
  if (j && j->replay("set_schedule", name))
    return;
  schedule_record row;
  row.name = name;
  row.spec = s->to_json().dump();
  row.payload = payload.dump();
  row.next_ms = *next;
  row.created_at_ms = now;
  row.updated_at_ms = now;
  throw_if(store().put_schedule(row));
  set_alarm_internal(schedule_alarm_name(name), s->due_ms(schedule_seed(key(), name), *next),
                     json{{"at", *next}}.dump(), 0);
  if (j)
    j->record("set_schedule", name, nullptr);
}

void entity_context::cancel_schedule(std::string_view name) {
  auto* j = journal();
  if (j && j->replay("cancel_schedule", name))
    return;
  throw_if(store().delete_schedule(name));
  throw_if(store().cancel_alarm(schedule_alarm_name(name)));
  runner_.marks().alarms_moved = true;
  if (j)
    j->record("cancel_schedule", name, nullptr);
}

// -- the alarm turn of a schedule ---------------------------------------------------------------

void turn_runner::run_schedule(int64_t now) {
  auto& t = *turn_;
  std::string name = t.alarm.name.substr(schedule_alarm_prefix.size());
  auto row = store().get_schedule(name);
  if (!row) {
    if (row.error().code() != errc::not_found)
      throw storage_error(row.error());
    finish(nullptr, json(nullptr)); // an alarm without its schedule: finish_ok cancels it
    return;
  }
  auto spec = stored_spec(*row);
  schedule_turn st{name, {}, row->payload, {}};
  auto chosen = chosen_fire(t.alarm.payload);
  if (chosen) {
    // A fire chosen before: retried after a failure, or resumed after the process died in it
    // (its journal replays). It runs as the policy chose it then.
    st = *chosen;
    st.name = name;
  } else {
    st.step = spec.step(schedule_seed(*env_.key, name), row->next_ms, now);
  }
  t.schedule = st;
  if (!st.step.fire) {
    advance_schedule(*row, spec, st.step);
    finish(nullptr, json(nullptr));
    return;
  }
  if (!chosen) {
    // The alarm keeps the chosen fire until it ends: committed at the handler's first await, it
    // makes the fire resume after a crash instead of being skipped.
    ctx_->set_alarm_internal(t.alarm.name, t.alarm.due_ms, retry_payload(st).dump(),
                             t.alarm.attempts);
    record_dropped(name, spec, st.step);
  }
  start_journal(schedule_journal_key(name, st.step.fire->scheduled_ms), true);
  // The record lives in the turn: the handler holds a reference to it across its awaits.
  auto& a = t.schedule->record;
  a.name = name;
  a.due_ms = st.step.fire->scheduled_ms;
  a.payload = st.payload;
  a.attempts = t.alarm.attempts;
  a.created_at_ms = row->created_at_ms;
  a.schedule = true;
  a.missed = st.step.fire->missed;
  start_task(instance_->on_alarm(*ctx_, a), [this](std::exception_ptr e) {
    if (!e) {
      try {
        schedule_fire_done();
      } catch (...) {
        e = std::current_exception();
      }
    }
    finish(e, json(nullptr));
  });
}

void turn_runner::schedule_fire_done() {
  auto& t = *turn_;
  // The handler may have cancelled or replaced its schedule: then its alarm no longer holds this
  // fire, and what the handler did stands.
  auto cur = store().get_alarm(t.alarm.name);
  if (!cur || cur->payload != retry_payload(*t.schedule).dump())
    return;
  auto row = store().get_schedule(t.schedule->name);
  if (!row)
    return;
  advance_schedule(*row, stored_spec(*row), t.schedule->step);
}

void turn_runner::advance_schedule(schedule_record row, const schedule& spec,
                                   const schedule_step& step) {
  row.next_ms = step.next_ms;
  if (step.fire)
    row.last_ms = step.fire->scheduled_ms;
  row.updated_at_ms = now();
  throw_if(store().put_schedule(row));
  if (step.next_ms == std::numeric_limits<int64_t>::max()) {
    // No time to come (no accepted spec gets here).
    throw_if(store().cancel_alarm(schedule_alarm_name(row.name)));
    marks_.alarms_moved = true;
  } else {
    ctx_->set_alarm_internal(schedule_alarm_name(row.name),
                             spec.due_ms(schedule_seed(*env_.key, row.name), step.next_ms),
                             json{{"at", step.next_ms}}.dump(), 0);
  }
  if (!step.fire)
    record_dropped(row.name, spec, step);
}

void turn_runner::record_dropped(const std::string& name, const schedule& spec,
                                 const schedule_step& step) {
  if (step.dropped == 0)
    return;
  fact_draft d;
  d.type = "lifecycle";
  d.subtype = "schedule_missed";
  d.trace_id = turn_->info.trace_id;
  d.data = {{"schedule", name},
            {"missed", std::string(to_string(spec.policy()))},
            {"dropped", step.dropped},
            {"next_at", step.next_ms}};
  value_or_throw(store().append(d));
}

void turn_runner::schedule_failed(const call_error& ce) {
  auto& t = *turn_;
  // The retry (or the dead letter) carries the fire: the policy is not asked again for it.
  if (t.schedule && t.schedule->step.fire)
    t.alarm.payload = retry_payload(*t.schedule).dump();
  alarm_failed(ce);
  if (store().get_alarm(t.alarm.name))
    return; // retried later by the alarm's own backoff
  // Dead-lettered: the schedule goes on from the time after the failed fire.
  auto row = store().get_schedule(t.alarm.name.substr(schedule_alarm_prefix.size()));
  if (!row)
    return; // cancelled meanwhile
  auto spec = stored_spec(*row);
  schedule_step next;
  next.next_ms = t.schedule ? t.schedule->step.next_ms
                            : spec.next_after(now()).value_or(std::numeric_limits<int64_t>::max());
  advance_schedule(*row, spec, next);
}

} // namespace factum::detail
