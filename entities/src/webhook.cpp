// webhook.cpp: the built-in `webhook` entity type: delivers a JSON payload to a configured tool
// with that tool's retry policy, circuit breaker and price. Failures append error and cost
// facts; exhausted retries become dead letters (the runtime's resilient tool call does both).
// Runs on its entity's actor thread.
#include <cctype>

#include "factum/entities/entity.hpp"

namespace factum {

namespace {

/// The "operation" member, checked; "deliver" when absent.
std::string operation_of(const nlohmann::json& args) {
  auto it = args.find("operation");
  if (it == args.end())
    return "deliver";
  auto ok =
    it->is_string() && !it->get<std::string>().empty() && it->get<std::string>().size() <= 64;
  if (ok)
    for (char c : it->get<std::string>())
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok || it->get<std::string>().front() == '.')
    throw problems::invalid_argument.error(
      "'operation' must be 1 to 64 characters of [A-Za-z0-9._-], not starting "
      "with '.'");
  return it->get<std::string>();
}

class webhook final : public entity {
 public:
  /// {"tool": "name", "payload": {...}, "operation"?: "deliver"} -> {"delivered": true,
  /// "status": 200, "attempts": N}. The operation (1..64 of [A-Za-z0-9._-], default "deliver")
  /// is the path under the tool's URL and picks its per-operation retry policy, if any.
  task<nlohmann::json> deliver(context& ctx, nlohmann::json args) {
    if (!args.is_object() || !args.contains("tool") || !args["tool"].is_string())
      throw problems::invalid_argument.error("'tool' (a string) is required");
    tool_request req;
    req.tool = args["tool"].get<std::string>();
    req.operation = operation_of(args);
    if (args.contains("payload"))
      req.payload = args["payload"];
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    if (!r.ok)
      throw tool_failure(r, "DELIVERY_FAILED", "delivery failed");
    nlohmann::json out = {{"delivered", true}, {"status", r.http_status}, {"attempts", r.attempts}};
    if (is_fallback(r))
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
