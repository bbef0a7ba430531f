// main.cpp: the `factum` executable. Dispatches to subcommands (inspect, operate, serve, bench,
// cluster, backup, restore, fork); each subcommand family lives in its own module and registers
// itself here. The main thread.
#include <CLI/CLI.hpp>

#include "console.hpp"
#include "factum/cluster/cli.hpp"
#include "factum/examples/examples.hpp"
#include "factum/tools/backup.hpp"
#include "factum/tools/inspect.hpp"
#include "factum/tools/loadgen.hpp"
#include "factum/tools/serve.hpp"

int main(int argc, char** argv) {
  CLI::App app{"factum: durable entities on actors, one SQLite database per entity"};
  app.require_subcommand(1);
  int exit_code = 0;
  factum::tools::add_inspect_command(app, &exit_code);
  factum::tools::add_operate_command(app, &exit_code);
  factum::tools::add_fork_command(app, &exit_code);
  // `factum serve` hosts the built-in types and the examples (a tenant's own server hosts its
  // own: factum::tools::serve_main, docs/embedding.md).
  factum::entity_registry types;
  factum::add_builtin_types(types);
  factum::examples::add_example_types(types);
  // The chat example's page, served when the configuration hosts `room`.
  factum::tools::serve_page chat{"/examples/chat", {}, "room"};
  chat.page.body = std::string(factum::examples::chat_page());
  // The web console (docs/console.md), always served.
  auto pages = factum::console::pages();
  pages.push_back(std::move(chat));
  factum::tools::add_serve_command(app, &exit_code, std::move(types), std::move(pages));
  factum::tools::add_bench_command(app, &exit_code);
  factum::cluster::add_cluster_command(app, &exit_code);
  factum::tools::add_backup_commands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
