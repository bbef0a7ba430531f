// http/gateway_steps.cpp: the steps the gateway's routes share (gateway_steps.hpp). Each runs
// on the thread that handles its request: an I/O thread, or for finish() and refuse() the
// thread a runtime reply or a relayed answer arrives on.
#include "gateway_steps.hpp"

#include "factum/storage/sha256.hpp"
#include "http_util.hpp"

namespace factum::http::steps {

using nlohmann::json;

namespace {

/// Entity routes answer 503 (and close) once the server drains or the runtime stops.
verdict check_running(gateway& gw) {
  if (gw.draining() || gw.rt().stopping())
    return refusal{problems::unavailable, "the server is stopping; retry on another instance",
                   true};
  return std::nullopt;
}

/// The tenant, only from X-API-Key. Two keys (a proxy adding one, a client sending two tenants'
/// keys) are ambiguous: refused rather than "the first one wins". Every configured digest is
/// compared, in constant time, whatever matched before.
verdict authenticate(const http_server_config& cfg, const http_request& req,
                     const http_tenant*& tenant, const http_api_key*& key) {
  if (req.api_key_count > 1)
    return refusal{problems::unauthorized,
                   req.websocket ? "send exactly one API key: one X-API-Key header or one "
                                   "factum-key.<key> subprotocol, not both"
                                 : "send exactly one X-API-Key header"};
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
    return refusal{problems::unauthorized,
                   req.has_api_key ? "unknown API key" : "missing X-API-Key header"};
  return std::nullopt;
}

std::string_view scope_name(uint8_t scope) {
  return scope == scope_read ? "read" : scope == scope_write ? "write" : "operate";
}

} // namespace

/// A key part as the HTTP API accepts it: validate_key_part, and no '..' anywhere.
status check_key_part(const std::string& part, std::string_view what) {
  if (part.find("..") != std::string::npos)
    return status{errc::invalid_argument, std::string(what) + " must not contain '..'"};
  return validate_key_part(part, what);
}

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

http_response problem(exchange& x, const problem_kind& kind, std::string detail) {
  http_response r;
  r.status = kind.status;
  r.content_type = problem_type;
  r.body = kind.reply(detail).body;
  r.trace_id = x.trace_id;
  x.code = kind.code;
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
  auto r = problem(x, no.kind, std::move(no.detail));
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
    return refusal{problems::bad_request, "the request target must be an absolute path"};
  auto raw = split_path(path);
  bool decode = raw.size() >= 5 && raw[0] == "v1" && raw[1] == "entities";
  for (auto s : raw) {
    if (!decode) {
      x.seg.emplace_back(s);
      continue;
    }
    auto d = percent_decode(s);
    if (!d)
      return refusal{problems::invalid_path, "malformed percent-encoding in the path"};
    x.seg.push_back(std::move(*d));
  }
  return std::nullopt;
}

verdict no_query(const exchange& x) {
  if (!x.query.empty())
    return refusal{problems::invalid_query, "this route takes no query parameters"};
  return std::nullopt;
}

/// The entity key's type and id, validated before anything else touches them.
verdict check_entity_key(const std::string& type, const std::string& id) {
  if (auto st = check_key_part(type, "entity type"); !st)
    return refusal{problems::invalid_entity_key, st.message()};
  if (auto st = check_key_part(id, "entity id"); !st)
    return refusal{problems::invalid_entity_key, st.message()};
  return std::nullopt;
}

/// A write's headers and body: at most one valid Idempotency-Key (into opts); a body is JSON
/// (Content-Type, syntax, depth).
verdict check_write(const http_server_config& cfg, const http_request& req, call_options& opts) {
  if (req.idempotency_key_count > 1)
    return refusal{problems::invalid_idempotency_key, "send at most one Idempotency-Key header"};
  if (req.idempotency_key_count == 1) {
    if (!valid_idempotency_key(req.idempotency_key))
      return refusal{problems::invalid_idempotency_key,
                     "an Idempotency-Key is 1 to 255 printable ASCII characters"};
    opts.idempotency_key = req.idempotency_key;
  }
  if (req.body.empty())
    return std::nullopt;
  if (!req.has_content_type || req.content_type_count > 1 ||
      !is_json_content_type(req.content_type))
    return refusal{problems::unsupported_media_type,
                   "the body must be sent as Content-Type: application/json"};
  auto c = check_json(req.body, cfg.limits.max_json_depth);
  if (c.verdict == json_verdict::too_deep)
    return refusal{problems::json_too_deep, c.message};
  if (c.verdict == json_verdict::invalid)
    return refusal{problems::invalid_json, c.message};
  return std::nullopt;
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
      no = refusal{problems::insufficient_scope, "this API key lacks the '" +
                                                   std::string(scope_name(scope)) +
                                                   "' scope this route needs"};
  }
  return no;
}

/// The Link header of a page whose reply says where the next one starts: the request's own
/// path and query, its after_seq/before_seq/after replaced by the cursor ("after_seq=42").
http_response failed_call_answer(exchange& x, call_reply r) {
  http_response res;
  res.trace_id = x.trace_id;
  res.status = r.http_status > 0 ? r.http_status : 500;
  res.content_type = problem_type;
  res.body = std::move(r.body);
  res.retry_after_s = (r.retry_after_ms + 999) / 1000;
  x.code = r.code;
  return res;
}

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

} // namespace factum::http::steps
