// inspect.cpp: registers `factum inspect` and its subcommands with CLI11 and runs the chosen
// one. Registration and the run happen on the thread that builds and parses the command line.
#include "factum/tools/inspect.hpp"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "factum/storage/fact.hpp"

namespace factum::tools {

std::unique_ptr<run_ctx> make_run_ctx(const inspect_io& io, const common_options& c,
                                      std::string tool) {
  std::ostream& o = io.out ? *io.out : std::cout;
  std::ostream& e = io.err ? *io.err : std::cerr;
  bool tty = io.out_is_tty ? *io.out_is_tty : ::isatty(STDOUT_FILENO) == 1;
  auto out = std::make_unique<run_ctx>(o, e);
  out->tool = std::move(tool);
  out->clock = io.clock ? io.clock : [] { return now_ms(); };
  out->on_poll = io.on_poll;
  out->json = c.json || (!c.table && !tty);
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  out->color = tty && !out->json && !c.no_color && !(no_color && *no_color) &&
               !(term && std::string_view(term) == "dumb");
  out->local_time = c.local_time;
  return out;
}

namespace {

struct shared_state {
  inspect_io io;
  int* exit_code = nullptr;
};

void add_output_options(CLI::App* sub, common_options& c) {
  sub->add_flag("--json", c.json, "JSON lines (the default when stdout is not a terminal)");
  sub->add_flag("--table", c.table, "An aligned table even when stdout is not a terminal");
  sub->add_flag("--no-color", c.no_color, "No ANSI colours (also NO_COLOR=1)");
  sub->add_flag("--local", c.local_time, "Times in local time instead of UTC");
}

void add_data_option(CLI::App* sub, common_options& c) {
  sub->add_option("--data", c.data, "Data directory of the entities (read-only)")->type_name("DIR");
}

void add_server_options(CLI::App* sub, common_options& c) {
  sub
    ->add_option("--server", c.server,
                 "Read through the HTTP API of a running server instead of --data "
                 "(plain http to a loopback address, e.g. http://127.0.0.1:8080)")
    ->type_name("URL");
  sub->add_option("--api-key", c.api_key, "API key of the tenant, for --server")
    ->type_name("KEY")
    ->envname("FACTUM_API_KEY");
  sub->add_option("--http-timeout", c.http_timeout_s, "Seconds per HTTP request (default 10)")
    ->type_name("SECONDS")
    ->check(CLI::PositiveNumber);
}

/// --archive, --as-of and --as-of-seq: read the entity as it was at an archived commit.
void add_as_of_options(CLI::App* sub, common_options& c) {
  sub
    ->add_option("--archive", c.archive,
                 "The continuous archive of the server (its archive_dir; read-only)")
    ->type_name("DIR");
  sub
    ->add_option("--as-of", c.as_of,
                 "As it was at the last commit at or before this time (ISO 8601, epoch ms or an "
                 "age: 2h), or at a bookmark (EPOCH.GEN.END.SEQ); with --archive, not --data")
    ->type_name("TIME|BOOKMARK");
  sub
    ->add_option("--as-of-seq", c.as_of_seq,
                 "As it was at the last commit whose last fact is at most this seq")
    ->type_name("SEQ");
}

void add_entity_arg(CLI::App* sub, std::string& entity) {
  sub->add_option("entity", entity, "The entity, as tenant/type/id")
    ->type_name("TENANT/TYPE/ID")
    ->required();
}

/// What a per-entity state command reads: the entity under --data now, or with --archive and
/// --as-of as it was; and how it prints.
void add_state_source(CLI::App* sub, common_options& c, std::string& entity) {
  add_data_option(sub, c);
  add_output_options(sub, c);
  add_entity_arg(sub, entity);
  add_as_of_options(sub, c);
}

void add_scope_arg(CLI::App* sub, std::string& scope, const char* what) {
  sub->add_option("scope", scope, what)->type_name("TENANT[/TYPE[/ID]]");
}

void add_fact_filters(CLI::App* sub, fact_options& o) {
  sub->add_option("--type", o.type, "Only facts of this type (invocation, error, cost, ...)");
  sub->add_option("--subtype", o.subtype, "Only facts of this subtype");
  sub
    ->add_option("--since", o.since,
                 "Only facts at or after this time: ISO 8601 (2024-01-17T14:00:00Z), epoch ms "
                 "or an age (15m, 2h, 7d)")
    ->type_name("TIME");
  sub->add_option("--until", o.until, "Only facts before this time (same forms as --since)")
    ->type_name("TIME");
  sub->add_option("--after-seq", o.after_seq, "Only facts with a seq greater than this")
    ->type_name("SEQ");
  sub->add_option("--before-seq", o.before_seq, "Only facts with a seq less than this")
    ->type_name("SEQ");
  sub->add_option("--trace", o.trace, "Only facts of this trace id")->type_name("TRACE_ID");
  sub->add_option("--tool", o.tool, "Only facts of this tool id")->type_name("TOOL_ID");
  sub->add_option("--key", o.key, "Only facts of this idempotency key")->type_name("KEY");
}

void add_follow_options(CLI::App* sub, fact_options& o) {
  sub->add_option("--max-facts", o.max_facts, "Stop after this many new facts (default: no bound)")
    ->type_name("N")
    ->check(CLI::NonNegativeNumber);
  sub->add_option("--timeout", o.timeout_s, "Stop after this many seconds (default: no bound)")
    ->type_name("SECONDS")
    ->check(CLI::NonNegativeNumber);
  sub->add_option("--interval", o.interval_ms, "Poll period in milliseconds (default 200)")
    ->type_name("MS")
    ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
}

bool make_ctx(const shared_state& s, const common_options& c, std::unique_ptr<run_ctx>& out) {
  out = make_run_ctx(s.io, c, "factum inspect");
  if (c.json && c.table) {
    *s.exit_code = out->fail(exit_usage, "--json and --table exclude each other");
    return false;
  }
  return true;
}

/// Registers a subcommand whose options live in a `T` owned by the callback.
template <class T, class Setup, class Run>
CLI::App* subcommand(CLI::App* parent, std::shared_ptr<shared_state> s, const char* name,
                     const char* description, Setup setup, Run run) {
  auto* sub = parent->add_subcommand(name, description);
  auto opts = std::make_shared<T>();
  setup(sub, *opts);
  sub->callback([s, opts, run] {
    std::unique_ptr<run_ctx> ctx;
    if (!make_ctx(*s, opts->common, ctx))
      return;
    *s->exit_code = run(*ctx, *opts);
  });
  return sub;
}

struct entity_cmd {
  common_options common;
  std::string entity;
};
struct scope_cmd {
  common_options common;
  std::string scope;
  std::string since, until;
};
struct fleet_cmd {
  common_options common;
  std::string scope;
  std::string state, reason, tool;
  int64_t limit = 100;
};
struct entities_cmd {
  common_options common;
  std::string scope;
  uint32_t shards = 0;
};

/// The options every fleet view takes: where to read (--data or --server), how to print, and
/// the scope under --data.
void add_fleet_source(CLI::App* sub, fleet_cmd& o) {
  add_data_option(sub, o.common);
  add_server_options(sub, o.common);
  add_output_options(sub, o.common);
  add_scope_arg(sub, o.scope, "A tenant or tenant/type under --data; default: all");
}
struct facts_cmd {
  common_options common;
  std::string entity;
  fact_options facts;
};
struct show_cmd {
  common_options common;
  std::string entity, which;
};
struct list_cmd {
  common_options common;
  std::string entity, status;
  int64_t limit = 100;
};
/// bookmark: --at in `since`, --seq in `until`; bookmarks: the time window.
struct bookmark_cmd {
  common_options common;
  std::string entity, since, until;
  int64_t limit = 100;
  bool newest = false;
};
struct journal_cmd {
  common_options common;
  std::string entity, key, journal;
};

} // namespace

void add_inspect_command(CLI::App& app, int* exit_code) {
  add_inspect_command(app, exit_code, inspect_io{});
}

/// Long for a reason: one declaration per subcommand (its options and the function that runs
/// it), which reads best as one table; each runner lives in its own file.
void add_inspect_command(CLI::App& app, int* exit_code, inspect_io io) {
  auto s = std::make_shared<shared_state>();
  s->io = std::move(io);
  s->exit_code = exit_code;
  auto* inspect = app.add_subcommand(
    "inspect",
    "Inspect entity databases read-only: entities, facts, keys, journals, alarms, owners, "
    "breakers, dead letters, state (also as of a past commit), bookmarks, economics, verify");
  inspect->require_subcommand(1);
  // Parse errors inside `factum inspect` carry the tool's prefix like its other messages.
  app.failure_message([inspect](const CLI::App* a, const CLI::Error& e) {
    auto msg = CLI::FailureMessage::simple(a, e);
    return inspect->parsed() ? "factum inspect: " + msg : msg;
  });

  subcommand<entities_cmd>(
    inspect, s, "entities", "List entities (tenant, type, id) with fact counts, sizes, activity",
    [](CLI::App* sub, entities_cmd& o) {
      add_data_option(sub, o.common);
      add_output_options(sub, o.common);
      add_scope_arg(sub, o.scope, "Only entities of this tenant, tenant/type or tenant/type/id");
      sub
        ->add_option("--shards", o.shards,
                     "A cluster's shard count: also show each entity's shard (docs/cluster.md)")
        ->type_name("N")
        ->check(CLI::Range(1, 4096));
    },
    [](const run_ctx& ctx, entities_cmd& o) {
      return run_entities(ctx, o.common, o.scope, o.shards);
    });

  subcommand<facts_cmd>(
    inspect, s, "facts", "List the facts of an entity, filtered, oldest or newest first",
    [](CLI::App* sub, facts_cmd& o) {
      add_data_option(sub, o.common);
      add_server_options(sub, o.common);
      add_output_options(sub, o.common);
      add_entity_arg(sub, o.entity);
      add_fact_filters(sub, o.facts);
      sub->add_option("--limit", o.facts.limit, "At most this many facts (default 100; 0: all)")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber);
      sub->add_flag("--newest", o.facts.newest, "Newest first (default: oldest first)");
      sub->add_flag("--follow,-f", o.facts.follow,
                    "Then print new facts as they commit (like tail)");
      add_follow_options(sub, o.facts);
    },
    [](const run_ctx& ctx, facts_cmd& o) {
      return run_facts(ctx, o.common, o.entity, o.facts, false);
    });

