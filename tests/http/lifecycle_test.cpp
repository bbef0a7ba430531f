// lifecycle_test.cpp: graceful stop: requests arriving while the server drains answer 503 and
// in-flight ones finish; a stop under load loses no acknowledged write (restart on the same data
// directory and find every acknowledged seq). Runs on the test thread plus client threads.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <set>

#include "factum/storage/entity_store.hpp"
#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// Whether the file of `k` under `data`, read beside the running runtime, holds a fact of
/// `subtype`: a slow_pair call is inside its turn once its "begin" fact is committed.
bool has_fact(const std::filesystem::path& data, const entity_key& k, const std::string& subtype) {
  store_options ro;
  ro.data_dir = data;
  ro.read_only = true;
  auto s = entity_store::open(ro, k);
  if (!s)
    return false;
  fact_filter filter;
  filter.subtype = subtype;
  auto r = (*s)->query(filter);
  return r && !r->empty();
}

} // namespace

TEST_CASE("stopping: new requests answer 503 UNAVAILABLE and close, in-flight ones finish, new "
          "connections are refused") {
  gateway_fixture f;
  http_client idle(f.port());
  REQUIRE(idle.request("GET", "/healthz").status == 200); // an open keep-alive connection
  auto slow = std::async(std::launch::async, [&] {
    http_client c(f.port());
    return c.request("POST", "/v1/entities/probe/drain/slow_pair", json_headers(acme_key, "s"),
                     json{{"n", 1}, {"ms", 800}}.dump());
  });
  REQUIRE(eventually([&] { // the slow call is inside its turn
    return has_fact(f.data_dir(), entity_key{"acme", "probe", "drain"}, "begin");
  }));
  f.server().begin_shutdown();
  auto refused = idle.request("POST", "/v1/entities/ledger/x/append", json_headers(acme_key, "k"),
                              json{{"type", "x"}}.dump());
  CHECK(refused.status == 503);
  CHECK(refused.code() == "UNAVAILABLE");
  CHECK(refused.header("connection") == "close");
  auto health = http_client(f.port()).request("GET", "/healthz");
  CHECK(health.status == 0); // the listener is closed
  REQUIRE(slow.wait_for(20s) == std::future_status::ready);
  auto done = slow.get();
  CHECK_MESSAGE(done.status == 200, done.body);
  CHECK(done.header("connection") == "close");
  CHECK(f.server().wait_idle(10s));
  CHECK(f.entity_files() == 1); // the refused append never reached the runtime
}

TEST_CASE("a graceful stop under load loses nothing acknowledged") {
  test::temp_dir data;
  std::mutex mu;
  std::vector<std::tuple<std::string, int64_t, std::string>> acked; // id, seq, key
  std::atomic<int> acks{0};
  std::atomic<bool> stop_clients{false};
  {
    gateway_fixture f({}, data.path());
    constexpr int conns = 8;
    std::vector<std::future<void>> clients;
    for (int w = 0; w < conns; ++w)
      clients.push_back(std::async(std::launch::async, [&, w] {
        http_client c(f.port(), 10s);
        auto id = "load" + std::to_string(w % 4);
        for (int i = 0; i < 20'000 && !stop_clients.load(); ++i) {
          auto key = "w" + std::to_string(w) + "-" + std::to_string(i);
          auto r =
            c.request("POST", "/v1/entities/ledger/" + id + "/append", json_headers(acme_key, key),
                      json{{"type", "load"}, {"data", {{"key", key}}}}.dump());
          if (r.status != 200)
            break; // 503 while stopping, or the connection closed
          std::lock_guard<std::mutex> g(mu);
          acked.emplace_back(id, r.json()["seq"].get<int64_t>(), key);
          ++acks;
        }
      }));
    REQUIRE(eventually([&] { return acks.load() >= 300; }, 30s));
    f.stop(); // begin_shutdown, wait_idle, stop the I/O threads, stop the runtime
    stop_clients = true;
    for (auto& c : clients)
      REQUIRE(c.wait_for(30s) == std::future_status::ready);
  }
  REQUIRE(acked.size() >= 300);
  MESSAGE(acked.size() << " appends acknowledged before the stop");
  gateway_fixture again({}, data.path());
  std::map<std::string, std::map<int64_t, std::string>> stored; // id -> seq -> key
  for (int e = 0; e < 4; ++e) {
    auto id = "load" + std::to_string(e);
    for (auto& fa : again.facts("acme", "ledger", id))
      stored[id][fa["seq"].get<int64_t>()] = fa.value("idempotency_key", "");
  }
  size_t missing = 0;
  for (auto& [id, seq, key] : acked) {
    auto it = stored[id].find(seq);
    if (it == stored[id].end() || it->second != key)
      ++missing;
  }
  CHECK(missing == 0);
  auto v = again.rt().call_sync(entity_key{"acme", "ledger", "load0"}, "@verify", "{}");
  CHECK(v.json()["ok"] == true);
}

