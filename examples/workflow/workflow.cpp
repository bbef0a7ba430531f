// workflow.cpp: examples/workflow's `order_workflow` entity: an order process of
// three steps, each a call to its own tool with its own retry policy (the tool's versioned
// config: inventory fixed, payments exponential, shipping linear backoff). A step whose retries
// are exhausted ends the execution as a dead letter (the runtime's); an operator's retry of that
// dead letter runs the execution again with its idempotency key, which resumes it after its last
// completed step. One idempotency key = one execution: a second execute with the key returns the
// first execution's result. Progress lives in `workflow.*` facts. Runs on its entity's actor
// thread.
#include <array>

#include "factum/examples/examples.hpp"

namespace factum::examples {

namespace {

using nlohmann::json;

struct step_def {
  const char* name;
  const char* tool;
  const char* operation;
};

/// The order process: reserve stock, charge the card, ship.
constexpr std::array<step_def, 3> steps{{
  {"reserve_inventory", "inventory", "reserve"},
  {"charge_payment", "payments", "charge"},
  {"ship_order", "shipping", "ship"},
}};

std::vector<fact> facts_of(context& ctx, std::string type, const std::string& key) {
  fact_filter f;
  f.type = std::move(type);
  f.idempotency_key = key;
  return all_facts(ctx, std::move(f));
}

json data_of(const fact& f) {
  return json::parse(f.data, nullptr, false);
}

class order_workflow final : public entity {
 public:
  /// {"input": {"order_id": "ORD-1", ...}, "correlation_id"?} -> {"execution_id", "status":
  /// "completed", "steps": [...], "resumed"}. With an Idempotency-Key the execution is the
  /// key's: a retry resumes it after its last completed step.
  task<json> execute(context& ctx, json args) {
    if (!args.is_object() || !args.contains("input") || !args["input"].is_object())
      throw client_error("INVALID_REQUEST", "Missing required object 'input'");
    const auto& input = args["input"];
    if (!input.contains("order_id") || !input["order_id"].is_string() ||
        input["order_id"].get<std::string>().empty() ||
        input["order_id"].get<std::string>().size() > 64)
      throw client_error("INVALID_REQUEST", "Missing required field 'order_id'");
    const auto& key = ctx.call().idempotency_key;

    std::string execution_id;
    std::vector<std::string> done;
    bool resumed = false;
    if (!key.empty()) {
      auto started = facts_of(ctx, "workflow.execution_started", key);
      if (!started.empty()) {
        execution_id = "exec-" + std::to_string(started.front().seq);
        for (auto& f : facts_of(ctx, "workflow.step_completed", key))
          done.push_back(data_of(f).value("step", ""));
        resumed = true;
      }
    }
    if (execution_id.empty()) {
      fact_draft d;
      d.type = "workflow.execution_started";
      d.data = {{"workflow", "order-process"}, {"input", input}};
      if (args.contains("correlation_id") && args["correlation_id"].is_string())
        d.data["correlation_id"] = args["correlation_id"].get<std::string>().substr(0, 128);
      auto f = ctx.append(std::move(d));
      execution_id = "exec-" + std::to_string(f.seq); // the started fact's seq names it
    } else {
      fact_draft d;
      d.type = "workflow.execution_resumed";
      d.data = {{"execution_id", execution_id}, {"completed_steps", done}};
      ctx.append(std::move(d));
    }

    json report = json::array();
    for (const auto& s : steps) {
      bool already = std::find(done.begin(), done.end(), s.name) != done.end();
      if (already) {
        report.push_back({{"step", s.name}, {"tool", s.tool}, {"skipped", "completed before"}});
        continue;
      }
      tool_request req;
      req.tool = s.tool;
      req.operation = s.operation;
      req.payload = {{"execution_id", execution_id},
                     {"step", s.name},
                     {"order_id", input["order_id"]},
                     {"idempotency_key", execution_id + "-" + s.name}};
      auto op = ctx.call_tool(std::move(req));
      tool_reply r = co_await op;
      if (!r.ok) {
        call_error e(r.category, "STEP_FAILED",
                     std::string("step ") + s.name + " failed: " +
                       (r.error_code.empty() ? std::string("unknown error") : r.error_code));
        e.details["execution_id"] = execution_id;
        e.details["step"] = s.name;
        e.details["step_error"] = r.error_code;
        e.details["attempts"] = r.attempts;
        if (!r.dead_letter_id.empty())
          e.details["dead_letter_id"] = r.dead_letter_id;
        throw e;
      }
      json entry = {{"step", s.name}, {"tool", s.tool}, {"attempts", r.attempts}};
      if (auto cfg = ctx.config(std::string("tool.") + s.tool)) {
        auto body = json::parse(cfg->body, nullptr, false);
        if (body.is_object() && body.contains("retry")) {
          const auto& rp = body["retry"];
          entry["retry"] = {{"backoff", rp.value("backoff", "")},
                            {"base_delay_ms", rp.value("base_delay_ms", 0)},
                            {"max_attempts", rp.value("max_attempts", 0)},
                            {"config_version", cfg->version}};
        }
      }
      fact_draft d;
      d.type = "workflow.step_completed";
      d.tool_id = s.tool;
      d.data = {{"execution_id", execution_id}, {"step", s.name}, {"attempts", r.attempts}};
      ctx.append(std::move(d));
      report.push_back(std::move(entry));
    }
    fact_draft d;
    d.type = "workflow.execution_completed";
    d.data = {{"execution_id", execution_id}};
    ctx.append(std::move(d));
    co_return json{{"execution_id", execution_id},
                   {"workflow", "order-process"},
                   {"status", "completed"},
                   {"resumed", resumed},
                   {"steps", std::move(report)}};
  }

  /// {"execution_id"} -> what the facts say about it: status (completed, or incomplete with the
  /// steps done so far).
  json execution(context& ctx, json args) {
    auto id = args.is_object() ? args.value("execution_id", std::string()) : std::string();
    if (id.empty())
      throw client_error("INVALID_REQUEST", "Missing required field 'execution_id'");
    int64_t seq = 0;
    if (id.rfind("exec-", 0) == 0 && id.size() > 5 && id.size() < 24 &&
        id.find_first_not_of("0123456789", 5) == std::string::npos)
      seq = std::stoll(id.substr(5));
    fact_filter f;
    f.after_seq = seq - 1;
    f.limit = 1;
    auto first = seq > 0 ? ctx.query(f) : std::vector<fact>{};
    if (first.empty() || first[0].seq != seq || first[0].type != "workflow.execution_started")
      throw not_found_error("EXECUTION_NOT_FOUND", "no execution " + id.substr(0, 64));
    const auto& key = first[0].idempotency_key;
    json out = {{"execution_id", id}, {"status", "incomplete"}, {"completed_steps", json::array()}};
    if (!key.empty())
      out["idempotency_key"] = key;
    fact_filter g;
    g.after_seq = seq;
    g.limit = 10000;
    for (auto& x : ctx.query(g)) {
      if (x.type.rfind("workflow.", 0) != 0)
        continue;
      auto d = data_of(x);
      if (d.value("execution_id", "") != id)
        continue;
      if (x.type == "workflow.step_completed")
        out["completed_steps"].push_back(d.value("step", ""));
      else if (x.type == "workflow.execution_completed")
        out["status"] = "completed";
    }
    return out;
  }
};

} // namespace

void add_workflow_type(entity_registry& registry) {
  registry.add(type_builder<order_workflow>("order_workflow")
                 .method("execute", &order_workflow::execute)
                 .method("execution", &order_workflow::execution, {.shared = true})
                 .build());
}

} // namespace factum::examples
