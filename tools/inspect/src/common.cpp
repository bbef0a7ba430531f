// common.cpp: helpers shared by the subcommands (scopes, entity arguments, filters, walking a
// data directory). Used by the one thread that runs a subcommand.
#include <system_error>

#include "commands.hpp"

namespace fs = std::filesystem;

namespace factum::tools {

std::string entity_scope::to_string() const {
  if (tenant.empty())
    return "all entities";
  std::string s = tenant;
  if (!type.empty())
    s += "/" + type;
  if (!id.empty())
    s += "/" + id;
  return s;
}

result<entity_scope> parse_scope(std::string_view text) {
  entity_scope s;
  if (text.empty())
    return s;
  std::string parts[3];
  size_t n = 0, start = 0;
  while (true) {
    auto slash = text.find('/', start);
    if (n == 3)
      return status{errc::invalid_argument,
                    "a scope is tenant, tenant/type or tenant/type/id, got '" +
                      std::string(text.substr(0, 200)) + "'"};
    parts[n++] = std::string(text.substr(start, slash - start));
    if (slash == std::string_view::npos)
      break;
    start = slash + 1;
  }
  static const char* what[] = {"tenant", "entity type", "entity id"};
  for (size_t i = 0; i < n; ++i)
    if (auto st = validate_key_part(parts[i], what[i]); !st)
      return st;
  s.tenant = parts[0];
  s.type = parts[1];
  s.id = parts[2];
  return s;
}

result<entity_key> parse_entity(std::string_view text) {
  return entity_key::parse(text);
}

std::string no_entities_message(const entity_scope& scope, const std::string& data) {
  return "no entities " + (scope.all() ? std::string() : "of " + scope.to_string() + " ") +
         "under " + data;
}

int require_local(const run_ctx& ctx, const common_options& c, const char* command) {
  if (!c.server.empty())
    return ctx.fail(
      exit_usage, std::string("--server is not supported by `") + command +
                    "` (only facts, tail, dead-letters, breakers and the fleet views); use --data");
  if (c.data.empty())
    return ctx.fail(exit_usage, "--data DIR is required");
  return 0;
}

result<fact_filter> make_filter(const run_ctx& ctx, const fact_options& o) {
  fact_filter f;
  f.type = o.type;
  f.subtype = o.subtype;
  f.trace_id = o.trace;
  f.tool_id = o.tool;
  f.idempotency_key = o.key;
  int64_t now = ctx.now();
  if (!o.since.empty()) {
    auto t = parse_time_arg(o.since, now, ctx.local_time);
    if (!t)
      return status{errc::invalid_argument, "--since: " + t.error().message()};
    f.since_ms = *t;
  }
  if (!o.until.empty()) {
    auto t = parse_time_arg(o.until, now, ctx.local_time);
    if (!t)
      return status{errc::invalid_argument, "--until: " + t.error().message()};
    f.until_ms = *t;
  }
  if (!o.after_seq.empty()) {
    auto s = parse_count(o.after_seq, "--after-seq");
    if (!s)
      return s.error();
    f.after_seq = *s;
  }
  if (!o.before_seq.empty()) {
    auto s = parse_count(o.before_seq, "--before-seq");
    if (!s)
      return s.error();
    f.before_seq = *s;
  }
  f.limit = 1;
  if (auto st = f.validate(); !st)
    return status{errc::invalid_argument, "--" + st.message()};
  return f;
}

namespace {

status orphan_wal_error() {
  return {errc::corruption,
          "write-ahead log without its database file (deleted?): it may hold the entity's last "
          "commits, and the runtime refuses to create that entity again until it is moved away"};
}

} // namespace

status for_each_entity(const fs::path& data_dir, const entity_scope& scope,
                       const std::function<void(entity_reader&)>& fn,
                       const std::function<void(const fs::path&, const status&)>& on_error) {
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec))
    return {errc::not_found, "no data directory " + data_dir.string()};
  if (scope.single()) { // one file: no need to open the others
    entity_key key{scope.tenant, scope.type, scope.id};
    auto r = entity_reader::open(data_dir, key);
    if (!r) {
      if (r.error().code() == errc::not_found) {
        if (auto wal = orphan_wal(key.file_path(data_dir))) { // its .db deleted by hand: say so
          on_error(*wal, orphan_wal_error());
          return status::ok();
        }
        return r.error();
      }
      on_error(key.file_path(data_dir), r.error());
      return status::ok();
    }
    fn(**r);
    return status::ok();
  }
  for (auto& file : list_entity_files(data_dir)) {
    auto r = entity_reader::open(file); // one at a time: bounds open files and copies
    if (!r) {
      // not_found: no entity there. The file went since the listing, or it is an unclaimed
      // spare at a key's path (a crash between a creation's rename and its claim; the next
      // open of that key claims it: docs/storage-format.md section 1): not a fault to report.
      if (r.error().code() != errc::not_found)
        on_error(file, r.error());
      continue;
    }
    if (scope.contains((*r)->key()))
      fn(**r);
  }
  // A -wal without its .db names no key (the file name is a digest of it): reported only when
  // the scope is everything.
  if (scope.all())
    for (auto& wal : list_orphan_wals(data_dir))
      on_error(wal, orphan_wal_error());
  return status::ok();
}

} // namespace factum::tools
