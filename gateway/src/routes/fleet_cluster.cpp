// http/fleet_cluster.cpp: the fleet views' cursors, and in a cluster the gathering of every
// node's part of a view and the merges (see fleet.hpp). A gathering's parts arrive on a storage
// thread, CAF workers and the relay's I/O thread, under its mutex; the merge runs on the thread
// of the last part. The merges are plain functions of JSON.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "factum/storage/base64.hpp"
#include "forwarder.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"
#include "routes/fleet.hpp"

namespace factum::http::steps {

using nlohmann::json;

// -- cursors --

std::string encode_cursor(const json& key) {
  auto b = base64_encode(key.dump());
  std::replace(b.begin(), b.end(), '+', '-');
  std::replace(b.begin(), b.end(), '/', '_');
  b.erase(b.find_last_not_of('=') + 1);
  return b;
}

json decode_cursor(std::string text, size_t n, std::initializer_list<size_t> ints) {
  std::replace(text.begin(), text.end(), '-', '+');
  std::replace(text.begin(), text.end(), '_', '/');
  while (text.size() % 4)
    text.push_back('=');
  auto raw = base64_decode(text);
  if (!raw)
    return nullptr;
  auto j = json::parse(*raw, nullptr, false);
  if (!j.is_array() || j.size() != n)
    return nullptr;
  for (size_t i = 0; i < n; ++i) {
    bool want_int = std::find(ints.begin(), ints.end(), i) != ints.end();
    if (want_int ? !j[i].is_number_integer() : !j[i].is_string())
      return nullptr;
  }
  return j;
}

// -- gathering --

namespace {

/// Every node's part of one view: this node's at 0, each peer's at its index + 1.
struct gathering {
  std::mutex mu;
  size_t pending = 0;
  std::vector<json> parts;
  std::string failed; ///< the first part that did not come, and why
  std::function<void(std::vector<json>&)> merge;
};

/// Part `i` came (or `why` it did not); the last one merges or refuses.
void arrive(gateway& gw, const exchange_ptr& x, const std::shared_ptr<gathering>& g, size_t i,
            json body, std::string why) {
  {
    std::lock_guard<std::mutex> lk(g->mu);
    if (!why.empty() && g->failed.empty())
      g->failed = std::move(why);
    else if (why.empty())
      g->parts[i] = std::move(body);
    if (--g->pending > 0)
      return;
  }
  if (!g->failed.empty()) {
    auto r =
      problem(*x, problems::shard_unavailable, g->failed + ": the view would be incomplete; retry");
    r.retry_after_s = 1;
    return finish(gw, *x, std::move(r));
  }
  g->merge(g->parts);
}

} // namespace

void answer(gateway& gw, const exchange_ptr& x, const answer_sink& sink, http_response r) {
  if (sink)
    return sink(std::move(r));
  finish(gw, *x, std::move(r));
}

http_response page_answer(const exchange& x, const json& body) {
  http_response r;
  r.trace_id = x.trace_id;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  if (auto it = body.find("next"); it != body.end() && it->is_string())
    r.link = next_link(x, "after=" + it->get<std::string>());
  return r;
}

bool fans_out(gateway& gw, const exchange& x) {
  return gw.config().cluster && x.req.forwarded.empty() && gw.relay();
}

answer_sink gather(gateway& gw, const exchange_ptr& x, http_request req,
                   std::function<void(std::vector<json>&)> merge) {
  std::vector<std::string> down;
  auto peers = gw.config().cluster->peers(down);
  if (!down.empty()) {
    std::string names;
    for (auto& d : down)
      names += (names.empty() ? "" : ", ") + d;
    auto r = problem(*x, problems::shard_unavailable,
                     "node(s) " + names + " hold entities and are down: the view would be " +
                       "incomplete; retry when they are back");
    r.retry_after_s = 1;
    finish(gw, *x, std::move(r));
    return {};
  }
  auto g = std::make_shared<gathering>();
  g->pending = 1 + peers.size();
  g->parts.resize(1 + peers.size());
  g->merge = std::move(merge);
  for (size_t i = 0; i < peers.size(); ++i)
    gw.relay()->send(peers[i], req, x->trace_id, 0,
                     [&gw, x, g, i, address = peers[i]](forwarded_reply fr) {
                       json body = fr.res.status == 200 ? json::parse(fr.res.body, nullptr, false)
                                                        : json(json::value_t::discarded);
                       if (!body.is_discarded())
                         return arrive(gw, x, g, i + 1, std::move(body), {});
                       arrive(gw, x, g, i + 1, {},
                              "node " + address + " did not answer its part (" +
                                (fr.res.status ? std::to_string(fr.res.status) : fr.error) + ")");
                     });
  return [&gw, x, g](http_response r) {
    json body =
      r.status == 200 ? json::parse(r.body, nullptr, false) : json(json::value_t::discarded);
    if (!body.is_discarded())
      return arrive(gw, x, g, 0, std::move(body), {});
    arrive(gw, x, g, 0, {},
           "this node's part failed (" + std::to_string(r.status) + " " +
             std::string(clip(r.body, 200)) + ")");
  };
}

answer_sink gather_page(gateway& gw, const exchange_ptr& x,
                        std::function<json(std::vector<json>&)> merge) {
  return gather(gw, x, x->req, [&gw, x, merge = std::move(merge)](std::vector<json>& parts) {
    finish(gw, *x, page_answer(*x, merge(parts)));
  });
}

// -- merges --

namespace {

using dl_key = std::tuple<std::string, std::string, int64_t, std::string>;

dl_key key_of_dead_letter(const json& d) {
  return {d.value("entity_type", ""), d.value("entity_id", ""), d.value("created_at", int64_t{0}),
          d.value("id", "")};
}

json as_array(const dl_key& k) {
  return json::array({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)});
}

} // namespace

