// http/tool_client.cpp: the HTTP transport of external tools (factum/runtime/http_tool.hpp):
// URL parsing and validation, a keep-alive connection pool per tool with a bounded queue,
// connect and request deadlines, one silent retry of a request that met a stale kept-alive
// connection, the mapping of answers and transport failures onto tool_reply, and a clean stop.
// The only Beast translation unit of the tool transport. Pools and connections live on the
// client's single Asio thread; tool_fn callers (CAF workers) only post to it.
#include "factum/runtime/http_tool.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <ctime>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "factum/resilience/money.hpp"

namespace factum {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

/// Largest answer body accepted.
constexpr uint64_t max_response_body = 16 * 1024 * 1024;

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size())
    return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i])
      return false;
  return true;
}

bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

/// Percent-encodes everything in an operation name but unreserved characters and '/'.
std::string encode_path(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      out.push_back(c);
    } else {
      auto u = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(hex[u >> 4]);
      out.push_back(hex[u & 0xf]);
    }
  }
  return out;
}

/// Retry-After as delta seconds or an HTTP-date (RFC 9110), in ms from now; nullopt if bad.
std::optional<int64_t> parse_retry_after(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
    v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
    v.remove_suffix(1);
  if (v.empty())
    return std::nullopt;
  if (v.find_first_not_of("0123456789") == std::string_view::npos) {
    if (v.size() > 9)
      return int64_t{999'999'999} * 1000;
    return static_cast<int64_t>(std::stoll(std::string(v))) * 1000;
  }
  std::tm tm{};
  std::string s(v);
  const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0')
    return std::nullopt;
  auto at = static_cast<int64_t>(timegm(&tm));
  auto now = static_cast<int64_t>(std::time(nullptr));
  return std::max<int64_t>(0, at - now) * 1000;
}

json parse_body(const std::string& body) {
  if (body.empty())
    return nullptr;
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return body;
  return j;
}

tool_reply transport_failure(std::string code, std::string message,
                             error_category cat = error_category::transient) {
  tool_reply r;
  r.ok = false;
  r.error_code = std::move(code);
  r.error_message = std::move(message);
  r.category = cat;
  return r;
}

/// One request waiting for or travelling on a connection.
struct pending {
  tool_request req;
  std::function<void(tool_reply)> done;
  bool stale_retried = false;

  /// Calls done exactly once; later calls do nothing.
  void finish(tool_reply r) {
    if (!done)
      return;
    auto d = std::move(done);
    done = nullptr;
    d(std::move(r));
  }
};

struct pool;

/// One TCP connection of a pool. Runs on the client's I/O thread.
class conn : public std::enable_shared_from_this<conn> {
 public:
  conn(net::io_context& ioc, std::shared_ptr<pool> p)
      : pool_(std::move(p)), sock_(ioc), resolver_(ioc), timer_(ioc) {}

  /// Opens the connection, then sends `p`.
  void connect(std::shared_ptr<pending> p);
  /// Sends `p` on this (open) connection.
  void send(std::shared_ptr<pending> p, bool reused);
  /// Closes the socket at once (stop or a dead connection); pending handlers see an error.
  void close() {
    closed_ = true;
    ++gen_;
    timer_.cancel();
    resolver_.cancel();
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }
  std::shared_ptr<pending>& current() { return cur_; }

 private:
  void arm(std::chrono::milliseconds d);
  void on_error(beast::error_code ec, const char* phase);
  void on_read(beast::error_code ec);
  std::string where() const;

  std::shared_ptr<pool> pool_;
  tcp::socket sock_;
  tcp::resolver resolver_;
  net::steady_timer timer_;
  beast::flat_buffer buf_;
  bhttp::request<bhttp::string_body> req_;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  std::shared_ptr<pending> cur_;
  uint64_t gen_ = 0;
  bool reused_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
};

