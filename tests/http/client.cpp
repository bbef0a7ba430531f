// client.cpp: the synchronous HTTP/1.1 test client (see client.hpp), on Boost.Beast. The only
// Beast translation unit of the tests. Each exchange runs the client's own io_context on the
// calling thread until it completes or its deadline passes.
#include "http/client.hpp"

#include <optional>
#include <sstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace factum::test {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct http_client::impl {
  uint16_t port;
  std::chrono::milliseconds timeout;
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  /// Runs the io_context until the started operation completed.
  void run() {
    ioc.restart();
    ioc.run();
  }

  beast::error_code connect() {
    if (stream)
      return {};
    buffer.clear();
    stream.emplace(ioc);
    stream->expires_after(timeout);
    beast::error_code out;
    stream->async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                          [&](beast::error_code ec) { out = ec; });
    run();
    if (out)
      stream.reset();
    else
      stream->socket().set_option(tcp::no_delay(true), out);
    return out;
  }

  void close() {
    if (!stream)
      return;
    beast::error_code ec;
    stream->socket().shutdown(tcp::socket::shutdown_both, ec);
    stream->socket().close(ec);
    stream.reset();
    buffer.clear();
  }

  beast::error_code write_bytes(const std::string& bytes, std::chrono::milliseconds t) {
    beast::error_code out;
    stream->expires_after(t);
    net::async_write(*stream, net::buffer(bytes), [&](beast::error_code ec, size_t) { out = ec; });
    run();
    return out;
  }

  http_reply read_reply(std::chrono::milliseconds t) {
    http_reply r;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    beast::error_code out;
    stream->expires_after(t);
    bhttp::async_read(*stream, buffer, parser, [&](beast::error_code ec, size_t) { out = ec; });
    run();
    if (out) {
      r.error = out.message();
      close();
      return r;
    }
    auto msg = parser.release();
    r.status = static_cast<int>(msg.result_int());
    for (auto& f : msg) {
      std::string name(f.name_string());
      for (auto& c : name)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(f.value());
    }
    r.body = std::move(msg.body());
    if (!msg.keep_alive())
      close();
    else
      stream->expires_never();
    return r;
  }
};

http_client::http_client(uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  impl_->port = port;
  impl_->timeout = timeout;
}

http_client::~http_client() {
  impl_->close();
}

bool http_client::connect() {
  return !impl_->connect();
}

void http_client::close() {
  impl_->close();
}

http_reply http_client::request(const std::string& verb, const std::string& target,
                                const header_list& headers, const std::string& body) {
  bhttp::request<bhttp::string_body> req;
  req.method_string(verb);
  req.target(target);
  req.version(11);
  req.set(bhttp::field::host, "127.0.0.1");
  for (auto& [k, v] : headers)
    req.insert(k, v);
  req.body() = body;
  req.prepare_payload();
  req.keep_alive(true);
  std::string bytes;
  {
    std::ostringstream os;
    os << req;
    bytes = os.str();
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = impl_->stream.has_value();
    if (auto ec = impl_->connect()) {
      http_reply r;
      r.error = "connect: " + ec.message();
      return r;
    }
    if (auto ec = impl_->write_bytes(bytes, impl_->timeout)) {
      impl_->close();
      if (reused)
        continue; // the server had closed the idle connection: send again on a new one
      http_reply r;
      r.error = "write: " + ec.message();
      return r;
    }
    return impl_->read_reply(impl_->timeout);
  }
  http_reply r;
  r.error = "write failed twice";
  return r;
}

http_reply http_client::raw(const std::string& bytes, std::chrono::milliseconds timeout) {
  if (auto ec = impl_->connect()) {
    http_reply r;
    r.error = "connect: " + ec.message();
    return r;
  }
  if (auto ec = impl_->write_bytes(bytes, timeout)) {
    impl_->close();
    http_reply r;
    r.error = "write: " + ec.message();
    return r;
  }
  return impl_->read_reply(timeout);
}

bool http_client::closed_by_server(std::chrono::milliseconds timeout) {
  if (!impl_->stream)
    return true;
  char byte;
  beast::error_code out;
  impl_->stream->expires_after(timeout);
  impl_->stream->async_read_some(net::buffer(&byte, 1),
                                 [&](beast::error_code ec, size_t) { out = ec; });
  impl_->run();
  bool closed = out == net::error::eof || out == net::error::connection_reset;
  impl_->close();
  return closed;
}

} // namespace factum::test
