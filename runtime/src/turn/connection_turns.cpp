// connection_turns.cpp: the turns of WebSocket connections (turn_runner.hpp): a connection
// asked for (entity::on_connect), a message (on_message), a connection gone (on_close). The
// gateway starts them as calls of the internal methods @ws_connect, @ws_message and @ws_close
// (clients cannot name a method starting with '@'); their arguments carry the connection as
// the gateway holds it. Runs on the entity's actor thread.
#include "factum/storage/base64.hpp"
#include "factum/storage/utf8.hpp"
#include "turn/entity_context.hpp"
#include "turn/turn_runner.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// Most tags a connection may have, and the longest tag.
constexpr size_t max_tags = 16;
constexpr size_t max_tag_bytes = 64;
/// Largest attachment, serialised.
constexpr size_t max_attachment_bytes = 4096;

call_error bad_decision(const std::string& detail) {
  return problems::invalid_connect_decision.error("on_connect's decision is not valid: " + detail);
}

/// Checks what on_connect decided and writes it as the turn's result.
json decision_json(const connect_decision& d) {
  if (d.accept) {
    if (d.tags.size() > max_tags)
      throw bad_decision("more than 16 tags");
    for (auto& t : d.tags)
      if (t.empty() || t.size() > max_tag_bytes || !valid_utf8(t))
        throw bad_decision("a tag is 1 to 64 bytes of UTF-8");
    if (!d.attachment.is_object())
      throw bad_decision("the attachment must be a JSON object");
    if (d.attachment.dump().size() > max_attachment_bytes)
      throw bad_decision("the attachment exceeds 4 KiB");
    return {{"accept", true}, {"tags", d.tags}, {"attachment", d.attachment}};
  }
  bool code_ok =
    d.close_code == 1000 || d.close_code == 1008 || (d.close_code >= 3000 && d.close_code <= 4999);
  if (!code_ok)
    throw bad_decision("a refusal's close code is 1000, 1008 or 3000-4999");
  if (d.reason.size() > 123 || !valid_utf8(d.reason))
    throw bad_decision("a refusal's reason is UTF-8 of at most 123 bytes");
  return {{"accept", false}, {"close_code", d.close_code}, {"reason", d.reason}};
}

connection connection_of(const json& args) {
  connection c;
  const auto& j = args.at("conn");
  c.id = j.at("id").get<std::string>();
  if (auto it = j.find("tags"); it != j.end())
    c.tags = it->get<std::vector<std::string>>();
  if (auto it = j.find("attachment"); it != j.end())
    c.attachment = *it;
  if (auto it = j.find("params"); it != j.end())
    c.params = *it;
  return c;
}

} // namespace

bool is_connection_turn(const std::string& method) {
  return method == "@ws_connect" || method == "@ws_message" || method == "@ws_close";
}

void turn_runner::run_connection_turn(const std::string& method, const json& args) {
  if (!env_.type->websocket)
    throw problems::websocket_not_supported.error("entity type " + env_.key->type +
                                                  " accepts no WebSocket connections");
  auto& t = *turn_;
  // The handler keeps references to these across its awaits: they live in the turn's state.
  t.conn = connection_of(args);
  if (method == "@ws_connect") {
    start_task(instance_->on_connect(*ctx_, t.conn),
               [this](std::exception_ptr e, std::optional<connect_decision> d) {
                 if (e || !d)
                   return finish(e, std::nullopt);
                 try {
                   finish(nullptr, decision_json(*d));
                 } catch (...) {
                   finish(std::current_exception(), std::nullopt);
                 }
               });
    return;
  }
  if (method == "@ws_message") {
    if (auto it = args.find("binary_b64"); it != args.end()) {
      auto bytes = base64_decode(it->get<std::string>());
      if (!bytes)
        throw problems::invalid_message.error("binary_b64 is not base64");
      t.message = ws_message{true, std::move(*bytes)};
    } else {
      t.message = ws_message{false, args.at("text").get<std::string>()};
    }
    start_task(instance_->on_message(*ctx_, t.conn, t.message),
               [this](std::exception_ptr e) { finish(e, json(nullptr)); });
    return;
  }
  int code = args.value("code", 1005);
  start_task(instance_->on_close(*ctx_, t.conn, code),
             [this](std::exception_ptr e) { finish(e, json(nullptr)); });
}

} // namespace factum::detail
