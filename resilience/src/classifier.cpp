// classifier.cpp: the default failure table, per-tool overrides, and keyword heuristics over the
// message for tool-reported errors without a status. Pure functions over plain values; any
// single thread.
#include "factum/resilience/classifier.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "json_util.hpp"

namespace factum::resilience {

namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Whether `needle` occurs in `hay` (both lower case); a needle of digits must not be part of a
// longer number ("429" matches "HTTP 429" but not "order 14290").
bool contains(std::string_view hay, std::string_view needle) {
  bool numeric = std::all_of(needle.begin(), needle.end(), is_digit);
  for (size_t pos = hay.find(needle); pos != std::string_view::npos;
       pos = hay.find(needle, pos + 1)) {
    if (!numeric)
      return true;
    bool left_ok = pos == 0 || !is_digit(hay[pos - 1]);
    size_t end = pos + needle.size();
    bool right_ok = end >= hay.size() || !is_digit(hay[end]);
    if (left_ok && right_ok)
      return true;
  }
  return false;
}

classification make(error_category c, bool retryable, std::string code, failure_reason r) {
  return classification{c, retryable, std::move(code), r};
}

classification rate_limited() {
  return make(error_category::transient, true, "RATE_LIMITED", failure_reason::rate_limit);
}

std::string http_code(int status) {
  return "HTTP_" + std::to_string(status);
}

// The category is category_of_status's (factum/entities/errors.hpp), the one place a status's
// category is decided; the classifier adds the reason, the code and the retry rule.
classification default_http(int status, bool idempotent) {
  if (status == 429)
    return rate_limited();
  auto c = category_of_status(status);
  auto reason = status == 408 || status == 504 ? failure_reason::timeout : default_reason(c);
  // A status that is no error status says nothing a retry could fix: external, not retried.
  bool retry = c != error_category::external && factum::retryable(c, idempotent);
  return make(c, retry, http_code(status), reason);
}

// Exact (case-insensitive) codes with a meaning everybody agrees on.
std::optional<classification> well_known_code(std::string_view code) {
  struct entry {
    std::string_view code;
    transport_error error;
  };
  static constexpr std::array<entry, 11> table{{
    {"TIMEOUT", transport_error::timeout},
    {"ETIMEDOUT", transport_error::timeout},
    {"CONNECTION_RESET", transport_error::connection_reset},
    {"ECONNRESET", transport_error::connection_reset},
    {"CONNECTION_REFUSED", transport_error::connection_refused},
    {"ECONNREFUSED", transport_error::connection_refused},
    {"DNS_FAILURE", transport_error::dns_failure},
    {"ENOTFOUND", transport_error::dns_failure},
    {"EAI_AGAIN", transport_error::dns_failure},
    {"TLS_ERROR", transport_error::tls},
    {"TLS", transport_error::tls},
  }};
  if (iequals(code, "RATE_LIMITED"))
    return rate_limited();
  for (const auto& e : table)
    if (iequals(code, e.code))
      return classifier{}.classify_transport(e.error);
  return std::nullopt;
}

// Keyword classification of a message, used only for tool errors without a status. Checked in
// order: the more specific phrases first.
std::optional<classification> heuristic(std::string_view code, std::string_view message) {
  using ec = error_category;
  using fr = failure_reason;
  std::string text = lower(code) + " " + lower(message);
  auto any = [&](std::initializer_list<std::string_view> words) {
    return std::any_of(words.begin(), words.end(),
                       [&](std::string_view w) { return contains(text, w); });
  };
  if (any({"rate limit", "rate-limit", "ratelimit", "too many requests", "429"}))
    return rate_limited();
  if (any({"etimedout", "timeout", "timed out"}))
    return make(ec::transient, true, "TIMEOUT", fr::timeout);
  if (any({"econnreset", "connection reset"}))
    return make(ec::transient, true, "CONNECTION_RESET", fr::server_error);
  if (any({"econnrefused", "connection refused"}))
    return make(ec::transient, true, "CONNECTION_REFUSED", fr::server_error);
  if (any({"temporary", "temporarily", "unavailable", "503"}))
    return make(ec::transient, true, "UNAVAILABLE", fr::server_error);
  if (any({"connection", "network"}))
    return make(ec::transient, true, "NETWORK_ERROR", fr::server_error);
  if (any({"memory", "disk", "resource"}))
    return make(ec::external, false, "RESOURCE_EXHAUSTED", fr::unknown);
  return std::nullopt;
}

json override_to_json(const classification_override& o) {
  json j = {{"category", to_string(o.category)}};
  if (!o.code.empty())
    j["code"] = o.code;
  if (o.reason)
    j["reason"] = to_string(*o.reason);
  if (o.retryable)
    j["retryable"] = *o.retryable;
  return j;
}

result<classification_override> override_from_json(const json& j, const std::string& what) {
  if (auto s = detail::expect_object(j, what); !s)
    return s;
  if (auto s = detail::known_keys(j, {"category", "code", "reason", "retryable"}, what); !s)
    return s;
  classification_override o;
  std::string category;
  if (auto s = detail::read_field(j, "category", category, what); !s)
    return s;
  auto c = parse_error_category(category);
  if (!c)
    return detail::invalid(what + ".category", "must be one of the seven error categories");
  o.category = *c;
  if (auto s = detail::read_field(j, "code", o.code, what); !s)
    return s;
  if (j.contains("reason")) {
    std::string reason;
    if (auto s = detail::read_field(j, "reason", reason, what); !s)
      return s;
    auto r = parse_failure_reason(reason);
    if (!r)
      return detail::invalid(what + ".reason", "is not a failure reason");
    o.reason = *r;
  }
  if (j.contains("retryable")) {
    bool retry = false;
    if (auto s = detail::read_field(j, "retryable", retry, what); !s)
      return s;
    o.retryable = retry;
  }
  return o;
}

} // namespace

