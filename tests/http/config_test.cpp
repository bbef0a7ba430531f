// config_test.cpp: `factum serve`'s configuration (defaults, every validation error names its
// key) and the gateway's pure helpers (percent-decoding, query splitting, the depth-limited
// JSON check, header checks). No server; runs on the test thread.
#include <doctest/doctest.h>

#include "factum/tools/serve.hpp"
#include "http_util.hpp"
#include "support/serve_types.hpp"

using namespace factum;
using namespace factum::tools;
using nlohmann::json;

namespace {

json minimal() {
  return {{"data_dir", "/tmp/x"},
          {"tenants", {{"acme", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}}}}};
}

std::string error_of(const json& doc) {
  auto r = parse_serve_config(doc, test::serve_types());
  return r ? std::string() : r.error().message();
}

} // namespace

TEST_CASE("config: defaults") {
  auto r = parse_serve_config(minimal(), test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto& c = *r;
  CHECK(c.http.host == "127.0.0.1");
  CHECK(c.http.port == 8080);
  CHECK(c.runtime.mode == durability::full);
  CHECK(c.runtime.idle_timeout.count() == 60'000);
  CHECK(c.runtime.key_ttl.count() == 86'400'000);
  CHECK(c.runtime.storage_threads == 8);
  CHECK(c.http.limits.max_body_bytes == 1024 * 1024);
  CHECK(c.http.limits.max_json_depth == 64);
  CHECK(c.http.limits.max_move_file_bytes == 256 * 1024 * 1024);
  CHECK(c.http.limits.request_timeout.count() == 30'000);
  CHECK(c.http.io_threads == 1);
  CHECK(c.runtime.types.find("ledger"));
  CHECK(c.runtime.types.find("counter"));
  CHECK(c.http.require_idempotency_key["ledger"]["append"] == true);
  CHECK(c.tools == json::object());
  CHECK_FALSE(c.dev);
  REQUIRE(c.http.tenants.size() == 1);
  CHECK(c.http.tenants[0].keys[0].sha256 == api_key_sha256("k"));
}

TEST_CASE("config: every key is read") {
  auto doc = minimal();
  doc["listen"] = "[::1]:9000";
  doc["durability"] = "normal";
  doc["idle_timeout_ms"] = 1000;
  doc["max_active_entities"] = 50;
  doc["storage_threads"] = 2;
  doc["scheduler_threads"] = 3;
  doc["http_threads"] = 2;
  doc["key_ttl_ms"] = 0;
  doc["call_timeout_ms"] = 500;
  doc["shutdown_timeout_ms"] = 700;
  doc["dev"] = true;
  doc["tenants"]["globex"] = {{"api_keys", {"plain-dev-key"}}};
  doc["types"] = {"ledger"};
  doc["idempotency"] = {{"ledger", {{"append", {{"require_key", false}}}}}};
  doc["limits"] = {{"max_body_bytes", 2048},   {"max_json_depth", 8},
                   {"max_header_bytes", 4096}, {"request_timeout_ms", 100},
                   {"max_connections", 10},    {"max_move_file_bytes", 4096}};
  doc["tools"] = {{"telephony", {{"url", "http://127.0.0.1:9/"}}}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto& c = *r;
  CHECK(c.http.host == "::1");
  CHECK(c.http.port == 9000);
  CHECK(c.runtime.mode == durability::normal);
  CHECK(c.runtime.idle_timeout.count() == 1000);
  CHECK(c.runtime.max_active_entities == 50);
  CHECK(c.runtime.storage_threads == 2);
  CHECK(c.runtime.scheduler_threads == 3);
  CHECK(c.http.io_threads == 2);
  CHECK(c.runtime.key_ttl.count() == 0);
  CHECK(c.http.call_timeout.count() == 500);
  CHECK(c.shutdown_timeout.count() == 700);
  CHECK(c.runtime.types.find("ledger"));
  CHECK_FALSE(c.runtime.types.find("counter"));
  CHECK(c.http.require_idempotency_key["ledger"]["append"] == false);
  CHECK(c.http.limits.max_body_bytes == 2048);
  CHECK(c.http.limits.max_json_depth == 8);
  CHECK(c.http.limits.max_header_bytes == 4096);
  CHECK(c.http.limits.request_timeout.count() == 100);
  CHECK(c.http.limits.max_connections == 10);
  CHECK(c.http.limits.max_move_file_bytes == 4096);
  CHECK(c.tools["telephony"]["url"] == "http://127.0.0.1:9/");
  REQUIRE(c.http.tenants.size() == 2);
}

TEST_CASE("config: errors name the offending key") {
  auto with = [](const char* key, json v) {
    auto d = minimal();
    d[key] = std::move(v);
    return d;
  };
  CHECK(error_of(json::array()).find("JSON object") != std::string::npos);
  CHECK(error_of(with("bogus", 1)).find("bogus: unknown key") == 0);
  CHECK(error_of(with("durability", "fast")).find("durability") == 0);
  CHECK(error_of(with("listen", "localhost")).find("listen") == 0);
  CHECK(error_of(with("listen", "127.0.0.1:99999")).find("listen") == 0);
  CHECK(error_of(with("listen", "::1:80")).find("listen") == 0);
  CHECK(error_of(with("storage_threads", 0)).find("storage_threads") == 0);
  CHECK(error_of(with("storage_threads", "8")).find("storage_threads") == 0);
  CHECK(error_of(with("idle_timeout_ms", 1.5)).find("idle_timeout_ms") == 0);
  CHECK(error_of(with("key_ttl_ms", -1)).find("key_ttl_ms") == 0);
  CHECK(error_of(with("types", json{"ledger", "nosuch"})).find("types[1]: unknown entity type") ==
        0);
  CHECK(error_of(with("types", json::array())).find("types") == 0);
  CHECK(error_of(with("tools", json::array())).find("tools") == 0);
  CHECK(error_of(with("limits", {{"max_body_bytes", 0}})).find("limits.max_body_bytes") == 0);
  CHECK(error_of(with("limits", {{"nope", 1}})).find("limits.nope") == 0);
  CHECK(error_of(with("idempotency", {{"nosuch", {{"m", {{"require_key", true}}}}}}))
          .find("idempotency.nosuch") == 0);
  CHECK(error_of(with("idempotency", {{"ledger", {{"nosuch", {{"require_key", true}}}}}}))
          .find("idempotency.ledger.nosuch") == 0);
  CHECK(error_of(with("idempotency", {{"ledger", {{"append", {{"require_key", 1}}}}}}))
          .find("idempotency.ledger.append.require_key") == 0);
  // Tenants: required, valid names, hashed keys unless dev, each key once.
  auto d = minimal();
  d.erase("tenants");
  CHECK(error_of(d).find("tenants: required") == 0);
  CHECK(error_of(with("tenants", {{"acme", {{"api_keys", {"plain"}}}}}))
          .find("tenants.acme.api_keys[0]: plain-text API keys are allowed only with") == 0);
  CHECK(error_of(with("tenants", {{"acme", {{"api_keys", {"sha256:abc"}}}}}))
          .find("tenants.acme.api_keys[0]") == 0);
  CHECK(error_of(with("tenants", {{"a/b", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}}}))
          .find("tenants.a/b") == 0);
  CHECK(error_of(with("tenants", {{"a", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}},
                                  {"b", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}}}))
          .find("configured twice") != std::string::npos);
  CHECK(error_of(with("tenants", {{"a", {{"api_keys", json::array()}}}})).find("tenants.a") == 0);
  // Upper-case hex is accepted and normalised.
  auto up = with("tenants", {{"a", {{"api_keys", {"sha256:" + [] {
                                       auto h = api_key_sha256("k");
                                       for (auto& c : h)
                                         c = static_cast<char>(std::toupper(c));
                                       return h;
                                     }()}}}}});
  auto r = parse_serve_config(up, test::serve_types());
  REQUIRE(r.is_ok());
  CHECK(r->http.tenants[0].keys[0].sha256 == api_key_sha256("k"));
}

TEST_CASE("config: tenant quotas are read, and each bad one names its path") {
  auto with_quota = [](json quota) {
    auto d = minimal();
    d["tenants"]["acme"]["quota"] = std::move(quota);
    d["tenants"]["globex"] = {{"api_keys", {"sha256:" + api_key_sha256("g")}}};
    return d;
  };
  auto r = parse_serve_config(with_quota({{"max_entities", 10}, {"max_bytes", 1 << 30}}),
                              test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto& q = r->runtime.tenant_quotas;
  REQUIRE(q.size() == 1); // globex has none
  CHECK(q["acme"].max_entities == 10);
  CHECK(q["acme"].max_bytes == int64_t{1} << 30);
  // Each member is optional; an empty quota limits nothing.
  r = parse_serve_config(with_quota({{"max_bytes", 0}}), test::serve_types());
  REQUIRE(r.is_ok());
  CHECK_FALSE(r->runtime.tenant_quotas["acme"].max_entities);
  CHECK(r->runtime.tenant_quotas["acme"].max_bytes == 0);
  CHECK(parse_serve_config(with_quota(json::object()), test::serve_types()).is_ok());
  CHECK(error_of(with_quota({{"max_entities", -1}}))
          .find("tenants.acme.quota.max_entities: must be between 0 and") == 0);
  CHECK(
    error_of(with_quota({{"max_bytes", "1GB"}})).find("tenants.acme.quota.max_bytes: must be") ==
    0);
  CHECK(error_of(with_quota({{"max_bytes", 1.5}})).find("tenants.acme.quota.max_bytes") == 0);
  CHECK(
    error_of(with_quota({{"max_files", 1}})).find("tenants.acme.quota.max_files: unknown key") ==
    0);
  CHECK(error_of(with_quota(json::array())).find("tenants.acme.quota: must be an object") == 0);
}

TEST_CASE("config: a tool's per-operation retry policies are read, and each bad one names its "
          "path") {
  auto with = [](json ops) {
    auto doc = minimal();
    doc["tools"] = {{"crm", {{"url", "http://127.0.0.1:9/"}, {"operations", std::move(ops)}}}};
    return doc;
  };
  auto r = parse_serve_config(
    with({{"search", {{"retry", {{"max_attempts", 3}, {"base_delay_ms", 100}}}}},
          {"charge", {{"retry", {{"preset", "webhook_delivery"}, {"priority", "realtime"}}}}}}),
    test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  REQUIRE(r->tool_specs.size() == 1);
  auto& ops = r->tool_specs[0].policy.operation_retry;
  REQUIRE(ops.size() == 2);
  CHECK(ops["search"]["max_attempts"] == 3);
  CHECK(ops["search"]["base_delay_ms"] == 100);
  CHECK(ops["charge"]["max_attempts"] == 2); // realtime: 2 attempts
  CHECK(error_of(with({{"a/b", {{"retry", {{"max_attempts", 3}}}}}}))
          .find("tools.crm.operations.a/b: an operation is") == 0);
  CHECK(error_of(with({{"s", {{"retries", json::object()}}}}))
          .find("tools.crm.operations.s.retries: unknown key") == 0);
  CHECK(error_of(with({{"s", json::object()}})).find("tools.crm.operations.s.retry: required") ==
        0);
  CHECK(error_of(with({{"s", {{"retry", {{"by_status", true}}}}}}))
          .find("tools.crm.operations.s.retry.by_status: is set per tool") == 0);
  CHECK(error_of(with({{"s", {{"retry", {{"max_attempts", 0}}}}}}))
          .find("tools.crm.operations.s.retry") == 0);
  CHECK(error_of(with(json::array())).find("tools.crm.operations: must be an object") == 0);
}

TEST_CASE("config: degradation levels are read, and each bad member names its path") {
  auto with = [](json d) {
    auto doc = minimal();
    doc["tools"] = {{"telephony", {{"url", "http://127.0.0.1:9/"}}},
                    {"ocr", {{"url", "http://127.0.0.1:9/"}}}};
    doc["degradation"] = std::move(d);
    return doc;
  };
  auto r =
    parse_serve_config(with({{"critical_tools", {"telephony"}},
                             {"features",
                              {{"reports", {{"max_level", 0}, {"methods", {"ledger.recent"}}}},
                               {"ocr", {{"max_level", 1}, {"tools", {"ocr"}}}},
                               {"writes", {{"max_level", 3}, {"methods", {"ledger.*", "*"}}}}}},
                             {"retry_after_s", 15},
                             {"quarantine_hold_ms", 60000},
                             {"min_free_bytes", 1 << 30},
                             {"recover_after_ms", 5000},
                             {"check_interval_ms", 250}}),
                       test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto& d = r->runtime.degradation;
  CHECK(d.enabled);
  CHECK(d.critical_tools == std::vector<std::string>{"telephony"});
  REQUIRE(d.features.size() == 3);
  CHECK(d.features[1].name == "reports"); // the object's (sorted) order
  CHECK(d.features[1].max_level == 0);
  CHECK(d.features[0].tools == std::vector<std::string>{"ocr"});
  CHECK(d.retry_after == std::chrono::seconds(15));
  CHECK(d.min_free_bytes == int64_t{1} << 30);
  CHECK(d.recover_after == std::chrono::milliseconds(5000));
  CHECK(d.check_interval == std::chrono::milliseconds(250));
  CHECK(d.tenants == std::vector<std::string>{"acme"});
  // Absent: not enabled; {} enables the rules with an empty matrix.
  CHECK_FALSE(parse_serve_config(minimal(), test::serve_types())->runtime.degradation.enabled);
  CHECK(parse_serve_config(with(json::object()), test::serve_types())->runtime.degradation.enabled);
  CHECK(error_of(with({{"critical", {"x"}}})).find("degradation.critical: unknown key") == 0);
  CHECK(error_of(with({{"critical_tools", {"fax"}}}))
          .find("degradation.critical_tools: names tool 'fax'") == 0);
  CHECK(error_of(with({{"features", {{"f", {{"methods", {"ledger.recent"}}}}}}}))
          .find("degradation.features.f.max_level: required") == 0);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 5}, {"methods", {"ledger.*"}}}}}}}))
          .find("degradation.features.f.max_level: must be between 0 and 4") == 0);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 1}}}}}}))
          .find("degradation.features.f.: names no method and no tool") == 0);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 1}, {"methods", {"nosuch.x"}}}}}}}))
          .find("names entity type 'nosuch'") != std::string::npos);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 1}, {"methods", {"ledger.nosuch"}}}}}}}))
          .find("entity type ledger has no method 'nosuch'") != std::string::npos);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 1}, {"methods", {"ledger"}}}}}}}))
          .find("must be \"*\", \"type.*\" or \"type.method\"") != std::string::npos);
  CHECK(error_of(with({{"features", {{"f", {{"max_level", 1}, {"tools", {"fax"}}}}}}}))
          .find("names tool 'fax'") != std::string::npos);
  CHECK(error_of(with({{"features", {{"a b", {{"max_level", 1}, {"tools", {"ocr"}}}}}}}))
          .find("a feature name is 1 to 64") != std::string::npos);
  CHECK(error_of(with({{"retry_after_s", 0}})).find("degradation.retry_after_s: must be") == 0);
  CHECK(error_of(with({{"check_interval_ms", 1}})).find("degradation.check_interval_ms") == 0);
  CHECK(error_of(with(json::array())).find("degradation: must be an object") == 0);
}

