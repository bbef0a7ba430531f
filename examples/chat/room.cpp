// room.cpp: examples/chat's `room`, a chat room entity over WebSocket connections. A client
// connects to /v1/entities/room/{id}/ws?name=NAME; it gets the room's recent history (from the
// room's facts) and the members present; each text message it sends becomes a `chat.message`
// fact and is broadcast to every member, the sender included: the sender's copy is its
// acknowledgement (it leaves only once the fact is durable). Presence is derived from the
// connections the gateway holds, so the room may hibernate while members stay connected.
// Runs on its entity's actor thread.
#include "factum/examples/examples.hpp"

namespace factum::examples {

namespace {

using nlohmann::json;

/// Messages of history a member gets when it connects.
constexpr int64_t history_size = 50;
/// Longest name and message, in bytes.
constexpr size_t max_name = 32;
constexpr size_t max_text = 4000;

class room final : public entity {
 public:
  task<connect_decision> on_connect(context& ctx, const connection& conn) override {
    auto name = conn.params.value("name", std::string());
    if (name.empty() || name.size() > max_name)
      co_return connect_decision::refuse(4400, "give a name of 1 to 32 bytes: ?name=...");
    ctx.send(conn.id, json{{"type", "history"}, {"messages", history(ctx)}}.dump());
    auto members = names(ctx.connections("member"));
    members.push_back(name);
    ctx.broadcast("member", json{{"type", "joined"}, {"name", name}}.dump());
    ctx.send(conn.id, json{{"type", "presence"}, {"members", members}}.dump());
    co_return connect_decision::accept_with({"member"}, {{"name", name}});
  }

  task<void> on_message(context& ctx, const connection& conn, const ws_message& m) override {
    if (m.binary || m.data.empty() || m.data.size() > max_text) {
      ctx.send(conn.id, json{{"type", "error"}, {"detail", "send text of 1 to 4000 bytes"}}.dump());
      co_return;
    }
    auto name = conn.attachment.value("name", std::string("?"));
    fact_draft d;
    d.type = "chat.message";
    d.data = {{"name", name}, {"text", m.data}};
    auto f = ctx.append(std::move(d));
    ctx.broadcast("member", json{{"type", "message"},
                                 {"seq", f.seq},
                                 {"name", name},
                                 {"text", m.data},
                                 {"ts", f.timestamp_ms}}
                              .dump());
    co_return;
  }

  task<void> on_close(context& ctx, const connection& conn, int) override {
    ctx.broadcast(
      "member",
      json{{"type", "left"}, {"name", conn.attachment.value("name", std::string())}}.dump());
    co_return;
  }

 private:
  static json history(context& ctx) {
    fact_filter f;
    f.type = "chat.message";
    f.limit = history_size;
    f.newest_first = true;
    auto facts = ctx.query(f);
    json out = json::array();
    for (auto it = facts.rbegin(); it != facts.rend(); ++it) {
      auto data = json::parse(it->data);
      out.push_back({{"seq", it->seq},
                     {"name", data.value("name", "")},
                     {"text", data.value("text", "")},
                     {"ts", it->timestamp_ms}});
    }
    return out;
  }

  static std::vector<std::string> names(const std::vector<connection>& conns) {
    std::vector<std::string> out;
    for (auto& c : conns)
      out.push_back(c.attachment.value("name", std::string()));
    return out;
  }
};

} // namespace

void add_chat_types(entity_registry& registry) {
  websocket_options ws;
  ws.auto_responses["ping"] = "pong";
  registry.add(type_builder<room>("room").websocket(std::move(ws)).page_size(1024).build());
}

} // namespace factum::examples
