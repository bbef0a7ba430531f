// factum/tools/serve.hpp: the server around the runtime and the HTTP gateway, as `factum serve`
// runs it and as a tenant's own `main` does (serve_main): the JSON configuration (loading and
// validation against the entity types the program hosts), signals, logs and the graceful stop
// (docs/embedding.md, docs/configuration.md). Everything runs on the thread that calls it.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "factum/gateway/http_server.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/sinks/http_tool.hpp"
#include "factum/sinks/nats_sink.hpp"

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

/// One sink of the "outbox" object, validated (docs/configuration.md, "outbox"); run_serve makes
/// its transport. Its retry and breaker are in `sink` (its `deliver` stays empty here).
struct serve_outbox_sink {
  std::string name;
  std::string kind; ///< "http" or "nats"
  http_tool_options http;
  nats_sink_options nats;
  outbox_sink sink;
};

/// The "cluster" object, validated (docs/cluster.md). Every field documents its default.
struct serve_cluster {
  std::string name = "factum";   ///< the etcd prefix /factum/<name>/
  std::string node_id;           ///< required: this node's id, stable across restarts
  std::vector<std::string> etcd; ///< required: etcd client URLs (http://host:port)
  std::string advertise;         ///< required: host:port where the other nodes reach this one
  uint32_t shards = 64;          ///< fixed when the cluster is created; 1..4096
  std::chrono::milliseconds lease_ttl{10'000}; ///< 1 s..10 min
  uint32_t min_nodes = 1; ///< live nodes before a never-used shard is placed; 1..1024
  /// "local": each node its own data directory; "shared": the entity files under shared_dir,
  /// which every node sees; "replicated": each node its own copy, every commit in its shard's
  /// log on NATS JetStream (`replication`). Default "local".
  std::string storage = "local";
  /// storage "replicated": the NATS servers of the log (nats://host:port), the log's replicas
  /// (1, 3 or 5; default 3) and how long a commit waits for its acknowledgement (default 5 s).
  std::vector<std::string> replication_servers;
  int replication_replicas = 3;
  std::chrono::milliseconds replication_ack_timeout{5'000};
  /// storage "replicated": an entity's log is compacted by an image of its file once the
  /// changes since its last image reach `replication_image_ratio` times the file's size and at
  /// least `replication_image_min_bytes` (0: never; runtime_config::replicated_image_min_bytes).
  /// Defaults 1 MiB and 1.
  uint64_t replication_image_min_bytes = uint64_t{1} << 20;
  double replication_image_ratio = 1.0;
  /// storage "shared": the directory of the entity files, the same on every node (each node
  /// keeps its own data_dir for its lock, indexes and spare files, on the same file system).
  std::string shared_dir;
  /// Shared by the cluster's nodes: authenticates the files a shard move sends (>= 16
  /// characters). Empty: this node neither sends nor takes shards. Default empty.
  std::string secret;
};

/// How `factum serve` writes its log lines on stderr (`--log-format`; docs/http-api.md, "Logs").
enum class log_format {
  /// One JSON object per line, as the gateway, the runtime and the cluster node make them.
  json,
  /// One readable line per event: time, level, event, then key=value pairs (`detail` last).
  text,
};

/// One log line (a JSON object, as the gateway, the runtime and the cluster node make them) in
/// `format`, without a newline. What is not a JSON object is returned as it is.
std::string format_log_line(std::string_view line, log_format format);

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
  /// The outbox's sinks, parsed (their routes and batch are in runtime.outbox). Default none.
  std::vector<serve_outbox_sink> outbox_sinks;
  /// Whether plain-text API keys are allowed ("dev": true). Default false.
  bool dev = false;
  /// How long a graceful stop waits for in-flight requests. Default 30 s.
  std::chrono::milliseconds shutdown_timeout{30'000};
  /// Cluster mode (docs/cluster.md). Default none: the node runs alone.
  std::optional<serve_cluster> cluster;
  /// The form of the log lines on stderr (run_serve gives the gateway, the runtime and the
  /// cluster node a writer in this form unless they have a log function of their own). Default
  /// JSON lines; `factum serve` chooses text when stderr is a terminal (`--log-format`).
  log_format log = log_format::json;
};

/// A static page a server program offers (http_server_config::pages), served when the
/// configuration hosts the entity type it talks to.
struct serve_page {
  /// Its absolute path ("/examples/chat").
  std::string path;
  http_page page;
  /// The entity type the page is for: served only when the configuration's types include it.
  /// Empty: always served.
  std::string type;
  /// GET / leads to this page when it is served (http_server_config::home). Default false.
  bool home = false;
};

/// Puts into cfg.http.pages each of `pages` whose type cfg hosts.
void add_pages(serve_config& cfg, const std::vector<serve_page>& pages);

/// Validates a configuration document; its "types" are chosen among `available` (all of them
/// when it names none). INVALID_ARGUMENT names the offending key.
result<serve_config> parse_serve_config(const nlohmann::json& doc,
                                        const entity_registry& available);

/// Reads and validates a configuration file (see parse_serve_config).
result<serve_config> load_serve_config(const std::filesystem::path& file,
                                       const entity_registry& available);

/// Applies a `--listen host:port` override; INVALID_ARGUMENT when it does not parse.
status apply_listen(serve_config& cfg, std::string_view listen);

/// The runtime's tool_fn for a static fallback answer: ok, status 200, `body`.
tool_fn static_fallback(nlohmann::json body);

/// Runs the server until SIGTERM or SIGINT, then stops gracefully. Returns the exit code
/// (0 after a graceful stop, 1 when the runtime or the listener could not start).
int run_serve(serve_config cfg);

/// Adds `serve --config FILE [--listen HOST:PORT] [--data DIR] [--log-format text|json]` (text
/// by default when stderr is a terminal, else JSON lines) to `app`, hosting types among
/// `available`, and those of `pages` whose type it hosts (add_pages). When it runs, it writes
/// its exit code to *exit_code (0 stopped by a signal, 1 start failure, 2 bad configuration).
void add_serve_command(CLI::App& app, int* exit_code, entity_registry available,
                       std::vector<serve_page> pages = {});

/// A whole server program: `argv` takes `--config FILE [--listen HOST:PORT] [--data DIR]
/// [--log-format text|json]` as `factum serve` does, the configuration chooses its types among
/// `available`, and the process runs until SIGTERM or SIGINT. Returns the exit code (as
/// add_serve_command; 0 for --help). A tenant's own `main`: register the types, then `return
/// factum::tools::serve_main(argc, argv, std::move(types));`. `pages` as add_serve_command's.
int serve_main(int argc, char** argv, entity_registry available,
               std::vector<serve_page> pages = {});

} // namespace factum::tools
