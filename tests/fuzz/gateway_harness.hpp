// tests/fuzz/gateway_harness.hpp: one gateway (gateway/src/gateway.cpp) over the stub
// runtime (stub_runtime.cpp) and the properties every answer must have, shared by the HTTP
// fuzz targets. Single-threaded: the stub answers calls inline, so handle() completes before it
// returns.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/gateway/http_server.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/sha256.hpp"
#include "fuzz_check.hpp"
#include "gateway.hpp"
#include "http_util.hpp"

namespace factum::fuzz {

/// What the gateway handed to runtime::call.
struct recorded_call {
  entity_key key;
  std::string method;
  std::string args;
  call_options opts;
};

/// Calls the stub runtime received since the last clear (a function-local static: the stub
/// and the harness share it).
inline std::vector<recorded_call>& recorded_calls() {
  static std::vector<recorded_call> calls;
  return calls;
}

/// The stub's answer to every call.
inline constexpr std::string_view stub_result = R"({"stub":true})";

/// The one API key the harness's tenant "acme" has.
inline constexpr std::string_view api_key = "fuzz-key-1";

/// The API key of the second tenant, "globex".
inline constexpr std::string_view other_key = "other-key";

/// How deep the JSON a call of `orders` may nest in the small-limit harness.
inline constexpr int small_depth = 4;

/// A gateway over the stub runtime: tenants acme (key fuzz-key-1) and globex (other-key); types
/// `ledger` (append, query) and `orders` (place requires an Idempotency-Key; cancel is overridden
/// to need one by the server config).
class gateway_harness {
 public:
  explicit gateway_harness(int max_json_depth = 64) {
    runtime_config rc;
    rc.data_dir = "/nonexistent-fuzz";
    entity_type ledger;
    ledger.name = "ledger";
    ledger.methods["append"] = method_def{};
    ledger.methods["query"] = method_def{};
    entity_type orders;
    orders.name = "orders";
    orders.methods["place"] = method_def{{}, method_options{true}};
    orders.methods["cancel"] = method_def{};
    orders.methods["peek"] = method_def{};
    rc.types.add(std::move(ledger));
    rc.types.add(std::move(orders));
    auto started = runtime::start(std::move(rc));
    rt_ = std::move(*started);
    http_server_config hc;
    hc.tenants.push_back({"acme", {{api_key_sha256(api_key), scope_all}}});
    hc.tenants.push_back({"globex", {{api_key_sha256(other_key)}}});
    hc.require_idempotency_key["orders"]["cancel"] = true;
    hc.limits.max_json_depth = max_json_depth;
    hc.log = [this](std::string_view line) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      FUZZ_CHECK(j.is_object() && j.contains("ts") && j.contains("level"), std::string(line));
      ++log_lines_;
    };
    gw_ = std::make_unique<http::gateway>(*rt_, std::move(hc));
  }

  /// The outcome of one request.
  struct outcome {
    http::http_response response;
    std::optional<recorded_call> call;
  };

  /// Handles `req` and checks the properties every answer has (see check()).
  outcome run(const http::http_request& req) {
    recorded_calls().clear();
    int answers = 0;
    outcome out;
    gw_->handle(req, [&](http::http_response r) {
      ++answers;
      out.response = std::move(r);
    });
    FUZZ_CHECK(answers == 1, "done ran " + std::to_string(answers) + " times");
    auto& calls = recorded_calls();
    FUZZ_CHECK(calls.size() <= 1, "more than one runtime call for one request");
    if (!calls.empty())
      out.call = std::move(calls.front());
    check(req, out);
    return out;
  }

  /// A transport refusal (the server's 400/413/431 paths): a problem that closes.
  http::http_response reject(const problem_kind& kind, std::string detail, std::string_view verb,
                             std::string_view target) {
    auto r = gw_->reject(kind, std::move(detail), verb, target);
    check_problem(r);
    FUZZ_CHECK(r.close, "a transport refusal must close the connection");
    return r;
  }

  http::gateway& gateway() { return *gw_; }

  /// Properties of a problem+json answer: RFC 9457 members and a stable code, the error table's
  /// with its status and category.
  static void check_problem(const http::http_response& r) {
    FUZZ_CHECK(r.status >= 400 && r.status <= 599, std::to_string(r.status));
    FUZZ_CHECK(r.content_type == "application/problem+json", r.content_type);
    auto p = nlohmann::json::parse(r.body, nullptr, false);
    FUZZ_CHECK(p.is_object(), r.body);
    FUZZ_CHECK(p.value("status", 0) == r.status, r.body);
    FUZZ_CHECK(p.contains("code") && p["code"].is_string(), r.body);
    auto code = p["code"].get<std::string>();
    FUZZ_CHECK(!code.empty(), r.body);
    for (char c : code)
      FUZZ_CHECK((c >= 'A' && c <= 'Z') || c == '_', r.body);
    FUZZ_CHECK(p.value("type", "") == "urn:factum:problem:" + code, r.body);
    const auto* kind = find_problem(code); // every refusal is an entry of the error table
    FUZZ_CHECK(kind && kind->status == r.status &&
                 p.value("category", "") == factum::to_string(kind->category),
               r.body);
    FUZZ_CHECK(p.contains("title") && p["title"].is_string(), r.body);
    FUZZ_CHECK(p.contains("detail") && p["detail"].is_string(), r.body);
    if (r.status == 405)
      FUZZ_CHECK(!r.allow.empty(), "405 without Allow");
  }

