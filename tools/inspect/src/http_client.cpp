// http_client.cpp: the synchronous HTTP/1.1 client of `factum inspect --server` (Boost.Beast,
// header-only). The only translation unit of factum_inspect that includes Beast or Asio. Each
// call runs its own io_context on the calling thread until the exchange ends or times out.
#include "http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace factum::tools {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

result<http_endpoint> parse_http_url(std::string_view url) {
  auto bad = [&](std::string why) {
    return status{errc::invalid_argument,
                  "bad --server URL \"" + std::string(url.substr(0, 200)) + "\": " + why};
  };
  if (url.rfind("https://", 0) == 0)
    return status{errc::invalid_argument,
                  "https is not supported: factum inspect speaks plain HTTP to a server on this "
                  "machine (http://127.0.0.1:PORT); reach a remote server through an SSH tunnel"};
  if (url.rfind("http://", 0) != 0)
    return bad("it must start with http://");
  auto rest = url.substr(7);
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.empty())
    return bad("no host");
  if (authority.find('@') != std::string_view::npos)
    return bad("user information is not supported");
  if (path.find_first_of("?#") != std::string_view::npos)
    return bad("no query or fragment allowed");
  http_endpoint ep;
  std::string_view port;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return bad("unclosed '['");
    ep.host = std::string(authority.substr(1, close - 1));
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return bad("junk after ']'");
      port = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    ep.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos)
      port = authority.substr(colon + 1);
  }
  if (ep.host.empty())
    return bad("no host");
  if (!port.empty() || authority.back() == ':') {
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos ||
        std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535)
      return bad("bad port");
    ep.port = std::string(port);
  }
  std::string base(path);
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  ep.base_path = base;
  return ep;
}

result<http_response> http_get(const http_endpoint& ep, const std::string& target,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               std::chrono::milliseconds timeout) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(ep.host, ep.port, ec);
  if (ec)
    return status{errc::unavailable, "cannot resolve " + ep.host + ": " + ec.message()};
  for (const auto& e : endpoints)
    if (!e.endpoint().address().is_loopback())
      return status{errc::invalid_argument,
                    "refusing to send the API key in clear text to " +
                      e.endpoint().address().to_string() +
                      ": --server must be a loopback address (127.0.0.1, ::1, localhost)"};

  http::request<http::empty_body> req{http::verb::get, ep.base_path + target, 11};
  req.set(http::field::host, ep.host + ":" + ep.port);
  req.set(http::field::user_agent, "factum-inspect");
  req.set(http::field::accept, "application/json");
  req.set(http::field::connection, "close");
  for (auto& [name, value] : headers)
    req.set(name, value);

  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u * 1024 * 1024);
  beast::error_code result_ec;
  std::string stage = "connect to";
  stream.expires_after(timeout); // one deadline for the whole exchange
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) {
      result_ec = e;
      return;
    }
    stage = "send the request to";
    http::async_write(stream, req, [&](beast::error_code e2, std::size_t) {
      if (e2) {
        result_ec = e2;
        return;
      }
      stage = "read the response of";
      http::async_read(stream, buffer, parser,
                       [&](beast::error_code e3, std::size_t) { result_ec = e3; });
    });
  });
  ioc.run();
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  std::string where = "http://" + ep.host + ":" + ep.port;
  if (result_ec == beast::error::timeout)
    return status{errc::unavailable, "timed out after " + std::to_string(timeout.count()) +
                                       " ms trying to " + stage + " " + where};
  if (result_ec)
    return status{errc::unavailable, "cannot " + stage + " " + where + ": " + result_ec.message()};
  auto& res = parser.get();
  http_response out;
  out.status = res.result_int();
  out.reason = std::string(res.reason());
  out.content_type = std::string(res[http::field::content_type]);
  out.body = std::move(res.body());
  return out;
}

} // namespace factum::tools