TEST_CASE("config: --listen overrides, comments are ignored") {
  auto d = minimal();
  d["// note"] = "anything";
  auto r = parse_serve_config(d, test::serve_types());
  REQUIRE(r.is_ok());
  REQUIRE(apply_listen(*r, "0.0.0.0:0").is_ok());
  CHECK(r->http.host == "0.0.0.0");
  CHECK(r->http.port == 0);
  CHECK_FALSE(apply_listen(*r, "nohost").is_ok());
  CHECK_FALSE(apply_listen(*r, ":80").is_ok());
  CHECK_FALSE(apply_listen(*r, "[::1]80").is_ok());
}

TEST_CASE("helpers: percent-decoding, query splitting and integers") {
  using namespace factum::http;
  CHECK(percent_decode("a%2Fb") == std::optional<std::string>("a/b"));
  CHECK(percent_decode("a+b") == std::optional<std::string>("a+b"));
  CHECK(percent_decode("a+b", true) == std::optional<std::string>("a b"));
  CHECK_FALSE(percent_decode("a%2"));
  CHECK_FALSE(percent_decode("a%"));
  CHECK_FALSE(percent_decode("%G0"));
  auto q = split_query("a=1&b=&c&&d=x%20y");
  REQUIRE(q);
  REQUIRE(q->size() == 4);
  CHECK((*q)[1].value.empty());
  CHECK((*q)[2].name == "c");
  CHECK((*q)[3].value == "x y");
  CHECK(parse_non_negative("0") == 0);
  CHECK(parse_non_negative("9223372036854775807") == INT64_MAX);
  CHECK_FALSE(parse_non_negative("9223372036854775808"));
  CHECK_FALSE(parse_non_negative("-1"));
  CHECK_FALSE(parse_non_negative(""));
  CHECK_FALSE(parse_non_negative("1e3"));
  CHECK(split_path("/v1/entities/a/b/c").size() == 5);
  CHECK(split_path("/a//b/").size() == 4);
}

