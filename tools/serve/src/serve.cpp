// serve.cpp: `factum serve`: loads the configuration, starts the runtime and the HTTP gateway,
// waits for SIGTERM/SIGINT with sigwait (the signals are blocked in every thread, so no handler
// runs asynchronously), then stops gracefully: no new connections, in-flight requests finish,
// the runtime drains and commits, exit 0. Runs on the thread that calls CLI::App::parse; the log
// writer it hands the gateway, the runtime and the cluster node is called from their threads.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>

#include <pthread.h>
#include <unistd.h>

#include "factum/tools/serve.hpp"

#include "factum/cluster/node.hpp"

namespace factum::tools {

using nlohmann::json;

namespace {

/// Writes log lines (JSON objects, as the gateway, the runtime and the cluster node make them)
/// on stderr in one form, each whole with its newline. Any thread.
std::function<void(std::string_view)> stderr_log(log_format format) {
  return [format](std::string_view line) {
    auto s = format_log_line(line, format);
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), stderr);
    std::fflush(stderr);
  };
}

/// A line of serve's own: `fields` with the time, in the gateway's format, to `write`.
void log_line(const std::function<void(std::string_view)>& write, json fields) {
  json out = {{"ts", format_utc_ms(now_ms())}};
  for (auto& [k, v] : fields.items())
    out[k] = std::move(v);
  write(out.dump(-1, ' ', false, json::error_handler_t::replace));
}

const char* signal_name(int sig) {
  switch (sig) {
  case SIGTERM: return "SIGTERM";
  case SIGINT: return "SIGINT";
  default: return "signal";
  }
}

/// Joins the cluster as the "cluster" object says (docs/cluster.md); its lines go to `log`.
result<std::shared_ptr<cluster::node>>
start_cluster_node(const serve_cluster& c, const std::string& data_dir,
                   std::function<void(std::string_view)> log) {
  cluster::node_config n;
  n.name = c.name;
  n.node_id = c.node_id;
  n.etcd = c.etcd;
  n.advertise = c.advertise;
  n.shards = c.shards;
  n.lease_ttl = c.lease_ttl;
  n.min_nodes = c.min_nodes;
  n.storage = c.storage;
  n.replication.servers = c.replication_servers;
  n.replication.replicas = c.replication_replicas;
  n.replication.ack_timeout = c.replication_ack_timeout;
  n.data_dir = data_dir;
  n.secret = c.secret;
  n.log = std::move(log);
  return cluster::node::start(std::move(n));
}

} // namespace

tool_fn static_fallback(json body) {
  return [body = std::move(body)](const tool_request&, std::function<void(tool_reply)> done) {
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    r.body = body;
    done(std::move(r));
  };
}

void add_pages(serve_config& cfg, const std::vector<serve_page>& pages) {
  for (const auto& p : pages) {
    bool hosted = p.type.empty() || std::find(cfg.type_names.begin(), cfg.type_names.end(),
                                              p.type) != cfg.type_names.end();
    if (!hosted)
      continue;
    cfg.http.pages[p.path] = p.page;
    if (p.home)
      cfg.http.home = p.path;
  }
}

