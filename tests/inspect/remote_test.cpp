// remote_test.cpp: `factum inspect --server` against a tiny fake HTTP server on 127.0.0.1
// (port 0, one thread, canned JSON): the query it sends, the API key header, paging, tables
// and JSON lines, and every HTTP failure's exit code. The server thread serves one connection
// at a time until the test ends.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "remote.hpp"
#include "support.hpp"

using namespace factum;
using namespace factum::test::inspect;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

struct canned {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
};

/// An HTTP/1.1 server on 127.0.0.1:<ephemeral> answering each request with handler(target).
class fake_server {
 public:
  using handler = std::function<canned(const std::string& target)>;

  explicit fake_server(handler h)
      : handler_(std::move(h)), acceptor_(ioc_, {net::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~fake_server() {
    stop_ = true;
    beast::error_code ec;
    net::io_context wake;
    tcp::socket s(wake);
    s.connect({net::ip::make_address("127.0.0.1"), port_}, ec); // unblocks accept()
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> targets() {
    std::lock_guard<std::mutex> g(mu_);
    return targets_;
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> g(mu_);
    return keys_;
  }

 private:
  void serve() {
    while (!stop_) {
      tcp::socket sock(ioc_);
      beast::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_)
        return;
      beast::flat_buffer buf;
      bhttp::request<bhttp::string_body> req;
      bhttp::read(sock, buf, req, ec);
      if (ec)
        continue;
      std::string target(req.target());
      {
        std::lock_guard<std::mutex> g(mu_);
        targets_.push_back(target);
        keys_.emplace_back(req["X-API-Key"]);
      }
      canned c = handler_(target);
      bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(c.status), 11};
      res.set(bhttp::field::content_type, c.content_type);
      res.body() = c.body;
      res.keep_alive(false);
      res.prepare_payload();
      bhttp::write(sock, res, ec);
      sock.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  handler handler_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> targets_, keys_;
};

nlohmann::json fact_json(int64_t seq, std::string type, std::string tool = "",
                         std::string tenant = "acme") {
  nlohmann::json j{{"seq", seq},
                   {"fact_id", "fct_" + std::to_string(seq)},
                   {"type", std::move(type)},
                   {"timestamp", t0 + seq * 1000},
                   {"tenant_id", std::move(tenant)},
                   {"entity_type", "ledger"},
                   {"entity_id", "a1"},
                   {"data", {{"n", seq}}},
                   {"prev_hash", std::string(64, '0')},
                   {"hash", std::string(64, 'a')}};
  if (!tool.empty())
    j["tool_id"] = tool;
  return j;
}

/// The value of query parameter `name` in `target`, or "".
std::string param(const std::string& target, const std::string& name) {
  auto q = target.find('?');
  if (q == std::string::npos)
    return "";
  std::string query = target.substr(q + 1);
  size_t at = 0;
  while (at <= query.size()) {
    auto amp = query.find('&', at);
    auto kv = query.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    auto eq = kv.find('=');
    if (kv.substr(0, eq) == name)
      return kv.substr(eq + 1);
    if (amp == std::string::npos)
      break;
    at = amp + 1;
  }
  return "";
}

/// Serves `n` facts (seq 1..n, every third an error of tool "crm") honouring after_seq, limit
/// and type, like the real route.
canned paged_facts(const std::string& target, int64_t n) {
  int64_t after = param(target, "after_seq").empty() ? 0 : std::stoll(param(target, "after_seq"));
  int64_t limit = std::stoll(param(target, "limit"));
  std::string type = param(target, "type");
  auto arr = nlohmann::json::array();
  for (int64_t s = after + 1; s <= n && static_cast<int64_t>(arr.size()) < limit; ++s) {
    bool err = s % 3 == 0;
    if (!type.empty() && type != (err ? "error" : "invocation"))
      continue;
    arr.push_back(fact_json(s, err ? "error" : "invocation", err ? "crm" : "hook"));
  }
  return {200, nlohmann::json{{"facts", arr}}.dump()};
}

std::vector<std::string> remote(const fake_server& s, std::vector<std::string> args) {
  std::vector<std::string> a{"inspect", args[0], "--server", s.url(), "--api-key", "sk_acme"};
  a.insert(a.end(), args.begin() + 1, args.end());
  return a;
}

} // namespace

TEST_CASE("remote: facts sends the filters as a query with the API key, prints a table") {
  fake_server srv([](const std::string&) {
    auto arr = nlohmann::json::array({fact_json(4, "error", "crm"), fact_json(9, "error")});
    arr[0]["subtype"] = "external";
    arr[0]["trace_id"] = "t 2";
    arr[1]["amount"] = "0.005";
    arr[1]["currency"] = "USD";
    return canned{200, arr.dump()};
  });
  auto r =
    run_cli(remote(srv, {"facts", "acme/ledger/a1", "--type", "error", "--subtype", "external",
                         "--since", "2024-01-17T14:00:00Z", "--until", std::to_string(t0 + 20'000),
                         "--trace", "t 2", "--after-seq", "3", "--table"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  auto targets = srv.targets();
  REQUIRE(targets.size() == 1);
  CHECK(targets[0] ==
        "/v1/entities/ledger/a1/facts?type=error&subtype=external&since=" + std::to_string(t0) +
          "&until=" + std::to_string(t0 + 20'000) + "&after_seq=3&trace_id=t%202&limit=100");
  CHECK(srv.keys() == std::vector<std::string>{"sk_acme"});
  // seq 9 has no subtype "external" and no trace: filtered out on this side as well.
  CHECK(r.out == "SEQ  TIME                      TYPE   SUBTYPE   TOOL  AMOUNT  TRACE  DATA\n"
                 "  4  2024-01-17T14:00:04.000Z  error  external  crm        -  t 2    "
                 "{\"n\":4}\n");
}

TEST_CASE("remote: pages with after_seq, filters tool and key here, newest first") {
  fake_server srv([](const std::string& t) { return paged_facts(t, 2500); });
  auto all = run_cli(remote(srv, {"facts", "acme/ledger/a1", "--limit", "0"}));
  REQUIRE_MESSAGE(all.code == 0, all.err);
  auto ls = lines(all.out);
  REQUIRE(ls.size() == 2500);
  CHECK(nlohmann::json::parse(ls.back())["seq"] == 2500);
  auto t = srv.targets();
  REQUIRE(t.size() == 3);
  CHECK(param(t[1], "after_seq") == "1000");
  CHECK(param(t[2], "after_seq") == "2000");

  auto newest =
    run_cli(remote(srv, {"facts", "acme/ledger/a1", "--newest", "--limit", "3", "--tool", "crm"}));
  REQUIRE(newest.code == 0);
  std::vector<int64_t> seqs;
  for (auto& l : lines(newest.out))
    seqs.push_back(nlohmann::json::parse(l)["seq"]);
  CHECK(seqs == std::vector<int64_t>{2499, 2496, 2493});

  auto first = run_cli(remote(
    srv, {"facts", "acme/ledger/a1", "--limit", "2", "--type", "error", "--before-seq", "7"}));
  REQUIRE(first.code == 0);
  CHECK(lines(first.out).size() == 2);
  // Only server-side filters: the page asks for what is still wanted, over several pages.
  auto before = srv.targets().size();
  auto some = run_cli(remote(srv, {"facts", "acme/ledger/a1", "--limit", "1500"}));
  REQUIRE(some.code == 0);
  CHECK(lines(some.out).size() == 1500);
  auto t2 = srv.targets();
  REQUIRE(t2.size() == before + 2);
  CHECK(param(t2[before], "limit") == "1000");
  CHECK(param(t2[before + 1], "limit") == "500");
  CHECK(param(t2[before + 1], "after_seq") == "1000");
}

TEST_CASE("remote: tail follows new facts through the API") {
  std::atomic<int64_t> available{3};
  fake_server srv([&](const std::string& t) { return paged_facts(t, available.load()); });
  tools::inspect_io io;
  io.on_poll = [&](int64_t poll) { available = 3 + 2 * (poll + 1); }; // two more per poll
  auto r = run_cli(remote(srv, {"tail", "acme/ledger/a1", "--lines", "1", "--max-facts", "4",
                                "--interval", "5", "--timeout", "60"}),
                   io);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<int64_t> seqs;
  for (auto& l : lines(r.out))
    seqs.push_back(nlohmann::json::parse(l)["seq"]);
  CHECK(seqs == std::vector<int64_t>{3, 4, 5, 6, 7});
}

TEST_CASE("remote: dead letters and breakers") {
  fake_server srv([](const std::string& t) {
    if (t == "/v1/entities/webhook/w%3A1/dead-letters")
      return canned{200, R"({"dead_letters":[
        {"id":"dl_1","status":"pending","operation":"deliver","payload":{"a":1},
         "error_code":"HTTP_503","error_message":"unavailable","error_category":"transient",
         "reason":"server_error","attempts":5,"first_attempt_at":1705500000000,
         "last_attempt_at":"2024-01-17T14:00:05Z","trace_id":"t9","next_retry_at":null,
         "created_at":1705500005000,"updated_at":1705500005000},
        {"id":"dl_2","status":"resolved","operation":"deliver","error_code":"X",
         "error_message":"m","error_category":"client","reason":"validation","attempts":1}]})"};
    if (t == "/v1/entities/webhook/w%3A1/breakers")
      return canned{200, R"([{"tool":"hook","state":"OPEN","failures":7,
                              "updated_at":1705500010000}])"};
    return canned{404, R"({"title":"Not Found","status":404,"code":"NOT_FOUND"})",
                  "application/problem+json"};
  });
  auto dl =
    run_cli(remote(srv, {"dead-letters", "acme/webhook/w:1", "--status", "pending", "--table"}));
  REQUIRE_MESSAGE(dl.code == 0, dl.err);
  CHECK(dl.out == "ID    STATUS   OPERATION  CATEGORY   CODE      REASON        ATTEMPTS  "
                  "LAST_ATTEMPT              NEXT_RETRY  TRACE  MESSAGE\n"
                  "dl_1  pending  deliver    transient  HTTP_503  server_error         5  "
                  "2024-01-17T14:00:05.000Z  -           t9     unavailable\n");
  auto dlj = run_cli(remote(srv, {"dead-letters", "acme/webhook/w:1"}));
  REQUIRE(dlj.code == 0);
  REQUIRE(lines(dlj.out).size() == 2);
  CHECK(nlohmann::json::parse(lines(dlj.out)[0])["payload"] == nlohmann::json{{"a", 1}});
  auto br = run_cli(remote(srv, {"breakers", "acme/webhook/w:1", "--table"}));
  REQUIRE(br.code == 0);
  CHECK(br.out == "TOOL  STATE  UPDATED                   DATA\n"
                  "hook  OPEN   2024-01-17T14:00:10.000Z  {\"failures\":7}\n");
}

TEST_CASE("remote: HTTP failures are exit 7 (404: 3), bad URLs are usage errors") {
  fake_server srv([](const std::string& t) {
    if (t.find("/v1/entities/ledger/unauth/") == 0)
      return canned{401,
                    R"({"type":"about:blank","title":"Unauthorized","status":401,)"
                    R"("detail":"unknown API key","code":"UNAUTHORIZED"})",
                    "application/problem+json"};
    if (t.find("/v1/entities/ledger/notjson/") == 0)
      return canned{200, "<html>", "text/html"};
    if (t.find("/v1/entities/ledger/other/") == 0)
      return canned{200, nlohmann::json::array({fact_json(1, "x", "", "globex")}).dump()};
    if (t.find("/v1/entities/ledger/boom/") == 0)
      return canned{500, "oops", "text/plain"};
    return canned{404, R"({"title":"Not Found","detail":"no entity type ledger2"})",
                  "application/problem+json"};
  });
  auto unauth = run_cli(remote(srv, {"facts", "acme/ledger/unauth"}));
  CHECK(unauth.code == 7);
  CHECK(unauth.err == "factum inspect: server answered 401 Unauthorized for GET "
                      "/v1/entities/ledger/unauth/facts?limit=100: Unauthorized: unknown API "
                      "key [UNAUTHORIZED]\n");
  CHECK(run_cli(remote(srv, {"facts", "acme/ledger/notjson"})).code == 7);
  CHECK(run_cli(remote(srv, {"breakers", "acme/ledger/boom"})).code == 7);
  auto other = run_cli(remote(srv, {"facts", "acme/ledger/other"}));
  CHECK(other.code == 7);
  CHECK(other.err.find("belongs to tenant globex") != std::string::npos);
  CHECK(run_cli(remote(srv, {"dead-letters", "acme/ledger2/x"})).code == 3);

  // Nothing listens on a port whose listener is gone: connection refused.
  unsigned short dead_port;
  {
    net::io_context ioc;
    tcp::acceptor a(ioc, {net::ip::make_address("127.0.0.1"), 0});
    dead_port = a.local_endpoint().port();
  }
  auto refused =
    run_cli({"inspect", "facts", "--server", "http://127.0.0.1:" + std::to_string(dead_port),
             "--api-key", "k", "acme/ledger/a1"});
  CHECK(refused.code == 7);
  CHECK(refused.err.find("cannot connect to") != std::string::npos);

  auto https = run_cli(
    {"inspect", "facts", "--server", "https://127.0.0.1:1", "--api-key", "k", "acme/ledger/a1"});
  CHECK(https.code == 2);
  CHECK(https.err.find("https is not supported") != std::string::npos);
  auto far = run_cli({"inspect", "breakers", "--server", "http://192.0.2.1:8080", "--api-key", "k",
                      "acme/ledger/a1"});
  CHECK(far.code == 2);
  CHECK(far.err.find("loopback") != std::string::npos);
  CHECK(run_cli({"inspect", "facts", "--server", srv.url(), "acme/ledger/a1"}).code == 2);
  CHECK(run_cli({"inspect", "facts", "--server", srv.url(), "--api-key", "k", "--data", "/tmp",
                 "acme/ledger/a1"})
          .code == 2);
}

TEST_CASE("remote: URL parsing and query encoding") {
  using tools::parse_server_url;
  auto a = parse_server_url("http://127.0.0.1:8080");
  REQUIRE(a.is_ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  CHECK(a->path == "");
  auto b = parse_server_url("http://[::1]:9/api/");
  REQUIRE(b.is_ok());
  CHECK(b->host == "::1");
  CHECK(b->path == "/api");
  auto c = parse_server_url("http://localhost");
  REQUIRE(c.is_ok());
  CHECK(c->port == 80);
  for (auto* bad : {"https://x", "ftp://x", "http://", "http://u@h:1", "http://h:0", "http://h:x",
                    "http://h:70000", "http://h/p?q=1", "127.0.0.1:80", "http://h:"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_server_url(bad).is_ok());
  }
  CHECK(parse_server_url("https://x").error().message().find("SSH tunnel") != std::string::npos);
  CHECK(parse_server_url("http://h:x").error().message().find("bad --server URL") == 0);
  fact_filter f;
  f.limit = 5;
  CHECK(tools::facts_query(f) == "?limit=5");
}

TEST_CASE("remote: the fleet views page through the server's fleet routes") {
  fake_server srv([](const std::string& t) {
    auto path = t.substr(0, t.find('?'));
    if (path == "/v1/dead-letters") {
      bool first = param(t, "after").empty();
      auto dl = [](const char* id, const char* entity) {
        return nlohmann::json{
          {"id", id},         {"status", "pending"},      {"reason", "timeout"},
          {"created_at", t0}, {"entity_type", "webhook"}, {"entity_id", entity}};
      };
      nlohmann::json page = {
        {"matched", 3},
        {"dead_letters", first ? nlohmann::json::array({dl("dl_1", "w1"), dl("dl_2", "w1")})
                               : nlohmann::json::array({dl("dl_3", "w2")})},
        {"errors", nlohmann::json::array()},
        {"next", first ? nlohmann::json("c+1") : nlohmann::json(nullptr)}};
      return canned{200, page.dump()};
    }
    if (path == "/v1/breakers")
      return canned{200, R"({"tools":[{"tool":"pay","entities":{"CLOSED":4,"OPEN":1}}],)"
                         R"("not_closed":[{"tool":"pay","state":"OPEN","type":"webhook",)"
                         R"("id":"w2","updated_at":1}],"next":null})"};
    if (path == "/v1/entities")
      return canned{200, R"([{"type":"webhook","id":"w2","bytes":10,"last_activity":9},)"
                         R"({"type":"webhook","id":"w1","bytes":10,"last_activity":5}])"};
    return canned{404, "{}"};
  });
  auto dls =
    run_cli(remote(srv, {"fleet-dead-letters", "--state", "pending", "--reason", "timeout"}));
  REQUIRE_MESSAGE(dls.code == 0, dls.err);
  CHECK(lines(dls.out).size() == 3);
  auto br = run_cli(remote(srv, {"fleet-breakers"}));
  REQUIRE_MESSAGE(br.code == 0, br.err);
  CHECK(lines(br.out).size() == 2);
  auto recent = run_cli(remote(srv, {"recent", "--limit", "5"}));
  REQUIRE_MESSAGE(recent.code == 0, recent.err);
  REQUIRE(lines(recent.out).size() == 2);
  CHECK(nlohmann::json::parse(lines(recent.out)[0])["id"] == "w2");
  auto t = srv.targets();
  REQUIRE(t.size() == 4);
  CHECK(t[0] == "/v1/dead-letters?limit=100&state=pending&reason=timeout");
  CHECK(t[1] == "/v1/dead-letters?limit=100&state=pending&reason=timeout&after=c%2B1");
  CHECK(t[2] == "/v1/breakers?limit=1000");
  CHECK(t[3] == "/v1/entities?order=last_activity&limit=5");
}