namespace {

/// The value of the gauge factum_http_in_flight_requests (this request included), or -1.
int64_t in_flight(uint16_t port) {
  auto r = http_client(port).request("GET", "/metrics", {{"X-API-Key", acme_key}});
  auto at = r.body.find("\nfactum_http_in_flight_requests ");
  if (r.status != 200 || at == std::string::npos)
    return -1;
  return std::stoll(r.body.substr(at + 32));
}

} // namespace

TEST_CASE("stopping: the server's stop waits for a rollback on its thread of its own, which "
          "answers before the gateway it uses is gone") {
  test::temp_dir archive;
  gateway_fixture f(
    [&](runtime_config& rc, http_server_config&) { rc.archive_dir = archive.path(); });
  http_client c(f.port());
  REQUIRE(c.request("POST", "/v1/entities/probe/r1/append_then", json_headers(acme_key, "a"), "{}")
            .status == 200);
  // A slow turn keeps the entity active for 6.5 s, longer than the server's stop waits for its
  // connections to close (5 s); a rollback must wait for the turn to end.
  auto slow = std::async(std::launch::async, [&] {
    return http_client(f.port()).request("POST", "/v1/entities/probe/r1/slow_pair",
                                         json_headers(acme_key, "s"),
                                         json{{"n", 1}, {"ms", 6500}}.dump());
  });
  // The rollback goes in once the slow call is inside its turn (sent at once, it could come
  // first, find the entity idle and answer before the slow call began).
  REQUIRE(eventually([&] {
    return has_fact(f.data_dir(), entity_key{"acme", "probe", "r1"}, "begin");
  }));
  auto rollback = std::async(std::launch::async, [&] {
    // A bookmark that is no commit: once the entity is released the rollback answers 404.
    return http_client(f.port()).request("POST", "/v1/entities/probe/r1/rollback/1.1.32.1",
                                         json_headers(acme_key), "{}");
  });
  // Both requests are in (with the metrics request itself: 3).
  REQUIRE(eventually([&] { return in_flight(f.port()) >= 3; }));
  f.server().stop(); // no drain first: the stop itself waits for the rollback's thread

  auto answered = f.log_lines(R"("route":"rollback")");
  INFO("the rollback's log: " << (answered.empty() ? std::string() : answered.front()));
  CHECK(answered.size() == 1); // answered before the stop returned
  // Its answer: 404 once the slow turn ended and the entity was released; or, on a machine so
  // loaded that the release took longer than the rollback waits (10 s), 503 ENTITY_BUSY.
  CHECK(f.log_count(R"("code":"NOT_FOUND")") + f.log_count(R"("code":"ENTITY_BUSY")") == 1);
  REQUIRE(slow.wait_for(20s) == std::future_status::ready);
  REQUIRE(rollback.wait_for(20s) == std::future_status::ready);
}

namespace {

/// This process's descriptors that are no file: epoll, eventfd and timerfd instances (each of
/// the server's io_contexts holds some).
int anon_descriptors() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("anon_inode:", 0) == 0)
      ++n;
  }
  return n;
}

} // namespace

TEST_CASE("stopping: a reply that comes after the stop's grace is dropped and the server freed "
          "(queued in the stopped I/O context, it held its connection, and the connection the "
          "server, for good)") {
  int before = anon_descriptors();
  {
    gateway_fixture f;
    // A turn of 6.5 s: its reply comes after the stop's 5 s grace, the I/O threads stopped.
    auto slow = std::async(std::launch::async, [&] {
      return http_client(f.port()).request("POST", "/v1/entities/probe/late/slow_pair",
                                           json_headers(acme_key, "s"),
                                           json{{"n", 1}, {"ms", 6500}}.dump());
    });
    REQUIRE(eventually([&] { return in_flight(f.port()) >= 2; }));
    f.server().stop(); // closes the connection; the call goes on in the runtime
    REQUIRE(slow.wait_for(20s) == std::future_status::ready);
    CHECK(slow.get().status == 0); // no answer: the connection closed under it
    f.stop(); // the runtime's stop: the turn has ended and its reply was handed over
  }
  // The server, its io_context and every connection are gone with the fixture.
  CHECK(anon_descriptors() == before);
}
