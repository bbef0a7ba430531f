// factum/sinks/http_tool.hpp: the HTTP transport of external tools. An http_tool_client owns
// its own I/O thread and a keep-alive connection pool per tool (factum's HTTP client,
// factum/http/client.hpp); it turns http_tool_options into tool_fn callables for
// runtime_config::tools. A tool_fn never blocks its caller (a CAF worker): the request is posted
// to the client's thread, and `done` runs there exactly once. Every public member function is
// thread-safe. Boost.Beast stays behind the HTTP client. Wire protocol: docs/tools.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "factum/error/status.hpp"
#include "factum/runtime/runtime.hpp"

namespace factum {

/// Where an HTTP tool's credential is refreshed after a 401 (http_tool_client::auth_refresher,
/// tool_policy::refresh_auth): `POST <url>` with the body `{}`; the answer's JSON member `field`
/// (a string) is the new credential, sent as `header: <prefix><value>` with every request of the
/// tool from then on (in place of a configured header of that name).
struct http_tool_auth_refresh {
  /// `http://host[:port][/path]`. Required.
  std::string url;
  /// The member of the answer's JSON object holding the credential. Default "access_token".
  std::string field = "access_token";
  /// The request header it goes into. Default "Authorization".
  std::string header = "Authorization";
  /// Put before the value. Default "Bearer ".
  std::string prefix = "Bearer ";
  /// Headers of the refresh request itself (e.g. the client's own secret). Default none.
  std::map<std::string, std::string> headers;
};

/// How one HTTP tool is reached. Every field documents its default.
struct http_tool_options {
  /// Base URL, `http://host[:port][/path]` (plain http only; port default 80). A call with
  /// operation `op` is `POST <url>/<op>`, or `POST <url>` when the operation is empty.
  /// Required.
  std::string url;
  /// Longest wait for a TCP connection (resolve + connect); then error_code "timeout".
  /// Default 2 s.
  std::chrono::milliseconds connect_timeout{2'000};
  /// Longest wait for the answer once connected (write + read); then error_code "timeout".
  /// Default 10 s.
  std::chrono::milliseconds request_timeout{10'000};
  /// Connections to this tool at once (kept alive and reused). Default 16.
  size_t max_connections = 16;
  /// Requests waiting for a connection when all are busy; one more fails at once with
  /// error_code "POOL_EXHAUSTED" (category transient). Default 1024.
  size_t max_queued = 1'024;
  /// Extra request headers (e.g. Authorization). Default none.
  std::map<std::string, std::string> headers;
  /// How the credential is refreshed after a 401. Default none: a 401 stands.
  std::optional<http_tool_auth_refresh> auth_refresh;
};

/// A parsed tool URL.
struct http_tool_url {
  std::string host;
  uint16_t port = 80;
  std::string path; ///< without a trailing '/'; empty for the root
};

/// Parses `http://host[:port][/path]`; INVALID_ARGUMENT says why not (https is refused: TLS is
/// not supported by this transport).
result<http_tool_url> parse_http_tool_url(std::string_view url);

/// Checks `opts` as make_tool does (URL form, timeouts, pool sizes, header names and values, the
/// host resolves now); INVALID_ARGUMENT names the field ("url: ...", "headers.X: ..."). Blocks
/// for the name resolution.
status validate_http_tool_options(const http_tool_options& opts);

/// Counters of one tool's pool (for tests and metrics).
struct http_tool_stats {
  uint64_t requests = 0;           ///< tool_fn invocations
  uint64_t connections_opened = 0; ///< TCP connections established
  uint64_t reused = 0;             ///< requests sent on a kept-alive connection
  uint64_t stale_retries = 0;      ///< requests re-sent once after a stale keep-alive
  uint64_t stale_dropped = 0;      ///< idle connections found closed by the peer before a send
  uint64_t queued = 0;             ///< requests that waited for a connection
  uint64_t rejected = 0;           ///< requests refused with POOL_EXHAUSTED
  uint64_t open_connections = 0;   ///< now (gauge)
};

/// An HTTP client for tools: one Asio I/O thread, one connection pool per tool.
class http_tool_client {
 public:
  /// Starts the I/O thread.
  http_tool_client();
  /// Stops (as stop()).
  ~http_tool_client();

  http_tool_client(const http_tool_client&) = delete;
  http_tool_client& operator=(const http_tool_client&) = delete;

  /// Validates `opts` (URL form, timeouts, the host resolves now) and returns the tool's
  /// transport. The callable keeps the client's internals alive; after stop() it answers at
  /// once with error_code "CANCELLED" (category transient). Blocks for the name resolution.
  result<tool_fn> make_tool(std::string name, http_tool_options opts);

  /// The credential refresh of tool `name` (its options' auth_refresh), for
  /// tool_policy::refresh_auth; null when it has none. `done(true)` once the new credential is
  /// in place, `done(false)` when the refresh failed (on the client's I/O thread).
  std::function<void(std::function<void(bool)>)> auth_refresher(std::string_view name) const;
  /// Counters of `name`'s pool (zeros for an unknown tool). Waits for the I/O thread (for the
  /// open-connection gauge): do not call it from inside a `done`.
  http_tool_stats stats(std::string_view name) const;

  /// Cancels every in-flight and queued request (each `done` runs exactly once, with
  /// error_code "CANCELLED"), closes the connections and joins the I/O thread. Idempotent. Do
  /// not call it from the client's own thread (i.e. from inside a `done`).
  void stop();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

// -- the outbox's HTTP sink (docs/outbox.md) --

/// What an HTTP sink's answer means for the outbox: 2xx acknowledged; 429, 5xx (and 408) and
/// transport errors (timeouts, refused or reset connections, a full pool) retried after a
/// backoff; any other status refused for good (the fact is dead-lettered).
outbox_ack outbox_ack_of(const tool_reply& r);

/// An outbox sink over an HTTP tool transport (http_tool_client::make_tool): each fact is
/// `POST <url>` with the fact as its JSON body, its fact_id as Idempotency-Key (the sink's
/// dedupe key) and its trace id as X-Trace-Id; the answer is read by outbox_ack_of().
outbox_fn http_outbox_sink(std::string name, tool_fn transport);

} // namespace factum
