// webhook.cpp: the built-in `webhook` entity type: delivers a JSON payload to a configured tool
// with that tool's retry policy, circuit breaker and price. Failures append error and cost
// facts; exhausted retries become dead letters (the runtime's resilient tool call does both).
// Runs on its entity's actor thread.
#include "factum/entities/entity.hpp"

namespace factum {

namespace {

class webhook final : public entity {
 public:
  /// {"tool": "name", "payload": {...}} -> {"delivered": true, "status": 200, "attempts": N}
  task<nlohmann::json> deliver(context& ctx, nlohmann::json args) {
    if (!args.is_object() || !args.contains("tool") || !args["tool"].is_string())
      throw client_error("INVALID_ARGUMENT", "'tool' (a string) is required");
    tool_request req;
    req.tool = args["tool"].get<std::string>();
    req.operation = "deliver";
    if (args.contains("payload"))
      req.payload = args["payload"];
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (!r.ok) {
      call_error e(r.category, r.error_code.empty() ? "DELIVERY_FAILED" : r.error_code,
                   r.error_message.empty() ? "delivery failed" : r.error_message,
                   r.error_code == "CIRCUIT_OPEN" ? 503 : 0);
      e.details["attempts"] = r.attempts;
      if (r.http_status)
        e.details["tool_status"] = r.http_status;
      if (!r.dead_letter_id.empty())
        e.details["dead_letter_id"] = r.dead_letter_id;
      throw e;
    }
    nlohmann::json out = {{"delivered", true}, {"status", r.http_status}, {"attempts", r.attempts}};
    if (r.body.is_object() && r.body.value("fallback", false))
      out["fallback"] = true;
    co_return out;
  }
};

} // namespace

void add_webhook_type(entity_registry& registry) {
  registry.add(type_builder<webhook>("webhook")
                 .method("deliver", &webhook::deliver, {.requires_idempotency_key = true})
                 .build());
}

} // namespace factum
