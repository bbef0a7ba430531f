// ws_hub_test.cpp: the gateway's hub of WebSocket connections alone, with recording links: the
// per-entity and per-tenant caps, pending connections (reached by id, not listed or broadcast
// to), tags and attachments, frames only to the entity's own connections, links that are gone.
#include <doctest/doctest.h>

#include "ws/ws_hub.hpp"

using namespace factum;
using factum::http::ws_hub;
using factum::http::ws_link;

namespace {

struct recording_link final : ws_link {
  std::vector<std::string> got;
  void send(std::shared_ptr<const std::string> data, bool binary) override {
    got.push_back((binary ? "b:" : "t:") + *data);
  }
  void close(int code, std::string reason) override {
    got.push_back("close:" + std::to_string(code) + ":" + reason);
  }
};

outgoing_frame to(std::string conn, std::string data) {
  outgoing_frame f;
  f.conn_id = std::move(conn);
  f.data = std::move(data);
  return f;
}

outgoing_frame to_tag(std::string tag, std::string data) {
  outgoing_frame f;
  f.broadcast = true;
  f.tag = std::move(tag);
  f.data = std::move(data);
  return f;
}

} // namespace

TEST_CASE("ws hub: caps per entity and per tenant count pending connections, removal frees") {
  ws_hub hub(2, 3);
  entity_key a{"acme", "room", "a"}, b{"acme", "room", "b"}, g{"globex", "room", "a"};
  auto l = std::make_shared<recording_link>();
  auto a1 = hub.admit(a, {}, l), a2 = hub.admit(a, {}, l), a3 = hub.admit(a, {}, l);
  CHECK_FALSE(a1.id.empty());
  CHECK_FALSE(a2.id.empty());
  CHECK(a1.id != a2.id);
  CHECK(a3.id.empty());
  CHECK(a3.why == ws_hub::admission::refusal::entity_full);
  auto b1 = hub.admit(b, {}, l), b2 = hub.admit(b, {}, l);
  CHECK_FALSE(b1.id.empty());
  CHECK(b2.why == ws_hub::admission::refusal::tenant_full);
  CHECK_FALSE(hub.admit(g, {}, l).id.empty()); // another tenant has its own count
  CHECK_FALSE(hub.remove(a1.id).has_value());  // pending: no on_close to run
  CHECK_FALSE(hub.admit(b, {}, l).id.empty());
  CHECK(hub.count_of(a) == 1);
}

TEST_CASE("ws hub: pending connections get frames by id only, open ones are listed by tag in "
          "order of admission, with their attachments") {
  ws_hub hub(10, 10);
  entity_key k{"acme", "room", "r"};
  auto l1 = std::make_shared<recording_link>(), l2 = std::make_shared<recording_link>(),
       l3 = std::make_shared<recording_link>();
  auto c1 = hub.admit(k, {{"name", "ann"}}, l1).id;
  auto c2 = hub.admit(k, {}, l2).id;
  auto c3 = hub.admit(k, {}, l3).id;
  REQUIRE(hub.open(c1, {"member"}, {{"name", "ann"}}));
  REQUIRE(hub.open(c3, {"member", "admin"}, {}));
  CHECK_FALSE(hub.open(c3, {}, {})); // once
  hub.deliver(k, {to(c2, "hi pending"), to_tag("member", "all members"), to_tag("", "every")});
  CHECK(l1->got == std::vector<std::string>{"t:all members", "t:every"});
  CHECK(l2->got == std::vector<std::string>{"t:hi pending"});
  CHECK(l3->got == std::vector<std::string>{"t:all members", "t:every"});
  auto members = hub.connections(k, "member");
  REQUIRE(members.size() == 2);
  CHECK(members[0].id == c1);
  CHECK(members[0].attachment == nlohmann::json{{"name", "ann"}});
  CHECK(members[0].params == nlohmann::json{{"name", "ann"}});
  CHECK(members[1].id == c3);
  CHECK(hub.connections(k, "admin").size() == 1);
  CHECK(hub.open_count() == 2);
  auto gone = hub.remove(c1);
  REQUIRE(gone.has_value());
  CHECK(gone->tags == std::vector<std::string>{"member"});
  CHECK(hub.connections(k, "").size() == 1);
}

TEST_CASE("ws hub: an entity's frames never reach another entity's connection, closes and "
          "binary frames pass, a link that is gone is skipped") {
  ws_hub hub(10, 10);
  entity_key k{"acme", "room", "r"}, other{"acme", "room", "s"};
  auto mine = std::make_shared<recording_link>(), theirs = std::make_shared<recording_link>();
  auto c1 = hub.admit(k, {}, mine).id;
  auto c2 = hub.admit(other, {}, theirs).id;
  REQUIRE(hub.open(c1, {}, {}));
  REQUIRE(hub.open(c2, {}, {}));
  outgoing_frame bin = to(c1, std::string("\x00\x01", 2));
  bin.what = outgoing_frame::kind::binary;
  outgoing_frame cl = to(c1, "done");
  cl.what = outgoing_frame::kind::close;
  cl.code = 4000;
  hub.deliver(k, {to(c2, "not yours"), bin, cl});
  CHECK(theirs->got.empty());
  CHECK(mine->got == std::vector<std::string>{std::string("b:\x00\x01", 4), "close:4000:done"});
  {
    auto brief = std::make_shared<recording_link>();
    auto c3 = hub.admit(k, {}, brief).id;
    REQUIRE(hub.open(c3, {}, {}));
  } // its transport is gone; the hub still holds the record until the transport removes it
  hub.deliver(k, {to_tag("", "x")});
  CHECK(mine->got.back() == "t:x");
}
