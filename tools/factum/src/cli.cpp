// cli.cpp: the `factum` command line (run_cli). Each subcommand family lives in its own module
// and registers itself here. The main thread.
#include "factum/tools/cli.hpp"

#include <CLI/CLI.hpp>

#include "console.hpp"
#include "factum/cluster/cli.hpp"
#include "factum/tools/backup.hpp"
#include "factum/tools/inspect.hpp"
#include "factum/tools/loadgen.hpp"

namespace factum::tools {

int run_cli(int argc, char** argv, entity_registry types, std::vector<serve_page> pages) {
  CLI::App app{"factum: durable entities on actors, one SQLite database per entity"};
  app.require_subcommand(1);
  int exit_code = 0;
  add_inspect_command(app, &exit_code);
  add_operate_command(app, &exit_code);
  add_fork_command(app, &exit_code);
  // The web console (docs/console.md), always served, before the caller's pages.
  auto all_pages = console::pages();
  for (auto& p : pages)
    all_pages.push_back(std::move(p));
  add_serve_command(app, &exit_code, std::move(types), std::move(all_pages));
  add_bench_command(app, &exit_code);
  cluster::add_cluster_command(app, &exit_code);
  add_backup_commands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}

} // namespace factum::tools
