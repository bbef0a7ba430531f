// entity_context.hpp (private): the context a handler sees (factum/entities/context.hpp) and
// the tool host of its resilient tool calls (tool_call.hpp), over the entity's store and its
// turn runner. What needs the actor system (committing at an await, routing a call to another
// entity, a timer) goes through context_port, which the entity actor implements: this class
// itself has no CAF in it. Touched only on the entity's actor thread, during a turn.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "factum/runtime/connections.hpp"
#include "turn/journal.hpp"
#include "turn/tool_call.hpp"
#include "turn/turn_runner.hpp"

namespace factum::detail {

/// What the context needs from the entity actor.
class context_port {
 public:
  virtual ~context_port() = default;
  /// The running turn is suspended at an await (resumed by `token`): commit what it wrote, and
  /// once that is durable call `start(true, wake)` on the actor (`start(false, wake)` when the
  /// commit failed); `wake` asks the actor to resume the turn.
  virtual void hold_await(uint64_t token,
                          std::function<void(bool, std::function<void()>)> start) = 0;
  /// A fresh token (awaits, timers).
  virtual uint64_t next_token() = 0;
  /// Sends a call to another entity; `done` runs once, on any thread.
  virtual void route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
                     std::function<void(call_reply)> done) = 0;
  /// Calls `done(true)` on the actor after `d`.
  virtual void start_timer(std::chrono::milliseconds d, std::function<void(bool)> done) = 0;
  /// The holder of the runtime's WebSocket connections; null when there is none.
  virtual std::shared_ptr<connection_host> connections() { return nullptr; }
};

/// The runtime-wide things the context reads (read-only while the runtime runs).
struct context_env {
  const runtime_config* cfg = nullptr;
  counters* stats = nullptr;
  const resilience::classifier* classifier = nullptr;
  const resilience::dead_letter_rules* dl_rules = nullptr;
  const entity_key* key = nullptr;
  /// The entity's type accepts WebSocket connections (entity_type::websocket).
  bool websocket = false;
  /// The runtime's per-tool counters (null in tests that have none).
  tool_board* tools = nullptr;
  const std::string* key_str = nullptr; ///< key->to_string(), kept by the owner
  /// The runtime's degradation levels and feature matrix (null in tests that have none).
  const degradation_board* degradation = nullptr;
};

class entity_context final : public context, public tool_host {
 public:
  entity_context(context_env env, turn_runner& runner, context_port& port)
      : env_(env), runner_(runner), port_(port) {}

  /// The store of the activation (null between activations).
  void attach(entity_store* store) noexcept { store_ = store; }

  // -- tool_host --
  context& ctx() override { return *this; }
  entity_store& store() override { return *store_; }
  const runtime_config& config() override { return *env_.cfg; }
  counters& stats() override { return *env_.stats; }
  std::mt19937_64& rng() override;
  std::map<std::string, resilience::circuit_breaker>& breakers() override {
    return runner_.breakers();
  }
  std::map<std::string, resilience::retry_budget>& budgets() override { return runner_.budgets(); }
  const resilience::classifier& classify() override { return *env_.classifier; }
  const resilience::dead_letter_rules& dl_rules() override { return *env_.dl_rules; }
  std::string retrying_dead_letter() override;
  void set_internal_alarm(const std::string& name, int64_t due_ms) override {
    set_alarm_internal(name, due_ms, "{}", 0);
  }
  void cancel_internal_alarm(const std::string& name) override { cancel_alarm(name); }
  void dead_letter_written(const dead_letter_record& dl) override {
    runner_.dead_letter_written(dl);
  }
  tool_counters* tool_stats(const std::string& tool) override {
    return env_.tools ? env_.tools->find(tool) : nullptr;
  }
  std::optional<degradation_refusal> degraded(const std::string& tool) override {
    if (!env_.degradation)
      return std::nullopt;
    return env_.degradation->refuses_tool(env_.key->tenant, tool);
  }
  std::chrono::seconds degraded_retry_after() override {
    return env_.degradation ? env_.degradation->config().retry_after : std::chrono::seconds(30);
  }
  step_rerun reruns_step() override { return rerun_; }