  subcommand<facts_cmd>(
    inspect, s, "tail", "Print the last facts of an entity, then new ones as they commit",
    [](CLI::App* sub, facts_cmd& o) {
      add_data_option(sub, o.common);
      add_server_options(sub, o.common);
      add_output_options(sub, o.common);
      add_entity_arg(sub, o.entity);
      add_fact_filters(sub, o.facts);
      sub
        ->add_option("--lines,-n", o.facts.lines,
                     "Print the last N matching facts first (default 10; ignored with "
                     "--after-seq, which prints all facts after it)")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber);
      add_follow_options(sub, o.facts);
    },
    [](const run_ctx& ctx, facts_cmd& o) {
      return run_facts(ctx, o.common, o.entity, o.facts, true);
    });

  subcommand<show_cmd>(
    inspect, s, "show", "Show one fact in full, by seq or fact_id, and check its hash",
    [](CLI::App* sub, show_cmd& o) {
      add_data_option(sub, o.common);
      add_output_options(sub, o.common);
      add_entity_arg(sub, o.entity);
      sub->add_option("fact", o.which, "The fact's seq (a number) or fact_id (fct_...)")
        ->type_name("SEQ|FACT_ID")
        ->required();
    },
    [](const run_ctx& ctx, show_cmd& o) { return run_show(ctx, o.common, o.entity, o.which); });

  subcommand<list_cmd>(
    inspect, s, "keys", "List idempotency keys: status, creation, expiry, stored response",
    [](CLI::App* sub, list_cmd& o) {
      add_state_source(sub, o.common, o.entity);
      sub->add_option("--status", o.status, "Only keys in this status")
        ->type_name("pending|completed|failed");
      sub->add_option("--limit", o.limit, "At most this many keys, newest first (0: all)")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber);
    },
    [](const run_ctx& ctx, list_cmd& o) {
      return run_keys(ctx, o.common, o.entity, o.status, o.limit);
    });

  subcommand<journal_cmd>(
    inspect, s, "journal",
    "List the journals of durable execution in the entity's file, or show one step by step",
    [](CLI::App* sub, journal_cmd& o) {
      add_state_source(sub, o.common, o.entity);
      sub->add_option("--key", o.key, "The journal of the call with this idempotency key")
        ->type_name("KEY");
      sub
        ->add_option("--journal", o.journal,
                     "A journal by its name as listed (key:K, alarm:NAME, dl:ID)")
        ->type_name("NAME");
    },
    [](const run_ctx& ctx, journal_cmd& o) {
      return run_journal(ctx, o.common, o.entity, o.key, o.journal);
    });

  subcommand<entity_cmd>(
    inspect, s, "alarms", "List the entity's alarms, earliest due first",
    [](CLI::App* sub, entity_cmd& o) { add_state_source(sub, o.common, o.entity); },
    [](const run_ctx& ctx, entity_cmd& o) { return run_alarms(ctx, o.common, o.entity); });

  subcommand<entity_cmd>(
    inspect, s, "owners",
    "List the entity's owner history in cluster mode: epoch, node, first seq, claim time",
    [](CLI::App* sub, entity_cmd& o) { add_state_source(sub, o.common, o.entity); },
    [](const run_ctx& ctx, entity_cmd& o) { return run_owners(ctx, o.common, o.entity); });

  subcommand<entity_cmd>(
    inspect, s, "breakers", "List the entity's circuit breakers and their states",
    [](CLI::App* sub, entity_cmd& o) {
      add_state_source(sub, o.common, o.entity);
      add_server_options(sub, o.common);
    },
    [](const run_ctx& ctx, entity_cmd& o) { return run_breakers(ctx, o.common, o.entity); });

  subcommand<list_cmd>(
    inspect, s, "dead-letters", "List the entity's dead letters, oldest first",
    [](CLI::App* sub, list_cmd& o) {
      add_state_source(sub, o.common, o.entity);
      add_server_options(sub, o.common);
      sub->add_option("--status", o.status, "Only dead letters in this status")
        ->type_name("pending|scheduled|resolved|discarded|acknowledged");
      sub->add_option("--limit", o.limit, "At most this many (default 100; 0: all)")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber);
    },
    [](const run_ctx& ctx, list_cmd& o) {
      return run_dead_letters(ctx, o.common, o.entity, o.status, o.limit);
    });

  subcommand<entity_cmd>(
    inspect, s, "state",
    "The entity's state besides its facts in one view: chain head, keys, alarms, breakers, "
    "dead letters; now, or as of a time or a bookmark from the archive",
    [](CLI::App* sub, entity_cmd& o) { add_state_source(sub, o.common, o.entity); },
    [](const run_ctx& ctx, entity_cmd& o) { return run_state(ctx, o.common, o.entity); });

  subcommand<bookmark_cmd>(
    inspect, s, "bookmark",
    "Name the archived commit of an entity at a time or a seq (a bookmark for --as-of, a "
    "rollback or a fork)",
    [](CLI::App* sub, bookmark_cmd& o) {
      add_output_options(sub, o.common);
      add_server_options(sub, o.common);
      sub->add_option("--archive", o.common.archive, "The server's archive_dir (read-only)")
        ->type_name("DIR");
      add_entity_arg(sub, o.entity);
      sub->add_option("--at", o.since, "The last commit at or before this time (ISO 8601, ms, 2h)")
        ->type_name("TIME");
      sub->add_option("--seq", o.until, "The last commit whose last fact is at most this seq")
        ->type_name("SEQ");
    },
    [](const run_ctx& ctx, bookmark_cmd& o) {
      return run_bookmark(ctx, o.common, o.entity, o.since, o.until);
    });

  subcommand<bookmark_cmd>(
    inspect, s, "bookmarks", "List an entity's archived commits, each a bookmark, oldest first",
    [](CLI::App* sub, bookmark_cmd& o) {
      add_output_options(sub, o.common);
      sub->add_option("--archive", o.common.archive, "The server's archive_dir (read-only)")
        ->type_name("DIR");
      add_entity_arg(sub, o.entity);
      sub->add_option("--since", o.since, "Only commits at or after this time")->type_name("TIME");
      sub->add_option("--until", o.until, "Only commits before this time")->type_name("TIME");
      sub->add_option("--limit", o.limit, "At most this many (default 100; 0: all)")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber);
      sub->add_flag("--newest", o.newest, "Newest first");
    },
    [](const run_ctx& ctx, bookmark_cmd& o) {
      return run_bookmarks(ctx, o.common, o.entity, o.since, o.until, o.limit, o.newest);
    });

  subcommand<fleet_cmd>(
    inspect, s, "recent", "List entities, most recently active first",
    [](CLI::App* sub, fleet_cmd& o) {
      add_fleet_source(sub, o);
      sub->add_option("--limit", o.limit, "At most this many (default 100)")->type_name("N");
    },
    [](const run_ctx& ctx, fleet_cmd& o) { return run_recent(ctx, o.common, o.scope, o.limit); });

  subcommand<fleet_cmd>(
    inspect, s, "fleet-dead-letters",
    "List dead letters across entities, by entity then oldest first",
    [](CLI::App* sub, fleet_cmd& o) {
      add_fleet_source(sub, o);
      sub->add_option("--state", o.state, "Only dead letters in this state")
        ->type_name("pending|scheduled|resolved|discarded|acknowledged");
      sub->add_option("--reason", o.reason, "Only dead letters of this failure reason")
        ->type_name("REASON");
      sub->add_option("--limit", o.limit, "At most this many (default 100)")->type_name("N");
    },
    [](const run_ctx& ctx, fleet_cmd& o) {
      return run_fleet_dead_letters(ctx, o.common, o.scope, o.state, o.reason, o.limit);
    });

  subcommand<fleet_cmd>(
    inspect, s, "fleet-breakers",
    "Circuit breakers per tool across entities, and the entities whose breaker is not closed",
    [](CLI::App* sub, fleet_cmd& o) {
      add_fleet_source(sub, o);
      sub->add_option("--tool", o.tool, "Only this tool")->type_name("TOOL");
    },
    [](const run_ctx& ctx, fleet_cmd& o) {
      return run_fleet_breakers(ctx, o.common, o.scope, o.tool);
    });

  subcommand<scope_cmd>(
    inspect, s, "economics",
    "Costs by tool, currency and subtype (failed vs succeeded) and error rates by category",
    [](CLI::App* sub, scope_cmd& o) {
      add_data_option(sub, o.common);
      add_output_options(sub, o.common);
      add_scope_arg(sub, o.scope,
                    "An entity (tenant/type/id), a tenant or tenant/type; default: all");
      sub->add_option("--since", o.since, "Window start: ISO 8601, epoch ms or an age (24h)")
        ->type_name("TIME");
      sub->add_option("--until", o.until, "Window end (exclusive), same forms")->type_name("TIME");
    },
    [](const run_ctx& ctx, scope_cmd& o) {
      return run_economics(ctx, o.common, o.scope, o.since, o.until);
    });

  subcommand<scope_cmd>(
    inspect, s, "verify",
    "Check hash chains, immutability triggers, owner histories and schema versions (exit 1 "
    "on a problem)",
    [](CLI::App* sub, scope_cmd& o) {
      add_data_option(sub, o.common);
      add_output_options(sub, o.common);
      add_scope_arg(sub, o.scope,
                    "An entity (tenant/type/id), a tenant or tenant/type; default: all");
    },
    [](const run_ctx& ctx, scope_cmd& o) { return run_verify(ctx, o.common, o.scope); });
}

} // namespace factum::tools
