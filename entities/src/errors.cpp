// errors.cpp: the error taxonomy's names, statuses and retry rules. Pure functions; any thread.
#include "factum/entities/errors.hpp"
#include "factum/entities/call.hpp"

namespace factum {

std::string_view to_string(error_category c) noexcept {
  switch (c) {
  case error_category::transient: return "transient";
  case error_category::server: return "server";
  case error_category::external: return "external";
  case error_category::client: return "client";
  case error_category::data_integrity: return "data_integrity";
  case error_category::authorization: return "authorization";
  case error_category::budget: return "budget";
  }
  return "server";
}

std::optional<error_category> parse_error_category(std::string_view s) noexcept {
  for (auto c : {error_category::transient, error_category::server, error_category::external,
                 error_category::client, error_category::data_integrity,
                 error_category::authorization, error_category::budget})
    if (to_string(c) == s)
      return c;
  return std::nullopt;
}

bool retryable(error_category c, bool idempotent) noexcept {
  switch (c) {
  case error_category::transient:
  case error_category::external: return true;
  case error_category::server: return idempotent;
  default: return false;
  }
}

int default_http_status(error_category c) noexcept {
  switch (c) {
  case error_category::transient: return 503;
  case error_category::server: return 500;
  case error_category::external: return 502;
  case error_category::client: return 400;
  case error_category::data_integrity: return 409;
  case error_category::authorization: return 403;
  case error_category::budget: return 402;
  }
  return 500;
}

call_error client_error(std::string code, std::string message) {
  return call_error(error_category::client, std::move(code), std::move(message), 400);
}
call_error not_found_error(std::string code, std::string message) {
  return call_error(error_category::client, std::move(code), std::move(message), 404);
}
call_error conflict_error(std::string code, std::string message) {
  return call_error(error_category::data_integrity, std::move(code), std::move(message), 409);
}
call_error transient_error(std::string code, std::string message) {
  return call_error(error_category::transient, std::move(code), std::move(message), 503);
}
call_error external_error(std::string code, std::string message) {
  return call_error(error_category::external, std::move(code), std::move(message), 502);
}

namespace {
std::string title_for(int status) {
  switch (status) {
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 402: return "Payment Required";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 413: return "Content Too Large";
  case 415: return "Unsupported Media Type";
  case 422: return "Unprocessable Content";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 507: return "Insufficient Storage";
  default: return "Error";
  }
}
} // namespace

call_reply call_reply::success(std::string result_json) {
  call_reply r;
  r.ok = true;
  r.body = std::move(result_json);
  return r;
}

call_reply call_reply::failure(error_category c, std::string code, std::string detail,
                               int http_status) {
  call_reply r;
  r.ok = false;
  r.http_status = http_status ? http_status : default_http_status(c);
  r.code = std::move(code);
  r.category = std::string(to_string(c));
  r.retryable = factum::retryable(c);
  nlohmann::json p = {{"type", "urn:factum:problem:" + r.code},
                      {"title", title_for(r.http_status)},
                      {"status", r.http_status},
                      {"detail", std::move(detail)},
                      {"code", r.code},
                      {"category", r.category}};
  r.body = p.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

call_reply call_reply::failure(const call_error& e) {
  auto r = failure(e.category(), e.code(), e.what(), e.http_status());
  if (!e.details.empty()) {
    auto p = nlohmann::json::parse(r.body);
    for (auto& [k, v] : e.details.items())
      if (!p.contains(k))
        p[k] = v;
    r.body = p.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return r;
}

} // namespace factum
