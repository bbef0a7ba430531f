// factum/http/client.hpp: factum's one HTTP/1.1 client (plain http, keep-alive), used by the tool
// transport (sinks/http/src/tool_client.cpp), `factum inspect --server`, `factum bench --mode
// http` and the tests. It owns the URL parser, a synchronous client (one connection, a deadline
// per exchange) and asynchronous connection pools on an I/O thread (request building, response
// reading, timeouts, a bounded queue, one re-send after a stale keep-alive). Boost.Beast and Asio
// stay behind this header, in http_client/src/client.cpp. Threads: see each class.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/error/status.hpp"

namespace factum::http::client {

// -- URLs and request building (pure; any thread) --

/// A parsed `http://host[:port][/path]` URL.
struct url {
  std::string host; ///< without brackets for IPv6
  uint16_t port = 80;
  std::string path; ///< without a trailing '/'; empty for the root

  /// The Host header's value: the host (IPv6 in brackets), then ":port" unless it is 80.
  std::string host_header() const;
};

/// Parses `http://host[:port][/path]` (the scheme in any case; port default 80).
/// INVALID_ARGUMENT says why not in a phrase without the URL ("https is not supported (...)",
/// "must start with http://", "bad port", "the path may not contain a query, ..."): https (no
/// TLS here), user information, a query or fragment, white space or non-ASCII in the path, a bad
/// host character, a port outside 1..65535.
result<url> parse_url(std::string_view text);

/// Percent-encodes every byte but RFC 3986's unreserved characters and those in `keep` (e.g.
/// "/" for a path of several segments).
std::string percent_encode(std::string_view s, std::string_view keep = {});

/// Whether `host` resolves now: ok, or UNAVAILABLE with the resolver's message (empty when it
/// answered no address). Blocks for the resolution.
status check_resolves(const std::string& host, uint16_t port);

/// Request headers, in order (names as sent).
using header_list = std::vector<std::pair<std::string, std::string>>;

// -- transport failures --

/// Why an exchange has no response.
enum class failure {
  none,
  timeout,      ///< the deadline passed (`stage` says during what)
  resolve,      ///< the host did not resolve
  refused,      ///< the connection was refused
  closed,       ///< the peer closed or reset the connection before a complete response
  not_loopback, ///< (sync_options::loopback_only) the host resolved to another address
  pool_full,    ///< (pools) every connection is busy and the queue is full
  cancelled,    ///< (pools) the I/O thread is stopping
  other,        ///< any other socket or protocol error
};

/// What an exchange was doing when it failed.
enum class stage { resolve, connect, write, read };

/// "resolve", "connect", "write" or "read".
std::string_view to_string(stage s);

// -- synchronous client (one connection; one thread at a time) --

/// Settings of a sync_client.
struct sync_options {
  /// One deadline for each exchange: connecting (when needed), sending, reading the response.
  std::chrono::milliseconds timeout{15'000};
  /// Refuse to connect unless every address the host resolves to is a loopback address
  /// (failure::not_loopback; `error` names the address).
  bool loopback_only = false;
  /// Largest response body accepted (a larger one fails the exchange); nullopt: no limit.
  std::optional<uint64_t> max_body = uint64_t{64} * 1024 * 1024;
};

/// A response of the sync_client, or why there is none.
struct reply {
  int status = 0;                 ///< 0: no response (`failed`, `failed_at` and `error` say why)
  failure failed = failure::none; ///< none when there is a response
  stage failed_at = stage::connect;
  std::string error;  ///< the transport's message (not_loopback: the address); "" on success
  std::string reason; ///< the status line's reason phrase
  std::map<std::string, std::string> headers; ///< names in lower case; the last of duplicates
  std::string body;

  /// A header's value by lower-case name, or "" when absent.
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

/// One keep-alive connection to host:port, opened on first use and again after the server
/// closed it. Each exchange runs the client's own io_context on the calling thread until it ends
/// or its deadline passes. One thread at a time.
class sync_client {
 public:
  sync_client(std::string host, uint16_t port, sync_options opts = {});
  ~sync_client();
  sync_client(const sync_client&) = delete;
  sync_client& operator=(const sync_client&) = delete;

  /// Sends one request (Host first, then `headers` as given, duplicates kept; Content-Length
  /// from `body`) and reads its response. A request whose send fails on a reused connection is
  /// sent once more on a fresh one (the server had closed the idle connection). A HEAD
  /// request's response is read without a body, whatever its Content-Length says.
  reply request(std::string_view method, std::string_view target, const header_list& headers = {},
                std::string_view body = {});

  /// Sends `bytes` as they are and reads one response within `timeout`.
  reply raw(std::string_view bytes, std::chrono::milliseconds timeout);

  /// Connects now (without sending anything); false when that failed.
  bool connect();

  /// Whether the server closed the connection: a read sees end of stream or a reset within
  /// `timeout`. Closes the connection either way.
  bool closed_by_server(std::chrono::milliseconds timeout);

