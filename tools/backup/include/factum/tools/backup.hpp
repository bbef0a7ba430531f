// factum/tools/backup.hpp: the `factum backup` and `factum restore` subcommands
// (docs/operations.md). Registration runs on the thread that builds the command line; the
// subcommands then run on the thread that calls CLI::App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace factum::tools {

/// Adds `backup` and `restore` to `app`. When one of them runs, it writes its exit code to
/// *exit_code: 0 done, 1 the backup or restore failed (nothing half-written is left for use),
/// 2 the arguments were refused before anything was written.
void add_backup_commands(CLI::App& app, int* exit_code);

} // namespace factum::tools
