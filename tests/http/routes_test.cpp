// routes_test.cpp: every route of the HTTP API against a real in-process server and a real
// HTTP client: calls, facts with strict filters, authentication and tenant isolation, entity
// key validation, 404/405/415/400 bodies, problem+json, trace ids, the error log, /healthz and
// /metrics. Runs on the test thread.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>

#include <regex>
#include <sstream>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

json append_body(const std::string& type, json data = json::object()) {
  return {{"type", type}, {"data", std::move(data)}};
}

void check_problem(const http_reply& r, int status, const std::string& code) {
  CHECK_MESSAGE(r.status == status, r.status << " " << r.body);
  CHECK(r.header("content-type") == "application/problem+json");
  auto p = r.json();
  REQUIRE(p.is_object());
  CHECK(p["status"] == status);
  CHECK(p["code"] == code);
  CHECK(p["type"].is_string());
  CHECK(p["title"].is_string());
  CHECK(p["detail"].is_string());
  CHECK(p["category"].is_string());
}

} // namespace

TEST_CASE("GET /healthz answers 200 {status: ok} with a trace id") {
  gateway_fixture f;
  http_client c(f.port());
  auto r = c.request("GET", "/healthz");
  CHECK(r.status == 200);
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.json() == json{{"status", "ok"}});
  CHECK(r.header("x-trace-id").size() == 32);
  auto bad = c.request("POST", "/healthz");
  check_problem(bad, 405, "METHOD_NOT_ALLOWED");
  CHECK(bad.header("allow") == "GET");
}

TEST_CASE("POST a method: 200 with the result, the trace id comes from traceparent or X-Trace-Id, "
          "is echoed and is stored in the facts") {
  gateway_fixture f;
  http_client c(f.port());
  std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  auto h = json_headers(acme_key, "t-1");
  h.emplace_back("traceparent", "00-" + trace + "-00f067aa0ba902b7-01");
  auto r = c.request("POST", "/v1/entities/ledger/l1/append", h,
                     append_body("invocation", {{"n", 1}}).dump());
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.json()["seq"] == 1);
  CHECK(r.json()["fact_id"].is_string());
  CHECK(r.header("x-trace-id") == trace);
  CHECK(r.header("idempotent-replayed").empty());
  auto h2 = json_headers(acme_key, "t-2");
  h2.emplace_back("X-Trace-Id", "order-77:retry.1");
  auto r2 = c.request("POST", "/v1/entities/ledger/l1/append", h2, append_body("x").dump());
  REQUIRE(r2.status == 200);
  CHECK(r2.header("x-trace-id") == "order-77:retry.1");
  auto facts = f.facts("acme", "ledger", "l1");
  REQUIRE(facts.size() == 2);
  CHECK(facts[0]["trace_id"] == trace);
  CHECK(facts[0]["idempotency_key"] == "t-1");
  CHECK(facts[0]["data"]["n"] == 1);
  CHECK(facts[1]["trace_id"] == "order-77:retry.1");
  // A method that needs no key, and an empty body (arguments {}).
  auto add = c.request("POST", "/v1/entities/counter/c1/add", {{"X-API-Key", acme_key}});
  REQUIRE_MESSAGE(add.status == 200, add.body);
  CHECK(add.json()["value"] == 1);
  // A handler's own failure maps to its status with the runtime's problem body.
  auto fail = c.request("POST", "/v1/entities/probe/p1/append_then", json_headers(),
                        json{{"fail", "client"}}.dump());
  check_problem(fail, 400, "PROBE_CLIENT");
}

