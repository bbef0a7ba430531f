// call_request.hpp (private): a call as it travels to an entity actor. A plain value; any thread.
#pragma once

#include <string>

namespace factum {

/// A call as it travels to an entity actor.
struct call_request {
  std::string method;
  std::string args; ///< JSON text
  std::string idempotency_key;
  std::string trace_id;
  std::string fingerprint;
};

} // namespace factum