 private:
  static bool is_trace_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  }

  void check(const http::http_request& req, const outcome& o) {
    const auto& r = o.response;
    // Every answer carries a usable trace id.
    FUZZ_CHECK(!r.trace_id.empty() && r.trace_id.size() <= 128, r.trace_id);
    for (char c : r.trace_id)
      FUZZ_CHECK(is_trace_char(c), r.trace_id);
    if (!o.call && r.status == 200) {
      // Only the operational routes and the fleet listing (read from the tenant index, which
      // the stub keeps empty) answer without a runtime call.
      auto path = std::string_view(req.target).substr(0, req.target.find('?'));
      FUZZ_CHECK(req.verb == "GET" &&
                   (path == "/healthz" || path == "/metrics" || path == "/v1/entities"),
                 req.target);
      if (path == "/healthz")
        FUZZ_CHECK(r.body == R"({"status":"ok"})", r.body);
      else if (path == "/v1/entities")
        FUZZ_CHECK(r.body == "[]" && r.content_type == "application/json", r.body);
      else
        FUZZ_CHECK(r.content_type.rfind("text/plain", 0) == 0, r.content_type);
      return;
    }
    if (!o.call) {
      // Refused before the runtime: always a problem.
      check_problem(r);
      if (r.status < 500)
        return;
      // Only 503 (draining) may be a 5xx without a call; the harness never drains.
      FUZZ_CHECK(false, "5xx without a runtime call: " + r.body);
    }
    // Reached the runtime: the stub's answer, unchanged; or a fact stream whose first page
    // was read (the transport writes its events).
    if (r.stream)
      FUZZ_CHECK(r.status == 200 && r.content_type.rfind("text/event-stream", 0) == 0 &&
                   o.call->method == "@facts",
                 r.content_type);
    else
      FUZZ_CHECK(r.status == 200 && r.body == stub_result, r.body);
    const auto& c = *o.call;
    // Only an authenticated tenant, from X-API-Key: acme's key reaches acme, globex's globex.
    FUZZ_CHECK(req.has_api_key && (req.api_key == api_key || req.api_key == other_key),
               req.api_key);
    FUZZ_CHECK(c.key.tenant == (req.api_key == api_key ? "acme" : "globex"), c.key.tenant);
    // A valid entity key, never with "..".
    auto k = entity_key::make(c.key.tenant, c.key.type, c.key.id);
    FUZZ_CHECK(k.is_ok(), c.key.to_string());
    FUZZ_CHECK(c.key.type.find("..") == std::string::npos &&
                 c.key.id.find("..") == std::string::npos,
               c.key.to_string());
    FUZZ_CHECK(!c.method.empty(), "empty method");
    // Arguments are always a JSON document the runtime can parse.
    auto args = nlohmann::json::parse(c.args, nullptr, false);
    FUZZ_CHECK(!args.is_discarded(), c.args);
    FUZZ_CHECK(c.opts.trace_id == r.trace_id, c.opts.trace_id);
    if (!c.opts.idempotency_key.empty()) {
      FUZZ_CHECK(req.idempotency_key_count == 1, "key used though sent more than once");
      FUZZ_CHECK(http::valid_idempotency_key(c.opts.idempotency_key), c.opts.idempotency_key);
      FUZZ_CHECK(c.opts.idempotency_key == req.idempotency_key, c.opts.idempotency_key);
      FUZZ_CHECK(c.opts.fingerprint.size() == 64, c.opts.fingerprint);
    }
    if (c.method.front() != '@') {
      // A tenant method: registered, a POST, the body verbatim (or {}).
      FUZZ_CHECK(req.verb == "POST", req.verb);
      const auto* t = rt_->config().types.find(c.key.type);
      FUZZ_CHECK(t && t->find(c.method), c.key.type + "." + c.method);
      FUZZ_CHECK(c.args == (req.body.empty() ? std::string("{}") : req.body), c.args);
      bool needs_key = c.key.type == "orders" && (c.method == "place" || c.method == "cancel");
      if (needs_key)
        FUZZ_CHECK(!c.opts.idempotency_key.empty(), "required Idempotency-Key missing");
      if (!req.body.empty())
        FUZZ_CHECK(http::is_json_content_type(req.content_type), req.content_type);
    } else if (c.method == "@facts" || c.method == "@dead_letters" || c.method == "@breakers") {
      FUZZ_CHECK(req.verb == "GET", req.verb);
      FUZZ_CHECK(args.is_object(), c.args);
    } else {
      FUZZ_CHECK(c.method == "@dead_letter" || c.method == "@breaker", c.method);
      FUZZ_CHECK(req.verb == "POST", req.verb);
      FUZZ_CHECK(args.is_object() && args.contains("action"), c.args);
    }
  }

  std::unique_ptr<runtime> rt_;
  std::unique_ptr<http::gateway> gw_;
  size_t log_lines_ = 0;
};

} // namespace factum::fuzz
