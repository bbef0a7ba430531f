// cli.hpp: the `factum` command line as a function, so that the product executable and the
// examples' executable share it and differ only in the entity types and pages they serve.
// The main thread.
#pragma once

#include <vector>

#include "factum/runtime/runtime.hpp"
#include "factum/tools/serve.hpp"

namespace factum::tools {

/// Parses argv and runs one subcommand (inspect, operate, fork, serve, bench, cluster, backup,
/// restore). `types` are the entity types `factum serve` hosts; `pages` the pages it serves
/// beside the web console (which is always served). Returns the process's exit code.
int run_cli(int argc, char** argv, entity_registry types, std::vector<serve_page> pages = {});

} // namespace factum::tools
