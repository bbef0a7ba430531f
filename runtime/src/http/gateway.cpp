// http/gateway.cpp: the HTTP API (docs/http-api.md) over runtime::call: a route table (method and
// path pattern -> one handler per route) and the steps the handlers share: tenant from
// X-API-Key, entity key validation before anything touches it, registry checks, query parsing,
// JSON checks, Idempotency-Key and fingerprint, problem+json bodies, metrics and one log line
// per error. handle() runs on an I/O thread and never blocks; runtime replies arrive on CAF
// workers.
#include "http/gateway.hpp"

#include <algorithm>
#include <ctime>
#include <mutex>
#include <tuple>

#include "factum/storage/fact.hpp"
#include "factum/storage/records.hpp"
#include "factum/storage/sha256.hpp"
#include "http/forwarder.hpp"
#include "http/http_util.hpp"

namespace factum::http {

using nlohmann::json;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::string_view problem_type = "application/problem+json";

/// A problem+json body of the gateway's own (the taxonomy's category, title and form).
std::string problem_body(int status, std::string_view code, const std::string& detail) {
  return call_reply::failure(category_of_status(status), std::string(code), detail, status).body;
}

/// A key part as the HTTP API accepts it: validate_key_part, and no '..' anywhere.
status check_key_part(const std::string& part, std::string_view what) {
  if (part.find("..") != std::string::npos)
    return status{errc::invalid_argument, std::string(what) + " must not contain '..'"};
  return validate_key_part(part, what);
}

/// The outcome of parsing a query: JSON arguments, or the reason it was refused.
struct query_result {
  json args = json::object();
  std::string error;
};

/// Strict query parsing: every name must be known and given once; integers are plain decimal
/// non-negative int64; limit is 1..10000.
query_result parse_query(std::string_view query, std::initializer_list<std::string_view> strings,
                         std::initializer_list<std::string_view> integers, bool has_limit,
                         bool has_order) {
  query_result out;
  auto params = split_query(query);
  if (!params) {
    out.error = "malformed percent-encoding or invalid UTF-8 in the query";
    return out;
  }
  auto in = [](std::string_view n, std::initializer_list<std::string_view> set) {
    for (auto s : set)
      if (s == n)
        return true;
    return false;
  };
  for (auto& p : *params) {
    if (out.args.contains(p.name)) {
      out.error = "parameter '" + std::string(clip(p.name, 64)) + "' is given more than once";
      return out;
    }
    if (in(p.name, strings)) {
      if (p.value.empty() || p.value.size() > 255) {
        out.error = "parameter '" + p.name + "' must be 1..255 characters";
        return out;
      }
      // No value of a filter has a control character (a NUL would match nothing and answer an
      // empty 200 where the caller meant something else).
      if (has_control_char(p.value)) {
        out.error = "parameter '" + p.name + "' must not contain control characters";
        return out;
      }
      out.args[p.name] = p.value;
    } else if (in(p.name, integers) || (has_limit && p.name == "limit")) {
      auto v = parse_non_negative(p.value);
      if (!v) {
        out.error = "parameter '" + p.name + "' must be a non-negative integer that fits 64 bits";
        return out;
      }
      if (p.name == "limit" && (*v < 1 || *v > 10000)) {
        out.error = "parameter 'limit' must be between 1 and 10000";
        return out;
      }
      out.args[p.name] = *v;
    } else if (has_order && p.name == "order") {
      if (p.value != "asc" && p.value != "desc") {
        out.error = "parameter 'order' must be 'asc' or 'desc'";
        return out;
      }
      out.args[p.name] = p.value;
    } else {
      out.error = "unknown query parameter '" + std::string(clip(p.name, 64)) + "'";
      return out;
    }
  }
  return out;
}

// -- one exchange --

struct route;

/// One request on its way through the gateway: the request, where the answer goes, and what
/// the metrics and the error log line say about it. Shared with the runtime's reply callback.
struct exchange {
  http_request req;
  std::function<void(http_response)> done;
  std::string_view route = "unmatched"; ///< the metrics label and the log line's "route"
  std::string verb;                     ///< clipped, for the log line
  std::string path;                     ///< clipped, for the log line
  std::string_view query;               ///< into req.target, without '?'
  std::vector<std::string> seg;         ///< the path's segments (decoded under /v1/entities/)
  std::string trace_id;
  std::string tenant;
  const http_api_key* key = nullptr; ///< the API key that authenticated the request
  std::string code;
  std::string detail;
  clock_type::time_point started = clock_type::now();
  const struct route* chosen = nullptr; ///< the route, for a cluster's retry after NOT_OWNER
  int relays = 0;                       ///< cluster: times the request was relayed to an owner
};
using exchange_ptr = std::shared_ptr<exchange>;

/// A refusal: the status, problem code and detail of a problem+json answer.
struct refusal {
  int status = 400;
  std::string_view code;
  std::string detail;
  bool close = false; ///< close the connection after the answer
};
/// The outcome of one step: a refusal that ends the request, or nullopt to carry on.
using verdict = std::optional<refusal>;

http_response problem(exchange& x, int status, std::string_view code, std::string detail) {
  http_response r;
  r.status = status;
  r.content_type = problem_type;
  r.body = problem_body(status, code, detail);
  r.trace_id = x.trace_id;
  x.code = code;
  x.detail = std::move(detail);
  return r;
}

/// Counts the answer, logs it when it is an error (4xx/5xx), and hands it to x.done.
void finish(gateway& gw, exchange& x, http_response r) {
  gw.metrics().count_request(x.route, r.status, x.tenant);
  if (r.status >= 400) {
    if (x.code.empty() || x.detail.empty()) {
      auto p = json::parse(r.body, nullptr, false);
      if (p.is_object()) {
        if (x.code.empty() && p.contains("code") && p["code"].is_string())
          x.code = p["code"].get<std::string>();
        if (x.detail.empty() && p.contains("detail") && p["detail"].is_string())
          x.detail = p["detail"].get<std::string>();
      }
    }
    auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - x.started).count();
    gw.log({{"level", r.status >= 500 ? "error" : "warn"},
            {"event", "request_failed"},
            {"trace_id", x.trace_id},
            {"method", x.verb},
            {"path", x.path},
            {"route", x.route},
            {"status", r.status},
            {"code", x.code},
            {"detail", std::string(clip(x.detail, 512))},
            {"tenant", x.tenant.empty() ? json(nullptr) : json(x.tenant)},
            {"replayed", r.replayed},
            {"duration_ms", static_cast<double>(static_cast<int64_t>(ms * 1000)) / 1000}});
  }
  x.done(std::move(r));
}

