// http/forwarder.hpp: the gateway's link to the other nodes of a cluster: relays a client's
// request for an entity to the node that owns it, over keep-alive HTTP connections (one pool per
// owner address, on one I/O thread of its own), and hands back the owner's answer as it came.
// The owner serves the relayed request as any other, with the epoch the sender saw in
// X-Factum-Forwarded; it never relays one again.
// Why HTTP and not CAF's BASP: docs/cluster.md, "Calls go to the owner" (a CAF remote request
// measured slower than this whole relay, and the owner's gateway already checks everything).
// Threads: send() and after() from any thread; `done` and after()'s function run on the
// forwarder's I/O thread (or at once on the caller's, cancelled, once stopped).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "factum/http/client.hpp"
#include "gateway.hpp"

namespace factum::http {

/// The header that marks a relayed request (its value: the epoch the sender saw).
inline constexpr const char* forwarded_header = "X-Factum-Forwarded";
/// The header of an owner's answer that says "not mine": the sender reads the cluster's state
/// again and retries.
inline constexpr const char* not_owner_header = "X-Factum-Not-Owner";

/// What came back from the owner.
struct forwarded_reply {
  http_response res;      ///< the owner's answer (status 0: none)
  bool not_owner = false; ///< the owner said the entity is not its own
  /// No answer: why (failure::none when there is one), and whether the request may have
  /// reached the owner (false only when the connection was never made).
  client::failure failed = client::failure::none;
  bool maybe_sent = false;
  std::string error;
};

class forwarder {
 public:
  /// `timeout`: the longest wait for an owner's answer (the gateway's call timeout plus a
  /// margin, so that the owner's own 504 arrives first).
  explicit forwarder(std::chrono::milliseconds timeout);
  ~forwarder();

  /// Relays `req` to `address` ("host:port") with `trace_id` and `epoch`.
  void send(const std::string& address, const http_request& req, const std::string& trace_id,
            int64_t epoch, std::function<void(forwarded_reply)> done);

  /// Runs `fn` on the I/O thread `delay` from now (`stopped` false), or once the forwarder stops
  /// (`stopped` true; at once when it has stopped already): the gateway's wait between two reads
  /// of the cluster's state while an entity's shard changes hands.
  void after(std::chrono::milliseconds delay, std::function<void(bool stopped)> fn) {
    io_.after(delay, std::move(fn));
  }

  /// Answers everything in flight with failure::cancelled, runs every pending after() with
  /// `stopped` true and joins the I/O thread. Idempotent.
  void stop();

 private:
  std::chrono::milliseconds timeout_;
  client::io_thread io_;
  std::mutex mu_;
  std::map<std::string, client::pool> pools_; ///< by owner address
};

} // namespace factum::http
