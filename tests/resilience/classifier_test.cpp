// classifier_test.cpp: the failure classifier: the default HTTP table, transport errors,
// tool-reported errors with keyword heuristics over the message as a fallback only, per-tool
// overrides and their JSON form. Single-threaded.
#include <doctest/doctest.h>

#include "factum/resilience/classifier.hpp"

using namespace factum;
using namespace factum::resilience;

namespace {

classification http(int status, bool idempotent = true) {
  return classifier{}.classify_http("", status, idempotent);
}

classification tool_error(std::string_view code, std::string_view message, int status = 0,
                          error_category reported = error_category::external) {
  return classifier{}.classify_tool_error("t", code, message, status, reported, true);
}

} // namespace

TEST_CASE("classifier: transient HTTP statuses are retried with stable codes") {
  auto c = http(429);
  CHECK(c == classification{error_category::transient, true, "RATE_LIMITED",
                            failure_reason::rate_limit});
  CHECK(http(503) ==
        classification{error_category::transient, true, "HTTP_503", failure_reason::server_error});
  CHECK(http(504) ==
        classification{error_category::transient, true, "HTTP_504", failure_reason::timeout});
  CHECK(http(408) ==
        classification{error_category::transient, true, "HTTP_408", failure_reason::timeout});
  // Transient failures are retried whether or not the call is idempotent.
  CHECK(http(503, false).retryable);
  CHECK(http(429, false).retryable);
}

TEST_CASE("classifier: server errors are retried only when the call is idempotent") {
  for (int s : {500, 502}) {
    CAPTURE(s);
    auto idem = http(s, true);
    CHECK(idem.category == error_category::server);
    CHECK(idem.retryable);
    CHECK(idem.code == "HTTP_" + std::to_string(s));
    CHECK(idem.reason == failure_reason::server_error);
    CHECK_FALSE(http(s, false).retryable);
  }
  CHECK(http(507).category == error_category::server);
}

TEST_CASE("classifier: client, integrity, authorization and budget statuses are terminal") {
  struct row {
    int status;
    error_category category;
    failure_reason reason;
  };
  for (auto r : {row{400, error_category::client, failure_reason::invalid_payload},
                 row{404, error_category::client, failure_reason::invalid_payload},
                 row{422, error_category::client, failure_reason::invalid_payload},
                 row{409, error_category::data_integrity, failure_reason::invalid_payload},
                 row{401, error_category::authorization, failure_reason::unauthorized},
                 row{403, error_category::authorization, failure_reason::unauthorized},
                 row{402, error_category::budget, failure_reason::budget}}) {
    CAPTURE(r.status);
    auto c = http(r.status);
    CHECK(c.category == r.category);
    CHECK(c.reason == r.reason);
    CHECK_FALSE(c.retryable);
    CHECK(c.code == "HTTP_" + std::to_string(r.status));
    CHECK_FALSE(c.counts_for_breaker());
  }
  // A status that is not an error at all is not retried blindly.
  CHECK(http(302).category == error_category::external);
  CHECK_FALSE(http(302).retryable);
}

TEST_CASE("classifier: only transient, server and external failures count for the breaker") {
  CHECK(trips_breaker(error_category::transient));
  CHECK(trips_breaker(error_category::server));
  CHECK(trips_breaker(error_category::external));
  CHECK_FALSE(trips_breaker(error_category::client));
  CHECK_FALSE(trips_breaker(error_category::data_integrity));
  CHECK_FALSE(trips_breaker(error_category::authorization));
  CHECK_FALSE(trips_breaker(error_category::budget));
  CHECK(http(503).counts_for_breaker());
  CHECK(http(500, false).counts_for_breaker());
}

