// metrics.hpp: the gateway's metrics (requests by route and status, and by tenant and status
// class; the call latency histogram; connections, WebSockets, fact streams, relays to owners),
// each declared here once with its name and help in the gateway's registry, and the text of
// /metrics: the gateway's families, the runtime's, the cluster node's and the dead letter gauges.
// Updated from I/O threads and CAF workers alike: every member function is thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/metrics/metrics.hpp"
#include "factum/runtime/cluster_router.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/tenant_index.hpp"

namespace factum::http {

/// The gateway's metrics.
class http_metrics {
 public:
  http_metrics();
  http_metrics(const http_metrics&) = delete;
  http_metrics& operator=(const http_metrics&) = delete;

  /// Every family of the gateway; declared before the members that register in it.
  metrics::registry reg;

  /// Upper bounds (seconds) of the call latency histogram's buckets; +Inf is implicit.
  static constexpr std::array<double, 14> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,    0.25,  0.5,    1,     2.5,  5,     10};

  /// Counts one answered request; `route` is a label of static storage; `tenant` is the one its API
  /// key authenticated (empty when none did: those are counted by route only, so a tenant label is
  /// always a configured name).
  void count_request(std::string_view route, int status, std::string_view tenant = {});

  /// Request handed to the runtime to reply received.
  metrics::histogram call_duration{
    reg, "factum_http_call_duration_seconds",
    "Time from handing a request to the runtime to its reply (after its commit).", bounds};
  void observe_call(std::chrono::nanoseconds d) { call_duration.observe(d); }

  metrics::gauge connections{reg, "factum_http_connections", "Open HTTP connections."};
  metrics::counter connections_total{reg, "factum_http_connections_total",
                                     "HTTP connections accepted."};
  /// max_connections was reached.
  metrics::counter connections_refused{reg, "factum_http_connections_refused_total",
                                       "HTTP connections refused at max_connections."};
  metrics::gauge in_flight{reg, "factum_http_in_flight_requests",
                           "HTTP requests read and not yet answered."};

  // -- WebSocket connections (docs/websockets.md) --

  /// Why a WebSocket connection ended: the label of factum_ws_closed_total.
  enum class ws_end {
    client,      ///< the client closed it (or went away)
    entity,      ///< the entity closed it (context::close), or refused it in on_connect
    rate_limit,  ///< more messages per second than ws_messages_per_second (1008)
    too_big,     ///< a message over ws_max_message_bytes (1009)
    slow_reader, ///< its send queue passed ws_max_send_queue_bytes (1008)
    protocol,    ///< a protocol error: unmasked frame, invalid UTF-8, bad opcode (1002, 1007)
    idle,        ///< no answer to the idle ping (ws_idle_timeout)
    failed_turn, ///< a message's turn failed retryably (1013): the client should resend
    stopping,    ///< the server stops (1001)
    moved,       ///< the entity moved to another node, or its node went away (1012)
    count_
  };
  /// Label value of `e`.
  static std::string_view ws_end_label(ws_end e);
  void ws_closed(ws_end e) { ws_closed_.inc(static_cast<size_t>(e)); }

  metrics::gauge ws_open{reg, "factum_ws_connections", "Open WebSocket connections."};
  metrics::counter ws_accepted{reg, "factum_ws_accepted_total",
                               "WebSocket connections on_connect accepted."};
  /// By reason: at a connection cap (429), or by on_connect.
  enum ws_refusal : size_t { refused_limit, refused_by_entity };
  metrics::counter_by_label ws_refused{
    reg,
    "factum_ws_refused_total",
    "WebSocket connections refused: at a connection cap (429), or by on_connect.",
    "reason",
    {"limit", "entity"}};
  /// Received (each a turn), sent, answered by an auto-response without a turn.
  enum ws_direction : size_t { message_in, message_out, auto_response };
  metrics::counter_by_label ws_messages{
    reg,
    "factum_ws_messages_total",
    "WebSocket messages: received (each a turn), sent, answered by an auto-response.",
    "direction",
    {"in", "out", "auto_response"}};
  /// Each is also an error fact of the entity.
  metrics::counter ws_turn_failures{
    reg, "factum_ws_turn_failures_total",
    "WebSocket message turns that failed (each also an error fact)."};

  // -- fact streams (fact_streams.hpp) --

  /// Why a fact stream ended: the label of factum_fact_streams_closed_total.
  enum class stream_end {
    client,      ///< the client went away
    overflow,    ///< its queue passed stream_max_queue_bytes (an `overflow` event)
    failed,      ///< a read of the entity failed (a `failed` event)
    slow_reader, ///< a write did not complete within request_timeout
    stopping,    ///< the server stops
    count_
  };
  static std::string_view stream_end_label(stream_end e);
  void stream_closed(stream_end e) { streams_closed_.inc(static_cast<size_t>(e)); }

  metrics::gauge streams_open{reg, "factum_fact_streams",
                              "Open fact streams (GET .../facts/stream)."};
  metrics::counter streams_accepted{reg, "factum_fact_streams_accepted_total",
                                    "Fact streams started."};
  /// At a cap (429).
  metrics::counter_by_label streams_refused{reg,
                                            "factum_fact_streams_refused_total",
                                            "Fact streams refused before they started, by reason.",
                                            "reason",
                                            {"limit"}};
  /// Fact events handed to the transport.
  metrics::counter stream_events{reg, "factum_fact_stream_events_total",
                                 "Fact events handed to fact streams' clients."};

  // -- cluster mode --

  /// Requests relayed to the entity's owner, by outcome: answered by the owner, refused
  /// NOT_OWNER (retried), failed without an answer. 0 outside cluster mode.
  enum forward_outcome : size_t { forwarded_ok, forwarded_not_owner, forwarded_failed };
  metrics::counter_by_label forwarded{
    reg,
    "factum_cluster_forwarded_total",
    "Requests this node relayed to the entity's owner, by outcome (ok: the owner answered; "
    "not_owner: it refused, retried; failed: no answer).",
    "outcome",
    {"ok", "not_owner", "failed"}};

  /// The whole exposition: the gateway's families, then the runtime's, then the cluster node's
  /// when `cluster` is given (cluster mode), then `extra`'s.
  std::string render(const runtime& rt, const cluster_router* cluster = nullptr,
                     const metrics::registry* extra = nullptr) const;

  /// Registers in `r` the dead letter gauges of the tenants named in `tenants` (configured names
  /// only: bounded labels), from the tenant index's totals: factum_dead_letters{tenant,state} and
  /// factum_dead_letter_oldest_pending_seconds{tenant} at `now_ms`. `totals` and `tenants` must
  /// outlive `r`'s scrapes.
  static void add_dead_letters(metrics::registry& r,
                               const std::map<std::string, dead_letter_totals>& totals,
                               const std::vector<std::string>& tenants, int64_t now_ms);

 private:
  mutable std::mutex mu_;
  /// (route label, status) -> requests. Route labels are of static storage (the route table's).
  std::map<std::pair<std::string_view, int>, uint64_t> requests_;
  /// Requests by status class (index: status / 100), per tenant.
  using per_class = std::array<uint64_t, 6>;
  std::map<std::string, per_class, std::less<>> tenant_requests_;
  metrics::counter_by_label ws_closed_;
  metrics::counter_by_label streams_closed_;
};

} // namespace factum::http
