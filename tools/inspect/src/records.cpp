// records.cpp: lenient readers of server JSON and a schedule's spec in words (see records.hpp).
// Pure functions; any thread.
#include "records.hpp"

#include "output.hpp"

namespace factum::tools {

namespace {

using nlohmann::json;

// A string member, "" when absent or null; other JSON values are rendered as JSON text.
std::string get_str(const json& j, std::initializer_list<const char*> names) {
  for (auto* n : names) {
    auto it = j.find(n);
    if (it == j.end() || it->is_null())
      continue;
    return it->is_string() ? it->get<std::string>() : it->dump();
  }
  return {};
}

// A time member as ms (integer, numeric string or ISO 8601); nullopt when absent/null.
result<std::optional<int64_t>> get_time(const json& j, std::initializer_list<const char*> names) {
  for (auto* n : names) {
    auto it = j.find(n);
    if (it == j.end() || it->is_null())
      continue;
    if (it->is_number_integer() || it->is_number_unsigned())
      return std::optional<int64_t>(it->get<int64_t>());
    if (it->is_string()) {
      auto t = parse_time_arg(it->get<std::string>(), 0, false);
      if (t)
        return std::optional<int64_t>(*t);
    }
    return status{errc::unavailable, std::string("server sent a bad \"") + n + "\""};
  }
  return std::optional<int64_t>();
}

int64_t get_int(const json& j, std::initializer_list<const char*> names) {
  for (auto* n : names) {
    auto it = j.find(n);
    if (it != j.end() && (it->is_number_integer() || it->is_number_unsigned()))
      return it->get<int64_t>();
  }
  return 0;
}

std::string get_json_text(const json& j, const char* name, const char* fallback = "{}") {
  auto it = j.find(name);
  if (it == j.end() || it->is_null())
    return fallback;
  if (it->is_string())
    return it->get<std::string>();
  return it->dump();
}

} // namespace

std::string schedule_spec_text(const schedule_record& s) {
  auto spec = json_or_string(s.spec);
  if (!spec.is_object())
    return s.spec;
  std::string out;
  if (spec.contains("cron"))
    out = "cron " + spec.value("cron", std::string()) + " " +
          spec.value("time_zone", std::string("UTC"));
  else
    out = "every " + std::to_string(spec.value("every_ms", int64_t{0})) + " ms";
  if (auto j = spec.value("jitter_ms", int64_t{0}); j > 0)
    out += ", jitter " + std::to_string(j) + " ms";
  return out;
}

result<fact> fact_from_json(const json& j) {
  if (!j.is_object())
    return status{errc::unavailable, "server sent a fact that is not a JSON object"};
  auto seq = j.find("seq");
  if (seq == j.end() || !(seq->is_number_integer() || seq->is_number_unsigned()))
    return status{errc::unavailable, "server sent a fact without an integer \"seq\""};
  fact f;
  f.seq = seq->get<int64_t>();
  f.fact_id = get_str(j, {"fact_id"});
  f.type = get_str(j, {"type"});
  f.subtype = get_str(j, {"subtype"});
  auto ts = get_time(j, {"timestamp", "ts"});
  if (!ts)
    return ts.error();
  f.timestamp_ms = ts->value_or(0);
  f.tenant_id = get_str(j, {"tenant_id"});
  f.entity_type = get_str(j, {"entity_type"});
  f.entity_id = get_str(j, {"entity_id"});
  f.tool_id = get_str(j, {"tool_id"});
  f.config_id = get_str(j, {"config_id"});
  f.config_version = get_int(j, {"config_version"});
  f.trace_id = get_str(j, {"trace_id"});
  f.idempotency_key = get_str(j, {"idempotency_key"});
  f.amount = get_str(j, {"amount"});
  f.currency = get_str(j, {"currency"});
  f.from_entity = get_str(j, {"from_entity"});
  f.to_entity = get_str(j, {"to_entity"});
  f.data = get_json_text(j, "data");
  f.prev_hash = get_str(j, {"prev_hash"});
  f.hash = get_str(j, {"hash"});
  return f;
}

result<dead_letter_record> dead_letter_from_json(const json& j) {
  if (!j.is_object())
    return status{errc::unavailable, "server sent a dead letter that is not a JSON object"};
  dead_letter_record d;
  d.id = get_str(j, {"id", "dl_id"});
  d.operation = get_str(j, {"operation"});
  d.payload = get_json_text(j, "payload");
  d.idempotency_key = get_str(j, {"idempotency_key"});
  d.config_id = get_str(j, {"config_id"});
  d.config_version = get_int(j, {"config_version"});
  d.error_code = get_str(j, {"error_code"});
  d.error_message = get_str(j, {"error_message"});
  d.error_category = get_str(j, {"error_category", "category"});
  d.reason = get_str(j, {"reason"});
  d.attempts = get_int(j, {"attempts"});
  d.auto_retries = get_int(j, {"auto_retries"});
  d.trace_id = get_str(j, {"trace_id"});
  auto st = parse_dl_status(get_str(j, {"status"}));
  d.status = st ? *st : dl_status::pending;
  struct {
    std::initializer_list<const char*> names;
    std::optional<int64_t>* opt;
    int64_t* val;
  } times[] = {
    {{"first_attempt_at", "first_attempt_ms"}, nullptr, &d.first_attempt_ms},
    {{"last_attempt_at", "last_attempt_ms"}, nullptr, &d.last_attempt_ms},
    {{"next_retry_at", "next_retry_ms"}, &d.next_retry_ms, nullptr},
    {{"expires_at", "expires_at_ms"}, &d.expires_at_ms, nullptr},
    {{"created_at", "created_at_ms"}, nullptr, &d.created_at_ms},
    {{"updated_at", "updated_at_ms"}, nullptr, &d.updated_at_ms},
  };
  for (auto& t : times) {
    auto v = get_time(j, t.names);
    if (!v)
      return v.error();
    if (t.opt)
      *t.opt = *v;
    else
      *t.val = v->value_or(0);
  }
  return d;
}

result<breaker_record> breaker_from_json(const json& j) {
  if (!j.is_object())
    return status{errc::unavailable, "server sent a breaker that is not a JSON object"};
  breaker_record b;
  b.tool_id = get_str(j, {"tool_id", "tool"});
  b.state = get_str(j, {"state"});
  auto ts = get_time(j, {"updated_at", "updated_at_ms"});
  if (!ts)
    return ts.error();
  b.updated_at_ms = ts->value_or(0);
  if (j.contains("data")) {
    b.data = get_json_text(j, "data");
  } else { // the other members are the breaker's data
    json rest = j;
    for (auto* k : {"tool_id", "tool", "state", "updated_at", "updated_at_ms"})
      rest.erase(k);
    b.data = rest.dump();
  }
  return b;
}

result<json> json_list(const json& body, std::string_view name) {
  if (body.is_array())
    return body;
  if (body.is_object()) {
    for (auto n : {std::string(name), std::string("items")}) {
      auto it = body.find(n);
      if (it != body.end() && it->is_array())
        return *it;
    }
  }
  return status{errc::unavailable, "server answer is neither a JSON array nor an object with \"" +
                                     std::string(name) + "\""};
}

} // namespace factum::tools
