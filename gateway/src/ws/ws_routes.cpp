// http/ws_routes.cpp: GET /v1/entities/{type}/{id}/ws, the WebSocket upgrade's way through the
// gateway (docs/websockets.md): the upgrade is asked for, the type takes connections, the query
// parameters, the hub's caps, then the entity's on_connect as a turn; its decision becomes the
// transport's handshake (ws_upgrade). Runs on an I/O thread; the turn's reply on a CAF worker.
#include <set>

#include "gateway_steps.hpp"
#include "http_util.hpp"

namespace factum::http::steps {

namespace {

/// Query parameters a connection may carry, and their sizes.
constexpr size_t max_params = 16;
constexpr size_t max_param_name = 64;
constexpr size_t max_param_value = 256;

/// The upgrade request's query as a JSON object (name -> value), or the refusal.
verdict connect_params(const exchange& x, json& out) {
  out = json::object();
  if (x.query.empty())
    return std::nullopt;
  auto params = split_query(x.query);
  if (!params)
    return refusal{problems::invalid_query, "the query has a malformed escape or is not UTF-8"};
  if (params->size() > max_params)
    return refusal{problems::invalid_query, "a connection takes at most 16 query parameters"};
  for (auto& p : *params) {
    if (p.name.empty() || p.name.size() > max_param_name || p.value.size() > max_param_value)
      return refusal{problems::invalid_query,
                     "a query parameter's name is 1 to 64 bytes and its value at most 256"};
    if (out.contains(p.name))
      return refusal{problems::invalid_query, "query parameter " + p.name + " is given twice"};
    out[p.name] = p.value;
  }
  return std::nullopt;
}

/// The answer to on_connect's turn: the upgrade (accepted or refused with a close code), or
/// the turn's failure as a problem.
http_response connect_answer(gateway& gw, exchange& x, const entity_key& key,
                             const std::string& conn_id, const websocket_options* opts,
                             const call_reply& r) {
  if (!r.ok) {
    (void)gw.hub().remove(conn_id);
    auto res = failed_call_answer(x, r);
    res.close = true;
    return res;
  }
  auto d = r.json();
  auto up = std::make_shared<ws_upgrade>();
  up->conn_id = conn_id;
  up->key = key;
  up->options = opts;
  up->accept = d.value("accept", false);
  if (up->accept) {
    // Listed from now on: a later turn's broadcast reaches it (the transport holds frames
    // until its handshake is written).
    up->accept = gw.hub().open(conn_id, d.value("tags", std::vector<std::string>{}),
                               d.value("attachment", json::object()));
    if (up->accept)
      gw.metrics().ws_accepted.inc();
  } else {
    (void)gw.hub().remove(conn_id);
    up->close_code = d.value("close_code", 1008);
    up->reason = d.value("reason", std::string());
    gw.metrics().ws_refused.inc(http_metrics::refused_by_entity);
  }
  http_response res;
  res.status = 101;
  res.trace_id = x.trace_id;
  res.upgrade = std::move(up);
  return res;
}

} // namespace

void open_websocket(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  if (!x->req.websocket)
    return refuse(gw, *x,
                  {problems::upgrade_required,
                   "this route opens a WebSocket connection: send Connection: Upgrade and "
                   "Upgrade: websocket"});
  if (!e.def.websocket)
    return refuse(gw, *x,
                  {problems::websocket_not_supported,
                   "entity type " + e.type + " accepts no WebSocket connections"});
  json params;
  if (auto no = connect_params(*x, params))
    return refuse(gw, *x, std::move(*no));
  entity_key key{e.tenant.name, e.type, e.id};
  auto a = gw.hub().admit(key, params, x->req.link);
  if (a.id.empty()) {
    gw.metrics().ws_refused.inc(http_metrics::refused_limit);
    bool entity = a.why == ws_hub::admission::refusal::entity_full;
    auto no = refusal{problems::connection_cap_reached,
                      entity ? "the entity holds limits.ws_max_connections_per_entity "
                               "connections already"
                             : "the tenant holds limits.ws_max_connections_per_tenant "
                               "connections already",
                      true};
    return refuse(gw, *x, std::move(no));
  }
  call_options opts;
  opts.trace_id = x->trace_id;
  opts.timeout = gw.config().call_timeout;
  json args = {{"conn", {{"id", a.id}, {"params", std::move(params)}}}};
  const websocket_options* ws = &*e.def.websocket;
  gw.rt().call(key, "@ws_connect", args.dump(), std::move(opts),
               [&gw, x, key, id = a.id, ws](call_reply r) {
                 auto res = connect_answer(gw, *x, key, id, ws, r);
                 finish(gw, *x, std::move(res));
               });
}

void proxy_websocket(gateway& gw, const exchange_ptr& x, const entity_ref& e,
                     const shard_route& d) {
  if (!e.def.websocket)
    return refuse(gw, *x,
                  {problems::websocket_not_supported,
                   "entity type " + e.type + " accepts no WebSocket connections"});
  auto up = std::make_shared<ws_upgrade>();
  up->accept = true;
  up->key = entity_key{e.tenant.name, e.type, e.id};
  up->options = &*e.def.websocket;
  up->proxy_to = d.address;
  up->proxy_epoch = d.epoch;
  http_response res;
  res.status = 101;
  res.trace_id = x->trace_id;
  res.upgrade = std::move(up);
  finish(gw, *x, std::move(res));
}

} // namespace factum::http::steps
