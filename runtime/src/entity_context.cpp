// entity_context.cpp: the handler's context and the tool host (entity_context.hpp). Runs on
// the entity's actor thread, inside a turn.
#include "entity_context.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// A seed per generator: a per-thread splitmix64 sequence, itself seeded once per thread.
uint64_t next_seed() {
  thread_local uint64_t state =
    (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint64_t>(now_ms());
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <class T> T value_or_throw(result<T> r) {
  if (!r)
    throw storage_error(r.error());
  return std::move(r.value());
}

} // namespace

// -- tool_host ----------------------------------------------------------------------------------

std::mt19937_64& entity_context::rng() {
  // Made at first use (only tool retries draw from it): a std::random_device and 2.5 KiB of
  // generator state per activation cost more than most activations do otherwise.
  if (!rng_)
    rng_ = std::make_unique<std::mt19937_64>(next_seed());
  return *rng_;
}

std::string entity_context::retrying_dead_letter() {
  auto* t = runner_.current();
  return t ? t->dead_letter_id : std::string();
}

// -- context ------------------------------------------------------------------------------------

task<tool_reply> entity_context::call_tool(tool_request req) {
  auto inner = resilient_tool_call(*this, std::move(req));
  tool_reply r = co_await inner;
  // The attempts' error, cost and dead-letter records stay even if the handler fails later.
  (void)store().end_turn(true);
  (void)store().begin_turn();
  co_return r;
}

const call_info& entity_context::call() const {
  static const call_info none;
  auto* t = runner_.current();
  return t ? t->info : none;
}

fact entity_context::append(fact_draft d) {
  if (d.trace_id.empty())
    d.trace_id = call().trace_id;
  if (d.idempotency_key.empty())
    d.idempotency_key = call().idempotency_key;
  return value_or_throw(store().append(d));
}

std::vector<fact> entity_context::query(const fact_filter& f) {
  return value_or_throw(store().query(f));
}

json entity_context::sql(std::string_view q, const json& params) {
  return value_or_throw(store().tenant_sql(q, params, true));
}

json entity_context::sql_write(std::string_view q, const json& params) {
  return value_or_throw(store().tenant_sql(q, params, false));
}

void entity_context::set_alarm(std::string name, int64_t due_ms, json payload) {
  if (name.empty() || name[0] == '@')
    throw client_error("INVALID_ALARM", "alarm names must be non-empty and not start with '@'");
  set_alarm_internal(std::move(name), due_ms, payload.dump(), 0);
}

void entity_context::set_alarm_internal(std::string name, int64_t due_ms, std::string payload,
                                        int64_t attempts) {
  alarm_record a{name, due_ms, std::move(payload), attempts, now_ms()};
  if (auto st = store().set_alarm(a); !st)
    throw storage_error(st);
  runner_.marks().alarms_moved = true;
  if (auto* t = runner_.current())
    t->alarms_set.push_back(std::move(name));
}

void entity_context::cancel_alarm(std::string_view name) {
  if (auto st = store().cancel_alarm(name); !st)
    throw storage_error(st);
  runner_.marks().alarms_moved = true;
}

std::vector<alarm_record> entity_context::alarms() {
  return value_or_throw(store().list_alarms());
}

std::optional<config_record> entity_context::config(std::string_view id, int64_t version) {
  auto r = store().get_config(id, version);
  if (!r) {
    if (r.error().code() == errc::not_found)
      return std::nullopt;
    throw storage_error(r.error());
  }
  return std::move(r.value());
}

int64_t entity_context::put_config(std::string_view id, const json& body) {
  return value_or_throw(store().put_config(id, body.dump()));
}

std::function<void()> entity_context::suspend_turn(std::coroutine_handle<> h) {
  auto token = port_.next_token();
  runner_.suspend(h, token);
  return port_.commit_at_await(token);
}

void entity_context::start_entity_call(const std::string& type, const std::string& id,
                                       std::string method, std::string args_json, call_options opts,
                                       std::function<void(call_reply)> done) {
  auto k = entity_key::make(env_.key->tenant, type, id);
  if (!k) {
    done(
      call_reply::failure(error_category::client, "INVALID_ENTITY_KEY", k.error().message(), 400));
    return;
  }
  call_request req{std::move(method), std::move(args_json), std::move(opts.idempotency_key),
                   opts.trace_id.empty() ? call().trace_id : std::move(opts.trace_id),
                   std::move(opts.fingerprint)};
  if (!req.idempotency_key.empty() && req.fingerprint.empty())
    req.fingerprint = call_fingerprint(req.method, req.args);
  port_.route(*k, std::move(req), opts.timeout, std::move(done));
}

void entity_context::start_tool_call(const tool_request& req,
                                     std::function<void(tool_reply)> done) {
  auto& tools = env_.cfg->tools;
  auto it = tools.find(req.tool);
  if (it == tools.end()) {
    tool_reply r;
    r.error_code = "UNKNOWN_TOOL";
    r.error_message = "no tool named " + req.tool;
    r.category = error_category::client;
    done(std::move(r));
    return;
  }
  it->second(req, std::move(done));
}

} // namespace factum::detail
