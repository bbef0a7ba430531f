// tool_reply.cpp: what a handler makes of a tool's reply (context.hpp: is_fallback,
// tool_failure). Pure functions; any thread (a handler calls them on its entity's actor thread).
#include "factum/entities/context.hpp"

namespace factum {

bool is_fallback(const tool_reply& r) {
  return r.ok && r.body.is_object() && r.body.value("fallback", false);
}

call_error tool_failure(const tool_reply& r, std::string code, std::string message) {
  call_error e(r.category, r.error_code.empty() ? std::move(code) : r.error_code,
               r.error_message.empty() ? std::move(message) : r.error_message,
               r.error_code == "CIRCUIT_OPEN" ? 503 : 0);
  e.details["attempts"] = r.attempts;
  if (r.http_status)
    e.details["tool_status"] = r.http_status;
  if (!r.dead_letter_id.empty())
    e.details["dead_letter_id"] = r.dead_letter_id;
  return e;
}

} // namespace factum
