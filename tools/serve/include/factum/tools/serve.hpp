// factum/tools/serve.hpp: the `factum serve` subcommand: its JSON configuration (loading and
// validation) and the process around the runtime and the HTTP gateway (signals, graceful stop).
// Registration and the subcommand run on the thread that calls CLI::App::parse.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "factum/runtime/http_server.hpp"
#include "factum/runtime/http_tool.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/status.hpp"

namespace factum::tools {

/// One entry of the "tools" object, validated (docs/configuration.md, "tools").
struct serve_tool {
  std::string name;
  /// The HTTP transport (url, timeouts, pool, headers).
  http_tool_options http;
  /// Retry, breaker, budget, price, idempotency; `fallback` stays empty (see fallback_body).
  tool_policy policy;
  /// The static answer while the breaker is open ("fallback": {"body": ...}); none if unset.
  std::optional<nlohmann::json> fallback_body;
};

/// Everything `factum serve` runs with, after validation (docs/configuration.md).
struct serve_config {
  runtime_config runtime;
  http_server_config http;
  /// The hosted entity types, in the order the configuration named them.
  std::vector<std::string> type_names;
  /// The "tools" object as written (validated). Default {}.
  nlohmann::json tools = nlohmann::json::object();
  /// The tools, parsed: run_serve gives each an HTTP transport and its policy. Default none.
  std::vector<serve_tool> tool_specs;
  /// Whether plain-text API keys are allowed ("dev": true). Default false.
  bool dev = false;
  /// How long a graceful stop waits for in-flight requests. Default 30 s.
  std::chrono::milliseconds shutdown_timeout{30'000};
};

/// Validates a configuration document; INVALID_ARGUMENT names the offending key.
result<serve_config> parse_serve_config(const nlohmann::json& doc);

/// Reads and validates a configuration file.
result<serve_config> load_serve_config(const std::filesystem::path& file);

/// Applies a `--listen host:port` override; INVALID_ARGUMENT when it does not parse.
status apply_listen(serve_config& cfg, std::string_view listen);

/// The runtime's tool_fn for a static fallback answer: ok, status 200, `body`.
tool_fn static_fallback(nlohmann::json body);

/// Runs the server until SIGTERM or SIGINT, then stops gracefully. Returns the exit code
/// (0 after a graceful stop, 1 when the runtime or the listener could not start).
int run_serve(serve_config cfg);

/// Adds `serve --config FILE [--listen HOST:PORT] [--data DIR]` to `app`. When it runs, it
/// writes its exit code to *exit_code (0 stopped by a signal, 1 start failure, 2 bad config).
void add_serve_command(CLI::App& app, int* exit_code);

} // namespace factum::tools
