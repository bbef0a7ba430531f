// http/gateway.cpp: the HTTP API (BRIEF "HTTP API") over runtime::call: routes, tenant from
// X-API-Key, entity key validation before anything touches it, registry checks, JSON checks,
// Idempotency-Key handling, problem+json bodies, metrics and one log line per error. handle()
// runs on an I/O thread and never blocks; runtime replies arrive on CAF workers.
#include "http/gateway.hpp"

#include <ctime>

#include "factum/storage/fact.hpp"
#include "factum/storage/sha256.hpp"
#include "http/http_util.hpp"

namespace factum::http {

using nlohmann::json;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::string_view problem_type = "application/problem+json";

std::string_view title_of(int status) {
  switch (status) {
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 413: return "Content Too Large";
  case 415: return "Unsupported Media Type";
  case 422: return "Unprocessable Content";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "Error";
  }
}

std::string_view category_of(int status) {
  switch (status) {
  case 401:
  case 403: return "authorization";
  case 408:
  case 429:
  case 503:
  case 504: return "transient";
  case 409: return "data_integrity";
  default: return status >= 500 ? "server" : "client";
  }
}

std::string problem_body(int status, std::string_view code, const std::string& detail) {
  json p = {{"type", "urn:factum:problem:" + std::string(code)},
            {"title", title_of(status)},
            {"status", status},
            {"detail", detail},
            {"code", code},
            {"category", category_of(status)}};
  return p.dump(-1, ' ', false, json::error_handler_t::replace);
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

} // namespace

struct gateway::exchange {
  std::string route = "unmatched";
  std::string verb;
  std::string path;
  std::string trace_id;
  std::string tenant;
  std::string code;
  std::string detail;
  clock_type::time_point started = clock_type::now();
};

gateway::gateway(runtime& rt, http_server_config cfg) : rt_(rt), cfg_(std::move(cfg)) {
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

http_response gateway::problem(exchange& x, int status, std::string_view code, std::string detail) {
  http_response r;
  r.status = status;
  r.content_type = problem_type;
  r.body = problem_body(status, code, detail);
  r.trace_id = x.trace_id;
  x.code = code;
  x.detail = std::move(detail);
  return r;
}

void gateway::finish(exchange& x, http_response r, const std::function<void(http_response)>& done) {
  metrics_.count_request(x.route, r.status);
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
    log({{"level", r.status >= 500 ? "error" : "warn"},
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
  done(std::move(r));
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
  auto r = problem(x, status, code, std::move(detail));
  r.close = true;
  http_response out;
  finish(x, std::move(r), [&out](http_response v) { out = std::move(v); });
  return out;
}

const http_tenant* gateway::authenticate(const http_request& req) const {
  if (!req.has_api_key || req.api_key.empty())
    return nullptr;
  auto digest = sha256_hex(req.api_key);
  const http_tenant* found = nullptr;
  // Every configured digest is compared, in constant time, whatever matched before.
  for (auto& t : cfg_.tenants)
    for (auto& k : t.key_sha256)
      if (constant_time_equal(digest, k))
        found = &t;
  return found;
}

bool gateway::requires_key(const std::string& type, const std::string& method,
                           const method_def& def) const {
  auto it = cfg_.require_idempotency_key.find(type);
  if (it != cfg_.require_idempotency_key.end()) {
    if (auto m = it->second.find(method); m != it->second.end())
      return m->second;
    if (auto all = it->second.find("*"); all != it->second.end())
      return all->second;
  }
  return def.options.requires_idempotency_key;
}

void gateway::handle(http_request req, std::function<void(http_response)> done) {
  auto x = std::make_shared<exchange>();
  x->verb = std::string(clip(req.verb, 16));
  x->trace_id = incoming_trace_id(req.traceparent, req.x_trace_id);
  if (x->trace_id.empty())
    x->trace_id = new_trace_id();
  std::string_view target = req.target;
  auto qpos = target.find('?');
  std::string_view path = target.substr(0, qpos);
  std::string_view query =
    qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);
  x->path = std::string(clip(path, 256));
  auto fail = [&](int status, std::string_view code, std::string detail) {
    finish(*x, problem(*x, status, code, std::move(detail)), done);
  };
  auto not_allowed = [&](std::string allow) {
    auto r =
      problem(*x, 405, "METHOD_NOT_ALLOWED", req.verb + " is not allowed here; use " + allow);
    r.allow = std::move(allow);
    finish(*x, std::move(r), done);
  };
  if (path.empty() || path.front() != '/')
    return fail(400, "BAD_REQUEST", "the request target must be an absolute path");
  auto raw = split_path(path);

  // -- operational routes --
  if (raw.size() == 1 && (raw[0] == "healthz" || raw[0] == "metrics")) {
    x->route = std::string(raw[0]);
    if (req.verb != "GET")
      return not_allowed("GET");
    if (!query.empty())
      return fail(400, "INVALID_QUERY", "this route takes no query parameters");
    http_response r;
    r.trace_id = x->trace_id;
    if (raw[0] == "metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_.render(rt_.stats());
      return finish(*x, std::move(r), done);
    }
    if (draining() || rt_.stopping())
      return fail(503, "UNAVAILABLE", "the server is stopping");
    r.body = R"({"status":"ok"})";
    return finish(*x, std::move(r), done);
  }

  // -- entity routes: /v1/entities/{type}/{id}/... --
  if (raw.size() < 5 || raw[0] != "v1" || raw[1] != "entities")
    return fail(404, "ROUTE_NOT_FOUND", "no route for " + std::string(clip(path, 200)));
  std::vector<std::string> seg;
  for (auto s : raw) {
    auto d = percent_decode(s);
    if (!d)
      return fail(400, "INVALID_PATH", "malformed percent-encoding in the path");
    seg.push_back(std::move(*d));
  }
  enum class kind { call, facts, dead_letters, breakers, dead_letter_action, breaker_action };
  kind k;
  if (seg.size() == 5) {
    const auto& tail = seg[4];
    bool listing = tail == "facts" || tail == "dead-letters" || tail == "breakers";
    if (req.verb == "POST") {
      k = kind::call;
      x->route = "call";
    } else if (req.verb == "GET" && listing) {
      k = tail == "facts" ? kind::facts : tail == "breakers" ? kind::breakers : kind::dead_letters;
      x->route = tail == "facts" ? "facts" : tail == "breakers" ? "breakers" : "dead_letters";
    } else {
      x->route = listing ? tail : "call";
      return not_allowed(listing ? "GET, POST" : "POST");
    }
  } else if (seg.size() == 7 && (seg[4] == "dead-letters" || seg[4] == "breakers")) {
    bool dl = seg[4] == "dead-letters";
    x->route = dl ? "dead_letter_action" : "breaker_action";
    k = dl ? kind::dead_letter_action : kind::breaker_action;
    bool known = dl ? (seg[6] == "retry" || seg[6] == "discard" || seg[6] == "acknowledge")
                    : (seg[6] == "force-open" || seg[6] == "reset");
    if (!known)
      return fail(404, "ROUTE_NOT_FOUND",
                  dl ? "a dead letter's action is retry, discard or acknowledge"
                     : "a breaker's action is force-open or reset");
    if (req.verb != "POST")
      return not_allowed("POST");
  } else {
    return fail(404, "ROUTE_NOT_FOUND", "no route for " + std::string(clip(path, 200)));
  }

  if (draining() || rt_.stopping()) {
    auto r = problem(*x, 503, "UNAVAILABLE", "the server is stopping; retry on another instance");
    r.close = true;
    return finish(*x, std::move(r), done);
  }

  // -- tenant: only from X-API-Key --
  // Two keys (a proxy adding one, a client sending two tenants' keys) are ambiguous: refused
  // rather than "the first one wins".
  if (req.api_key_count > 1)
    return fail(401, "UNAUTHORIZED", "send exactly one X-API-Key header");
  auto* tenant = authenticate(req);
  if (!tenant)
    return fail(401, "UNAUTHORIZED",
                req.has_api_key ? "unknown API key" : "missing X-API-Key header");
  x->tenant = tenant->name;

  // -- entity key: validated before anything else touches it --
  const auto& type = seg[2];
  const auto& id = seg[3];
  if (auto st = check_key_part(type, "entity type"); !st)
    return fail(400, "INVALID_ENTITY_KEY", st.message());
  if (auto st = check_key_part(id, "entity id"); !st)
    return fail(400, "INVALID_ENTITY_KEY", st.message());
  const auto* et = rt_.config().types.find(type);
  if (!et)
    return fail(404, "UNKNOWN_ENTITY_TYPE", "no entity type " + type);

  std::string method;
  std::string args;
  call_options opts;
  opts.trace_id = x->trace_id;
  opts.timeout = cfg_.call_timeout;
  const method_def* def = nullptr;

  if (k == kind::call) {
    method = seg[4];
    if (method.empty() || method.front() == '@' || !validate_key_part(method, "method"))
      return fail(404, "METHOD_NOT_FOUND",
                  "entity type " + type + " has no method " + std::string(clip(method, 128)));
    def = et->find(method);
    if (!def)
      return fail(404, "METHOD_NOT_FOUND", "entity type " + type + " has no method " + method);
  }

  // -- query --
  if (k == kind::facts) {
    auto q = parse_query(query, {"type", "subtype", "trace_id", "tool_id", "idempotency_key"},
                         {"since", "until", "after_seq", "before_seq"}, true, true);
    if (!q.error.empty())
      return fail(400, "INVALID_QUERY", q.error);
    // Type filters are fact tokens: refused here, so that a bad filter never reaches the
    // entity (where a failed call would be recorded as an error fact).
    for (const char* name : {"type", "subtype"})
      if (q.args.contains(name))
        if (auto st = validate_fact_token(q.args[name].get<std::string>(), name); !st)
          return fail(400, "INVALID_QUERY", st.message());
    method = "@facts";
    args = q.args.dump();
  } else if (k == kind::dead_letters) {
    auto q = parse_query(query, {"status"}, {}, true, false);
    if (!q.error.empty())
      return fail(400, "INVALID_QUERY", q.error);
    if (q.args.contains("status")) {
      auto s = q.args["status"].get<std::string>();
      if (s != "pending" && s != "scheduled" && s != "resolved" && s != "discarded" &&
          s != "acknowledged")
        return fail(400, "INVALID_QUERY",
                    "parameter 'status' must be pending, scheduled, resolved, discarded or "
                    "acknowledged");
    }
    method = "@dead_letters";
    args = q.args.dump();
  } else if (!query.empty()) {
    return fail(400, "INVALID_QUERY", "this route takes no query parameters");
  } else if (k == kind::breakers) {
    method = "@breakers";
    args = "{}";
  }

  // -- writes: Idempotency-Key, Content-Type, body --
  if (req.verb == "POST") {
    if (req.idempotency_key_count > 1)
      return fail(400, "INVALID_IDEMPOTENCY_KEY", "send at most one Idempotency-Key header");
    if (req.idempotency_key_count == 1) {
      if (!valid_idempotency_key(req.idempotency_key))
        return fail(400, "INVALID_IDEMPOTENCY_KEY",
                    "an Idempotency-Key is 1 to 255 printable ASCII characters");
      opts.idempotency_key = req.idempotency_key;
    }
    json extra = json::object();
    if (!req.body.empty()) {
      if (!req.has_content_type || req.content_type_count > 1 ||
          !is_json_content_type(req.content_type))
        return fail(415, "UNSUPPORTED_MEDIA_TYPE",
                    "the body must be sent as Content-Type: application/json");
      auto c = check_json(req.body, cfg_.limits.max_json_depth);
      if (c.verdict == json_verdict::too_deep)
        return fail(400, "JSON_TOO_DEEP", c.message);
      if (c.verdict == json_verdict::invalid)
        return fail(400, "INVALID_JSON", c.message);
    }
    std::string canonical = "/v1/entities/" + type + "/" + id + "/" + seg[4];
    if (k == kind::call) {
      if (opts.idempotency_key.empty() && requires_key(type, method, *def))
        return fail(400, "IDEMPOTENCY_KEY_REQUIRED",
                    type + "." + method + " requires an Idempotency-Key header");
      args = req.body.empty() ? std::string("{}") : std::move(req.body);
    } else {
      canonical += "/" + seg[5] + "/" + seg[6];
      const auto& name = seg[5];
      bool dl = k == kind::dead_letter_action;
      if (auto st = check_key_part(name, dl ? "dead letter id" : "tool"); !st)
        return fail(400, "INVALID_ARGUMENT", st.message());
      if (!req.body.empty()) {
        auto b = json::parse(req.body, nullptr, false);
        if (b.is_object())
          extra = std::move(b);
      }
      extra[dl ? "id" : "tool"] = name;
      extra["action"] = seg[6];
      method = dl ? "@dead_letter" : "@breaker";
      args = extra.dump();
    }
    if (!opts.idempotency_key.empty()) {
      std::string fp;
      fp.reserve(canonical.size() + args.size() + 8);
      fp.append("POST\n").append(canonical).push_back('\n');
      fp.append(k == kind::call ? args : req.body);
      opts.fingerprint = sha256_hex(fp);
    }
  }

  entity_key key{tenant->name, type, id};
  auto t0 = clock_type::now();
  rt_.call(key, std::move(method), std::move(args), std::move(opts),
           [this, x, t0, done = std::move(done)](call_reply r) mutable {
             metrics_.observe_call(clock_type::now() - t0);
             http_response res;
             res.trace_id = x->trace_id;
             res.replayed = r.replayed;
             if (r.ok) {
               res.status = 200;
               res.body = std::move(r.body);
             } else {
               res.status = r.http_status > 0 ? r.http_status : 500;
               res.content_type = problem_type;
               res.body = std::move(r.body);
               x->code = r.code;
             }
             finish(*x, std::move(res), done);
           });
}

} // namespace factum::http

namespace factum {

std::string api_key_sha256(std::string_view api_key) {
  return sha256_hex(api_key);
}

} // namespace factum