void refuse(gateway& gw, exchange& x, refusal no) {
  auto r = problem(x, no.status, no.code, std::move(no.detail));
  r.close = no.close;
  finish(gw, x, std::move(r));
}

// -- shared steps --

/// The trace id (W3C traceparent or X-Trace-Id, else a new one), the path and the query.
void begin(exchange& x) {
  x.verb = std::string(clip(x.req.verb, 16));
  x.trace_id = incoming_trace_id(x.req.traceparent, x.req.x_trace_id);
  if (x.trace_id.empty())
    x.trace_id = new_trace_id();
  std::string_view target = x.req.target;
  auto qpos = target.find('?');
  std::string_view path = target.substr(0, qpos);
  x.query = qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);
  x.path = std::string(clip(path, 256));
}

/// The segments of an absolute path: percent-decoded under /v1/entities/{type}/{id}/ (where
/// they are names), as sent elsewhere.
verdict split_segments(exchange& x) {
  std::string_view path = x.req.target;
  path = path.substr(0, path.find('?'));
  if (path.empty() || path.front() != '/')
    return refusal{400, "BAD_REQUEST", "the request target must be an absolute path"};
  auto raw = split_path(path);
  bool decode = raw.size() >= 5 && raw[0] == "v1" && raw[1] == "entities";
  for (auto s : raw) {
    if (!decode) {
      x.seg.emplace_back(s);
      continue;
    }
    auto d = percent_decode(s);
    if (!d)
      return refusal{400, "INVALID_PATH", "malformed percent-encoding in the path"};
    x.seg.push_back(std::move(*d));
  }
  return std::nullopt;
}

verdict no_query(const exchange& x) {
  if (!x.query.empty())
    return refusal{400, "INVALID_QUERY", "this route takes no query parameters"};
  return std::nullopt;
}

/// Entity routes answer 503 (and close) once the server drains or the runtime stops.
verdict check_running(gateway& gw) {
  if (gw.draining() || gw.rt().stopping())
    return refusal{503, "UNAVAILABLE", "the server is stopping; retry on another instance", true};
  return std::nullopt;
}

/// The tenant, only from X-API-Key. Two keys (a proxy adding one, a client sending two tenants'
/// keys) are ambiguous: refused rather than "the first one wins". Every configured digest is
/// compared, in constant time, whatever matched before.
verdict authenticate(const http_server_config& cfg, const http_request& req,
                     const http_tenant*& tenant, const http_api_key*& key) {
  if (req.api_key_count > 1)
    return refusal{401, "UNAUTHORIZED", "send exactly one X-API-Key header"};
  tenant = nullptr;
  if (req.has_api_key && !req.api_key.empty()) {
    auto digest = sha256_hex(req.api_key);
    for (auto& t : cfg.tenants)
      for (auto& k : t.keys)
        if (constant_time_equal(digest, k.sha256)) {
          tenant = &t;
          key = &k;
        }
  }
  if (!tenant)
    return refusal{401, "UNAUTHORIZED",
                   req.has_api_key ? "unknown API key" : "missing X-API-Key header"};
  return std::nullopt;
}

/// The entity key's type and id, validated before anything else touches them.
verdict check_entity_key(const std::string& type, const std::string& id) {
  if (auto st = check_key_part(type, "entity type"); !st)
    return refusal{400, "INVALID_ENTITY_KEY", st.message()};
  if (auto st = check_key_part(id, "entity id"); !st)
    return refusal{400, "INVALID_ENTITY_KEY", st.message()};
  return std::nullopt;
}