int run_serve(serve_config cfg) {
  // Block the stop signals before any thread exists, so every thread inherits the mask and
  // only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // One writer for every log line, in the configured form (a caller's own log functions stay).
  auto write_log = stderr_log(cfg.log);
  if (!cfg.http.log)
    cfg.http.log = write_log;
  if (!cfg.runtime.log)
    cfg.runtime.log = write_log;
  auto log = [&write_log](json fields) { log_line(write_log, std::move(fields)); };

  auto listen =
    (cfg.http.host.find(':') != std::string::npos ? "[" + cfg.http.host + "]" : cfg.http.host) +
    ":" + std::to_string(cfg.http.port);
  auto data_dir = cfg.runtime.data_dir.string();
  auto durability_name = cfg.runtime.mode == durability::full ? "full" : "normal";
  json tenants = json::array();
  for (auto& t : cfg.http.tenants)
    tenants.push_back(t.name);
  // The HTTP transport of the configured tools (its own I/O thread). It outlives the runtime:
  // the runtime's last turns may still call tools while it drains.
  auto tool_client = std::make_unique<http_tool_client>();
  json tool_names = json::array();
  for (auto& t : cfg.tool_specs) {
    auto fn = tool_client->make_tool(t.name, t.http);
    if (!fn) {
      log({{"level", "error"},
           {"event", "start_failed"},
           {"detail", "tools." + t.name + ": " + fn.error().message()}});
      return 1;
    }
    cfg.runtime.tools[t.name] = std::move(fn.value());
    auto pol = t.policy;
    if (t.fallback_body)
      pol.fallback = static_fallback(*t.fallback_body);
    pol.refresh_auth = tool_client->auth_refresher(t.name); // null without auth_refresh
    cfg.runtime.tool_policies[t.name] = std::move(pol);
    tool_names.push_back(t.name);
  }
  // The outbox's sinks: HTTP ones over the tools' client, NATS ones each with a connection and
  // threads of its own. Like the tools, they outlive the runtime (its last relays drain).
  std::vector<std::shared_ptr<nats_sink>> nats_sinks;
  json sink_names = json::array();
  for (auto& o : cfg.outbox_sinks) {
    auto sink = o.sink;
    status failed;
    if (o.kind == "http") {
      auto fn = tool_client->make_tool("outbox:" + o.name, o.http);
      if (fn)
        sink.deliver = http_outbox_sink(o.name, std::move(fn.value()));
      else
        failed = fn.error();
    } else {
      auto n = nats_sink::start(o.nats);
      if (n) {
        sink.deliver = (*n)->deliver();
        nats_sinks.push_back(std::move(n.value()));
      } else {
        failed = n.error();
      }
    }
    if (!failed) {
      log({{"level", "error"},
           {"event", "start_failed"},
           {"detail", "outbox.sinks." + o.name + ": " + failed.message()}});
      return 1;
    }
    cfg.runtime.outbox.sinks[o.name] = std::move(sink);
    sink_names.push_back(o.name);
  }
  // Cluster mode: the node joins (lease, registration, its shards) before the runtime starts,
  // and leaves after it stopped, so that the runtime's last commits are still owned.
  std::shared_ptr<cluster::node> member;
  if (cfg.cluster) {
    auto n = start_cluster_node(*cfg.cluster, data_dir, write_log);
    if (!n) {
      log({{"level", "error"},
           {"event", "start_failed"},
           {"detail", "cluster: " + n.error().to_string()}});
      return 1;
    }
    member = *n;
    if (cfg.cluster->storage == "shared")
      cfg.runtime.entity_root = cfg.cluster->shared_dir;
    cfg.runtime.replicator = member->replicator(); // null unless storage "replicated"
    cfg.runtime.replicated_image_min_bytes = cfg.cluster->replication_image_min_bytes;
    cfg.runtime.replicated_image_ratio = cfg.cluster->replication_image_ratio;
    cfg.runtime.ownership = member;
    cfg.http.cluster = member;
  }
  auto rt = runtime::start(std::move(cfg.runtime));
  if (!rt) {
    log({{"level", "error"},
         {"event", "start_failed"},
         {"detail", "runtime: " + rt.error().to_string()}});
    return 1;
  }
  for (auto& note : (*rt)->start_notes())
    log({{"level", "warn"}, {"event", "start_note"}, {"detail", note}});
  if (member)
    member->attach(**rt); // planned shard moves of this node's shards run from now on
  auto srv = http_server::start(**rt, cfg.http);
  if (!srv) {
    log({{"level", "error"}, {"event", "start_failed"}, {"detail", srv.error().message()}});
    if (member)
      member->detach();
    (*rt)->stop();
    return 1;
  }
  auto url =
    "http://" +
    (cfg.http.host.find(':') != std::string::npos ? "[" + cfg.http.host + "]" : cfg.http.host) +
    ":" + std::to_string((*srv)->port());
  json start = {{"level", "info"},
                {"event", "start"},
                {"listen", listen},
                {"port", (*srv)->port()},
                {"url", url},
                {"data_dir", data_dir},
                {"durability", durability_name},
                {"types", cfg.type_names},
                {"tenants", tenants},
                {"tools", tool_names},
                {"outbox_sinks", sink_names},
                {"dev", cfg.dev},
                {"pid", static_cast<int64_t>(::getpid())}};
  if (cfg.http.pages.count("/console")) // the web console (tools/console), where GET / leads
    start["console"] = url + "/console";
  log(std::move(start));

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  log({{"level", "info"}, {"event", "stopping"}, {"signal", signal_name(sig)}});
  // A second signal while draining ends the process at once.
  std::thread([stop_signals, format = cfg.log] {
    int again = 0;
    while (sigwait(&stop_signals, &again) != 0) {
    }
    json line = {{"ts", format_utc_ms(now_ms())}, {"level", "error"}, {"event", "forced_exit"}};
    auto msg = format_log_line(line.dump(), format) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    std::_Exit(1);
  }).detach();

  auto t0 = std::chrono::steady_clock::now();
  (*srv)->begin_shutdown();
  bool drained = (*srv)->wait_idle(cfg.shutdown_timeout);
  // The I/O threads end before the runtime stops: a thread that called into CAF keeps CAF's
  // logger alive, and the actor system's destructor waits for it.
  (*srv)->stop();
  if (member)
    member->detach(); // a move under way resumes at the next start
  (*rt)->stop();
  tool_client->stop();
  for (auto& n : nats_sinks)
    n->stop();
  if (member)
    member->stop();
  auto count = [&m = (*rt)->metrics()](std::string_view name) {
    return static_cast<uint64_t>(m.value(name));
  };
  log({{"level", drained ? "info" : "warn"},
       {"event", "stopped"},
       {"drained", drained},
       {"duration_ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count()},
       {"calls", count("factum_calls_total")},
       {"commits", count("factum_commits_total")},
       {"facts", count("factum_facts_total")}});
  srv->reset();
  rt->reset();
  return 0;
}

namespace {

/// The command line of a server: --config, --listen, --data, --log-format.
struct serve_options {
  std::string config;
  std::string listen;
  std::string data;
  std::string log_format; ///< "text", "json", or "" (text when stderr is a terminal)
};

void add_serve_options(CLI::App& cmd, serve_options& o) {
  cmd.add_option("--config", o.config, "JSON configuration file (docs/configuration.md)")
    ->type_name("FILE")
    ->required();
  cmd.add_option("--listen", o.listen, "HOST:PORT to listen on (overrides \"listen\")")
    ->type_name("HOST:PORT");
  cmd.add_option("--data", o.data, "Data directory (overrides \"data_dir\")")->type_name("DIR");
  cmd
    .add_option("--log-format", o.log_format,
                "Log lines on stderr: text (one readable line per event) or json (one JSON "
                "object per line); default text on a terminal, json elsewhere")
    ->type_name("FORMAT")
    ->check(CLI::IsMember({"text", "json"}));
}

/// Loads the configuration with the command line's overrides and runs the server; its exit code.
int serve_with(const serve_options& o, const entity_registry& available,
               const std::vector<serve_page>& pages) {
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "factum serve: bad configuration: %s\n", msg.c_str());
    return 2;
  };
  auto cfg = load_serve_config(o.config, available);
  if (!cfg)
    return fail(cfg.error().message());
  if (!o.listen.empty())
    if (auto st = apply_listen(*cfg, o.listen); !st)
      return fail("--listen: " + st.message());
  if (!o.data.empty())
    cfg->runtime.data_dir = o.data;
  bool text = o.log_format.empty() ? ::isatty(STDERR_FILENO) == 1 : o.log_format == "text";
  cfg->log = text ? log_format::text : log_format::json;
  if (cfg->runtime.data_dir.empty())
    return fail("data_dir: required (in the configuration or as --data DIR)");
  if (cfg->cluster && cfg->cluster->storage == "shared") {
    std::error_code ec;
    auto a = std::filesystem::weakly_canonical(cfg->runtime.data_dir, ec);
    auto b = std::filesystem::weakly_canonical(cfg->cluster->shared_dir, ec);
    if (a == b)
      return fail("cluster.shared_dir: must not be data_dir (each node keeps its own data_dir "
                  "for its lock and indexes)");
  }
  add_pages(*cfg, pages);
  return run_serve(std::move(*cfg));
}

} // namespace

void add_serve_command(CLI::App& app, int* exit_code, entity_registry available,
                       std::vector<serve_page> pages) {
  auto o = std::make_shared<serve_options>();
  auto types = std::make_shared<entity_registry>(std::move(available));
  auto offered = std::make_shared<std::vector<serve_page>>(std::move(pages));
  auto* cmd = app.add_subcommand("serve", "Run the HTTP API server (docs/http-api.md)");
  add_serve_options(*cmd, *o);
  cmd->callback([o, types, offered, exit_code] { *exit_code = serve_with(*o, *types, *offered); });
}

int serve_main(int argc, char** argv, entity_registry available, std::vector<serve_page> pages) {
  CLI::App app{"An HTTP server of durable entities (factum; docs/http-api.md)"};
  serve_options o;
  add_serve_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return serve_with(o, available, pages);
}

} // namespace factum::tools
