// http/cluster_routes.cpp: the gateway's routes that span a cluster (docs/cluster.md): the
// entity listing (in a cluster every node's page, gathered and merged by fleet.hpp), GET
// /v1/cluster, and the files of planned shard moves. They run on an I/O thread; a listing is
// answered from a storage thread or the thread of its last part, an adopted file from a storage
// thread.
#include <algorithm>
#include <climits>

#include "factum/storage/sha256.hpp"
#include "forwarder.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"
#include "routes/fleet.hpp"

namespace factum::http::steps {

using nlohmann::json;

namespace {

/// A page of entities in (type, id) order, with a Link when there may be more.
void answer_key_page(gateway& gw, const exchange_ptr& x, const json& v, bool more) {
  http_response r;
  r.trace_id = x->trace_id;
  if (more && !v.empty())
    r.link = next_link(*x, "after=" + v.back()["type"].get<std::string>() + "/" +
                             v.back()["id"].get<std::string>());
  r.body = v.dump();
  finish(gw, *x, std::move(r));
}

/// The Link of a page by activity whose last entity is `last`.
std::string activity_link(const exchange& x, const json& last) {
  return next_link(x, "after=" + std::to_string(last.value("last_activity", int64_t{0})) + "/" +
                        last.value("type", "") + "/" + last.value("id", ""));
}

/// GET /v1/entities?order=last_activity: a page of the tenant's entities, most recently active
/// first ({"type","id","bytes","last_activity"}), after the cursor `after` ("ms/type/id", the
/// last of the previous page). In a cluster every node's page, merged (fleet.hpp).
void list_by_activity(gateway& gw, const exchange_ptr& x, const http_tenant& tenant,
                      const json& args, entity_list_query lq) {
  lq.by_activity = true;
  if (auto after = args.value("after", ""); !after.empty()) {
    auto s1 = after.find('/');
    auto s2 = s1 == std::string::npos ? s1 : after.find('/', s1 + 1);
    auto ms = s1 == std::string::npos ? std::nullopt : parse_non_negative(after.substr(0, s1));
    if (s2 != std::string::npos) {
      lq.after_type = after.substr(s1 + 1, s2 - s1 - 1);
      lq.after_id = after.substr(s2 + 1);
    }
    if (!ms || !check_key_part(lq.after_type, "type") || !check_key_part(lq.after_id, "id"))
      return refuse(gw, *x, {problems::invalid_query, "parameter 'after' must be MS/TYPE/ID"});
    lq.before_ms = *ms;
  }
  lq.limit = args.value("limit", int64_t{100});
  auto limit = lq.limit;
  answer_sink sink;
  if (fans_out(gw, *x)) {
    sink = gather(gw, x, x->req, [&gw, x, limit](std::vector<json>& parts) {
      auto out = merge_by_activity(parts, limit);
      http_response r;
      r.trace_id = x->trace_id;
      if (static_cast<int64_t>(out.size()) == limit && !out.empty())
        r.link = activity_link(*x, out.back());
      r.body = out.dump();
      finish(gw, *x, std::move(r));
    });
    if (!sink)
      return;
  }
  gw.rt().list_entities(tenant.name, std::move(lq), [&gw, x, limit, sink](auto page) {
    if (!page)
      return answer(gw, x, sink, problem(*x, problems::unavailable, page.error().message()));
    json out = json::array();
    for (auto& e : *page)
      out.push_back({{"type", e.type},
                     {"id", e.id},
                     {"bytes", e.bytes},
                     {"last_activity", e.last_activity_ms}});
    http_response r;
    r.trace_id = x->trace_id;
    if (static_cast<int64_t>(out.size()) == limit && !out.empty())
      r.link = activity_link(*x, out.back());
    r.body = out.dump();
    answer(gw, x, sink, std::move(r));
  });
}

} // namespace

/// GET /v1/entities: a page of the tenant's entities ({"type","id","bytes"}, in (type, id)
/// order), optionally of one `type`, after the cursor `after` ("type/id"); a full page has a
/// Link to the next. Read from the tenant index on a storage thread; answered from there.
void list_entities(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  if (auto no = tenant_check(gw, *x, scope_read, tenant))
    return refuse(gw, *x, std::move(*no));
  auto q = parse_query(x->query, {"type", "after", "order"}, {}, true, false);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  entity_list_query lq;
  lq.type = q.args.value("type", "");
  if (!lq.type.empty())
    if (auto st = check_key_part(lq.type, "type"); !st)
      return refuse(gw, *x, {problems::invalid_query, st.message()});
  if (auto order = q.args.value("order", "key"); order == "last_activity")
    return list_by_activity(gw, x, *tenant, q.args, std::move(lq));
  else if (order != "key")
    return refuse(gw, *x,
                  {problems::invalid_query, "parameter 'order' must be key or last_activity"});
  if (auto after = q.args.value("after", ""); !after.empty()) {
    auto slash = after.find('/');
    lq.after_type = after.substr(0, slash);
    lq.after_id = slash == std::string::npos ? "" : after.substr(slash + 1);
    if (!check_key_part(lq.after_type, "type") || !check_key_part(lq.after_id, "id"))
      return refuse(gw, *x, {problems::invalid_query, "parameter 'after' must be TYPE/ID"});
  }
  lq.limit = q.args.value("limit", int64_t{100});
  auto limit = lq.limit;
  answer_sink sink;
  if (fans_out(gw, *x)) {
    sink = gather(gw, x, x->req, [&gw, x, limit](std::vector<json>& parts) {
      bool more = false;
      auto v = merge_by_key(parts, limit, more);
      if (v.is_null()) {
        auto r =
          problem(*x, problems::shard_unavailable, "a node did not list its entities; retry");
        r.retry_after_s = 1;
        return finish(gw, *x, std::move(r));
      }
      answer_key_page(gw, x, v, more);
    });
    if (!sink)
      return;
  }
  gw.rt().list_entities(tenant->name, std::move(lq), [&gw, x, limit, sink](auto page) {
    if (!page)
      return answer(gw, x, sink, problem(*x, problems::unavailable, page.error().message()));
    json out = json::array();
    for (auto& e : *page)
      out.push_back({{"type", e.type}, {"id", e.id}, {"bytes", e.bytes}});
    if (!sink)
      return answer_key_page(gw, x, out, static_cast<int64_t>(out.size()) == limit);
    http_response r;
    r.body = out.dump();
    sink(std::move(r));
  });
}

/// GET /v1/cluster: the cluster's nodes, shards, owners and epochs (any key with read).
void get_cluster(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  verdict no = no_query(*x);
  if (!no)
    no = tenant_check(gw, *x, scope_read, tenant);
  if (!no && !gw.config().cluster)
    no = refusal{problems::not_clustered, "this node runs alone (no \"cluster\" in its config)"};
  if (no)
    return refuse(gw, *x, std::move(*no));
  http_response r;
  r.trace_id = x->trace_id;
  r.body = gw.config().cluster->describe();
  finish(gw, *x, std::move(r));
}

/// PUT /v1/cluster/moves/{shard}/{tenant}/{type}/{id}: one entity file of a planned shard move,
/// sent by the shard's old home (docs/cluster.md, "Moving shards"). Authenticated by the
/// cluster's secret, not an API key; the node checks the move in etcd, the runtime adopts it.
void put_move_file(gateway& gw, const exchange_ptr& x) {
  auto* c = gw.config().cluster.get();
  verdict no = no_query(*x);
  if (!no && !c)
    no = refusal{problems::not_clustered, "this node runs alone (no \"cluster\" in its config)"};
  if (!no && !c->authentic({x->req.target, x->req.move_epoch, x->req.content_sha256,
                            x->req.move_time, x->req.move_signature}))
    no = refusal{problems::cluster_secret_invalid,
                 "a shard move's file must be signed with the cluster's secret "
                 "(X-Factum-Move-Signature) within 5 minutes of this node's clock"};
  std::optional<entity_key> key;
  int64_t epoch = 0;
  if (!no) {
    auto num = [](const std::string& s, int64_t& out) {
      out = 0;
      for (char ch : s)
        if (ch < '0' || ch > '9' || out > INT64_MAX / 20)
          return false;
        else
          out = out * 10 + (ch - '0');
      return !s.empty() && s.size() <= 18;
    };
    int64_t k = 0;
    auto t = percent_decode(x->seg[4]), ty = percent_decode(x->seg[5]),
         i = percent_decode(x->seg[6]);
    auto made =
      t && ty && i
        ? entity_key::make(*t, *ty, *i)
        : result<entity_key>(status{errc::invalid_argument, "malformed percent-encoding"});
    if (!num(x->seg[3], k) || k > UINT32_MAX)
      no = refusal{problems::invalid_path, "the shard must be a decimal number"};
    else if (!num(x->req.move_epoch, epoch) || epoch <= 0)
      no = refusal{problems::invalid_move, "X-Factum-Move-Epoch must be a positive decimal number"};
    else if (!made)
      no = refusal{problems::invalid_entity_key, made.error().message()};
    else if (sha256_hex(x->req.body) != x->req.content_sha256)
      no =
        refusal{problems::checksum_mismatch, "the body's SHA-256 is not X-Factum-Content-Sha256"};
    else if (auto st = c->accept_move(static_cast<uint32_t>(k), epoch, *made); !st)
      no = refusal{problem_of(st.code(), errc_scope::shard_move), st.to_string()};
    if (made)
      key = std::move(*made);
  }
  if (no)
    return refuse(gw, *x, std::move(*no));
  gw.rt().adopt_entity(*key, std::move(x->req.body), epoch, [&gw, x, c](status st) {
    if (!st)
      return refuse(gw, *x, {problem_of(st.code(), errc_scope::move_file), st.to_string()});
    c->file_received();
    http_response r;
    r.status = 204;
    r.trace_id = x->trace_id;
    finish(gw, *x, std::move(r));
  });
}

} // namespace factum::http::steps
