// http/stream_routes.cpp: GET /v1/entities/{type}/{id}/facts/stream, a fact stream's way through
// the gateway (docs/http-api.md, "Following facts"): where to resume (Last-Event-ID or
// after_seq), the caps on streams, then the first page read through the runtime. A read that
// fails answers problem+json before anything of the stream is written; one that succeeds hands
// the stream to the transport (http_response::stream). Runs on an I/O thread; the first page's
// reply on a CAF worker.
#include "factum/storage/fact_ids.hpp"
#include "gateway_steps.hpp"
#include "http_util.hpp"
#include "streams/fact_streams.hpp"

namespace factum::http::steps {

namespace {

/// A fact event's id (fact_stream::event_id): its seq and fact-id prefix ("" for the entity's
/// first), or nothing when `v` is not one.
std::optional<std::pair<int64_t, std::string>> parse_event_id(std::string_view v) {
  auto dot = v.find('.');
  auto seq = parse_non_negative(v.substr(0, dot));
  if (!seq)
    return std::nullopt;
  if (dot == std::string_view::npos)
    return std::pair{*seq, std::string()};
  auto hex = v.substr(dot + 1);
  std::string prefix = "fct_" + std::string(hex);
  if (!valid_fact_id_prefix(prefix))
    return std::nullopt;
  return std::pair{*seq, std::move(prefix)};
}

} // namespace

void open_fact_stream(gateway& gw, const exchange_ptr& x, const entity_ref& e) {
  if (x->req.websocket)
    return refuse(gw, *x,
                  {problems::route_not_found, "no WebSocket route at " +
                                                std::string(clip(x->path, 200)) +
                                                "; the fact stream is a plain GET"});
  auto q = parse_query(x->query, {}, {"after_seq"}, false, false);
  if (!q.error.empty())
    return refuse(gw, *x, {problems::invalid_query, q.error});
  int64_t after = q.args.value("after_seq", int64_t{0});
  // A browser that reconnects sends Last-Event-ID with the URL it first opened: the header wins.
  if (x->req.last_event_id_count > 1)
    return refuse(gw, *x,
                  {problems::invalid_last_event_id, "send at most one Last-Event-ID header"});
  std::optional<std::string> resume_prefix;
  if (x->req.last_event_id_count == 1) {
    auto id = parse_event_id(x->req.last_event_id);
    if (!id)
      return refuse(gw, *x,
                    {problems::invalid_last_event_id,
                     "Last-Event-ID is the id of the last fact event received: its seq (a "
                     "non-negative integer that fits 64 bits), or its seq, a dot and 16 "
                     "lowercase hex digits"});
    after = id->first;
    resume_prefix = std::move(id->second);
  }
  auto s = std::make_shared<fact_stream>(gw, entity_key{e.tenant.name, e.type, e.id}, after,
                                         std::move(resume_prefix),
                                         gw.config().limits.stream_max_queue_bytes, x->trace_id);
  if (auto why = gw.streams().add(s); why != fact_streams::refusal::none) {
    gw.metrics().streams_refused.inc(0);
    bool entity = why == fact_streams::refusal::entity_full;
    return refuse(gw, *x,
                  {problems::connection_cap_reached,
                   entity ? "the entity has limits.stream_max_connections_per_entity fact "
                            "streams open already"
                          : "the tenant has limits.stream_max_connections_per_tenant fact "
                            "streams open already",
                   true});
  }
  // The stream is registered before its first read: a fact made durable meanwhile is either in
  // that page or noticed after it.
  std::weak_ptr<fact_stream> weak = s;
  s->start([&gw, x, weak](call_reply r) {
    auto stream = weak.lock();
    if (!r.ok || !stream) {
      if (stream)
        stream->end();
      auto res = r.ok ? problem(*x, problems::unavailable, "the stream ended before it started")
                      : failed_call_answer(*x, std::move(r));
      res.close = true;
      return finish(gw, *x, std::move(res));
    }
    gw.metrics().streams_accepted.inc();
    http_response res;
    res.status = 200;
    res.trace_id = x->trace_id;
    res.content_type = "text/event-stream; charset=utf-8";
    res.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    res.stream = std::move(stream);
    finish(gw, *x, std::move(res));
  });
}

} // namespace factum::http::steps