std::string_view to_string(transport_error e) noexcept {
  switch (e) {
  case transport_error::timeout: return "timeout";
  case transport_error::connection_reset: return "connection_reset";
  case transport_error::connection_refused: return "connection_refused";
  case transport_error::dns_failure: return "dns_failure";
  case transport_error::tls: return "tls";
  case transport_error::other: return "other";
  }
  return "other";
}

std::optional<transport_error> parse_transport_error(std::string_view s) noexcept {
  for (auto e : {transport_error::timeout, transport_error::connection_reset,
                 transport_error::connection_refused, transport_error::dns_failure,
                 transport_error::tls, transport_error::other})
    if (to_string(e) == s)
      return e;
  return std::nullopt;
}

std::string_view to_string(failure_reason r) noexcept {
  switch (r) {
  case failure_reason::rate_limit: return "rate_limit";
  case failure_reason::server_error: return "server_error";
  case failure_reason::timeout: return "timeout";
  case failure_reason::invalid_payload: return "invalid_payload";
  case failure_reason::unauthorized: return "unauthorized";
  case failure_reason::budget: return "budget";
  case failure_reason::unknown: return "unknown";
  }
  return "unknown";
}

std::optional<failure_reason> parse_failure_reason(std::string_view s) noexcept {
  for (auto r : {failure_reason::rate_limit, failure_reason::server_error, failure_reason::timeout,
                 failure_reason::invalid_payload, failure_reason::unauthorized,
                 failure_reason::budget, failure_reason::unknown})
    if (to_string(r) == s)
      return r;
  if (s == "validation")
    return failure_reason::invalid_payload;
  if (s == "authentication")
    return failure_reason::unauthorized;
  return std::nullopt;
}

failure_reason default_reason(error_category c) noexcept {
  switch (c) {
  case error_category::transient:
  case error_category::server: return failure_reason::server_error;
  case error_category::external: return failure_reason::unknown;
  case error_category::client:
  case error_category::data_integrity: return failure_reason::invalid_payload;
  case error_category::authorization: return failure_reason::unauthorized;
  case error_category::budget: return failure_reason::budget;
  }
  return failure_reason::unknown;
}

bool trips_breaker(error_category c) noexcept {
  return c == error_category::transient || c == error_category::server ||
         c == error_category::external;
}

nlohmann::json classification::to_json() const {
  return {{"category", factum::to_string(category)},
          {"retryable", retryable},
          {"code", code},
          {"reason", resilience::to_string(reason)}};
}

void classifier::set_status_override(std::string tool, int status, classification_override o) {
  tools_[std::move(tool)].statuses[status] = std::move(o);
}

void classifier::set_code_override(std::string tool, std::string code, classification_override o) {
  tools_[std::move(tool)].codes[std::move(code)] = std::move(o);
}

void classifier::clear_overrides(std::string_view tool) {
  if (auto it = tools_.find(tool); it != tools_.end())
    tools_.erase(it);
}

classification classifier::apply(const classification_override& o, std::string default_code,
                                 bool idempotent) const {
  classification c;
  c.category = o.category;
  c.code = o.code.empty() ? std::move(default_code) : o.code;
  c.reason = o.reason.value_or(default_reason(o.category));
  c.retryable = o.retryable.value_or(factum::retryable(o.category, idempotent));
  return c;
}

