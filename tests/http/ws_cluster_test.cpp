// ws_cluster_test.cpp: WebSocket connections in cluster mode, with two real in-process servers
// and a scripted cluster (scripted_cluster.hpp): a client connected to a node that does not own
// the room is relayed to the owner, which holds the connection and runs its turns; the owner's
// refusal reaches the client; a shard leaving the owner (runtime::release_entities) closes its
// connections with 1012, directly and through the relay; an owner that cannot be reached answers
// 503 before the handshake. Clients are synchronous Boost.Beast WebSocket clients on the test
// thread.
#include <doctest/doctest.h>

#include <future>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "factum/examples/examples.hpp"
#include "http/fixture.hpp"
#include "http/scripted_cluster.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

/// A blocking WebSocket client with a read timeout.
class ws_client {
 public:
  ws_client(uint16_t port, const std::string& target, const std::string& key = acme_key)
      : ws_(ioc_) {
    tcp::resolver r(ioc_);
    beast::get_lowest_layer(ws_).connect(*r.resolve("127.0.0.1", std::to_string(port)).begin());
    ws_.set_option(websocket::stream_base::decorator(
      [key](websocket::request_type& m) { m.set("X-API-Key", key); }));
    // The asynchronous handshake: Boost 1.74's synchronous one leaves `res_` empty when the
    // server declines the upgrade.
    ws_.async_handshake(res_, "127.0.0.1", target, [this](beast::error_code ec) { ec_ = ec; });
    ioc_.run();
    ioc_.restart();
  }
  /// The handshake's status (101 when it opened).
  unsigned status() const { return res_.result_int(); }
  bool open() const { return !ec_; }
  /// The next text frame as JSON; or nothing when the connection closed (close_code() says how).
  std::optional<json> next() {
    beast::flat_buffer buf;
    beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(10));
    ws_.read(buf, ec_);
    if (ec_)
      return std::nullopt;
    return json::parse(beast::buffers_to_string(buf.data()));
  }
  /// The next frame of type `type`.
  json next_of(const std::string& type) {
    for (int i = 0; i < 20; ++i) {
      auto m = next();
      REQUIRE_MESSAGE(m.has_value(), ec_.message());
      if ((*m)["type"] == type)
        return *m;
    }
    FAIL("no frame of type " << type);
    return {};
  }
  void send(const std::string& text) { ws_.write(net::buffer(text)); }
  /// Reads until the server closes; its close code.
  int close_code() {
    while (next()) {
    }
    return ec_ == websocket::error::closed ? static_cast<int>(ws_.reason().code) : -1;
  }

 private:
  net::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  websocket::response_type res_;
  beast::error_code ec_;
};

/// Two nodes: `owner` serves the room; `front` owns nothing and relays to the owner.
struct two_nodes {
  std::shared_ptr<scripted_cluster> owner_c = std::make_shared<scripted_cluster>();
  std::shared_ptr<scripted_cluster> front_c = std::make_shared<scripted_cluster>();
  std::unique_ptr<gateway_fixture> owner, front;

  two_nodes() {
    owner = std::make_unique<gateway_fixture>(with_rooms(owner_c));
    front_c->next = forward_route(owner->port(), 7);
    front_c->epoch = 0;
    front = std::make_unique<gateway_fixture>(with_rooms(front_c));
  }
  static gateway_fixture::tweak with_rooms(const std::shared_ptr<scripted_cluster>& c) {
    return [c](runtime_config& rc, http_server_config& hc) {
      with_cluster(c)(rc, hc);
      examples::add_chat_types(rc.types);
    };
  }
};

} // namespace

