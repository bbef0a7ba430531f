// http/ws_server.hpp (private): the WebSocket transport's entry, for server.cpp: an HTTP
// connection whose request asks for an upgrade is handed over here with its stream. Included
// by server.cpp and ws_server.cpp only (it brings Beast's core and HTTP headers).
#pragma once

#include <memory>

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace factum::http {

class gateway;
class io_gate;

/// What the HTTP server keeps of a connection it handed over.
class ws_handle {
 public:
  virtual ~ws_handle() = default;
  /// The server stops: closes with 1001, and drops the TCP connection if the client has not
  /// answered within a few seconds. Any thread.
  virtual void stop() = 0;
};

/// Takes over `stream`, whose request `req` asks for a WebSocket upgrade: the gateway decides
/// (auth, the entity's on_connect), then the handshake, or an HTTP refusal and close. `keep`
/// lives as long as the connection does (the HTTP session: the server's accounting of it);
/// `gate` carries the posts of other threads to the connection's strand (io_gate.hpp). Call on
/// the stream's strand.
std::shared_ptr<ws_handle>
start_websocket(gateway& gw, boost::beast::tcp_stream&& stream,
                boost::beast::http::request<boost::beast::http::string_body>&& req,
                std::shared_ptr<void> keep, std::shared_ptr<io_gate> gate);

} // namespace factum::http
