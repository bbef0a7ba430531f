// http/gateway.hpp: the HTTP API's semantics without the transport: routing (a route table in
// gateway.cpp), authentication, validation, the runtime call, the mapping of call_reply to a
// response, metrics and the error log. handle() runs on an I/O thread and never blocks; its
// `done` runs on that thread or on a CAF worker (the transport posts the response back to the
// connection's strand).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/entities/problems.hpp"
#include "factum/gateway/http_server.hpp"
#include "metrics.hpp"
#include "ws/ws_hub.hpp"

namespace factum::http {

class forwarder;
class fact_stream;
class fact_streams;
struct ws_upgrade;

/// A request as the transport read it: the parts the API looks at.
struct http_request {
  std::string verb;   ///< "GET", "POST", ...
  std::string target; ///< origin-form: path and query, still encoded
  std::string content_type;
  bool has_content_type = false;
  int content_type_count = 0; ///< how many Content-Type headers came
  std::string api_key;
  bool has_api_key = false;
  int api_key_count = 0; ///< how many X-API-Key headers came
  std::string idempotency_key;
  int idempotency_key_count = 0; ///< how many Idempotency-Key headers came
  std::string traceparent;
  std::string x_trace_id;
  std::string last_event_id;   ///< Last-Event-ID (a fact stream's resumption)
  int last_event_id_count = 0; ///< how many Last-Event-ID headers came
  /// X-Factum-Forwarded: another node of the cluster relayed the request (the epoch it saw);
  /// empty when a client sent it.
  std::string forwarded;
  /// A planned shard move's file (PUT /v1/cluster/moves/...): X-Factum-Move-Epoch,
  /// X-Factum-Content-Sha256 (hex SHA-256 of the body), X-Factum-Move-Time and
  /// X-Factum-Move-Signature (cluster_router.hpp, move_credentials).
  std::string move_epoch, content_sha256, move_time, move_signature;
  std::string body;
  /// The request asks for a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket); `link`
  /// is the connection's sending side for the hub.
  bool websocket = false;
  std::weak_ptr<ws_link> link;
};

/// Copies the parts the API looks at out of a parsed request. `Message` is a Beast request
/// (templated so that this header stays free of Beast); the transport and the fuzz targets
/// (tests/fuzz) share it.
template <class Message> http_request to_http_request(Message& msg) {
  http_request r;
  r.verb = std::string(msg.method_string());
  r.target = std::string(msg.target());
  if (auto it = msg.find("Content-Type"); it != msg.end()) {
    r.has_content_type = true;
    r.content_type = std::string(it->value());
  }
  r.content_type_count = static_cast<int>(msg.count("Content-Type"));
  if (auto it = msg.find("X-API-Key"); it != msg.end()) {
    r.has_api_key = true;
    r.api_key = std::string(it->value());
  }
  r.api_key_count = static_cast<int>(msg.count("X-API-Key"));
  r.idempotency_key_count = static_cast<int>(msg.count("Idempotency-Key"));
  if (auto it = msg.find("Idempotency-Key"); it != msg.end())
    r.idempotency_key = std::string(it->value());
  if (auto it = msg.find("traceparent"); it != msg.end())
    r.traceparent = std::string(it->value());
  if (auto it = msg.find("X-Trace-Id"); it != msg.end())
    r.x_trace_id = std::string(it->value());
  r.last_event_id_count = static_cast<int>(msg.count("Last-Event-ID"));
  if (auto it = msg.find("Last-Event-ID"); it != msg.end())
    r.last_event_id = std::string(it->value());
  if (auto it = msg.find("X-Factum-Forwarded"); it != msg.end())
    r.forwarded = std::string(it->value());
  if (auto it = msg.find("X-Factum-Move-Time"); it != msg.end())
    r.move_time = std::string(it->value());
  if (auto it = msg.find("X-Factum-Move-Signature"); it != msg.end())
    r.move_signature = std::string(it->value());
  if (auto it = msg.find("X-Factum-Move-Epoch"); it != msg.end())
    r.move_epoch = std::string(it->value());
  if (auto it = msg.find("X-Factum-Content-Sha256"); it != msg.end())
    r.content_sha256 = std::string(it->value());
  r.body = std::move(msg.body());
  return r;
}

/// A response for the transport to write.
struct http_response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string trace_id;      ///< echoed as X-Trace-Id
  bool replayed = false;     ///< adds Idempotent-Replayed: true
  std::string allow;         ///< 405: the Allow header
  bool close = false;        ///< close the connection after writing
  int64_t retry_after_s = 0; ///< > 0: the Retry-After header (seconds)
  std::string link;          ///< the Link header (a page's next page), when not empty
  bool not_owner = false; ///< adds X-Factum-Not-Owner: 1 (cluster: a relayed request's owner moved)
  /// More headers, written as they are (a page's Content-Security-Policy, ...).
  std::vector<std::pair<std::string, std::string>> headers;
  /// A WebSocket upgrade on_connect decided: the transport completes the handshake instead of
  /// writing this response (and closes at once with the refusal's code when it refused).
  std::shared_ptr<const ws_upgrade> upgrade;
  /// A fact stream whose first page was read: the transport writes this response's headers,
  /// then the stream's events until it ends (fact_streams.hpp).
  std::shared_ptr<fact_stream> stream;
};

