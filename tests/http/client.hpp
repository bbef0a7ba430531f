// client.hpp: a small synchronous HTTP/1.1 client for the gateway tests (keep-alive, raw bytes,
// a deadline on every exchange). Its Beast code lives in client.cpp, the tests' only Beast
// translation unit. One client per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace factum::test {

/// A response, or the transport error that prevented one.
struct http_reply {
  int status = 0; ///< 0: no response (error says why)
  std::string error;
  std::map<std::string, std::string> headers; ///< names in lower case
  std::string body;

  /// A header's value, or "" when absent.
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
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

using header_list = std::vector<std::pair<std::string, std::string>>;

/// One keep-alive connection to 127.0.0.1:port; reconnects when the server closed it.
class http_client {
 public:
  explicit http_client(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(15));
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// Sends one request and reads its response.
  http_reply request(const std::string& verb, const std::string& target,
                     const header_list& headers = {}, const std::string& body = {});

  /// Sends `bytes` as they are and reads one response (status 0 when the server closed the
  /// connection or `timeout` passed first).
  http_reply raw(const std::string& bytes, std::chrono::milliseconds timeout);

  /// Connects now (without sending anything); false when the connection was refused.
  bool connect();

  /// Whether the server closed the connection: a read sees end of stream within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout);

  void close();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace factum::test
