// factum/entities/websocket.hpp: what an entity type sees of the WebSocket connections attached
// to it (docs/websockets.md): a connection as the gateway holds it, a message, the decision an
// entity's on_connect takes, and the per-type options (auto-responses). Plain values; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace factum {

/// One WebSocket connection attached to an entity. The gateway holds it (not the entity's
/// actor), so it stays open while the entity hibernates, and every turn sees it again.
struct connection {
  /// Unique within the serving process ("w" and 16 hex digits).
  std::string id;
  /// Set by on_connect; broadcast(tag) and connections(tag) select by them.
  std::vector<std::string> tags;
  /// What on_connect attached (a JSON object of at most 4 KiB once serialised).
  nlohmann::json attachment = nlohmann::json::object();
  /// The upgrade request's query parameters (name -> value, decoded).
  nlohmann::json params = nlohmann::json::object();
};

/// A message from a client: a text frame (valid UTF-8) or a binary one.
struct ws_message {
  bool binary = false;
  std::string data;
};

/// What on_connect decides for a new connection.
struct connect_decision {
  bool accept = false;
  std::vector<std::string> tags;
  nlohmann::json attachment = nlohmann::json::object();
  /// A refusal's close code (4000-4999 for the application's own; 1008 by default) and reason
  /// (at most 123 bytes: a close frame's limit).
  int close_code = 1008;
  std::string reason;

  static connect_decision accept_with(std::vector<std::string> tags,
                                      nlohmann::json attachment = nlohmann::json::object()) {
    connect_decision d;
    d.accept = true;
    d.tags = std::move(tags);
    d.attachment = std::move(attachment);
    return d;
  }
  static connect_decision refuse(int close_code, std::string reason) {
    connect_decision d;
    d.close_code = close_code;
    d.reason = std::move(reason);
    return d;
  }
};

/// The WebSocket side of an entity type (entity_type::websocket; type_builder::websocket).
struct websocket_options {
  /// Text frames the gateway answers itself without waking the entity: a frame exactly equal
  /// to a key gets its value back (e.g. "ping" -> "pong"). Default none.
  std::map<std::string, std::string> auto_responses;
};

} // namespace factum