/// A write's headers and body: at most one valid Idempotency-Key (into opts); a body is JSON
/// (Content-Type, syntax, depth).
verdict check_write(const http_server_config& cfg, const http_request& req, call_options& opts) {
  if (req.idempotency_key_count > 1)
    return refusal{400, "INVALID_IDEMPOTENCY_KEY", "send at most one Idempotency-Key header"};
  if (req.idempotency_key_count == 1) {
    if (!valid_idempotency_key(req.idempotency_key))
      return refusal{400, "INVALID_IDEMPOTENCY_KEY",
                     "an Idempotency-Key is 1 to 255 printable ASCII characters"};
    opts.idempotency_key = req.idempotency_key;
  }
  if (req.body.empty())
    return std::nullopt;
  if (!req.has_content_type || req.content_type_count > 1 ||
      !is_json_content_type(req.content_type))
    return refusal{415, "UNSUPPORTED_MEDIA_TYPE",
                   "the body must be sent as Content-Type: application/json"};
  auto c = check_json(req.body, cfg.limits.max_json_depth);
  if (c.verdict == json_verdict::too_deep)
    return refusal{400, "JSON_TOO_DEEP", c.message};
  if (c.verdict == json_verdict::invalid)
    return refusal{400, "INVALID_JSON", c.message};
  return std::nullopt;
}

/// Whether a call of type.method needs an Idempotency-Key: the server config's override, else
/// the method's own option.
bool requires_key(const http_server_config& cfg, const std::string& type, const std::string& method,
                  const method_def& def) {
  auto it = cfg.require_idempotency_key.find(type);
  if (it != cfg.require_idempotency_key.end()) {
    if (auto m = it->second.find(method); m != it->second.end())
      return m->second;
    if (auto all = it->second.find("*"); all != it->second.end())
      return all->second;
  }
  return def.options.requires_idempotency_key;
}

/// The idempotency fingerprint of a write: SHA-256 of "POST\n<canonical path>\n<payload>".
std::string fingerprint(std::string_view canonical, std::string_view payload) {
  std::string fp;
  fp.reserve(canonical.size() + payload.size() + 8);
  fp.append("POST\n").append(canonical).push_back('\n');
  fp.append(payload);
  return sha256_hex(fp);
}

// -- entity routes --

/// What an entity route works on, once the shared checks passed.
struct entity_ref {
  const http_tenant& tenant;
  const std::string& type; ///< x.seg[2], validated
  const std::string& id;   ///< x.seg[3], validated
  const entity_type& def;

  /// The canonical path of a write for its fingerprint: /v1/entities/{type}/{id}/{rest}.
  std::string canonical(std::string_view rest) const {
    return "/v1/entities/" + type + "/" + id + "/" + std::string(rest);
  }
};

std::string_view scope_name(uint8_t scope) {
  return scope == scope_read ? "read" : scope == scope_write ? "write" : "operate";
}

/// Running, the tenant of the API key, and the key's scope for the route: the tenant (noted in
/// `x`), or a refusal.
verdict tenant_check(gateway& gw, exchange& x, uint8_t scope, const http_tenant*& tenant) {
  const http_api_key* key = nullptr;
  verdict no = check_running(gw);
  if (!no)
    no = authenticate(gw.config(), x.req, tenant, key);
  if (!no) {
    x.tenant = tenant->name;
    x.key = key;
    if ((key->scopes & scope) == 0)
      no = refusal{403, "INSUFFICIENT_SCOPE",
                   "this API key lacks the '" + std::string(scope_name(scope)) +
                     "' scope this route needs"};
  }
  return no;
}

/// The checks every entity route shares: tenant_check, entity key, type. Refuses and returns
/// nullopt when one fails.
std::optional<entity_ref> entity_gate(gateway& gw, exchange& x, uint8_t scope) {
  const http_tenant* tenant = nullptr;
  verdict no = tenant_check(gw, x, scope, tenant);
  if (!no)
    no = check_entity_key(x.seg[2], x.seg[3]);
  const entity_type* def = nullptr;
  if (!no && !(def = gw.rt().config().types.find(x.seg[2])))
    no = refusal{404, "UNKNOWN_ENTITY_TYPE", "no entity type " + x.seg[2]};
  if (no) {
    refuse(gw, x, std::move(*no));
    return std::nullopt;
  }
  return entity_ref{*tenant, x.seg[2], x.seg[3], *def};
}

/// The call options every entity route starts from.
call_options base_options(gateway& gw, const exchange& x) {
  call_options opts;
  opts.trace_id = x.trace_id;
  opts.timeout = gw.config().call_timeout;
  return opts;
}

/// The Link header of a page whose reply says where the next one starts: the request's own
/// path and query, its after_seq/before_seq/after replaced by the cursor ("after_seq=42").
std::string next_link(const exchange& x, const std::string& cursor) {
  std::string_view target = x.req.target;
  std::string link = "<" + std::string(target.substr(0, target.find('?'))) + "?";
  std::string_view q = x.query;
  while (!q.empty()) {
    auto amp = q.find('&');
    auto part = q.substr(0, amp);
    if (!part.starts_with("after_seq=") && !part.starts_with("before_seq=") &&
        !part.starts_with("after=") && !part.empty())
      link.append(part).push_back('&');
    if (amp == std::string_view::npos)
      break;
    q.remove_prefix(amp + 1);
  }
  return link + cursor + ">; rel=\"next\"";
}

/// A call this node no longer owns (cluster mode: its lease ran out, or the shard moved under
/// it): a relayed request says so to the node that relayed it, which retries at the owner; a
/// client's own request is answered 503 SHARD_UNAVAILABLE, retryable with the same key (nothing
/// of the call was committed).
http_response not_owner_answer(exchange& x, const call_reply& r) {
  auto detail = r.json().value("detail", std::string("this node does not own the entity"));
  if (!x.req.forwarded.empty()) {
    auto res = problem(x, 503, "NOT_OWNER", detail);
    res.not_owner = true;
    res.retry_after_s = 1;
    return res;
  }
  auto res = problem(x, 503, "SHARD_UNAVAILABLE", detail + "; retry with the same Idempotency-Key");
  res.retry_after_s = 1;
  return res;
}

