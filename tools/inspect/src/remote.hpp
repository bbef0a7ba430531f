// remote.hpp (private to factum_inspect): reads facts, dead letters and breakers of an entity,
// and the fleet views of a tenant, and sends `factum operate`'s actions, through the HTTP API of a
// running `factum serve` (docs/http-api.md; the tenant comes from the API key), with factum's
// synchronous HTTP client over plain HTTP to a loopback address only (the API key travels in a
// header). Used by the one thread that runs a subcommand.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "factum/http/client.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/fact.hpp"

namespace factum::tools {

/// Parses --server's `http://host[:port][/base]` (http::client::parse_url); INVALID_ARGUMENT
/// names the URL and says why not (https has its own advice).
result<http::client::url> parse_server_url(std::string_view url);

/// The query string (with '?', or "") for the facts route: type, subtype, since, until,
/// after_seq, trace_id, limit. The API has no filter for tool, idempotency key or before_seq,
/// and no order: those are applied by the caller.
std::string facts_query(const fact_filter& f);

class remote_api {
 public:
  /// Checks the URL (plain http only) and keeps the key. INVALID_ARGUMENT on a bad URL. Each
  /// request opens its own connection (Connection: close) to an address that must be loopback
  /// (INVALID_ARGUMENT otherwise); connection, timeout and protocol failures are UNAVAILABLE;
  /// bodies over 64 MiB fail.
  static result<remote_api> make(std::string_view url, std::string api_key,
                                 std::chrono::milliseconds timeout);

  /// One page of facts, oldest first (GET .../facts?...).
  result<std::vector<fact>> facts(const entity_key& key, const fact_filter& f) const;
  /// GET .../dead-letters.
  result<std::vector<dead_letter_record>> dead_letters(const entity_key& key) const;
  /// GET .../breakers.
  result<std::vector<breaker_record>> breakers(const entity_key& key) const;
  /// GET `target` (a path under the server's base, with its query); a 2xx JSON body (with
  /// `link`, its Link header too: "" without one), else NOT_FOUND (404) or UNAVAILABLE naming
  /// the problem. The fleet views (fleet_cmd.cpp) read their pages with it.
  result<nlohmann::json> get_json(const std::string& target, std::string* link = nullptr) const;
  /// `method` (POST, PUT) of `target` with a JSON `body` (`factum operate`); answers and errors
  /// as get_json.
  result<nlohmann::json> send_json(const char* method, const std::string& target,
                                   const nlohmann::json& body) const;

 private:
  remote_api(http::client::url server, std::string api_key, std::chrono::milliseconds timeout)
      : server_(std::move(server)), api_key_(std::move(api_key)), timeout_(timeout) {}
  std::string entity_path(const entity_key& key, const char* what) const;
  result<nlohmann::json> exchange(const char* method, const std::string& target,
                                  const std::string* body, std::string* link) const;

  http::client::url server_;
  std::string api_key_;
  std::chrono::milliseconds timeout_;
};

} // namespace factum::tools
