// fleet_cmd.cpp: the fleet views of `factum inspect` (docs/inspect.md, "Fleet views"): `recent`
// (entities, most recently active first), `fleet-dead-letters` (dead letters across entities,
// filtered) and `fleet-breakers` (breakers per tool, the entities whose breaker is not closed).
// Under --data they read every entity file of the scope (read-only, one at a time); with
// --server they page through GET /v1/entities?order=last_activity, GET /v1/dead-letters and
// GET /v1/breakers (the tenant is the API key's). Runs on the thread that parses the command
// line.
#include <algorithm>
#include <map>
#include <ostream>

#include "commands.hpp"
#include "records.hpp"
#include "remote.hpp"

namespace fs = std::filesystem;

namespace factum::tools {

using nlohmann::json;

namespace {

/// The remote reader of --server (which excludes --data and a scope), or the exit code.
std::optional<remote_api> remote_for(const run_ctx& ctx, const common_options& c,
                                     const std::string& scope, int& rc) {
  if (!c.data.empty()) {
    rc = ctx.fail(exit_usage, "--data and --server exclude each other");
    return std::nullopt;
  }
  if (!scope.empty()) {
    rc = ctx.fail(exit_usage, "with --server the tenant is the API key's: give no scope");
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

/// The scope of a local run, or the exit code (--data required).
int local_scope(const run_ctx& ctx, const common_options& c, const std::string& text,
                const char* command, entity_scope& scope) {
  if (int rc = require_local(ctx, c, command))
    return rc;
  auto s = parse_scope(text);
  if (!s)
    return ctx.fail(s.error());
  scope = *s;
  return 0;
}

/// Reads every entity of `scope` under --data with `fn`; unreadable files are warned about
/// and make the exit code theirs. No entity at all is said on stderr too.
int each_local(const run_ctx& ctx, const common_options& c, const entity_scope& scope,
               const std::function<void(entity_reader&)>& fn) {
  int rc = exit_ok;
  size_t seen = 0;
  auto st = for_each_entity(
    c.data, scope,
    [&](entity_reader& r) {
      ++seen;
      fn(r);
    },
    [&](const fs::path& file, const status& err) {
      ++seen;
      ctx.warn("cannot read " + file.string() + ": " + err.message());
      if (rc == exit_ok)
        rc = exit_code_for(err.code());
    });
  if (!st)
    return ctx.fail(st);
  if (seen == 0)
    ctx.warn(no_entities_message(scope, c.data));
  return rc;
}

/// GETs `path` + "?" + `query` and the pages after it (its "next" cursor) while `want` says
/// so; `page` gets each body.
status each_page(const remote_api& api, const std::string& path, const std::string& query,
                 const std::function<bool(const json&)>& page) {
  std::string after;
  for (;;) {
    auto target =
      path + "?" + query + (after.empty() ? "" : "&after=" + http::client::percent_encode(after));
    auto body = api.get_json(target);
    if (!body)
      return body.error();
    if (!body->is_object())
      return status{errc::unavailable, "server sent a page that is not a JSON object"};
    if (!page(*body))
      return status::ok();
    auto next = body->value("next", json(nullptr));
    if (!next.is_string())
      return status::ok();
    after = next.get<std::string>();
  }
}

std::string add_param(const std::string& name, const std::string& value) {
  return value.empty() ? "" : "&" + name + "=" + http::client::percent_encode(value);
}

} // namespace

// -- recent ---------------------------------------------------------------------------------------

int run_recent(const run_ctx& ctx, const common_options& c, const std::string& scope_text,
               int64_t limit) {
  if (limit < 1 || limit > 10000)
    return ctx.fail(exit_usage, "--limit must be between 1 and 10000");
  struct row {
    std::string tenant, type, id;
    int64_t last_ms = 0, bytes = 0;
  };
  std::vector<row> rows;
  if (!c.server.empty()) {
    int rc = 0;
    auto api = remote_for(ctx, c, scope_text, rc);
    if (!api)
      return rc;
    auto body =
      api->get_json("/v1/entities?order=last_activity&limit=" + std::to_string(limit), nullptr);
    if (!body)
      return ctx.fail(body.error());
    if (!body->is_array())
      return ctx.fail(status{errc::unavailable, "server sent a listing that is not an array"});
    for (auto& e : *body)
      rows.push_back({"", e.value("type", ""), e.value("id", ""),
                      e.value("last_activity", int64_t{0}), e.value("bytes", int64_t{0})});
  } else {
    entity_scope scope;
    if (int rc = local_scope(ctx, c, scope_text, "recent", scope))
      return rc;
    int rc = each_local(ctx, c, scope, [&](entity_reader& r) {
      auto info = r.store().info();
      if (info)
        rows.push_back({r.key().tenant, r.key().type, r.key().id, info->last_fact_ms,
                        static_cast<int64_t>(r.file_bytes())});
    });
    if (rc != exit_ok && rows.empty())
      return rc;
    std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) {
      return std::tie(b.last_ms, a.tenant, a.type, a.id) <
             std::tie(a.last_ms, b.tenant, b.type, b.id);
    });
    if (static_cast<int64_t>(rows.size()) > limit)
      rows.resize(static_cast<size_t>(limit));
  }
  text_table t({{"TENANT"}, {"TYPE"}, {"ID"}, {"LAST_ACTIVITY"}, {"SIZE", true}});
  for (auto& r : rows) {
    if (ctx.json) {
      json line = {
        {"type", r.type}, {"id", r.id}, {"last_activity", r.last_ms}, {"bytes", r.bytes}};
      if (!r.tenant.empty())
        line["tenant"] = r.tenant;
      ctx.json_line(line);
      continue;
    }
    t.add({r.tenant.empty() ? "-" : r.tenant, r.type, r.id, r.last_ms ? ctx.time(r.last_ms) : "-",
           human_bytes(static_cast<uint64_t>(r.bytes))});
  }
  if (!ctx.json)
    t.print(ctx);
  return exit_ok;
}

// -- fleet-dead-letters ---------------------------------------------------------------------------

int run_fleet_dead_letters(const run_ctx& ctx, const common_options& c,
                           const std::string& scope_text, const std::string& state,
                           const std::string& reason, int64_t limit) {
  if (limit < 1 || limit > 100000)
    return ctx.fail(exit_usage, "--limit must be between 1 and 100000");
  std::optional<dl_status> filter;
  if (!state.empty()) {
    auto s = parse_dl_status(state);
    if (!s)
      return ctx.fail(exit_usage, "--state: " + s.error().message());
    filter = *s;
  }
  std::vector<json> rows; // dead_letter_json plus tenant (local), entity_type, entity_id
  int rc = exit_ok;
  if (!c.server.empty()) {
    auto api = remote_for(ctx, c, scope_text, rc);
    if (!api)
      return rc;
    auto st = each_page(*api, "/v1/dead-letters",
                        "limit=" + std::to_string(std::min<int64_t>(limit, 1000)) +
                          add_param("state", state) + add_param("reason", reason),
                        [&](const json& page) {
                          for (auto& d : page.value("dead_letters", json::array()))
                            if (static_cast<int64_t>(rows.size()) < limit)
                              rows.push_back(d);
                          for (auto& e : page.value("errors", json::array()))
                            ctx.warn("cannot read " + e.value("type", "") + "/" +
                                     e.value("id", "") + ": " + e.value("error", ""));
                          return static_cast<int64_t>(rows.size()) < limit;
                        });
    if (!st)
      return ctx.fail(st);
  } else {
    entity_scope scope;
    if (int r = local_scope(ctx, c, scope_text, "fleet-dead-letters", scope))
      return r;
    rc = each_local(ctx, c, scope, [&](entity_reader& r) {
      auto list = r.store().list_dead_letters(filter, -1);
      if (!list)
        return ctx.warn(r.path().string() + ": " + list.error().message());
      for (auto& d : *list) {
        if (!reason.empty() && d.reason != reason)
          continue;
        auto j = dead_letter_json(d);
        j["tenant"] = r.key().tenant;
        j["entity_type"] = r.key().type;
        j["entity_id"] = r.key().id;
        rows.push_back(std::move(j));
      }
    });
    std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
      auto key = [](const json& j) {
        return std::make_tuple(j.value("tenant", ""), j.value("entity_type", ""),
                               j.value("entity_id", ""), j.value("created_at", int64_t{0}),
                               j.value("id", ""));
      };
      return key(a) < key(b);
    });
    if (static_cast<int64_t>(rows.size()) > limit)
      rows.resize(static_cast<size_t>(limit));
  }
  text_table t({{"ENTITY"},
                {"DEAD_LETTER"},
                {"STATUS"},
                {"REASON"},
                {"CODE"},
                {"ATTEMPTS", true},
                {"CREATED"}});
  for (auto& d : rows) {
    if (ctx.json) {
      ctx.json_line(d);
      continue;
    }
    auto entity = (d.contains("tenant") ? d.value("tenant", "") + "/" : "") +
                  d.value("entity_type", "") + "/" + d.value("entity_id", "");
    auto created = d.value("created_at", int64_t{0});
    t.add({entity, d.value("id", ""), d.value("status", ""), or_dash(d.value("reason", "")),
           or_dash(d.value("error_code", "")), std::to_string(d.value("attempts", int64_t{0})),
           created ? ctx.time(created) : "-"});
  }
  if (!ctx.json)
    t.print(ctx);
  return rc;
}

