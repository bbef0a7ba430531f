// archive_cmd.cpp: reading an entity as it was, from the continuous archive of `factum serve`
// (archive_dir; docs/operations.md, "Point-in-time recovery and forks"): the opening every
// per-entity command shares (the live file under --data, or with --as-of / --as-of-seq the file
// rebuilt at an archived commit under --archive), `state` (the entity's whole state besides its
// facts in one view), `bookmark` (the commit at a time or a seq) and `bookmarks` (every archived
// commit). The archive is only read: a rebuilt file goes to a temporary directory of the
// reader's. Runs on the thread that parses the command line.
#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <system_error>

#include "commands.hpp"
#include "factum/http/client.hpp"
#include "factum/storage/wal_archive.hpp"
#include "records.hpp"
#include "remote.hpp"

namespace fs = std::filesystem;

namespace factum::tools {

namespace {

/// `key`'s archive directory under --archive, or NOT_FOUND naming what is missing.
result<fs::path> archive_of(const common_options& c, const entity_key& key) {
  std::error_code ec;
  if (!fs::is_directory(c.archive, ec))
    return status{errc::not_found, "no archive directory " + c.archive};
  auto dir = entity_archive_dir(c.archive, key);
  if (!fs::exists(dir / "index", ec))
    return status{errc::not_found,
                  "the archive " + c.archive + " holds nothing of " + key.to_string()};
  return dir;
}

/// The archived commit that --as-of (a time or a bookmark) or --as-of-seq names.
result<archive_point> resolve_as_of(const run_ctx& ctx, const common_options& c,
                                    const entity_key& key) {
  auto dir = archive_of(c, key);
  if (!dir)
    return dir.error();
  if (!c.as_of_seq.empty()) {
    auto n = parse_count(c.as_of_seq, "--as-of-seq");
    if (!n)
      return n.error();
    return find_bookmark(*dir, {std::nullopt, *n});
  }
  if (auto b = archive_point::parse(c.as_of); b) {
    auto points = archive_points(*dir);
    if (!points)
      return points.error();
    for (const auto& p : *points)
      if (p.epoch == b->epoch && p.gen == b->gen && p.end == b->end && p.seq == b->seq) {
        if (!archive_point_restorable(*dir, p))
          return status{errc::not_found, "bookmark " + c.as_of + " was pruned from the archive"};
        return p;
      }
    return status{errc::not_found,
                  "bookmark " + c.as_of + " is no commit of " + key.to_string() + "'s archive"};
  }
  auto t = parse_time_arg(c.as_of, ctx.now(), ctx.local_time);
  if (!t)
    return status{errc::invalid_argument,
                  "--as-of takes a time (ISO 8601, epoch ms or an age such as 2h) or a "
                  "bookmark (EPOCH.GEN.END.SEQ): " +
                    t.error().message()};
  return find_bookmark(*dir, {*t, std::nullopt});
}

std::string entity_route(const entity_key& key) {
  return "/v1/entities/" + http::client::percent_encode(key.type) + "/" +
         http::client::percent_encode(key.id);
}

/// The JSON of a bookmark, as the bookmark route answers it.
nlohmann::json point_json(const archive_point& p) {
  return {{"bookmark", p.bookmark()},
          {"epoch", p.epoch},
          {"generation", p.gen},
          {"seq", p.seq},
          {"time_ms", p.time_ms}};
}

/// The "at=MS" or "seq=N" of a bookmark question, or INVALID_ARGUMENT.
result<bookmark_query> bookmark_question(const run_ctx& ctx, const std::string& at,
                                         const std::string& seq) {
  if (at.empty() == seq.empty())
    return status{errc::invalid_argument, "give exactly one of --at TIME and --seq N"};
  bookmark_query q;
  if (!at.empty()) {
    auto t = parse_time_arg(at, ctx.now(), ctx.local_time);
    if (!t)
      return t.error();
    q.at_time_ms = *t;
  } else {
    auto n = parse_count(seq, "--seq");
    if (!n)
      return n.error();
    q.at_seq = *n;
  }
  return q;
}

void print_point(const run_ctx& ctx, const archive_point& p) {
  if (ctx.json)
    ctx.json_line(point_json(p));
  else
    ctx.out << p.bookmark() << "  seq " << p.seq << "  " << ctx.time(p.time_ms) << '\n';
}

} // namespace

// -- the opening every per-entity command shares ------------------------------------------------

opened_entity open_entity(const run_ctx& ctx, const common_options& c, const std::string& entity,
                          const char* command) {
  opened_entity out;
  bool as_of = !c.as_of.empty() || !c.as_of_seq.empty();
  auto fail = [&](int rc) {
    out.rc = rc;
    return std::move(out);
  };
  if (!as_of) {
    if (!c.archive.empty())
      return fail(ctx.fail(exit_usage, "--archive is read with --as-of or --as-of-seq"));
    if (int rc = require_local(ctx, c, command))
      return fail(rc);
  } else {
    if (!c.as_of.empty() && !c.as_of_seq.empty())
      return fail(ctx.fail(exit_usage, "--as-of and --as-of-seq exclude each other"));
    if (!c.server.empty() || !c.data.empty())
      return fail(ctx.fail(exit_usage, "--as-of and --as-of-seq read the archive alone: give "
                                       "--archive DIR, not --data or --server"));
    if (c.archive.empty())
      return fail(ctx.fail(exit_usage, "--as-of and --as-of-seq need --archive DIR (the "
                                       "server's archive_dir)"));
  }
  auto key = parse_entity(entity);
  if (!key)
    return fail(ctx.fail(key.error()));
  if (!as_of) {
    auto r = entity_reader::open(c.data, *key);
    if (!r)
      return fail(ctx.fail(r.error()));
    out.reader = std::move(*r);
    out.now = ctx.now();
    return out;
  }
  auto at = resolve_as_of(ctx, c, *key);
  if (!at)
    return fail(ctx.fail(at.error()));
  auto r = entity_reader::open_archived(c.archive, *key, *at);
  if (!r)
    return fail(ctx.fail(r.error()));
  out.reader = std::move(*r);
  out.now = at->time_ms;
  return out;
}

// -- state ----------------------------------------------------------------------------------------

int run_state(const run_ctx& ctx, const common_options& c, const std::string& entity) {
  auto e = open_entity(ctx, c, entity, "state");
  if (e.rc)
    return e.rc;
  auto& store = e.reader->store();
  auto breakers = store.list_breakers();
  if (!breakers)
    return ctx.fail(breakers.error());
  auto dead = store.list_dead_letters(std::nullopt, -1);
  if (!dead)
    return ctx.fail(dead.error());
  const auto& at = e.reader->archived();
  if (ctx.json) {
    nlohmann::json head = {{"record", "entity"},
                           {"entity", store.key().to_string()},
                           {"last_seq", store.last_seq()},
                           {"head_hash", store.head_hash()},
                           {"as_of", at ? point_json(*at) : nlohmann::json(nullptr)}};
    ctx.json_line(head);
  } else {
    ctx.out << ctx.bold("entity") << "    " << store.key().to_string() << '\n';
    if (at)
      ctx.out << ctx.bold("as of") << "     bookmark " << at->bookmark() << ", committed "
              << ctx.time(at->time_ms) << '\n';
    ctx.out << ctx.bold("facts") << "     " << store.last_seq() << ", chain head "
            << or_dash(store.head_hash()) << "\n\n"
            << ctx.bold("idempotency keys") << '\n';
  }
  if (auto st = print_keys(ctx, store, "", 0, e.now, "key"); !st)
    return ctx.fail(st);
  if (!ctx.json)
    ctx.out << '\n' << ctx.bold("alarms") << '\n';
  if (auto st = print_alarms(ctx, store, e.now, "alarm"); !st)
    return ctx.fail(st);
  if (!ctx.json)
    ctx.out << '\n' << ctx.bold("circuit breakers") << '\n';
  print_breakers(ctx, *breakers, "breaker");
  if (!ctx.json)
    ctx.out << '\n' << ctx.bold("dead letters") << '\n';
  print_dead_letters(ctx, *dead, std::nullopt, 0, "dead_letter");
  return exit_ok;
}

// -- bookmark, bookmarks --------------------------------------------------------------------------

int print_remote_bookmark(const run_ctx& ctx, const remote_api& api, const std::string& route,
                          const std::string& at, const std::string& seq) {
  auto q = bookmark_question(ctx, at, seq);
  if (!q)
    return ctx.fail(exit_usage, q.error().message());
  auto query =
    q->at_time_ms ? "at=" + std::to_string(*q->at_time_ms) : "seq=" + std::to_string(*q->at_seq);
  auto r = api.get_json(route + "/bookmark?" + query);
  if (!r)
    return ctx.fail(r.error());
  if (ctx.json)
    ctx.json_line(*r);
  else
    ctx.out << r->value("bookmark", "") << "  seq " << r->value("seq", int64_t{0}) << "  "
            << ctx.time(r->value("time_ms", int64_t{0})) << '\n';
  return exit_ok;
}

int run_bookmark(const run_ctx& ctx, const common_options& c, const std::string& entity,
                 const std::string& at, const std::string& seq) {
  if (c.server.empty() == c.archive.empty())
    return ctx.fail(exit_usage, "give exactly one of --archive DIR and --server URL");
  auto key = parse_entity(entity);
  if (!key)
    return ctx.fail(key.error());
  if (!c.server.empty()) {
    auto api =
      remote_api::make(c.server, c.api_key,
                       std::chrono::milliseconds(static_cast<int64_t>(c.http_timeout_s * 1000)));
    if (!api)
      return ctx.fail(api.error());
    return print_remote_bookmark(ctx, *api, entity_route(*key), at, seq);
  }
  auto q = bookmark_question(ctx, at, seq);
  if (!q)
    return ctx.fail(exit_usage, q.error().message());
  auto dir = archive_of(c, *key);
  if (!dir)
    return ctx.fail(dir.error());
  auto p = find_bookmark(*dir, *q);
  if (!p)
    return ctx.fail(p.error());
  print_point(ctx, *p);
  return exit_ok;
}

int run_bookmarks(const run_ctx& ctx, const common_options& c, const std::string& entity,
                  const std::string& since, const std::string& until, int64_t limit, bool newest) {
  if (c.archive.empty())
    return ctx.fail(exit_usage, "--archive DIR is required (the server's archive_dir)");
  if (limit < 0)
    return ctx.fail(exit_usage, "--limit must not be negative");
  int64_t from = INT64_MIN, to = INT64_MAX;
  for (auto [text, bound] : {std::pair{&since, &from}, {&until, &to}}) {
    if (text->empty())
      continue;
    auto t = parse_time_arg(*text, ctx.now(), ctx.local_time);
    if (!t)
      return ctx.fail(exit_usage, t.error().message());
    *bound = *t;
  }
  auto key = parse_entity(entity);
  if (!key)
    return ctx.fail(key.error());
  auto dir = archive_of(c, *key);
  if (!dir)
    return ctx.fail(dir.error());
  auto points = archive_points(*dir);
  if (!points)
    return ctx.fail(points.error());
  std::vector<const archive_point*> shown;
  for (const auto& p : *points)
    if (p.time_ms >= from && p.time_ms < to)
      shown.push_back(&p);
  if (newest)
    std::reverse(shown.begin(), shown.end());
  if (limit > 0 && static_cast<int64_t>(shown.size()) > limit)
    shown.resize(static_cast<size_t>(limit));
  std::map<std::pair<int64_t, int64_t>, bool> restorable; // per (epoch, generation)
  text_table t(
    {{"BOOKMARK"}, {"SEQ", true}, {"COMMITTED"}, {"EPOCH", true}, {"GEN", true}, {"RESTORABLE"}});
  for (const auto* p : shown) {
    auto [it, fresh] = restorable.try_emplace({p->epoch, p->gen}, false);
    if (fresh)
      it->second = archive_point_restorable(*dir, *p);
    if (ctx.json) {
      auto j = point_json(*p);
      j["restorable"] = it->second;
      ctx.json_line(j);
    } else {
      t.add({p->bookmark(), std::to_string(p->seq), ctx.time(p->time_ms), std::to_string(p->epoch),
             std::to_string(p->gen), it->second ? "yes" : "no (pruned)"});
    }
  }
  if (!ctx.json)
    t.print(ctx);
  return exit_ok;
}

} // namespace factum::tools
