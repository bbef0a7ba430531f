// tests/fuzz/stub_runtime.cpp: a link-time stand-in for factum::runtime, so that the gateway's
// routing, authentication and validation (gateway/src/gateway.cpp) run in a fuzz target
// without actors, threads or files. The fuzz binaries link this file instead of
// runtime/src/runtime.cpp. call() records what the gateway handed to the runtime and answers at
// once; the harness (gateway_harness.hpp) checks it. Single-threaded (the fuzzer's thread).
#include "gateway_harness.hpp"

namespace factum {

struct runtime::impl {
  runtime_config cfg;
  bool stopping = false;
};

runtime::runtime(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

runtime::~runtime() = default;

result<std::unique_ptr<runtime>> runtime::start(runtime_config config) {
  auto p = std::make_unique<impl>();
  p->cfg = std::move(config);
  return std::unique_ptr<runtime>(new runtime(std::move(p)));
}

void runtime::stop() {
  impl_->stopping = true;
}

void runtime::call(const entity_key& key, std::string method, std::string args_json,
                   call_options opts, std::function<void(call_reply)> done) {
  auto& calls = fuzz::recorded_calls();
  calls.push_back({key, std::move(method), std::move(args_json), std::move(opts)});
  done(call_reply::success(std::string(fuzz::stub_result)));
}

call_reply runtime::call_sync(const entity_key&, std::string, std::string, call_options) {
  return problems::internal.reply("not in the fuzz stub");
}

const factum::metrics::registry& runtime::metrics() const {
  static const factum::metrics::registry none; // the stub counts nothing
  return none;
}

void runtime::attach_connections(std::shared_ptr<connection_host>) {} // the stub runs no turn

void runtime::list_entities(const std::string&, entity_list_query q,
                            std::function<void(result<std::vector<entity_listing>>)> done) const {
  if (q.limit < 1 || q.limit > 10000) // the gateway must have refused it already
    return done(status{errc::internal, "the gateway passed limit " + std::to_string(q.limit)});
  done(std::vector<entity_listing>{});
}

// Degradation: the stub's tenants are always at level 0 and take no floor.

degradation_status runtime::degradation_of(const std::string& tenant) const {
  degradation_status s;
  s.tenant = tenant;
  return s;
}

std::vector<degradation_status> runtime::degradation() const {
  return {};
}

void runtime::set_degradation(const std::string&, std::optional<int>, std::string, std::string,
                              std::function<void(call_reply)> done) {
  done(problems::degradation_not_enabled.reply("not in the fuzz stub"));
}

// The fleet views read no index: the stub has none (null, as a stopping runtime's).
void runtime::read_tenant_index(std::function<void(tenant_index*)> read,
                                std::function<void()> then) const {
  read(nullptr);
  then();
}

// The shard moves' members (the gateway does not call them): the stub holds no entity.

size_t runtime::release_entities(const std::function<bool(const entity_key&)>&,
                                 std::chrono::milliseconds) {
  return 0;
}

result<std::vector<entity_key>>
runtime::entities_where(const std::function<bool(const entity_key&)>&) {
  return std::vector<entity_key>{};
}

result<std::string> runtime::export_entity(const entity_key& key, int64_t, std::string_view) {
  return status{errc::not_found, "no entity " + key.to_string() + " in the fuzz stub"};
}

void runtime::adopt_entity(const entity_key&, std::string, int64_t,
                           std::function<void(status)> done) {
  done(status{errc::unavailable, "the fuzz stub keeps no entity files"});
}

status runtime::forget_entity(const entity_key&) {
  return status::ok();
}

// The stub has no archive: what the real runtime answers without archive_dir.
result<archive_point> runtime::bookmark(const entity_key&, const bookmark_query&) {
  return status{errc::invalid_argument, "the fuzz stub has no archive"};
}

result<runtime::rollback_report> runtime::rollback_entity(const entity_key&, const archive_point&,
                                                          std::string, std::chrono::milliseconds) {
  return status{errc::invalid_argument, "the fuzz stub has no archive"};
}

result<runtime::fork_report> runtime::fork_entity(const entity_key&, const entity_key&,
                                                  std::optional<archive_point>, std::string) {
  return status{errc::invalid_argument, "the fuzz stub keeps no entity files"};
}

const runtime_config& runtime::config() const {
  return impl_->cfg;
}

bool runtime::stopping() const {
  return impl_->stopping;
}

std::string new_trace_id() {
  return "0123456789abcdef0123456789abcdef";
}

std::string call_fingerprint(std::string_view method, std::string_view args_json) {
  std::string buf(method);
  buf.push_back('\n');
  buf.append(args_json);
  return sha256_hex(buf);
}

} // namespace factum