/// Hands the call to the runtime; its reply becomes the answer.
void run_call(gateway& gw, const exchange_ptr& x, const entity_ref& e, std::string method,
              std::string args, call_options opts) {
  entity_key key{e.tenant.name, e.type, e.id};
  auto t0 = clock_type::now();
  gw.rt().call(key, std::move(method), std::move(args), std::move(opts),
               [&gw, x, t0](call_reply r) {
                 gw.metrics().observe_call(clock_type::now() - t0);
                 http_response res;
                 res.trace_id = x->trace_id;
                 res.replayed = r.replayed;
                 if (r.ok) {
                   res.status = 200;
                   res.body = std::move(r.body);
                   if (!r.cursor.empty())
                     res.link = next_link(*x, r.cursor);
                 } else if (r.code == "NOT_OWNER") {
                   res = not_owner_answer(*x, r);
                 } else {
                   res.status = r.http_status > 0 ? r.http_status : 500;
                   res.content_type = problem_type;
                   res.body = std::move(r.body);
                   res.retry_after_s = (r.retry_after_ms + 999) / 1000;
                   x->code = r.code;
                 }
                 finish(gw, *x, std::move(res));
               });
}

/// POST .../{method}: a call of one of the type's methods with the body as arguments.
void call_method(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  const auto& method = x->seg[4];
  if (method.empty() || method.front() == '@' || !validate_key_part(method, "method"))
    return refuse(gw, *x,
                  {404, "METHOD_NOT_FOUND",
                   "entity type " + e.type + " has no method " + std::string(clip(method, 128))});
  const auto* def = e.def.find(method);
  if (!def)
    return refuse(gw, *x,
                  {404, "METHOD_NOT_FOUND", "entity type " + e.type + " has no method " + method});
  auto opts = base_options(gw, *x);
  verdict no = no_query(*x);
  if (!no)
    no = check_write(gw.config(), x->req, opts);
  if (!no && opts.idempotency_key.empty() && requires_key(gw.config(), e.type, method, *def))
    no = refusal{400, "IDEMPOTENCY_KEY_REQUIRED",
                 e.type + "." + method + " requires an Idempotency-Key header"};
  if (no)
    return refuse(gw, *x, std::move(*no));
  std::string args = x->req.body.empty() ? std::string("{}") : std::move(x->req.body);
  if (!opts.idempotency_key.empty())
    opts.fingerprint = fingerprint(e.canonical(method), args);
  run_call(gw, x, e, method, std::move(args), std::move(opts));
}

/// GET .../facts: a page of facts; the filters are the query's.
void list_facts(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q = parse_query(x->query, {"type", "subtype", "trace_id", "tool_id", "idempotency_key"},
                       {"since", "until", "after_seq", "before_seq"}, true, true);
  if (!q.error.empty())
    return refuse(gw, *x, {400, "INVALID_QUERY", q.error});
  // Type filters are fact tokens: refused here, so that a bad filter never reaches the entity
  // (where a failed call would be recorded as an error fact).
  for (const char* name : {"type", "subtype"})
    if (q.args.contains(name))
      if (auto st = validate_fact_token(q.args[name].get<std::string>(), name); !st)
        return refuse(gw, *x, {400, "INVALID_QUERY", st.message()});
  run_call(gw, x, e, "@facts", q.args.dump(), base_options(gw, *x));
}

/// GET .../dead-letters: the entity's dead letters, optionally of one status.
void list_dead_letters(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q = parse_query(x->query, {"status"}, {}, true, false);
  if (!q.error.empty())
    return refuse(gw, *x, {400, "INVALID_QUERY", q.error});
  if (q.args.contains("status"))
    if (!parse_dl_status(q.args["status"].get<std::string>()))
      return refuse(gw, *x,
                    {400, "INVALID_QUERY",
                     "parameter 'status' must be pending, scheduled, resolved, discarded or "
                     "acknowledged"});
  run_call(gw, x, e, "@dead_letters", q.args.dump(), base_options(gw, *x));
}

/// GET .../breakers: the entity's circuit breakers.
void list_breakers(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  run_call(gw, x, e, "@breakers", "{}", base_options(gw, *x));
}

/// POST .../{dead-letters|breakers}/{name}/{action}: an operator's action; the body's object
/// members travel along with the name and the action.
void operator_action(gateway& gw, const exchange_ptr& x, const entity_ref& e, bool dead_letter) {
  const auto& name = x->seg[5];
  const auto& action = x->seg[6];
  auto opts = base_options(gw, *x);
  verdict no = no_query(*x);
  if (!no)
    no = check_write(gw.config(), x->req, opts);
  if (!no)
    if (auto st = check_key_part(name, dead_letter ? "dead letter id" : "tool"); !st)
      no = refusal{400, "INVALID_ARGUMENT", st.message()};
  if (no)
    return refuse(gw, *x, std::move(*no));
  json args = json::object();
  if (!x->req.body.empty()) {
    auto b = json::parse(x->req.body, nullptr, false);
    if (b.is_object())
      args = std::move(b);
  }
  args[dead_letter ? "id" : "tool"] = name;
  args["action"] = action;
  // Who asked, whatever the body says: the key's id (its digest's first 12 hex digits).
  args["actor"] = "api-key:" + x->key->sha256.substr(0, 12);
  if (!opts.idempotency_key.empty())
    opts.fingerprint = fingerprint(e.canonical(x->seg[4] + "/" + name + "/" + action), x->req.body);
  run_call(gw, x, e, dead_letter ? "@dead_letter" : "@breaker", args.dump(), std::move(opts));
}