TEST_CASE("GET facts: filters, order, limit, and strict query parsing (400 INVALID_QUERY)") {
  gateway_fixture f;
  http_client c(f.port());
  for (int i = 0; i < 6; ++i) {
    auto r = c.request(
      "POST", "/v1/entities/ledger/q/append", json_headers(acme_key, "q-" + std::to_string(i)),
      json{{"type", i % 2 ? "odd" : "even"}, {"subtype", "s" + std::to_string(i)}}.dump());
    REQUIRE(r.status == 200);
  }
  auto get = [&](const std::string& q) {
    return c.request("GET", "/v1/entities/ledger/q/facts" + q, {{"X-API-Key", acme_key}});
  };
  auto all = get("");
  REQUIRE(all.status == 200);
  REQUIRE(all.json().size() == 6);
  CHECK(get("?type=odd").json().size() == 3);
  CHECK(get("?type=odd&subtype=s3").json().size() == 1);
  auto page = get("?after_seq=2&limit=2").json();
  REQUIRE(page.size() == 2);
  CHECK(page[0]["seq"] == 3);
  CHECK(page[1]["seq"] == 4);
  auto desc = get("?order=desc&limit=1").json();
  REQUIRE(desc.size() == 1);
  CHECK(desc[0]["seq"] == 6);
  CHECK(get("?before_seq=3").json().size() == 2);
  CHECK(get("?idempotency_key=q-4").json().size() == 1);
  auto ts = all.json()[0]["timestamp"].get<int64_t>();
  CHECK(get("?since=" + std::to_string(ts)).json().size() >= 1);
  CHECK(get("?until=1").json().empty());
  auto trace = all.json()[2]["trace_id"].get<std::string>();
  CHECK(get("?trace_id=" + trace).json().size() == 1);
  CHECK(get("?type=nosuchtype").json().empty());
  for (auto q :
       {"?bogus=1", "?limit=0", "?limit=10001", "?limit=abc", "?after_seq=-1", "?since=1.5",
        "?until=99999999999999999999", "?since=9223372036854775808", "?since=+5", "?order=up",
        "?type=", "?type=a&type=b", "?limit=%ZZ", "?after_seq=%2D1"}) {
    auto r = get(q);
    CAPTURE(q);
    check_problem(r, 400, "INVALID_QUERY");
  }
  CHECK(get("?since=9223372036854775807").status == 200);
  CHECK(f.facts("acme", "ledger", "q").size() == 6);
}

TEST_CASE("401 UNAUTHORIZED without a known X-API-Key, nothing is written") {
  gateway_fixture f;
  http_client c(f.port());
  auto body = append_body("x").dump();
  auto none = c.request("POST", "/v1/entities/ledger/a/append",
                        {{"Content-Type", "application/json"}, {"Idempotency-Key", "k"}}, body);
  check_problem(none, 401, "UNAUTHORIZED");
  auto wrong = c.request("POST", "/v1/entities/ledger/a/append", json_headers("nope", "k"), body);
  check_problem(wrong, 401, "UNAUTHORIZED");
  auto empty = c.request("GET", "/v1/entities/ledger/a/facts", {{"X-API-Key", ""}});
  check_problem(empty, 401, "UNAUTHORIZED");
  // A key that differs only in its last character.
  auto near = c.request("GET", "/v1/entities/ledger/a/facts", {{"X-API-Key", "key-acmf"}});
  check_problem(near, 401, "UNAUTHORIZED");
  CHECK(f.entity_files() == 0);
}

