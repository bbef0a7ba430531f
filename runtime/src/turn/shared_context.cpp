// shared_context.cpp: the context of a shared (read-only) call (shared_context.hpp). Runs on the
// entity's actor thread.
#include "turn/shared_context.hpp"

#include "turn/call_errors.hpp"

namespace factum::detail {

call_error shared_read_only(const std::string& what) {
  return problems::shared_call_read_only.error(
    "a shared (read-only) method may not " + what +
    ": declare the method exclusive (method_options::shared = false)");
}

uint64_t shared_context::random() {
  if (!rng_)
    rng_ = std::make_unique<std::mt19937_64>(std::random_device{}());
  return (*rng_)();
}

std::vector<fact> shared_context::query(const fact_filter& filter) {
  return value_or_throw(store_.query(filter));
}

nlohmann::json shared_context::sql(std::string_view q, const nlohmann::json& params) {
  return value_or_throw(store_.tenant_sql(q, params, true));
}

std::vector<alarm_record> shared_context::alarms() {
  return value_or_throw(store_.list_alarms());
}

std::optional<config_record> shared_context::config(std::string_view id, int64_t version) {
  auto r = store_.get_config(id, version);
  if (!r) {
    if (r.error().code() == errc::not_found)
      return std::nullopt;
    throw storage_error(r.error());
  }
  return std::move(r.value());
}

} // namespace factum::detail