void dead_letter_action(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  operator_action(gw, x, e, true);
}

void breaker_action(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  operator_action(gw, x, e, false);
}

/// GET /v1/entities: a page of the tenant's entities ({"type","id","bytes"}, in (type, id)
/// order), optionally of one `type`, after the cursor `after` ("type/id"); a full page has a
/// Link to the next. Read from the tenant index on a storage thread; answered from there.
/// A listing of a tenant's entities across a cluster: this node's page and every other node's
/// (each the first `limit` after the cursor), merged. Under `mu`: the completions run on a
/// storage thread and the relay's I/O thread.
struct fleet_page {
  std::mutex mu;
  int pending = 0;
  json entities = json::array();
  bool more = false;  ///< a node had a full page
  std::string failed; ///< why a part is missing (the answer is then 503)
};

/// The merged page: the first `limit` in (type, id) order, with a Link when there may be more.
void answer_listing(gateway& gw, const exchange_ptr& x, fleet_page& f, int64_t limit) {
  if (!f.failed.empty()) {
    auto r = problem(*x, 503, "SHARD_UNAVAILABLE", f.failed + "; retry");
    r.retry_after_s = 1;
    return finish(gw, *x, std::move(r));
  }
  auto& v = f.entities;
  std::sort(v.begin(), v.end(), [](const json& a, const json& b) {
    return std::tie(a["type"].get_ref<const std::string&>(),
                    a["id"].get_ref<const std::string&>()) <
           std::tie(b["type"].get_ref<const std::string&>(), b["id"].get_ref<const std::string&>());
  });
  // During a shard move an entity's file is on both nodes for a moment: listed once.
  v.erase(std::unique(v.begin(), v.end(),
                      [](const json& a, const json& b) {
                        return a["type"] == b["type"] && a["id"] == b["id"];
                      }),
          v.end());
  if (static_cast<int64_t>(v.size()) > limit) {
    v.erase(v.begin() + limit, v.end());
    f.more = true;
  }
  http_response r;
  r.trace_id = x->trace_id;
  if (f.more && !v.empty())
    r.link = next_link(*x, "after=" + v.back()["type"].get<std::string>() + "/" +
                             v.back()["id"].get<std::string>());
  r.body = v.dump();
  finish(gw, *x, std::move(r));
}

void list_entities(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  if (auto no = tenant_check(gw, *x, scope_read, tenant))
    return refuse(gw, *x, std::move(*no));
  auto q = parse_query(x->query, {"type", "after"}, {}, true, false);
  if (!q.error.empty())
    return refuse(gw, *x, {400, "INVALID_QUERY", q.error});
  entity_list_query lq;
  lq.type = q.args.value("type", "");
  if (!lq.type.empty())
    if (auto st = check_key_part(lq.type, "type"); !st)
      return refuse(gw, *x, {400, "INVALID_QUERY", st.message()});
  if (auto after = q.args.value("after", ""); !after.empty()) {
    auto slash = after.find('/');
    lq.after_type = after.substr(0, slash);
    lq.after_id = slash == std::string::npos ? "" : after.substr(slash + 1);
    if (!check_key_part(lq.after_type, "type") || !check_key_part(lq.after_id, "id"))
      return refuse(gw, *x, {400, "INVALID_QUERY", "parameter 'after' must be TYPE/ID"});
  }
  lq.limit = q.args.value("limit", int64_t{100});
  auto limit = lq.limit;
  std::vector<std::string> peers, down;
  if (auto* c = gw.config().cluster.get(); c && x->req.forwarded.empty() && gw.relay()) {
    peers = c->peers(down);
    if (!down.empty()) {
      std::string names;
      for (auto& d : down)
        names += (names.empty() ? "" : ", ") + d;
      auto r = problem(*x, 503, "SHARD_UNAVAILABLE",
                       "node(s) " + names + " hold entities and are down: the listing would " +
                         "be incomplete; retry when they are back");
      r.retry_after_s = 1;
      return finish(gw, *x, std::move(r));
    }
  }
  auto f = std::make_shared<fleet_page>();
  f->pending = 1 + static_cast<int>(peers.size());
  gw.rt().list_entities(tenant->name, std::move(lq), [&gw, x, f, limit](auto page) {
    std::lock_guard<std::mutex> g(f->mu);
    if (!page) {
      f->failed = page.error().message();
    } else {
      for (auto& e : *page)
        f->entities.push_back({{"type", e.type}, {"id", e.id}, {"bytes", e.bytes}});
      f->more = f->more || static_cast<int64_t>(page->size()) == limit;
    }
    if (--f->pending == 0)
      answer_listing(gw, x, *f, limit);
  });
  for (auto& address : peers)
    gw.relay()->send(address, x->req, x->trace_id, 0, [&gw, x, f, limit, address](auto fr) {
      std::lock_guard<std::mutex> g(f->mu);
      auto page = fr.res.status == 200 ? json::parse(fr.res.body, nullptr, false) : json();
      bool well_formed = page.is_array();
      for (auto& e : page)
        well_formed = well_formed && e.is_object() && e.contains("type") && e["type"].is_string() &&
                      e.contains("id") && e["id"].is_string();
      if (!well_formed) {
        f->failed = "node " + address + " did not list its entities (" +
                    (fr.res.status ? std::to_string(fr.res.status) : fr.error) + ")";
      } else {
        for (auto& e : page)
          f->entities.push_back(std::move(e));
        f->more = f->more || static_cast<int64_t>(page.size()) == limit;
      }
      if (--f->pending == 0)
        answer_listing(gw, x, *f, limit);
    });
}

