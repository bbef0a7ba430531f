// factum/tools/inspect.hpp: the `factum inspect` subcommand family (read-only fact inspection).
#pragma once

#include <CLI/CLI.hpp>

namespace factum::tools {

/// Adds `inspect` and its subcommands to `app`. When one of them runs, it writes its exit code
/// to *exit_code (0 ok; docs/inspect.md lists the others).
void add_inspect_command(CLI::App& app, int* exit_code);

} // namespace factum::tools
