// http/fleet_routes.cpp: the operator's views across a tenant's entities (docs/http-api.md,
// "Fleet views"): GET /v1/dead-letters, POST /v1/dead-letters/{retry|discard} (bulk, with a dry
// run) and GET /v1/breakers. Which entities to look at comes from the tenant index (its
// per-entity summaries, storage/tenant_index.hpp); a dead letter's detail and every action go
// through the owning entity's actor, as the per-entity routes do. A request starts on an I/O
// thread, reads the index on a storage thread and walks the entities one at a time from the
// CAF workers their replies arrive on (a `walk` is touched by one thread at a time). In a
// cluster a client's request gathers every node's part (fleet.hpp) and a bulk action acts on
// each dead letter at its owner.
#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <tuple>

#include "factum/storage/records.hpp"
#include "factum/storage/tenant_index.hpp"
#include "forwarder.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"
#include "routes/fleet.hpp"

namespace factum::http::steps {

namespace {

constexpr std::string_view bad_cursor = "parameter 'after' is not a cursor this server gave";

// -- dead letters: the walk over the entities the index names --

/// Which dead letters, from where, how many, and (for an action) what to do with them.
struct dl_query {
  dead_letter_filter filter;
  std::string type;               ///< only this entity type; empty: every type
  std::string from_type, from_id; ///< the cursor's entity (included)
  int64_t after_created = -1;     ///< and its last dead letter done (-1: none)
  std::string after_dl;           ///< (created_at, id)
  int64_t limit = 100;            ///< dead letters in the page (1..1000)
  bool action = false;            ///< false: a listing
  std::string action_name;        ///< "retry" or "discard"
  bool dry_run = false;
  json note; ///< the operator's free text for each action's fact (null: none)
};

/// One request's walk: the entities the index named, the next one to read, and the answer so
/// far. Each step runs on the thread of the reply that ends the previous one.
struct walk {
  gateway* gw = nullptr;
  exchange_ptr x;
  dl_query q;
  std::string tenant;
  std::string actor;                                    ///< "api-key:<id>" (actions)
  std::vector<std::pair<entity_key, int64_t>> entities; ///< from the index, limit + 1 at most
  size_t next = 0;                                      ///< the entity to read next
  int64_t matched = 0;                                  ///< the index's count for the filter
  int64_t taken = 0;                                    ///< dead letters in the page so far
  int64_t acted = 0, skipped = 0, failed = 0;           ///< actions
  json items = json::array();                           ///< dead letters or action results
  json errors = json::array();                          ///< entities that could not be read
  json last = nullptr;                                  ///< the cursor of the last item taken
  bool full = false;                                    ///< the page is full and more remain
  answer_sink sink; ///< where the answer goes when not to the client (a cluster's part)
  std::optional<json> merged_next; ///< a cluster's action: the merged listing's cursor
  std::mutex mu;                   ///< the replies of one entity's actions arrive on any worker
  std::atomic<int> pending{0};     ///< actions of one entity under way
};
using walk_ptr = std::shared_ptr<walk>;

call_options walk_options(const walk& w) {
  call_options o;
  o.trace_id = w.x->trace_id;
  o.timeout = w.gw->config().call_timeout;
  return o;
}

void walk_step(const walk_ptr& w);

void walk_answer(const walk_ptr& w) {
  json body = {{"matched", w->matched}};
  if (w->merged_next) // a cluster's actions answered in any order: shown in the listing's
    std::sort(w->items.begin(), w->items.end(), [](const json& a, const json& b) {
      return std::make_tuple(a.value("type", ""), a.value("id", ""), a.value("dead_letter", "")) <
             std::make_tuple(b.value("type", ""), b.value("id", ""), b.value("dead_letter", ""));
    });
  if (w->q.action) {
    body["action"] = w->q.action_name;
    body["dry_run"] = w->q.dry_run;
    body[w->q.dry_run ? "would_act" : "acted"] = w->acted;
    body["skipped"] = w->skipped;
    body["failed"] = w->failed;
    body["results"] = std::move(w->items);
  } else {
    body["dead_letters"] = std::move(w->items);
  }
  body["errors"] = std::move(w->errors);
  // More when the page filled up, or when the index named more entities than were read.
  bool more = w->full || w->entities.size() > static_cast<size_t>(w->q.limit);
  std::string cursor = more && !w->last.is_null() ? encode_cursor(w->last) : "";
  body["next"] = cursor.empty() ? json(nullptr) : json(cursor);
  if (w->merged_next)
    body["next"] = *w->merged_next;
  auto r = page_answer(*w->x, body);
  if (w->q.action)
    r.link.clear(); // a POST's cursor goes into the next body, not a Link
  answer(*w->gw, w->x, w->sink, std::move(r));
}

/// Whether dead letter `d` of `key` is past the cursor and in the filter's reason.
bool wanted(const walk& w, const entity_key& key, const json& d) {
  if (!w.q.filter.reason.empty() && d.value("reason", "") != w.q.filter.reason)
    return false;
  if (w.q.after_created < 0 || key.type != w.q.from_type || key.id != w.q.from_id)
    return true;
  return std::make_tuple(d.value("created_at", int64_t{0}), d.value("id", "")) >
         std::make_tuple(w.q.after_created, w.q.after_dl);
}

/// Whether retry and discard may move a dead letter in `status`: both lead out of every state
/// but the final ones (factum/resilience/dead_letter_rules.hpp, validate_transition; the entity
/// checks again when it acts). The gateway does not link the resilience library.
bool actionable(const std::string& status) {
  return status == "pending" || status == "scheduled" || status == "acknowledged";
}

/// The arguments of the entity's `@dead_letter` for the walk's action on `d`.
std::string action_args(const walk& w, const json& d) {
  json args = {{"id", d.value("id", "")}, {"action", w.q.action_name}, {"actor", w.actor}};
  if (!w.q.note.is_null())
    args["reason"] = w.q.note;
  return args.dump();
}

/// The action's result for one dead letter, counted.
void note_result(walk& w, const entity_key& key, const json& d, const call_reply* r) {
  json item = {{"type", key.type},
               {"id", key.id},
               {"dead_letter", d.value("id", "")},
               {"status", d.value("status", "")}};
  if (!r) {
    ++w.acted; // a dry run: what would be done
    return w.items.push_back(std::move(item));
  }
  if (r->ok) {
    ++w.acted;
    item["new_status"] = r->json().value("status", "");
  } else {
    ++w.failed;
    item["error"] = r->code;
  }
  w.items.push_back(std::move(item));
}

/// An entity's dead letters arrived: the wanted ones go into the page (a listing) or are acted
/// on (all of this entity's at once; its actor runs them in order), then the next entity.
void walk_read(const walk_ptr& w, const entity_key& key, call_reply r) {
  if (!r.ok) {
    w->errors.push_back({{"type", key.type}, {"id", key.id}, {"error", r.code}});
    return walk_step(w);
  }
  auto list = r.json();
  std::vector<json> acts;
  for (auto& d : list) {
    if (!d.is_object() || !wanted(*w, key, d))
      continue;
    if (w->taken == w->q.limit) {
      w->full = true;
      break;
    }
    ++w->taken;
    w->last = json::array({key.type, key.id, d.value("created_at", int64_t{0}), d.value("id", "")});
    if (!w->q.action) {
      d["entity_type"] = key.type;
      d["entity_id"] = key.id;
      w->items.push_back(std::move(d));
      continue;
    }
    if (!actionable(d.value("status", ""))) {
      ++w->skipped;
      continue;
    }
    if (w->q.dry_run)
      note_result(*w, key, d, nullptr);
    else
      acts.push_back(std::move(d));
  }
  if (!w->full) // all of this entity's are done: the next page starts after it
    w->last = json::array({key.type, key.id, INT64_MAX, ""});
  if (acts.empty())
    return w->full ? walk_answer(w) : walk_step(w);
  w->pending = static_cast<int>(acts.size());
  for (auto& d : acts) {
    w->gw->rt().call(key, "@dead_letter", action_args(*w, d), walk_options(*w),
                     [w, key, d](call_reply r) {
                       {
                         std::lock_guard<std::mutex> g(w->mu);
                         note_result(*w, key, d, &r);
                       }
                       if (--w->pending == 0) // the last one: nothing else touches `w` now
                         w->full ? walk_answer(w) : walk_step(w);
                     });
  }
}

/// Reads the next entity's dead letters through its actor, or answers when none is left.
void walk_step(const walk_ptr& w) {
  if (w->next >= w->entities.size() || w->next >= static_cast<size_t>(w->q.limit))
    return walk_answer(w);
  auto key = w->entities[w->next++].first;
  json args = {{"limit", 10000}};
  if (!w->q.filter.status.empty())
    args["status"] = w->q.filter.status;
  w->gw->rt().call(key, "@dead_letters", args.dump(), walk_options(*w),
                   [w, key](call_reply r) { walk_read(w, key, std::move(r)); });
}

/// Reads the index on a storage thread (the filter's count and the entities from the
/// cursor's), then walks them.
void start_walk(const walk_ptr& w) {
  auto failed = std::make_shared<status>();
  w->gw->rt().read_tenant_index(
    [w, failed](tenant_index* ix) {
      if (!ix) {
        *failed = status{errc::unavailable, "the runtime is stopping"};
        return;
      }
      // A cursor that ends an entity (all its dead letters done) names it, and the index lists
      // from it, included: it is dropped, so that it does not take a read of the page's.
      bool done_entity = w->q.after_created == INT64_MAX;
      auto n = ix->count_dead_letters(w->tenant, w->q.filter);
      auto e = n ? ix->dead_letter_entities(w->tenant, w->q.filter, w->q.type, w->q.from_type,
                                            w->q.from_id, w->q.limit + 1 + done_entity)
                 : n.error();
      if (!e) {
        *failed = e.error();
        return;
      }
      if (done_entity && !e->empty() && e->front().first.type == w->q.from_type &&
          e->front().first.id == w->q.from_id)
        e->erase(e->begin());
      w->matched = *n;
      w->entities = std::move(e.value());
    },
    [w, failed] {
      if (!*failed)
        return answer(
          *w->gw, w->x, w->sink,
          problem(*w->x, problems::unavailable, "the tenant index: " + failed->message()));
      walk_step(w);
    });
}

// -- a cluster's bulk action --

/// Acts on `d` of `key` at its owner: here through its actor, on another node through the
/// per-entity route relayed there (its answer counted as the actor's would be).
void act_at_owner(const walk_ptr& w, const entity_key& key, const json& d) {
  auto done = [w, key, d](call_reply r) {
    {
      std::lock_guard<std::mutex> g(w->mu);
      note_result(*w, key, d, &r);
    }
    if (--w->pending == 0) // the last one: nothing else touches `w` now
      walk_answer(w);
  };
  auto route = w->gw->config().cluster->route(key, false);
  if (route.to == shard_route::where::local) {
    return w->gw->rt().call(key, "@dead_letter", action_args(*w, d), walk_options(*w), done);
  }
  if (route.to != shard_route::where::forward) {
    call_reply r;
    r.code = route.code;
    return done(std::move(r));
  }
  http_request req = w->x->req; // the client's API key goes along
  req.verb = "POST";
  req.target = "/v1/entities/" + client::percent_encode(key.type) + "/" +
               client::percent_encode(key.id) + "/dead-letters/" +
               client::percent_encode(d.value("id", "")) + "/" + w->q.action_name;
  req.body = w->q.note.is_null() ? "" : json{{"reason", w->q.note}}.dump();
  req.has_content_type = !req.body.empty();
  req.content_type = "application/json";
  req.idempotency_key.clear();
  req.idempotency_key_count = 0;
  w->gw->relay()->send(route.address, req, w->x->trace_id, route.epoch, [done](forwarded_reply fr) {
    call_reply r;
    r.ok = fr.res.status == 200;
    r.body = std::move(fr.res.body);
    if (!r.ok) {
      auto j = r.json();
      r.code = j.is_object() ? j.value("code", "") : "";
      if (r.code.empty())
        r.code = fr.not_owner ? problems::not_owner.code : problems::unavailable.code;
    }
    done(std::move(r));
  });
}

/// The merged listing's dead letters, acted on (or, in a dry run, counted); its cursor and
/// counts are the answer's.
void act_on_listed(const walk_ptr& w, json page) {
  w->matched = page.value("matched", int64_t{0});
  w->errors = std::move(page["errors"]);
  w->merged_next = std::move(page["next"]);
  std::vector<std::pair<entity_key, json>> acts;
  for (auto& d : page["dead_letters"]) {
    entity_key key{w->tenant, d.value("entity_type", ""), d.value("entity_id", "")};
    if (!actionable(d.value("status", "")))
      ++w->skipped;
    else if (w->q.dry_run)
      note_result(*w, key, d, nullptr);
    else
      acts.emplace_back(std::move(key), std::move(d));
  }
  if (acts.empty())
    return walk_answer(w);
  w->pending = static_cast<int>(acts.size());
  for (auto& [key, d] : acts)
    act_at_owner(w, key, d);
}

/// A cluster's bulk action: the dead letters the filter takes are listed across every node (one
/// page of GET /v1/dead-letters, merged), then each is acted on at its owner. Each dead letter
/// of the page is acted on once; the answer's cursor is the merged listing's.
void act_across_nodes(const walk_ptr& w, const json& body) {
  auto listing = std::make_shared<walk>(); // this node's part of the listing
  listing->gw = w->gw;
  listing->x = w->x;
  listing->tenant = w->tenant;
  listing->q = w->q;
  listing->q.action = false;
  http_request req = w->x->req; // the client's API key and trace go along
  req.verb = "GET";
  req.body.clear();
  req.has_content_type = false;
  req.content_type.clear();
  req.target = "/v1/dead-letters?limit=" + std::to_string(w->q.limit);
  for (auto* k : {"state", "reason", "type", "after"})
    if (body.contains(k))
      req.target += std::string("&") + k + "=" + client::percent_encode(body[k].get<std::string>());
  listing->sink = gather(*w->gw, w->x, std::move(req), [w](std::vector<json>& parts) {
    act_on_listed(w, merge_dead_letters(parts, w->q.limit));
  });
  if (listing->sink)
    start_walk(listing);
}

/// The filter's state and reason, checked; a refusal names the parameter.
verdict check_filter(const json& args, dl_query& q, const problem_kind& code) {
  q.filter.status = args.value("state", "");
  q.filter.reason = args.value("reason", "");
  q.type = args.value("type", "");
  if (!q.filter.status.empty() && !parse_dl_status(q.filter.status))
    return refusal{code, "'state' must be pending, scheduled, resolved, discarded or acknowledged"};
  if (!q.type.empty())
    if (auto st = check_key_part(q.type, "type"); !st)
      return refusal{code, st.message()};
  if (q.limit < 1 || q.limit > 1000)
    return refusal{code, "'limit' must be between 1 and 1000"};
  if (auto after = args.value("after", ""); !after.empty()) {
    auto c = decode_cursor(after, 4, {2});
    if (c.is_null() || !check_key_part(c[0].get<std::string>(), "type") ||
        !check_key_part(c[1].get<std::string>(), "id"))
      return refusal{code, std::string(bad_cursor)};
    q.from_type = c[0].get<std::string>();
    q.from_id = c[1].get<std::string>();
    q.after_created = c[2].get<int64_t>();
    q.after_dl = c[3].get<std::string>();
  }
  return std::nullopt;
}

} // namespace

// -- the routes --

/// GET /v1/dead-letters: the tenant's dead letters across its entities, of one `state` and
/// `reason` (each optional), in (type, id, created_at, dead letter id) order, `limit` a page.
void list_fleet_dead_letters(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  if (auto no = tenant_check(gw, *x, scope_read, tenant))
    return refuse(gw, *x, std::move(*no));
  auto qr = parse_query(x->query, {"state", "reason", "type", "after"}, {}, true, false);
  if (!qr.error.empty())
    return refuse(gw, *x, {problems::invalid_query, qr.error});
  auto w = std::make_shared<walk>();
  w->gw = &gw;
  w->x = x;
  w->tenant = tenant->name;
  w->q.limit = qr.args.value("limit", int64_t{100});
  if (auto no = check_filter(qr.args, w->q, problems::invalid_query))
    return refuse(gw, *x, std::move(*no));
  if (fans_out(gw, *x)) {
    w->sink = gather_page(
      gw, x, [limit = w->q.limit](auto& parts) { return merge_dead_letters(parts, limit); });
    if (!w->sink)
      return;
  }
  start_walk(w);
}

/// POST /v1/dead-letters/{retry|discard}: the action on every dead letter the body's filter
/// takes, at most `limit`, each through its entity as the per-entity route does; `dry_run`
/// answers what would be done and does nothing.
void act_on_fleet_dead_letters(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  verdict no = tenant_check(gw, *x, scope_operate, tenant);
  if (!no)
    no = no_query(*x);
  call_options unused;
  if (!no)
    no = check_write(gw.config(), x->req, unused); // Content-Type, JSON syntax and depth
  if (!no && x->req.idempotency_key_count > 0)
    no = refusal{problems::invalid_argument,
                 "a bulk action takes no Idempotency-Key: go on with the cursor it answered"};
  auto body = json::parse(x->req.body.empty() ? "{}" : x->req.body, nullptr, false);
  if (!no && !body.is_object())
    no = refusal{problems::invalid_argument, "the body must be a JSON object"};
  auto w = std::make_shared<walk>();
  for (auto it = body.begin(); !no && body.is_object() && it != body.end(); ++it) {
    static constexpr std::string_view strings[] = {"state", "reason", "type", "after", "note"};
    bool is_string =
      std::find(std::begin(strings), std::end(strings), it.key()) != std::end(strings);
    if (is_string && !(it->is_string() && !it->get_ref<const std::string&>().empty() &&
                       it->get_ref<const std::string&>().size() <= 255))
      no = refusal{problems::invalid_argument, "'" + it.key() + "' must be a string of 1..255"};
    else if (it.key() == "dry_run" && !it->is_boolean())
      no = refusal{problems::invalid_argument, "'dry_run' must be true or false"};
    else if (it.key() == "limit" && !it->is_number_integer())
      no = refusal{problems::invalid_argument, "'limit' must be an integer"};
    else if (!is_string && it.key() != "dry_run" && it.key() != "limit")
      no = refusal{problems::invalid_argument,
                   "unknown member '" + std::string(clip(it.key(), 64)) +
                     "' (state, reason, type, limit, after, dry_run, note)"};
  }
  if (!no) {
    w->q.limit = body.value("limit", int64_t{100});
    no = check_filter(body, w->q, problems::invalid_argument);
  }
  if (no)
    return refuse(gw, *x, std::move(*no));
  w->gw = &gw;
  w->x = x;
  w->tenant = tenant->name;
  w->q.action_name = x->seg[2]; // the route lets retry and discard through only
  w->q.action = true;
  w->q.dry_run = body.value("dry_run", false);
  w->q.note = body.value("note", json(nullptr));
  w->actor = key_actor(*x);
  if (fans_out(gw, *x))
    return act_across_nodes(w, body);
  start_walk(w);
}

namespace {

/// The answer of GET /v1/breakers from what the index said (`rd`: failed, states, open), to the
/// client or (`sink`) to a cluster's gathering.
template <class Read>
void answer_breakers(gateway& gw, const exchange_ptr& x, Read& rd, int64_t limit,
                     const answer_sink& sink) {
  if (!rd.failed)
    return answer(gw, x, sink,
                  problem(*x, problems::unavailable, "the tenant index: " + rd.failed.message()));
  json tools = json::array();
  for (auto& t : rd.states)
    tools.push_back({{"tool", t.tool}, {"entities", t.entities_by_state}});
  json page = json::array();
  for (size_t i = 0; i < rd.open.size() && i < static_cast<size_t>(limit); ++i) {
    auto& b = rd.open[i];
    page.push_back({{"tool", b.tool},
                    {"state", b.state},
                    {"type", b.type},
                    {"id", b.id},
                    {"updated_at", b.updated_at_ms}});
  }
  std::string cursor;
  if (rd.open.size() > static_cast<size_t>(limit)) {
    auto& b = rd.open[static_cast<size_t>(limit) - 1];
    cursor = encode_cursor(json::array({b.tool, b.type, b.id}));
  }
  answer(gw, x, sink,
         page_answer(*x, {{"tools", std::move(tools)},
                          {"not_closed", std::move(page)},
                          {"next", cursor.empty() ? json(nullptr) : json(cursor)}}));
}

} // namespace

/// GET /v1/breakers: per tool, the tenant's entities in each breaker state, and a page of the
/// entities whose breaker is not CLOSED (of `tool` and `state`, each optional).
void list_fleet_breakers(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  if (auto no = tenant_check(gw, *x, scope_read, tenant))
    return refuse(gw, *x, std::move(*no));
  auto qr = parse_query(x->query, {"tool", "state", "after"}, {}, true, false);
  if (!qr.error.empty())
    return refuse(gw, *x, {problems::invalid_query, qr.error});
  auto tool = qr.args.value("tool", "");
  auto state = qr.args.value("state", "");
  int64_t limit = qr.args.value("limit", int64_t{100});
  if (!state.empty() && state != "OPEN" && state != "HALF_OPEN" && state != "FORCED_OPEN" &&
      state != "DISABLED")
    return refuse(gw, *x,
                  {problems::invalid_query,
                   "parameter 'state' must be OPEN, HALF_OPEN, FORCED_OPEN or DISABLED"});
  if (limit > 1000)
    return refuse(gw, *x,
                  {problems::invalid_query, "parameter 'limit' must be between 1 and 1000"});
  json after = json::array({"", "", ""});
  if (auto a = qr.args.value("after", ""); !a.empty())
    if ((after = decode_cursor(a, 3, {})).is_null())
      return refuse(gw, *x, {problems::invalid_query, std::string(bad_cursor)});
  struct read_t {
    status failed;
    std::vector<tool_breaker_states> states;
    std::vector<entity_breaker> open;
  };
  auto rd = std::make_shared<read_t>();
  answer_sink sink;
  if (fans_out(gw, *x)) {
    sink = gather_page(gw, x, [limit](auto& parts) { return merge_breakers(parts, limit); });
    if (!sink)
      return;
  }
  gw.rt().read_tenant_index(
    [rd, name = tenant->name, tool, state, limit, after](tenant_index* ix) {
      if (!ix) {
        rd->failed = status{errc::unavailable, "the runtime is stopping"};
        return;
      }
      auto states = ix->breaker_states(name, tool);
      auto open = states ? ix->open_breakers(name, tool, state, after[0].get<std::string>(),
                                             after[1].get<std::string>(),
                                             after[2].get<std::string>(), limit + 1)
                         : states.error();
      if (!open) {
        rd->failed = open.error();
        return;
      }
      rd->states = std::move(states.value());
      rd->open = std::move(open.value());
    },
    [&gw, x, rd, limit, sink] { answer_breakers(gw, x, *rd, limit, sink); });
}

} // namespace factum::http::steps
