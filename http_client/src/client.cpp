// client.cpp: factum's HTTP/1.1 client on Boost.Beast (factum/http/client.hpp): the synchronous
// client, and the asynchronous pools with their connections and I/O thread. The only Beast
// translation unit of factum_http_client. A sync_client runs its io_context on the calling
// thread; pools, connections and completions live on the io_thread; submit() and stats() may
// be called from any thread (submit only posts to the I/O thread).
#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "factum/http/client.hpp"

namespace factum::http::client {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

/// The errors of a connection the peer closed or reset.
bool closed_kind(const beast::error_code& ec) {
  return ec == net::error::eof || ec == bhttp::error::end_of_stream ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == net::error::connection_aborted;
}

/// The failure an error code stands for (a timeout is decided by the caller).
failure classify(const beast::error_code& ec, stage st) {
  if (st == stage::resolve)
    return failure::resolve;
  if (ec == net::error::connection_refused)
    return failure::refused;
  if (closed_kind(ec) || ec == bhttp::error::partial_message)
    return failure::closed;
  return failure::other;
}

std::string timeout_message() {
  return beast::error_code(beast::error::timeout).message();
}

} // namespace

status check_resolves(const std::string& host, uint16_t port) {
  net::io_context ioc;
  tcp::resolver res(ioc);
  beast::error_code ec;
  auto eps = res.resolve(host, std::to_string(port), ec);
  if (ec || eps.empty())
    return status{errc::unavailable, ec ? ec.message() : std::string()};
  return status::ok();
}

std::string_view response::header(std::string_view name) const {
  if (!fields_)
    return {};
  auto& f = *static_cast<const bhttp::fields*>(fields_);
  auto it = f.find(beast::string_view(name.data(), name.size()));
  if (it == f.end())
    return {};
  return {it->value().data(), it->value().size()};
}

// -- synchronous client ---------------------------------------------------------------------

struct sync_client::impl {
  std::string host;
  uint16_t port = 80;
  sync_options opts;
  std::string host_header;
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  /// Runs the io_context until the started operation completed.
  void run() {
    ioc.restart();
    ioc.run();
  }

  static reply failed(failure f, stage st, std::string error) {
    reply r;
    r.failed = f;
    r.failed_at = st;
    r.error = std::move(error);
    return r;
  }

  static reply failed(const beast::error_code& ec, stage st) {
    if (ec == beast::error::timeout)
      return failed(failure::timeout, st, timeout_message());
    return failed(classify(ec, st), st, ec.message());
  }

