// operate_cmd.cpp: `factum operate` (docs/inspect.md, "factum operate"): an operator's changes
// through the HTTP API of a running `factum serve`, with a key of scope `operate` whose tenant
// is the one acted on. `factum inspect` never writes; this family is where writing lives:
// bulk retry or discard of dead letters (POST /v1/dead-letters/{retry|discard}, paged by its
// cursor, with a dry run), one dead letter's or one breaker's action, and the tenant's
// degradation floor. Registration and the run happen on the thread that parses the command
// line; each request is one synchronous HTTP exchange (remote.hpp).
#include <algorithm>
#include <memory>

#include "commands.hpp"
#include "factum/storage/wal_archive.hpp"
#include "factum/tools/inspect.hpp"
#include "remote.hpp"

namespace factum::tools {

using nlohmann::json;

namespace {

// -- options --------------------------------------------------------------------------------------

struct operate_options {
  common_options common;
  std::string action; ///< retry, discard, acknowledge, force-open, reset, disable, set, clear
  std::string entity; ///< TYPE/ID
  std::string name;   ///< the dead letter's id or the tool
  std::string note;   ///< --note: recorded as the reason of each action's fact
  std::string state, reason, type;
  int64_t limit = 100;
  int64_t page = 100;
  bool dry_run = false;
  int level = -1;                 ///< degradation set
  std::string target;             ///< fork: TO_TYPE/TO_ID
  std::string at, seq;            ///< bookmark: --at TIME or --seq N; fork: --at BOOKMARK
  std::string tenant, tenant_key; ///< fork into another tenant
};

/// The API of --server, or the exit code (operate always needs a server).
std::optional<remote_api> server_api(const run_ctx& ctx, const common_options& c, int& rc) {
  if (c.server.empty()) {
    rc = ctx.fail(exit_usage, "--server URL is required: factum operate acts through the "
                              "HTTP API of a running server");
    return std::nullopt;
  }
  auto a = remote_api::make(
    c.server, c.api_key, std::chrono::milliseconds(static_cast<int64_t>(c.http_timeout_s * 1000)));
  if (!a) {
    rc = ctx.fail(a.error());
    return std::nullopt;
  }
  return std::move(*a);
}

/// "TYPE/ID" checked as a key's parts (the tenant is the API key's), or INVALID_ARGUMENT.
result<entity_key> parse_type_id(std::string_view text) {
  auto slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos)
    return status{errc::invalid_argument,
                  "the entity must be TYPE/ID (the tenant is the API key's), not \"" +
                    std::string(text.substr(0, 200)) + "\""};
  return entity_key::make("t", text.substr(0, slash), text.substr(slash + 1));
}

/// An entity named TYPE/ID, or TENANT/TYPE/ID: the tenant, when named, is sent for the server
/// to check against the API key's (rollback and fork act on the tenant of the key).
struct named_entity {
  std::string tenant; ///< empty: not named
  entity_key key;     ///< its type and id (tenant "t")
};

result<named_entity> parse_named(std::string_view text) {
  if (std::count(text.begin(), text.end(), '/') == 2) {
    auto k = entity_key::parse(text);
    if (!k)
      return k.error();
    return named_entity{k->tenant, {"t", k->type, k->id}};
  }
  auto k = parse_type_id(text);
  if (!k)
    return status{errc::invalid_argument, "the entity must be TYPE/ID or TENANT/TYPE/ID, not \"" +
                                            std::string(text.substr(0, 200)) + "\""};
  return named_entity{"", *k};
}

/// "TYPE/ID", percent-encoded for a path.
std::string type_id_path(const entity_key& key) {
  return http::client::percent_encode(key.type) + "/" + http::client::percent_encode(key.id);
}

std::string route_of(const entity_key& key) {
  return "/v1/entities/" + type_id_path(key);
}

json note_body(const std::string& note) {
  return note.empty() ? json::object() : json{{"reason", note}};
}

// -- dead-letters (bulk) --------------------------------------------------------------------------

/// Pages through the bulk action until the cursor ends or --limit dead letters were looked at.
/// Prints one row per dead letter acted on (or that would be) and a summary; exit 1 when an
/// entity refused an action or could not be read.
int run_bulk(const run_ctx& ctx, const operate_options& o) {
  if (o.limit < 1 || o.limit > 1000000)
    return ctx.fail(exit_usage, "--limit must be between 1 and 1000000");
  int rc = exit_ok;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  json body = {{"dry_run", o.dry_run}};
  for (auto [k, v] : {std::pair{"state", &o.state}, {"reason", &o.reason}, {"type", &o.type}})
    if (!v->empty())
      body[k] = *v;
  if (!o.note.empty())
    body["note"] = o.note;
  int64_t looked = 0, acted = 0, skipped = 0, failed = 0, errors = 0, matched = -1;
  text_table t({{"TYPE"}, {"ID"}, {"DEAD_LETTER"}, {"STATUS"}, {"NEW_STATUS"}});
  for (;;) {
    body["limit"] = std::min(o.page, o.limit - looked);
    auto page = api->send_json("POST", "/v1/dead-letters/" + o.action, body);
    if (!page)
      return ctx.fail(page.error());
    if (!page->is_object())
      return ctx.fail(status{errc::unavailable, "server sent an answer that is not an object"});
    if (matched < 0)
      matched = page->value("matched", int64_t{0});
    int64_t n = page->value(o.dry_run ? "would_act" : "acted", int64_t{0});
    int64_t s = page->value("skipped", int64_t{0}), f = page->value("failed", int64_t{0});
    acted += n;
    skipped += s;
    failed += f;
    looked += n + s + f;
    for (auto& r : page->value("results", json::array())) {
      auto fresh = r.value("new_status", r.contains("error") ? "error: " + r.value("error", "")
                                                             : std::string(o.dry_run ? "-" : ""));
      if (ctx.json) {
        ctx.json_line(r);
        continue;
      }
      t.add({r.value("type", ""), r.value("id", ""), r.value("dead_letter", ""),
             r.value("status", ""), or_dash(fresh)});
    }
    for (auto& e : page->value("errors", json::array())) {
      ++errors;
      ctx.warn("cannot read " + e.value("type", "") + "/" + e.value("id", "") + ": " +
               e.value("error", ""));
    }
    auto next = page->value("next", json(nullptr));
    // A page that looked at nothing but has a cursor still moves on (entities without a match);
    // a cursor that does not move would repeat the same page for ever.
    if (!next.is_string() || looked >= o.limit)
      break;
    if (body.contains("after") && body["after"] == next)
      return ctx.fail(exit_server, "the server answered the same cursor twice: stopped after " +
                                     std::to_string(looked) + " dead letters");
    body["after"] = next;
  }
  if (ctx.json) {
    ctx.json_line({{"summary", true},
                   {"action", o.action},
                   {"dry_run", o.dry_run},
                   {"matched", matched},
                   {o.dry_run ? "would_act" : "acted", acted},
                   {"skipped", skipped},
                   {"failed", failed},
                   {"errors", errors}});
  } else {
    t.print(ctx);
    ctx.out << (o.dry_run ? "dry run: would " : "") << o.action << ' ' << acted << " of " << matched
            << " matching; skipped " << skipped << " (state does not allow it), failed " << failed
            << (errors ? ", " + std::to_string(errors) + " entities unreadable" : "") << '\n';
  }
  return failed || errors ? exit_verify_failed : exit_ok;
}

// -- one dead letter, one breaker, the floor ------------------------------------------------------

/// POSTs an entity's action route and prints its answer (the record as it now is).
int run_entity_action(const run_ctx& ctx, const operate_options& o, const char* what) {
  int rc = exit_ok;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  auto key = parse_type_id(o.entity);
  if (!key)
    return ctx.fail(key.error());
  if (auto named = entity_key::make("t", "t", o.name); !named)
    return ctx.fail(
      exit_usage,
      std::string(std::string_view(what) == "breakers" ? "the tool" : "the dead letter id") +
        " \"" + o.name.substr(0, 200) + "\" is not a valid name: " + named.error().message());
  auto target = "/v1/entities/" + http::client::percent_encode(key->type) + "/" +
                http::client::percent_encode(key->id) + "/" + what + "/" +
                http::client::percent_encode(o.name) + "/" + o.action;
  auto r = api->send_json("POST", target, note_body(o.note));
  if (!r)
    return ctx.fail(r.error());
  if (ctx.json)
    ctx.json_line(*r);
  else
    ctx.out << o.action << ' ' << key->type << '/' << key->id << ' ' << o.name << ": "
            << r->value("status", r->value("state", std::string("done"))) << '\n';
  return exit_ok;
}

int run_degradation(const run_ctx& ctx, const operate_options& o) {
  int rc = exit_ok;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  if (o.action == "set" && (o.level < 0 || o.level > 4))
    return ctx.fail(exit_usage, "set needs a LEVEL from 0 to 4");
  if (o.note.empty())
    return ctx.fail(exit_usage, "--note is required: say why the floor changes");
  json body = {{"level", o.action == "set" ? json(o.level) : json(nullptr)}, {"reason", o.note}};
  auto r = api->send_json("PUT", "/v1/degradation", body);
  if (!r)
    return ctx.fail(r.error());
  if (ctx.json)
    ctx.json_line(*r);
  else
    ctx.out << "level " << r->value("level", 0) << " (" << r->value("level_name", "") << ")"
            << (o.action == "set" ? ", floor " + std::to_string(o.level) : ", no floor") << '\n';
  return exit_ok;
}

// -- bookmarks, rollback, fork ------------------------------------------------------------------

/// "/v1/entities/TYPE/ID" of a TYPE/ID argument, or the exit code in `rc`.
std::optional<std::string> entity_path(const run_ctx& ctx, const std::string& text, int& rc) {
  auto key = parse_type_id(text);
  if (!key) {
    rc = ctx.fail(key.error());
    return std::nullopt;
  }
  return route_of(*key);
}

int run_operate_bookmark(const run_ctx& ctx, const operate_options& o) {
  int rc = exit_ok;
  auto path = entity_path(ctx, o.entity, rc);
  if (!path)
    return rc;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  return print_remote_bookmark(ctx, *api, *path, o.at, o.seq);
}

int run_rollback(const run_ctx& ctx, const operate_options& o) {
  auto e = parse_named(o.entity);
  if (!e)
    return ctx.fail(e.error());
  if (auto p = archive_point::parse(o.name); !p)
    return ctx.fail(exit_usage, p.error().message());
  int rc = exit_ok;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  json body = o.note.empty() ? json::object() : json{{"note", o.note}};
  if (!e->tenant.empty())
    body["tenant"] = e->tenant;
  auto r = api->send_json("POST", route_of(e->key) + "/rollback/" + o.name, body);
  if (!r)
    return ctx.fail(r.error());
  if (ctx.json)
    ctx.json_line(*r);
  else
    ctx.out << "rolled back " << o.entity << " from seq " << r->value("from_seq", int64_t{0})
            << " to " << r->value("bookmark", "") << " (seq " << r->value("to_seq", int64_t{0})
            << "); the rollback is fact " << r->value("fact_seq", int64_t{0}) << '\n';
  return exit_ok;
}

int run_fork(const run_ctx& ctx, const operate_options& o) {
  auto from = parse_named(o.entity);
  if (!from)
    return ctx.fail(from.error());
  auto to = parse_named(o.target);
  if (!to)
    return ctx.fail(to.error());
  json body = json::object();
  if (!o.at.empty()) {
    if (auto p = archive_point::parse(o.at); !p)
      return ctx.fail(exit_usage, p.error().message());
    body["bookmark"] = o.at;
  }
  if (!to->tenant.empty() && !o.tenant.empty() && to->tenant != o.tenant)
    return ctx.fail(exit_usage, "the target names tenant " + to->tenant + " and --tenant " +
                                  o.tenant + ": give one");
  auto tenant = to->tenant.empty() ? o.tenant : to->tenant;
  if (!tenant.empty()) {
    if (auto t = entity_key::make(tenant, "t", "t"); !t)
      return ctx.fail(exit_usage, "the target's tenant: " + t.error().message());
    body["tenant"] = tenant;
  }
  if (!from->tenant.empty())
    body["source_tenant"] = from->tenant;
  if (!o.tenant_key.empty())
    body["tenant_api_key"] = o.tenant_key;
  if (!o.note.empty())
    body["note"] = o.note;
  int rc = exit_ok;
  auto api = server_api(ctx, o.common, rc);
  if (!api)
    return rc;
  auto r = api->send_json("POST", route_of(from->key) + "/fork/" + type_id_path(to->key), body);
  if (!r)
    return ctx.fail(r.error());
  if (ctx.json)
    ctx.json_line(*r);
  else
    ctx.out << "forked " << o.entity << " (seq " << r->value("source_seq", int64_t{0}) << ") to "
            << r->value("to", "") << '\n';
  return exit_ok;
}

// -- registration ---------------------------------------------------------------------------------

void add_common(CLI::App* sub, operate_options& o) {
  sub
    ->add_option("--server", o.common.server,
                 "The running server (plain http to a loopback address, e.g. "
                 "http://127.0.0.1:8080)")
    ->type_name("URL");
  sub
    ->add_option("--api-key", o.common.api_key,
                 "API key of the tenant, with scope operate (also FACTUM_API_KEY)")
    ->type_name("KEY")
    ->envname("FACTUM_API_KEY");
  sub
    ->add_option("--http-timeout", o.common.http_timeout_s, "Seconds per HTTP request (default 10)")
    ->type_name("SECONDS")
    ->check(CLI::PositiveNumber);
  sub->add_flag("--json", o.common.json, "JSON lines (the default when stdout is not a terminal)");
  sub->add_flag("--table", o.common.table, "A table even when stdout is not a terminal");
  sub->add_option("--note", o.note, "Why: recorded as the reason in each action's lifecycle fact")
    ->type_name("TEXT");
}

/// Adds the subcommand `name` of `parent`: its options in an operate_options of its own, its
/// common options, then `setup`'s; the callback runs `run` with a run context.
template <class Setup, class Run>
void add_action(CLI::App* parent, const std::shared_ptr<inspect_io>& io, int* exit_code,
                const char* name, const char* help, Setup setup, Run run,
                const char* tool = "factum operate") {
  auto* sub = parent->add_subcommand(name, help);
  auto o = std::make_shared<operate_options>();
  add_common(sub, *o);
  setup(sub, *o);
  sub->callback([io, exit_code, o, run, tool] {
    auto ctx = make_run_ctx(*io, o->common, tool);
    *exit_code = o->common.json && o->common.table
                   ? ctx->fail(exit_usage, "--json and --table exclude each other")
                   : run(*ctx, *o);
  });
}

void setup_fork(CLI::App* sub, operate_options& o) {
  sub->add_option("entity", o.entity, "The source, as TYPE/ID or TENANT/TYPE/ID (the key's)")
    ->required();
  sub->add_option("target", o.target, "The new entity, as TYPE/ID or TENANT/TYPE/ID")->required();
  sub->add_option("--at", o.at, "A bookmark of the source (default: now)")->type_name("BOOKMARK");
  sub->add_option("--tenant", o.tenant, "The new entity's tenant (default: the key's)");
  sub
    ->add_option("--tenant-key", o.tenant_key,
                 "With another tenant: an operate key of that tenant (also FACTUM_TENANT_KEY)")
    ->envname("FACTUM_TENANT_KEY");
}

} // namespace