classification classifier::classify_http(std::string_view tool, int status, bool idempotent) const {
  if (auto t = tools_.find(tool); t != tools_.end())
    if (auto s = t->second.statuses.find(status); s != t->second.statuses.end())
      return apply(s->second, status == 429 ? "RATE_LIMITED" : http_code(status), idempotent);
  return default_http(status, idempotent);
}

classification classifier::classify_transport(transport_error e) const {
  using ec = error_category;
  using fr = failure_reason;
  switch (e) {
  case transport_error::timeout: return make(ec::transient, true, "TIMEOUT", fr::timeout);
  case transport_error::connection_reset:
    return make(ec::transient, true, "CONNECTION_RESET", fr::server_error);
  case transport_error::connection_refused:
    return make(ec::transient, true, "CONNECTION_REFUSED", fr::server_error);
  case transport_error::dns_failure: return make(ec::external, false, "DNS_FAILURE", fr::unknown);
  case transport_error::tls: return make(ec::external, false, "TLS_ERROR", fr::unknown);
  case transport_error::other: break;
  }
  return make(ec::external, true, "TRANSPORT_ERROR", fr::unknown);
}

classification classifier::classify_tool_error(std::string_view tool, std::string_view code,
                                               std::string_view message, int http_status,
                                               error_category reported, bool idempotent) const {
  std::string own_code = code.empty() ? std::string("TOOL_ERROR") : std::string(code);
  if (auto t = tools_.find(tool); t != tools_.end() && !code.empty())
    if (auto o = t->second.codes.find(code); o != t->second.codes.end())
      return apply(o->second, own_code, idempotent);
  if (http_status >= 100 && http_status <= 599)
    return classify_http(tool, http_status, idempotent);
  if (auto k = well_known_code(code))
    return *k;
  if (reported != error_category::external)
    return make(reported, factum::retryable(reported, idempotent), own_code,
                default_reason(reported));
  if (auto h = heuristic(code, message))
    return *h;
  return make(error_category::external, true, own_code, failure_reason::unknown);
}

classification classifier::classify(std::string_view tool, const tool_reply& reply,
                                    bool idempotent) const {
  return classify_tool_error(tool, reply.error_code, reply.error_message, reply.http_status,
                             reply.category, idempotent);
}

classification classifier::circuit_open() {
  return make(error_category::transient, true, std::string(circuit_open_code),
              failure_reason::server_error);
}

nlohmann::json classifier::to_json() const {
  json tools = json::object();
  for (const auto& [name, rules] : tools_) {
    json statuses = json::object();
    for (const auto& [status, o] : rules.statuses)
      statuses[std::to_string(status)] = override_to_json(o);
    json codes = json::object();
    for (const auto& [code, o] : rules.codes)
      codes[code] = override_to_json(o);
    tools[name] = {{"statuses", statuses}, {"codes", codes}};
  }
  return {{"tools", tools}};
}

result<classifier> classifier::from_json(const nlohmann::json& j) {
  if (auto s = detail::expect_object(j, "classifier"); !s)
    return s;
  classifier out;
  auto tools = j.find("tools");
  if (tools == j.end())
    return out;
  if (auto s = detail::expect_object(*tools, "classifier.tools"); !s)
    return s;
  for (const auto& [name, rules] : tools->items())
    if (auto s = out.add_rules(name, rules, "classifier.tools." + name); !s)
      return s;
  return out;
}

status classifier::add_rules(const std::string& tool, const nlohmann::json& rules,
                             const std::string& what) {
  if (auto s = detail::expect_object(rules, what); !s)
    return s;
  if (auto s = detail::known_keys(rules, {"statuses", "codes"}, what); !s)
    return s;
  if (auto st = rules.find("statuses"); st != rules.end()) {
    if (auto s = detail::expect_object(*st, what + ".statuses"); !s)
      return s;
    for (const auto& [key, value] : st->items()) {
      std::string w = what + ".statuses." + key;
      bool digits =
        !key.empty() && key.size() <= 3 && std::all_of(key.begin(), key.end(), is_digit);
      int status = digits ? std::stoi(key) : 0;
      if (status < 100 || status > 599)
        return detail::invalid(w, "the key must be an HTTP status (100..599)");
      auto o = override_from_json(value, w);
      if (!o)
        return o.error();
      set_status_override(tool, status, std::move(o.value()));
    }
  }
  if (auto co = rules.find("codes"); co != rules.end()) {
    if (auto s = detail::expect_object(*co, what + ".codes"); !s)
      return s;
    for (const auto& [key, value] : co->items()) {
      if (key.empty())
        return detail::invalid(what + ".codes", "a code must not be empty");
      auto o = override_from_json(value, what + ".codes." + key);
      if (!o)
        return o.error();
      set_code_override(tool, key, std::move(o.value()));
    }
  }
  return status::ok();
}

} // namespace factum::resilience
