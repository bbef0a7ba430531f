// fact.cpp: canonical serialization, hashing and validation of facts. Pure functions; any thread.
//
// The canonical serialization is specified in docs/storage-format.md ("Hash chain"); it equals
// nlohmann::json::dump() of the fact's JSON view without "hash" (keys sorted, no whitespace),
// which a test checks.
#include "factum/storage/fact.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"

namespace factum {

namespace {

// Writes the fields in ascending key order; `with_hash` adds "hash" (which sorts between
// "from_entity" and "idempotency_key").
std::string serialize(const fact& f, bool with_hash) {
  std::string out;
  out.reserve(320 + f.data.size());
  bool first = true;
  auto key = [&](std::string_view k) { // the keys need no escaping
    out.push_back(first ? '{' : ',');
    first = false;
    out.push_back('"');
    out.append(k);
    out.append("\":", 2);
  };
  auto str = [&](std::string_view k, const std::string& v) {
    if (!v.empty()) {
      key(k);
      append_json_string(out, v); // the fields are valid UTF-8 (checked at append)
    }
  };
  auto num = [&](std::string_view k, int64_t v) {
    key(k);
    out += std::to_string(v);
  };
  str("amount", f.amount);
  str("config_id", f.config_id);
  if (f.config_version != 0)
    num("config_version", f.config_version);
  str("currency", f.currency);
  key("data");
  out += f.data;
  str("entity_id", f.entity_id);
  str("entity_type", f.entity_type);
  str("fact_id", f.fact_id);
  str("from_entity", f.from_entity);
  if (with_hash)
    str("hash", f.hash);
  str("idempotency_key", f.idempotency_key);
  str("prev_hash", f.prev_hash);
  num("seq", f.seq);
  str("subtype", f.subtype);
  str("tenant_id", f.tenant_id);
  num("timestamp", f.timestamp_ms);
  str("to_entity", f.to_entity);
  str("tool_id", f.tool_id);
  str("trace_id", f.trace_id);
  str("type", f.type);
  out.push_back('}');
  return out;
}

} // namespace

std::string canonical_serialization(const fact& f) {
  return serialize(f, false);
}

std::string compute_hash(const fact& f) {
  return sha256_hex(serialize(f, false));
}

std::string to_json_text(const fact& f) {
  return serialize(f, true);
}

nlohmann::json to_json(const fact& f) {
  return nlohmann::json::parse(serialize(f, true));
}

status validate_fact_token(std::string_view token, std::string_view what) {
  if (token.empty() || token.size() > 64)
    return {errc::invalid_argument, std::string(what) + " must be 1 to 64 characters"};
  for (char c : token) {
    bool okc = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
               c == ':' || c == '-';
    if (!okc)
      return {errc::invalid_argument, std::string(what) + " may hold only [a-z0-9_.:-]"};
  }
  return status::ok();
}

status validate_amount(std::string_view a) {
  auto bad = [&] {
    return status{errc::invalid_argument,
                  "amount must be an exact decimal string like \"0.005\" (at most 40 characters)"};
  };
  if (a.empty() || a.size() > 40)
    return bad();
  size_t i = 0;
  if (a[0] == '-')
    ++i;
  size_t digits = 0;
  while (i < a.size() && a[i] >= '0' && a[i] <= '9')
    ++i, ++digits;
  if (digits == 0)
    return bad();
  if (i < a.size()) {
    if (a[i] != '.')
      return bad();
    ++i;
    size_t frac = 0;
    while (i < a.size() && a[i] >= '0' && a[i] <= '9')
      ++i, ++frac;
    if (frac == 0 || i != a.size())
      return bad();
  }
  return status::ok();
}

status fact_filter::validate() const {
  if (limit < 1 || limit > 10000)
    return {errc::invalid_argument, "limit must be between 1 and 10000"};
  if (after_seq && *after_seq < 0)
    return {errc::invalid_argument, "after_seq must not be negative"};
  if (before_seq && *before_seq < 0)
    return {errc::invalid_argument, "before_seq must not be negative"};
  if (since_ms && *since_ms < 0)
    return {errc::invalid_argument, "since must not be negative"};
  if (until_ms && *until_ms < 0)
    return {errc::invalid_argument, "until must not be negative"};
  if (!type.empty())
    if (auto st = validate_fact_token(type, "type"); !st)
      return st;
  if (!subtype.empty())
    if (auto st = validate_fact_token(subtype, "subtype"); !st)
      return st;
  return status::ok();
}

result<fact_filter> fact_filter::from_json(const nlohmann::json& args) {
  if (!args.is_object() && !args.is_null())
    return status{errc::invalid_argument, "a fact filter must be a JSON object"};
  fact_filter f;
  if (args.is_null())
    return f;
  auto text = [&](const char* name, std::string& out) -> status {
    auto it = args.find(name);
    if (it == args.end() || it->is_null())
      return status::ok();
    if (!it->is_string())
      return {errc::invalid_argument, std::string(name) + " must be a string"};
    out = it->get<std::string>();
    return status::ok();
  };
  auto integer = [&](const char* name, auto& out) -> status {
    auto it = args.find(name);
    if (it == args.end() || it->is_null())
      return status::ok();
    if (!it->is_number_integer())
      return {errc::invalid_argument, std::string(name) + " must be an integer"};
    out = it->get<int64_t>();
    return status::ok();
  };
  for (auto st : {text("type", f.type), text("subtype", f.subtype), text("trace_id", f.trace_id),
                  text("tool_id", f.tool_id), text("idempotency_key", f.idempotency_key),
                  integer("since", f.since_ms), integer("until", f.until_ms),
                  integer("after_seq", f.after_seq), integer("before_seq", f.before_seq),
                  integer("limit", f.limit)})
    if (!st)
      return st;
  std::string order = "asc";
  if (auto st = text("order", order); !st)
    return st;
  if (order != "asc" && order != "desc")
    return status{errc::invalid_argument, "order must be \"asc\" or \"desc\""};
  f.newest_first = order == "desc";
  if (auto st = f.validate(); !st)
    return st;
  return f;
}

std::string format_utc_ms(int64_t ms) {
  int64_t secs = ms / 1000 - (ms % 1000 < 0 ? 1 : 0); // floor, also before 1970
  auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms - secs * 1000));
  return buf;
}

int64_t now_ms() noexcept {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

} // namespace factum