/// The connections and the queue of one tool. Runs on the client's I/O thread (counters are
/// read by stats() from any thread).
struct pool : std::enable_shared_from_this<pool> {
  pool(net::io_context& c, std::string n, http_tool_options o, http_tool_url u)
      : ioc(c), name(std::move(n)), opts(std::move(o)), url(std::move(u)) {
    host_header = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
    if (url.port != 80)
      host_header += ":" + std::to_string(url.port);
  }

  net::io_context& ioc;
  std::string name;
  http_tool_options opts;
  http_tool_url url;
  std::string host_header;
  std::vector<std::shared_ptr<conn>> idle;
  std::set<std::shared_ptr<conn>> all; // open or opening
  std::deque<std::shared_ptr<pending>> queue;
  bool stopped = false;

  std::atomic<uint64_t> requests{0}, connections_opened{0}, reused{0}, stale_retries{0}, queued{0},
    rejected{0};

  void submit(std::shared_ptr<pending> p) {
    if (stopped)
      return p->finish(cancelled());
    if (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      reused.fetch_add(1, std::memory_order_relaxed);
      return c->send(std::move(p), true);
    }
    if (all.size() < opts.max_connections)
      return open_fresh(std::move(p));
    if (queue.size() >= opts.max_queued) {
      rejected.fetch_add(1, std::memory_order_relaxed);
      return p->finish(transport_failure(
        "POOL_EXHAUSTED", "tool " + name + ": all " + std::to_string(opts.max_connections) +
                            " connections are busy and " + std::to_string(opts.max_queued) +
                            " requests already wait"));
    }
    queued.fetch_add(1, std::memory_order_relaxed);
    queue.push_back(std::move(p));
  }

  void open_fresh(std::shared_ptr<pending> p) {
    auto c = std::make_shared<conn>(ioc, shared_from_this());
    all.insert(c);
    c->connect(std::move(p));
  }

  /// A connection finished a request and may be reused.
  void release(const std::shared_ptr<conn>& c) {
    if (stopped)
      return gone(c);
    if (!queue.empty()) {
      auto p = std::move(queue.front());
      queue.pop_front();
      reused.fetch_add(1, std::memory_order_relaxed);
      return c->send(std::move(p), true);
    }
    idle.push_back(c);
  }

  /// A connection is closed: forget it and (when `admit`) let a queued request open a new one.
  void gone(const std::shared_ptr<conn>& c, bool admit = true) {
    c->close();
    all.erase(c);
    std::erase(idle, c);
    if (admit && !stopped && !queue.empty() && all.size() < opts.max_connections) {
      auto p = std::move(queue.front());
      queue.pop_front();
      open_fresh(std::move(p));
    }
  }

  tool_reply cancelled() const {
    return transport_failure("CANCELLED", "tool " + name + ": the HTTP tool client is stopping");
  }

  /// Fails everything and closes every connection (client stop).
  void stop() {
    stopped = true;
    auto q = std::move(queue);
    queue.clear();
    for (auto& p : q)
      p->finish(cancelled());
    auto conns = all;
    for (auto& c : conns) {
      if (auto cur = c->current())
        cur->finish(cancelled());
      c->close();
    }
    all.clear();
    idle.clear();
  }
};

std::string conn::where() const {
  return "tool " + pool_->name + " (" + pool_->host_header + ")";
}

void conn::arm(std::chrono::milliseconds d) {
  auto gen = ++gen_;
  timed_out_ = false;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->gen_ || self->closed_)
      return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->resolver_.cancel();
    self->sock_.cancel(ignored);
  });
}

void conn::connect(std::shared_ptr<pending> p) {
  cur_ = std::move(p);
  reused_ = false;
  arm(pool_->opts.connect_timeout);
  resolver_.async_resolve(
    pool_->url.host, std::to_string(pool_->url.port),
    [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type eps) {
      if (self->closed_)
        return;
      if (ec)
        return self->on_error(ec, "resolve");
      net::async_connect(self->sock_, eps, [self](beast::error_code ec2, const tcp::endpoint&) {
        if (self->closed_)
          return;
        if (ec2)
          return self->on_error(ec2, "connect");
        self->pool_->connections_opened.fetch_add(1, std::memory_order_relaxed);
        beast::error_code ignored;
        self->sock_.set_option(tcp::no_delay(true), ignored);
        self->send(std::move(self->cur_), false);
      });
    });
}

