// http/gateway_steps.hpp (private): one request's way through the gateway (`exchange`) and the
// steps its routes share, defined in gateway_steps.cpp: problem+json answers with their metrics
// and error log line, the path and its segments, query parsing, the tenant and scope of the API
// key, entity keys, a write's headers and body, and the Link to a next page; and the cluster's
// routes the route table names (cluster_routes.cpp). Threads: as gateway.hpp (an I/O thread;
// answers also from CAF workers and the relay's I/O thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway.hpp"

namespace factum::http::steps {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

inline constexpr std::string_view problem_type = "application/problem+json";

/// The outcome of parsing a query: JSON arguments, or the reason it was refused.
struct query_result {
  json args = json::object();
  std::string error;
};

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
  // Cluster: while the request waits for its shard's placement to change (gateway.cpp,
  // await_placement), since its owner refused it or could not be reached, or the shard settles.
  clock_type::time_point settle_until{}; ///< the wait's deadline; epoch: not waiting yet
  std::chrono::milliseconds backoff{0};  ///< before the next read of the cluster's state
  int refreshes = 0;                     ///< reads of the cluster's state asked for
  std::string refused_address;           ///< the placement that failed: its owner's address
  int64_t refused_epoch = -1;            ///< ... and the epoch sent there (-1: none)
  std::string settle_reason;             ///< why it waits, for the 503 when it waited in vain
};
using exchange_ptr = std::shared_ptr<exchange>;

/// A refusal: the error table's entry (status, code, category) and the detail of a problem+json
/// answer.
struct refusal {
  problem_kind kind;
  std::string detail;
  bool close = false; ///< close the connection after the answer
};
/// The outcome of one step: a refusal that ends the request, or nullopt to carry on.
using verdict = std::optional<refusal>;

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

// -- the steps (gateway_steps.cpp) --

/// A key part as the HTTP API accepts it: validate_key_part, and no '..' anywhere.
status check_key_part(const std::string& part, std::string_view what);
/// Strict query parsing: every name known and given once; integers plain decimal non-negative
/// int64; limit 1..10000.
query_result parse_query(std::string_view query, std::initializer_list<std::string_view> strings,
                         std::initializer_list<std::string_view> integers, bool has_limit,
                         bool has_order);
/// A problem+json answer of the error table's `kind`; notes its code and detail in `x` for the
/// log line.
http_response problem(exchange& x, const problem_kind& kind, std::string detail);
/// Counts the answer, logs it when it is an error (4xx/5xx), and hands it to x.done.
void finish(gateway& gw, exchange& x, http_response r);
/// Answers a refusal.
void refuse(gateway& gw, exchange& x, refusal no);
/// The trace id (W3C traceparent or X-Trace-Id, else a new one), the path and the query.
void begin(exchange& x);
/// The segments of the path (percent-decoded under /v1/entities/{type}/{id}/).
verdict split_segments(exchange& x);
/// A refusal when the route takes no query and one came.
verdict no_query(const exchange& x);
/// The entity key's type and id, validated before anything else touches them.
verdict check_entity_key(const std::string& type, const std::string& id);
/// A write's headers and body: at most one valid Idempotency-Key (into opts); a body is JSON.
verdict check_write(const http_server_config& cfg, const http_request& req, call_options& opts);
/// Running, the tenant of the API key, and the key's scope for the route: the tenant (noted in
/// `x`), or a refusal.
verdict tenant_check(gateway& gw, exchange& x, uint8_t scope, const http_tenant*& tenant);
/// Who an operator action says asked: "api-key:" and the first 12 hex digits of the SHA-256 of
/// the request's API key (set by the gateway, whatever a body says).
inline std::string key_actor(const exchange& x) {
  return "api-key:" + x.key->sha256.substr(0, 12);
}
/// The answer to a call that failed (`r.ok` false): its status (500 when it has none), its
/// problem body, Retry-After from its retry_after_ms; notes its code in `x` for the log line.
http_response failed_call_answer(exchange& x, call_reply r);
/// The Link header of the next page: the request's path and query with the cursor in place.
std::string next_link(const exchange& x, const std::string& cursor);

// -- the cluster's routes (cluster_routes.cpp) --

/// GET /v1/entities: a page of the tenant's entities, across the cluster's nodes when clustered.
void list_entities(gateway& gw, const exchange_ptr& x);
/// GET /v1/cluster: the cluster's nodes, shards, owners and epochs.
void get_cluster(gateway& gw, const exchange_ptr& x);
/// PUT /v1/cluster/moves/{shard}/{tenant}/{type}/{id}: one entity file of a planned shard move.
void put_move_file(gateway& gw, const exchange_ptr& x);

// -- degradation (degradation_routes.cpp) --

/// GET /v1/degradation: the key's tenant's degradation level here, why, what it turns off.
void get_degradation(gateway& gw, const exchange_ptr& x);
/// PUT /v1/degradation: an operator's floor for the key's tenant (scope operate).
void put_degradation(gateway& gw, const exchange_ptr& x);

// -- the fleet views (fleet_routes.cpp) --

/// GET /v1/dead-letters: the tenant's dead letters across its entities, filtered, paged.
void list_fleet_dead_letters(gateway& gw, const exchange_ptr& x);
/// POST /v1/dead-letters/{retry|discard}: a bulk action by filter, bounded, with a dry run.
void act_on_fleet_dead_letters(gateway& gw, const exchange_ptr& x);
/// GET /v1/breakers: per tool, entities per breaker state; the ones not closed, paged.
void list_fleet_breakers(gateway& gw, const exchange_ptr& x);

// -- point-in-time recovery and forks (restore_routes.cpp) --

/// GET /v1/entities/{type}/{id}/bookmark?at=MS|seq=N: the archived commit at a time or seq.
void get_bookmark(gateway& gw, const exchange_ptr& x, const entity_ref& e);
/// POST /v1/entities/{type}/{id}/rollback/{bookmark}: the entity rolled back in place.
void post_rollback(gateway& gw, const exchange_ptr& x, const entity_ref& e);
/// POST /v1/entities/{type}/{id}/fork/{type}/{id}: a new entity from this one's state.
void post_fork(gateway& gw, const exchange_ptr& x, const entity_ref& e);

// -- fact streams (stream_routes.cpp) --

/// GET /v1/entities/{type}/{id}/facts/stream: Server-Sent Events of the entity's facts.
void open_fact_stream(gateway& gw, const exchange_ptr& x, const entity_ref& e);

// -- WebSocket connections (ws_routes.cpp) --

/// GET /v1/entities/{type}/{id}/ws: a WebSocket upgrade, decided by the entity's on_connect.
void open_websocket(gateway& gw, const exchange_ptr& x, const entity_ref& e);
/// The same in cluster mode when another node owns the entity: the transport relays the
/// connection to the owner `d` (which authenticates and decides again).
void proxy_websocket(gateway& gw, const exchange_ptr& x, const entity_ref& e, const shard_route& d);

} // namespace factum::http::steps
