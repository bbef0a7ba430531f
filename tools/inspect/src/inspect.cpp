// inspect.cpp: placeholder registration until the inspection tool lands.
#include "factum/tools/inspect.hpp"

namespace factum::tools {

void add_inspect_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Inspect entity databases (read-only)");
  cmd->callback([exit_code] { *exit_code = 0; });
}

} // namespace factum::tools
