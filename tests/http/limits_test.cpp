// limits_test.cpp: the transport's limits and HTTP/1.1 behaviour: 413 by Content-Length and by
// a chunked body, 408 for a request that does not arrive in time, 431, 400 for malformed HTTP,
// 503 at the connection limit, Expect: 100-continue, keep-alive and many connections. Runs on
// the test thread plus client threads.
#include <doctest/doctest.h>

#include <atomic>
#include <future>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string request_head(const std::string& verb, const std::string& target,
                         const std::string& extra) {
  return verb + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: " + acme_key + "\r\n" +
         extra + "\r\n";
}

} // namespace

TEST_CASE("413 BODY_TOO_LARGE: by Content-Length before the body is read, and by a chunked body "
          "that grows past the limit") {
  gateway_fixture f([](runtime_config&, http_server_config& h) { h.limits.max_body_bytes = 1024; });
  {
    http_client c(f.port());
    std::string big = json{{"type", "x"}, {"data", {{"pad", std::string(2000, 'a')}}}}.dump();
    auto r = c.request("POST", "/v1/entities/ledger/big/append", json_headers(acme_key, "k"), big);
    CHECK(r.status == 413);
    CHECK(r.code() == "BODY_TOO_LARGE");
    CHECK(r.header("content-type") == "application/problem+json");
    CHECK(r.header("connection") == "close");
  }
  {
    // 4 MiB announced and sent: the refusal arrives, the connection is drained and closed.
    http_client c(f.port());
    std::string huge(4 << 20, ' ');
    auto r = c.request("POST", "/v1/entities/ledger/big/append", json_headers(acme_key, "k"), huge);
    CHECK(r.status == 413);
  }
  {
    http_client c(f.port());
    std::string chunk(800, ' ');
    char size[16];
    std::snprintf(size, sizeof size, "%zx", chunk.size());
    std::string req = request_head("POST", "/v1/entities/ledger/big/append",
                                   "Content-Type: application/json\r\nIdempotency-Key: k\r\n"
                                   "Transfer-Encoding: chunked\r\n") +
                      size + "\r\n" + chunk + "\r\n" + size + "\r\n" + chunk + "\r\n0\r\n\r\n";
    auto r = c.raw(req, 10s);
    CHECK(r.status == 413);
    CHECK(r.code() == "BODY_TOO_LARGE");
  }
  {
    // Exactly at the limit is fine.
    http_client c(f.port());
    std::string body = json{{"type", "x"}}.dump();
    body += std::string(1024 - body.size(), ' ');
    auto r =
      c.request("POST", "/v1/entities/ledger/big/append", json_headers(acme_key, "k2"), body);
    CHECK_MESSAGE(r.status == 200, r.body);
  }
  CHECK(f.facts("acme", "ledger", "big").size() == 1);
}

TEST_CASE("408 REQUEST_TIMEOUT for a request that does not arrive in time, an idle keep-alive "
          "connection is closed silently") {
  gateway_fixture f([](runtime_config&, http_server_config& h) {
    h.limits.request_timeout = std::chrono::milliseconds(300);
  });
  {
    http_client c(f.port());
    // Headers never finished.
    auto r = c.raw("POST /v1/entities/ledger/slow/append HTTP/1.1\r\nHost: x\r\n", 10s);
    CHECK(r.status == 408);
    CHECK(r.code() == "REQUEST_TIMEOUT");
    CHECK(r.header("connection") == "close");
  }
  {
    http_client c(f.port());
    // Headers complete, body short of its Content-Length.
    auto r = c.raw(request_head("POST", "/v1/entities/ledger/slow/append",
                                "Content-Type: application/json\r\nIdempotency-Key: k\r\n"
                                "Content-Length: 100\r\n") +
                     "{\"type\":",
                   10s);
    CHECK(r.status == 408);
  }
  {
    http_client c(f.port());
    REQUIRE(c.request("GET", "/healthz").status == 200);
    CHECK(c.closed_by_server(10s));
  }
  CHECK(f.entity_files() == 0);
}

