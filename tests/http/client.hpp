// client.hpp: the gateway tests' HTTP client: factum's synchronous client
// (factum/http/client.hpp) on 127.0.0.1 with a 15 s deadline per exchange and no body limit, its
// replies with JSON helpers. Header-only (no Beast here). One client per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "factum/http/client.hpp"

namespace factum::test {

/// A response, or the transport error that prevented one (status 0; `error` says
/// "<stage>: <message>").
struct http_reply : http::client::reply {
  http_reply(http::client::reply r) : reply(std::move(r)) {
    if (failed != http::client::failure::none)
      error = std::string(http::client::to_string(failed_at)) + ": " + error;
  }

  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
  /// The problem's code (problem+json bodies), or "".
  std::string code() const {
    auto j = json();
    return j.is_object() && j.contains("code") && j["code"].is_string()
             ? j["code"].get<std::string>()
             : std::string();
  }
};

using http::client::header_list;

/// One keep-alive connection to 127.0.0.1:port; reconnects when the server closed it.
class http_client {
 public:
  explicit http_client(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(15))
      : client_("127.0.0.1", port, options(timeout)) {}

  /// Sends one request and reads its response.
  http_reply request(const std::string& verb, const std::string& target,
                     const header_list& headers = {}, const std::string& body = {}) {
    return client_.request(verb, target, headers, body);
  }

  /// Sends `bytes` as they are and reads one response (status 0 when the server closed the
  /// connection or `timeout` passed first).
  http_reply raw(const std::string& bytes, std::chrono::milliseconds timeout) {
    return client_.raw(bytes, timeout);
  }

  /// Connects now (without sending anything); false when the connection was refused.
  bool connect() { return client_.connect(); }

  /// Whether the server closed the connection: a read sees end of stream within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout) {
    return client_.closed_by_server(timeout);
  }

  void close() { client_.close(); }

 private:
  static http::client::sync_options options(std::chrono::milliseconds timeout) {
    http::client::sync_options o;
    o.timeout = timeout;
    o.max_body = std::nullopt;
    return o;
  }

  http::client::sync_client client_;
};

} // namespace factum::test
