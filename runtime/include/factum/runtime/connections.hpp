// factum/runtime/connections.hpp: the seam between the runtime and whoever holds live
// connections (the HTTP gateway's hub; a recorder in tests): WebSocket connections and fact
// streams. The runtime asks it for an entity's open connections during a turn, hands it the
// frames a turn sent once the output gate lets them out, and tells it when an entity's new facts
// are durable. Implementations are thread-safe: any CAF worker calls them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "factum/entities/websocket.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum {

/// One frame a turn sent (context::send, broadcast, close).
struct outgoing_frame {
  enum class kind { text, binary, close };
  kind what = kind::text;
  std::string conn_id; ///< the connection; empty with `tag` set: a broadcast
  std::string tag;     ///< a broadcast's tag (empty with an empty conn_id: every connection)
  bool broadcast = false;
  std::string data; ///< the message, or a close's reason
  int code = 1000;  ///< a close's code
};

/// Holds the WebSocket connections of entities.
class connection_host {
 public:
  virtual ~connection_host() = default;
  /// The open connections of `key` with `tag` (all when empty), oldest first.
  virtual std::vector<connection> connections(const entity_key& key, const std::string& tag) = 0;
  /// Sends `frames` (in order) to `key`'s connections; connections gone meanwhile are skipped.
  virtual void deliver(const entity_key& key, std::vector<outgoing_frame> frames) = 0;
  /// The entities `which` selects stop being served here (runtime::release_entities: a shard
  /// moves to another node): their connections close with 1012 (service restart), which tells
  /// clients to reconnect, reaching the new owner. `which` may take its own locks.
  virtual void release(const std::function<bool(const entity_key&)>& which) { (void)which; }
  /// Whether anyone follows facts (a fact stream is open): while false, the runtime does not
  /// call facts_durable(). Cheap; asked at every commit that appended facts.
  virtual bool follows_facts() const { return false; }
  /// Every fact of `key` up to `seq` is durable: called once the output gate releases the
  /// commit that appended it (never for a commit that failed or whose sync failed).
  virtual void facts_durable(const entity_key& key, int64_t seq) {
    (void)key;
    (void)seq;
  }
  /// The facts of `key` after `kept_seq` were replaced (runtime::rollback_entity, once the
  /// rolled-back file is in place): those who follow its facts are told.
  virtual void history_rewritten(const entity_key& key, int64_t kept_seq) {
    (void)key;
    (void)kept_seq;
  }
};

} // namespace factum