  /// Opens the connection unless it is open; a reply with the failure when that failed.
  std::optional<reply> open(std::chrono::steady_clock::time_point deadline) {
    if (stream)
      return std::nullopt;
    buffer.clear();
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto eps = resolver.resolve(host, std::to_string(port), ec);
    if (ec)
      return failed(failure::resolve, stage::resolve, ec.message());
    if (opts.loopback_only)
      for (const auto& e : eps)
        if (!e.endpoint().address().is_loopback())
          return failed(failure::not_loopback, stage::resolve, e.endpoint().address().to_string());
    stream.emplace(ioc);
    stream->expires_at(deadline);
    beast::error_code out;
    stream->async_connect(eps, [&](beast::error_code e, const tcp::endpoint&) { out = e; });
    run();
    if (out) {
      stream.reset();
      return failed(out, stage::connect);
    }
    stream->socket().set_option(tcp::no_delay(true), out);
    return std::nullopt;
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

  template <class Write> beast::error_code write(Write&& start) {
    beast::error_code out;
    start([&](beast::error_code ec, size_t) { out = ec; });
    run();
    return out;
  }

  /// Reads one response; `head`: it answers a HEAD request, so no body follows its headers.
  reply read(std::chrono::steady_clock::time_point deadline, bool head = false) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.skip(head);
    parser.body_limit(opts.max_body ? boost::optional<std::uint64_t>(*opts.max_body)
                                    : boost::optional<std::uint64_t>());
    parser.header_limit(64 * 1024);
    beast::error_code out;
    stream->expires_at(deadline);
    bhttp::async_read(*stream, buffer, parser, [&](beast::error_code ec, size_t) { out = ec; });
    run();
    if (out) {
      close();
      return failed(out, stage::read);
    }
    auto msg = parser.release();
    reply r;
    r.status = static_cast<int>(msg.result_int());
    r.reason = std::string(msg.reason());
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

sync_client::sync_client(std::string host, uint16_t port, sync_options opts)
    : impl_(std::make_unique<impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->opts = opts;
  impl_->host_header = url{impl_->host, port, {}}.host_header();
}

sync_client::~sync_client() {
  impl_->close();
}

bool sync_client::connect() {
  return !impl_->open(std::chrono::steady_clock::now() + impl_->opts.timeout);
}

void sync_client::close() {
  impl_->close();
}

reply sync_client::request(std::string_view method, std::string_view target,
                           const header_list& headers, std::string_view body) {
  auto& i = *impl_;
  auto deadline = std::chrono::steady_clock::now() + i.opts.timeout;
  bhttp::request<bhttp::string_body> req;
  req.method_string(beast::string_view(method.data(), method.size()));
  req.target(beast::string_view(target.data(), target.size()));
  req.version(11);
  req.set(bhttp::field::host, i.host_header);
  for (auto& [k, v] : headers)
    req.insert(k, v);
  req.body() = std::string(body);
  req.prepare_payload();
  req.keep_alive(true);
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = i.stream.has_value();
    if (auto failed = i.open(deadline))
      return std::move(*failed);
    i.stream->expires_at(deadline);
    auto ec = i.write([&](auto handler) { bhttp::async_write(*i.stream, req, handler); });
    if (ec) {
      i.close();
      if (reused && ec != beast::error::timeout)
        continue; // the server had closed the idle connection: send again on a new one
      return impl::failed(ec, stage::write);
    }
    return i.read(deadline, method == "HEAD");
  }
  return impl::failed(failure::closed, stage::write, "the write failed twice");
}

reply sync_client::raw(std::string_view bytes, std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (auto failed = i.open(deadline))
    return std::move(*failed);
  i.stream->expires_at(deadline);
  auto ec =
    i.write([&](auto handler) { net::async_write(*i.stream, net::buffer(bytes), handler); });
  if (ec) {
    i.close();
    return impl::failed(ec, stage::write);
  }
  return i.read(deadline);
}

bool sync_client::closed_by_server(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  if (!i.stream)
    return true;
  char byte;
  beast::error_code out;
  i.stream->expires_after(timeout);
  i.stream->async_read_some(net::buffer(&byte, 1), [&](beast::error_code ec, size_t) { out = ec; });
  i.run();
  bool closed = out == net::error::eof || out == net::error::connection_reset;
  i.close();
  return closed;
}

// -- pools ------------------------------------------------------------------------------------

/// What the pools of one io_thread share: the io_context, its thread, and whether it stopped.
struct pool::owner {
  // Declared first: destroyed last, after every I/O object bound to it.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread thread;

  std::mutex mu;
  bool stopped = false;                      // guarded by mu
  std::vector<std::shared_ptr<state>> pools; // guarded by mu
  /// after()'s timers that have not fired (the I/O thread's): cancelled by stop().
  std::set<std::shared_ptr<net::steady_timer>> timers;
};

namespace {

/// One request waiting for or travelling on a connection.
struct pending {
  request req;
  completion done;
  bool stale_retried = false;

  /// Calls done exactly once; later calls do nothing.
  void finish(response& r) {
    if (!done)
      return;
    auto d = std::move(done);
    done = nullptr;
    d(r);
  }
};

class conn;

} // namespace

/// The connections and the queue of one pool. Runs on the I/O thread (counters are read by
/// stats() from any thread).
struct pool::state : std::enable_shared_from_this<pool::state> {
  state(net::io_context& c, url u, pool_options o)
      : ioc(c), target(std::move(u)), opts(std::move(o)), host_header(target.host_header()),
        port(std::to_string(target.port)) {}