TEST_CASE("tenant isolation: the same type/id is another entity for another tenant") {
  gateway_fixture f;
  http_client c(f.port());
  for (int i = 0; i < 3; ++i)
    REQUIRE(c.request("POST", "/v1/entities/ledger/shared/append",
                      json_headers(acme_key, "a-" + std::to_string(i)),
                      append_body("secret", {{"i", i}}).dump())
              .status == 200);
  auto theirs = c.request("GET", "/v1/entities/ledger/shared/facts", {{"X-API-Key", globex_key}});
  check_problem(theirs, 404, "ENTITY_NOT_FOUND"); // globex's ledger/shared was never written
  auto own = c.request("POST", "/v1/entities/ledger/shared/append", json_headers(globex_key, "a-0"),
                       append_body("mine").dump());
  REQUIRE(own.status == 200);
  CHECK(own.json()["seq"] == 1);                            // globex's own log starts at 1
  CHECK_FALSE(own.header("idempotent-replayed") == "true"); // keys are per entity, too
  auto again = c.request("GET", "/v1/entities/ledger/shared/facts", {{"X-API-Key", globex_key}});
  REQUIRE(again.json().size() == 1);
  CHECK(again.json()[0]["tenant_id"] == "globex");
  CHECK(f.facts("acme", "ledger", "shared").size() == 3);
  // The URL cannot name a tenant: a tenant-looking id is just an id of the caller's tenant.
  auto sneaky = c.request("GET", "/v1/entities/ledger/acme%2Fledger%2Fshared/facts",
                          {{"X-API-Key", globex_key}});
  check_problem(sneaky, 400, "INVALID_ENTITY_KEY");
}

TEST_CASE("400 INVALID_ENTITY_KEY: type and id are percent-decoded, then validated, before "
          "anything touches them") {
  gateway_fixture f;
  http_client c(f.port());
  std::string long_id(129, 'a');
  for (std::string id : {"..", "%2E%2E", "..%2F..%2Fetc", "a%2Fb", "a%5Cb", "a%00b", ".hidden",
                         "a..b", "sp%20ace", "%C3%A9", long_id.c_str(), "a%3Bb"}) {
    CAPTURE(id);
    auto r = c.request("POST", "/v1/entities/ledger/" + id + "/append", json_headers(acme_key, "k"),
                       append_body("x").dump());
    check_problem(r, 400, "INVALID_ENTITY_KEY");
    auto g = c.request("GET", "/v1/entities/ledger/" + id + "/facts", {{"X-API-Key", acme_key}});
    check_problem(g, 400, "INVALID_ENTITY_KEY");
  }
  auto bad_type = c.request("POST", "/v1/entities/led%2Fger/x/append", json_headers(acme_key, "k"),
                            append_body("x").dump());
  check_problem(bad_type, 400, "INVALID_ENTITY_KEY");
  auto bad_escape = c.request("GET", "/v1/entities/ledger/a%ZZ/facts", {{"X-API-Key", acme_key}});
  check_problem(bad_escape, 400, "INVALID_PATH");
  // Valid characters, percent-encoded, are fine: a%3Ab is the id "a:b".
  auto ok = c.request("POST", "/v1/entities/ledger/a%3Ab/append", json_headers(acme_key, "k"),
                      append_body("x").dump());
  REQUIRE_MESSAGE(ok.status == 200, ok.body);
  CHECK(f.facts("acme", "ledger", "a:b").size() == 1);
  CHECK(f.entity_files() == 1);
}

TEST_CASE("404 for an unknown type, method, internal method or route, nothing is written") {
  gateway_fixture f;
  http_client c(f.port());
  auto h = json_headers(acme_key, "k");
  check_problem(c.request("POST", "/v1/entities/nosuch/x/append", h, "{}"), 404,
                "UNKNOWN_ENTITY_TYPE");
  check_problem(c.request("GET", "/v1/entities/nosuch/x/facts", {{"X-API-Key", acme_key}}), 404,
                "UNKNOWN_ENTITY_TYPE");
  // The detail lists the types this server hosts, and names the one a wrong case meant.
  std::string hosted;
  for (auto& n : f.rt().config().types.names())
    hosted += (hosted.empty() ? "" : ", ") + n;
  REQUIRE(hosted.find("counter") != std::string::npos);
  auto unknown = c.request("POST", "/v1/entities/nosuch/x/append", h, "{}");
  CHECK(unknown.json()["detail"] == "no entity type nosuch (hosted types: " + hosted + ")");
  auto cased = c.request("POST", "/v1/entities/Counter/c1/add", h, "{}");
  check_problem(cased, 404, "UNKNOWN_ENTITY_TYPE");
  CHECK(cased.json()["detail"] ==
        "no entity type Counter (did you mean counter? hosted types: " + hosted + ")");
  check_problem(c.request("POST", "/v1/entities/ledger/x/nosuch", h, "{}"), 404,
                "METHOD_NOT_FOUND");
  check_problem(c.request("POST", "/v1/entities/ledger/x/%40facts", h, "{}"), 404,
                "METHOD_NOT_FOUND");
  check_problem(c.request("POST", "/v1/entities/ledger/x/@verify", h, "{}"), 404,
                "METHOD_NOT_FOUND");
  check_problem(c.request("GET", "/v2/entities/ledger/x/facts"), 404, "ROUTE_NOT_FOUND");
  check_problem(c.request("GET", "/v1/entities/ledger/x"), 404, "ROUTE_NOT_FOUND");
  check_problem(c.request("GET", "/v1"), 404, "ROUTE_NOT_FOUND"); // GET /: pages_test.cpp
  check_problem(c.request("POST", "/v1/entities/ledger/x/dead-letters/dl1/explode", h), 404,
                "ROUTE_NOT_FOUND");
  check_problem(c.request("POST", "/v1/entities/ledger/x/breakers/t/explode", h), 404,
                "ROUTE_NOT_FOUND");
  CHECK(f.entity_files() == 0);
}

