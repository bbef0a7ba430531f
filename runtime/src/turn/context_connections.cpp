// context_connections.cpp: the WebSocket part of the handler's context (entity_context.hpp):
// send, broadcast and close collect frames for the output gate; connections() asks the holder
// of the connections (the gateway's hub) through the actor's port. Runs on the entity's actor
// thread, inside a turn.
#include "turn/entity_context.hpp"

#include "factum/storage/utf8.hpp"

namespace factum::detail {

namespace {

/// Most bytes of frames one turn may send (its frames wait in memory until its commit is
/// durable).
constexpr size_t max_turn_frame_bytes = 16 * 1024 * 1024;
/// A close frame's reason: at most 123 bytes (RFC 6455, 5.5).
constexpr size_t max_close_reason = 123;

size_t bytes_of(const std::vector<outgoing_frame>& frames) {
  size_t n = 0;
  for (auto& f : frames)
    n += f.data.size() + f.conn_id.size() + f.tag.size();
  return n;
}

} // namespace

void entity_context::send(const std::string& conn_id, std::string message, bool binary) {
  if (!env_.websocket)
    throw no_websockets();
  if (conn_id.empty())
    throw problems::invalid_connection.error("send needs a connection id");
  if (!binary && !valid_utf8(message))
    throw problems::invalid_message.error("a text message must be valid UTF-8; send it as binary");
  if (bytes_of(frames_) + message.size() > max_turn_frame_bytes)
    throw problems::too_many_frames.error("a turn may send at most 16 MiB of frames");
  outgoing_frame f;
  f.what = binary ? outgoing_frame::kind::binary : outgoing_frame::kind::text;
  f.conn_id = conn_id;
  f.data = std::move(message);
  frames_.push_back(std::move(f));
}

void entity_context::broadcast(const std::string& tag, std::string message) {
  if (!env_.websocket)
    throw no_websockets();
  if (!valid_utf8(message))
    throw problems::invalid_message.error("a text message must be valid UTF-8");
  if (bytes_of(frames_) + message.size() > max_turn_frame_bytes)
    throw problems::too_many_frames.error("a turn may send at most 16 MiB of frames");
  outgoing_frame f;
  f.tag = tag;
  f.broadcast = true;
  f.data = std::move(message);
  frames_.push_back(std::move(f));
}

void entity_context::close(const std::string& conn_id, int code, std::string reason) {
  if (!env_.websocket)
    throw no_websockets();
  if (conn_id.empty())
    throw problems::invalid_connection.error("close needs a connection id");
  if (code != 1000 && (code < 3000 || code > 4999))
    throw problems::invalid_close_code.error("a close code is 1000 or 3000-4999, not " +
                                             std::to_string(code));
  if (reason.size() > max_close_reason || !valid_utf8(reason))
    throw problems::invalid_close_reason.error(
      "a close reason is valid UTF-8 of at most 123 bytes");
  outgoing_frame f;
  f.what = outgoing_frame::kind::close;
  f.conn_id = conn_id;
  f.code = code;
  f.data = std::move(reason);
  frames_.push_back(std::move(f));
}

std::vector<connection> entity_context::connections(const std::string& tag) {
  if (!env_.websocket)
    throw no_websockets();
  auto host = port_.connections();
  return host ? host->connections(*env_.key, tag) : std::vector<connection>{};
}

} // namespace factum::detail
