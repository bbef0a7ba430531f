// shared_context.hpp (private): the context of a shared (read-only) call: a method declared
// `method_options::shared`. It reads the entity's store as the store stands (facts, its own
// tables, alarms, configs) and refuses everything else: a write, an await, a timer. Shared calls
// run at once on the entity's actor, also while an exclusive turn waits at an await, and never
// join that turn (docs/architecture.md, "Shared calls"). No CAF here; touched only on the
// entity's actor thread, for one call.
#pragma once

#include <random>

#include "factum/entities/context.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::detail {

/// The error of a shared call that tried to write or await: 500 SHARED_CALL_READ_ONLY, not
/// retryable (the handler does the same again).
call_error shared_read_only(const std::string& what);

class shared_context final : public context {
 public:
  shared_context(entity_store& store, const entity_key& key, call_info info)
      : store_(store), key_(key), info_(std::move(info)) {}

  const entity_key& key() const override { return key_; }
  const call_info& call() const override { return info_; }
  int64_t now_ms() const override { return factum::now_ms(); }
  uint64_t random() override;

  // -- reads --
  std::vector<fact> query(const fact_filter& filter) override;
  nlohmann::json sql(std::string_view sql, const nlohmann::json& params) override;
  std::vector<alarm_record> alarms() override;
  std::optional<config_record> config(std::string_view config_id, int64_t version) override;

  // -- refused --
  fact append(fact_draft) override { throw shared_read_only("append a fact"); }
  nlohmann::json sql_write(std::string_view, const nlohmann::json&) override {
    throw shared_read_only("write its tables");
  }
  void set_alarm(std::string, int64_t, nlohmann::json) override {
    throw shared_read_only("set an alarm");
  }
  void cancel_alarm(std::string_view) override { throw shared_read_only("cancel an alarm"); }
  void set_schedule(std::string, const nlohmann::json&, nlohmann::json) override {
    throw shared_read_only("set a schedule");
  }
  void cancel_schedule(std::string_view) override { throw shared_read_only("cancel a schedule"); }
  int64_t put_config(std::string_view, const nlohmann::json&) override {
    throw shared_read_only("publish a config");
  }
  using context::call;
  task<call_reply> call(const std::string&, const std::string&, std::string, nlohmann::json,
                        call_options) override {
    throw shared_read_only("call another entity");
  }
  task<tool_reply> call_tool(tool_request) override { throw shared_read_only("call a tool"); }
  task<tool_reply> call_tool_once(tool_request) override { throw shared_read_only("call a tool"); }
  task<bool> sleep(std::chrono::milliseconds) override { throw shared_read_only("sleep"); }
  void suspend_turn(std::coroutine_handle<>,
                    std::function<void(bool, std::function<void()>)>) override {
    throw shared_read_only("await");
  }

 private:
  entity_store& store_;
  const entity_key& key_;
  call_info info_;
  std::unique_ptr<std::mt19937_64> rng_;
};

} // namespace factum::detail