TEST_CASE("405 METHOD_NOT_ALLOWED with an Allow header") {
  gateway_fixture f;
  http_client c(f.port());
  auto r = c.request("GET", "/v1/entities/ledger/x/append", {{"X-API-Key", acme_key}});
  check_problem(r, 405, "METHOD_NOT_ALLOWED");
  CHECK(r.header("allow") == "POST");
  auto d = c.request("DELETE", "/v1/entities/ledger/x/facts", {{"X-API-Key", acme_key}});
  check_problem(d, 405, "METHOD_NOT_ALLOWED");
  CHECK(d.header("allow") == "GET, POST");
  auto a = c.request("GET", "/v1/entities/ledger/x/breakers/t/reset", {{"X-API-Key", acme_key}});
  check_problem(a, 405, "METHOD_NOT_ALLOWED");
}

TEST_CASE("the route table: names are matched decoded under /v1/entities/ only, and each refusal "
          "counts under its route's label") {
  gateway_fixture f;
  http_client c(f.port());
  header_list key{{"X-API-Key", acme_key}};
  // An unknown action is a 404 whatever the method; an action with another method is a 405.
  check_problem(c.request("GET", "/v1/entities/ledger/x/dead-letters/dl1/explode", key), 404,
                "ROUTE_NOT_FOUND");
  auto dl = c.request("PUT", "/v1/entities/ledger/x/dead-letters", key);
  check_problem(dl, 405, "METHOD_NOT_ALLOWED");
  CHECK(dl.header("allow") == "GET, POST");
  // "%66acts" is "facts": the listing for GET (of an entity never written: 404 from the
  // runtime), a call of the method "facts" for POST.
  check_problem(c.request("GET", "/v1/entities/ledger/x/%66acts", key), 404, "ENTITY_NOT_FOUND");
  check_problem(c.request("POST", "/v1/entities/ledger/x/%66acts", json_headers(), "{}"), 404,
                "METHOD_NOT_FOUND");
  // Operational paths are matched as sent; a bad escape is refused only where names are decoded.
  check_problem(c.request("GET", "/%68ealthz"), 404, "ROUTE_NOT_FOUND");
  check_problem(c.request("GET", "/v1/entities/ledger/x/y/%zz", key), 400, "INVALID_PATH");
  check_problem(c.request("GET", "/v1/%zz"), 404, "ROUTE_NOT_FOUND");
  auto m = c.request("GET", "/metrics").body;
  auto count = [&](const std::string& route, int status) {
    auto needle = "factum_http_requests_total{route=\"" + route + "\",status=\"" +
                  std::to_string(status) + "\"} ";
    auto at = m.find(needle);
    return at == std::string::npos ? 0 : std::stoi(m.substr(at + needle.size()));
  };
  CHECK(count("dead_letter_action", 404) == 1);
  CHECK(count("dead_letters", 405) == 1);
  CHECK(count("facts", 404) == 1);
  CHECK(count("call", 404) == 1);
  CHECK(count("unmatched", 404) == 2);
  CHECK(count("unmatched", 400) == 1);
}

