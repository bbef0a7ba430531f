// data_cmd.cpp: the subcommands that walk a data directory: `entities`, `economics` and
// `verify` (one entity, a tenant, a tenant's type, or everything). Runs on the thread that
// parses the command line.
#include <algorithm>
#include <map>
#include <ostream>
#include <set>

#include "commands.hpp"
#include "decimal.hpp"
#include "factum/storage/sha256.hpp"

namespace fs = std::filesystem;

namespace factum::tools {

namespace {

/// Parses the scope argument and checks --data; an exit code or 0.
int prepare_scope(const run_ctx& ctx, const common_options& c, const std::string& text,
                  const char* command, entity_scope& scope) {
  if (int rc = require_local(ctx, c, command))
    return rc;
  auto s = parse_scope(text);
  if (!s)
    return ctx.fail(s.error());
  scope = *s;
  return 0;
}

/// An error message that names `file` once.
std::string naming(const fs::path& file, const status& err) {
  if (err.message().find(file.string()) != std::string::npos)
    return err.message();
  return "cannot read " + file.string() + ": " + err.message();
}

/// Calls `fn` for each fact matching `spec` (oldest first), a page at a time.
status scan_facts(entity_store& store, fact_filter spec, const std::function<void(fact&)>& fn) {
  spec.limit = 10000;
  spec.newest_first = false;
  while (true) {
    auto page = store.query(spec);
    if (!page)
      return page.error();
    for (auto& f : *page)
      fn(f);
    if (static_cast<int64_t>(page->size()) < spec.limit)
      return status::ok();
    spec.after_seq = page->back().seq;
  }
}

} // namespace

// -- entities -----------------------------------------------------------------------------------

int run_entities(const run_ctx& ctx, const common_options& c, const std::string& scope_text,
                 uint32_t shards) {
  entity_scope scope;
  if (int rc = prepare_scope(ctx, c, scope_text, "entities", scope))
    return rc;
  struct row {
    entity_key key;
    entity_info info;
    uint64_t bytes = 0;
  };
  std::vector<row> rows;
  int rc = exit_ok;
  auto st = for_each_entity(
    c.data, scope,
    [&](entity_reader& r) {
      auto info = r.store().info();
      if (!info) {
        ctx.warn(r.path().string() + ": " + info.error().message());
        if (rc == exit_ok)
          rc = exit_code_for(info.error().code());
        return;
      }
      info->path = r.path(); // the entity's file, not the private copy read
      rows.push_back({r.key(), *info, r.file_bytes()});
    },
    [&](const fs::path& file, const status& err) {
      ctx.warn(naming(file, err));
      if (rc == exit_ok)
        rc = exit_code_for(err.code());
    });
  if (!st)
    return ctx.fail(st);
  std::sort(rows.begin(), rows.end(),
            [](const row& a, const row& b) { return a.key.to_string() < b.key.to_string(); });
  std::vector<text_table::column> columns = {{"TENANT"},      {"TYPE"},       {"ID"},
                                             {"FACTS", true}, {"SIZE", true}, {"LAST_ACTIVITY"},
                                             {"SCHEMA", true}};
  if (shards)
    columns.push_back({"SHARD", true});
  text_table t(std::move(columns));
  std::set<std::string> tenants, types;
  int64_t facts = 0;
  uint64_t bytes = 0;
  for (auto& r : rows) {
    tenants.insert(r.key.tenant);
    types.insert(r.key.tenant + "/" + r.key.type);
    facts += r.info.fact_count;
    bytes += r.bytes;
    auto shard =
      shards ? nlohmann::json(shard_of_digest(r.key.digest(), shards)) : nlohmann::json(nullptr);
    if (ctx.json) {
      auto line =
        nlohmann::json{{"tenant", r.key.tenant},
                       {"type", r.key.type},
                       {"id", r.key.id},
                       {"facts", r.info.fact_count},
                       {"bytes", r.bytes},
                       {"last_fact_at", r.info.fact_count ? nlohmann::json(r.info.last_fact_ms)
                                                          : nlohmann::json(nullptr)},
                       {"created_at", r.info.created_at_ms},
                       {"schema_version", r.info.schema_version},
                       {"owner_epoch", r.info.owner_epoch ? nlohmann::json(r.info.owner_epoch)
                                                          : nlohmann::json(nullptr)},
                       {"owner_node", r.info.owner_epoch ? nlohmann::json(r.info.owner_node)
                                                         : nlohmann::json(nullptr)},
                       {"path", r.info.path.string()}};
      if (shards)
        line["shard"] = shard;
      ctx.json_line(line);
      continue;
    }
    std::vector<std::string> cells = {r.key.tenant,
                                      r.key.type,
                                      r.key.id,
                                      std::to_string(r.info.fact_count),
                                      human_bytes(r.bytes),
                                      r.info.fact_count ? ctx.time(r.info.last_fact_ms) : "-",
                                      std::to_string(r.info.schema_version)};
    if (shards)
      cells.push_back(shard.dump());
    t.add(std::move(cells));
  }
  if (!ctx.json) {
    t.print(ctx);
    ctx.out << rows.size() << (rows.size() == 1 ? " entity" : " entities") << ", " << tenants.size()
            << (tenants.size() == 1 ? " tenant" : " tenants") << ", " << types.size()
            << (types.size() == 1 ? " type" : " types") << ", " << facts
            << (facts == 1 ? " fact" : " facts") << ", " << human_bytes(bytes) << '\n';
  }
  if (rows.empty() && rc == exit_ok) // not a failure: an empty list, said in words
    ctx.warn(no_entities_message(scope, c.data));
  return rc;
}

// -- economics ----------------------------------------------------------------------------------

namespace {

/// Sums of cost facts: all of them, those of failed calls and those of succeeded ones.
struct money {
  int64_t facts = 0, failed_facts = 0;
  exact_decimal succeeded, failed, total;
  void add(const exact_decimal& amount, bool is_failed) {
    ++facts;
    total += amount;
    if (is_failed) {
      ++failed_facts;
      failed += amount;
    } else {
      succeeded += amount;
    }
  }
  /// The three sums at one scale: "0.00" rather than "0" beside "1.25".
  std::string text(const exact_decimal& d) const {
    return d.to_string(std::max({succeeded.scale(), failed.scale(), total.scale()}));
  }
};

/// What `economics` adds up over the entities of its scope.
struct economics {
  using cost_key = std::tuple<std::string, std::string, std::string>; // tool, currency, subtype
  std::map<cost_key, money> costs;
  std::map<std::string, money> by_currency;
  std::map<std::string, int64_t> errors_by_category;
  int64_t outcomes = 0, errors = 0, entities = 0, cost_facts_without_amount = 0;

