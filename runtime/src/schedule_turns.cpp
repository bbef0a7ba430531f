// schedule_turns.cpp: recurring schedules on the alarm machinery (schedule_turns.hpp): the
// context's set_schedule and cancel_schedule, the alarm turn of a schedule and its failure, the
// `@alarms` listing. Runs on the entity's actor thread, inside a turn.
#include "schedule_turns.hpp"

#include <limits>

#include "entity_context.hpp"
#include "factum/storage/utf8.hpp"
#include "turn_runner.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

template <class T> T value_or_throw(result<T> r) {
  if (!r)
    throw storage_error(r.error());
  return std::move(r.value());
}

void throw_if(const status& st) {
  if (!st)
    throw storage_error(st);
}

json json_or_text(const std::string& text) {
  auto v = json::parse(text, nullptr, false);
  return v.is_discarded() ? json(text) : v;
}

/// The stored spec of a schedule, parsed (it was checked when it was set).
schedule stored_spec(const schedule_record& row) {
  auto s = schedule::parse_text(row.spec, row.created_at_ms);
  if (!s)
    throw call_error(error_category::data_integrity, "INVALID_SCHEDULE",
                     "stored schedule " + row.name + ": " + s.error().message(), 500);
  return std::move(s.value());
}

} // namespace

// -- helpers ------------------------------------------------------------------------------------

json retry_payload(const schedule_turn& st) {
  json p = {{"next", st.step.next_ms}, {"payload", json_or_text(st.payload)}};
  if (st.step.fire) {
    p["at"] = st.step.fire->scheduled_ms;
    p["missed"] = st.step.fire->missed;
  }
  return p;
}

alarm_record fire_of_dead_letter(const alarm_record& dl_alarm) {
  alarm_record a = dl_alarm;
  auto p = json::parse(dl_alarm.payload, nullptr, false);
  a.name = dl_alarm.name.substr(schedule_alarm_prefix.size());
  a.schedule = true;
  if (p.is_object()) {
    a.due_ms = p.value("at", dl_alarm.due_ms);
    a.missed = p.value("missed", int64_t{0});
    a.payload = p.value("payload", json::object()).dump();
  }
  return a;
}

json alarms_json(entity_store& store) {
  json out = json::array();
  for (auto& a : value_or_throw(store.list_alarms())) {
    json e = {{"name", a.name},
              {"due_ms", a.due_ms},
              {"attempts", a.attempts},
              {"payload", json::parse(a.payload, nullptr, false)}};
    if (is_schedule_alarm(a.name)) {
      auto row = store.get_schedule(a.name.substr(schedule_alarm_prefix.size()));
      if (row) {
        auto spec = json_or_text(row->spec);
        e["schedule"] = {{"name", row->name},
                         {"spec", spec},
                         {"missed", spec.is_object() ? spec.value("missed", json()) : json()},
                         {"next_at", row->next_ms},
                         {"last_at", row->last_ms ? json(*row->last_ms) : json()},
                         {"payload", json_or_text(row->payload)}};
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// -- the context --------------------------------------------------------------------------------

void entity_context::set_schedule(std::string name, const json& spec, json payload) {
  if (name.empty() || name[0] == '@' || name.size() > 118 || !valid_utf8(name))
    throw client_error("INVALID_SCHEDULE",
                       "schedule names must be 1 to 118 bytes of UTF-8 and not start with '@'");
  int64_t now = now_ms();
  auto s = schedule::parse(spec, now);
  if (!s)
    throw client_error("INVALID_SCHEDULE", s.error().message());
  auto next = s->next_after(now);
  if (!next)
    throw client_error("INVALID_SCHEDULE", "the schedule never fires");
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
}

void entity_context::cancel_schedule(std::string_view name) {
  throw_if(store().delete_schedule(name));
  cancel_alarm(schedule_alarm_name(name));
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
  schedule_turn st{name, {}, row->payload};
  auto retry = json::parse(t.alarm.payload, nullptr, false);
  if (t.alarm.attempts > 0 && retry.is_object() && retry.contains("at")) {
    // The retry of a failed fire runs that fire again, as the policy chose it.
    st.step.fire = schedule_fire{retry.value("at", int64_t{0}), retry.value("missed", int64_t{0})};
    st.step.next_ms = retry.value("next", row->next_ms);
    st.payload = retry.value("payload", json::object()).dump();
  } else {
    st.step = spec.step(schedule_seed(*env_.key, name), row->next_ms, now);
  }
  t.schedule = st;
  advance_schedule(*row, spec, st.step);
  if (!st.step.fire) {
    finish(nullptr, json(nullptr));
    return;
  }
  alarm_record a;
  a.name = name;
  a.due_ms = st.step.fire->scheduled_ms;
  a.payload = st.payload;
  a.attempts = t.alarm.attempts;
  a.created_at_ms = row->created_at_ms;
  a.schedule = true;
  a.missed = st.step.fire->missed;
  start_task(instance_->on_alarm(*ctx_, a),
             [this](std::exception_ptr e) { finish(e, json(nullptr)); });
}

void turn_runner::advance_schedule(schedule_record row, const schedule& spec,
                                   const schedule_step& step) {
  auto& t = *turn_;
  int64_t now = this->now();
  row.next_ms = step.next_ms;
  if (step.fire)
    row.last_ms = step.fire->scheduled_ms;
  row.updated_at_ms = now;
  throw_if(store().put_schedule(row));
  if (step.next_ms == std::numeric_limits<int64_t>::max())
    ctx_->cancel_alarm(schedule_alarm_name(row.name)); // no time to come (no accepted spec)
  else
    ctx_->set_alarm_internal(schedule_alarm_name(row.name),
                             spec.due_ms(schedule_seed(*env_.key, row.name), step.next_ms),
                             json{{"at", step.next_ms}}.dump(), 0);
  if (step.dropped > 0) {
    fact_draft d;
    d.type = "lifecycle";
    d.subtype = "schedule_missed";
    d.trace_id = t.info.trace_id;
    d.data = {{"schedule", row.name},
              {"missed", std::string(to_string(spec.policy()))},
              {"dropped", step.dropped},
              {"next_at", step.next_ms}};
    value_or_throw(store().append(d));
  }
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
