// asset.cpp: examples/telephony's `asset` entity: a call-tracking asset (a tracked
// phone number) that places calls through the `telephony` tool. Every attempt's error and
// cost, the breaker's transitions and the dead letters are appended by the runtime's resilient
// tool call; the asset adds its own invocation and outcome facts, answers with the fallback
// while the breaker is open, and sums its economics from its facts with exact decimals.
// Runs on its entity's actor thread.
#include <map>

#include "factum/examples/examples.hpp"
#include "factum/resilience/money.hpp"

namespace factum::examples {

namespace {

using nlohmann::json;
using resilience::decimal;

/// A phone number as the example accepts it: '+' and 4 to 15 digits (E.164).
bool valid_number(const std::string& s) {
  if (s.size() < 5 || s.size() > 16 || s[0] != '+')
    return false;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

class asset final : public entity {
 public:
  /// {"to": "+15550001"} -> {"status": "placed", "call_id", "attempts"}, or, while the
  /// telephony breaker is open, {"status": "deferred", "fallback": true, ...}. Failures answer
  /// the tool's failure (category, code, attempts, dead_letter_id).
  task<json> place_call(context& ctx, json args) {
    if (!args.is_object() || !args.contains("to") || !args["to"].is_string() ||
        !valid_number(args["to"].get<std::string>()))
      throw client_error("INVALID_ARGUMENT", "'to' must be a phone number like +15550001");
    auto to = args["to"].get<std::string>();
    fact_draft inv;
    inv.type = "invocation";
    inv.subtype = "place_call";
    inv.tool_id = "telephony";
    inv.data = {{"to", to}};
    ctx.append(std::move(inv));

    tool_request req;
    req.tool = "telephony";
    req.operation = "calls";
    req.payload = {{"to", to}, {"from", ctx.key().id}};
    if (!ctx.call().idempotency_key.empty())
      req.payload["idempotency_key"] = ctx.call().idempotency_key;
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;

    if (is_fallback(r)) {
      // The breaker is open: the runtime answered with the configured fallback and recorded a
      // CIRCUIT_OPEN error fact. The call is deferred, not lost.
      fact_draft out;
      out.type = "outcome";
      out.subtype = "call_deferred";
      out.tool_id = "telephony";
      out.data = {{"to", to}, {"reason", "circuit_open"}, {"fallback", r.body}};
      ctx.append(std::move(out));
      co_return json{{"status", "deferred"},
                     {"fallback", true},
                     {"to", to},
                     {"attempts", r.attempts},
                     {"body", r.body}};
    }
    if (!r.ok)
      throw tool_failure(r, "CALL_FAILED", "the call could not be placed");
    std::string call_id;
    if (r.body.is_object())
      for (const char* k : {"call_id", "sid", "id"})
        if (r.body.contains(k) && r.body[k].is_string()) {
          call_id = r.body[k].get<std::string>();
          break;
        }
    fact_draft out;
    out.type = "outcome";
    out.subtype = "call_placed";
    out.tool_id = "telephony";
    out.data = {{"to", to}, {"attempts", r.attempts}};
    if (!call_id.empty())
      out.data["call_id"] = call_id;
    ctx.append(std::move(out));
    json res = {{"status", "placed"}, {"to", to}, {"attempts", r.attempts}};
    if (!call_id.empty())
      res["call_id"] = call_id;
    co_return res;
  }

  /// {} -> the asset's economics, from its facts only: calls requested/placed/deferred/failed,
  /// errors by code, breaker transitions, and costs (exact decimals) by currency, split into
  /// failed and successful calls.
  json summary(context& ctx, json) {
    int64_t requested = 0, placed = 0, deferred = 0, failed = 0;
    std::map<std::string, int64_t> errors_by_code;
    resilience::money_totals total, on_failure, on_success;
    int64_t cost_facts = 0, failed_cost_facts = 0;
    json transitions = json::array();
    for (auto& f : all_facts(ctx, fact_filter{})) {
      auto data = json::parse(f.data, nullptr, false);
      if (f.type == "invocation" && f.subtype == "place_call") {
        ++requested;
      } else if (f.type == "outcome" && f.subtype == "call_placed") {
        ++placed;
      } else if (f.type == "outcome" && f.subtype == "call_deferred") {
        ++deferred;
      } else if (f.type == "error") {
        if (f.tool_id.empty() && data.value("method", "") == "place_call")
          ++failed; // the call itself failed (the runtime's error fact of the operation)
        else if (!f.tool_id.empty())
          ++errors_by_code[data.value("error_code", "UNKNOWN")];
      } else if (f.type == "cost" && !f.amount.empty()) {
        auto amount = decimal::parse(f.amount);
        if (!amount)
          continue;
        ++cost_facts;
        total.add(f.currency, *amount);
        if (data.value("failed", false)) {
          ++failed_cost_facts;
          on_failure.add(f.currency, *amount);
        } else {
          on_success.add(f.currency, *amount);
        }
      } else if (f.type == "lifecycle" && f.subtype == "circuit_breaker_state_changed") {
        transitions.push_back({{"seq", f.seq},
                               {"from", data.value("previous_state", "")},
                               {"to", data.value("new_state", "")},
                               {"reason", data.value("reason", "")}});
      }
    }
    return {
      {"calls",
       {{"requested", requested}, {"placed", placed}, {"deferred", deferred}, {"failed", failed}}},
      {"errors_by_code", errors_by_code},
      {"breaker_transitions", transitions},
      {"costs",
       {{"facts", cost_facts},
        {"failed_call_facts", failed_cost_facts},
        {"total", total.to_json()},
        {"on_failure", on_failure.to_json()},
        {"on_success", on_success.to_json()}}}};
  }
};

} // namespace

void add_telephony_types(entity_registry& registry) {
  registry.add(type_builder<asset>("asset")
                 .method("place_call", &asset::place_call, {.requires_idempotency_key = true})
                 .method("summary", &asset::summary, {.shared = true})
                 .build());
}

} // namespace factum::examples