void conn::send(std::shared_ptr<pending> p, bool reused) {
  cur_ = std::move(p);
  reused_ = reused;
  auto& o = pool_->opts;
  auto& r = cur_->req;
  std::string target = pool_->url.path;
  if (!r.operation.empty())
    target += "/" + encode_path(r.operation);
  if (target.empty())
    target = "/";
  req_ = {};
  req_.method(bhttp::verb::post);
  req_.target(target);
  req_.version(11);
  req_.set(bhttp::field::host, pool_->host_header);
  req_.set(bhttp::field::user_agent, "factum");
  req_.set(bhttp::field::content_type, "application/json");
  req_.set(bhttp::field::accept, "application/json");
  if (!r.trace_id.empty())
    req_.set("X-Trace-Id", r.trace_id);
  if (!r.idempotency_key.empty())
    req_.set("Idempotency-Key", r.idempotency_key);
  for (auto& [k, v] : o.headers)
    req_.set(k, v);
  req_.keep_alive(true);
  req_.body() = r.payload.dump(-1, ' ', false, json::error_handler_t::replace);
  req_.prepare_payload();
  arm(o.request_timeout);
  bhttp::async_write(sock_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_)
      return;
    if (ec)
      return self->on_error(ec, "write");
    self->parser_.emplace();
    self->parser_->body_limit(max_response_body);
    bhttp::async_read(self->sock_, self->buf_, *self->parser_,
                      [self](beast::error_code ec2, size_t) { self->on_read(ec2); });
  });
}

void conn::on_read(beast::error_code ec) {
  if (closed_)
    return;
  if (ec)
    return on_error(ec, "read");
  ++gen_;
  timer_.cancel();
  auto res = parser_->release();
  parser_.reset();
  int status = static_cast<int>(res.result_int());
  tool_reply r;
  r.http_status = status;
  r.ok = status >= 200 && status < 300;
  r.body = parse_body(res.body());
  if (!r.ok) {
    auto snippet = res.body().substr(0, 200);
    r.error_message = "HTTP " + std::to_string(status) + " from " + where() +
                      (snippet.empty() ? "" : ": " + snippet);
  }
  if (auto it = res.find(bhttp::field::retry_after); it != res.end())
    r.retry_after_ms = parse_retry_after(std::string_view(it->value().data(), it->value().size()));
  if (auto it = res.find("X-Cost"); it != res.end()) {
    auto d = resilience::decimal::parse(std::string_view(it->value().data(), it->value().size()));
    if (d && !(d.value() < resilience::decimal::parse("0").value()))
      r.cost_amount = d.value().to_string();
  }
  auto p = std::move(cur_);
  auto self = shared_from_this();
  if (res.keep_alive() && !res.need_eof())
    pool_->release(self);
  else
    pool_->gone(self);
  p->finish(std::move(r));
}

