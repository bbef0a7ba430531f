// status.cpp: names of error codes. Pure functions; any thread.
#include "factum/error/status.hpp"

namespace factum {

std::string_view to_string(errc code) noexcept {
  switch (code) {
  case errc::ok: return "OK";
  case errc::invalid_argument: return "INVALID_ARGUMENT";
  case errc::not_found: return "NOT_FOUND";
  case errc::conflict: return "CONFLICT";
  case errc::corruption: return "CORRUPTION";
  case errc::not_factum_file: return "NOT_FACTUM_FILE";
  case errc::newer_schema: return "NEWER_SCHEMA";
  case errc::io_error: return "IO_ERROR";
  case errc::full: return "FULL";
  case errc::read_only: return "READ_ONLY";
  case errc::busy: return "BUSY";
  case errc::unavailable: return "UNAVAILABLE";
  case errc::internal: return "INTERNAL";
  case errc::not_owner: return "NOT_OWNER";
  case errc::quota_exceeded: return "QUOTA_EXCEEDED";
  }
  return "INTERNAL";
}

std::string status::to_string() const {
  if (is_ok())
    return "OK";
  std::string s(factum::to_string(code_));
  s += ": ";
  s += message_;
  return s;
}

} // namespace factum
