// pages_test.cpp: the gateway's static pages (http_server_config::pages): GET and HEAD without an
// API key, their security headers, 405 for other methods, unknown paths still 404, the API's
// routes never shadowed; GET / (a redirect to the home page, or JSON naming the API); and the
// chat example's page as `factum serve` registers it. A real in-process server and client; runs
// on the test thread.
#include <doctest/doctest.h>

#include <string>

#include "factum/examples/examples.hpp"
#include "factum/tools/serve.hpp"
#include "http/fixture.hpp"
#include "support/serve_types.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

const std::string page_body = "<!DOCTYPE html><title>t</title><p>a page</p>";

/// A gateway with one page at /examples/chat.
gateway_fixture::tweak with_page(std::string body = page_body) {
  return [body = std::move(body)](runtime_config&, http_server_config& hc) {
    hc.pages["/examples/chat"].body = body;
  };
}

void check_not_found(const http_reply& r) {
  CHECK_MESSAGE(r.status == 404, r.status << " " << r.body);
  CHECK(r.header("content-type") == "application/problem+json");
  CHECK(r.code() == "ROUTE_NOT_FOUND");
}

/// The page's headers, whatever the method that asked.
void check_page_headers(const http_reply& r) {
  CHECK(r.header("content-type") == "text/html; charset=utf-8");
  CHECK(r.header("content-security-policy") == http_page{}.content_security_policy);
  CHECK(r.header("x-content-type-options") == "nosniff");
  CHECK(r.header("referrer-policy") == "no-referrer");
  CHECK(r.header("x-trace-id").size() == 32);
}

} // namespace

TEST_CASE("pages: GET answers 200 text/html with CSP and nosniff, without an API key") {
  gateway_fixture f(with_page());
  http_client c(f.port());
  auto r = c.request("GET", "/examples/chat");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  check_page_headers(r);
  CHECK(r.body == page_body);
  // The default policy allows nothing but the page's own origin and its inline script and style.
  auto csp = r.header("content-security-policy");
  CHECK(csp.find("default-src 'none'") != std::string::npos);
  CHECK(csp.find("connect-src 'self'") != std::string::npos);
  CHECK(csp.find("script-src 'unsafe-inline'") != std::string::npos);
  CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
  CHECK(csp.find("http") == std::string::npos); // no other origin
  // A query is the page's own business (its script reads it); a key, even a wrong one, is
  // neither needed nor looked at.
  auto q = c.request("GET", "/examples/chat?room=lobby&name=ann", {{"X-API-Key", "wrong"}});
  CHECK(q.status == 200);
  CHECK(q.body == page_body);
}

TEST_CASE("pages: HEAD answers the headers without the body, and the connection goes on") {
  gateway_fixture f(with_page());
  http_client c(f.port());
  auto h = c.request("HEAD", "/examples/chat");
  REQUIRE_MESSAGE(h.status == 200, h.body);
  check_page_headers(h);
  CHECK(h.header("content-length") == std::to_string(page_body.size()));
  CHECK(h.body.empty());
  // Nothing of a body was sent after the headers: the next response on the connection parses.
  auto g = c.request("GET", "/healthz");
  CHECK(g.status == 200);
  CHECK(g.json() == json{{"status", "ok"}});
}

TEST_CASE("pages: other methods are 405 with Allow: GET, HEAD") {
  gateway_fixture f(with_page());
  http_client c(f.port());
  for (const char* verb : {"POST", "PUT", "DELETE"}) {
    auto r = c.request(verb, "/examples/chat", {{"Content-Type", "text/plain"}}, "x");
    CHECK_MESSAGE(r.status == 405, verb << " " << r.body);
    CHECK(r.code() == "METHOD_NOT_ALLOWED");
    CHECK(r.header("allow") == "GET, HEAD");
    CHECK(r.header("content-security-policy").empty());
  }
}

TEST_CASE("pages: other paths are still 404 ROUTE_NOT_FOUND, and no page means 404") {
  {
    gateway_fixture f(with_page());
    http_client c(f.port());
    for (const char* path : {"/examples/chat/", "/examples", "/examples/chat2", "/favicon.ico",
                             "/examples/%63hat", "/Examples/chat"})
      check_not_found(c.request("GET", path));
    // HEAD elsewhere: 405 on a route of GET only, 404 where no route is; no body either way
    // (the next response on the connection parses).
    auto h = c.request("HEAD", "/healthz");
    CHECK(h.status == 405);
    CHECK(h.header("allow") == "GET");
    CHECK(h.body.empty());
    auto n = c.request("HEAD", "/examples");
    CHECK(n.status == 404);
    CHECK(n.body.empty());
    CHECK(n.header("content-type") == "application/problem+json");
    // Counted under their own label.
    auto m = c.request("GET", "/metrics").body;
    CHECK(m.find("factum_http_requests_total{route=\"unmatched\",status=\"404\"} 7") !=
          std::string::npos);
  }
  gateway_fixture f;
  http_client c(f.port());
  check_not_found(c.request("GET", "/examples/chat"));
}

TEST_CASE("pages: a page never shadows a route of the API") {
  gateway_fixture f([](runtime_config&, http_server_config& hc) {
    hc.pages["/healthz"].body = "shadow";
    hc.pages["/v1/entities/ledger/x/facts"].body = "shadow";
    hc.pages["/examples/chat"].body = page_body;
  });
  http_client c(f.port());
  auto h = c.request("GET", "/healthz");
  CHECK(h.status == 200);
  CHECK(h.json() == json{{"status", "ok"}});
  CHECK(h.header("content-security-policy").empty());
  // The facts route, with its API key check.
  CHECK(c.request("GET", "/v1/entities/ledger/x/facts").code() == "UNAUTHORIZED");
  auto m = c.request("GET", "/metrics").body;
  CHECK(m.find("factum_http_requests_total{route=\"page\"") == std::string::npos);
  CHECK(c.request("GET", "/examples/chat").status == 200);
  m = c.request("GET", "/metrics").body;
  CHECK(m.find("factum_http_requests_total{route=\"page\",status=\"200\"} 1") != std::string::npos);
}

