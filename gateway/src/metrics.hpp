// http/metrics.hpp: the gateway's counters (requests by route and status, and by tenant and
// status class; call latency histogram, connections) and the Prometheus text rendering of them plus
// runtime_stats. Updated from I/O threads and CAF workers alike: every member function is
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/runtime/cluster_router.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/tenant_index.hpp"

namespace factum::http {

/// Counters of the HTTP gateway.
class http_metrics {
 public:
  /// Upper bounds (seconds) of the call latency histogram's buckets; +Inf is implicit.
  static constexpr std::array<double, 14> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,    0.25,  0.5,    1,     2.5,  5,     10};

  /// Counts one answered request; `route` is a label of static storage; `tenant` is the one its API
  /// key authenticated (empty when none did: those are counted by route only, so a tenant label is
  /// always a configured name).
  void count_request(std::string_view route, int status, std::string_view tenant = {});

  /// Records the latency of one runtime call (request handed over to reply received).
  void observe_call(std::chrono::nanoseconds d);

  /// Open connections (gauge).
  std::atomic<int64_t> connections{0};
  /// Connections accepted since start.
  std::atomic<uint64_t> connections_total{0};
  /// Connections refused because max_connections was reached.
  std::atomic<uint64_t> connections_refused{0};
  /// Requests read and not yet answered (gauge).
  std::atomic<int64_t> in_flight{0};
  /// Cluster mode: requests relayed to the entity's owner, by outcome: answered by the owner,
  /// refused NOT_OWNER (retried), failed without an answer.
  std::atomic<uint64_t> forwarded_ok{0}, forwarded_not_owner{0}, forwarded_failed{0};

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
  void ws_closed(ws_end e) { ws_closed_[static_cast<size_t>(e)].fetch_add(1); }

  /// Open WebSocket connections (gauge).
  std::atomic<int64_t> ws_open{0};
  /// Connections accepted by on_connect; refused at a cap (429); refused by on_connect.
  std::atomic<uint64_t> ws_accepted{0}, ws_refused_limit{0}, ws_refused_by_entity{0};
  /// Messages received (turns started), sent, answered by an auto-response without a turn.
  std::atomic<uint64_t> ws_messages_in{0}, ws_messages_out{0}, ws_auto_responses{0};
  /// Message turns that failed (each is also an error fact of the entity).
  std::atomic<uint64_t> ws_turn_failures{0};

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
  void stream_closed(stream_end e) { streams_closed_[static_cast<size_t>(e)].fetch_add(1); }

  /// Open fact streams (gauge).
  std::atomic<int64_t> streams_open{0};
  /// Streams started; refused at a cap (429); fact events handed to the transport.
  std::atomic<uint64_t> streams_accepted{0}, streams_refused_limit{0}, stream_events{0};

  /// The whole exposition: gateway counters plus the runtime's, plus the cluster's when
  /// `cluster` is given (cluster mode).
  std::string render(const runtime_stats& rt, const cluster_stats* cluster = nullptr) const;

  /// The dead letter gauges of the tenants named in `tenants` (configured names only: bounded
  /// labels), from the tenant index's totals: factum_dead_letters{tenant,state} and
  /// factum_dead_letter_oldest_pending_seconds{tenant} at `now_ms`.
  static std::string render_dead_letters(const std::map<std::string, dead_letter_totals>& totals,
                                         const std::vector<std::string>& tenants, int64_t now_ms);

 private:
  void render_requests(std::string& out) const;
  void render_websockets(std::string& out) const;
  void render_streams(std::string& out) const;
  void render_tools(std::string& out, const runtime_stats& rt) const;
  void render_cluster(std::string& out, const runtime_stats& rt, const cluster_stats& c) const;

  mutable std::mutex mu_;
  /// (route label, status) -> requests. Route labels are of static storage (the route table's).
  std::map<std::pair<std::string_view, int>, uint64_t> requests_;
  /// Requests by status class (index: status / 100), per tenant.
  using per_class = std::array<uint64_t, 6>;
  std::map<std::string, per_class, std::less<>> tenant_requests_;
  std::array<std::atomic<uint64_t>, bounds.size() + 1> buckets_{};
  std::atomic<uint64_t> call_count_{0};
  std::atomic<uint64_t> call_ns_sum_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ws_end::count_)> ws_closed_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(stream_end::count_)> streams_closed_{};
};

} // namespace factum::http
