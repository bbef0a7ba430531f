// http_client.hpp (private to factum_inspect): a small synchronous HTTP/1.1 GET client for
// `factum inspect --server`. Plain HTTP to a loopback address only (the API key travels in a
// header). Any thread; each call uses its own socket and io_context.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/storage/status.hpp"

namespace factum::tools {

/// A parsed http://host[:port][/base] URL.
struct http_endpoint {
  std::string host; ///< without brackets for IPv6
  std::string port = "80";
  std::string base_path; ///< "" or "/prefix" (no trailing '/')
};

/// Parses `url`; INVALID_ARGUMENT for https, other schemes, user info, queries or a bad port.
result<http_endpoint> parse_http_url(std::string_view url);

struct http_response {
  unsigned status = 0;
  std::string reason;
  std::string content_type;
  std::string body;
};

/// GET base_path + `target` (path and query, already encoded) with `headers`. The host must
/// resolve to loopback addresses only (INVALID_ARGUMENT otherwise). Connection, timeout and
/// protocol failures are UNAVAILABLE; any HTTP status is a response. Bodies over 64 MiB fail.
result<http_response> http_get(const http_endpoint& ep, const std::string& target,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               std::chrono::milliseconds timeout);

} // namespace factum::tools
