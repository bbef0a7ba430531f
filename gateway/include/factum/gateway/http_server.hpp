// factum/gateway/http_server.hpp: the HTTP/1.1 gateway of `factum serve` (docs/http-api.md).
// It owns its Asio I/O threads; requests go to the runtime with runtime::call and come back on
// the connection's strand, so no I/O thread ever waits on an actor. Every public member
// function is thread-safe. Boost.Beast stays behind this header (gateway/src/).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/runtime/cluster_router.hpp"
#include "factum/runtime/runtime.hpp"

namespace factum {

/// What an API key may do, as bits: read (GET facts, dead letters, breakers), write (calls of
/// the entity types' methods), operate (move dead letters, force-open or reset breakers).
enum api_scope : uint8_t {
  scope_read = 1,
  scope_write = 2,
  scope_operate = 4,
  scope_all = scope_read | scope_write | scope_operate,
};

/// One API key of a tenant.
struct http_api_key {
  /// SHA-256 digest (64 lowercase hex characters) of the key.
  std::string sha256;
  /// Its scopes (api_scope bits). Default read and write: operating dead letters and breakers
  /// must be granted.
  uint8_t scopes = scope_read | scope_write;
};

/// One tenant and the API keys that authenticate it.
struct http_tenant {
  /// The tenant part of every entity key this tenant reaches (a valid key part).
  std::string name;
  std::vector<http_api_key> keys;
};

/// Request and connection limits. Every field documents its default.
struct http_limits {
  /// Largest request body; a larger one answers 413. Default 1 MiB.
  size_t max_body_bytes = 1024 * 1024;
  /// Deepest JSON nesting accepted in a body; deeper answers 400 JSON_TOO_DEEP. Default 64.
  int max_json_depth = 64;
  /// Largest request line plus headers; larger answers 431 and closes. Default 16 KiB.
  size_t max_header_bytes = 16 * 1024;
  /// Time to receive one whole request (headers and body); a request still incomplete then
  /// answers 408 and the connection closes. An idle keep-alive connection is closed after it.
  /// Default 30 s.
  std::chrono::milliseconds request_timeout{30'000};
  /// Open connections at once; one more is answered 503 TOO_MANY_CONNECTIONS and closed. Lowered
  /// at start to runtime::connection_budget() (what RLIMIT_NOFILE leaves beside 4 descriptors
  /// per entity runtime_config::max_active_entities lets be open: a quarter of the limit with
  /// the default cap), with a log line saying so. Default 10,000.
  size_t max_connections = 10'000;
  /// Open connections from one client address at once; one more is answered 429
  /// TOO_MANY_CONNECTIONS and closed, so that one client cannot take every connection. Behind a
  /// proxy every client has the proxy's address. Default 1,000.
  size_t max_connections_per_client = 1'000;
  /// Cluster mode: largest entity file a planned shard move may send this node (the body of
  /// PUT /v1/cluster/moves/..., taken only with the cluster's secret). A larger file fails its
  /// move, which leaves the shard on its old home. Default 256 MiB.
  size_t max_move_file_bytes = 256 * 1024 * 1024;

  // -- WebSocket connections (docs/websockets.md) --

  /// Largest message (a frame, or a fragmented message whole) a client may send; a larger one
  /// closes the connection with 1009. Default 64 KiB.
  size_t ws_max_message_bytes = 64 * 1024;
  /// Messages per second one connection may send (a burst of as many is allowed); more closes it
  /// with 1008. Default 100.
  uint32_t ws_messages_per_second = 100;
  /// Connections one entity may hold; one more is answered 429 TOO_MANY_CONNECTIONS before the
  /// handshake. Default 10,000.
  size_t ws_max_connections_per_entity = 10'000;
  /// Connections one tenant may hold across its entities; one more: 429. Default 100,000.
  size_t ws_max_connections_per_tenant = 100'000;
  /// Bytes queued for one connection that its client has not read yet; more closes it (1008; a
  /// client that reads nothing does not get the close frame, its TCP connection is closed).
  /// Default 1 MiB.
  size_t ws_max_send_queue_bytes = 1024 * 1024;
  /// Messages read ahead from one connection while its previous message's turn runs (its
  /// messages run one at a time, in order); then reading pauses. Default 64.
  size_t ws_max_pending_messages = 64;
  /// A connection from which nothing arrived for half of this is sent a ping; one from which
  /// nothing arrives within the whole of it is closed (its TCP connection). 0: never. Default
  /// 300 s.
  std::chrono::milliseconds ws_idle_timeout{300'000};

  // -- fact streams (GET .../facts/stream; docs/http-api.md, "Following facts") --

  /// Streams one entity may have open; one more is answered 429 TOO_MANY_CONNECTIONS. Default
  /// 1,000.
  size_t stream_max_connections_per_entity = 1'000;
  /// Streams one tenant may have open across its entities; one more: 429. Default 10,000.
  size_t stream_max_connections_per_tenant = 10'000;
  /// Bytes of events queued for one stream that its client has not taken yet; more ends the
  /// stream with an `overflow` event (the client resumes from the last seq it names). Default
  /// 1 MiB.
  size_t stream_max_queue_bytes = 1024 * 1024;
  /// A stream that sent nothing for this long sends a keep-alive comment. Default 15 s.
  std::chrono::milliseconds stream_keepalive{15'000};
};

/// A static page the gateway answers on GET and HEAD without an API key (http_server_config::
/// pages): a page for trying an API by hand, which holds no data of its own. Every field
/// documents its default.
struct http_page {
  /// Its Content-Type. Default text/html; charset=utf-8.
  std::string content_type = "text/html; charset=utf-8";
  /// The page itself.
  std::string body;
  /// Its Content-Security-Policy header. Default: nothing but inline script and style, WebSocket
  /// and fetch connections to the page's own origin ('self'), and a data: icon; no frames, no
  /// forms, no <base>.
  std::string content_security_policy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";
};

/// Configuration of the gateway. Every field documents its default.
struct http_server_config {
  /// Address to bind (IPv4 or IPv6 literal, or a host name resolved once). Default 127.0.0.1.
  std::string host = "127.0.0.1";
  /// Port to bind; 0 picks a free one (see http_server::port()). Default 8080.
  uint16_t port = 8080;
  /// Asio I/O threads (separate from CAF's workers). Default 1.
  size_t io_threads = 1;
  /// How long a call may take before the caller gets 504 CALL_TIMEOUT (the call itself is not
  /// cancelled; retry with the same Idempotency-Key). Default 30 s.
  std::chrono::milliseconds call_timeout{30'000};
  http_limits limits;
  /// The tenants. A request without a known X-API-Key answers 401. Default none.
  std::vector<http_tenant> tenants;
  /// Overrides of method_options::requires_idempotency_key: type -> method -> required. The
  /// method "*" applies to every method of the type that is not named. Default none.
  std::map<std::string, std::map<std::string, bool>> require_idempotency_key;
  /// Receives each structured log line (one JSON object, no newline). Default: stderr.
  std::function<void(std::string_view)> log;
  /// Cluster mode: where each entity's requests go (served here, relayed to the owner node, or
  /// 503 SHARD_UNAVAILABLE / CLUSTER_UNAVAILABLE), GET /v1/cluster, the lease in /healthz and
  /// the cluster's metrics. Default null: this node serves every entity.
  std::shared_ptr<cluster_router> cluster;
  /// Static pages: absolute path (without a query; "/examples/chat") -> page. Each is answered
  /// on GET and HEAD (any query, no API key; other methods 405) with its Content-Security-Policy,
  /// X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer and Cache-Control: no-cache.
  /// The API's routes come first: a page never shadows one. Default none.
  std::map<std::string, http_page> pages;
  /// Where GET / and HEAD / lead (302 Found, Location: this path; no API key): the path of one
  /// of `pages`, e.g. the console's /console. Empty: they answer 200 with a JSON document that
  /// names the API's routes and its documentation. Default empty.
  std::string home;
};

/// The HTTP gateway: POST /v1/entities/{type}/{id}/{method} and friends, /healthz, /metrics.
class http_server {
 public:
  /// Binds, starts the I/O threads and begins accepting. Stop the server (begin_shutdown,
  /// wait_idle, stop) before runtime::stop(): the runtime must outlive the server's traffic, and
  /// CAF 0.17's actor system waits, when it is destroyed, for every thread that ever called into
  /// it (the I/O threads do, through runtime::call) to end.
  static result<std::unique_ptr<http_server>> start(runtime& rt, http_server_config config);

  /// Closes every connection and joins the I/O threads (as stop()).
  ~http_server();

  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The bound port (the real one when the configuration asked for 0).
  uint16_t port() const;

  /// Stops accepting; requests that arrive from now on answer 503 UNAVAILABLE and close their
  /// connection, /healthz answers 503. Requests already handed to the runtime go on. Does not
  /// block. Idempotent.
  void begin_shutdown();

  /// Waits until no request is in flight (every accepted request has its response written);
  /// false when `timeout` passed first.
  bool wait_idle(std::chrono::milliseconds timeout);

  /// Closes every connection and joins the I/O threads. Idempotent.
  void stop();

  /// The Prometheus text exposition that GET /metrics serves.
  std::string metrics_text() const;

  struct impl;

 private:
  explicit http_server(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

/// SHA-256 (hex) of an API key: the form http_api_key::sha256 holds.
std::string api_key_sha256(std::string_view api_key);

} // namespace factum
