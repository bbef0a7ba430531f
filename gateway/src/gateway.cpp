// http/gateway.cpp: the HTTP API (docs/http-api.md) over runtime::call: a route table (method and
// path pattern -> one handler per route), the entity routes (registry checks, the Idempotency-Key
// and fingerprint, the call, the mapping of its reply), the operational routes, the static pages
// (http_server_config::pages, at paths no route takes), GET / (the home page or where the API
// is), and the relay to an entity's owner in a cluster. The steps every route shares are in
// gateway_steps.cpp, the routes that span a cluster in cluster_routes.cpp, the fleet views in
// fleet_routes.cpp. handle() runs on an I/O thread and never blocks; runtime replies arrive on
// CAF workers, reads of the tenant index (the fleet views, /metrics' dead letter gauges) on a
// storage thread.
#include "gateway.hpp"

#include <algorithm>
#include <ctime>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "factum/storage/fact.hpp"
#include "factum/storage/records.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/tenant_index.hpp"
#include "forwarder.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"
#include "streams/fact_streams.hpp"

namespace factum::http {

using nlohmann::json;

// -- the route table's entry (declared in gateway_steps.hpp: an exchange names its route) --

/// One route: a method, a path pattern ("{name}" matches any one segment, "{name:a|b}" only
/// those values), the metrics label, and its handler: an operational one, or an entity one
/// that runs after entity_gate.
struct steps::route {
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

namespace {

using namespace steps;

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

/// The checks every entity route shares: tenant_check, entity key, type. Refuses and returns
/// nullopt when one fails.
std::optional<entity_ref> entity_gate(gateway& gw, exchange& x, uint8_t scope) {
  const http_tenant* tenant = nullptr;
  verdict no = tenant_check(gw, x, scope, tenant);
  if (!no)
    no = check_entity_key(x.seg[2], x.seg[3]);
  const entity_type* def = nullptr;
  if (!no && !(def = gw.rt().config().types.find(x.seg[2])))
    no =
      refusal{problems::unknown_entity_type, gw.rt().config().types.unknown_type_detail(x.seg[2])};
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

/// A call this node no longer owns (cluster mode: its lease ran out, or the shard moved under
/// it): a relayed request says so to the node that relayed it, which retries at the owner; a
/// client's own request is answered 503 SHARD_UNAVAILABLE, retryable with the same key (nothing
/// of the call was committed).
http_response not_owner_answer(exchange& x, const call_reply& r) {
  auto detail = r.json().value("detail", std::string("this node does not own the entity"));
  if (!x.req.forwarded.empty()) {
    auto res = problem(x, problems::not_owner, detail);
    res.not_owner = true;
    res.retry_after_s = 1;
    return res;
  }
  auto res =
    problem(x, problems::shard_unavailable, detail + "; retry with the same Idempotency-Key");
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
                 } else if (r.code == problems::not_owner.code) {
                   res = not_owner_answer(*x, r);
                 } else {
                   bool replayed = r.replayed;
                   res = failed_call_answer(*x, std::move(r));
                   res.replayed = replayed;
                 }
                 finish(gw, *x, std::move(res));
               });
}

/// POST .../{method}: a call of one of the type's methods with the body as arguments.
void call_method(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  const auto& method = x->seg[4];
  if (method.empty() || method.front() == '@' || !validate_key_part(method, "method"))
    return refuse(gw, *x,
                  {problems::method_not_found,
                   "entity type " + e.type + " has no method " + std::string(clip(method, 128))});
  const auto* def = e.def.find(method);
  if (!def)
    return refuse(
      gw, *x, {problems::method_not_found, "entity type " + e.type + " has no method " + method});
  auto opts = base_options(gw, *x);
  verdict no = no_query(*x);
  if (!no)
    no = check_write(gw.config(), x->req, opts);
  if (!no && opts.idempotency_key.empty() && requires_key(gw.config(), e.type, method, *def))
    no = refusal{problems::idempotency_key_required,
                 e.type + "." + method + " requires an Idempotency-Key header"};
  if (no)
    return refuse(gw, *x, std::move(*no));
  std::string args = x->req.body.empty() ? std::string("{}") : std::move(x->req.body);
  if (!opts.idempotency_key.empty())
    opts.fingerprint = fingerprint(e.canonical(method), args);
  run_call(gw, x, e, method, std::move(args), std::move(opts));
}

/// The facts route's `as_of_seq=N` (seq <= N) and `as_of=T` (timestamp <= T, ms) as the
/// exclusive bounds of the filter (before_seq N + 1, until T + 1); the tighter bound wins when
/// before_seq or until is given too.
void as_of_bounds(json& args) {
  for (auto [from, to] : {std::pair{"as_of_seq", "before_seq"}, std::pair{"as_of", "until"}}) {
    if (!args.contains(from))
      continue;
    auto v = args[from].get<int64_t>();
    args.erase(from);
    if (v == std::numeric_limits<int64_t>::max())
      continue; // no fact is past it
    if (!args.contains(to) || args[to].get<int64_t>() > v + 1)
      args[to] = v + 1;
  }
}

/// GET .../facts: a page of facts; the filters are the query's.
void list_facts(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q =
    parse_query(x->query, {"type", "subtype", "trace_id", "tool_id", "idempotency_key"},
                {"since", "until", "after_seq", "before_seq", "as_of_seq", "as_of"}, true, true);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  as_of_bounds(q.args);
  // Type filters are fact tokens: refused here, so that a bad filter never reaches the entity
  // (where a failed call would be recorded as an error fact).
  for (const char* name : {"type", "subtype"})
    if (q.args.contains(name))
      if (auto st = validate_fact_token(q.args[name].get<std::string>(), name); !st)
        return refuse(gw, *x, {problems::invalid_query, st.message()});
  run_call(gw, x, e, "@facts", q.args.dump(), base_options(gw, *x));
}

/// GET .../dead-letters: the entity's dead letters, optionally of one status.
void list_dead_letters(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q = parse_query(x->query, {"status"}, {}, true, false);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  if (q.args.contains("status"))
    if (!parse_dl_status(q.args["status"].get<std::string>()))
      return refuse(gw, *x,
                    {problems::invalid_query,
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

/// GET .../keys: a page of the entity's idempotency keys in key order, from after `after`.
void list_keys(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q = parse_query(x->query, {"after"}, {}, true, false);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  auto limit = q.args.value("limit", int64_t{100});
  if (limit > 1000)
    return refuse(gw, *x,
                  {problems::invalid_query, "parameter 'limit' must be between 1 and 1000"});
  q.args["limit"] = limit;
  run_call(gw, x, e, "@keys", q.args.dump(), base_options(gw, *x));
}

/// GET .../alarms: the entity's alarms, each schedule's alarm with its schedule.
void list_alarms(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  run_call(gw, x, e, "@alarms", "{}", base_options(gw, *x));
}

/// An operator's action on an entity: the body's object members with `fields` over them and who
/// asked (the key's id, its digest's first 12 hex digits, whatever the body says), sent to the
/// internal `method`; `what` names the action in its idempotency fingerprint. `last` is refused
/// after the checks every such action has.
void operator_call(gateway& gw, const exchange_ptr& x, const entity_ref& e, const char* method,
                   json fields, const std::string& what, verdict last = std::nullopt) {
  auto opts = base_options(gw, *x);
  verdict no = no_query(*x);
  if (!no)
    no = check_write(gw.config(), x->req, opts);
  if (!no)
    no = std::move(last);
  if (no)
    return refuse(gw, *x, std::move(*no));
  json args = json::object();
  if (!x->req.body.empty()) {
    auto b = json::parse(x->req.body, nullptr, false);
    if (b.is_object())
      args = std::move(b);
  }
  args.update(fields);
  args["actor"] = key_actor(*x);
  if (!opts.idempotency_key.empty())
    opts.fingerprint = fingerprint(e.canonical(what), x->req.body);
  run_call(gw, x, e, method, args.dump(), std::move(opts));
}

/// POST .../{dead-letters|breakers}/{name}/{action}: the action on a dead letter or a breaker.
void operator_action(gateway& gw, const exchange_ptr& x, const entity_ref& e, bool dead_letter) {
  const auto& name = x->seg[5];
  const auto& action = x->seg[6];
  verdict bad_name;
  if (auto st = check_key_part(name, dead_letter ? "dead letter id" : "tool"); !st)
    bad_name = refusal{problems::invalid_argument, st.message()};
  operator_call(gw, x, e, dead_letter ? "@dead_letter" : "@breaker",
                {{dead_letter ? "id" : "tool", name}, {"action", action}},
                x->seg[4] + "/" + name + "/" + action, std::move(bad_name));
}

/// POST .../alarms/resume: an operator arms what the entity holds paused (a fork's alarms and
/// schedules); the body may give a reason.
void resume_paused(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  operator_call(gw, x, e, "@resume_paused", json::object(), "alarms/resume");
}

void dead_letter_action(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  operator_action(gw, x, e, true);
}

void breaker_action(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  operator_action(gw, x, e, false);
}

// -- operational routes --

/// GET /healthz: 200 while serving (degraded or not), 503 once draining or stopping.
void get_healthz(gateway& gw, const exchange_ptr& x) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  if (gw.draining() || gw.rt().stopping())
    return refuse(gw, *x, {problems::unavailable, "the server is stopping"});
  http_response r;
  r.trace_id = x->trace_id;
  json body = {{"status", "ok"}};
  if (auto* c = gw.config().cluster.get()) {
    std::string why;
    if (!c->healthy(why))
      return refuse(gw, *x, {problems::cluster_unavailable, why});
    body["lease"] = "live";
  }
  // Degraded is still serving (200): the level says how much; tenants above 0 by name.
  if (gw.rt().config().degradation.enabled) {
    int top = 0;
    json tenants = json::object();
    for (auto& d : gw.rt().degradation())
      if (d.level > 0) {
        top = std::max(top, d.level);
        tenants[d.tenant] = d.level;
      }
    body["degradation"] = {
      {"level", top}, {"level_name", degradation_level_name(top)}, {"tenants", tenants}};
  }
  r.body = body.dump();
  finish(gw, *x, std::move(r));
}

/// GET /metrics: the Prometheus text of the gateway's and the runtime's counters.
void get_metrics(gateway& gw, const exchange_ptr& x) {
  if (auto no = no_query(*x))
    return refuse(gw, *x, std::move(*no));
  // The dead letter gauges read the tenant index (a storage thread: it may wait for a write).
  // An index that cannot be read (closed, failing) leaves them out: not zeros.
  using totals_t = std::optional<std::map<std::string, dead_letter_totals>>;
  auto totals = std::make_shared<totals_t>();
  gw.rt().read_tenant_index(
    [totals](tenant_index* ix) {
      if (ix)
        if (auto t = ix->dead_letter_totals_by_tenant(); t)
          *totals = std::move(t.value());
    },
    [&gw, x, totals] {
      std::vector<std::string> tenants;
      for (auto& t : gw.config().tenants)
        tenants.push_back(t.name);
      std::sort(tenants.begin(), tenants.end());
      tenants.erase(std::unique(tenants.begin(), tenants.end()), tenants.end());
      http_response r;
      r.trace_id = x->trace_id;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      // The dead letter gauges as one more registry, written with the others.
      metrics::registry dead_letters;
      if (*totals)
        http_metrics::add_dead_letters(dead_letters, **totals, tenants, now_ms());
      r.body = gw.metrics_text(&dead_letters);
      finish(gw, *x, std::move(r));
    });
}

// -- static pages (http_server_config::pages) --

/// The page configured at the request's path (its query aside), or null.
const http_page* find_page(const gateway& gw, const exchange& x) {
  const auto& pages = gw.config().pages;
  if (pages.empty())
    return nullptr;
  std::string_view target = x.req.target;
  auto it = pages.find(std::string(target.substr(0, target.find('?'))));
  return it == pages.end() ? nullptr : &it->second;
}

/// Answers a request for a page or the root that is not a plain GET or HEAD (405, or 404 for a
/// WebSocket upgrade); false when it is one, and nothing was answered.
bool refused_unless_get(gateway& gw, const exchange_ptr& x) {
  if (x->req.verb != "GET" && x->req.verb != "HEAD") {
    auto r = problem(*x, problems::method_not_allowed,
                     x->req.verb + " is not allowed here; use GET, HEAD");
    r.allow = "GET, HEAD";
    finish(gw, *x, std::move(r));
    return true;
  }
  if (x->req.websocket) {
    refuse(gw, *x,
           {problems::route_not_found, "no WebSocket route at " + std::string(clip(x->path, 200))});
    return true;
  }
  return false;
}

/// GET or HEAD of a static page (the transport leaves a HEAD's body out): no API key (it holds
/// no data), any query (its script reads it), and headers that keep the browser to the page's
/// own origin.
void answer_page(gateway& gw, const exchange_ptr& x, const http_page& page) {
  x->route = "page";
  if (refused_unless_get(gw, x))
    return;
  http_response r;
  r.trace_id = x->trace_id;
  r.content_type = page.content_type;
  r.body = page.body;
  r.headers = {{"Content-Security-Policy", page.content_security_policy},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"}};
  finish(gw, *x, std::move(r));
}

// -- the root --

/// GET or HEAD /: a redirect to the home page (http_server_config::home), or a JSON document
/// that says where the API is. No API key: it holds no data.
void answer_root(gateway& gw, const exchange_ptr& x) {
  x->route = "home";
  if (refused_unless_get(gw, x))
    return;
  http_response r;
  r.trace_id = x->trace_id;
  r.headers = {{"Cache-Control", "no-cache"}};
  const auto& home = gw.config().home;
  if (!home.empty()) {
    r.status = 302;
    r.body = json{{"location", home}}.dump();
    r.headers.emplace_back("Location", home);
  } else {
    r.body = json{{"service", "factum"},
                  {"api", "/v1/entities/{type}/{id}/{method}"},
                  {"health", "/healthz"},
                  {"metrics", "/metrics"},
                  {"docs", "docs/http-api.md"}}
               .dump();
  }
  finish(gw, *x, std::move(r));
}

// -- the route table --

/// First match wins; a path that fits routes of other methods only is 405 with their Allow.
constexpr route routes[] = {
  {"GET", "/healthz", "healthz", get_healthz},
  {"GET", "/metrics", "metrics", get_metrics},
  {"GET", "/v1/cluster", "cluster", get_cluster},
  {"PUT", "/v1/cluster/moves/{shard}/{tenant}/{type}/{id}", "cluster_move", put_move_file},
  {"GET", "/v1/entities", "entities", list_entities},
  {"GET", "/v1/degradation", "degradation", get_degradation},
  {"PUT", "/v1/degradation", "degradation", put_degradation},
  {"GET", "/v1/dead-letters", "fleet_dead_letters", list_fleet_dead_letters},
  {"POST", "/v1/dead-letters/{action:retry|discard}", "fleet_dead_letter_action",
   act_on_fleet_dead_letters, nullptr, 0, "a bulk dead letter action is retry or discard"},
  {"GET", "/v1/breakers", "fleet_breakers", list_fleet_breakers},
  {"GET", "/v1/entities/{type}/{id}/facts", "facts", nullptr, list_facts, scope_read},
  {"GET", "/v1/entities/{type}/{id}/facts/stream", "facts_stream", nullptr, open_fact_stream,
   scope_read},
  {"GET", "/v1/entities/{type}/{id}/dead-letters", "dead_letters", nullptr, list_dead_letters,
   scope_read},
  {"GET", "/v1/entities/{type}/{id}/breakers", "breakers", nullptr, list_breakers, scope_read},
  {"GET", "/v1/entities/{type}/{id}/alarms", "alarms", nullptr, list_alarms, scope_read},
  {"GET", "/v1/entities/{type}/{id}/bookmark", "bookmark", nullptr, get_bookmark, scope_read},
  {"GET", "/v1/entities/{type}/{id}/keys", "keys", nullptr, list_keys, scope_read},
  {"GET", "/v1/entities/{type}/{id}/ws", "websocket", nullptr, open_websocket, scope_write},
  {"POST", "/v1/entities/{type}/{id}/{method}", "call", nullptr, call_method, scope_write},
  {"POST", "/v1/entities/{type}/{id}/rollback/{bookmark}", "rollback", nullptr, post_rollback,
   scope_operate},
  {"POST", "/v1/entities/{type}/{id}/fork/{to_type}/{to_id}", "fork", nullptr, post_fork,
   scope_operate},
  {"POST", "/v1/entities/{type}/{id}/alarms/resume", "resume_paused", nullptr, resume_paused,
   scope_operate},
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

/// How long a client's request for an entity whose shard changes hands waits for the new
/// placement: its owner refused it (NOT_OWNER) or could not be reached, or the shard is settling
/// (shard_route::settling: moving between nodes). The node reads the cluster's state again at
/// once, then after each backoff while the placement it reads is the one that failed, and sends
/// the request on only to a changed placement; past the deadline, or after `max_relays` sends,
/// the client gets 503 SHARD_UNAVAILABLE.
constexpr std::chrono::milliseconds settle_wait{2'000};
constexpr std::chrono::milliseconds first_backoff{25};
constexpr std::chrono::milliseconds max_backoff{400};
constexpr int max_relays = 5;

/// An entity route: the shared checks, then (in a cluster) where the entity lives: here, at its
/// owner (relayed), or nowhere now (503).
void dispatch_entity(gateway& gw, const exchange_ptr& x);

/// The request's shard is changing hands (x->settle_reason says how): reads the cluster's state
/// again (at once the first time, then after a backoff that doubles from 25 ms to 400 ms) and
/// dispatches the request anew; dispatch_entity comes back here while the placement is the one
/// that failed. Answers 503 SHARD_UNAVAILABLE once `settle_wait` passed or the request was sent
/// `max_relays` times.
void await_placement(gateway& gw, const exchange_ptr& x, uint32_t shard) {
  auto now = clock_type::now();
  if (x->settle_until == clock_type::time_point{})
    x->settle_until = now + settle_wait;
  if (now >= x->settle_until || x->relays >= max_relays) {
    auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - (x->settle_until - settle_wait));
    auto r =
      problem(*x, problems::shard_unavailable,
              x->settle_reason + "; the shard's placement did not settle in " +
                std::to_string(waited.count()) + " ms (" + std::to_string(x->relays) + " relays, " +
                std::to_string(x->refreshes) + " reads of the cluster's state); retry later");
    r.retry_after_s = 1;
    return finish(gw, *x, std::move(r));
  }
  // The last wait ends at the deadline (rounded up: the read after it answers the client).
  auto delay =
    std::min(x->backoff, std::chrono::ceil<std::chrono::milliseconds>(x->settle_until - now));
  x->backoff = x->backoff.count() == 0 ? first_backoff : std::min(x->backoff * 2, max_backoff);
  auto again = [&gw, x, shard](bool stopped) {
    if (stopped) {
      auto r = problem(*x, problems::shard_unavailable,
                       x->settle_reason + "; this node is stopping: retry on another");
      r.retry_after_s = 1;
      return finish(gw, *x, std::move(r));
    }
    ++x->refreshes;
    gw.config().cluster->refresh(shard, [&gw, x] { dispatch_entity(gw, x); });
  };
  if (delay.count() == 0) // the first read: at once
    return again(false);
  gw.relay()->after(delay, std::move(again));
}

/// Relays the request to its owner. An owner that says "not mine", or that cannot be reached
/// before the request was sent, makes this node wait for the shard's new placement
/// (await_placement). When the owner may have got the request and did not answer, a request
/// with an Idempotency-Key (or a GET) gets 503 SHARD_UNAVAILABLE, retryable with the same key;
/// one without gets 502 OUTCOME_UNKNOWN: it may have run, and nothing would tell a retry that it
/// had.
void relay(gateway& gw, const exchange_ptr& x, const shard_route& d) {
  ++x->relays;
  gw.relay()->send(
    d.address, x->req, x->trace_id, d.epoch,
    [&gw, x, shard = d.shard, address = d.address, epoch = d.epoch](forwarded_reply fr) {
      bool unsent = fr.failed != client::failure::none && !fr.maybe_sent;
      if (unsent &&
          (fr.failed == client::failure::cancelled || fr.failed == client::failure::pool_full)) {
        // This node's side: it is stopping, or its link to the owner is saturated. The placement
        // is not in question, so nothing is waited for.
        gw.metrics().forwarded.inc(http_metrics::forwarded_failed);
        auto r = problem(*x, problems::shard_unavailable,
                         "the request was not relayed to the entity's owner (" + fr.error +
                           "); retry with the same Idempotency-Key");
        r.retry_after_s = 1;
        return finish(gw, *x, std::move(r));
      }
      if (fr.not_owner || unsent) {
        gw.metrics().forwarded.inc(fr.not_owner ? http_metrics::forwarded_not_owner
                                                : http_metrics::forwarded_failed);
        x->refused_address = address;
        x->refused_epoch = epoch;
        x->settle_reason = fr.not_owner ? "the node " + address + " does not own the entity's shard"
                                        : "the entity's owner " + address +
                                            " could not be reached (" + fr.error + ")";
        return await_placement(gw, x, shard);
      }
      if (fr.failed != client::failure::none) {
        gw.metrics().forwarded.inc(http_metrics::forwarded_failed);
        if (x->req.idempotency_key.empty() && x->req.verb != "GET")
          return finish(
            gw, *x,
            problem(*x, problems::outcome_unknown,
                    "the entity's owner got this request and did not answer (" + fr.error +
                      "): it may have run. Without an Idempotency-Key a retry could run it "
                      "twice: read the entity's facts to learn whether it ran, and send calls "
                      "that must not run twice with an Idempotency-Key"));
        auto r = problem(*x, problems::shard_unavailable,
                         "the entity's owner did not answer (" + fr.error +
                           "); retry with the same Idempotency-Key");
        r.retry_after_s = 1;
        return finish(gw, *x, std::move(r));
      }
      gw.metrics().forwarded.inc(http_metrics::forwarded_ok);
      fr.res.trace_id = x->trace_id;
      finish(gw, *x, std::move(fr.res));
    });
}

void dispatch_entity(gateway& gw, const exchange_ptr& x) {
  auto e = entity_gate(gw, *x, x->chosen->scope);
  if (!e)
    return;
  if (auto* c = gw.config().cluster.get()) {
    bool relayed = !x->req.forwarded.empty();
    auto d = c->route(entity_key{e->tenant.name, e->type, e->id}, relayed);
    if (d.to == shard_route::where::forward && x->chosen->entity == &open_websocket &&
        x->req.websocket)
      return proxy_websocket(gw, x, *e, d);
    if (d.to == shard_route::where::forward && x->chosen->entity == &open_fact_stream)
      return refuse(
        gw, *x,
        {problems::stream_at_owner,
         "a fact stream is served by the entity's owner only: open it at " + d.address});
    if (d.to == shard_route::where::forward && d.address == x->refused_address &&
        d.epoch == x->refused_epoch)
      return await_placement(gw, x, d.shard); // the placement that failed: not sent again yet
    if (d.to == shard_route::where::unavailable && d.settling && !relayed && gw.relay()) {
      x->refused_address.clear(); // whatever placement comes next is a new one
      x->refused_epoch = -1;
      x->settle_reason = d.detail;
      return await_placement(gw, x, d.shard);
    }
    if (d.to == shard_route::where::forward && gw.relay())
      return relay(gw, x, d);
    if (d.to != shard_route::where::local) {
      const auto* kind = find_problem(d.code); // a router's codes are the table's
      auto r = problem(*x, kind ? *kind : problems::shard_unavailable, d.detail);
      r.retry_after_s = (d.retry_after_ms + 999) / 1000;
      r.not_owner = kind == &problems::not_owner;
      return finish(gw, *x, std::move(r));
    }
  }
  x->chosen->entity(gw, x, *e);
}

} // namespace

gateway::~gateway() {
  wait_restores();
  stop_relay();
  rt_.attach_connections(nullptr);
}

std::string gateway::metrics_text(const factum::metrics::registry* extra) const {
  return metrics_.render(rt_, cfg_.cluster.get(), extra);
}

void gateway::stop_relay() {
  if (relay_)
    relay_->stop();
}

bool gateway::begin_restore(int max) {
  std::lock_guard<std::mutex> g(restores_mu_);
  if (restores_ >= max)
    return false;
  ++restores_;
  return true;
}

void gateway::end_restore() {
  std::lock_guard<std::mutex> g(restores_mu_);
  if (--restores_ == 0)
    restores_cv_.notify_all();
}

void gateway::wait_restores() {
  std::unique_lock<std::mutex> g(restores_mu_);
  restores_cv_.wait(g, [&] { return restores_ == 0; });
}

gateway::gateway(runtime& rt, http_server_config cfg) : rt_(rt), cfg_(std::move(cfg)) {
  if (cfg_.cluster)
    relay_ = std::make_unique<forwarder>(cfg_.call_timeout + std::chrono::seconds(5));
  hub_ = std::make_shared<ws_hub>(cfg_.limits.ws_max_connections_per_entity,
                                  cfg_.limits.ws_max_connections_per_tenant);
  streams_ = std::make_shared<fact_streams>(cfg_.limits.stream_max_connections_per_entity,
                                            cfg_.limits.stream_max_connections_per_tenant,
                                            &metrics_.streams_open);
  hub_->follow_facts(streams_);
  rt_.attach_connections(hub_);
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

http_response gateway::reject(const problem_kind& kind, std::string detail, std::string_view verb,
                              std::string_view target, std::string_view traceparent,
                              std::string_view x_trace_id) {
  exchange x;
  x.route = "transport";
  x.verb = std::string(clip(verb, 16));
  x.path = std::string(clip(target.substr(0, target.find('?')), 256));
  x.trace_id = incoming_trace_id(traceparent, x_trace_id);
  if (x.trace_id.empty())
    x.trace_id = new_trace_id();
  http_response out;
  x.done = [&out](http_response v) { out = std::move(v); };
  refuse(*this, x, {kind, std::move(detail), true});
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
    auto r = problem(*x, problems::method_not_allowed,
                     x->req.verb + " is not allowed here; use " + sel.allow);
    r.allow = std::move(sel.allow);
    return finish(*this, *x, std::move(r));
  }
  if (!sel.chosen && sel.but_value) {
    x->route = sel.but_value->label;
    return refuse(*this, *x,
                  {problems::route_not_found, std::string(sel.but_value->unknown_value)});
  }
  if (!sel.chosen) {
    if (x->seg.size() == 1 && x->seg[0].empty()) // "/", whatever its query
      return answer_root(*this, x);
    if (const auto* page = find_page(*this, *x)) // only where no route fits: none is shadowed
      return answer_page(*this, x, *page);
    return refuse(*this, *x,
                  {problems::route_not_found, "no route for " + std::string(clip(x->path, 200))});
  }
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