void conn::on_error(beast::error_code ec, const char* phase) {
  auto p = std::move(cur_);
  auto self = shared_from_this();
  std::string_view ph = phase;
  bool answered = parser_ && parser_->got_some();
  bool stale_kind = ec == net::error::eof || ec == bhttp::error::end_of_stream ||
                    ec == net::error::connection_reset || ec == net::error::broken_pipe ||
                    ec == net::error::connection_aborted;
  // A kept-alive connection the peer closed while idle: re-send once on a fresh connection
  // (nothing of this request was answered, so the vendor never acted on it).
  if (!timed_out_ && reused_ && stale_kind && !answered && !p->stale_retried &&
      (ph == "write" || ph == "read")) {
    p->stale_retried = true;
    pool_->stale_retries.fetch_add(1, std::memory_order_relaxed);
    pool_->gone(self, false);
    if (pool_->stopped)
      return p->finish(pool_->cancelled());
    return pool_->open_fresh(std::move(p));
  }
  pool_->gone(self);
  auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  tool_reply r;
  if (timed_out_) {
    r = transport_failure(
      "timeout",
      ph == "resolve" || ph == "connect"
        ? "could not connect to " + where() + " within " + ms(pool_->opts.connect_timeout)
        : "no answer from " + where() + " within " + ms(pool_->opts.request_timeout));
  } else if (ph == "resolve") {
    r = transport_failure("dns_failure",
                          "cannot resolve the host of " + where() + ": " + ec.message());
  } else if (ec == net::error::connection_refused) {
    r = transport_failure("connection_refused", "connection refused by " + where());
  } else if (stale_kind || ec == bhttp::error::partial_message) {
    r = transport_failure("connection_reset", where() + " closed the connection without a " +
                                                "complete answer (" + ec.message() + ")");
  } else {
    r = transport_failure("other",
                          std::string(phase) + " failed for " + where() + ": " + ec.message(),
                          error_category::external);
  }
  p->finish(std::move(r));
}

} // namespace

// -- URL ----------------------------------------------------------------------------------------

result<http_tool_url> parse_http_tool_url(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return status{errc::invalid_argument, "\"" + std::string(url.substr(0, 200)) + "\": " + why};
  };
  if (iequals_prefix(url, "https://"))
    return bad("https is not supported (plain http:// only; put a TLS proxy in front)");
  if (!iequals_prefix(url, "http://"))
    return bad("must start with http://");
  auto rest = url.substr(7);
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.empty())
    return bad("no host");
  if (authority.find('@') != std::string_view::npos)
    return bad("user information in the URL is not supported (use \"headers\")");
  if (path.find_first_of("?# \t\r\n") != std::string_view::npos)
    return bad("the path may not contain a query, a fragment or white space");
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return bad("the path must be printable ASCII");
  http_tool_url u;
  std::string_view host, port;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return bad("unterminated IPv6 address");
    host = authority.substr(1, close - 1);
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return bad("bad port");
      port = after.substr(1);
      if (port.empty())
        return bad("bad port");
    }
  } else {
    auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty())
        return bad("bad port");
    }
  }
  if (host.empty())
    return bad("no host");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_'))
      return bad("bad character in the host");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
      return bad("bad port");
    auto p = std::stoul(std::string(port));
    if (p == 0 || p > 65535)
      return bad("port out of range");
    u.port = static_cast<uint16_t>(p);
  }
  u.host = std::string(host);
  u.path = std::string(path);
  while (!u.path.empty() && u.path.back() == '/')
    u.path.pop_back();
  return u;
}

// -- client -------------------------------------------------------------------------------------

struct http_tool_client::impl {
  // Declared first: destroyed last, after every I/O object bound to it.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread thread;

  mutable std::mutex mu;
  bool stopped = false;                                            // guarded by mu
  std::map<std::string, std::shared_ptr<pool>, std::less<>> pools; // guarded by mu
};

http_tool_client::http_tool_client() : impl_(std::make_shared<impl>()) {
  impl_->work.emplace(net::make_work_guard(impl_->ioc));
  impl_->thread = std::thread([i = impl_.get()] {
    for (;;) {
      try {
        i->ioc.run();
        return;
      } catch (const std::exception&) {
        // A throwing `done` must not end the thread: the pools' requests would hang forever.
      }
    }
  });
}

http_tool_client::~http_tool_client() {
  stop();
}