// -- operational routes --

/// GET /healthz: 200 while serving, 503 once draining or stopping.
void get_healthz(gateway& gw, const exchange_ptr& x) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  if (gw.draining() || gw.rt().stopping())
    return refuse(gw, *x, {503, "UNAVAILABLE", "the server is stopping"});
  http_response r;
  r.trace_id = x->trace_id;
  r.body = R"({"status":"ok"})";
  if (auto* c = gw.config().cluster.get()) {
    std::string why;
    if (!c->healthy(why))
      return refuse(gw, *x, {503, "CLUSTER_UNAVAILABLE", why});
    r.body = R"({"status":"ok","lease":"live"})";
  }
  finish(gw, *x, std::move(r));
}

/// GET /v1/cluster: the cluster's nodes, shards, owners and epochs (any key with read).
void get_cluster(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  verdict no = no_query(*x);
  if (!no)
    no = tenant_check(gw, *x, scope_read, tenant);
  if (!no && !gw.config().cluster)
    no = refusal{404, "NOT_CLUSTERED", "this node runs alone (no \"cluster\" in its config)"};
  if (no)
    return refuse(gw, *x, std::move(*no));
  http_response r;
  r.trace_id = x->trace_id;
  r.body = gw.config().cluster->describe();
  finish(gw, *x, std::move(r));
}

/// GET /metrics: the Prometheus text of the gateway's and the runtime's counters.
void get_metrics(gateway& gw, const exchange_ptr& x) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  http_response r;
  r.trace_id = x->trace_id;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = gw.metrics_text();
  finish(gw, *x, std::move(r));
}

/// PUT /v1/cluster/moves/{shard}/{tenant}/{type}/{id}: one entity file of a planned shard move,
/// sent by the shard's old home (docs/cluster.md, "Moving shards"). Authenticated by the
/// cluster's secret, not an API key; the node checks the move in etcd, the runtime adopts it.
void put_move_file(gateway& gw, const exchange_ptr& x) {
  auto* c = gw.config().cluster.get();
  verdict no = no_query(*x);
  if (!no && !c)
    no = refusal{404, "NOT_CLUSTERED", "this node runs alone (no \"cluster\" in its config)"};
  if (!no && !c->authentic({x->req.target, x->req.move_epoch, x->req.content_sha256,
                            x->req.move_time, x->req.move_signature}))
    no = refusal{401, "CLUSTER_SECRET_INVALID",
                 "a shard move's file must be signed with the cluster's secret "
                 "(X-Factum-Move-Signature) within 5 minutes of this node's clock"};
  std::optional<entity_key> key;
  int64_t epoch = 0;
  if (!no) {
    auto num = [](const std::string& s, int64_t& out) {
      out = 0;
      for (char ch : s)
        if (ch < '0' || ch > '9' || out > INT64_MAX / 20)
          return false;
        else
          out = out * 10 + (ch - '0');
      return !s.empty() && s.size() <= 18;
    };
    int64_t k = 0;
    auto t = percent_decode(x->seg[4]), ty = percent_decode(x->seg[5]),
         i = percent_decode(x->seg[6]);
    auto made =
      t && ty && i
        ? entity_key::make(*t, *ty, *i)
        : result<entity_key>(status{errc::invalid_argument, "malformed percent-encoding"});
    if (!num(x->seg[3], k) || k > UINT32_MAX)
      no = refusal{400, "INVALID_PATH", "the shard must be a decimal number"};
    else if (!num(x->req.move_epoch, epoch) || epoch <= 0)
      no = refusal{400, "INVALID_MOVE", "X-Factum-Move-Epoch must be a positive decimal number"};
    else if (!made)
      no = refusal{400, "INVALID_ENTITY_KEY", made.error().message()};
    else if (sha256_hex(x->req.body) != x->req.content_sha256)
      no = refusal{400, "CHECKSUM_MISMATCH", "the body's SHA-256 is not X-Factum-Content-Sha256"};
    else if (auto st = c->accept_move(static_cast<uint32_t>(k), epoch, *made); !st)
      no = refusal{st.code() == errc::unavailable ? 503 : 409, "MOVE_REFUSED", st.to_string()};
    if (made)
      key = std::move(*made);
  }
  if (no)
    return refuse(gw, *x, std::move(*no));
  gw.rt().adopt_entity(*key, std::move(x->req.body), epoch, [&gw, x, c](status st) {
    if (!st) {
      auto bad = st.code() == errc::invalid_argument || st.code() == errc::corruption;
      return refuse(gw, *x,
                    {bad                                                      ? 422
                     : st.code() == errc::busy || st.code() == errc::conflict ? 409
                                                                              : 503,
                     bad ? "MOVE_FILE_INVALID" : "MOVE_REFUSED", st.to_string()});
    }
    c->file_received();
    http_response r;
    r.status = 204;
    r.trace_id = x->trace_id;
    finish(gw, *x, std::move(r));
  });
}

