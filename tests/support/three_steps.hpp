// three_steps.hpp: the entity type of the rounds that test durable execution (tests only;
// docs/reliability.md, "Crash rounds for journaled handlers"): `three_steps.run` appends a fact,
// awaits a tool, appends, awaits, appends, awaits, appends, and answers with what it drew from
// the clock and the random source before its first await and the three tool replies. A keyed
// call is journaled: a retry after a crash replays it, and any value a replay did not take from
// the journal shows in the answer or in the facts. Also what the rounds must agree on with the
// handler: each step's payload and the Idempotency-Key the runtime derives for it. The handler
// runs on its entity's actor thread; the rest is plain functions, any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "factum/entities/entity.hpp"
#include "factum/storage/sha256.hpp"

namespace factum::test {

/// The tool every step calls, its operation, and the facts' type.
constexpr const char* three_steps_tool = "hook";
constexpr const char* three_steps_operation = "step";
constexpr const char* three_steps_fact = "three_steps";

/// The payload of step `step` (1..3) of the call with key `k`: distinct per step and per call.
inline nlohmann::json three_steps_payload(const std::string& k, int step) {
  return {{"k", k}, {"step", step}, {"pad", std::string(static_cast<size_t>(step * 7), 's')}};
}

/// The Idempotency-Key a journaled step sends to the vendor when the request has none: "fk_" +
/// the first 40 hex digits of SHA-256(entity key, call key, tool, operation, payload, and from
/// step 2 on "#" + step), as the runtime derives it (runtime/src/turn/entity_context.cpp,
/// call_tool).
inline std::string three_steps_vendor_key(const entity_key& entity, const std::string& k,
                                          int step) {
  auto text = entity.to_string() + "\n" + k + "\n" + three_steps_tool + "\n" +
              three_steps_operation + "\n" + three_steps_payload(k, step).dump();
  if (step > 1)
    text += "\n#" + std::to_string(step);
  return "fk_" + sha256_hex(text).substr(0, 40);
}

/// The facts' subtypes, in the order the handler appends them.
inline std::string three_steps_subtype(int i) {
  return std::string(1, static_cast<char>('a' + i));
}

class three_steps final : public entity {
 public:
  /// {"k": "the call's key"} -> {"k", "now", "random", "steps": [the three tool replies' bodies]}.
  /// Facts (type three_steps, this call's key): "a" {"now", "random"} before step 1, then "b",
  /// "c", "d" {"step", "reply"} after steps 1, 2 and 3. A failed step throws the tool's failure
  /// (a retryable one keeps the key pending: a retry resumes the journal).
  task<nlohmann::json> run(context& ctx, nlohmann::json args) {
    if (!args.is_object() || !args.contains("k") || !args["k"].is_string())
      throw client_error("INVALID_ARGUMENT", "'k' (a string) is required");
    auto k = args["k"].get<std::string>();
    nlohmann::json drawn = {{"now", ctx.now_ms()}, {"random", ctx.random()}};
    append(ctx, 0, drawn);
    nlohmann::json replies = nlohmann::json::array();
    for (int step = 1; step <= 3; ++step) {
      tool_request req;
      req.tool = three_steps_tool;
      req.operation = three_steps_operation;
      req.payload = three_steps_payload(k, step);
      auto op = ctx.call_tool(std::move(req));
      tool_reply r = co_await op;
      if (!r.ok)
        throw call_error(r.category, r.error_code.empty() ? "STEP_FAILED" : r.error_code,
                         "step " + std::to_string(step) + " failed: " + r.error_message,
                         r.error_code == "CIRCUIT_OPEN" ? 503 : 0);
      replies.push_back(r.body);
      append(ctx, step, {{"step", step}, {"reply", r.body}});
    }
    co_return nlohmann::json{
      {"k", k}, {"now", drawn["now"]}, {"random", drawn["random"]}, {"steps", replies}};
  }

 private:
  static void append(context& ctx, int i, nlohmann::json data) {
    fact_draft d;
    d.type = three_steps_fact;
    d.subtype = three_steps_subtype(i);
    d.data = std::move(data);
    ctx.append(d);
  }
};

/// Registers `three_steps` (method `run`, an idempotency key required).
inline void add_three_steps_type(entity_registry& r) {
  r.add(type_builder<three_steps>("three_steps")
          .method("run", &three_steps::run, {.requires_idempotency_key = true})
          .build());
}

} // namespace factum::test