TEST_CASE("415 and 400: Content-Type, malformed JSON, invalid UTF-8 and deep JSON write nothing") {
  gateway_fixture f;
  http_client c(f.port());
  auto post = [&](const header_list& h, const std::string& body) {
    return c.request("POST", "/v1/entities/ledger/b/append", h, body);
  };
  auto body = append_body("x").dump();
  check_problem(post({{"X-API-Key", acme_key}, {"Idempotency-Key", "k"}}, body), 415,
                "UNSUPPORTED_MEDIA_TYPE");
  check_problem(
    post({{"X-API-Key", acme_key}, {"Idempotency-Key", "k"}, {"Content-Type", "text/plain"}}, body),
    415, "UNSUPPORTED_MEDIA_TYPE");
  check_problem(post({{"X-API-Key", acme_key},
                      {"Idempotency-Key", "k"},
                      {"Content-Type", "application/json; charset=latin1"}},
                     body),
                415, "UNSUPPORTED_MEDIA_TYPE");
  auto h = json_headers(acme_key, "k");
  for (std::string bad : {"{", "{\"type\":}", "nul", "{\"a\":1} x", "[1,]", "{'a':1}"}) {
    CAPTURE(bad);
    check_problem(post(h, bad), 400, "INVALID_JSON");
  }
  check_problem(post(h, "{\"type\":\"x\",\"data\":{\"s\":\"\xff\xfe\"}}"), 400, "INVALID_JSON");
  check_problem(post(h, "{\"type\":\"x\",\"data\":{\"s\":\"\xc3\x28\"}}"), 400, "INVALID_JSON");
  std::string deep = std::string(65, '[') + std::string(65, ']');
  check_problem(post(h, "{\"type\":\"x\",\"data\":{\"d\":" + deep + "}}"), 400, "JSON_TOO_DEEP");
  std::string huge_depth = std::string(10000, '[') + std::string(10000, ']');
  check_problem(post(h, huge_depth), 400, "JSON_TOO_DEEP");
  std::string unbalanced = std::string(100000, '[');
  check_problem(post(h, unbalanced), 400, "JSON_TOO_DEEP");
  CHECK(f.entity_files() == 0);
  // 64 levels in all are accepted, and the charset parameter is allowed.
  std::string ok_depth = std::string(62, '[') + std::string(62, ']');
  auto ok = post({{"X-API-Key", acme_key},
                  {"Idempotency-Key", "k"},
                  {"Content-Type", "Application/JSON; charset=UTF-8"}},
                 "{\"type\":\"x\",\"data\":{\"d\":" + ok_depth + "}}");
  CHECK_MESSAGE(ok.status == 200, ok.body);
  CHECK(f.facts("acme", "ledger", "b").size() == 1);
}

