// http/restore_routes.cpp: point-in-time recovery and forks over HTTP (docs/http-api.md,
// "Bookmarks, rollback and fork"): GET .../bookmark (scope read) names an archived commit;
// POST .../rollback/{bookmark} and POST .../fork/{type}/{id} (scope operate) run
// runtime::rollback_entity and fork_entity (paths of more segments than a method call's, so
// that no method name is shadowed). The bookmark is read on the I/O thread (one small file); a
// rollback or a fork waits for the entity and a storage thread, so it runs on a thread of its own,
// which answers.
#include <thread>

#include "factum/storage/sha256.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"

namespace factum::http::steps {

namespace {

/// Rollbacks and forks running at once per gateway; one more is refused (each holds a thread).
constexpr int max_running = 4;

/// The HTTP answer to a runtime's refusal: the error table's, in the scope of restores.
const problem_kind& restore_problem(const status& st) {
  return problem_of(st.code(), errc_scope::restore);
}

/// The body as a JSON object whose members are all `known`; else a refusal.
verdict body_object(const exchange& x, std::initializer_list<std::string_view> known, json& out) {
  out = json::parse(x.req.body, nullptr, false);
  if (!out.is_object())
    return refusal{problems::invalid_argument, "the body must be a JSON object"};
  for (auto& [k, v] : out.items()) {
    bool ok = false;
    for (auto n : known)
      ok = ok || k == n;
    if (!ok)
      return refusal{problems::invalid_argument,
                     "unknown member '" + std::string(clip(k, 64)) + "'"};
  }
  return std::nullopt;
}

/// A string member of 1..`max` bytes (`required`), into `out`.
verdict string_member(const json& b, const char* name, size_t max, bool required,
                      std::string& out) {
  if (!b.contains(name)) {
    if (required)
      return refusal{problems::invalid_argument, std::string("'") + name + "' is required"};
    return std::nullopt;
  }
  const auto& v = b[name];
  if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > max)
    return refusal{problems::invalid_argument, std::string("'") + name +
                                                 "' must be a string of 1 to " +
                                                 std::to_string(max) + " bytes"};
  out = v.get<std::string>();
  return std::nullopt;
}

/// The body's optional `member` names the tenant the client means (a command line that names
/// TENANT/TYPE/ID): it must be the key's, or the client would act on another entity than it
/// thinks.
verdict tenant_expected(const json& b, const char* member, const entity_ref& e) {
  std::string named;
  if (auto no = string_member(b, member, 128, false, named); no || named.empty())
    return no;
  if (named != e.tenant.name)
    return refusal{problems::tenant_mismatch,
                   std::string("'") + member + "' is " + std::string(clip(named, 128)) +
                     ", but this API key is tenant " + e.tenant.name + "'s"};
  return std::nullopt;
}

/// Runs `work` on a thread of its own, which answers with what it returns. The gateway counts
/// it: the server's stop waits for it (it uses the gateway and the runtime until it answers).
void run_blocking(gateway& gw, const exchange_ptr& x, std::function<http_response()> work) {
  if (!gw.begin_restore(max_running))
    return refuse(gw, *x, {problems::too_many_restores, "too many rollbacks and forks at once"});
  std::thread([&gw, x, work = std::move(work)] {
    finish(gw, *x, work());
    gw.end_restore();
  }).detach();
}

http_response json_answer(exchange& x, json body) {
  http_response r;
  r.trace_id = x.trace_id;
  r.body = body.dump();
  return r;
}

} // namespace

void get_bookmark(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  auto q = parse_query(x->query, {}, {"at", "seq"}, false, false);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  if (q.args.contains("at") == q.args.contains("seq"))
    return refuse(gw, *x, {problems::invalid_query, "give exactly one of at (ms) and seq"});
  bookmark_query bq;
  if (q.args.contains("at"))
    bq.at_time_ms = q.args["at"].get<int64_t>();
  else
    bq.at_seq = q.args["seq"].get<int64_t>();
  auto p = gw.rt().bookmark(entity_key{e.tenant.name, e.type, e.id}, bq);
  if (!p)
    return refuse(gw, *x, {restore_problem(p.error()), p.error().message()});
  finish(gw, *x,
         json_answer(*x, {{"bookmark", p->bookmark()},
                          {"epoch", p->epoch},
                          {"generation", p->gen},
                          {"seq", p->seq},
                          {"time_ms", p->time_ms}}));
}