TEST_CASE("ws cluster: a client of a node that does not own the room is relayed to the owner, "
          "which holds the connection and runs its turns") {
  two_nodes n;
  ws_client direct(n.owner->port(), "/v1/entities/room/r1/ws?name=ann");
  REQUIRE(direct.status() == 101);
  CHECK(direct.next_of("history")["messages"].empty());
  ws_client relayed(n.front->port(), "/v1/entities/room/r1/ws?name=bob");
  REQUIRE(relayed.status() == 101);
  CHECK(relayed.next_of("presence")["members"] == json{"ann", "bob"});
  CHECK(direct.next_of("joined")["name"] == "bob");
  relayed.send("hello from the front");
  CHECK(relayed.next_of("message")["text"] == "hello from the front");
  CHECK(direct.next_of("message")["text"] == "hello from the front");
  direct.send("and back");
  CHECK(relayed.next_of("message")["text"] == "and back");
  CHECK(n.owner->entity_files() == 1);
  CHECK(n.front->entity_files() == 0);
  CHECK(n.owner->facts("acme", "room", "r1", {{"type", "chat.message"}}).size() == 2);
}

TEST_CASE("ws cluster: the owner's refusal reaches a relayed client: its close code, and its "
          "HTTP answer before the handshake") {
  two_nodes n;
  ws_client no_name(n.front->port(), "/v1/entities/room/r2/ws");
  REQUIRE(no_name.status() == 101);
  CHECK(no_name.close_code() == 4400);
  n.owner_c->when_forwarded = not_owner_route("scripted");
  ws_client moved(n.front->port(), "/v1/entities/room/r2/ws?name=x");
  CHECK_FALSE(moved.open());
  CHECK(moved.status() == 503);
  ws_client unauthenticated(n.front->port(), "/v1/entities/room/r2/ws?name=x", "wrong-key");
  CHECK(unauthenticated.status() == 401);
}

TEST_CASE("ws cluster: a shard leaving the owner closes its connections with 1012, directly and "
          "through the relay") {
  two_nodes n;
  ws_client direct(n.owner->port(), "/v1/entities/room/r3/ws?name=ann");
  REQUIRE(direct.status() == 101);
  ws_client relayed(n.front->port(), "/v1/entities/room/r3/ws?name=bob");
  REQUIRE(relayed.status() == 101);
  relayed.next_of("presence");
  direct.next_of("joined");
  // As a real node does while a shard moves away, the owner refuses new activations of it (the
  // on_close turns then fail NOT_OWNER); released on another thread, so that the clients answer
  // the close handshakes meanwhile.
  n.owner_c->epoch = 0;
  auto released = std::async(std::launch::async, [&] {
    return n.owner->rt().release_entities([](const entity_key& k) { return k.id == "r3"; },
                                          std::chrono::seconds(10));
  });
  CHECK(direct.close_code() == 1012);
  CHECK(relayed.close_code() == 1012);
  CHECK(released.get() == 0);
  CHECK(eventually([&] {
    auto m = n.owner->server().metrics_text();
    return m.find("factum_ws_connections 0\n") != std::string::npos &&
           m.find("factum_ws_closed_total{reason=\"moved\"} 2\n") != std::string::npos;
  }));
  CHECK(eventually([&] { // counted once the client's answer to the close came back
    return n.front->server().metrics_text().find("factum_ws_closed_total{reason=\"moved\"} 1\n") !=
           std::string::npos;
  }));
}

TEST_CASE("ws cluster: an owner that cannot be reached answers 503 SHARD_UNAVAILABLE before the "
          "handshake") {
  auto front_c = std::make_shared<scripted_cluster>();
  front_c->next.to = shard_route::where::forward;
  {
    net::io_context ioc; // a port nobody listens on: bound, then closed
    tcp::acceptor a(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    front_c->next.address = "127.0.0.1:" + std::to_string(a.local_endpoint().port());
  }
  front_c->epoch = 0;
  gateway_fixture front(two_nodes::with_rooms(front_c));
  ws_client c(front.port(), "/v1/entities/room/r4/ws?name=x");
  CHECK_FALSE(c.open());
  CHECK(c.status() == 503);
  CHECK(front.log_count("SHARD_UNAVAILABLE") == 1);
}
