// http/ws_hub.hpp (private): the WebSocket connections the gateway holds, by entity: their
// tags, attachments and query parameters, the per-entity and per-tenant limits, and the
// runtime's connection_host (a turn lists its entity's connections and its frames are handed
// out here; notices of durable facts go on to the fact streams). A plain class: the transport
// (ws_server.cpp) gives it one ws_link per connection; tests give it recorders. Every member
// function is thread-safe (I/O threads and CAF workers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "connection_caps.hpp"
#include "factum/runtime/connections.hpp"
#include "streams/fact_streams.hpp"

namespace factum::http {

/// The sending side of one connection, as the transport implements it. Thread-safe; neither
/// call blocks (the transport queues on the connection's strand).
class ws_link {
 public:
  virtual ~ws_link() = default;
  /// Queues one message.
  virtual void send(std::shared_ptr<const std::string> data, bool binary) = 0;
  /// Closes with `code` and `reason`, after what is queued.
  virtual void close(int code, std::string reason) = 0;
};

class ws_hub final : public connection_host {
 public:
  /// Per-entity and per-tenant caps on connections (pending ones included).
  ws_hub(size_t max_per_entity, size_t max_per_tenant) : caps_(max_per_entity, max_per_tenant) {}

  /// The outcome of admit(): a new connection's id, or which cap refused it.
  struct admission {
    std::string id; ///< empty when refused
    using refusal = connection_caps::refusal;
    refusal why = refusal::none;
  };

  /// Registers a connection of `key` whose on_connect has not decided yet: sends by id reach
  /// it (the transport holds them until its handshake), broadcasts and listings do not.
  admission admit(const entity_key& key, nlohmann::json params, std::weak_ptr<ws_link> link);
  /// on_connect accepted `id`: listed with its tags and attachment from now on. False when the
  /// connection went meanwhile.
  bool open(const std::string& id, std::vector<std::string> tags, nlohmann::json attachment);
  /// Forgets `id`; answers its record when it was open (its on_close must run).
  std::optional<connection> remove(const std::string& id);
  /// The record of `id` (open or pending), if it is held.
  std::optional<connection> find(const std::string& id) const;
  /// Open connections of every entity (gauge), and of `key`.
  size_t open_count() const;
  size_t count_of(const entity_key& key) const;

  // -- connection_host (the runtime's side) --
  std::vector<connection> connections(const entity_key& key, const std::string& tag) override;
  void deliver(const entity_key& key, std::vector<outgoing_frame> frames) override;
  void release(const std::function<bool(const entity_key&)>& which) override;
  /// Notices of durable facts go to `streams` (set before the hub is attached to the runtime).
  void follow_facts(std::shared_ptr<fact_streams> streams) { streams_ = std::move(streams); }
  bool follows_facts() const override { return streams_ && streams_->any(); }
  void facts_durable(const entity_key& key, int64_t seq) override {
    if (streams_)
      streams_->notify(key, seq);
  }
  void history_rewritten(const entity_key& key, int64_t kept_seq) override {
    if (streams_)
      streams_->rewound(key, kept_seq);
  }

 private:
  struct entry {
    entity_key key;
    std::string entity; ///< key.to_string(), the by_entity_ key
    uint64_t order = 0;
    bool open = false;
    connection conn;
    std::weak_ptr<ws_link> link;
  };
  /// The entity's connections by order of admission.
  using entity_conns = std::map<uint64_t, std::string>;

  std::shared_ptr<fact_streams> streams_;
  mutable std::mutex mu_;
  uint64_t next_order_ = 1;
  size_t open_ = 0;
  std::unordered_map<std::string, entry> by_id_;
  std::unordered_map<std::string, entity_conns> by_entity_;
  connection_caps caps_; ///< under mu_
};

} // namespace factum::http
