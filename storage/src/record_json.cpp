// record_json.cpp: the JSON forms of an entity's records (see record_json.hpp). Pure functions;
// any thread.
#include "factum/storage/record_json.hpp"

#include <optional>
#include <string>

namespace factum {

using nlohmann::json;

namespace {

json opt_ms(const std::optional<int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

// A text column that may be NULL (read as "").
json str_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

} // namespace

json json_or_string(std::string_view text) {
  if (text.empty())
    return nullptr;
  auto v = json::parse(text, nullptr, false);
  if (v.is_discarded())
    return std::string(text);
  return v;
}

json key_json(const idempotency_record& k, record_view v) {
  json out = {{"key", k.key},
              {"state", std::string(to_string(k.status))},
              {"created_at", k.created_at_ms},
              {"expires_at", opt_ms(k.expires_at_ms)},
              {"status", nullptr},
              {"code", nullptr},
              {"response_bytes", k.response.size()}};
  if (k.status == key_status::completed) {
    out["status"] = 200;
  } else if (k.status == key_status::failed) {
    auto p = json::parse(k.response, nullptr, false);
    if (p.is_object()) {
      out["status"] = p.value("status", 500);
      out["code"] = p.value("code", std::string());
    }
  }
  if (v == record_view::stored) {
    out["fingerprint"] = k.fingerprint;
    out["response"] = json_or_string(k.response);
  }
  return out;
}

json alarm_json(const alarm_record& a, record_view v) {
  json out = {{"name", a.name},
              {"due_ms", a.due_ms},
              {"attempts", a.attempts},
              {"payload", json_or_string(a.payload)}};
  if (v == record_view::stored)
    out["created_at"] = a.created_at_ms;
  return out;
}

json schedule_json(const schedule_record& s, record_view v) {
  auto spec = json_or_string(s.spec);
  json out = {{"name", s.name},
              {"spec", spec},
              {"missed", spec.is_object() ? spec.value("missed", json()) : json()},
              {"next_at", s.next_ms},
              {"last_at", opt_ms(s.last_ms)},
              {"payload", json_or_string(s.payload)}};
  if (v == record_view::stored) {
    out["created_at"] = s.created_at_ms;
    out["updated_at"] = s.updated_at_ms;
  }
  return out;
}

json breaker_json(const breaker_record& b, record_view v) {
  json out = {{"tool", b.tool_id}, {"state", b.state}, {"updated_at", b.updated_at_ms}};
  if (v == record_view::stored)
    out["data"] = json_or_string(b.data);
  return out;
}

json dead_letter_json(const dead_letter_record& d) {
  return json{{"id", d.id},
              {"status", std::string(to_string(d.status))},
              {"operation", d.operation},
              {"payload", json_or_string(d.payload)},
              {"idempotency_key", str_or_null(d.idempotency_key)},
              {"config_id", str_or_null(d.config_id)},
              {"config_version", d.config_id.empty() ? json(nullptr) : json(d.config_version)},
              {"error_code", d.error_code},
              {"error_message", d.error_message},
              {"error_category", d.error_category},
              {"reason", d.reason},
              {"attempts", d.attempts},
              {"auto_retries", d.auto_retries},
              {"first_attempt_at", d.first_attempt_ms},
              {"last_attempt_at", d.last_attempt_ms},
              {"trace_id", str_or_null(d.trace_id)},
              {"next_retry_at", opt_ms(d.next_retry_ms)},
              {"expires_at", opt_ms(d.expires_at_ms)},
              {"created_at", d.created_at_ms},
              {"updated_at", d.updated_at_ms}};
}

json owner_json(const owner_record& o) {
  return json{
    {"epoch", o.epoch}, {"node", o.node}, {"first_seq", o.first_seq}, {"claimed_at", o.claimed_ms}};
}

json journal_step_json(const journal_step& s) {
  return json{{"journal", s.key},
              {"step", s.step},
              {"kind", s.kind},
              {"what", s.what},
              {"fingerprint", s.fingerprint},
              {"runs", s.runs},
              {"state", s.result ? "completed" : "in flight"},
              {"started_at_ms", s.started_at_ms},
              {"finished_at_ms", opt_ms(s.finished_at_ms)},
              {"entries", json_or_string(s.entries)},
              {"result", s.result ? json_or_string(*s.result) : json(nullptr)}};
}

json journal_summary_json(const journal_summary& j) {
  return json{{"journal", j.key},
              {"steps", j.steps},
              {"completed", j.completed},
              {"last_started_ms", j.last_started_ms}};
}

} // namespace factum