// -- the route table --

/// One route: a method, a path pattern ("{name}" matches any one segment, "{name:a|b}" only
/// those values), the metrics label, and its handler: an operational one, or an entity one
/// that runs after entity_gate.
struct route {
  std::string_view method;
  std::string_view pattern;
  std::string_view label;
  void (*answer)(gateway&, const exchange_ptr&) = nullptr;
  void (*entity)(gateway&, const exchange_ptr&, const entity_ref&) = nullptr;
  /// The API key scope an entity route needs (api_scope).
  uint8_t scope = 0;
  /// The 404 detail of a path that fits but for a value a "{name:a|b}" segment does not list.
  std::string_view unknown_value = {};
};

/// First match wins; a path that fits routes of other methods only is 405 with their Allow.
constexpr route routes[] = {
  {"GET", "/healthz", "healthz", get_healthz},
  {"GET", "/metrics", "metrics", get_metrics},
  {"GET", "/v1/cluster", "cluster", get_cluster},
  {"PUT", "/v1/cluster/moves/{shard}/{tenant}/{type}/{id}", "cluster_move", put_move_file},
  {"GET", "/v1/entities", "entities", list_entities},
  {"GET", "/v1/entities/{type}/{id}/facts", "facts", nullptr, list_facts, scope_read},
  {"GET", "/v1/entities/{type}/{id}/dead-letters", "dead_letters", nullptr, list_dead_letters,
   scope_read},
  {"GET", "/v1/entities/{type}/{id}/breakers", "breakers", nullptr, list_breakers, scope_read},
  {"POST", "/v1/entities/{type}/{id}/{method}", "call", nullptr, call_method, scope_write},
  {"POST", "/v1/entities/{type}/{id}/dead-letters/{dead_letter}/{action:retry|discard|acknowledge}",
   "dead_letter_action", nullptr, dead_letter_action, scope_operate,
   "a dead letter's action is retry, discard or acknowledge"},
  {"POST", "/v1/entities/{type}/{id}/breakers/{tool}/{action:force-open|reset|disable}",
   "breaker_action", nullptr, breaker_action, scope_operate,
   "a breaker's action is force-open, reset or disable"},
};

enum class fit { no, but_value, yes };

/// Whether `value` is one of the '|'-separated `values`.
bool listed(std::string_view values, std::string_view value) {
  for (;;) {
    auto bar = values.find('|');
    if (values.substr(0, bar) == value)
      return true;
    if (bar == std::string_view::npos)
      return false;
    values.remove_prefix(bar + 1);
  }
}

/// Whether `seg` fits `pattern`: yes, no, or but_value (only a "{name:a|b}" segment differs).
/// Walks the pattern in place: routing allocates nothing.
fit fits(std::string_view pattern, const std::vector<std::string>& seg) {
  bool value_differs = false;
  size_t i = 0;
  pattern.remove_prefix(1); // the leading '/'
  for (;;) {
    auto slash = pattern.find('/');
    auto p = pattern.substr(0, slash);
    if (i == seg.size())
      return fit::no;
    const auto& s = seg[i++];
    if (p.front() != '{') {
      if (p != s)
        return fit::no;
    } else if (auto colon = p.find(':'); colon != std::string_view::npos) {
      value_differs = value_differs || !listed(p.substr(colon + 1, p.size() - colon - 2), s);
    }
    if (slash == std::string_view::npos)
      break;
    pattern.remove_prefix(slash + 1);
  }
  if (i != seg.size())
    return fit::no;
  return value_differs ? fit::but_value : fit::yes;
}

/// What the table says about a request: the route to run, or what the refusal needs.
struct selection {
  const route* chosen = nullptr;
  const route* fitting = nullptr;   ///< the first route the path fits, whatever its method
  const route* but_value = nullptr; ///< the first route the path fits but for a listed value
  std::string allow;                ///< the methods of the routes the path fits
};

selection select_route(const exchange& x) {
  selection out;
  for (const auto& r : routes) {
    auto f = fits(r.pattern, x.seg);
    if (f == fit::but_value && !out.but_value)
      out.but_value = &r;
    if (f != fit::yes)
      continue;
    if (r.method == x.req.verb) {
      out.chosen = &r;
      return out;
    }
    out.fitting = out.fitting ? out.fitting : &r;
    if (out.allow.find(r.method) == std::string::npos)
      out.allow += (out.allow.empty() ? "" : ", ") + std::string(r.method);
  }
  return out;
}

// -- cluster mode --

/// An entity route: the shared checks, then (in a cluster) where the entity lives: here, at its
/// owner (relayed), or nowhere now (503).
void dispatch_entity(gateway& gw, const exchange_ptr& x);

