// ledger.cpp: the built-in `ledger` entity type, a generic fact log (`append` one fact, read the
// `recent` ones; docs/http-api.md). Runs on its entity's actor thread.
#include "factum/entities/entity.hpp"

namespace factum {

namespace {

std::string opt_string(const nlohmann::json& args, const char* name) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null())
    return {};
  if (!it->is_string())
    throw problems::invalid_argument.error(std::string("'") + name + "' must be a string");
  return it->get<std::string>();
}

/// A generic fact log: `append` appends one fact and answers its seq and fact_id.
class ledger final : public entity {
 public:
  nlohmann::json append(context& ctx, nlohmann::json args) {
    if (!args.is_object())
      throw problems::invalid_argument.error("the body must be a JSON object");
    fact_draft d;
    d.type = opt_string(args, "type");
    if (d.type.empty())
      throw problems::invalid_argument.error("'type' is required");
    d.subtype = opt_string(args, "subtype");
    d.amount = opt_string(args, "amount");
    d.currency = opt_string(args, "currency");
    d.tool_id = opt_string(args, "tool_id");
    d.from_entity = opt_string(args, "from_entity");
    d.to_entity = opt_string(args, "to_entity");
    if (auto it = args.find("data"); it != args.end() && !it->is_null()) {
      if (!it->is_object())
        throw problems::invalid_argument.error("'data' must be a JSON object");
      d.data = std::move(*it);
    }
    auto f = ctx.append(std::move(d));
    return {{"seq", f.seq}, {"fact_id", f.fact_id}};
  }

  /// The last `limit` facts (default 20), newest first: a convenience for small clients.
  nlohmann::json recent(context& ctx, nlohmann::json args) {
    fact_filter f;
    f.newest_first = true;
    f.limit = args.is_object() ? args.value("limit", 20) : 20;
    if (f.limit < 1 || f.limit > 1000)
      throw problems::invalid_argument.error("'limit' must be between 1 and 1000");
    auto out = nlohmann::json::array();
    for (auto& fa : ctx.query(f))
      out.push_back(to_json(fa));
    return out;
  }
};

} // namespace

void add_webhook_type(entity_registry& registry);

void add_builtin_types(entity_registry& registry) {
  add_webhook_type(registry);
  // One fact per call: pages of 1 KiB make each commit's WAL frames a quarter of the bytes
  // (docs/performance.md, "What the figures rest on": +30-50% across 1,000 entities).
  registry.add(type_builder<ledger>("ledger")
                 .method("append", &ledger::append)
                 .method("recent", &ledger::recent, {.shared = true})
                 .page_size(1024)
                 .build());
}

} // namespace factum
