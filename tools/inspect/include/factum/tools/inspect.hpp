// factum/tools/inspect.hpp: the `factum inspect` subcommand family (read-only fact inspection)
// and `factum operate` (an operator's changes through a running server's HTTP API).
// Registration runs on the thread that builds the command line; the subcommand then runs on
// the thread that calls CLI::App::parse.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace factum::tools {

/// Where `factum inspect` writes and what it takes from its surroundings. The defaults are the
/// process's: std::cout, std::cerr, isatty(STDOUT_FILENO), the wall clock. Tests replace them.
struct inspect_io {
  std::ostream* out = nullptr;    ///< results; nullptr: std::cout
  std::ostream* err = nullptr;    ///< messages ("factum inspect: ..."); nullptr: std::cerr
  std::optional<bool> out_is_tty; ///< a table or JSON lines by default; empty: isatty(1)
  std::function<int64_t()> clock; ///< ms since the epoch (key expiry, ages); empty: now
  std::function<void(int64_t poll)> on_poll; ///< follow: called after each poll; may be empty
};

/// Adds `inspect` and its subcommands to `app`. When one of them runs, it writes its exit code
/// to *exit_code (0 ok; docs/inspect.md lists the others).
void add_inspect_command(CLI::App& app, int* exit_code);

/// The same with explicit streams, terminal detection and clock (tests).
void add_inspect_command(CLI::App& app, int* exit_code, inspect_io io);

/// Adds `operate` and its subcommands to `app`: an operator's changes through the HTTP API of a
/// running server (bulk dead letter actions with a dry run, one dead letter, a breaker, the
/// degradation floor). The exit code goes to *exit_code as for inspect.
void add_operate_command(CLI::App& app, int* exit_code);
void add_operate_command(CLI::App& app, int* exit_code, inspect_io io);

/// Adds `fork` to `app`: `factum operate fork` under a name of its own (a new entity from an
/// entity's state now or at a bookmark, through a running server).
void add_fork_command(CLI::App& app, int* exit_code, inspect_io io = {});

/// One entity rolled back in place to a bookmark of its archive, through a running server's
/// rollback route (`factum restore --entity`, `factum operate rollback`).
struct entity_rollback_args {
  std::string server;  ///< the server's URL (plain http to a loopback address)
  std::string api_key; ///< a key with scope operate of the entity's tenant
  std::string entity;  ///< TENANT/TYPE/ID (the tenant checked by the server) or TYPE/ID
  std::string bookmark;
  std::string note;
  double http_timeout_s = 10;
  bool json = false; ///< JSON lines even on a terminal
};
/// Runs it; messages start "factum restore:". The exit code (docs/inspect.md, "Exit codes").
int run_entity_rollback(const entity_rollback_args& a, const inspect_io& io = {});

} // namespace factum::tools