  net::io_context& ioc;
  url target;
  pool_options opts;
  std::string host_header;
  std::string port;
  std::vector<std::shared_ptr<conn>> idle;
  std::set<std::shared_ptr<conn>> all; // open or opening
  std::deque<pending> queue;
  bool stopped = false;

  std::atomic<uint64_t> requests{0}, connections_opened{0}, reused{0}, stale_retries{0},
    stale_dropped{0}, queued{0}, rejected{0}, open{0};

  void submit(pending p);
  void open_fresh(pending p);
  void release(const std::shared_ptr<conn>& c);
  void gone(const std::shared_ptr<conn>& c, bool admit = true);
  void stop();

  static void fail(pending& p, failure f, std::string error) {
    response r;
    r.failed = f;
    r.error = std::move(error);
    p.finish(r);
  }
  static void cancel(pending& p) { fail(p, failure::cancelled, "the HTTP client is stopping"); }
};

namespace {

/// One TCP connection of a pool. Runs on the I/O thread.
class conn : public std::enable_shared_from_this<conn> {
 public:
  conn(net::io_context& ioc, std::shared_ptr<pool::state> p)
      : pool_(std::move(p)), sock_(ioc), resolver_(ioc), timer_(ioc) {}

  /// Opens the connection, then sends `p`.
  void connect(pending p);
  /// Sends `p` on this (open) connection.
  void send(pending p, bool reused);
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
  /// Answers the request on this connection, if any, with failure::cancelled.
  void cancel() { pool::state::cancel(cur_); }
  /// Whether the peer closed this idle connection (or sent bytes nobody asked for): a request
  /// sent on it would fail without telling whether the peer got it.
  bool peer_closed() {
    char b;
    ssize_t n = ::recv(sock_.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

 private:
  void arm(std::chrono::milliseconds d);
  void on_error(beast::error_code ec, stage st);
  void on_read(beast::error_code ec);

  std::shared_ptr<pool::state> pool_;
  tcp::socket sock_;
  tcp::resolver resolver_;
  net::steady_timer timer_;
  beast::flat_buffer buf_;
  bhttp::request<bhttp::string_body> req_;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  pending cur_;
  uint64_t gen_ = 0;
  bool reused_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
};

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

void conn::connect(pending p) {
  cur_ = std::move(p);
  reused_ = false;
  arm(pool_->opts.connect_timeout);
  resolver_.async_resolve(
    pool_->target.host, pool_->port,
    [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type eps) {
      if (self->closed_)
        return;
      if (ec)
        return self->on_error(ec, stage::resolve);
      net::async_connect(self->sock_, eps, [self](beast::error_code ec2, const tcp::endpoint&) {
        if (self->closed_)
          return;
        if (ec2)
          return self->on_error(ec2, stage::connect);
        self->pool_->connections_opened.fetch_add(1, std::memory_order_relaxed);
        beast::error_code ignored;
        self->sock_.set_option(tcp::no_delay(true), ignored);
        self->send(std::move(self->cur_), false);
      });
    });
}

void conn::send(pending p, bool reused) {
  cur_ = std::move(p);
  reused_ = reused;
  auto& r = cur_.req;
  req_ = {};
  req_.method(r.method == verb::get ? bhttp::verb::get : bhttp::verb::post);
  req_.target(r.target);
  req_.version(11);
  req_.set(bhttp::field::host, pool_->host_header);
  for (auto& [k, v] : pool_->opts.headers)
    req_.set(k, v);
  if (r.method == verb::post && (!r.content_type || !r.content_type->empty()))
    req_.set(bhttp::field::content_type, r.content_type ? *r.content_type : "application/json");
  if (!r.trace_id.empty())
    req_.set("X-Trace-Id", r.trace_id);
  if (!r.idempotency_key.empty())
    req_.set("Idempotency-Key", r.idempotency_key);
  for (auto& [k, v] : r.headers)
    req_.set(k, v);
  req_.keep_alive(true);
  req_.body() = std::move(r.body);
  req_.prepare_payload();
  arm(pool_->opts.request_timeout);
  bhttp::async_write(sock_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_)
      return;
    if (ec)
      return self->on_error(ec, stage::write);
    self->parser_.emplace();
    self->parser_->body_limit(self->pool_->opts.max_body);
    bhttp::async_read(self->sock_, self->buf_, *self->parser_,
                      [self](beast::error_code ec2, size_t) { self->on_read(ec2); });
  });
}

void conn::on_read(beast::error_code ec) {
  if (closed_)
    return;
  if (ec)
    return on_error(ec, stage::read);
  ++gen_;
  timer_.cancel();
  auto res = parser_->release();
  parser_.reset();
  response r;
  r.status = static_cast<int>(res.result_int());
  r.body = std::move(res.body());
  r.fields_ = static_cast<const bhttp::fields*>(&res);
  auto p = std::move(cur_);
  auto self = shared_from_this();
  // Before the completion: a queued request leaves on this connection at once.
  if (res.keep_alive() && !res.need_eof())
    pool_->release(self);
  else
    pool_->gone(self);
  p.finish(r);
}

void conn::on_error(beast::error_code ec, stage st) {
  auto p = std::move(cur_);
  auto self = shared_from_this();
  bool answered = parser_ && parser_->got_some();
  // A kept-alive connection the peer closed while idle: re-send once on a fresh connection.
  // When the write failed, the peer never got the whole request. When the read failed, the
  // peer may have got it and acted on it before it closed (or died): only a request that may
  // run twice is sent again (a GET, or one with an Idempotency-Key the peer de-duplicates by).
  bool replayable = p.req.method == verb::get || !p.req.idempotency_key.empty();
  if (pool_->opts.resend_on_stale && !timed_out_ && reused_ && closed_kind(ec) && !answered &&
      !p.stale_retried && (st == stage::write || (st == stage::read && replayable))) {
    p.stale_retried = true;
    p.req.body = std::move(req_.body());
    pool_->stale_retries.fetch_add(1, std::memory_order_relaxed);
    pool_->gone(self, false);
    if (pool_->stopped)
      return pool::state::cancel(p);
    return pool_->open_fresh(std::move(p));
  }
  pool_->gone(self);
  response r;
  r.failed_at = st;
  if (timed_out_) {
    r.failed = failure::timeout;
    r.error = timeout_message();
  } else {
    r.failed = classify(ec, st);
    r.error = ec.message();
  }
  p.finish(r);
}

} // namespace

void pool::state::submit(pending p) {
  if (stopped)
    return cancel(p);
  while (!idle.empty()) {
    auto c = std::move(idle.back());
    idle.pop_back();
    if (c->peer_closed()) { // the peer closed it while idle: not a place to send anything
      stale_dropped.fetch_add(1, std::memory_order_relaxed);
      gone(c, false);
      continue;
    }
    reused.fetch_add(1, std::memory_order_relaxed);
    return c->send(std::move(p), true);
  }
  if (all.size() < opts.max_connections)
    return open_fresh(std::move(p));
  if (queue.size() >= opts.max_queued) {
    rejected.fetch_add(1, std::memory_order_relaxed);
    return fail(p, failure::pool_full,
                "all " + std::to_string(opts.max_connections) + " connections are busy and " +
                  std::to_string(opts.max_queued) + " requests already wait");
  }
  queued.fetch_add(1, std::memory_order_relaxed);
  queue.push_back(std::move(p));
}

void pool::state::open_fresh(pending p) {
  auto c = std::make_shared<conn>(ioc, shared_from_this());
  all.insert(c);
  open.store(all.size(), std::memory_order_relaxed);
  c->connect(std::move(p));
}

/// A connection finished a request and may be reused.
void pool::state::release(const std::shared_ptr<conn>& c) {
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
void pool::state::gone(const std::shared_ptr<conn>& c, bool admit) {
  c->close();
  all.erase(c);
  open.store(all.size(), std::memory_order_relaxed);
  std::erase(idle, c);
  if (admit && !stopped && !queue.empty() && all.size() < opts.max_connections) {
    auto p = std::move(queue.front());
    queue.pop_front();
    open_fresh(std::move(p));
  }
}

/// Fails everything and closes every connection (io_thread::stop).
void pool::state::stop() {
  stopped = true;
  auto q = std::move(queue);
  queue.clear();
  for (auto& p : q)
    cancel(p);
  auto conns = all;
  for (auto& c : conns) {
    c->cancel();
    c->close();
  }
  all.clear();
  idle.clear();
  open.store(0, std::memory_order_relaxed);
}

void pool::submit(request r, completion done) const {
  pending p{std::move(r), std::move(done)};
  {
    std::lock_guard<std::mutex> g(owner_->mu);
    if (!owner_->stopped) {
      state_->requests.fetch_add(1, std::memory_order_relaxed);
      // The state lives as long as the owner, whose io_context runs this.
      net::post(owner_->ioc,
                [s = state_.get(), p = std::move(p)]() mutable { s->submit(std::move(p)); });
      return;
    }
  }
  pool::state::cancel(p);
}

pool_stats pool::stats() const {
  auto& s = *state_;
  pool_stats out;
  out.requests = s.requests.load();
  out.connections_opened = s.connections_opened.load();
  out.reused = s.reused.load();
  out.stale_retries = s.stale_retries.load();
  out.stale_dropped = s.stale_dropped.load();
  out.queued = s.queued.load();
  out.rejected = s.rejected.load();
  out.open_connections = s.open.load();
  return out;
}

// -- the I/O thread ---------------------------------------------------------------------------

io_thread::io_thread() : owner_(std::make_shared<pool::owner>()) {
  owner_->work.emplace(net::make_work_guard(owner_->ioc));
  owner_->thread = std::thread([o = owner_.get()] {
    for (;;) {
      try {
        o->ioc.run();
        return;
      } catch (const std::exception&) {
        // A throwing completion must not end the thread: the pools' requests would hang.
      }
    }
  });
}

io_thread::~io_thread() {
  stop();
}

pool io_thread::make_pool(const url& u, pool_options opts) {
  auto s = std::make_shared<pool::state>(owner_->ioc, u, std::move(opts));
  std::lock_guard<std::mutex> g(owner_->mu);
  owner_->pools.push_back(s);
  if (owner_->stopped)
    s->stopped = true; // not yet seen by the I/O thread: nothing else reads it
  return pool(owner_, std::move(s));
}

void io_thread::after(std::chrono::milliseconds delay, std::function<void(bool stopped)> fn) {
  {
    std::lock_guard<std::mutex> g(owner_->mu);
    if (!owner_->stopped) {
      // The owner outlives its io_context's handlers: a raw pointer is safe in them.
      net::post(owner_->ioc, [o = owner_.get(), delay, fn = std::move(fn)]() mutable {
        auto t = std::make_shared<net::steady_timer>(o->ioc, delay);
        o->timers.insert(t);
        t->async_wait([o, t, fn = std::move(fn)](const boost::system::error_code& ec) {
          o->timers.erase(t);
          fn(ec == net::error::operation_aborted);
        });
      });
      return;
    }
  }
  fn(true);
}

void io_thread::stop() {
  auto& o = *owner_;
  {
    std::lock_guard<std::mutex> g(o.mu);
    if (o.stopped)
      return;
    o.stopped = true;
    // Posted after every submit and after() already posted (one thread, FIFO): they run first
    // and are then cancelled here; none can be posted after it.
    net::post(o.ioc, [ps = o.pools, o = &o] {
      for (auto& p : ps)
        p->stop();
      for (auto& t : o->timers)
        t->cancel(); // their handlers run with operation_aborted: `stopped` true
    });
  }
  o.work.reset();
  if (o.thread.joinable())
    o.thread.join();
}

} // namespace factum::http::client