/// What the transport needs to open (or refuse) a WebSocket connection.
struct ws_upgrade {
  bool accept = false;
  std::string conn_id;
  entity_key key;
  int close_code = 1008;
  std::string reason;
  const websocket_options* options = nullptr; ///< the entity type's (the registry outlives us)
  /// Cluster mode: the entity's owner is another node ("host:port"); the transport opens the
  /// connection there (X-Factum-Forwarded: proxy_epoch) and relays frames both ways.
  std::string proxy_to;
  int64_t proxy_epoch = 0;
};

/// The HTTP API over one runtime.
class gateway {
 public:
  gateway(runtime& rt, http_server_config cfg);
  ~gateway();

  /// Answers one request; `done` runs exactly once.
  void handle(http_request req, std::function<void(http_response)> done);

  /// A transport-level refusal (408, 413, 431, 400 unparsable, the connection limits) of the
  /// error table's `kind`, counted and logged like every other error. `verb` and `target` may be
  /// empty when unknown.
  http_response reject(const problem_kind& kind, std::string detail, std::string_view verb,
                       std::string_view target, std::string_view traceparent = {},
                       std::string_view x_trace_id = {});

  /// Logs one structured line (adds "ts").
  void log(nlohmann::json line) const;

  /// From now on, requests answer 503 UNAVAILABLE and /healthz answers 503.
  void begin_shutdown() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  const http_server_config& config() const { return cfg_; }
  http_metrics& metrics() { return metrics_; }
  const http_metrics& metrics() const { return metrics_; }
  runtime& rt() { return rt_; }
  /// Cluster mode: the link to the other nodes (null without a cluster).
  forwarder* relay() { return relay_.get(); }
  /// GET /metrics: the gateway's, the runtime's and (in a cluster) the cluster node's families,
  /// then `extra`'s (the dead letter gauges).
  std::string metrics_text(const factum::metrics::registry* extra = nullptr) const;
  /// Stops relaying (answers what is in flight); before the I/O threads stop.
  void stop_relay();
  /// Rollbacks and forks run on threads of their own (restore_routes.cpp), which use this
  /// gateway and its runtime until they answer: begin_restore() counts one in (false when
  /// `max` run already), end_restore() out, and wait_restores() returns once none runs (the
  /// server's stop, before the I/O threads stop and the gateway goes).
  bool begin_restore(int max);
  void end_restore();
  void wait_restores();
  /// The WebSocket connections this gateway holds (attached to the runtime while it lives).
  ws_hub& hub() { return *hub_; }
  /// The open fact streams.
  fact_streams& streams() { return *streams_; }

 private:
  runtime& rt_;
  http_server_config cfg_;
  std::unique_ptr<forwarder> relay_;
  std::shared_ptr<ws_hub> hub_;
  std::shared_ptr<fact_streams> streams_;
  http_metrics metrics_;
  std::atomic<bool> draining_{false};
  std::mutex restores_mu_;
  std::condition_variable restores_cv_;
  int restores_ = 0; ///< guarded by restores_mu_
};

} // namespace factum::http
