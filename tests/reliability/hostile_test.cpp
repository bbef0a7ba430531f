// hostile_test.cpp: hostile inputs against a real gateway (in-process server on a loopback port,
// real sockets): path traversal, non-ASCII and invalid UTF-8, deep JSON, a 100 MB body, huge
// and duplicate headers, wrong content types, foreign or missing API keys, SQL in filters,
// out-of-range numbers, a client dripping bytes, half-closed and thousands of idle connections.
// Each case checks its documented status and code (docs/http-api.md), that nothing was written
// (facts and files counted on disk), and that /healthz still answers. Test thread plus helper
// threads for the streaming cases.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "http/fixture.hpp"
#include "reliability/support.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace hostile_test {

namespace {

const std::string append_body = R"({"type":"invocation","data":{"n":1}})";

/// A second key of globex, with the `operate` scope (given in the API-key test's fixture).
constexpr const char* globex_operator_key = "key-globex-operator";

/// A request head with the acme key; `extra` holds more header lines, each ending in CRLF.
std::string head(const std::string& verb, const std::string& target, const std::string& extra,
                 bool with_key = true) {
  return verb + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
         (with_key ? std::string("X-API-Key: ") + acme_key + "\r\n" : std::string()) + extra +
         "\r\n";
}

std::string post_json(const std::string& target, const std::string& body,
                      const std::string& extra = "Idempotency-Key: k1\r\n") {
  return head("POST", target,
              "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n" + extra) +
         body;
}

/// Sends raw bytes on a fresh connection and reads one response.
struct answer {
  int status = 0;
  std::string code;
  std::string content_type;
  std::string body;
};

answer exchange(uint16_t port, const std::string& bytes, std::chrono::milliseconds t = 10s) {
  raw_socket s(port);
  REQUIRE(s.ok());
  s.send(bytes);
  answer a;
  a.status = s.read_response(t);
  a.body = s.body();
  a.content_type = s.header("content-type");
  auto j = json::parse(a.body, nullptr, false);
  if (j.is_object() && j.contains("code") && j["code"].is_string())
    a.code = j["code"].get<std::string>();
  return a;
}

bool healthy(uint16_t port) {
  http_client c(port, 5s);
  auto r = c.request("GET", "/healthz");
  return r.status == 200 && r.body == R"({"status":"ok"})";
}

/// The documented answer of one hostile request, and the checks every case shares.
void expect(gateway_fixture& f, const std::string& what, const std::string& bytes, int status,
            const std::string& code) {
  auto before = count_on_disk(f.data_dir());
  auto a = exchange(f.port(), bytes);
  INFO(what);
  INFO("body: " << a.body);
  CHECK(a.status == status);
  if (!code.empty()) {
    CHECK(a.code == code);
    CHECK(a.content_type == "application/problem+json");
  }
  CHECK(count_on_disk(f.data_dir()) == before);
  CHECK(healthy(f.port()));
}

/// Resident set of this process (the in-process server included), in KiB.
long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

/// One acme fact on disk so that "unchanged" means something.
void seed_fact(gateway_fixture& f) {
  http_client c(f.port());
  auto r = c.request("POST", "/v1/entities/ledger/seed/append", json_headers(acme_key, "seed"),
                     append_body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
}

} // namespace

TEST_CASE("hostile: path traversal and bad bytes in type or id never reach a path") {
  gateway_fixture f;
  seed_fact(f);
  auto files_before = files_below(f.data_dir());
  auto parent_before = files_below(f.data_dir().parent_path() / "etc");
  std::string long_id(129, 'a');
  struct item {
    std::string target;
    int status;
    std::string code;
  };
  std::vector<item> items = {
    {"/v1/entities/ledger/../append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/../ledger/x/append", 404, "ROUTE_NOT_FOUND"},
    {"/v1/entities/ledger/%2e%2e/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/%2e%2e%2f%2e%2e/x/facts", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/a%2Fb/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/a%5Cb/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/a\\b/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/a%00b/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/%00/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/.hidden/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/" + long_id + "/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/caf%C3%A9/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/x%27%3BDROP%20TABLE%20facts/append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/ledger/%/append", 400, "INVALID_PATH"},
    {"/v1/entities/ledger/%zz/append", 400, "INVALID_PATH"},
    {"/v1/entities/ledger/a/b/append", 404, "ROUTE_NOT_FOUND"},
    {"/v1/entities/ledger//append", 400, "INVALID_ENTITY_KEY"},
    {"/v1/entities/%6c%65%64%67%65%72/ok/%40facts", 404, "METHOD_NOT_FOUND"},
  };
  for (auto& it : items)
    expect(f, it.target, post_json(it.target, append_body), it.status, it.code);
  // Raw bytes the HTTP parser itself refuses: NUL, a space, a non-ASCII byte in the target.
  for (std::string bad : {std::string("/v1/entities/ledger/a\0b/append", 30),
                          std::string("/v1/entities/ledger/a b/append"),
                          std::string("/v1/entities/ledger/\xc3\xa9/append")})
    expect(f, "raw bytes in the target", post_json(bad, append_body), 400, "");
  CHECK(files_below(f.data_dir()) == files_before);
  CHECK(files_below(f.data_dir().parent_path() / "etc") == parent_before);
  CHECK(f.facts("acme", "ledger", "seed").size() == 1);
}

TEST_CASE("hostile: non-ASCII keys and invalid UTF-8 or 10,000-deep JSON bodies") {
  gateway_fixture f;
  seed_fact(f);
  const std::string t = "/v1/entities/ledger/h/append";
  expect(f, "non-ASCII Idempotency-Key",
         post_json(t, append_body, "Idempotency-Key: cl\xc3\xa9\r\n"), 400,
         "INVALID_IDEMPOTENCY_KEY");
  expect(f, "control character in the key", post_json(t, append_body, "Idempotency-Key: a\tb\r\n"),
         400, "INVALID_IDEMPOTENCY_KEY");
  expect(f, "256-character key",
         post_json(t, append_body, "Idempotency-Key: " + std::string(256, 'k') + "\r\n"), 400,
         "INVALID_IDEMPOTENCY_KEY");
  expect(f, "non-ASCII API key",
         head("GET", "/v1/entities/ledger/h/facts", "X-API-Key: k\xc3\xa9y\r\n", false), 401,
         "UNAUTHORIZED");
  for (std::string body : {std::string("{\"type\":\"x\",\"data\":{\"s\":\"\xff\xfe\"}}"),
                           std::string("{\"type\":\"x\",\"data\":{\"s\":\"\xc0\xaf\"}}"),
                           std::string("{\"type\":\"x\",\"data\":{\"s\":\"\xed\xa0\x80\"}}"),
                           std::string("{\"type\":\"x\",\"data\":{\"s\":\"\\ud800\"}}"),
                           std::string("{\"type\":\"x\"}\xff"), std::string("\xef\xbb\xbf{}x")})
    expect(f, "invalid UTF-8 / JSON", post_json(t, body), 400, "INVALID_JSON");
  std::string deep_array = std::string(10000, '[') + std::string(10000, ']');
  expect(f, "10,000-deep array", post_json(t, deep_array), 400, "JSON_TOO_DEEP");
  std::string deep_object;
  for (int i = 0; i < 10000; ++i)
    deep_object += "{\"a\":";
  deep_object += "1" + std::string(10000, '}');
  expect(f, "10,000-deep object", post_json(t, deep_object), 400, "JSON_TOO_DEEP");
  // Deep but unterminated: refused as too deep before the end is even looked at.
  expect(f, "10,000 open brackets", post_json(t, std::string(10000, '[')), 400, "JSON_TOO_DEEP");
  CHECK(f.entity_files() == 1); // nothing reached the entity h
  // SQL as a fact *type* reaches the ledger, which refuses it (a type is a token): 400, and the
  // failure is recorded as one error fact (README.md, guarantee 5), never as the fact asked for.
  auto a = exchange(
    f.port(), post_json(t, R"({"type":"x'); DROP TABLE facts; --"})", "Idempotency-Key: sqlt\r\n"));
  CHECK(a.status == 400);
  CHECK(a.code == "INVALID_ARGUMENT");
  auto facts = f.facts("acme", "ledger", "h");
  REQUIRE(facts.size() == 1);
  CHECK(facts[0]["type"] == "error");
  CHECK(f.facts("acme", "ledger", "seed").size() == 1);
  CHECK(healthy(f.port()));
}

TEST_CASE("hostile: a 100 MB body is refused with 413 before it is read, and not buffered") {
  gateway_fixture f;
  seed_fact(f);
  auto before = count_on_disk(f.data_dir());
  {
    // Announced: the answer comes while not one body byte was sent.
    raw_socket s(f.port());
    REQUIRE(s.ok());
    s.send(head("POST", "/v1/entities/ledger/big/append",
                "Content-Type: application/json\r\nIdempotency-Key: big\r\n"
                "Content-Length: 104857600\r\n"));
    CHECK(s.read_response(5s) == 413);
    CHECK(s.header("connection") == "close");
    CHECK(s.body().find("BODY_TOO_LARGE") != std::string::npos);
  }
  {
    // Chunked, streamed for real, without stopping: 413 arrives after about the limit, the
    // server drops what follows (it lingers to let the client read the answer, for at most
    // 64 MiB or 2 s) and then closes, so the sender is cut off before its 100 MB went through.
    long rss0 = rss_kib();
    raw_socket s(f.port());
    REQUIRE(s.ok());
    s.set_send_timeout(10s); // a server that stopped reading without closing fails the test
    REQUIRE(s.send(head("POST", "/v1/entities/ledger/big/append",
                        "Content-Type: application/json\r\nIdempotency-Key: big2\r\n"
                        "Transfer-Encoding: chunked\r\n")));
    std::atomic<size_t> sent{0};
    std::atomic<bool> cut{false};
    auto t0 = std::chrono::steady_clock::now();
    std::thread sender([&] {
      std::string chunk(64 * 1024, ' ');
      std::string framed = "10000\r\n" + chunk + "\r\n";
      while (sent.load() < (100u << 20)) {
        if (!s.send(framed)) {
          cut.store(true); // reset by the server: it is done with us
          return;
        }
        sent.fetch_add(chunk.size());
      }
    });
    int status = s.read_response(20s);
    size_t sent_at_answer = sent.load();
    sender.join();
    auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
        .count();
    CHECK(status == 413);
    CHECK(s.body().find("BODY_TOO_LARGE") != std::string::npos);
    MESSAGE("413 after " << sent_at_answer / 1024 << " KiB sent; the server cut the sender off "
                         << "after " << sent.load() / 1024 << " KiB, " << ms << " ms");
    CHECK(cut.load());
    CHECK(sent.load() < (100u << 20));
    long growth = rss_kib() - rss0;
    MESSAGE("RSS growth: " << growth << " KiB");
    CHECK(growth < 32 * 1024);
  }
  CHECK(count_on_disk(f.data_dir()) == before);
  CHECK(healthy(f.port()));
}

TEST_CASE("hostile: huge headers, duplicate headers, request smuggling shapes") {
  gateway_fixture f;
  seed_fact(f);
  const std::string t = "/v1/entities/ledger/d/append";
  expect(f, "one 1 MiB header",
         head("GET", "/healthz", "X-Pad: " + std::string(1 << 20, 'p') + "\r\n"), 431,
         "HEADERS_TOO_LARGE");
  std::string many;
  for (int i = 0; i < 5000; ++i)
    many += "X-H" + std::to_string(i) + ": v\r\n";
  expect(f, "5,000 headers", head("GET", "/healthz", many), 431, "HEADERS_TOO_LARGE");
  expect(f, "a 64 KiB target",
         head("GET", "/v1/entities/ledger/" + std::string(65536, 'a') + "/facts", ""), 431,
         "HEADERS_TOO_LARGE");
  // Two API keys (even of two tenants): refused, not "the first one wins".
  expect(
    f, "two X-API-Key",
    head("GET", "/v1/entities/ledger/seed/facts", std::string("X-API-Key: ") + globex_key + "\r\n"),
    401, "UNAUTHORIZED");
  expect(f, "two Idempotency-Key",
         post_json(t, append_body, "Idempotency-Key: a\r\nIdempotency-Key: b\r\n"), 400,
         "INVALID_IDEMPOTENCY_KEY");
  expect(f, "two equal Idempotency-Key",
         post_json(t, append_body, "Idempotency-Key: a\r\nIdempotency-Key: a\r\n"), 400,
         "INVALID_IDEMPOTENCY_KEY");
  auto body = append_body;
  auto cl = std::to_string(body.size());
  expect(f, "two different Content-Length",
         head("POST", t,
              "Content-Type: application/json\r\nIdempotency-Key: c\r\nContent-Length: " + cl +
                "\r\nContent-Length: 5\r\n") +
           body,
         400, "BAD_REQUEST");
  expect(f, "Content-Length and Transfer-Encoding",
         head("POST", t,
              "Content-Type: application/json\r\nIdempotency-Key: c\r\nContent-Length: 4\r\n"
              "Transfer-Encoding: chunked\r\n") +
           "0\r\n\r\n",
         400, "BAD_REQUEST");
  expect(f, "negative Content-Length",
         head("POST", t,
              "Content-Type: application/json\r\nIdempotency-Key: c\r\nContent-Length: -1\r\n"),
         400, "BAD_REQUEST");
  expect(f, "overflowing Content-Length",
         head("POST", t,
              "Content-Type: application/json\r\nIdempotency-Key: c\r\n"
              "Content-Length: 99999999999999999999999\r\n"),
         400, "BAD_REQUEST");
  expect(f, "two Content-Type",
         head("POST", t,
              "Content-Type: application/json\r\nContent-Type: text/plain\r\nIdempotency-Key: c\r\n"
              "Content-Length: " +
                cl + "\r\n") +
           body,
         415, "UNSUPPORTED_MEDIA_TYPE");
  // Nothing reached the entity d (no file was created for it).
  CHECK(f.entity_files() == 1);
  // Two equal Content-Length values are one length (RFC 9110 8.6 allows accepting them): the
  // request is served once, exactly as with one header.
  auto a = exchange(f.port(), head("POST", t,
                                   "Content-Type: application/json\r\nIdempotency-Key: c2\r\n"
                                   "Content-Length: " +
                                     cl + "\r\nContent-Length: " + cl + "\r\n") +
                                body);
  CHECK(a.status == 200);
  CHECK(f.facts("acme", "ledger", "d").size() == 1);
}

TEST_CASE("hostile: content types and API keys (415, 401, other tenant)") {
  // globex also has a key with every scope: scopes grant acts, never another tenant's entities.
  gateway_fixture f([](runtime_config&, http_server_config& hc) {
    for (auto& t : hc.tenants)
      if (t.name == "globex")
        t.keys.push_back({api_key_sha256(globex_operator_key), scope_all});
  });
  seed_fact(f);
  const std::string t = "/v1/entities/ledger/seed/append";
  auto with_type = [&](const std::string& ct) {
    return head("POST", t,
                (ct.empty() ? std::string() : "Content-Type: " + ct + "\r\n") +
                  "Idempotency-Key: ct\r\nContent-Length: " + std::to_string(append_body.size()) +
                  "\r\n") +
           append_body;
  };
  for (std::string ct : std::vector<std::string>{
         "", "text/plain", "application/jsonx", "application/json; charset=latin1",
         "multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "application/xml",
         "*/*"})
    expect(f, "Content-Type '" + ct + "'", with_type(ct), 415, "UNSUPPORTED_MEDIA_TYPE");
  auto facts_req = [&](const std::string& key_line) {
    return "GET /v1/entities/ledger/seed/facts HTTP/1.1\r\nHost: x\r\n" + key_line + "\r\n";
  };
  expect(f, "no key", facts_req(""), 401, "UNAUTHORIZED");
  expect(f, "empty key", facts_req("X-API-Key: \r\n"), 401, "UNAUTHORIZED");
  expect(f, "unknown key", facts_req("X-API-Key: key-acme2\r\n"), 401, "UNAUTHORIZED");
  expect(f, "key with a prefix", facts_req("X-API-Key: Bearer key-acme\r\n"), 401, "UNAUTHORIZED");
  expect(f, "key hash instead of key", facts_req("X-API-Key: " + api_key_sha256(acme_key) + "\r\n"),
         401, "UNAUTHORIZED");
  expect(f, "unknown key on a write",
         "POST " + t +
           " HTTP/1.1\r\nHost: x\r\nX-API-Key: nope\r\nContent-Type: application/json\r\n"
           "Idempotency-Key: z\r\nContent-Length: " +
           std::to_string(append_body.size()) + "\r\n\r\n" + append_body,
         401, "UNAUTHORIZED");
  // Another tenant's key names another tenant's entity: acme's facts are invisible to globex,
  // its dead letters cannot be acted on (404), and its writes land in globex's own file.
  http_client c(f.port());
  auto g = c.request("GET", "/v1/entities/ledger/seed/facts", {{"X-API-Key", globex_key}});
  CHECK(g.status == 404);
  CHECK(g.code() == "ENTITY_NOT_FOUND"); // globex's ledger/seed was never written
  // globex's read-write key may not operate dead letters at all.
  auto dl = c.request("POST", "/v1/entities/ledger/seed/dead-letters/dl_x/retry",
                      json_headers(globex_key, "g1"));
  CHECK(dl.status == 403);
  CHECK(dl.code() == "INSUFFICIENT_SCOPE");
  // Its operate key reaches only globex's ledger/seed, which does not exist: acme's (which does)
  // would answer DEAD_LETTER_NOT_FOUND.
  auto op = c.request("POST", "/v1/entities/ledger/seed/dead-letters/dl_x/retry",
                      json_headers(globex_operator_key, "g2"));
  CHECK(op.status == 404);
  CHECK(op.code() == "ENTITY_NOT_FOUND");
  CHECK(f.entity_files() == 1); // neither request made a file for globex
  CHECK(f.facts("acme", "ledger", "seed").size() == 1);
}

TEST_CASE("hostile: SQL fragments and out-of-range numbers in query filters") {
  gateway_fixture f;
  seed_fact(f);
  auto before = count_on_disk(f.data_dir());
  http_client c(f.port());
  auto get = [&](const std::string& q) {
    return c.request("GET", "/v1/entities/ledger/seed/facts" + q, {{"X-API-Key", acme_key}});
  };
  // Type filters are tokens: SQL in them is refused before the entity is reached.
  for (std::string q :
       std::vector<std::string>{"?type=x%27%20OR%201%3D1%20--", "?type=x'+OR+1=1+--",
                                "?subtype=%22%29%3B--", "?type=INVOCATION", "?subtype=a%00b"}) {
    auto r = get(q);
    INFO(q << " -> " << r.body);
    CHECK(r.status == 400);
    CHECK(r.code() == "INVALID_QUERY");
  }
  // Free-text filters are bound, never spliced: SQL in them matches nothing and harms nothing.
  for (std::string q : std::vector<std::string>{"?idempotency_key=%27%20OR%20%27%27%3D%27",
                                                "?trace_id=1%3BDROP%20TABLE%20facts",
                                                "?tool_id=%25", "?trace_id=%27--"}) {
    auto r = get(q);
    INFO(q << " -> " << r.body);
    CHECK(r.status == 200);
    CHECK(r.json().empty());
  }
  CHECK(get("?type=invocation").json().size() == 1); // the table is intact
  for (std::string q : std::vector<std::string>{"?limit=-1",
                                                "?limit=0",
                                                "?limit=10001",
                                                "?limit=99999999999999999999",
                                                "?limit=1;DROP%20TABLE%20facts",
                                                "?limit=%2B5",
                                                "?limit=0x10",
                                                "?limit=1e3",
                                                "?limit=",
                                                "?limit=5&limit=6",
                                                "?after_seq=-5",
                                                "?after_seq=9223372036854775808",
                                                "?before_seq=-1",
                                                "?since=-1",
                                                "?until=18446744073709551616",
                                                "?after_seq=0%20OR%201%3D1",
                                                "?order=asc;--",
                                                "?bogus=1",
                                                "?type=" + std::string(256, 't'),
                                                "?type=%zz"}) {
    auto r = get(q);
    INFO(q << " -> " << r.body);
    CHECK(r.status == 400);
    CHECK(r.code() == "INVALID_QUERY");
  }
  auto big = get("?after_seq=9223372036854775807&limit=10000");
  CHECK(big.status == 200);
  CHECK(big.json().empty());
  auto r =
    c.request("GET", "/v1/entities/ledger/seed/dead-letters?limit=-3", {{"X-API-Key", acme_key}});
  CHECK(r.status == 400);
  CHECK(count_on_disk(f.data_dir()) == before);
  CHECK(healthy(f.port()));
}

TEST_CASE("hostile: a client dripping one byte at a time hits the request timeout (408)") {
  gateway_fixture f([](runtime_config&, http_server_config& h) {
    h.limits.request_timeout = std::chrono::milliseconds(400);
  });
  seed_fact(f);
  auto before = count_on_disk(f.data_dir());
  for (bool in_body : {false, true}) {
    auto req = post_json("/v1/entities/ledger/drip/append", append_body);
    raw_socket s(f.port());
    REQUIRE(s.ok());
    size_t start = in_body ? req.size() - append_body.size() : 0;
    if (start)
      REQUIRE(s.send(req.substr(0, start)));
    auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    // One byte every 20 ms: the whole request would take seconds; the deadline is 400 ms for
    // all of it, not per byte.
    for (size_t i = start; i < req.size() && status == 0; ++i) {
      if (!s.send(req.substr(i, 1)))
        break;
      bool eof = false;
      s.read_some(20ms, &eof);
      if (s.input().find("\r\n\r\n") != std::string::npos || eof)
        break;
    }
    status = s.read_response(5s);
    auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
        .count();
    INFO("in body: " << in_body << ", after " << ms << " ms");
    CHECK(status == 408);
    CHECK(s.body().find("REQUEST_TIMEOUT") != std::string::npos);
    CHECK(ms < 3000);
    CHECK(s.closed_by_peer(5s));
  }
  CHECK(count_on_disk(f.data_dir()) == before);
  CHECK(healthy(f.port()));
}

TEST_CASE("hostile: half-closed connections get their answer and a cut request writes nothing") {
  gateway_fixture f;
  seed_fact(f);
  {
    // A whole request, then FIN: the answer still comes, the write happens once.
    raw_socket s(f.port());
    REQUIRE(
      s.send(post_json("/v1/entities/ledger/half/append", append_body, "Idempotency-Key: h1\r\n")));
    s.shutdown_write();
    CHECK(s.read_response(10s) == 200);
    CHECK(s.closed_by_peer(5s));
  }
  auto before = count_on_disk(f.data_dir());
  {
    // Half a request, then FIN: no answer, no write, the connection closes.
    auto req = post_json("/v1/entities/ledger/half/append", append_body, "Idempotency-Key: h2\r\n");
    raw_socket s(f.port());
    REQUIRE(s.send(req.substr(0, req.size() - 5)));
    s.shutdown_write();
    CHECK(s.closed_by_peer(10s));
    CHECK(s.input().empty());
  }
  {
    // Headers only, then FIN.
    raw_socket s(f.port());
    REQUIRE(s.send("GET /healthz HTTP/1.1\r\nHost: x\r\n"));
    s.shutdown_write();
    CHECK(s.closed_by_peer(10s));
  }
  {
    // Connect and close at once, many times: the server shrugs.
    for (int i = 0; i < 200; ++i) {
      raw_socket s(f.port());
      REQUIRE(s.ok());
    }
  }
  CHECK(count_on_disk(f.data_dir()) == before);
  CHECK(f.facts("acme", "ledger", "half").size() == 1);
  CHECK(healthy(f.port()));
}

TEST_CASE("hostile: 2,000 idle connections against a cap of 1,000") {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  // Each connection costs two descriptors here (client and server side, one process).
  const size_t total = 2000, cap = 1000;
  REQUIRE_MESSAGE(rl.rlim_cur > 2 * total + 512, "RLIMIT_NOFILE is " << rl.rlim_cur);
  gateway_fixture f([&](runtime_config&, http_server_config& h) {
    h.limits.max_connections = cap;
    h.limits.request_timeout = std::chrono::milliseconds(6000);
  });
  seed_fact(f);
  auto before = count_on_disk(f.data_dir());
  std::vector<raw_socket> socks;
  socks.reserve(total);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < total; ++i) {
    socks.emplace_back(f.port());
    REQUIRE(socks.back().ok());
  }
  // Those past the cap are answered 503 TOO_MANY_CONNECTIONS and closed; the others hear
  // nothing until the request timeout closes them silently.
  size_t refused = 0, silent_closed = 0, other = 0;
  for (auto& s : socks) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      t0 + 15s - std::chrono::steady_clock::now());
    bool closed = s.closed_by_peer(std::max(left, std::chrono::milliseconds(1)));
    if (s.input().rfind("HTTP/1.1 503", 0) == 0 &&
        s.body().find("TOO_MANY_CONNECTIONS") != std::string::npos)
      ++refused;
    else if (closed && s.input().empty())
      ++silent_closed;
    else
      ++other;
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(refused << " refused, " << silent_closed << " closed idle, " << other << " other, in "
                  << secs << " s");
  CHECK(refused == total - cap);
  CHECK(silent_closed == cap);
  CHECK(other == 0);
  socks.clear();
  CHECK(eventually([&] { return healthy(f.port()); }, 10s));
  auto m = http_client(f.port()).request("GET", "/metrics").body;
  CHECK(m.find("factum_http_connections_refused_total " + std::to_string(total - cap)) !=
        std::string::npos);
  CHECK(count_on_disk(f.data_dir()) == before);
}

} // namespace hostile_test
