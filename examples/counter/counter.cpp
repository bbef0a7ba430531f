// counter.cpp: the README's quick-start entity. A counter whose value is derived from its facts:
// `add` appends a fact, `get` answers the value, and activation rebuilds the value by summing
// the facts, so a hibernated or restarted counter comes back exactly where it was.
// Runs on its entity's actor thread.
#include "factum/examples/examples.hpp"

namespace factum::examples {

namespace {

class counter final : public entity {
 public:
  task<void> on_activate(context& ctx) override {
    // Rebuild from the log: the facts are the state.
    value_ = 0;
    fact_filter f;
    f.type = "counter.added";
    f.limit = 10000;
    for (;;) {
      auto batch = ctx.query(f);
      for (auto& fa : batch)
        value_ += nlohmann::json::parse(fa.data).value("by", int64_t{0});
      if (batch.size() < static_cast<size_t>(f.limit))
        break;
      f.after_seq = batch.back().seq;
    }
    co_return;
  }

  /// {"by": N} (default 1) -> {"value": V}
  nlohmann::json add(context& ctx, nlohmann::json args) {
    int64_t by = 1;
    if (args.is_object() && args.contains("by")) {
      if (!args["by"].is_number_integer())
        throw client_error("INVALID_ARGUMENT", "'by' must be an integer");
      by = args["by"].get<int64_t>();
    }
    fact_draft d;
    d.type = "counter.added";
    d.data = {{"by", by}};
    ctx.append(std::move(d));
    value_ += by;
    return {{"value", value_}};
  }

  /// {} -> {"value": V}
  nlohmann::json get(context&, nlohmann::json) { return {{"value", value_}}; }

 private:
  int64_t value_ = 0;
};

} // namespace

void add_counter_type(entity_registry& registry) {
  registry.add(type_builder<counter>("counter")
                 .method("add", &counter::add, {.requires_idempotency_key = false})
                 .method("get", &counter::get, {.shared = true})
                 .build());
}

} // namespace factum::examples