TEST_CASE("each error is logged once, as one JSON line carrying its trace id") {
  gateway_fixture f;
  http_client c(f.port());
  auto r = c.request(
    "POST", "/v1/entities/ledger/x/append",
    {{"X-API-Key", acme_key}, {"Content-Type", "application/json"}, {"X-Trace-Id", "log-trace-1"}},
    "{bad");
  REQUIRE(r.status == 400);
  auto runtime_error = c.request(
    "POST", "/v1/entities/probe/p/append_then",
    {{"X-API-Key", acme_key}, {"Content-Type", "application/json"}, {"X-Trace-Id", "log-trace-2"}},
    json{{"fail", "throw"}}.dump());
  REQUIRE(runtime_error.status == 500);
  REQUIRE(c.request("GET", "/healthz", {{"X-Trace-Id", "log-trace-3"}}).status == 200);
  CHECK(f.log_count("log-trace-1") == 1);
  CHECK(f.log_count("log-trace-2") == 1);
  CHECK(f.log_count("log-trace-3") == 0);
  for (auto& line : f.logs()) {
    auto j = json::parse(line, nullptr, false);
    REQUIRE_MESSAGE(j.is_object(), line);
    if (j.value("trace_id", "") == "log-trace-1") {
      CHECK(j["status"] == 400);
      CHECK(j["code"] == "INVALID_JSON");
      CHECK(j["level"] == "warn");
      CHECK(j["ts"].is_string());
    }
    if (j.value("trace_id", "") == "log-trace-2") {
      CHECK(j["code"] == "HANDLER_FAILED");
      CHECK(j["level"] == "error");
      CHECK(j["tenant"] == "acme");
    }
  }
}

TEST_CASE("GET /metrics parses as Prometheus text and counts requests, latency and the "
          "runtime's stats") {
  gateway_fixture f;
  http_client c(f.port());
  for (int i = 0; i < 5; ++i)
    REQUIRE(c.request("POST", "/v1/entities/ledger/m/append",
                      json_headers(acme_key, "m-" + std::to_string(i)), append_body("x").dump())
              .status == 200);
  REQUIRE(c.request("POST", "/v1/entities/ledger/m/append", json_headers(acme_key, "m-0"),
                    append_body("x").dump())
            .header("idempotent-replayed") == "true");
  REQUIRE(c.request("GET", "/v1/entities/ledger/m/facts", {{"X-API-Key", "bad"}}).status == 401);
  auto r = c.request("GET", "/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type").find("text/plain") == 0);
  // name{label="value",...} value
  std::regex line_re(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*)"
                     R"((\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?)"
                     R"( -?([0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\+Inf|NaN)$)");
  std::map<std::string, double> values;
  std::istringstream in(r.body);
  std::string line;
  size_t samples = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    CHECK_MESSAGE(std::regex_match(line, line_re), line);
    auto sp = line.rfind(' ');
    values[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    ++samples;
  }
  CHECK(samples > 30);
  CHECK(values["factum_http_requests_total{route=\"call\",status=\"200\"}"] == 6);
  CHECK(values["factum_http_requests_total{route=\"facts\",status=\"401\"}"] == 1);
  // By tenant: the 401 authenticated nobody, so it has no tenant.
  CHECK(values["factum_tenant_requests_total{tenant=\"acme\",class=\"2xx\"}"] == 6);
  CHECK(values.count("factum_tenant_requests_total{tenant=\"acme\",class=\"4xx\"}") == 0);
  CHECK(values["factum_http_call_duration_seconds_count"] == 6);
  CHECK(values["factum_http_call_duration_seconds_bucket{le=\"+Inf\"}"] == 6);
  CHECK(values["factum_facts_total"] == 5);
  CHECK(values["factum_commits_total"] >= 1);
  // Every acknowledged write waited for a WAL sync: at least one was timed, each in a bucket.
  CHECK(values["factum_storage_sync_duration_seconds_count"] >= 1);
  CHECK(values["factum_storage_sync_duration_seconds_bucket{le=\"+Inf\"}"] ==
        values["factum_storage_sync_duration_seconds_count"]);
  CHECK(values["factum_storage_sync_duration_seconds_sum"] > 0);
  CHECK(values["factum_idempotency_replays_total"] == 1);
  CHECK(values["factum_active_entities"] == 1);
  CHECK(values["factum_activations_total"] == 1);
  CHECK(values.count("factum_alarm_lag_seconds_count") == 1);
  CHECK(values.count("factum_alarm_lag_seconds_bucket{le=\"+Inf\"}") == 1);
  CHECK(values.count("factum_hibernations_total") == 1);
  CHECK(values.count("factum_idempotency_conflicts_total") == 1);
  CHECK(values["factum_spare_files_taken_total"] + values["factum_spare_files_missed_total"] == 1);
  CHECK(values.count("factum_spare_files_ready") == 1);
  CHECK(values["factum_spare_file_errors_total"] == 0);
}