TEST_CASE("classifier: transport errors") {
  classifier c;
  auto t = c.classify_transport(transport_error::timeout);
  CHECK(t == classification{error_category::transient, true, "TIMEOUT", failure_reason::timeout});
  CHECK(c.classify_transport(transport_error::connection_reset) ==
        classification{error_category::transient, true, "CONNECTION_RESET",
                       failure_reason::server_error});
  CHECK(c.classify_transport(transport_error::connection_refused).code == "CONNECTION_REFUSED");
  CHECK(c.classify_transport(transport_error::connection_refused).retryable);
  // DNS and TLS failures fail fast but still count against the tool.
  auto dns = c.classify_transport(transport_error::dns_failure);
  CHECK(dns.code == "DNS_FAILURE");
  CHECK_FALSE(dns.retryable);
  CHECK(dns.counts_for_breaker());
  CHECK_FALSE(c.classify_transport(transport_error::tls).retryable);
  CHECK(c.classify_transport(transport_error::other) ==
        classification{error_category::external, true, "TRANSPORT_ERROR", failure_reason::unknown});
  CHECK(parse_transport_error("dns_failure") == transport_error::dns_failure);
  CHECK_FALSE(parse_transport_error("DNS"));
}

TEST_CASE("classifier: tool errors without a status use well-known codes, then heuristics") {
  CHECK(tool_error("ECONNRESET", "socket hang up").code == "CONNECTION_RESET");
  CHECK(tool_error("etimedout", "").code == "TIMEOUT");
  CHECK(tool_error("RATE_LIMITED", "").reason == failure_reason::rate_limit);
  // The names of transport_error are understood as codes too.
  for (auto e :
       {transport_error::timeout, transport_error::connection_reset,
        transport_error::connection_refused, transport_error::dns_failure, transport_error::tls}) {
    CAPTURE(to_string(e));
    CHECK(tool_error(to_string(e), "") == classifier{}.classify_transport(e));
  }

  auto timeout = tool_error("E_UPSTREAM", "upstream request timed out after 30s");
  CHECK(timeout ==
        classification{error_category::transient, true, "TIMEOUT", failure_reason::timeout});
  CHECK(tool_error("", "Rate limit exceeded, slow down").code == "RATE_LIMITED");
  CHECK(tool_error("", "Too Many Requests").code == "RATE_LIMITED");
  CHECK(tool_error("", "got HTTP 429 from vendor").code == "RATE_LIMITED");
  CHECK(tool_error("", "read ECONNRESET").code == "CONNECTION_RESET");
  CHECK(tool_error("", "connection refused by peer").code == "CONNECTION_REFUSED");
  CHECK(tool_error("", "service temporarily unavailable").code == "UNAVAILABLE");
  CHECK(tool_error("", "network unreachable").code == "NETWORK_ERROR");
  auto disk = tool_error("", "disk full");
  CHECK(disk.code == "RESOURCE_EXHAUSTED");
  CHECK_FALSE(disk.retryable);

  // A number inside a longer number is not a status.
  auto order = tool_error("E_ORDER", "order 14290 rejected");
  CHECK(order ==
        classification{error_category::external, true, "E_ORDER", failure_reason::unknown});
  // Nothing recognisable: the tool's own failure, retried with backoff.
  CHECK(tool_error("", "something odd") ==
        classification{error_category::external, true, "TOOL_ERROR", failure_reason::unknown});
}

TEST_CASE("classifier: heuristics never override an HTTP status") {
  auto c = tool_error("", "timeout while validating", 400);
  CHECK(c.category == error_category::client);
  CHECK(c.code == "HTTP_400");
  CHECK_FALSE(c.retryable);
  CHECK(tool_error("", "rate limit", 503).code == "HTTP_503");
}

TEST_CASE("classifier: a tool's explicit category wins over heuristics") {
  auto c = tool_error("INVALID_NUMBER", "timeout field is invalid", 0, error_category::client);
  CHECK(c.category == error_category::client);
  CHECK(c.code == "INVALID_NUMBER");
  CHECK_FALSE(c.retryable);
  CHECK(c.reason == failure_reason::invalid_payload);
}

TEST_CASE("classifier: classify(tool_reply) reads status, code, message and category") {
  classifier c;
  tool_reply r;
  r.http_status = 502;
  r.error_message = "bad gateway";
  CHECK(c.classify("crm", r, false).category == error_category::server);
  CHECK_FALSE(c.classify("crm", r, false).retryable);
  r.http_status = 0;
  r.error_message = "connection reset by peer";
  CHECK(c.classify("crm", r, false).code == "CONNECTION_RESET");
}