status validate_http_tool_options(const http_tool_options& opts) {
  auto bad = [&](const std::string& key, const std::string& why) {
    return status{errc::invalid_argument, key + ": " + why};
  };
  auto url = parse_http_tool_url(opts.url);
  if (!url)
    return bad("url", url.error().message());
  if (opts.connect_timeout.count() < 1)
    return bad("connect_timeout_ms", "must be at least 1");
  if (opts.request_timeout.count() < 1)
    return bad("request_timeout_ms", "must be at least 1");
  if (opts.max_connections < 1)
    return bad("max_connections", "must be at least 1");
  for (auto& [k, v] : opts.headers) {
    if (k.empty() || !std::all_of(k.begin(), k.end(), is_token_char))
      return bad("headers." + k, "not a valid header name");
    for (auto reserved : {"host", "content-length", "transfer-encoding", "connection",
                          "content-type", "idempotency-key", "x-trace-id"})
      if (beast::iequals(k, reserved))
        return bad("headers." + k, "set by the transport itself");
    for (char c : v)
      if (c == '\r' || c == '\n' || c == '\0')
        return bad("headers." + k, "the value may not contain CR, LF or NUL");
  }
  // The host must resolve now: a typo fails the configuration, not the first call.
  net::io_context tmp;
  tcp::resolver res(tmp);
  beast::error_code ec;
  auto eps = res.resolve(url->host, std::to_string(url->port), ec);
  if (ec || eps.empty())
    return bad("url", "host '" + url->host + "' does not resolve" +
                        (ec ? ": " + ec.message() : std::string()));
  return status::ok();
}

result<tool_fn> http_tool_client::make_tool(std::string name, http_tool_options opts) {
  if (name.empty())
    return status{errc::invalid_argument, "name: must not be empty"};
  if (auto st = validate_http_tool_options(opts); !st)
    return st;
  auto url = parse_http_tool_url(opts.url);
  auto i = impl_;
  std::lock_guard<std::mutex> g(i->mu);
  if (i->stopped)
    return status{errc::unavailable, "the HTTP tool client is stopped"};
  if (i->pools.count(name))
    return status{errc::invalid_argument, "name: tool '" + name + "' is already defined"};
  auto p = std::make_shared<pool>(i->ioc, name, std::move(opts), std::move(*url));
  i->pools.emplace(name, p);
  return tool_fn([i, p](const tool_request& req, std::function<void(tool_reply)> done) {
    auto pend = std::make_shared<pending>();
    pend->req = req;
    pend->done = std::move(done);
    {
      std::lock_guard<std::mutex> g2(i->mu);
      if (!i->stopped) {
        p->requests.fetch_add(1, std::memory_order_relaxed);
        net::post(i->ioc, [p, pend] { p->submit(pend); });
        return;
      }
    }
    pend->finish(p->cancelled());
  });
}

http_tool_stats http_tool_client::stats(std::string_view name) const {
  std::shared_ptr<pool> p;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->pools.find(name);
    if (it == impl_->pools.end())
      return {};
    p = it->second;
  }
  http_tool_stats s;
  s.requests = p->requests.load();
  s.connections_opened = p->connections_opened.load();
  s.reused = p->reused.load();
  s.stale_retries = p->stale_retries.load();
  s.queued = p->queued.load();
  s.rejected = p->rejected.load();
  // The gauge lives on the I/O thread; read it there when it runs.
  std::promise<uint64_t> open;
  auto f = open.get_future();
  bool running;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    running = !impl_->stopped;
    if (running)
      net::post(impl_->ioc, [p, &open] { open.set_value(p->all.size()); });
  }
  s.open_connections = running ? f.get() : 0;
  return s;
}

void http_tool_client::stop() {
  auto& i = *impl_;
  {
    std::lock_guard<std::mutex> g(i.mu);
    if (i.stopped)
      return;
    i.stopped = true;
    // Posted after every submit already posted (one thread, FIFO): they run first and are
    // then cancelled here; no submit can be posted after it.
    std::vector<std::shared_ptr<pool>> ps;
    for (auto& [_, p] : i.pools)
      ps.push_back(p);
    net::post(i.ioc, [ps] {
      for (auto& p : ps)
        p->stop();
    });
  }
  i.work.reset();
  if (i.thread.joinable())
    i.thread.join();
}

} // namespace factum
