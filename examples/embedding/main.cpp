// main.cpp: a server of your own entity type, `reminder`, built against an installed factum
// (docs/embedding.md). `reminder.send` records the reminder as a fact, delivers it through the
// configured tool `sms` (retries, breaker and price from the configuration's "tools") and
// records the delivery. The process runs as `factum serve` does: the same configuration file,
// signals and logs. The main thread runs the server; handlers run on the entities' actors.
#include <utility>

#include "factum/entities/entity.hpp"
#include "factum/tools/serve.hpp"

namespace {

class reminder final : public factum::entity {
 public:
  /// {"to": "+1555...", "text": "..."} -> {"sent": true, "attempts": N}
  factum::task<nlohmann::json> send(factum::context& ctx, nlohmann::json args) {
    if (!args.is_object() || !args.contains("to") || !args["to"].is_string())
      throw factum::client_error("INVALID_ARGUMENT", "'to' (a string) is required");
    factum::fact_draft asked;
    asked.type = "reminder.requested";
    asked.data = args;
    ctx.append(asked);

    factum::tool_request req;
    req.tool = "sms";
    req.operation = "send";
    req.payload = {{"to", args["to"]}, {"text", args.value("text", "")}};
    auto delivery = ctx.call_tool(std::move(req));
    factum::tool_reply r = co_await delivery; // the thread is free meanwhile
    if (!r.ok)
      throw factum::call_error(r.category, r.error_code.empty() ? "SMS_FAILED" : r.error_code,
                               "the reminder was not delivered");

    factum::fact_draft sent;
    sent.type = "reminder.sent";
    sent.data = {{"to", args["to"]}, {"attempts", r.attempts}};
    ctx.append(sent);
    co_return nlohmann::json{{"sent", true}, {"attempts", r.attempts}};
  }
};

} // namespace

int main(int argc, char** argv) {
  factum::entity_registry types;
  factum::add_builtin_types(types); // ledger and webhook, if the configuration names them
  types.add(factum::type_builder<reminder>("reminder")
              .method("send", &reminder::send, {.requires_idempotency_key = true})
              .build());
  return factum::tools::serve_main(argc, argv, std::move(types));
}