TEST_CASE("classifier: per-tool overrides of statuses and codes") {
  classifier c;
  c.set_status_override(
    "crm", 404,
    {error_category::transient, "CRM_NOT_SYNCED", failure_reason::timeout, std::nullopt});
  c.set_code_override("crm", "QUOTA", {error_category::budget, "", std::nullopt, std::nullopt});
  c.set_status_override("billing", 500, {error_category::server, "", std::nullopt, false});

  auto crm404 = c.classify_http("crm", 404, true);
  CHECK(crm404 ==
        classification{error_category::transient, true, "CRM_NOT_SYNCED", failure_reason::timeout});
  // Other tools keep the default.
  CHECK(c.classify_http("mail", 404, true).category == error_category::client);
  // A code override wins, even over a status.
  auto quota =
    c.classify_tool_error("crm", "QUOTA", "timeout", 503, error_category::external, true);
  CHECK(quota == classification{error_category::budget, false, "QUOTA", failure_reason::budget});
  // An explicit retryable wins over the category's rule.
  CHECK_FALSE(c.classify_http("billing", 500, true).retryable);
  CHECK(c.classify_http("billing", 500, true).code == "HTTP_500");

  c.clear_overrides("crm");
  CHECK(c.classify_http("crm", 404, true).category == error_category::client);
}

TEST_CASE("classifier: overrides survive a JSON round trip and bad JSON is refused") {
  classifier c;
  c.set_status_override(
    "crm", 404, {error_category::transient, "CRM_NOT_SYNCED", failure_reason::timeout, true});
  c.set_code_override("crm", "QUOTA", {error_category::budget, "", std::nullopt, std::nullopt});
  auto text = c.to_json().dump();
  auto back = classifier::from_json(nlohmann::json::parse(text));
  REQUIRE(back.is_ok());
  CHECK(back->to_json() == c.to_json());
  CHECK(back->classify_http("crm", 404, false) == c.classify_http("crm", 404, false));
  CHECK(back->classify_tool_error("crm", "QUOTA", "", 0, error_category::external, true).category ==
        error_category::budget);

  auto bad = [](const char* text) {
    return classifier::from_json(nlohmann::json::parse(text)).is_ok();
  };
  CHECK(bad(R"({"tools":{}})"));
  CHECK_FALSE(bad(R"({"tools":{"crm":{"statuses":{"404":{"category":"weird"}}}}})"));
  CHECK_FALSE(bad(R"({"tools":{"crm":{"statuses":{"abc":{"category":"client"}}}}})"));
  CHECK_FALSE(bad(R"({"tools":{"crm":{"statuses":{"700":{"category":"client"}}}}})"));
  CHECK_FALSE(bad(R"({"tools":{"crm":{"codes":{"X":{"category":"client","reason":"x"}}}}})"));
  CHECK_FALSE(bad(R"({"tools":{"crm":{"codes":{"X":{"category":"client","retryable":1}}}}})"));
  CHECK_FALSE(bad(R"([1,2])"));
}

TEST_CASE("classifier: failure reason names and aliases") {
  for (auto r : {failure_reason::rate_limit, failure_reason::server_error, failure_reason::timeout,
                 failure_reason::invalid_payload, failure_reason::unauthorized,
                 failure_reason::budget, failure_reason::unknown})
    CHECK(parse_failure_reason(to_string(r)) == r);
  CHECK(parse_failure_reason("validation") == failure_reason::invalid_payload);
  CHECK(parse_failure_reason("authentication") == failure_reason::unauthorized);
  CHECK_FALSE(parse_failure_reason("nope"));
  CHECK(default_reason(error_category::data_integrity) == failure_reason::invalid_payload);
  auto open = classifier::circuit_open();
  CHECK(open.code == "CIRCUIT_OPEN");
  CHECK(open.retryable);
  auto j = http(429).to_json();
  CHECK(j == nlohmann::json{{"category", "transient"},
                            {"retryable", true},
                            {"code", "RATE_LIMITED"},
                            {"reason", "rate_limit"}});
}