void post_rollback(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  json b = json::object();
  std::string note;
  verdict no = no_query(*x);
  if (!no && !x->req.body.empty())
    no = body_object(*x, {"note", "tenant"}, b);
  if (!no)
    no = string_member(b, "note", 500, false, note);
  if (!no)
    no = tenant_expected(b, "tenant", e);
  auto point = archive_point::parse(x->seg[5]);
  if (!no && !point)
    no = refusal{problems::invalid_argument, point.error().message()};
  if (no)
    return refuse(gw, *x, std::move(*no));
  entity_key key{e.tenant.name, e.type, e.id};
  note = note.empty() ? key_actor(*x) : note + " (" + key_actor(*x) + ")";
  run_blocking(gw, x, [&gw, x, key, to = *point, note]() -> http_response {
    auto r = gw.rt().rollback_entity(key, to, note);
    if (!r)
      return problem(*x, restore_problem(r.error()), r.error().message());
    return json_answer(*x, {{"bookmark", r->to.bookmark()},
                            {"to_seq", r->to.seq},
                            {"from_seq", r->from_seq},
                            {"from_hash", r->from_hash},
                            {"fact_seq", r->fact_seq}});
  });
}

void post_fork(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  json b = json::object();
  std::string bookmark, note, tenant = e.tenant.name, other_key;
  const std::string& type = x->seg[5];
  const std::string& id = x->seg[6];
  verdict no = no_query(*x);
  if (!no && !x->req.body.empty())
    no = body_object(*x, {"tenant", "bookmark", "note", "tenant_api_key", "source_tenant"}, b);
  if (!no)
    no = tenant_expected(b, "source_tenant", e);
  if (!no)
    no = string_member(b, "tenant", 128, false, tenant);
  if (!no)
    no = string_member(b, "bookmark", 100, false, bookmark);
  if (!no)
    no = string_member(b, "note", 500, false, note);
  if (!no)
    no = string_member(b, "tenant_api_key", 512, false, other_key);
  for (const std::string* part : std::initializer_list<const std::string*>{&tenant, &type, &id})
    if (!no)
      if (auto st = check_key_part(*part, "the fork's key"); !st)
        no = refusal{problems::invalid_argument, st.message()};
  std::optional<archive_point> at;
  if (!no && !bookmark.empty()) {
    auto p = archive_point::parse(bookmark);
    if (!p)
      no = refusal{problems::invalid_argument, p.error().message()};
    else
      at = *p;
  }
  // Another tenant's entity: the operator proves it operates that tenant too (its key).
  if (!no && tenant != e.tenant.name) {
    bool allowed = false;
    auto digest = other_key.empty() ? std::string() : sha256_hex(other_key);
    for (const auto& t : gw.config().tenants)
      if (t.name == tenant)
        for (const auto& k : t.keys)
          allowed = allowed || (!digest.empty() && constant_time_equal(k.sha256, digest) &&
                                (k.scopes & scope_operate) != 0);
    if (!allowed)
      no = refusal{problems::insufficient_scope,
                   "a fork into tenant " + tenant +
                     " needs 'tenant_api_key', a key of that tenant with the 'operate' scope"};
  }
  if (no)
    return refuse(gw, *x, std::move(*no));
  entity_key from{e.tenant.name, e.type, e.id}, to{tenant, type, id};
  note = note.empty() ? key_actor(*x) : note + " (" + key_actor(*x) + ")";
  run_blocking(gw, x, [&gw, x, from, to, at, note]() -> http_response {
    auto r = gw.rt().fork_entity(from, to, at, note);
    if (!r)
      return problem(*x, restore_problem(r.error()), r.error().message());
    json out = {{"to", to.to_string()},
                {"source_seq", r->source_seq},
                {"source_hash", r->source_hash},
                {"fact_seq", r->fact_seq}};
    if (r->at)
      out["bookmark"] = r->at->bookmark();
    return json_answer(*x, std::move(out));
  });
}

} // namespace factum::http::steps