TEST_CASE("helpers: JSON check, keys, trace ids, content types") {
  using namespace factum::http;
  CHECK(check_json("{\"a\":[1,2,{\"b\":null}]}", 64).verdict == json_verdict::ok);
  CHECK(check_json("[[[]]]", 3).verdict == json_verdict::ok);
  CHECK(check_json("[[[[]]]]", 3).verdict == json_verdict::too_deep);
  CHECK(check_json(std::string(1'000'000, '['), 64).verdict == json_verdict::too_deep);
  CHECK(check_json("{\"a\":}", 64).verdict == json_verdict::invalid);
  CHECK(check_json("\"\xff\"", 64).verdict == json_verdict::invalid);
  CHECK(check_json("", 64).verdict == json_verdict::invalid);
  CHECK(valid_idempotency_key("k"));
  CHECK(valid_idempotency_key(std::string(255, 'x')));
  CHECK_FALSE(valid_idempotency_key(""));
  CHECK_FALSE(valid_idempotency_key(std::string(256, 'x')));
  CHECK_FALSE(valid_idempotency_key("a\x7f"));
  CHECK(incoming_trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "") ==
        "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(incoming_trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "x") == "x");
  CHECK(incoming_trace_id("garbage", "") == "");
  CHECK(incoming_trace_id("", "has space") == "");
  CHECK(incoming_trace_id("", std::string(129, 'a')) == "");
  CHECK(is_json_content_type("application/json"));
  CHECK(is_json_content_type("application/json; charset=utf-8"));
  CHECK(is_json_content_type("APPLICATION/JSON;charset=\"UTF-8\""));
  CHECK_FALSE(is_json_content_type("application/json; charset=iso-8859-1"));
  CHECK_FALSE(is_json_content_type("application/jsonx"));
  CHECK_FALSE(is_json_content_type("text/json"));
  CHECK(constant_time_equal("abc", "abc"));
  CHECK_FALSE(constant_time_equal("abc", "abd"));
  CHECK_FALSE(constant_time_equal("abc", "ab"));
}
