// call_errors.cpp: see call_errors.hpp. Pure functions; any thread.
#include "turn/call_errors.hpp"

#include <nlohmann/json.hpp>

namespace factum::detail {

call_error to_call_error(std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const call_error& e) {
    return e;
  } catch (const nlohmann::json::exception& e) {
    return problems::invalid_argument.error(std::string("JSON: ") + e.what());
  } catch (const std::exception& e) {
    return problems::handler_failed.error(e.what());
  } catch (...) {
    return problems::handler_failed.error("unknown exception");
  }
}

} // namespace factum::detail