TEST_CASE("pages: a WebSocket upgrade at a page's path is 404, not the page") {
  gateway_fixture f(with_page());
  http_client c(f.port());
  auto r = c.raw("GET /examples/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                 "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                 std::chrono::seconds(10));
  check_not_found(r);
}

TEST_CASE("pages: GET / and HEAD / redirect to the home page, without an API key") {
  gateway_fixture f([](runtime_config&, http_server_config& hc) {
    hc.pages["/console"].body = page_body;
    hc.home = "/console";
  });
  http_client c(f.port());
  for (const char* verb : {"GET", "HEAD"}) {
    for (const char* target : {"/", "/?from=bookmark"}) {
      CAPTURE(verb);
      CAPTURE(target);
      auto r = c.request(verb, target);
      CHECK_MESSAGE(r.status == 302, r.status << " " << r.body);
      CHECK(r.header("location") == "/console");
      CHECK(r.header("cache-control") == "no-cache");
    }
  }
  // Where it leads: the page.
  auto page = c.request("GET", "/console");
  CHECK(page.status == 200);
  CHECK(page.body == page_body);
  // Other methods: 405, as at a page.
  auto post = c.request("POST", "/", {{"Content-Type", "text/plain"}}, "x");
  CHECK(post.status == 405);
  CHECK(post.code() == "METHOD_NOT_ALLOWED");
  CHECK(post.header("allow") == "GET, HEAD");
  auto m = c.request("GET", "/metrics").body;
  CHECK(m.find("factum_http_requests_total{route=\"home\",status=\"302\"} 4") != std::string::npos);
}

TEST_CASE("pages: without a home page, GET / answers JSON that says where the API is") {
  gateway_fixture f(with_page());
  http_client c(f.port());
  auto r = c.request("GET", "/");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.header("location").empty());
  auto j = r.json();
  REQUIRE(j.is_object());
  CHECK(j["api"] == "/v1/entities/{type}/{id}/{method}");
  CHECK(j["health"] == "/healthz");
  CHECK(j["metrics"] == "/metrics");
  CHECK(j["docs"] == "docs/http-api.md");
  // The health route it names answers.
  CHECK(c.request("GET", j["health"].get<std::string>()).status == 200);
  auto h = c.request("HEAD", "/");
  CHECK(h.status == 200);
  CHECK(h.body.empty());
  CHECK(h.header("content-length") == std::to_string(r.body.size()));
}

TEST_CASE("pages: a page offered as the home page is where GET / leads, when it is served") {
  std::vector<tools::serve_page> offered{{"/console", {}, ""}, {"/examples/chat", {}, "room"}};
  offered[0].home = true;
  auto doc = json{{"data_dir", "/tmp/x"},
                  {"types", {"counter"}},
                  {"tenants", {{"acme", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}}}}};
  auto cfg = tools::parse_serve_config(doc, serve_types());
  REQUIRE_MESSAGE(cfg.is_ok(), cfg.error().to_string());
  CHECK(cfg->http.home.empty());
  tools::add_pages(*cfg, offered);
  CHECK(cfg->http.home == "/console");
  // A home page whose type is not hosted is not served, and GET / does not lead to it.
  offered[0].home = false;
  offered[1].home = true;
  auto other = tools::parse_serve_config(doc, serve_types());
  REQUIRE(other.is_ok());
  tools::add_pages(*other, offered);
  CHECK(other->http.home.empty());
}

TEST_CASE("pages: `factum serve` offers the chat page at /examples/chat when it hosts room") {
  std::vector<tools::serve_page> offered{{"/examples/chat", {}, "room"}, {"/always", {}, ""}};
  offered[0].page.body = std::string(examples::chat_page());
  auto doc = json{{"data_dir", "/tmp/x"},
                  {"tenants", {{"acme", {{"api_keys", {"sha256:" + api_key_sha256("k")}}}}}}};
  SUBCASE("hosted") {
    doc["types"] = {"counter", "room"};
    auto cfg = tools::parse_serve_config(doc, serve_types());
    REQUIRE_MESSAGE(cfg.is_ok(), cfg.error().to_string());
    tools::add_pages(*cfg, offered);
    CHECK(cfg->http.pages.size() == 2);
    REQUIRE(cfg->http.pages.count("/examples/chat") == 1);
    // The page as compiled in, served as it is.
    gateway_fixture f([&](runtime_config&, http_server_config& hc) { hc.pages = cfg->http.pages; });
    http_client c(f.port());
    auto r = c.request("GET", "/examples/chat");
    REQUIRE(r.status == 200);
    check_page_headers(r);
    CHECK(r.body == examples::chat_page());
    CHECK(r.body.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(r.body.find("factum-key.") != std::string::npos);
    CHECK(r.body.find("/v1/entities/room/") != std::string::npos);
    // Nothing from elsewhere: no URL of another origin in the page.
    CHECK(r.body.find("http://") == std::string::npos);
    CHECK(r.body.find("https://") == std::string::npos);
  }
  SUBCASE("not hosted") {
    doc["types"] = {"counter"};
    auto cfg = tools::parse_serve_config(doc, serve_types());
    REQUIRE_MESSAGE(cfg.is_ok(), cfg.error().to_string());
    tools::add_pages(*cfg, offered);
    CHECK(cfg->http.pages.size() == 1);
    CHECK(cfg->http.pages.count("/always") == 1);
  }
}
