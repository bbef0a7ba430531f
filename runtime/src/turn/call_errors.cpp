// call_errors.cpp: see call_errors.hpp. Pure functions; any thread.
#include "turn/call_errors.hpp"

#include <nlohmann/json.hpp>

namespace factum::detail {

call_error storage_error(const status& st) {
  switch (st.code()) {
  case errc::invalid_argument:
    return call_error(error_category::client, "INVALID_ARGUMENT", st.message(), 400);
  case errc::not_found: return call_error(error_category::client, "NOT_FOUND", st.message(), 404);
  case errc::conflict:
    return call_error(error_category::data_integrity, "CONFLICT", st.message(), 409);
  case errc::corruption:
  case errc::not_factum_file:
  case errc::newer_schema:
    return call_error(error_category::server, "ENTITY_STORAGE_CORRUPT", st.message(), 500);
  case errc::full: return call_error(error_category::transient, "STORAGE_FULL", st.message(), 503);
  case errc::read_only:
    return call_error(error_category::transient, "STORAGE_READ_ONLY", st.message(), 503);
  case errc::not_owner: // cluster mode: the gateway re-routes it, clients see SHARD_UNAVAILABLE
    return call_error(error_category::transient, "NOT_OWNER", st.message(), 503);
  case errc::quota_exceeded:
    return call_error(error_category::client, "TENANT_QUOTA_EXCEEDED", st.message(), 429);
  case errc::io_error:
  case errc::busy:
  case errc::unavailable:
    return call_error(error_category::transient, "STORAGE_UNAVAILABLE", st.message(), 503);
  default: return call_error(error_category::server, "INTERNAL", st.message(), 500);
  }
}

call_error to_call_error(std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const call_error& e) {
    return e;
  } catch (const nlohmann::json::exception& e) {
    return call_error(error_category::client, "INVALID_ARGUMENT", std::string("JSON: ") + e.what(),
                      400);
  } catch (const std::exception& e) {
    return call_error(error_category::server, "HANDLER_FAILED", e.what(), 500);
  } catch (...) {
    return call_error(error_category::server, "HANDLER_FAILED", "unknown exception", 500);
  }
}

} // namespace factum::detail