  /// Closes the connection (the next exchange opens a new one).
  void close();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// -- asynchronous pools (an I/O thread; submit from any thread) --

/// The method of a pooled request.
enum class verb { get, post };

/// One request of a pool. Its strings are moved into the message, not copied.
struct request {
  verb method = verb::post;
  std::string target;          ///< origin form: path and query, already encoded
  std::string body;            ///< post: sent with Content-Type: application/json
  std::string idempotency_key; ///< sent as Idempotency-Key when not empty
  std::string trace_id;        ///< sent as X-Trace-Id when not empty
  /// The Content-Type of a post: nullopt sends application/json, "" sends none (a request
  /// relayed as it came, e.g. a cluster node forwarding a client's call to its owner).
  std::optional<std::string> content_type;
  header_list headers; ///< more headers, set after the others (these replace same-named ones)
};

/// A pool's answer to one request, or why there is none. Handed to the completion on the I/O
/// thread.
struct response {
  int status = 0;                 ///< 0: no response (`failed`, `failed_at` and `error` say why)
  failure failed = failure::none; ///< none when there is a response
  stage failed_at = stage::connect;
  std::string error; ///< the transport's message; "" on success
  std::string body;

  /// A header of the response by name (any case), or "" when absent. Valid only while the
  /// completion runs.
  std::string_view header(std::string_view name) const;

  /// The message's fields (a Beast header), set by the pool while the completion runs.
  const void* fields_ = nullptr;
};

/// Runs exactly once per submitted request.
using completion = std::function<void(response&)>;

/// Settings of one pool. Every field documents its default.
struct pool_options {
  /// Longest wait for a TCP connection (resolve + connect). Default 2 s.
  std::chrono::milliseconds connect_timeout{2'000};
  /// Longest wait for the response once connected (write + read). Default 10 s.
  std::chrono::milliseconds request_timeout{10'000};
  /// Connections at once (kept alive and reused). Default 16.
  size_t max_connections = 16;
  /// Requests waiting for a connection when all are busy; one more fails at once with
  /// failure::pool_full. Default 1024.
  size_t max_queued = 1'024;
  /// Re-send a request once on a fresh connection when a reused one turned out closed by the
  /// peer before any of the response arrived: when its write failed (the peer never got the
  /// whole request), or, for a GET or a request with an Idempotency-Key only, when the peer
  /// closed after it was written (the peer may have acted on it). An idle connection the peer
  /// closed is dropped before a send in any case. Default on.
  bool resend_on_stale = true;
  /// Largest response body accepted. Default 16 MiB.
  uint64_t max_body = uint64_t{16} * 1024 * 1024;
  /// Headers of every request, set after Host (e.g. User-Agent, X-API-Key). Default none.
  header_list headers;
};

/// Counters of one pool (any thread).
struct pool_stats {
  uint64_t requests = 0;           ///< submitted before stop
  uint64_t connections_opened = 0; ///< TCP connections established
  uint64_t reused = 0;             ///< requests sent on a kept-alive connection
  uint64_t stale_retries = 0;      ///< requests re-sent once after a stale keep-alive
  uint64_t stale_dropped = 0;      ///< idle connections found closed by the peer before a send
  uint64_t queued = 0;             ///< requests that waited for a connection
  uint64_t rejected = 0;           ///< requests refused with failure::pool_full
  uint64_t open_connections = 0;   ///< now (gauge)
};

class io_thread;

/// Keep-alive connections to one URL's host and a FIFO of requests waiting for one. A handle:
/// copies share the pool. Its connections live on the io_thread that made it.
class pool {
 public:
  /// Sends `r` (any thread). `done` runs exactly once: on the I/O thread, or at once on the
  /// calling thread with failure::cancelled after the io_thread stopped.
  void submit(request r, completion done) const;

  /// The pool's counters (any thread).
  pool_stats stats() const;

  struct state;

 private:
  friend class io_thread;
  struct owner;
  pool(std::shared_ptr<owner> o, std::shared_ptr<state> s)
      : owner_(std::move(o)), state_(std::move(s)) {}

  std::shared_ptr<owner> owner_;
  std::shared_ptr<state> state_;
};

/// The Asio I/O thread that pools run on: started by the constructor. Thread-safe.
class io_thread {
 public:
  io_thread();
  /// Stops (as stop()).
  ~io_thread();
  io_thread(const io_thread&) = delete;
  io_thread& operator=(const io_thread&) = delete;

  /// A pool to `u`'s host and port on this thread (the URL's path is not used: requests carry
  /// whole targets). Host header: u.host_header().
  pool make_pool(const url& u, pool_options opts);

  /// Runs `fn` once on the I/O thread `delay` from now with `stopped` false; with true as soon as
  /// the thread stops before then (at once, on the calling thread, when it has stopped already).
  void after(std::chrono::milliseconds delay, std::function<void(bool stopped)> fn);

  /// Answers every queued and in-flight request of every pool once with failure::cancelled,
  /// runs every pending after() with `stopped` true, closes the connections and joins the
  /// thread. Idempotent. Not from the I/O thread (i.e.
  /// not from inside a completion).
  void stop();

 private:
  std::shared_ptr<pool::owner> owner_;
};

} // namespace factum::http::client