// -- fleet-breakers -------------------------------------------------------------------------------

int run_fleet_breakers(const run_ctx& ctx, const common_options& c, const std::string& scope_text,
                       const std::string& tool) {
  std::map<std::string, std::map<std::string, int64_t>> per_tool; // tool -> state -> entities
  std::vector<json> not_closed; // {"tenant"?, "type", "id", "tool", "state", "updated_at"}
  int rc = exit_ok;
  if (!c.server.empty()) {
    auto api = remote_for(ctx, c, scope_text, rc);
    if (!api)
      return rc;
    auto st = each_page(
      *api, "/v1/breakers", "limit=1000" + add_param("tool", tool), [&](const json& page) {
        if (per_tool.empty())
          for (auto& t : page.value("tools", json::array())) {
            auto counts = t.value("entities", json::object());
            for (auto& [state, n] : counts.items())
              per_tool[t.value("tool", "")][state] = n.is_number_integer() ? n.get<int64_t>() : 0;
          }
        for (auto& b : page.value("not_closed", json::array()))
          not_closed.push_back(b);
        return true;
      });
    if (!st)
      return ctx.fail(st);
  } else {
    entity_scope scope;
    if (int r = local_scope(ctx, c, scope_text, "fleet-breakers", scope))
      return r;
    rc = each_local(ctx, c, scope, [&](entity_reader& r) {
      auto list = r.store().list_breakers();
      if (!list)
        return ctx.warn(r.path().string() + ": " + list.error().message());
      for (auto& b : *list) {
        if (!tool.empty() && b.tool_id != tool)
          continue;
        ++per_tool[b.tool_id][b.state];
        if (b.state == "CLOSED")
          continue;
        auto j = breaker_json(b);
        j["tenant"] = r.key().tenant;
        j["type"] = r.key().type;
        j["id"] = r.key().id;
        not_closed.push_back(std::move(j));
      }
    });
    std::sort(not_closed.begin(), not_closed.end(), [](const json& a, const json& b) {
      auto key = [](const json& j) {
        return std::make_tuple(j.value("tool", ""), j.value("tenant", ""), j.value("type", ""),
                               j.value("id", ""));
      };
      return key(a) < key(b);
    });
  }
  static constexpr const char* states[] = {"CLOSED", "OPEN", "HALF_OPEN", "FORCED_OPEN",
                                           "DISABLED"};
  text_table tools({{"TOOL"},
                    {"CLOSED", true},
                    {"OPEN", true},
                    {"HALF_OPEN", true},
                    {"FORCED_OPEN", true},
                    {"DISABLED", true}});
  for (auto& [name, by_state] : per_tool) {
    if (ctx.json) {
      ctx.json_line({{"kind", "tool"}, {"tool", name}, {"entities", by_state}});
      continue;
    }
    std::vector<std::string> cells = {name};
    for (auto* s : states) {
      auto it = by_state.find(s);
      cells.push_back(std::to_string(it == by_state.end() ? 0 : it->second));
    }
    tools.add(std::move(cells));
  }
  text_table open({{"TOOL"}, {"STATE"}, {"ENTITY"}, {"UPDATED"}});
  for (auto& b : not_closed) {
    if (ctx.json) {
      auto line = b;
      line["kind"] = "breaker";
      ctx.json_line(line);
      continue;
    }
    auto entity = (b.contains("tenant") ? b.value("tenant", "") + "/" : "") + b.value("type", "") +
                  "/" + b.value("id", "");
    auto updated = b.value("updated_at", int64_t{0});
    auto state = b.value("state", "");
    open.add({b.value("tool", ""), state, entity, updated ? ctx.time(updated) : "-"},
             {"", ctx.red(state)});
  }
  if (!ctx.json) {
    tools.print(ctx);
    if (!not_closed.empty()) {
      ctx.out << "\n";
      open.print(ctx);
    }
  }
  return rc;
}

} // namespace factum::tools
