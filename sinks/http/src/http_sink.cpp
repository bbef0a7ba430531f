// http_sink.cpp: the outbox's HTTP sink (factum/sinks/http_tool.hpp): a fact as a POST over the
// tool transport, its fact_id as the Idempotency-Key, and what the answer means for delivery.
// Called on the entity's CAF worker; the transport's `done` runs on the tool client's thread.
#include <nlohmann/json.hpp>

#include "factum/sinks/http_tool.hpp"

namespace factum {

outbox_ack outbox_ack_of(const tool_reply& r) {
  outbox_ack a;
  if (r.http_status >= 200 && r.http_status < 300) {
    a.result = outbox_ack::outcome::acknowledged;
    return a;
  }
  a.error_message = r.error_message;
  a.retry_after_ms = r.retry_after_ms;
  if (r.http_status == 0) { // no answer: timeout, connection refused or reset, full pool
    a.error_code = r.error_code.empty() ? "NO_ANSWER" : r.error_code;
    a.result = outbox_ack::outcome::retry;
    return a;
  }
  a.error_code = "HTTP_" + std::to_string(r.http_status);
  bool again = r.http_status == 429 || r.http_status == 408 || r.http_status >= 500;
  a.result = again ? outbox_ack::outcome::retry : outbox_ack::outcome::refused;
  if (a.error_message.empty() && !r.body.is_null())
    a.error_message = r.body.dump().substr(0, 500);
  return a;
}

outbox_fn http_outbox_sink(std::string name, tool_fn transport) {
  return [name = std::move(name), transport = std::move(transport)](
           const outbox_message& m, std::function<void(outbox_ack)> done) {
    tool_request req;
    req.tool = name;
    req.payload = nlohmann::json::parse(m.body, nullptr, false);
    req.idempotency_key = m.fact_id;
    if (req.payload.is_object())
      req.trace_id = req.payload.value("trace_id", std::string());
    transport(req, [done = std::move(done)](tool_reply r) { done(outbox_ack_of(r)); });
  };
}

} // namespace factum