TEST_CASE("431 for oversized headers and 400 for malformed HTTP, each closing the connection") {
  gateway_fixture f(
    [](runtime_config&, http_server_config& h) { h.limits.max_header_bytes = 2048; });
  {
    http_client c(f.port());
    auto r = c.request("GET", "/healthz", {{"X-Padding", std::string(4000, 'p')}});
    CHECK(r.status == 431);
    CHECK(r.code() == "HEADERS_TOO_LARGE");
  }
  {
    http_client c(f.port());
    auto r = c.raw("GARBAGE\r\n\r\n", 10s);
    CHECK(r.status == 400);
    CHECK(r.code() == "BAD_REQUEST");
  }
  {
    http_client c(f.port());
    auto r = c.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 10s);
    CHECK(r.status == 400);
  }
  http_client c(f.port());
  CHECK(c.request("GET", "/healthz").status == 200); // the server is fine
}

TEST_CASE("503 TOO_MANY_CONNECTIONS past max_connections") {
  gateway_fixture f([](runtime_config&, http_server_config& h) { h.limits.max_connections = 2; });
  http_client a(f.port()), b(f.port()), c(f.port());
  REQUIRE(a.request("GET", "/healthz").status == 200);
  REQUIRE(b.request("GET", "/healthz").status == 200);
  auto r = c.request("GET", "/healthz");
  CHECK(r.status == 503);
  CHECK(r.code() == "TOO_MANY_CONNECTIONS");
  a.close();
  // Once a connection is gone, a new one is served (the server sees the close asynchronously).
  CHECK(eventually([&] {
    http_client d(f.port());
    return d.request("GET", "/healthz").status == 200;
  }));
}

TEST_CASE("429 CONNECTION_CAP_REACHED past max_connections_per_client, while the server has room") {
  gateway_fixture f([](runtime_config&, http_server_config& h) {
    h.limits.max_connections = 100;
    h.limits.max_connections_per_client = 2;
  });
  http_client a(f.port()), b(f.port()), c(f.port());
  REQUIRE(a.request("GET", "/healthz").status == 200);
  REQUIRE(b.request("GET", "/healthz").status == 200);
  auto r = c.request("GET", "/healthz");
  CHECK(r.status == 429);
  CHECK(r.code() == "CONNECTION_CAP_REACHED");
  CHECK(r.json()["detail"].get<std::string>().find("client address") != std::string::npos);
  a.close();
  CHECK(eventually([&] {
    http_client d(f.port());
    return d.request("GET", "/healthz").status == 200;
  }));
}

TEST_CASE("Expect: 100-continue is answered, then the body is read") {
  gateway_fixture f;
  http_client c(f.port());
  std::string body = json{{"type", "x"}}.dump();
  auto r = c.raw(request_head("POST", "/v1/entities/ledger/e/append",
                              "Content-Type: application/json\r\nIdempotency-Key: k\r\n"
                              "Expect: 100-continue\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n"),
                 10s);
  CHECK(r.status == 100);
  auto done = c.raw(body, 10s);
  CHECK_MESSAGE(done.status == 200, done.body);
  CHECK(f.facts("acme", "ledger", "e").size() == 1);
}

TEST_CASE("keep-alive and concurrency: 8 connections x 100 requests, every reply in order and "
          "every fact present") {
  gateway_fixture f([](runtime_config&, http_server_config& h) { h.io_threads = 2; });
  constexpr int conns = 8, per = 100;
  std::vector<std::future<int>> workers;
  for (int w = 0; w < conns; ++w)
    workers.push_back(std::async(std::launch::async, [&, w] {
      http_client c(f.port());
      int ok = 0;
      for (int i = 0; i < per; ++i) {
        auto key = "w" + std::to_string(w) + "-" + std::to_string(i);
        auto r = c.request("POST", "/v1/entities/ledger/ka" + std::to_string(w % 2) + "/append",
                           json_headers(acme_key, key),
                           json{{"type", "t"}, {"data", {{"key", key}}}}.dump());
        ok += r.status == 200;
      }
      return ok;
    }));
  int ok = 0;
  for (auto& w : workers) {
    REQUIRE(w.wait_for(60s) == std::future_status::ready);
    ok += w.get();
  }
  CHECK(ok == conns * per);
  CHECK(f.facts("acme", "ledger", "ka0").size() + f.facts("acme", "ledger", "ka1").size() ==
        static_cast<size_t>(conns * per));
}