TEST_CASE("dead-letter and breaker routes reach the runtime's internal methods, their input is "
          "validated first") {
  gateway_fixture f;
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  // operator_test.cpp drives real dead letters and breakers; here: the routes answer, on an
  // entity that exists (reads of one that does not are 404 ENTITY_NOT_FOUND).
  check_problem(c.request("GET", "/v1/entities/ledger/d/breakers", auth), 404, "ENTITY_NOT_FOUND");
  REQUIRE(c.request("POST", "/v1/entities/ledger/d/append", json_headers(acme_key, "d-0"),
                    append_body("note").dump())
            .status == 200);
  for (auto path : {"/v1/entities/ledger/d/dead-letters", "/v1/entities/ledger/d/breakers",
                    "/v1/entities/ledger/d/dead-letters?status=pending&limit=5"}) {
    CAPTURE(path);
    auto r = c.request("GET", path, auth);
    CHECK(r.status == 200);
    CHECK(r.json() == json::array());
  }
  auto unknown = c.request("POST", "/v1/entities/ledger/d/dead-letters/dl_1/retry", auth);
  check_problem(unknown, 404, "DEAD_LETTER_NOT_FOUND");
  check_problem(c.request("GET", "/v1/entities/ledger/d/dead-letters?status=lost", auth), 400,
                "INVALID_QUERY");
  check_problem(c.request("GET", "/v1/entities/ledger/d/dead-letters?limit=0", auth), 400,
                "INVALID_QUERY");
  check_problem(c.request("GET", "/v1/entities/ledger/d/breakers?x=1", auth), 400, "INVALID_QUERY");
  check_problem(c.request("POST", "/v1/entities/ledger/d/dead-letters/..%2Fx/retry", auth), 400,
                "INVALID_ARGUMENT");
  check_problem(c.request("POST", "/v1/entities/ledger/d/breakers/a%2Fb/reset", auth), 400,
                "INVALID_ARGUMENT");
  check_problem(c.request("POST", "/v1/entities/ledger/d/breakers/t/reset",
                          {{"X-API-Key", acme_key}, {"Content-Type", "application/json"}}, "{"),
                400, "INVALID_JSON");
}

TEST_CASE("API key scopes: a key without 'operate' cannot move dead letters or breakers, a "
          "read-only key cannot call methods: 403 INSUFFICIENT_SCOPE, nothing written") {
  const std::string reader = "key-acme-reader";
  gateway_fixture f([&](runtime_config&, http_server_config& hc) {
    hc.tenants[0].keys.push_back({api_key_sha256(reader), scope_read});
  });
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/ledger/s1/append", json_headers(acme_key, "s-0"),
                    append_body("note").dump())
            .status == 200);
  // globex's key reads and writes its own entities, but does not operate them.
  REQUIRE(c.request("POST", "/v1/entities/ledger/s1/append", json_headers(globex_key, "g-0"),
                    append_body("note").dump())
            .status == 200);
  auto force = c.request("POST", "/v1/entities/ledger/s1/breakers/crm/force-open",
                         json_headers(globex_key, "g-1"));
  check_problem(force, 403, "INSUFFICIENT_SCOPE");
  CHECK(force.json()["detail"].get<std::string>().find("'operate'") != std::string::npos);
  auto retry = c.request("POST", "/v1/entities/ledger/s1/dead-letters/dl_x/retry",
                         json_headers(globex_key, "g-2"));
  check_problem(retry, 403, "INSUFFICIENT_SCOPE");
  CHECK(f.facts("globex", "ledger", "s1").size() == 1); // nothing appended by the refusals
  // A read-only key reads, and is refused a call.
  CHECK(c.request("GET", "/v1/entities/ledger/s1/facts", {{"X-API-Key", reader}}).status == 200);
  auto write = c.request("POST", "/v1/entities/ledger/s1/append", json_headers(reader, "r-1"),
                         append_body("note").dump());
  check_problem(write, 403, "INSUFFICIENT_SCOPE");
  CHECK(f.facts("acme", "ledger", "s1").size() == 1);
  // acme's key has every scope: the operator route is reached.
  CHECK(c.request("POST", "/v1/entities/ledger/s1/breakers/crm/force-open",
                  json_headers(acme_key, "a-1"))
          .status == 200);
}

