// stream_test.cpp: GET /v1/entities/{type}/{id}/facts/stream (docs/http-api.md, "Following
// facts") on an in-process gateway, read by a small Server-Sent Events client over a plain
// loopback socket (this file): resumption with Last-Event-ID while another thread appends, the
// slow reader's overflow event, the caps and the gauges, tenants, and the refusals that come
// before a stream starts. The test's thread reads; one appender thread writes through HTTP.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <atomic>
#include <set>
#include <thread>

#include <arpa/inet.h>

#include <sqlite3.h>

#include "http/fixture.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace factum::test {

namespace {

/// One Server-Sent Event as read.
struct sse_event {
  std::string id, event, data;
  bool comment = false; ///< a ':' line (keep-alive)
};

/// A Server-Sent Events client over one socket: the request, the status line and headers, then
/// the chunked body's events. Each read waits at most `timeout`.
class sse_client {
 public:
  /// Connects; `rcvbuf` > 0 shrinks the receive buffer first (a slow reader's window).
  explicit sse_client(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    if (rcvbuf > 0)
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~sse_client() { close(); }

  void close() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

  /// Sends the GET and reads the head: the status (0 when none came).
  int open(const std::string& target, const std::string& key, const std::string& last_id = {}) {
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: " + key +
                      "\r\nAccept: text/event-stream\r\n";
    if (!last_id.empty())
      req += "Last-Event-ID: " + last_id + "\r\n";
    req += "\r\n";
    REQUIRE(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
    while (raw_.find("\r\n\r\n") == std::string::npos)
      if (!fill(10s))
        return 0;
    auto end = raw_.find("\r\n\r\n");
    head_ = raw_.substr(0, end);
    raw_.erase(0, end + 4);
    return std::stoi(head_.substr(9, 3));
  }
  const std::string& head() const { return head_; }

  /// The next event, or nullopt when the stream ended (or nothing came within `timeout`).
  std::optional<sse_event> next(std::chrono::milliseconds timeout = 10s) {
    for (;;) {
      auto end = body_.find("\n\n");
      if (end != std::string::npos) {
        auto block = body_.substr(0, end + 1);
        body_.erase(0, end + 2);
        return parse(block);
      }
      if (ended_ || !more(timeout))
        return std::nullopt;
    }
  }
  /// Whether the server ended the body (the last chunk came).
  bool ended() const { return ended_; }

 private:
  static sse_event parse(const std::string& block) {
    sse_event e;
    size_t pos = 0;
    while (pos < block.size()) {
      auto nl = block.find('\n', pos);
      auto line = block.substr(pos, nl - pos);
      pos = nl + 1;
      if (line.rfind(':', 0) == 0)
        e.comment = true;
      else if (line.rfind("id: ", 0) == 0)
        e.id = line.substr(4);
      else if (line.rfind("event: ", 0) == 0)
        e.event = line.substr(7);
      else if (line.rfind("data: ", 0) == 0)
        e.data = line.substr(6);
    }
    return e;
  }

  /// Decodes chunks from raw_ into body_ (reading more when a chunk is incomplete).
  bool more(std::chrono::milliseconds timeout) {
    for (;;) {
      auto crlf = raw_.find("\r\n");
      if (crlf != std::string::npos) {
        auto size = std::stoul(raw_.substr(0, crlf), nullptr, 16);
        if (size == 0) {
          ended_ = true;
          return false;
        }
        if (raw_.size() >= crlf + 2 + size + 2) {
          body_ += raw_.substr(crlf + 2, size);
          raw_.erase(0, crlf + 2 + size + 2);
          return true;
        }
      }
      if (!fill(timeout))
        return false;
    }
  }

  bool fill(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
      return false;
    char buf[16384];
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      ended_ = true;
      return false;
    }
    raw_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string raw_, head_, body_;
  bool ended_ = false;
};

json append_body(const std::string& text) {
  return {{"type", "note"}, {"data", {{"text", text}}}};
}

/// Appends `n` facts to ledger/`id` of `key`'s tenant, each with its own Idempotency-Key.
void append_n(uint16_t port, const std::string& id, int n, const std::string& key = acme_key,
              size_t pad = 0) {
  http_client c(port);
  for (int i = 0; i < n; ++i) {
    auto r = c.request("POST", "/v1/entities/ledger/" + id + "/append",
                       json_headers(key, id + "-" + std::to_string(i) + "-" + std::to_string(pad)),
                       append_body(std::string(pad, 'x') + std::to_string(i)).dump());
    REQUIRE_MESSAGE(r.status == 200, r.body);
  }
}

/// The value of one metric line of the gateway ("name{labels}"), or -1.
int64_t metric(gateway_fixture& fx, const std::string& series) {
  auto text = fx.server().metrics_text();
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stoll(text.substr(at + series.size() + 2));
}

std::string stream_path(const std::string& id) {
  return "/v1/entities/ledger/" + id + "/facts/stream";
}

} // namespace

TEST_CASE("fact stream: bad keys, entities and resumption ids answer problem+json before it "
          "starts") {
  gateway_fixture fx;
  append_n(fx.port(), "s1", 1);
  http_client c(fx.port());
  auto check = [&](const std::string& target, const header_list& h, int status,
                   const std::string& code) {
    auto r = c.request("GET", target, h);
    CHECK_MESSAGE(r.status == status, target << " " << r.body);
    CHECK(r.header("content-type") == "application/problem+json");
    CHECK(r.code() == code);
  };
  check(stream_path("s1"), {}, 401, "UNAUTHORIZED");
  check(stream_path("s1"), {{"X-API-Key", "wrong"}}, 401, "UNAUTHORIZED");
  check(stream_path("never-written"), {{"X-API-Key", acme_key}}, 404, "ENTITY_NOT_FOUND");
  check("/v1/entities/nope/s1/facts/stream", {{"X-API-Key", acme_key}}, 404, "UNKNOWN_ENTITY_TYPE");
  check(stream_path("s1") + "?after_seq=-1", {{"X-API-Key", acme_key}}, 400, "INVALID_QUERY");
  check(stream_path("s1") + "?colour=red", {{"X-API-Key", acme_key}}, 400, "INVALID_QUERY");
  check(stream_path("s1"), {{"X-API-Key", acme_key}, {"Last-Event-ID", "x1"}}, 400,
        "INVALID_LAST_EVENT_ID");
  check(stream_path("s1"),
        {{"X-API-Key", acme_key},
         {"Connection", "Upgrade"},
         {"Upgrade", "websocket"},
         {"Sec-WebSocket-Version", "13"},
         {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}},
        404, "ROUTE_NOT_FOUND");
  // Another tenant's key names another entity (its own ledger/s1), which was never written.
  check(stream_path("s1"), {{"X-API-Key", globex_key}}, 404, "ENTITY_NOT_FOUND");
  CHECK(metric(fx, "factum_fact_streams") == 0);
  CHECK(metric(fx, "factum_fact_streams_accepted_total") == 0);
}

TEST_CASE("fact stream: resuming with Last-Event-ID loses and repeats nothing while a client "
          "appends") {
  gateway_fixture fx;
  constexpr int total = 300;
  append_n(fx.port(), "r1", 1);
  std::atomic<bool> appending{true};
  std::thread writer([&] {
    append_n(fx.port(), "r1", total - 1, acme_key, 1);
    appending = false;
  });
  std::vector<int64_t> seen;
  std::map<int64_t, std::string> hash_of;
  std::string last_id; // none: from the start
  int reconnects = 0;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (seen.size() < static_cast<size_t>(total) && std::chrono::steady_clock::now() < deadline) {
    sse_client s(fx.port());
    REQUIRE(s.open(stream_path("r1"), acme_key, last_id) == 200);
    CHECK(s.head().find("text/event-stream") != std::string::npos);
    // Read a few dozen events, then go away (until the writer is done: then read to the end).
    for (int i = 0; i < 40 || !appending; ++i) {
      auto e = s.next(5s);
      if (!e)
        break;
      if (e->comment)
        continue;
      REQUIRE(e->event.empty());
      auto f = json::parse(e->data);
      REQUIRE(std::to_string(f["seq"].get<int64_t>()) == e->id);
      CHECK(f["tenant_id"] == "acme");
      seen.push_back(f["seq"].get<int64_t>());
      hash_of[f["seq"].get<int64_t>()] = f["hash"].get<std::string>();
      last_id = e->id;
      if (seen.size() == static_cast<size_t>(total))
        break;
    }
    ++reconnects;
  }
  writer.join();
  REQUIRE(seen.size() == static_cast<size_t>(total));
  for (size_t i = 0; i < seen.size(); ++i)
    REQUIRE(seen[i] == static_cast<int64_t>(i + 1)); // in order, none lost, none twice
  CHECK(reconnects >= 3);
  auto stored = fx.facts("acme", "ledger", "r1");
  REQUIRE(stored.size() == static_cast<size_t>(total));
  for (auto& f : stored)
    CHECK(hash_of[f["seq"].get<int64_t>()] == f["hash"].get<std::string>());
  // ?after_seq= resumes too.
  sse_client s(fx.port());
  REQUIRE(s.open(stream_path("r1") + "?after_seq=" + std::to_string(total - 2), acme_key) == 200);
  auto e = s.next();
  REQUIRE(e);
  CHECK(e->id == std::to_string(total - 1));
}

TEST_CASE("fact stream: a slow reader is cut off with an overflow event naming its last seq") {
  gateway_fixture fx(
    [](runtime_config&, http_server_config& hc) { hc.limits.stream_max_queue_bytes = 16 * 1024; });
  append_n(fx.port(), "slow", 1);
  sse_client s(fx.port(), 4096);
  REQUIRE(s.open(stream_path("slow"), acme_key) == 200);
  auto first = s.next();
  REQUIRE(first);
  CHECK(first->id == "1");
  // The client stops reading; 32 KiB facts arrive until the stream gives up on it (after the
  // kernel's socket buffers, up to tcp_wmem's 4 MiB, are full).
  std::thread writer([&] {
    http_client c(fx.port());
    for (int i = 0;
         i < 1000 && metric(fx, "factum_fact_streams_closed_total{reason=\"overflow\"}") == 0;
         ++i) {
      auto r = c.request("POST", "/v1/entities/ledger/slow/append",
                         json_headers(acme_key, "slow-" + std::to_string(i)),
                         append_body(std::string(32 * 1024, 'y')).dump());
      REQUIRE(r.status == 200);
    }
  });
  CHECK(eventually(
    [&] { return metric(fx, "factum_fact_streams_closed_total{reason=\"overflow\"}") == 1; }, 30s));
  writer.join();
  // What it reads now: contiguous facts from 2, then the overflow event naming the last of them.
  int64_t expect = 2;
  std::optional<sse_event> e;
  while ((e = s.next(5s)) && e->event.empty())
    if (!e->comment)
      REQUIRE(e->id == std::to_string(expect++));
  REQUIRE(e);
  CHECK(e->event == "overflow");
  auto d = json::parse(e->data);
  CHECK(d["last_seq"] == expect - 1);
  CHECK(d["code"] == "SLOW_READER");
  CHECK_FALSE(s.next(5s));
  CHECK(s.ended());
  CHECK(eventually([&] { return metric(fx, "factum_fact_streams") == 0; }));
  // It resumes from there and gets the rest.
  auto stored = fx.facts("acme", "ledger", "slow").size();
  sse_client again(fx.port());
  REQUIRE(again.open(stream_path("slow"), acme_key, std::to_string(expect - 1)) == 200);
  for (auto seq = expect; seq <= static_cast<int64_t>(stored); ++seq) {
    auto f = again.next();
    REQUIRE(f);
    REQUIRE(f->id == std::to_string(seq));
  }
}

TEST_CASE("fact stream: streams count against the caps, the gauges and keep-alives") {
  gateway_fixture fx([](runtime_config&, http_server_config& hc) {
    hc.limits.stream_max_connections_per_entity = 2;
    hc.limits.stream_max_connections_per_tenant = 3;
    hc.limits.stream_keepalive = 100ms;
  });
  for (auto id : {"c1", "c2", "c3"})
    append_n(fx.port(), id, 1);
  // The appenders' connections are gone: from here on the server holds the streams' only.
  REQUIRE(eventually([&] { return metric(fx, "factum_http_connections") == 0; }));
  std::vector<std::unique_ptr<sse_client>> open;
  auto start = [&](const std::string& id) {
    auto s = std::make_unique<sse_client>(fx.port());
    int status = s->open(stream_path(id), acme_key);
    if (status == 200)
      open.push_back(std::move(s)); // a refused one is closed here
    return status;
  };
  CHECK(start("c1") == 200);
  CHECK(start("c1") == 200);
  CHECK(start("c1") == 429); // the entity's cap
  CHECK(start("c2") == 200);
  CHECK(start("c3") == 429); // the tenant's cap
  CHECK(metric(fx, "factum_fact_streams") == 3);
  CHECK(metric(fx, "factum_fact_streams_refused_total{reason=\"limit\"}") == 2);
  CHECK(eventually([&] { return metric(fx, "factum_http_connections") == 3; }));
  // Another tenant has caps of its own.
  append_n(fx.port(), "c1", 1, globex_key);
  sse_client g(fx.port());
  CHECK(g.open(stream_path("c1"), globex_key) == 200);
  // An idle stream sends keep-alive comments.
  auto first = open[0]->next();
  REQUIRE(first);
  CHECK(first->id == "1");
  auto ka = open[0]->next(5s);
  REQUIRE(ka);
  CHECK(ka->comment);
  // A client that goes away frees its place.
  open[0]->close();
  CHECK(eventually([&] { return metric(fx, "factum_fact_streams") == 3; }));
  CHECK(metric(fx, "factum_fact_streams_closed_total{reason=\"client\"}") >= 1);
  CHECK(start("c1") == 200);
}

TEST_CASE("fact stream: a fact whose sync fails is not sent, and what is sent later is what is "
          "stored") {
  std::atomic<bool> fail_sync{false};
  gateway_fixture fx([&](runtime_config& rc, http_server_config&) {
    rc.storage_fault = [&](uint64_t, std::string_view what) {
      return fail_sync.load() && what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    };
  });
  append_n(fx.port(), "q1", 1);
  sse_client s(fx.port());
  REQUIRE(s.open(stream_path("q1"), acme_key) == 200);
  auto first = s.next();
  REQUIRE(first);
  CHECK(first->id == "1");
  http_client c(fx.port());
  fail_sync = true;
  auto r = c.request("POST", "/v1/entities/ledger/q1/append", json_headers(acme_key, "q-1"),
                     append_body("lost?").dump());
  CHECK(r.status == 503);
  // Its commit reached the WAL, its sync failed: the stream says nothing of it.
  auto none = s.next(500ms);
  CHECK((!none || none->comment));
  fail_sync = false;
  REQUIRE(c.request("POST", "/v1/entities/ledger/q1/append", json_headers(acme_key, "q-2"),
                    append_body("kept").dump())
            .status == 200);
  // After the entity's re-sync, the stream sends exactly what the file holds after seq 1.
  auto stored = fx.facts("acme", "ledger", "q1");
  REQUIRE(stored.size() >= 2);
  for (size_t i = 1; i < stored.size(); ++i) {
    auto e = s.next();
    REQUIRE(e);
    auto f = json::parse(e->data);
    CHECK(f["seq"] == stored[i]["seq"]);
    CHECK(f["hash"] == stored[i]["hash"]);
  }
}

TEST_CASE("fact stream: another tenant's stream sees none of the first's facts") {
  gateway_fixture fx;
  append_n(fx.port(), "t1", 3);
  append_n(fx.port(), "t1", 2, globex_key);
  sse_client s(fx.port());
  REQUIRE(s.open(stream_path("t1"), globex_key) == 200);
  std::thread writer([&] { append_n(fx.port(), "t1", 5, acme_key, 7); });
  writer.join();
  append_n(fx.port(), "t1", 1, globex_key, 9);
  for (int i = 1; i <= 3; ++i) {
    auto e = s.next();
    REQUIRE(e);
    auto f = json::parse(e->data);
    CHECK(f["tenant_id"] == "globex");
    CHECK(f["seq"] == i);
  }
  // Nothing of acme's 8 facts follows.
  auto extra = s.next(500ms);
  CHECK((!extra || extra->comment));
}

} // namespace factum::test