json merge_dead_letters(std::vector<json>& parts, int64_t limit) {
  std::vector<std::pair<dl_key, json>> all;
  std::optional<dl_key> cut; // the least cursor a node answered: nothing past it is known whole
  int64_t matched = 0;
  json errors = json::array();
  for (auto& p : parts) {
    matched += p.value("matched", int64_t{0});
    for (auto& e : p.value("errors", json::array()))
      errors.push_back(std::move(e));
    for (auto& d : p.value("dead_letters", json::array()))
      if (d.is_object()) {
        auto k = key_of_dead_letter(d);
        all.emplace_back(std::move(k), std::move(d));
      }
    if (auto n = p.value("next", json(nullptr)); n.is_string()) {
      auto c = decode_cursor(n.get<std::string>(), 4, {2});
      if (!c.is_null()) {
        dl_key k{c[0].get<std::string>(), c[1].get<std::string>(), c[2].get<int64_t>(),
                 c[3].get<std::string>()};
        if (!cut || k < *cut)
          cut = std::move(k);
      }
    }
  }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first < b.first; });
  // An entity on two nodes for a moment (a shard move) shows its dead letters once.
  all.erase(
    std::unique(all.begin(), all.end(), [](auto& a, auto& b) { return a.first == b.first; }),
    all.end());
  json out = json::array();
  std::optional<dl_key> next = cut;
  for (auto& [k, d] : all) {
    if (cut && *cut < k)
      break;
    if (static_cast<int64_t>(out.size()) == limit) {
      next = key_of_dead_letter(out.back());
      break;
    }
    out.push_back(std::move(d));
  }
  return {{"dead_letters", std::move(out)},
          {"matched", matched},
          {"errors", std::move(errors)},
          {"next", next ? json(encode_cursor(as_array(*next))) : json(nullptr)}};
}