TEST_CASE("a control character in a query filter (?trace_id=%00) answers 400 INVALID_QUERY") {
  gateway_fixture f;
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/ledger/q/append", json_headers(acme_key, "q-0"),
                    append_body("note").dump())
            .status == 200);
  for (auto q : {"trace_id=%00", "type=a%00b", "tool_id=%1F", "idempotency_key=%7F"}) {
    CAPTURE(q);
    auto r =
      c.request("GET", std::string("/v1/entities/ledger/q/facts?") + q, {{"X-API-Key", acme_key}});
    check_problem(r, 400, "INVALID_QUERY");
  }
  // Nothing reached the entity (a failed call there would have appended an error fact).
  CHECK(f.facts("acme", "ledger", "q").size() == 1);
}

TEST_CASE("a call refused for a while (a quarantine's 503, an overloaded entity's 429) carries "
          "Retry-After") {
  std::atomic<bool> fail_sync{false};
  gateway_fixture f([&](runtime_config& rc, http_server_config&) {
    rc.storage_fault = [&](uint64_t, std::string_view what) {
      return fail_sync.load() && what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    };
    rc.log = [](std::string_view) {};
  });
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/ledger/r/append", json_headers(acme_key, "r-0"),
                    append_body("note").dump())
            .status == 200);
  fail_sync = true;
  auto r = c.request("POST", "/v1/entities/ledger/r/append", json_headers(acme_key, "r-1"),
                     append_body("note").dump());
  fail_sync = false;
  check_problem(r, 503, "STORAGE_UNAVAILABLE");
  CHECK(r.header("retry-after") == "1");
  auto again = c.request("POST", "/v1/entities/ledger/r/append", json_headers(acme_key, "r-1"),
                         append_body("note").dump());
  CHECK(again.status == 200);
  CHECK(again.header("retry-after").empty());
}

TEST_CASE("GET facts of large facts stops at the server's byte cap and a Link header names the "
          "next page: following it reads every fact once") {
  gateway_fixture f([](runtime_config& rc, http_server_config&) { rc.max_facts_bytes = 16'000; });
  http_client c(f.port());
  std::string pad(4000, 'p');
  for (int i = 0; i < 12; ++i)
    REQUIRE(c.request("POST", "/v1/entities/ledger/big/append",
                      json_headers(acme_key, "b-" + std::to_string(i)),
                      append_body("blob", {{"i", i}, {"pad", pad}}).dump())
              .status == 200);
  std::string target = "/v1/entities/ledger/big/facts?type=blob&limit=100";
  std::vector<int64_t> seqs;
  int pages = 0;
  while (!target.empty() && pages < 20) {
    auto r = c.request("GET", target, {{"X-API-Key", acme_key}});
    REQUIRE(r.status == 200);
    ++pages;
    for (auto& x : r.json())
      seqs.push_back(x["seq"].get<int64_t>());
    auto link = r.header("link");
    target.clear();
    if (!link.empty()) {
      CHECK(link.find("rel=\"next\"") != std::string::npos);
      CHECK(link.find("type=blob") != std::string::npos); // the filters go on
      target = link.substr(1, link.find('>') - 1);
    }
  }
  CHECK(pages >= 3);
  REQUIRE(seqs.size() == 12);
  for (size_t i = 0; i < seqs.size(); ++i)
    CHECK(seqs[i] == static_cast<int64_t>(i + 1));
}