  int64_t attempts() const { return outcomes + errors; }

  /// Adds one entity's cost, error and outcome facts in `window`.
  status add(const run_ctx& ctx, entity_reader& r, const fact_filter& window) {
    ++entities;
    auto& store = r.store();
    fact_filter f = window;
    f.type = "cost";
    auto s1 = scan_facts(store, f, [&](fact& x) {
      if (x.amount.empty()) {
        ++cost_facts_without_amount;
        return;
      }
      auto amount = exact_decimal::parse(x.amount);
      if (!amount) {
        ctx.warn(r.key().to_string() + " seq " + std::to_string(x.seq) + ": " +
                 amount.error().message());
        return;
      }
      auto data = nlohmann::json::parse(x.data, nullptr, false);
      bool failed = data.is_object() && data.contains("failed") && data["failed"] == true;
      costs[{x.tool_id, x.currency, x.subtype}].add(*amount, failed);
      by_currency[x.currency].add(*amount, failed);
    });
    if (!s1)
      return s1;
    f.type = "error";
    auto s2 = scan_facts(store, f, [&](fact& x) {
      ++errors;
      auto data = nlohmann::json::parse(x.data, nullptr, false);
      std::string category;
      for (auto* k : {"category", "error_type"})
        if (category.empty() && data.is_object() && data.contains(k) && data[k].is_string())
          category = data[k].get<std::string>();
      ++errors_by_category[category.empty() ? "unknown" : category];
    });
    if (!s2)
      return s2;
    f.type = "outcome";
    return scan_facts(store, f, [&](fact&) { ++outcomes; });
  }
};

nlohmann::json rate(int64_t n, int64_t d) {
  return d > 0 ? nlohmann::json(static_cast<double>(n) / static_cast<double>(d))
               : nlohmann::json(nullptr);
}

void print_economics_json(const run_ctx& ctx, const economics& e, const entity_scope& scope,
                          const fact_filter& window) {
  for (auto& [k, m] : e.costs)
    ctx.json_line({{"kind", "cost"},
                   {"tool_id", std::get<0>(k)},
                   {"currency", std::get<1>(k)},
                   {"subtype", std::get<2>(k)},
                   {"facts", m.facts},
                   {"failed_facts", m.failed_facts},
                   {"succeeded", m.text(m.succeeded)},
                   {"failed", m.text(m.failed)},
                   {"total", m.text(m.total)}});
  for (auto& [cur, m] : e.by_currency)
    ctx.json_line({{"kind", "cost_total"},
                   {"currency", cur},
                   {"facts", m.facts},
                   {"failed_facts", m.failed_facts},
                   {"succeeded", m.text(m.succeeded)},
                   {"failed", m.text(m.failed)},
                   {"total", m.text(m.total)}});
  for (auto& [cat, n] : e.errors_by_category)
    ctx.json_line({{"kind", "errors"},
                   {"category", cat},
                   {"count", n},
                   {"share", rate(n, e.errors)},
                   {"rate", rate(n, e.attempts())}});
  ctx.json_line({{"kind", "summary"},
                 {"scope", scope.to_string()},
                 {"since", window.since_ms ? nlohmann::json(*window.since_ms) : nullptr},
                 {"until", window.until_ms ? nlohmann::json(*window.until_ms) : nullptr},
                 {"entities", e.entities},
                 {"outcomes", e.outcomes},
                 {"errors", e.errors},
                 {"error_rate", rate(e.errors, e.attempts())}});
}

void print_economics_text(const run_ctx& ctx, const economics& e, const entity_scope& scope,
                          const fact_filter& window) {
  ctx.out << ctx.bold("window") << ": "
          << (window.since_ms ? ctx.time(*window.since_ms) : std::string("beginning")) << " .. "
          << (window.until_ms ? ctx.time(*window.until_ms) : std::string("now")) << ", "
          << scope.to_string() << " (" << e.entities << (e.entities == 1 ? " entity" : " entities")
          << ")\n\n"
          << ctx.bold("costs") << '\n';
  text_table ct({{"TOOL"},
                 {"CURRENCY"},
                 {"SUBTYPE"},
                 {"FACTS", true},
                 {"FAILED_FACTS", true},
                 {"SUCCEEDED", true},
                 {"FAILED", true},
                 {"TOTAL", true}});
  for (auto& [k, m] : e.costs)
    ct.add({or_dash(std::get<0>(k)), std::get<1>(k), or_dash(std::get<2>(k)),
            std::to_string(m.facts), std::to_string(m.failed_facts), m.text(m.succeeded),
            m.text(m.failed), m.text(m.total)});
  ct.print(ctx);
  ctx.out << '\n' << ctx.bold("totals by currency") << '\n';
  text_table tt({{"CURRENCY"},
                 {"FACTS", true},
                 {"FAILED_FACTS", true},
                 {"SUCCEEDED", true},
                 {"FAILED", true},
                 {"TOTAL", true}});
  for (auto& [cur, m] : e.by_currency)
    tt.add({cur, std::to_string(m.facts), std::to_string(m.failed_facts), m.text(m.succeeded),
            m.text(m.failed), m.text(m.total)});
  tt.print(ctx);
  ctx.out << '\n'
          << ctx.bold("errors") << ": " << e.errors << " of " << e.attempts()
          << " outcomes and errors, error rate " << percent(e.errors, e.attempts()) << '\n';
  text_table et({{"CATEGORY"}, {"ERRORS", true}, {"SHARE", true}, {"RATE", true}});
  for (auto& [cat, n] : e.errors_by_category)
    et.add({cat, std::to_string(n), percent(n, e.errors), percent(n, e.attempts())});
  et.print(ctx);
  if (e.cost_facts_without_amount > 0)
    ctx.out << e.cost_facts_without_amount << " cost facts without an amount were skipped\n";
}

} // namespace

int run_economics(const run_ctx& ctx, const common_options& c, const std::string& scope_text,
                  const std::string& since, const std::string& until) {
  entity_scope scope;
  if (int rc = prepare_scope(ctx, c, scope_text, "economics", scope))
    return rc;
  fact_options fo;
  fo.since = since;
  fo.until = until;
  auto window = make_filter(ctx, fo);
  if (!window)
    return ctx.fail(window.error());
  economics e;
  int rc = exit_ok;
  auto note = [&](const std::string& where, const status& err) {
    ctx.warn(where + ": " + err.message());
    if (rc == exit_ok)
      rc = exit_code_for(err.code());
  };
  auto st = for_each_entity(
    c.data, scope,
    [&](entity_reader& r) {
      if (auto s = e.add(ctx, r, *window); !s)
        note(r.key().to_string(), s);
    },
    [&](const fs::path& file, const status& err) {
      ctx.warn(naming(file, err));
      if (rc == exit_ok)
        rc = exit_code_for(err.code());
    });
  if (!st)
    return ctx.fail(st);
  if (ctx.json)
    print_economics_json(ctx, e, scope, *window);
  else
    print_economics_text(ctx, e, scope, *window);
  return rc;
}

// -- verify -------------------------------------------------------------------------------------

int run_verify(const run_ctx& ctx, const common_options& c, const std::string& scope_text) {
  entity_scope scope;
  if (int rc = prepare_scope(ctx, c, scope_text, "verify", scope))
    return rc;
  struct row {
    std::string entity; ///< "" when the file could not be read
    std::string path;
    bool ok = false;
    int64_t facts = 0;
    int schema = 0;
    int64_t owner_epoch = 0;
    int64_t first_bad_seq = 0;
    std::string problem;
    int code = exit_verify_failed;
  };
  std::vector<row> rows;
  auto st = for_each_entity(
    c.data, scope,
    [&](entity_reader& r) {
      row w;
      w.entity = r.key().to_string();
      w.path = r.path().string();
      w.schema = r.store().schema_version();
      auto v = r.store().verify();
      if (!v) {
        w.problem = v.error().message();
        w.code = exit_code_for(v.error().code());
      } else {
        w.ok = v->ok;
        w.facts = v->facts_checked;
        w.first_bad_seq = v->first_bad_seq;
        w.owner_epoch = v->owner_epoch;
        // verify() runs every check: a missing trigger does not hide an altered row.
        for (auto& p : v->problems)
          w.problem += (w.problem.empty() ? "" : "; ") + p;
      }
      rows.push_back(std::move(w));
    },
    [&](const fs::path& file, const status& err) {
      row w;
      w.path = file.string();
      w.problem = err.message();
      w.code = exit_code_for(err.code());
      rows.push_back(std::move(w));
    });
  if (!st)
    return ctx.fail(st);
  std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) {
    return std::tie(a.entity, a.path) < std::tie(b.entity, b.path);
  });
  text_table t({{"ENTITY"},
                {"RESULT"},
                {"FACTS", true},
                {"SCHEMA", true},
                {"FIRST_BAD_SEQ", true},
                {"PROBLEM"}});
  int rc = exit_ok;
  for (auto& w : rows) {
    if (!w.ok) {
      // One entity: a file that cannot be read has its own exit code; a sweep reports 1.
      rc = scope.single() ? w.code : exit_verify_failed;
      std::string where = w.entity.empty() ? w.path : w.entity;
      ctx.warn("verify " + where + ": " +
               (w.first_bad_seq ? "first bad seq " + std::to_string(w.first_bad_seq) + ": "
                                : std::string()) +
               w.problem);
    }
    if (ctx.json) {
      using nlohmann::json;
      ctx.json_line({{"entity", w.entity.empty() ? json(nullptr) : json(w.entity)},
                     {"path", w.path},
                     {"ok", w.ok},
                     {"facts_checked", w.facts},
                     {"schema_version", w.schema},
                     {"owner_epoch", w.owner_epoch ? json(w.owner_epoch) : json(nullptr)},
                     {"first_bad_seq",
                      w.first_bad_seq ? nlohmann::json(w.first_bad_seq) : nlohmann::json(nullptr)},
                     {"problem", w.ok ? nlohmann::json(nullptr) : nlohmann::json(w.problem)}});
      continue;
    }
    std::string result = w.ok ? "ok" : w.entity.empty() ? "UNREADABLE" : "FAIL";
    t.add({w.entity.empty() ? w.path : w.entity, result, std::to_string(w.facts),
           std::to_string(w.schema), w.first_bad_seq ? std::to_string(w.first_bad_seq) : "-",
           w.ok ? "-" : w.problem},
          {"", w.ok ? ctx.green(result) : ctx.red(result)});
  }
  if (!ctx.json)
    t.print(ctx);
  if (rows.empty())
    ctx.warn(no_entities_message(scope, c.data));
  return rc;
}

} // namespace factum::tools
