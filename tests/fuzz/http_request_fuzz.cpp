// tests/fuzz/http_request_fuzz.cpp: raw bytes -> Beast's request parser (the server's limits)
// -> to_http_request -> gateway::handle over the stub runtime. Properties: no crash or UB, one
// answer per request, every refusal is a well-formed problem+json, and whatever reaches the
// runtime is authenticated, carries a valid entity key and parseable arguments
// (gateway_harness.hpp). A parse failure goes through gateway::reject as in server.cpp.
// Single-threaded.
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>

#include "gateway_harness.hpp"

namespace bhttp = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static factum::fuzz::gateway_harness h;
  bhttp::request_parser<bhttp::string_body> p;
  p.header_limit(16 * 1024);
  p.body_limit(1024 * 1024);
  p.eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  while (!ec && !p.is_done() && used < size) {
    auto n = p.put(boost::asio::buffer(data + used, size - used), ec);
    used += n;
    if (ec == bhttp::error::need_more) { // the input ends inside the message
      ec = {};
      break;
    }
    if (n == 0 && !ec)
      break;
  }
  if (!ec && !p.is_done())
    p.put_eof(ec);
  if (ec || !p.is_done()) {
    std::string verb, target;
    if (p.is_header_done()) {
      verb = std::string(p.get().method_string());
      target = std::string(p.get().target());
    }
    const auto& kind = ec == bhttp::error::body_limit     ? factum::problems::body_too_large
                       : ec == bhttp::error::header_limit ? factum::problems::headers_too_large
                                                          : factum::problems::bad_request;
    h.reject(kind, "malformed HTTP request: " + ec.message(), verb, target);
    return 0;
  }
  auto msg = p.release();
  auto req = factum::http::to_http_request(msg);
  h.run(req);
  return 0;
}
