// http/fact_streams.hpp (private): live fact streams (GET /v1/entities/{type}/{id}/facts/stream,
// docs/http-api.md "Following facts"): one fact_stream per connection, which reads the entity's
// facts through the runtime (the built-in @facts read, a page at a time, answered by the output
// gate only once what it reveals is durable) and turns them into Server-Sent Events for the
// transport (server.cpp) to write; and fact_streams, the registry the hub tells when an entity's
// new facts are durable, with the per-entity and per-tenant caps. No Beast here. Every member
// function is thread-safe: the transport calls on its strand, runtime replies and the hub's
// notices arrive on CAF workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "connection_caps.hpp"
#include "factum/entities/call.hpp"
#include "factum/storage/entity_key.hpp"
#include "metrics.hpp"

namespace factum::http {

class gateway;
class fact_streams;

/// One client's stream of an entity's facts.
class fact_stream : public std::enable_shared_from_this<fact_stream> {
 public:
  /// Facts read at once from the store (one page of @facts).
  static constexpr int page_limit = 100;

  using end_reason = http_metrics::stream_end;

  /// A stream of `key`'s facts after `after_seq`, its reads traced as `trace_id` (the
  /// request's); its queue of events not yet handed to the transport holds at most
  /// `max_queue_bytes` (more: the stream overflows). `resume_prefix`: the client resumes after
  /// a fact it received (Last-Event-ID), numbered under this fact-id prefix ("" for the entity's
  /// first one): the stream first checks that the entity's history still holds that fact.
  fact_stream(gateway& gw, entity_key key, int64_t after_seq,
              std::optional<std::string> resume_prefix, size_t max_queue_bytes,
              std::string trace_id);
  ~fact_stream();

  fact_stream(const fact_stream&) = delete;
  fact_stream& operator=(const fact_stream&) = delete;

  const entity_key& key() const { return key_; }

  /// Reads the first page. `first` runs once, on a CAF worker: with the read's failure (the
  /// stream is over; the request answers it as problem+json), or ok (its events are queued).
  void start(std::function<void(call_reply)> first);
  /// The transport is ready to write: `wake` (any thread, must not block) tells it that there
  /// is something to take().
  void attach(std::function<void()> wake);
  /// The entity's facts up to `seq` are durable (the hub, on a CAF worker): reads them.
  void notify(int64_t seq);
  /// The entity's facts after `kept_seq` were replaced (a rollback, once its file is in place):
  /// a client that received any of them is told so (a `history` event), and the stream goes on
  /// from `kept_seq`.
  void rewound(int64_t kept_seq);
  /// The SSE event id of a fact: its seq, followed by "." and the 16 hex digits of its fact-id
  /// prefix when that is not the entity's first (`first_prefix`): facts after a rollback.
  static std::string event_id(int64_t seq, std::string_view fact_id, std::string_view first_prefix);

  /// What the transport writes next.
  struct chunk {
    std::string bytes; ///< events, in order (empty: nothing now)
    size_t facts = 0;  ///< fact events among them
    bool last = false; ///< the stream ends after these bytes (an overflow or a failed read)
  };
  /// Takes every queued event (the transport's strand).
  chunk take();
  /// The transport wrote what take() gave: a stream catching up reads its next page.
  void written();
  /// The transport ends the stream: no more reads, out of the registry. Idempotent.
  void end();

  /// The seq of the last event handed to the transport.
  int64_t last_sent() const;
  /// Why the stream ends after its last chunk (overflow or failed, counted in the metrics when
  /// decided), or client while nothing is decided.
  end_reason reason() const;

 private:
  friend class fact_streams;
  /// The options of the stream's reads of its entity (the gateway's call timeout, its trace).
  call_options read_options() const;
  void fetch(bool live);
  void on_history(const call_reply& r);
  void on_page(const call_reply& r, bool live, uint64_t gen);
  /// Queues the `history` event: the client's facts after `kept` were rolled away.
  void history_event_locked(int64_t kept);
  void overflow_locked();
  void fail_locked(const call_reply& r);

  gateway& gw_;
  const entity_key key_;
  const std::string key_str_;
  const size_t max_queue_bytes_;
  const std::string trace_id_;
  const std::optional<std::string> resume_prefix_;
  mutable std::mutex mu_;
  std::string first_prefix_; ///< the entity's first fact-id prefix (read at the start)
  uint64_t gen_ = 0;         ///< rewound() count: a page read before one is not used
  int64_t after_ = 0;        ///< the last seq queued (read up to)
  int64_t sent_ = 0;         ///< the last seq handed to the transport
  int64_t known_ = 0;        ///< the highest durable seq a notice told of
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool fetching_ = false; ///< a read is out
  bool again_ = false;    ///< a notice came while a read was out: read again after it
  bool paced_ = false;    ///< a full page came back: the next one waits for the queue to drain
  bool last_ = false;     ///< the final event is queued (overflow, failed)
  bool ended_ = false;
  bool started_ = false; ///< the first page came back
  end_reason reason_ = end_reason::client;
  std::function<void(call_reply)> first_;
  std::function<void()> wake_;
  fact_streams* registry_ = nullptr; ///< set while registered
};

/// The open fact streams by entity, and their caps.
class fact_streams {
 public:
  /// `gauge` (may be null) follows the number of open streams.
  fact_streams(size_t max_per_entity, size_t max_per_tenant, metrics::gauge* gauge = nullptr)
      : caps_(max_per_entity, max_per_tenant), gauge_(gauge) {}

  using refusal = connection_caps::refusal;
  /// Registers `s` (before its first read: no notice is missed), or says which cap refuses it.
  refusal add(const std::shared_ptr<fact_stream>& s);
  /// Forgets `s` (fact_stream::end).
  void remove(fact_stream* s);
  /// Tells every stream of `key` that its facts up to `seq` are durable.
  void notify(const entity_key& key, int64_t seq);
  /// Tells every stream of `key` that its facts after `kept_seq` were replaced.
  void rewound(const entity_key& key, int64_t kept_seq);
  /// Whether any stream is open (cheap: the runtime asks at every commit with facts).
  bool any() const { return open_.load(std::memory_order_relaxed) > 0; }
  /// Open streams.
  size_t open_count() const { return static_cast<size_t>(open_.load()); }

 private:
  /// The open streams of `key`.
  std::vector<std::shared_ptr<fact_stream>> of(const entity_key& key);

  connection_caps caps_; ///< under mu_
  metrics::gauge* gauge_;
  mutable std::mutex mu_;
  std::atomic<int64_t> open_{0};
  std::unordered_map<std::string, std::map<fact_stream*, std::weak_ptr<fact_stream>>> by_entity_;
};

} // namespace factum::http
