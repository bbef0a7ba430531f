// state_cmd.cpp: `keys`, `journal`, `alarms` (with the schedules they fire), `owners`,
// `breakers` and `dead-letters`: the entity's state besides its facts (breakers and dead letters
// also through the HTTP API; each local one now or, with --as-of, as of an archived commit),
// and the printers the whole-state view (archive_cmd.cpp) shares. Runs on the thread that
// parses the command line.
#include <map>
#include <ostream>

#include "commands.hpp"
#include "records.hpp"
#include "remote.hpp"

namespace factum::tools {

namespace {

std::optional<remote_api> open_remote(const run_ctx& ctx, const common_options& c, int& rc) {
  if (!c.data.empty()) {
    rc = ctx.fail(exit_usage, "--data and --server exclude each other");
    return std::nullopt;
  }
  if (!c.as_of.empty() || !c.as_of_seq.empty() || !c.archive.empty()) {
    rc = ctx.fail(exit_usage, "--archive, --as-of and --as-of-seq read the archive's files: "
                              "not with --server");
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

std::string compact(const std::string& json_text, size_t max) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  return ellipsize(j.is_discarded() ? json_text : j.dump(), max);
}

std::string opt_time(const run_ctx& ctx, const std::optional<int64_t>& ms, const char* none) {
  return ms ? ctx.time(*ms) : none;
}

/// Prints `t`; in the whole-state view (`record` set) an empty section says "none" instead of a
/// header alone.
void print_table(const run_ctx& ctx, const text_table& t, const char* record) {
  if (*record && t.size() == 0)
    ctx.out << "none\n";
  else
    t.print(ctx);
}

/// `j` with a member "record": `record`, when `record` is not empty (the state view's lines).
nlohmann::json tagged(nlohmann::json j, const char* record) {
  if (*record)
    j["record"] = record;
  return j;
}

} // namespace

int run_keys(const run_ctx& ctx, const common_options& c, const std::string& entity,
             const std::string& status_filter, int64_t limit) {
  if (limit < 0)
    return ctx.fail(exit_usage, "--limit must not be negative");
  if (!status_filter.empty() && status_filter != "pending" && status_filter != "completed" &&
      status_filter != "failed")
    return ctx.fail(exit_usage, "--status must be pending, completed or failed");
  auto e = open_entity(ctx, c, entity, "keys");
  if (e.rc)
    return e.rc;
  auto st = print_keys(ctx, e.reader->store(), status_filter, limit, e.now, "");
  return st ? exit_ok : ctx.fail(st);
}

status print_keys(const run_ctx& ctx, entity_store& store, const std::string& status_filter,
                  int64_t limit, int64_t now, const char* record) {
  auto keys = store.list_keys(status_filter.empty() && limit > 0 ? limit : -1);
  if (!keys)
    return keys.error();
  text_table t({{"KEY"}, {"STATUS"}, {"CREATED"}, {"EXPIRES"}, {"EXPIRED"}, {"RESPONSE"}});
  int64_t shown = 0;
  for (auto& k : *keys) {
    if (!status_filter.empty() && to_string(k.status) != status_filter)
      continue;
    if (limit > 0 && shown >= limit)
      break;
    ++shown;
    if (ctx.json) {
      auto j = key_json(k, record_view::stored);
      j["expired"] = k.expires_at_ms.has_value() && *k.expires_at_ms <= now;
      ctx.json_line(tagged(std::move(j), record));
      continue;
    }
    bool expired = k.expires_at_ms && *k.expires_at_ms <= now;
    std::string st(to_string(k.status));
    t.add({k.key, st, ctx.time(k.created_at_ms), opt_time(ctx, k.expires_at_ms, "never"),
           expired ? "yes" : "no", or_dash(compact(k.response, 60))},
          {"", k.status == key_status::failed ? ctx.red(st) : st});
  }
  if (!ctx.json)
    print_table(ctx, t, record);
  return status::ok();
}

int run_journal(const run_ctx& ctx, const common_options& c, const std::string& entity,
                const std::string& call_key, const std::string& journal) {
  if (!call_key.empty() && !journal.empty())
    return ctx.fail(exit_usage, "--key and --journal exclude each other");
  auto e = open_entity(ctx, c, entity, "journal");
  if (e.rc)
    return e.rc;
  auto& store = e.reader->store();
  if (call_key.empty() && journal.empty()) { // the journals in the file
    auto all = store.list_journals(100000);
    if (!all)
      return ctx.fail(all.error());
    text_table t({{"JOURNAL"}, {"STEPS", true}, {"COMPLETED", true}, {"LAST_STARTED"}});
    for (auto& j : *all) {
      if (ctx.json)
        ctx.json_line(journal_summary_json(j));
      else
        t.add({j.key, std::to_string(j.steps), std::to_string(j.completed),
               ctx.time(j.last_started_ms)});
    }
    if (!ctx.json)
      t.print(ctx);
    return exit_ok;
  }
  auto name = journal.empty() ? "key:" + call_key : journal;
  auto steps = store.journal(name);
  if (!steps)
    return ctx.fail(steps.error());
  if (steps->empty())
    return ctx.fail(status{errc::not_found, "no journal " + name + " in " + entity});
  text_table t({{"STEP", true},
                {"KIND"},
                {"WHAT"},
                {"RUNS", true},
                {"STATE"},
                {"STARTED"},
                {"FINISHED"},
                {"ENTRIES", true},
                {"RESULT"}});
  for (auto& s : *steps) {
    if (ctx.json) {
      ctx.json_line(journal_step_json(s));
      continue;
    }
    auto entries = nlohmann::json::parse(s.entries, nullptr, false);
    std::string state = s.result ? "completed" : "in flight";
    t.add({std::to_string(s.step), s.kind, s.what, std::to_string(s.runs), state,
           ctx.time(s.started_at_ms), opt_time(ctx, s.finished_at_ms, "-"),
           std::to_string(entries.is_array() ? entries.size() : 0),
           s.result ? compact(*s.result, 60) : std::string("-")},
          {"", "", "", "", s.result ? state : ctx.red(state)});
  }
  if (!ctx.json)
    t.print(ctx);
  return exit_ok;
}

int run_alarms(const run_ctx& ctx, const common_options& c, const std::string& entity) {
  auto e = open_entity(ctx, c, entity, "alarms");
  if (e.rc)
    return e.rc;
  auto st = print_alarms(ctx, e.reader->store(), e.now, "");
  return st ? exit_ok : ctx.fail(st);
}

status print_alarms(const run_ctx& ctx, entity_store& store, int64_t now, const char* record) {
  auto alarms = store.list_alarms();
  if (!alarms)
    return alarms.error();
  auto schedules = store.list_schedules();
  if (!schedules)
    return schedules.error();
  std::map<std::string, const schedule_record*> by_alarm; // a schedule fires through its alarm
  for (auto& sc : *schedules)
    by_alarm["@schedule:" + sc.name] = &sc;
  text_table t({{"NAME"}, {"DUE"}, {"OVERDUE"}, {"ATTEMPTS", true}, {"CREATED"}, {"PAYLOAD"}});
  for (auto& a : *alarms) {
    if (ctx.json) {
      auto j = alarm_json(a, record_view::stored);
      j["overdue"] = a.due_ms <= now;
      if (auto it = by_alarm.find(a.name); it != by_alarm.end())
        j["schedule"] = schedule_json(*it->second, record_view::stored);
      ctx.json_line(tagged(std::move(j), record));
    } else {
      t.add({a.name, ctx.time(a.due_ms), a.due_ms <= now ? "yes" : "no", std::to_string(a.attempts),
             ctx.time(a.created_at_ms), compact(a.payload, 60)});
    }
  }
  if (ctx.json)
    return status::ok();
  print_table(ctx, t, record);
  if (schedules->empty())
    return status::ok();
  text_table st({{"SCHEDULE"}, {"SPEC"}, {"MISSED"}, {"NEXT"}, {"LAST"}, {"PAYLOAD"}});
  for (auto& sc : *schedules) {
    auto spec = json_or_string(sc.spec);
    std::string missed = spec.is_object() ? spec.value("missed", std::string()) : "";
    if (missed == "fire_all")
      missed += " (max " + std::to_string(spec.value("max_catch_up", int64_t{0})) + ")";
    st.add({sc.name, schedule_spec_text(sc), or_dash(missed), ctx.time(sc.next_ms),
            sc.last_ms ? ctx.time(*sc.last_ms) : "-", compact(sc.payload, 40)});
  }
  ctx.out << "\n";
  st.print(ctx);
  return status::ok();
}

int run_owners(const run_ctx& ctx, const common_options& c, const std::string& entity) {
  auto e = open_entity(ctx, c, entity, "owners");
  if (e.rc)
    return e.rc;
  auto owners = e.reader->store().owners();
  if (!owners)
    return ctx.fail(owners.error());
  text_table t({{"EPOCH", true}, {"NODE"}, {"FIRST_SEQ", true}, {"CLAIMED"}});
  for (auto& o : *owners) {
    if (ctx.json)
      ctx.json_line(owner_json(o));
    else
      t.add({std::to_string(o.epoch), o.node, std::to_string(o.first_seq), ctx.time(o.claimed_ms)});
  }
  if (!ctx.json)
    t.print(ctx);
  return exit_ok;
}

int run_breakers(const run_ctx& ctx, const common_options& c, const std::string& entity) {
  result<std::vector<breaker_record>> list = std::vector<breaker_record>{};
  std::unique_ptr<entity_reader> reader;
  if (!c.server.empty()) {
    int rc = 0;
    auto api = open_remote(ctx, c, rc);
    if (!api)
      return rc;
    auto key = parse_entity(entity);
    if (!key)
      return ctx.fail(key.error());
    list = api->breakers(*key);
  } else {
    auto e = open_entity(ctx, c, entity, "breakers");
    if (e.rc)
      return e.rc;
    reader = std::move(e.reader);
    list = reader->store().list_breakers();
  }
  if (!list)
    return ctx.fail(list.error());
  print_breakers(ctx, *list, "");
  return exit_ok;
}

void print_breakers(const run_ctx& ctx, const std::vector<breaker_record>& list,
                    const char* record) {
  text_table t({{"TOOL"}, {"STATE"}, {"UPDATED"}, {"DATA"}});
  for (auto& b : list) {
    if (ctx.json) {
      ctx.json_line(tagged(breaker_json(b, record_view::stored), record));
      continue;
    }
    bool open = b.state == "OPEN" || b.state == "FORCED_OPEN";
    bool closed = b.state == "CLOSED";
    t.add(
      {b.tool_id, b.state, b.updated_at_ms ? ctx.time(b.updated_at_ms) : "-", compact(b.data, 70)},
      {"", open     ? ctx.red(b.state)
           : closed ? ctx.green(b.state)
                    : b.state});
  }
  if (!ctx.json)
    print_table(ctx, t, record);
}

int run_dead_letters(const run_ctx& ctx, const common_options& c, const std::string& entity,
                     const std::string& status_filter, int64_t limit) {
  if (limit < 0)
    return ctx.fail(exit_usage, "--limit must not be negative");
  std::optional<dl_status> filter;
  if (!status_filter.empty()) {
    auto s = parse_dl_status(status_filter);
    if (!s)
      return ctx.fail(exit_usage, "--status: " + s.error().message());
    filter = *s;
  }
  result<std::vector<dead_letter_record>> list = std::vector<dead_letter_record>{};
  std::unique_ptr<entity_reader> reader;
  if (!c.server.empty()) {
    int rc = 0;
    auto api = open_remote(ctx, c, rc);
    if (!api)
      return rc;
    auto key = parse_entity(entity);
    if (!key)
      return ctx.fail(key.error());
    list = api->dead_letters(*key);
  } else {
    auto e = open_entity(ctx, c, entity, "dead-letters");
    if (e.rc)
      return e.rc;
    reader = std::move(e.reader);
    list = reader->store().list_dead_letters(filter, limit > 0 ? limit : -1);
  }
  if (!list)
    return ctx.fail(list.error());
  print_dead_letters(ctx, *list, filter, limit, "");
  return exit_ok;
}

void print_dead_letters(const run_ctx& ctx, const std::vector<dead_letter_record>& list,
                        std::optional<dl_status> filter, int64_t limit, const char* record) {
  text_table t({{"ID"},
                {"STATUS"},
                {"OPERATION"},
                {"CATEGORY"},
                {"CODE"},
                {"REASON"},
                {"ATTEMPTS", true},
                {"LAST_ATTEMPT"},
                {"NEXT_RETRY"},
                {"TRACE"},
                {"MESSAGE"}});
  int64_t shown = 0;
  for (auto& d : list) {
    if (filter && d.status != *filter) // the HTTP API lists every status
      continue;
    if (limit > 0 && shown >= limit)
      break;
    ++shown;
    if (ctx.json) {
      ctx.json_line(tagged(dead_letter_json(d), record));
      continue;
    }
    t.add({d.id, std::string(to_string(d.status)), d.operation, or_dash(d.error_category),
           or_dash(d.error_code), or_dash(d.reason), std::to_string(d.attempts),
           d.last_attempt_ms ? ctx.time(d.last_attempt_ms) : "-",
           opt_time(ctx, d.next_retry_ms, "-"), or_dash(ellipsize(d.trace_id, 24)),
           or_dash(ellipsize(d.error_message, 50))});
  }
  if (!ctx.json)
    print_table(ctx, t, record);
}

} // namespace factum::tools