void add_operate_command(CLI::App& app, int* exit_code, inspect_io io) {
  auto* operate = app.add_subcommand(
    "operate", "Act on a running server as an operator: dead letters in bulk, one dead letter, "
               "a breaker, the degradation floor, bookmarks, a rollback, a fork (scope operate)");
  operate->require_subcommand(1);
  auto io_ptr = std::make_shared<inspect_io>(std::move(io));
  auto add = [&](const char* name, const char* help, auto setup, auto run) {
    add_action(operate, io_ptr, exit_code, name, help, setup, run);
  };
  add(
    "dead-letters",
    "Retry or discard the dead letters a filter takes, across the tenant's entities",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("action", o.action, "Retry or discard")
        ->required()
        ->check(CLI::IsMember({"retry", "discard"}));
      sub->add_option("--state", o.state,
                      "Only dead letters in this state (pending, scheduled, ...)");
      sub->add_option("--reason", o.reason,
                      "Only this failure reason (server_error, timeout, ...)");
      sub->add_option("--type", o.type, "Only entities of this type");
      sub->add_option("--limit", o.limit, "Look at most at this many dead letters (default 100)")
        ->type_name("N");
      sub->add_option("--page", o.page, "Dead letters per request (1..1000, default 100)")
        ->type_name("N")
        ->check(CLI::Range(1, 1000));
      sub->add_flag("--dry-run", o.dry_run, "Show what would be done and do nothing");
    },
    run_bulk);
  add(
    "dead-letter", "Retry, discard or acknowledge one dead letter of an entity",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("action", o.action, "Retry, discard or acknowledge")
        ->required()
        ->check(CLI::IsMember({"retry", "discard", "acknowledge"}));
      sub->add_option("entity", o.entity, "The entity, as TYPE/ID")->required();
      sub->add_option("id", o.name, "The dead letter's id (dl_...)")->required();
    },
    [](const run_ctx& ctx, const operate_options& o) {
      return run_entity_action(ctx, o, "dead-letters");
    });
  add(
    "breaker", "Force open, reset or disable one breaker of an entity",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("action", o.action, "Force-open, reset or disable")
        ->required()
        ->check(CLI::IsMember({"force-open", "reset", "disable"}));
      sub->add_option("entity", o.entity, "The entity, as TYPE/ID")->required();
      sub->add_option("tool", o.name, "The tool whose breaker it is")->required();
    },
    [](const run_ctx& ctx, const operate_options& o) {
      return run_entity_action(ctx, o, "breakers");
    });
  add(
    "degradation", "Set or clear the operator's degradation floor of the key's tenant",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("action", o.action, "Set or clear")
        ->required()
        ->check(CLI::IsMember({"set", "clear"}));
      sub->add_option("level", o.level, "With set: the floor, 0 to 4")->check(CLI::Range(0, 4));
    },
    run_degradation);
  add(
    "bookmark", "Name the archived commit of an entity at a time or a seq (scope read)",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("entity", o.entity, "The entity, as TYPE/ID")->required();
      sub->add_option("--at", o.at, "The last commit at or before this time (ISO 8601, ms, 2h)")
        ->type_name("TIME");
      sub->add_option("--seq", o.seq, "The last commit whose last fact is at most this seq")
        ->type_name("N");
    },
    run_operate_bookmark);
  add(
    "rollback", "Roll an entity back to a bookmark in place (its archive; a lifecycle fact)",
    [](CLI::App* sub, operate_options& o) {
      sub->add_option("entity", o.entity, "The entity, as TYPE/ID or TENANT/TYPE/ID (the key's)")
        ->required();
      sub->add_option("bookmark", o.name, "The bookmark (factum inspect bookmark)")->required();
    },
    run_rollback);
  add("fork", "Make a new entity from an entity's state now or at a bookmark", setup_fork,
      run_fork);
}

void add_fork_command(CLI::App& app, int* exit_code, inspect_io io) {
  add_action(&app, std::make_shared<inspect_io>(std::move(io)), exit_code, "fork",
             "Make a new entity from an entity's state now or at a bookmark, through a running "
             "server (scope operate; the same as factum operate fork)",
             setup_fork, run_fork, "factum fork");
}

int run_entity_rollback(const entity_rollback_args& a, const inspect_io& io) {
  operate_options o;
  o.common.server = a.server;
  o.common.api_key = a.api_key;
  o.common.http_timeout_s = a.http_timeout_s;
  o.common.json = a.json;
  o.entity = a.entity;
  o.name = a.bookmark;
  o.note = a.note;
  auto ctx = make_run_ctx(io, o.common, "factum restore");
  return run_rollback(*ctx, o);
}

void add_operate_command(CLI::App& app, int* exit_code) {
  add_operate_command(app, exit_code, inspect_io{});
}

} // namespace factum::tools