  void breaker_seen(const std::string& tool, resilience::breaker_state s) override {
    if (env_.tools)
      env_.tools->breaker_seen(env_.key_str ? *env_.key_str : env_.key->to_string(), tool, s);
  }

  // -- context --
  using context::call;
  task<call_reply> call(const std::string& type, const std::string& id, std::string method,
                        nlohmann::json args, call_options opts) override;
  task<tool_reply> call_tool(tool_request req) override;
  task<tool_reply> call_tool_once(tool_request req) override;
  task<bool> sleep(std::chrono::milliseconds d) override;
  uint64_t random() override;
  const entity_key& key() const override { return *env_.key; }
  const call_info& call() const override;
  int64_t now_ms() const override;
  fact append(fact_draft d) override;
  std::vector<fact> query(const fact_filter& f) override;
  nlohmann::json sql(std::string_view q, const nlohmann::json& params) override;
  nlohmann::json sql_write(std::string_view q, const nlohmann::json& params) override;
  void set_alarm(std::string name, int64_t due_ms, nlohmann::json payload) override;
  void cancel_alarm(std::string_view name) override;
  std::vector<alarm_record> alarms() override;
  void set_schedule(std::string name, const nlohmann::json& spec,
                    nlohmann::json payload) override; // schedule_turns.cpp
  void cancel_schedule(std::string_view name) override;
  std::optional<config_record> config(std::string_view id, int64_t version) override;
  int64_t put_config(std::string_view id, const nlohmann::json& body) override;
  void suspend_turn(std::coroutine_handle<> h,
                    std::function<void(bool, std::function<void()>)> start) override;
  // WebSocket connections (context_connections.cpp).
  using context::send;
  void send(const std::string& conn_id, std::string message, bool binary) override;
  void broadcast(const std::string& tag, std::string message) override;
  void close(const std::string& conn_id, int code, std::string reason) override;
  std::vector<connection> connections(const std::string& tag) override;
  /// The frames the running turn sent since the last take (the owner hands them to the output
  /// gate, or drops them with a turn that failed).
  std::vector<outgoing_frame> take_frames() { return std::exchange(frames_, {}); }

  /// Sets an alarm, the runtime's own (names starting with '@') included.
  void set_alarm_internal(std::string name, int64_t due_ms, std::string payload, int64_t attempts);
  /// The wall clock, never journaled (the runtime's own use).
  int64_t clock_ms() const { return env_.cfg->clock ? env_.cfg->clock() : factum::now_ms(); }

 private:
  /// The running turn's journal while it records the handler's own work (null otherwise).
  turn_journal* journal() const;
  /// Starts journaled step `kind` on `what` (journal.hpp): the recorded result of a replayed
  /// step, or nothing after writing its row (the step then runs as step `*step`).
  std::optional<nlohmann::json> begin_step(turn_journal& j, std::string_view kind,
                                           const std::string& what, const std::string& fingerprint,
                                           int64_t& step, int64_t& started_ms);
  /// The journaled step `step` ended with `result` (nothing: it ran and failed retryably or in a
  /// dead letter, and runs again; its row says it ended, with what it wrote recorded).
  void end_step(turn_journal& j, int64_t step, const std::optional<nlohmann::json>& result);
  /// The tenant's SQL (read-only or not), recorded or replayed as an entry.
  nlohmann::json journaled_sql(std::string_view q, const nlohmann::json& params, bool read_only);
  /// A key derived from the turn's journal for step `step` (the same in every replay).
  std::string step_key(const char* prefix, const turn_journal& j, int64_t step) const;
  void start_entity_call(const std::string& type, const std::string& id, std::string method,
                         std::string args_json, call_options opts,
                         std::function<void(call_reply)> done);
  void start_tool_call(const tool_request& req, std::function<void(tool_reply)> done);

  context_env env_;
  turn_runner& runner_;
  context_port& port_;
  entity_store* store_ = nullptr;
  std::unique_ptr<std::mt19937_64> rng_;   // 2.5 KiB when made
  std::vector<outgoing_frame> frames_;     ///< sent by the running turn, not yet gated
  step_rerun step_rerun_ = step_rerun::no; ///< of the last step begun
  step_rerun rerun_ = step_rerun::no;      ///< of the running tool call (reruns_step)
};

} // namespace factum::detail
