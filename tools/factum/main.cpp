// main.cpp: the `factum` executable. Dispatches to subcommands (inspect, serve, bench); each
// subcommand family lives in its own module and registers itself here.
#include <CLI/CLI.hpp>

#include "factum/tools/inspect.hpp"
#include "factum/tools/loadgen.hpp"
#include "factum/tools/serve.hpp"

int main(int argc, char** argv) {
  CLI::App app{"factum: durable entities on actors, one SQLite database per entity"};
  app.require_subcommand(1);
  int exit_code = 0;
  factum::tools::add_inspect_command(app, &exit_code);
  factum::tools::add_serve_command(app, &exit_code);
  factum::tools::add_bench_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
