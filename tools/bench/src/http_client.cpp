// http_client.cpp: the HTTP target of `factum bench`: an asynchronous HTTP/1.1 client on
// Boost.Beast with `concurrency` keep-alive connections multiplexed on ONE io_context thread (no
// thread per connection), and a FIFO of requests waiting for a free connection (open loop: the
// wait counts in the latency). The only translation unit of factum_bench that includes Beast.
// send() may run on any thread (it posts to the io thread); completions run on the io thread;
// usage() reads /proc of --server-pid on the caller's thread.
#include <unistd.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "target.hpp"

namespace factum::tools::bench_detail {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct pending {
  request req;
  std::function<void(response)> done;
};

class http_target final : public target {
 public:
  explicit http_target(const bench_options& o) : opts_(o), work_(net::make_work_guard(ioc_)) {}

  ~http_target() override {
    net::post(ioc_, [this] {
      for (auto& c : conns_) {
        beast::error_code ec;
        c->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        c->stream.close();
      }
    });
    work_.reset();
    ioc_.stop();
    if (thread_.joinable())
      thread_.join();
  }

  bool start(std::string& error) {
    std::string url = opts_.url;
    if (url.rfind("http://", 0) != 0) {
      error = "--url must start with http:// (got \"" + url.substr(0, 100) + "\")";
      return false;
    }
    auto rest = url.substr(7);
    while (!rest.empty() && rest.back() == '/')
      rest.pop_back();
    if (rest.find('/') != std::string::npos) {
      error = "--url takes no path: http://HOST:PORT";
      return false;
    }
    auto colon = rest.rfind(':');
    host_ = rest.substr(0, colon);
    std::string port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
    if (host_.empty() || port.empty() || port.find_first_not_of("0123456789") != port.npos) {
      error = "bad --url \"" + url.substr(0, 100) + "\": expected http://HOST:PORT";
      return false;
    }
    host_header_ = rest;
    tcp::resolver res(ioc_);
    beast::error_code ec;
    auto eps = res.resolve(host_, port, ec);
    if (ec || eps.empty()) {
      error = "cannot resolve " + host_ + ": " + ec.message();
      return false;
    }
    endpoint_ = eps.begin()->endpoint();
    timeout_ = std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000));
    for (int i = 0; i < std::max(1, opts_.concurrency); ++i)
      conns_.push_back(std::make_unique<conn>(ioc_));
    thread_ = std::thread([this] { ioc_.run(); });
    return true;
  }

  void send(request r, std::function<void(response)> done) override {
    net::post(ioc_, [this, p = pending{std::move(r), std::move(done)}]() mutable {
      queue_.push_back(std::move(p));
      dispatch();
    });
  }

  server_usage usage() override {
    server_usage u;
    if (opts_.server_pid <= 0)
      return u;
    auto pid = std::to_string(opts_.server_pid);
    std::ifstream st("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(st, line))
      return u;
    // Fields after the command name "(...)": state is field 3; utime 14, stime 15.
    auto close = line.rfind(')');
    if (close == std::string::npos)
      return u;
    std::istringstream in(line.substr(close + 2));
    std::string f;
    double ticks = double(sysconf(_SC_CLK_TCK));
    long utime = 0, stime = 0;
    for (int field = 3; field <= 15 && in >> f; ++field) {
      if (field == 14)
        utime = std::stol(f);
      if (field == 15)
        stime = std::stol(f);
    }
    u.cpu_s = double(utime + stime) / ticks;
    std::ifstream status("/proc/" + pid + "/status");
    while (std::getline(status, line))
      if (line.rfind("VmHWM:", 0) == 0)
        u.peak_rss_kib = std::atol(line.c_str() + 6);
    u.known = true;
    return u;
  }

 private:
  struct conn {
    explicit conn(net::io_context& ioc) : stream(ioc) {}
    beast::tcp_stream stream;
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    bool connected = false;
    bool busy = false;
    pending cur;
  };

  void dispatch() {
    for (auto& c : conns_) {
      if (queue_.empty())
        return;
      if (c->busy)
        continue;
      c->busy = true;
      c->cur = std::move(queue_.front());
      queue_.pop_front();
      begin(*c);
    }
  }

  void begin(conn& c) {
    if (c.connected) {
      write(c);
      return;
    }
    c.stream.expires_after(timeout_);
    c.stream.async_connect(endpoint_, [this, &c](beast::error_code ec) {
      if (ec)
        return fail(c, ec);
      c.connected = true;
      c.stream.socket().set_option(tcp::no_delay(true));
      write(c);
    });
  }

  void write(conn& c) {
    auto& q = c.cur.req;
    c.req = {};
    c.req.version(11);
    if (q.read) {
      c.req.method(http::verb::get);
      c.req.target("/v1/entities/" + q.type + "/" + q.id + "/facts" +
                   (q.query.empty() ? "" : "?" + q.query));
    } else {
      c.req.method(http::verb::post);
      c.req.target("/v1/entities/" + q.type + "/" + q.id + "/" + q.method);
      c.req.set(http::field::content_type, "application/json");
      c.req.body() = std::move(q.body);
    }
    c.req.set(http::field::host, host_header_);
    if (!opts_.api_key.empty())
      c.req.set("X-API-Key", opts_.api_key);
    if (!q.idempotency_key.empty())
      c.req.set("Idempotency-Key", q.idempotency_key);
    c.req.keep_alive(true);
    c.req.prepare_payload();
    c.stream.expires_after(timeout_);
    http::async_write(c.stream, c.req, [this, &c](beast::error_code ec, size_t) {
      if (ec)
        return fail(c, ec);
      c.res = {};
      http::async_read(c.stream, c.buf, c.res, [this, &c](beast::error_code ec2, size_t) {
        if (ec2)
          return fail(c, ec2);
        finish(c);
      });
    });
  }

  void finish(conn& c) {
    response r;
    r.status = static_cast<int>(c.res.result_int());
    r.ok = r.status >= 200 && r.status < 300;
    auto rp = c.res.find("Idempotent-Replayed");
    r.replayed = rp != c.res.end() && rp->value() == "true";
    r.body = std::move(c.res.body());
    if (!r.ok) {
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      r.code = j.is_object() && j.contains("code") && j["code"].is_string()
                 ? j["code"].get<std::string>()
                 : "HTTP_" + std::to_string(r.status);
    }
    if (!c.res.keep_alive()) {
      beast::error_code ec;
      c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      c.stream.close();
      c.connected = false;
    }
    complete(c, std::move(r));
  }

  void fail(conn& c, beast::error_code ec) {
    beast::error_code ignored;
    c.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    c.stream.close();
    c.connected = false;
    c.buf.consume(c.buf.size());
    response r;
    r.code = ec == beast::error::timeout ? "TIMEOUT" : "TRANSPORT";
    r.body = ec.message();
    complete(c, std::move(r));
  }

  void complete(conn& c, response r) {
    auto done = std::move(c.cur.done);
    c.cur = {};
    c.busy = false;
    done(std::move(r));
    dispatch();
  }

  bench_options opts_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;
  tcp::endpoint endpoint_;
  std::string host_, host_header_;
  std::chrono::milliseconds timeout_{30'000};
  std::vector<std::unique_ptr<conn>> conns_;
  std::deque<pending> queue_; ///< io thread only
};

} // namespace

std::unique_ptr<target> make_http_target(const bench_options& opts, std::string& error) {
  auto t = std::make_unique<http_target>(opts);
  if (!t->start(error))
    return nullptr;
  return t;
}

} // namespace factum::tools::bench_detail