/// Relays the request to its owner. An owner that says "not mine", or that cannot be reached
/// before the request was sent, makes this node read the cluster's state again and route the
/// request anew, at most twice; after that, or when the owner may have got the request and
/// did not answer, the client gets 503 SHARD_UNAVAILABLE (retryable with the same key).
void relay(gateway& gw, const exchange_ptr& x, const shard_route& d) {
  ++x->relays;
  gw.relay()->send(
    d.address, x->req, x->trace_id, d.epoch, [&gw, x, shard = d.shard](forwarded_reply fr) {
      bool unsent = fr.failed != client::failure::none && !fr.maybe_sent;
      if (fr.not_owner || unsent) {
        (fr.not_owner ? gw.metrics().forwarded_not_owner : gw.metrics().forwarded_failed)
          .fetch_add(1);
        if (x->relays <= 2)
          return gw.config().cluster->refresh(shard, [&gw, x] { dispatch_entity(gw, x); });
        auto r = problem(*x, 503, "SHARD_UNAVAILABLE",
                         "the entity's owner could not be reached after 3 tries; retry later");
        r.retry_after_s = 1;
        return finish(gw, *x, std::move(r));
      }
      if (fr.failed != client::failure::none) {
        gw.metrics().forwarded_failed.fetch_add(1);
        auto r = problem(*x, 503, "SHARD_UNAVAILABLE",
                         "the entity's owner did not answer (" + fr.error +
                           "); retry with the same Idempotency-Key");
        r.retry_after_s = 1;
        return finish(gw, *x, std::move(r));
      }
      gw.metrics().forwarded_ok.fetch_add(1);
      fr.res.trace_id = x->trace_id;
      finish(gw, *x, std::move(fr.res));
    });
}

void dispatch_entity(gateway& gw, const exchange_ptr& x) {
  auto e = entity_gate(gw, *x, x->chosen->scope);
  if (!e)
    return;
  if (auto* c = gw.config().cluster.get()) {
    auto d = c->route(entity_key{e->tenant.name, e->type, e->id}, !x->req.forwarded.empty());
    if (d.to == shard_route::where::forward && gw.relay())
      return relay(gw, x, d);
    if (d.to != shard_route::where::local) {
      auto r = problem(*x, 503, d.code, d.detail);
      r.retry_after_s = (d.retry_after_ms + 999) / 1000;
      r.not_owner = d.code == "NOT_OWNER";
      return finish(gw, *x, std::move(r));
    }
  }
  x->chosen->entity(gw, x, *e);
}

} // namespace

gateway::~gateway() {
  stop_relay();
}

std::string gateway::metrics_text() const {
  if (!cfg_.cluster)
    return metrics_.render(rt_.stats());
  auto c = cfg_.cluster->stats();
  return metrics_.render(rt_.stats(), &c);
}

void gateway::stop_relay() {
  if (relay_)
    relay_->stop();
}

gateway::gateway(runtime& rt, http_server_config cfg) : rt_(rt), cfg_(std::move(cfg)) {
  if (cfg_.cluster)
    relay_ = std::make_unique<forwarder>(cfg_.call_timeout + std::chrono::seconds(5));
  if (!cfg_.log)
    cfg_.log = [](std::string_view line) {
      std::string l(line);
      l.push_back('\n');
      std::fwrite(l.data(), 1, l.size(), stderr);
    };
}

void gateway::log(json line) const {
  json out = {{"ts", format_utc_ms(now_ms())}};
  for (auto& [k, v] : line.items())
    out[k] = std::move(v);
  cfg_.log(out.dump(-1, ' ', false, json::error_handler_t::replace));
}

http_response gateway::reject(int status, std::string_view code, std::string detail,
                              std::string_view verb, std::string_view target,
                              std::string_view traceparent, std::string_view x_trace_id) {
  exchange x;
  x.route = "transport";
  x.verb = std::string(clip(verb, 16));
  x.path = std::string(clip(target.substr(0, target.find('?')), 256));
  x.trace_id = incoming_trace_id(traceparent, x_trace_id);
  if (x.trace_id.empty())
    x.trace_id = new_trace_id();
  http_response out;
  x.done = [&out](http_response v) { out = std::move(v); };
  refuse(*this, x, {status, code, std::move(detail), true});
  return out;
}

void gateway::handle(http_request req, std::function<void(http_response)> done) {
  auto x = std::make_shared<exchange>();
  x->req = std::move(req);
  x->done = std::move(done);
  begin(*x);
  if (auto no = split_segments(*x))
    return refuse(*this, *x, std::move(*no));
  auto sel = select_route(*x);
  if (!sel.chosen && sel.fitting) {
    x->route = sel.fitting->label;
    auto r = problem(*x, 405, "METHOD_NOT_ALLOWED",
                     x->req.verb + " is not allowed here; use " + sel.allow);
    r.allow = std::move(sel.allow);
    return finish(*this, *x, std::move(r));
  }
  if (!sel.chosen && sel.but_value) {
    x->route = sel.but_value->label;
    return refuse(*this, *x, {404, "ROUTE_NOT_FOUND", std::string(sel.but_value->unknown_value)});
  }
  if (!sel.chosen)
    return refuse(*this, *x,
                  {404, "ROUTE_NOT_FOUND", "no route for " + std::string(clip(x->path, 200))});
  const route* chosen = sel.chosen;
  x->route = chosen->label;
  if (chosen->answer)
    return chosen->answer(*this, x);
  x->chosen = chosen;
  dispatch_entity(*this, x);
}

} // namespace factum::http

namespace factum {

std::string api_key_sha256(std::string_view api_key) {
  return sha256_hex(api_key);
}

} // namespace factum
