// factum/sinks/nats_sink.hpp: the outbox's NATS JetStream sink (docs/outbox.md). Each fact is
// published to one subject with js_PublishMsg, its fact_id as the Nats-Msg-Id header (JetStream
// drops a redelivery within the stream's duplicate window) and the entity and seq as the headers
// Factum-Entity and Factum-Seq; the PubAck is the acknowledgement. Publishes run on the sink's own
// threads (a publish waits for its PubAck), never on the caller's. libnats (Debian libnats-dev,
// CMake package cnats) stays in sinks/nats/src/nats_sink.cpp. Every member is thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/runtime/outbox.hpp"

namespace factum {

/// How a NATS sink is reached. Every field documents its default.
struct nats_sink_options {
  /// Server URL(s), comma-separated, `nats://host:port`. Default "nats://127.0.0.1:4222".
  std::string url = "nats://127.0.0.1:4222";
  /// The subject every fact is published to. Required.
  std::string subject;
  /// When set, the stream that must capture `subject`: created (file storage, the subject
  /// only) when it does not exist, before the first publish. Default empty: the operator makes
  /// the stream, and a publish to a subject no stream captures is retried.
  std::string stream;
  /// The duplicate window of a stream this sink creates. Default 2 min (JetStream's default).
  std::chrono::milliseconds duplicate_window{120'000};
  /// Longest wait for a PubAck (and for the JetStream requests that look up or make the
  /// stream); then the delivery is retried. A delivery that waited this long for a publishing
  /// thread is retried unsent. Default 5 s.
  std::chrono::milliseconds publish_timeout{5'000};
  /// Longest wait for a connection at each (re)connect attempt. Default 2 s.
  std::chrono::milliseconds connect_timeout{2'000};
  /// Publishing threads: deliveries in flight at once (each entity has one at a time). 1..64;
  /// default 4.
  size_t threads = 4;
  /// Deliveries waiting for a thread; one more is answered `retry` at once. Default 65536.
  size_t max_queued = 65'536;
};

/// Checks `opts` (subject and stream names, timeouts, threads); INVALID_ARGUMENT names the field.
status validate_nats_sink_options(const nats_sink_options& opts);

/// A NATS JetStream sink: one connection (reconnecting forever), a queue and its threads.
class nats_sink {
 public:
  /// Validates `opts` and connects. A server that is not reachable yet is not an error: the
  /// connection is retried in the background and deliveries meanwhile are answered `retry`.
  static result<std::shared_ptr<nats_sink>> start(nats_sink_options opts);
  ~nats_sink();
  nats_sink(const nats_sink&) = delete;
  nats_sink& operator=(const nats_sink&) = delete;

  /// The outbox transport (keeps the sink alive). After stop() it answers `retry` at once.
  outbox_fn deliver();
  /// Answers what is queued with `retry` (error_code CANCELLED), joins the threads, closes the
  /// connection. Idempotent; not from inside a delivery's `done`.
  void stop();

  struct impl;

 private:
  explicit nats_sink(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<impl> impl_;
};

/// One message of a JetStream stream, as read_nats_stream answers it.
struct nats_stream_message {
  uint64_t stream_seq = 0;
  std::string subject;
  std::string msg_id; ///< its Nats-Msg-Id header
  std::string entity; ///< its Factum-Entity header
  int64_t seq = 0;    ///< its Factum-Seq header
  std::string data;
};

/// Every message of `stream` (by stream sequence, from 1 to its last), for tests and operators'
/// checks; connects to `url` for the read and closes again. UNAVAILABLE when the server does not
/// answer, NOT_FOUND when the stream does not exist.
result<std::vector<nats_stream_message>> read_nats_stream(const std::string& url,
                                                          const std::string& stream,
                                                          std::chrono::milliseconds timeout);

} // namespace factum
