// http/degradation_routes.cpp: GET and PUT /v1/degradation, the API key's tenant's degradation
// level on this server (docs/http-api.md, "Degradation"): what the rules say, why, which
// features are off, and an operator's floor. Runs on an I/O thread; the PUT's answer comes
// after its lifecycle fact, on a CAF worker.
#include "gateway_steps.hpp"
#include "http_util.hpp"

namespace factum::http::steps {

namespace {

json status_json(const runtime& rt, const degradation_status& s) {
  json out = {{"tenant", s.tenant},   {"enabled", rt.config().degradation.enabled},
              {"level", s.level},     {"level_name", degradation_level_name(s.level)},
              {"reasons", s.reasons}, {"features_off", s.features_off},
              {"override", nullptr}};
  if (s.override_level)
    out["override"] = {
      {"level", *s.override_level}, {"reason", s.override_reason}, {"actor", s.override_actor}};
  return out;
}

void answer_status(gateway& gw, exchange& x, const std::string& tenant) {
  http_response r;
  r.trace_id = x.trace_id;
  r.body = status_json(gw.rt(), gw.rt().degradation_of(tenant)).dump();
  finish(gw, x, std::move(r));
}

/// The body of a PUT: {"level": 0..4 or null, "reason": "..."}; the level, or a refusal.
verdict parse_floor(const std::string& body, std::optional<int>& level, std::string& reason) {
  auto b = json::parse(body, nullptr, false);
  if (!b.is_object())
    return refusal{problems::invalid_argument, "the body must be a JSON object"};
  for (auto& [k, v] : b.items())
    if (k != "level" && k != "reason")
      return refusal{problems::invalid_argument,
                     "unknown member '" + std::string(clip(k, 64)) + "'"};
  if (!b.contains("level"))
    return refusal{problems::invalid_argument, "'level' is required (0..4, or null to remove)"};
  auto& lv = b["level"];
  if (!lv.is_null()) {
    if (!lv.is_number_integer() || lv.get<int64_t>() < 0 || lv.get<int64_t>() > 4)
      return refusal{problems::invalid_argument, "'level' must be an integer 0..4, or null"};
    level = lv.get<int>();
  }
  auto rs = b.value("reason", json(nullptr));
  if (!rs.is_string() || rs.get<std::string>().empty() || rs.get<std::string>().size() > 500)
    return refusal{problems::invalid_argument, "'reason' must be a string of 1 to 500 bytes"};
  reason = rs.get<std::string>();
  return std::nullopt;
}

} // namespace

void get_degradation(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  verdict no = tenant_check(gw, *x, scope_read, tenant);
  if (!no)
    no = no_query(*x);
  if (no)
    return refuse(gw, *x, std::move(*no));
  answer_status(gw, *x, tenant->name);
}

void put_degradation(gateway& gw, const exchange_ptr& x) {
  const http_tenant* tenant = nullptr;
  call_options opts;
  verdict no = tenant_check(gw, *x, scope_operate, tenant);
  if (!no)
    no = no_query(*x);
  if (!no)
    no = check_write(gw.config(), x->req, opts);
  std::optional<int> level;
  std::string reason;
  if (!no)
    no = parse_floor(x->req.body, level, reason);
  if (no)
    return refuse(gw, *x, std::move(*no));
  auto actor = key_actor(*x);
  std::string name = tenant->name;
  gw.rt().set_degradation(name, level, std::move(reason), std::move(actor),
                          [&gw, x, name](call_reply r) {
                            if (r.ok)
                              return answer_status(gw, *x, name);
                            finish(gw, *x, failed_call_answer(*x, std::move(r)));
                          });
}

} // namespace factum::http::steps