json merge_breakers(std::vector<json>& parts, int64_t limit) {
  std::map<std::string, std::map<std::string, int64_t>> counts; // tool -> state -> entities
  std::vector<std::pair<std::tuple<std::string, std::string, std::string>, json>> open;
  bool more = false;
  for (auto& p : parts) {
    for (auto& t : p.value("tools", json::array())) {
      auto by_state = t.value("entities", json::object()); // items() must not outlive it
      for (auto& [state, n] : by_state.items())
        counts[t.value("tool", "")][state] += n.is_number_integer() ? n.get<int64_t>() : 0;
    }
    for (auto& b : p.value("not_closed", json::array())) {
      std::tuple<std::string, std::string, std::string> k{b.value("tool", ""), b.value("type", ""),
                                                          b.value("id", "")};
      open.emplace_back(std::move(k), std::move(b));
    }
    more = more || p.value("next", json(nullptr)).is_string();
  }
  std::sort(open.begin(), open.end(), [](auto& a, auto& b) { return a.first < b.first; });
  open.erase(
    std::unique(open.begin(), open.end(), [](auto& a, auto& b) { return a.first == b.first; }),
    open.end());
  // Each node answered its first `limit` after the cursor: the first `limit` of them all are the
  // fleet's first `limit`.
  if (static_cast<int64_t>(open.size()) > limit) {
    open.resize(static_cast<size_t>(limit));
    more = true;
  }
  json tools = json::array();
  for (auto& [tool, states] : counts)
    tools.push_back({{"tool", tool}, {"entities", states}});
  json page = json::array();
  for (auto& [k, b] : open)
    page.push_back(std::move(b));
  json next = nullptr;
  if (more && !open.empty())
    next =
      encode_cursor(json::array({std::get<0>(open.back().first), std::get<1>(open.back().first),
                                 std::get<2>(open.back().first)}));
  return {{"tools", std::move(tools)}, {"not_closed", std::move(page)}, {"next", next}};
}

json merge_by_key(std::vector<json>& parts, int64_t limit, bool& more) {
  json v = json::array();
  for (auto& p : parts) {
    if (!p.is_array())
      return nullptr;
    for (auto& e : p) {
      if (!e.is_object() || !e.contains("type") || !e["type"].is_string() || !e.contains("id") ||
          !e["id"].is_string())
        return nullptr;
      v.push_back(std::move(e));
    }
    more = more || static_cast<int64_t>(p.size()) == limit;
  }
  auto key = [](const json& e) {
    return std::tie(e["type"].get_ref<const std::string&>(), e["id"].get_ref<const std::string&>());
  };
  std::sort(v.begin(), v.end(), [&](const json& a, const json& b) { return key(a) < key(b); });
  // During a shard move an entity's file is on both nodes for a moment: listed once.
  v.erase(
    std::unique(v.begin(), v.end(), [&](const json& a, const json& b) { return key(a) == key(b); }),
    v.end());
  if (static_cast<int64_t>(v.size()) > limit) {
    v.erase(v.begin() + limit, v.end());
    more = true;
  }
  return v;
}

json merge_by_activity(std::vector<json>& parts, int64_t limit) {
  using key = std::tuple<int64_t, std::string, std::string>; // -last_activity, type, id
  std::vector<std::pair<key, json>> all;
  for (auto& p : parts)
    for (auto& e : p)
      if (e.is_object()) {
        key k{-e.value("last_activity", int64_t{0}), e.value("type", ""), e.value("id", "")};
        all.emplace_back(std::move(k), std::move(e));
      }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first < b.first; });
  // During a shard move an entity is on two nodes: listed once, as most recently active.
  std::set<std::pair<std::string, std::string>> seen;
  std::vector<std::pair<key, json>> once;
  for (auto& a : all) {
    if (static_cast<int64_t>(once.size()) == limit)
      break;
    if (seen.emplace(std::get<1>(a.first), std::get<2>(a.first)).second)
      once.push_back(std::move(a));
  }
  json out = json::array();
  for (auto& [k, e] : once)
    out.push_back(std::move(e));
  return out;
}

} // namespace factum::http::steps
