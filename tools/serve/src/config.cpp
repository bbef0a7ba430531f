// config.cpp: the JSON configuration of `factum serve`: every key, its default and its
// validation (docs/configuration.md is the user's view of this file). Runs once, on the thread
// that starts the server.
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "config_util.hpp"
#include "factum/resilience/circuit_breaker.hpp"
#include "factum/resilience/classifier.hpp"
#include "factum/resilience/dead_letter_rules.hpp"
#include "factum/resilience/money.hpp"
#include "factum/resilience/retry_budget.hpp"
#include "factum/resilience/retry_policy.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/fact.hpp"
#include "factum/tools/serve.hpp"

namespace factum::tools {

using nlohmann::json;

namespace {

using namespace config_util;

bool is_hex64(std::string_view s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
      return false;
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

/// tenants.<name>.quota: {"max_entities": N, "max_bytes": B}, each optional (absent: no limit).
status parse_quota(const json& t, const std::string& path, serve_config& cfg,
                   const std::string& tenant) {
  auto it = t.find("quota");
  if (it == t.end())
    return status::ok();
  std::string qpath = path + ".quota";
  if (!it->is_object())
    return bad(qpath, "must be an object {\"max_entities\": N, \"max_bytes\": B}");
  if (auto st = check_keys(*it, qpath + ".", {"max_entities", "max_bytes"}); !st)
    return st;
  tenant_quota q;
  for (auto [name, field] :
       {std::pair{"max_entities", &q.max_entities}, std::pair{"max_bytes", &q.max_bytes}}) {
    if (!it->contains(name))
      continue;
    int64_t v = 0;
    if (auto st = read_int(*it, name, qpath + ".", 0, std::numeric_limits<int64_t>::max(), v); !st)
      return st;
    *field = v;
  }
  cfg.runtime.tenant_quotas[tenant] = q;
  return status::ok();
}

status parse_tenants(const json& doc, serve_config& cfg) {
  auto it = doc.find("tenants");
  if (it == doc.end())
    return bad("tenants", "required: at least one tenant with its API keys");
  if (!it->is_object() || it->empty())
    return bad("tenants", "must be an object of tenant name -> {\"api_keys\": [...]}");
  std::set<std::string> seen_keys;
  for (auto& [name, t] : it->items()) {
    std::string path = "tenants." + name;
    if (auto st = validate_key_part(name, "tenant name"); !st)
      return bad(path, st.message());
    if (!t.is_object())
      return bad(path, "must be an object {\"api_keys\": [...], \"quota\": {...}}");
    if (auto st = check_keys(t, path + ".", {"api_keys", "quota"}); !st)
      return st;
    if (auto st = parse_quota(t, path, cfg, name); !st)
      return st;
    auto keys = t.find("api_keys");
    if (keys == t.end() || !keys->is_array() || keys->empty())
      return bad(path + ".api_keys", "must be a non-empty array of API keys");
    http_tenant tenant;
    tenant.name = name;
    for (size_t i = 0; i < keys->size(); ++i) {
      std::string kpath = path + ".api_keys[" + std::to_string(i) + "]";
      http_api_key key;
      const json* k = &(*keys)[i];
      if (k->is_object()) {
        // {"key": "...", "scopes": ["read", "write", "operate"]}
        if (auto st = check_keys(*k, kpath + ".", {"key", "scopes"}); !st)
          return st;
        auto sc = k->find("scopes");
        if (sc == k->end() || !sc->is_array() || sc->empty())
          return bad(kpath + ".scopes", "must be a non-empty array of \"read\", \"write\", "
                                        "\"operate\"");
        key.scopes = 0;
        for (auto& v : *sc) {
          auto n = v.is_string() ? v.get<std::string>() : std::string();
          uint8_t bit = n == "read"      ? scope_read
                        : n == "write"   ? scope_write
                        : n == "operate" ? scope_operate
                                         : 0;
          if (!bit)
            return bad(kpath + ".scopes", "must name only \"read\", \"write\" and \"operate\"");
          key.scopes |= bit;
        }
        auto kk = k->find("key");
        if (kk == k->end())
          return bad(kpath + ".key", "required: the API key (as in a plain entry)");
        k = &*kk;
        kpath += ".key";
      }
      if (!k->is_string() || k->get<std::string>().empty())
        return bad(kpath, "must be a non-empty string, or {\"key\": ..., \"scopes\": [...]}");
      auto s = k->get<std::string>();
      std::string digest;
      if (s.rfind("sha256:", 0) == 0) {
        digest = s.substr(7);
        if (!is_hex64(digest))
          return bad(kpath, "a hashed key is \"sha256:\" and 64 hex digits (printf %s KEY | "
                            "sha256sum)");
        digest = lower(digest);
      } else {
        if (!cfg.dev)
          return bad(kpath, "plain-text API keys are allowed only with \"dev\": true; store "
                            "\"sha256:<hex>\" instead (printf %s KEY | sha256sum)");
        digest = api_key_sha256(s);
      }
      if (!seen_keys.insert(digest).second)
        return bad(kpath, "this API key is configured twice (each key names one tenant)");
      key.sha256 = std::move(digest);
      tenant.keys.push_back(std::move(key));
    }
    cfg.http.tenants.push_back(std::move(tenant));
  }
  return status::ok();
}

status parse_types(const json& doc, serve_config& cfg, const entity_registry& all) {
  auto known = all.names();
  std::string list;
  for (auto& n : known)
    list += (list.empty() ? "" : ", ") + n;
  auto it = doc.find("types");
  if (it == doc.end()) {
    cfg.type_names = known;
  } else {
    if (!it->is_array() || it->empty())
      return bad("types", "must be a non-empty array of type names (available: " + list + ")");
    for (size_t i = 0; i < it->size(); ++i) {
      auto& t = (*it)[i];
      std::string path = "types[" + std::to_string(i) + "]";
      if (!t.is_string())
        return bad(path, "must be a string");
      auto name = t.get<std::string>();
      if (!all.find(name))
        return bad(path, "unknown entity type '" + name + "' (available: " + list + ")");
      for (auto& n : cfg.type_names)
        if (n == name)
          return bad(path, "type '" + name + "' is listed twice");
      cfg.type_names.push_back(name);
    }
  }
  for (auto& n : cfg.type_names)
    cfg.runtime.types.add(*all.find(n));
  return status::ok();
}

status parse_idempotency(const json& doc, serve_config& cfg) {
  auto& req = cfg.http.require_idempotency_key;
  auto it = doc.find("idempotency");
  if (it != doc.end()) {
    if (!it->is_object())
      return bad("idempotency", "must be an object: type -> method (or \"*\") -> "
                                "{\"require_key\": bool}");
    for (auto& [type, methods] : it->items()) {
      if (is_comment(type))
        continue;
      std::string path = "idempotency." + type;
      const auto* et = cfg.runtime.types.find(type);
      if (!et)
        return bad(path, "type '" + type + "' is not hosted (see \"types\")");
      if (!methods.is_object())
        return bad(path, "must be an object: method (or \"*\") -> {\"require_key\": bool}");
      for (auto& [method, opts] : methods.items()) {
        if (is_comment(method))
          continue;
        std::string mpath = path + "." + method;
        if (method != "*" && !et->find(method))
          return bad(mpath, "type '" + type + "' has no method '" + method + "'");
        if (!opts.is_object())
          return bad(mpath, "must be an object {\"require_key\": bool}");
        if (auto st = check_keys(opts, mpath + ".", {"require_key"}); !st)
          return st;
        auto rk = opts.find("require_key");
        if (rk == opts.end() || !rk->is_boolean())
          return bad(mpath + ".require_key", "must be true or false");
        req[type][method] = rk->get<bool>();
      }
    }
  }
  // serve's default: every ledger append names its key, so a retried append never doubles.
  if (cfg.runtime.types.find("ledger")) {
    auto& l = req["ledger"];
    if (!l.count("append") && !l.count("*"))
      l["append"] = true;
  }
  return status::ok();
}

status parse_limits(const json& doc, serve_config& cfg) {
  auto it = doc.find("limits");
  if (it == doc.end())
    return status::ok();
  if (!it->is_object())
    return bad("limits", "must be an object");
  auto& l = *it;
  if (auto st = check_keys(
        l, "limits.",
        {"max_body_bytes", "max_json_depth", "max_header_bytes", "request_timeout_ms",
         "max_connections", "max_connections_per_client", "max_move_file_bytes",
         "ws_max_message_bytes", "ws_messages_per_second", "ws_max_connections_per_entity",
         "ws_max_connections_per_tenant", "ws_max_send_queue_bytes", "ws_max_pending_messages",
         "ws_idle_timeout_ms", "stream_max_connections_per_entity",
         "stream_max_connections_per_tenant", "stream_max_queue_bytes", "stream_keepalive_ms"});
      !st)
    return st;
  auto& out = cfg.http.limits;
  const std::string lp = "limits.";
  for (auto st :
       {read_field(l, "max_body_bytes", 1, int64_t{1} << 30, out.max_body_bytes, lp),
        read_field(l, "max_json_depth", 1, 100'000, out.max_json_depth, lp),
        read_field(l, "max_header_bytes", 1024, 1 << 20, out.max_header_bytes, lp),
        read_ms(l, "request_timeout_ms", 1, 3'600'000, out.request_timeout, lp),
        read_field(l, "max_connections", 1, 1'000'000, out.max_connections, lp),
        read_field(l, "max_connections_per_client", 1, 1'000'000, out.max_connections_per_client,
                   lp),
        read_field(l, "max_move_file_bytes", 1, int64_t{1} << 36, out.max_move_file_bytes, lp),
        read_field(l, "ws_max_message_bytes", 1, 64 << 20, out.ws_max_message_bytes, lp),
        read_field(l, "ws_messages_per_second", 1, 1'000'000, out.ws_messages_per_second, lp),
        read_field(l, "ws_max_connections_per_entity", 1, 10'000'000,
                   out.ws_max_connections_per_entity, lp),
        read_field(l, "ws_max_connections_per_tenant", 1, 10'000'000,
                   out.ws_max_connections_per_tenant, lp),
        read_field(l, "ws_max_send_queue_bytes", 1024, int64_t{1} << 30,
                   out.ws_max_send_queue_bytes, lp),
        read_field(l, "ws_max_pending_messages", 1, 100'000, out.ws_max_pending_messages, lp),
        read_ms(l, "ws_idle_timeout_ms", 0, 86'400'000, out.ws_idle_timeout, lp),
        read_field(l, "stream_max_connections_per_entity", 1, 10'000'000,
                   out.stream_max_connections_per_entity, lp),
        read_field(l, "stream_max_connections_per_tenant", 1, 10'000'000,
                   out.stream_max_connections_per_tenant, lp),
        read_field(l, "stream_max_queue_bytes", 1024, int64_t{1} << 30, out.stream_max_queue_bytes,
                   lp),
        read_ms(l, "stream_keepalive_ms", 100, 3'600'000, out.stream_keepalive, lp)})
    if (!st)
      return st;
  return status::ok();
}

/// Unknown members of `in` (recursively) against the members of `known` (a to_json() form).
status check_against(const json& in, const json& known, const std::string& path) {
  if (!in.is_object())
    return bad(path, "must be an object");
  for (auto& [k, v] : in.items()) {
    if (is_comment(k))
      continue;
    auto it = known.find(k);
    if (it == known.end()) {
      std::string list;
      for (auto& [n, _] : known.items())
        list += (list.empty() ? "" : ", ") + n;
      return bad(path + "." + k, "unknown key (known: " + list + ")");
    }
    if (it->is_object())
      if (auto st = check_against(v, *it, path + "." + k); !st)
        return st;
  }
  return status::ok();
}

/// `in` without comment members (recursively), for the resilience parsers.
json strip_comments(const json& in) {
  if (!in.is_object())
    return in;
  json out = json::object();
  for (auto& [k, v] : in.items())
    if (!is_comment(k))
      out[k] = strip_comments(v);
  return out;
}

template <class T>
status parse_policy_part(const json& t, const char* name, const std::string& path, json& out) {
  auto it = t.find(name);
  if (it == t.end())
    return status::ok();
  std::string p = path + "." + name;
  if (auto st = check_against(*it, T{}.to_json(), p); !st)
    return st;
  auto clean = strip_comments(*it);
  auto r = T::from_json(clean);
  if (!r)
    return bad(p, r.error().message());
  out = r.value().to_json();
  return status::ok();
}

/// tools.<name>.retry: a retry policy's fields, and three more: "preset" (an operation's
/// default policy, which the fields then adjust), "priority" (realtime, default, background:
/// the policy scaled for it, after the fields) and "by_status" (HTTP failures wait as their
/// status's policy says, resilience::http_status_policy). Resolved here into a plain policy.
status parse_retry(const json& t, const std::string& path, tool_policy& pol) {
  auto it = t.find("retry");
  if (it == t.end())
    return status::ok();
  std::string p = path + ".retry";
  if (!it->is_object())
    return bad(p, "must be an object");
  auto known = resilience::retry_policy{}.to_json();
  known["preset"] = known["priority"] = known["by_status"] = nullptr;
  if (auto st = check_against(*it, known, p); !st)
    return st;
  auto fields = strip_comments(*it);
  resilience::retry_policy base;
  if (auto pr = fields.find("preset"); pr != fields.end()) {
    auto k =
      pr->is_string() ? resilience::parse_operation_kind(pr->get<std::string>()) : std::nullopt;
    if (!k)
      return bad(p + ".preset", "must name an operation: fact_append, entity_create, "
                                "config_update, external_api, webhook_delivery, crm_sync");
    base = resilience::operation_policy(*k);
    fields.erase("preset");
  }
  std::optional<resilience::retry_priority> prio;
  if (auto pr = fields.find("priority"); pr != fields.end()) {
    prio =
      pr->is_string() ? resilience::parse_retry_priority(pr->get<std::string>()) : std::nullopt;
    if (!prio)
      return bad(p + ".priority", "must be realtime, default or background");
    fields.erase("priority");
  }
  if (auto bs = fields.find("by_status"); bs != fields.end()) {
    if (!bs->is_boolean())
      return bad(p + ".by_status", "must be true or false");
    pol.retry_by_status = bs->get<bool>();
    fields.erase("by_status");
  }
  auto merged = base.to_json();
  merged.update(fields);
  auto r = resilience::retry_policy::from_json(merged);
  if (!r)
    return bad(p, r.error().message());
  pol.retry = (prio ? r.value().with_priority(*prio) : r.value()).to_json();
  return status::ok();
}

/// "operations": {"<op>": {"retry": {...}}}: an operation's own retry policy (the same keys as
/// the tool's "retry", but for by_status, which is the tool's).
status parse_operations(const json& t, const std::string& path, tool_policy& pol) {
  auto it = t.find("operations");
  if (it == t.end())
    return status::ok();
  std::string p = path + ".operations";
  if (!it->is_object())
    return bad(p, "must be an object of operation name -> {\"retry\": {...}}");
  for (auto& [op, spec] : it->items()) {
    if (is_comment(op))
      continue;
    auto op_path = p + "." + op;
    if (!validate_key_part(op, "operation") || op.size() > 64 || op.find(':') != op.npos)
      return bad(op_path, "an operation is 1 to 64 characters of [A-Za-z0-9._-]");
    if (!spec.is_object())
      return bad(op_path, "must be an object {\"retry\": {...}}");
    if (auto st = check_keys(spec, op_path + ".", {"retry"}); !st)
      return st;
    tool_policy one;
    if (auto st = parse_retry(spec, op_path, one); !st)
      return st;
    if (one.retry_by_status)
      return bad(op_path + ".retry.by_status", "is set per tool, not per operation");
    if (one.retry.is_null())
      return bad(op_path + ".retry", "required");
    pol.operation_retry[op] = std::move(one.retry);
  }
  return status::ok();
}

/// The optional "headers" member of `obj`: header name -> string value (checked later with the
/// transport's options).
status read_headers(const json& obj, const std::string& p,
                    std::map<std::string, std::string>& out) {
  auto it = obj.find("headers");
  if (it == obj.end())
    return status::ok();
  if (!it->is_object())
    return bad(p + "headers", "must be an object of header name -> string value");
  for (auto& [k, v] : it->items()) {
    if (is_comment(k))
      continue;
    if (!v.is_string())
      return bad(p + "headers." + k, "must be a string");
    out[k] = v.get<std::string>();
  }
  return status::ok();
}

/// "auth_refresh": {"url", "field", "header", "prefix", "headers"}: where the tool's credential
/// is refreshed after a 401 (http_tool_auth_refresh; validated with the tool's options).
status parse_auth_refresh(const json& t, const std::string& p, http_tool_options& h) {
  auto it = t.find("auth_refresh");
  if (it == t.end())
    return status::ok();
  auto path = p + "auth_refresh";
  if (!it->is_object())
    return bad(path, "must be an object {\"url\": ..., \"field\", \"header\", \"prefix\", "
                     "\"headers\"}");
  if (auto st = check_keys(*it, path + ".", {"url", "field", "header", "prefix", "headers"}); !st)
    return st;
  http_tool_auth_refresh a;
  auto str = [&](const char* name, std::string& out, bool required) -> status {
    auto f = it->find(name);
    if (f == it->end())
      return required ? bad(path + "." + name, "required") : status::ok();
    if (!f->is_string())
      return bad(path + "." + name, "must be a string");
    out = f->get<std::string>();
    return status::ok();
  };
  for (auto st : {str("url", a.url, true), str("field", a.field, false),
                  str("header", a.header, false), str("prefix", a.prefix, false)})
    if (!st)
      return st;
  if (auto st = read_headers(*it, path + ".", a.headers); !st)
    return st;
  h.auth_refresh = std::move(a);
  return status::ok();
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64)
    return false;
  for (char c : n)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

status parse_tool(const std::string& name, const json& t, serve_config& cfg) {
  std::string path = "tools." + name;
  if (!valid_tool_name(name))
    return bad(path, "a tool name is 1 to 64 characters of [A-Za-z0-9._-]");
  if (!t.is_object())
    return bad(path, "must be an object with at least \"url\"");
  if (auto st =
        check_keys(t, path + ".",
                   {"url", "connect_timeout_ms", "request_timeout_ms", "max_connections",
                    "max_queued", "headers", "retry", "breaker", "budget", "price", "currency",
                    "charge_on_failure", "vendor", "idempotent", "max_inline_delay_ms", "fallback",
                    "classify", "operations", "auth_refresh"});
      !st)
    return st;
  serve_tool out;
  out.name = name;
  auto& h = out.http;
  auto url = t.find("url");
  if (url == t.end() || !url->is_string())
    return bad(path + ".url", "required: a string http://host:port/path");
  h.url = url->get<std::string>();
  std::string p = path + ".";
  for (auto st : {read_ms(t, "connect_timeout_ms", 1, 600'000, h.connect_timeout, p),
                  read_ms(t, "request_timeout_ms", 1, 3'600'000, h.request_timeout, p),
                  read_field(t, "max_connections", 1, 10'000, h.max_connections, p),
                  read_field(t, "max_queued", 0, 1'000'000, h.max_queued, p)})
    if (!st)
      return st;
  if (auto st = read_headers(t, p, h.headers); !st)
    return st;
  if (auto st = parse_auth_refresh(t, p, h); !st)
    return st;
  // URL form, timeouts, header names and values, and the host resolves now.
  if (auto st = validate_http_tool_options(h); !st)
    return bad(path + "." + st.message().substr(0, st.message().find(':')),
               st.message().substr(st.message().find(':') + 2));
  auto& pol = out.policy;
  if (auto st = parse_retry(t, path, pol); !st)
    return st;
  if (auto st = parse_operations(t, path, pol); !st)
    return st;
  if (auto st = parse_policy_part<resilience::breaker_config>(t, "breaker", path, pol.breaker); !st)
    return st;
  if (auto st = parse_policy_part<resilience::retry_budget_config>(t, "budget", path, pol.budget);
      !st)
    return st;
  if (auto it = t.find("price"); it != t.end()) {
    auto d = it->is_string() ? resilience::decimal::parse(it->get<std::string>())
                             : result<resilience::decimal>(status{errc::invalid_argument, ""});
    if (!d || d.value() < resilience::decimal::parse("0").value())
      return bad(p + "price", "must be a non-negative exact decimal string such as \"0.013\"");
    pol.price = d.value().to_string();
  }
  if (auto it = t.find("currency"); it != t.end()) {
    auto ok = it->is_string() && it->get<std::string>().size() == 3;
    if (ok)
      for (char c : it->get<std::string>())
        ok = ok && c >= 'A' && c <= 'Z';
    if (!ok)
      return bad(p + "currency", "must be a three-letter ISO 4217 code such as \"USD\"");
    pol.currency = it->get<std::string>();
  }
  for (auto [key, field] : {std::pair{"charge_on_failure", &pol.charge_on_failure},
                            std::pair{"idempotent", &pol.idempotent}})
    if (auto it = t.find(key); it != t.end()) {
      if (!it->is_boolean())
        return bad(p + key, "must be true or false");
      *field = it->get<bool>();
    }
  if (auto it = t.find("vendor"); it != t.end()) {
    if (!it->is_string())
      return bad(p + "vendor", "must be a string");
    if (auto st = validate_key_part(it->get<std::string>(), "vendor"); !st)
      return bad(p + "vendor", st.message());
    pol.vendor = it->get<std::string>();
  }
  if (auto st = read_field(t, "max_inline_delay_ms", 0, 3'600'000, pol.max_inline_delay_ms, p); !st)
    return st;
  if (auto it = t.find("classify"); it != t.end()) {
    auto rules = strip_comments(*it);
    resilience::classifier check; // the runtime reads pol.classify again at start
    if (auto st = check.add_rules(out.name, rules, p + "classify"); !st)
      return st;
    pol.classify = std::move(rules);
  }
  if (auto it = t.find("fallback"); it != t.end()) {
    if (!it->is_object())
      return bad(p + "fallback", "must be an object {\"body\": <JSON answer>}");
    if (auto st = check_keys(*it, p + "fallback.", {"body", "after_retries"}); !st)
      return st;
    auto b = it->find("body");
    if (b == it->end())
      return bad(p + "fallback.body", "required: the JSON answered while the breaker is open");
    out.fallback_body = *b;
    if (auto a = it->find("after_retries"); a != it->end()) {
      if (!a->is_boolean())
        return bad(p + "fallback.after_retries", "must be true or false");
      pol.fallback_after_retries = a->get<bool>();
    }
  }
  cfg.tool_specs.push_back(std::move(out));
  return status::ok();
}

status parse_tools(const json& doc, serve_config& cfg) {
  auto it = doc.find("tools");
  if (it == doc.end())
    return status::ok();
  if (!it->is_object())
    return bad("tools", "must be an object of tool name -> settings");
  for (auto& [name, t] : it->items()) {
    if (is_comment(name))
      continue;
    if (auto st = parse_tool(name, t, cfg); !st)
      return st;
  }
  cfg.tools = *it;
  return status::ok();
}

// -- outbox (docs/outbox.md) --

/// A list of strings (`what` names its elements in the error), each checked by `ok`.
status read_names(const json& r, const char* name, const std::string& path,
                  std::vector<std::string>& out, bool (*ok)(const std::string&)) {
  auto it = r.find(name);
  if (it == r.end())
    return status::ok();
  if (!it->is_array())
    return bad(path + name, "must be an array of strings");
  for (auto& v : *it) {
    if (!v.is_string() || !ok(v.get<std::string>()))
      return bad(path + name, "has an invalid entry " + v.dump());
    out.push_back(v.get<std::string>());
  }
  return status::ok();
}

/// outbox.sinks.<name>: {"kind": "http", url, timeouts, pool, headers} or {"kind": "nats", url,
/// subject, stream, ...}, and both: retry (a retry policy's fields), breaker.
status parse_outbox_sink(const std::string& name, const json& t, serve_config& cfg) {
  std::string path = "outbox.sinks." + name, p = path + ".";
  if (!valid_tool_name(name))
    return bad(path, "a sink name is 1 to 64 characters of [A-Za-z0-9._-]");
  if (!t.is_object() || !t.contains("kind") || !t["kind"].is_string())
    return bad(path + ".kind", "required: \"http\" or \"nats\"");
  serve_outbox_sink out;
  out.name = name;
  out.kind = t["kind"].get<std::string>();
  if (out.kind == "http") {
    if (auto st = check_keys(t, p,
                             {"kind", "url", "connect_timeout_ms", "request_timeout_ms",
                              "max_connections", "max_queued", "headers", "retry", "breaker"});
        !st)
      return st;
    auto& h = out.http;
    if (!t.contains("url") || !t["url"].is_string())
      return bad(p + "url", "required: a string http://host:port/path");
    h.url = t["url"].get<std::string>();
    for (auto st : {read_ms(t, "connect_timeout_ms", 1, 600'000, h.connect_timeout, p),
                    read_ms(t, "request_timeout_ms", 1, 3'600'000, h.request_timeout, p),
                    read_field(t, "max_connections", 1, 10'000, h.max_connections, p),
                    read_field(t, "max_queued", 0, 1'000'000, h.max_queued, p)})
      if (!st)
        return st;
    if (auto st = read_headers(t, p, h.headers); !st)
      return st;
    if (auto st = validate_http_tool_options(h); !st)
      return bad(path + "." + st.message().substr(0, st.message().find(':')),
                 st.message().substr(st.message().find(':') + 2));
  } else if (out.kind == "nats") {
    if (auto st = check_keys(t, p,
                             {"kind", "url", "subject", "stream", "duplicate_window_ms",
                              "publish_timeout_ms", "connect_timeout_ms", "threads", "max_queued",
                              "retry", "breaker"});
        !st)
      return st;
    auto& n = out.nats;
    for (auto [key, field] : {std::pair{"url", &n.url}, std::pair{"subject", &n.subject},
                              std::pair{"stream", &n.stream}})
      if (auto it = t.find(key); it != t.end()) {
        if (!it->is_string())
          return bad(p + key, "must be a string");
        *field = it->get<std::string>();
      }
    for (auto st : {read_ms(t, "duplicate_window_ms", 1, 86'400'000, n.duplicate_window, p),
                    read_ms(t, "publish_timeout_ms", 1, 600'000, n.publish_timeout, p),
                    read_ms(t, "connect_timeout_ms", 1, 600'000, n.connect_timeout, p),
                    read_field(t, "threads", 1, 64, n.threads, p),
                    read_field(t, "max_queued", 1, 10'000'000, n.max_queued, p)})
      if (!st)
        return st;
    if (auto st = validate_nats_sink_options(n); !st)
      return bad(p + st.message().substr(0, st.message().find(':')),
                 st.message().substr(st.message().find(':') + 2));
  } else {
    return bad(p + "kind", "must be \"http\" or \"nats\"");
  }
  if (auto st = parse_policy_part<resilience::retry_policy>(t, "retry", path, out.sink.retry); !st)
    return st;
  if (auto st = parse_policy_part<resilience::breaker_config>(t, "breaker", path, out.sink.breaker);
      !st)
    return st;
  cfg.outbox_sinks.push_back(std::move(out));
  return status::ok();
}

/// outbox: {"sinks": {name: {...}}, "routes": [{"sink", "fact_types", "tenants"?,
/// "entity_types"?}], "batch"?}.
status parse_outbox(const json& doc, serve_config& cfg) {
  auto it = doc.find("outbox");
  if (it == doc.end())
    return status::ok();
  if (!it->is_object())
    return bad("outbox", "must be an object {\"sinks\": {...}, \"routes\": [...]}");
  if (auto st = check_keys(*it, "outbox.", {"sinks", "routes", "batch"}); !st)
    return st;
  auto& ob = cfg.runtime.outbox;
  if (auto st = read_field(*it, "batch", 1, 10'000, ob.batch, "outbox."); !st)
    return st;
  if (auto s = it->find("sinks"); s != it->end()) {
    if (!s->is_object())
      return bad("outbox.sinks", "must be an object of sink name -> settings");
    for (auto& [name, t] : s->items())
      if (!is_comment(name))
        if (auto st = parse_outbox_sink(name, t, cfg); !st)
          return st;
  }
  auto routes = it->find("routes");
  if (routes == it->end())
    return status::ok();
  if (!routes->is_array())
    return bad("outbox.routes", "must be an array of {\"sink\", \"fact_types\", ...}");
  for (size_t i = 0; i < routes->size(); ++i) {
    auto& r = (*routes)[i];
    std::string p = "outbox.routes[" + std::to_string(i) + "].";
    if (!r.is_object())
      return bad(p.substr(0, p.size() - 1), "must be an object");
    if (auto st = check_keys(r, p, {"sink", "fact_types", "tenants", "entity_types"}); !st)
      return st;
    outbox_route route;
    if (!r.contains("sink") || !r["sink"].is_string())
      return bad(p + "sink", "required: the name of a sink");
    route.sink = r["sink"].get<std::string>();
    bool known = false;
    for (auto& s : cfg.outbox_sinks)
      known = known || s.name == route.sink;
    if (!known)
      return bad(p + "sink", "no sink named '" + route.sink + "' in outbox.sinks");
    auto token = [](const std::string& v) { return validate_fact_token(v, "type").is_ok(); };
    auto part = [](const std::string& v) { return validate_key_part(v, "name").is_ok(); };
    if (auto st = read_names(r, "fact_types", p, route.fact_types, +token); !st)
      return st;
    if (route.fact_types.empty())
      return bad(p + "fact_types", "required: at least one fact type");
    if (auto st = read_names(r, "tenants", p, route.tenants, +part); !st)
      return st;
    if (auto st = read_names(r, "entity_types", p, route.entity_types, +part); !st)
      return st;
    ob.routes.push_back(std::move(route));
  }
  return status::ok();
}

} // namespace

/// A name of the cluster's ("cluster.name", "cluster.node_id"): 1..64 letters, digits, '-', '_'
/// or '.'.
status read_cluster_name(const json& c, const char* name, std::string& field, bool required) {
  auto it = c.find(name);
  std::string path = std::string("cluster.") + name;
  if (it == c.end())
    return required ? bad(path, "required") : status::ok();
  if (!it->is_string())
    return bad(path, "must be a string");
  auto v = it->get<std::string>();
  bool ok = !v.empty() && v.size() <= 64;
  for (char ch : v)
    ok =
      ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.');
  if (!ok || v.find("..") != std::string::npos)
    return bad(path, "must be 1..64 letters, digits, '-', '_' or '.'");
  field = v;
  return status::ok();
}

/// "cluster.replication": {"servers": ["nats://host:port", ...], "replicas", "ack_timeout_ms",
/// "image_min_bytes", "image_ratio"}, required with storage "replicated" and refused otherwise.
status parse_replication(const json& c, serve_cluster& out) {
  auto r = c.find("replication");
  if (out.storage != "replicated") {
    if (r != c.end())
      return bad("cluster.replication", "is for storage \"replicated\" only");
    return status::ok();
  }
  if (r == c.end() || !r->is_object())
    return bad("cluster.replication",
               "required with storage \"replicated\": {\"servers\": [\"nats://host:port\", "
               "...]}");
  if (auto st =
        check_keys(*r, "cluster.replication.",
                   {"servers", "replicas", "ack_timeout_ms", "image_min_bytes", "image_ratio"});
      !st)
    return st;
  auto sv = r->find("servers");
  if (sv == r->end() || !sv->is_array() || sv->empty())
    return bad("cluster.replication.servers", "required: the NATS servers of the log");
  for (auto& u : *sv) {
    if (!u.is_string() || u.get<std::string>().rfind("nats://", 0) != 0)
      return bad("cluster.replication.servers", "each entry must be a nats://host:port URL");
    out.replication_servers.push_back(u.get<std::string>());
  }
  if (auto st = read_field(*r, "replicas", 1, 5, out.replication_replicas, "cluster.replication.");
      !st)
    return st;
  if (out.replication_replicas % 2 == 0)
    return bad("cluster.replication.replicas", "must be 1, 3 or 5");
  if (auto st = read_field(*r, "image_min_bytes", 0, int64_t{1} << 40,
                           out.replication_image_min_bytes, "cluster.replication.");
      !st)
    return st;
  if (auto it = r->find("image_ratio"); it != r->end()) {
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 100)
      return bad("cluster.replication.image_ratio", "must be a number from 0 to 100");
    out.replication_image_ratio = it->get<double>();
  }
  return read_ms(*r, "ack_timeout_ms", 100, 600'000, out.replication_ack_timeout,
                 "cluster.replication.");
}

/// "cluster": {"name", "node_id", "etcd": [...], "advertise", "shards", "lease_ttl_ms",
/// "storage", "secret"} (docs/cluster.md).
status parse_cluster(const json& doc, serve_config& cfg) {
  auto it = doc.find("cluster");
  if (it == doc.end())
    return status::ok();
  const json& c = *it;
  if (!c.is_object())
    return bad("cluster", "must be an object (docs/cluster.md)");
  if (auto st = check_keys(c, "cluster.",
                           {"name", "node_id", "etcd", "advertise", "shards", "lease_ttl_ms",
                            "min_nodes", "storage", "shared_dir", "replication", "secret"});
      !st)
    return st;
  serve_cluster out;
  if (auto st = read_cluster_name(c, "name", out.name, false); !st)
    return st;
  if (auto st = read_cluster_name(c, "node_id", out.node_id, true); !st)
    return st;
  auto e = c.find("etcd");
  if (e == c.end() || !e->is_array() || e->empty())
    return bad("cluster.etcd", "required: a list of etcd client URLs (http://host:port)");
  for (auto& u : *e) {
    if (!u.is_string() || u.get<std::string>().rfind("http://", 0) != 0)
      return bad("cluster.etcd", "each entry must be an http://host:port URL");
    out.etcd.push_back(u.get<std::string>());
  }
  auto a = c.find("advertise");
  if (a == c.end() || !a->is_string() || a->get<std::string>().find(':') == std::string::npos)
    return bad("cluster.advertise", "required: host:port where the other nodes reach this one");
  out.advertise = a->get<std::string>();
  if (auto st = read_field(c, "shards", 1, 4096, out.shards, "cluster."); !st)
    return st;
  if (auto st = read_ms(c, "lease_ttl_ms", 1'000, 600'000, out.lease_ttl, "cluster."); !st)
    return st;
  if (auto st = read_field(c, "min_nodes", 1, 1024, out.min_nodes, "cluster."); !st)
    return st;
  if (auto s = c.find("storage"); s != c.end()) {
    if (!s->is_string() || (*s != "local" && *s != "shared" && *s != "replicated"))
      return bad("cluster.storage", "must be \"local\" (each node its own data directory), "
                                    "\"shared\" (the entity files under shared_dir, seen by "
                                    "every node) or \"replicated\" (each node its own copy, "
                                    "every commit in a log on NATS JetStream: replication)");
    out.storage = s->get<std::string>();
  }
  if (auto st = parse_replication(c, out); !st)
    return st;
  auto d = c.find("shared_dir");
  if (out.storage == "shared") {
    if (d == c.end() || !d->is_string() || d->get<std::string>().empty() ||
        d->get<std::string>()[0] != '/')
      return bad("cluster.shared_dir", "required with storage \"shared\": the absolute path of "
                                       "the entity files' directory, the same on every node");
    out.shared_dir = d->get<std::string>();
  } else if (d != c.end()) {
    return bad("cluster.shared_dir", "is for storage \"shared\" only");
  }
  if (auto s = c.find("secret"); s != c.end()) {
    if (!s->is_string() || s->get<std::string>().size() < 16)
      return bad("cluster.secret", "must be a string of at least 16 characters, the same on "
                                   "every node (it authenticates the files of shard moves)");
    out.secret = s->get<std::string>();
  }
  cfg.cluster = std::move(out);
  return status::ok();
}

result<serve_config> parse_serve_config(const json& doc, const entity_registry& available) {
  if (!doc.is_object())
    return status{errc::invalid_argument, "the configuration must be a JSON object"};
  if (auto st = check_keys(doc, "",
                           {"listen",
                            "data_dir",
                            "archive_dir",
                            "archive_retention_days",
                            "archive_prune_interval_ms",
                            "durability",
                            "idle_timeout_ms",
                            "max_active_entities",
                            "storage_threads",
                            "sync_threads",
                            "scheduler_threads",
                            "cache_kib",
                            "wal_kept_on_close_kib",
                            "wal_grow_kib",
                            "spare_files",
                            "http_threads",
                            "key_ttl_ms",
                            "call_timeout_ms",
                            "shutdown_timeout_ms",
                            "alarm_retry_base_ms",
                            "alarm_max_retries",
                            "alarm_poll_ms",
                            "dead_letter_rules",
                            "dev",
                            "journal",
                            "tenants",
                            "types",
                            "idempotency",
                            "limits",
                            "tools",
                            "degradation",
                            "outbox",
                            "cluster"});
      !st)
    return st;
  serve_config cfg;
  if (auto st = parse_basics(doc, cfg); !st)
    return st;
  if (auto st = parse_numbers(doc, cfg); !st)
    return st;
  if (auto it = doc.find("dead_letter_rules"); it != doc.end()) {
    auto rules = resilience::dead_letter_rules::from_json(*it);
    if (!rules)
      return bad("dead_letter_rules", rules.error().message());
    cfg.runtime.dead_letter_rules = *it;
  }
  if (auto st = parse_tenants(doc, cfg); !st)
    return st;
  if (auto st = parse_types(doc, cfg, available); !st)
    return st;
  if (auto st = parse_idempotency(doc, cfg); !st)
    return st;
  if (auto st = parse_limits(doc, cfg); !st)
    return st;
  if (auto st = parse_tools(doc, cfg); !st)
    return st;
  if (auto st = parse_degradation(doc, cfg); !st)
    return st;
  if (auto st = parse_outbox(doc, cfg); !st)
    return st;
  if (auto st = parse_cluster(doc, cfg); !st)
    return st;
  return cfg;
}

result<serve_config> load_serve_config(const std::filesystem::path& file,
                                       const entity_registry& available) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return status{errc::not_found, "cannot read " + file.string()};
  std::stringstream ss;
  ss << in.rdbuf();
  json doc;
  try {
    doc = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    return status{errc::invalid_argument, file.string() + ": not valid JSON: " + e.what()};
  }
  auto cfg = parse_serve_config(doc, available);
  if (!cfg)
    return status{cfg.error().code(), file.string() + ": " + cfg.error().message()};
  return cfg;
}

} // namespace factum::tools
