// http/server.cpp: the HTTP/1.1 transport of the gateway (Boost.Beast): the acceptor, one
// session per connection on its own strand, request deadlines (408), body and header limits
// (413, 431), keep-alive, lingering close and graceful shutdown, and the writing of fact streams
// (Server-Sent Events, fact_streams.hpp). The only translation unit of
// factum_http that includes Beast. Runs on the server's Asio threads; runtime replies arrive on
// CAF workers and are posted back to the connection's strand, so no Asio thread ever waits.
#include "factum/gateway/http_server.hpp"

#include <array>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "gateway.hpp"
#include "io_gate.hpp"
#include "streams/fact_streams.hpp"
#include "ws/ws_server.hpp"

namespace factum {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class session;

/// Most bytes read and discarded after a refusal before the connection is closed.
constexpr size_t linger_cap = 64 * 1024 * 1024;
/// Longest wait for the peer to finish sending after a refusal.
constexpr std::chrono::milliseconds linger_time{2'000};
/// How long stop() waits for connections to close before it stops the I/O threads anyway.
constexpr std::chrono::milliseconds close_grace{5'000};

/// An io_context whose queued handlers can be destroyed before it is (the first half of its
/// destructor): stop() frees what they hold once the I/O threads have stopped.
struct server_io_context : net::io_context {
  void destroy_queued() { shutdown(); }
};

} // namespace

struct http_server::impl {
  impl(runtime& rt, http_server_config cfg)
      : gw(rt, std::move(cfg)), acceptor(net::make_strand(ioc)),
        accept_retry(acceptor.get_executor()) {}

  // Declared first: destroyed last, after every I/O object bound to it.
  server_io_context ioc;
  /// Posts from threads other than the I/O threads; closed by stop() (io_gate.hpp).
  std::shared_ptr<http::io_gate> gate = std::make_shared<http::io_gate>();
  http::gateway gw;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  uint16_t port = 0;
  std::atomic<bool> closing{false};
  std::atomic<bool> stopped{false};

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<session*, std::weak_ptr<session>> sessions; // guarded by mu
  std::unordered_map<std::string, size_t> per_client; // open sessions per address; under mu
  int64_t in_flight = 0;                              // guarded by mu

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket s, const std::shared_ptr<impl>& self);
  void close_acceptor() {
    net::post(acceptor.get_executor(), [this] {
      beast::error_code ec;
      acceptor.close(ec);
      accept_retry.cancel();
    });
  }

  void request_started() {
    std::lock_guard<std::mutex> g(mu);
    ++in_flight;
    gw.metrics().in_flight.add(1);
  }
  void request_done() {
    std::lock_guard<std::mutex> g(mu);
    --in_flight;
    gw.metrics().in_flight.add(-1);
    if (in_flight == 0)
      cv.notify_all();
  }
  void session_gone(session* s, const std::string& client) {
    std::lock_guard<std::mutex> g(mu);
    if (auto it = per_client.find(client); it != per_client.end() && --it->second == 0)
      per_client.erase(it);
    sessions.erase(s);
    gw.metrics().connections.add(-1);
    if (sessions.empty())
      cv.notify_all();
  }
  void run_thread() {
    for (;;) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {
        gw.log({{"level", "error"}, {"event", "io_thread_exception"}, {"detail", e.what()}});
      }
    }
  }

  std::weak_ptr<impl> weak_self;
};

namespace {

/// One connection. Every member function runs on the connection's strand.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket&& s, std::shared_ptr<http_server::impl> srv, std::string client)
      : srv_(std::move(srv)), stream_(std::move(s)), ex_(stream_.get_executor()), deadline_(ex_),
        keepalive_(ex_), client_(std::move(client)) {}

  ~session() { srv_->session_gone(this, client_); }

  /// Why a new connection is refused, if it is.
  enum class refusal { none, server_full, client_full };

  /// Starts reading requests, or answers the refusal and closes.
  void start(refusal why) {
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), why] {
      if (why == refusal::server_full)
        self->refuse(problems::too_many_connections,
                     "the server has reached its connection limit; retry later");
      else if (why == refusal::client_full)
        self->refuse(problems::connection_cap_reached,
                     "this client address has reached its connection limit "
                     "(limits.max_connections_per_client); reuse or close connections");
      else
        self->read_request();
    });
  }

  /// Closes the socket; a pending call's response is dropped when it arrives.
  void close() {
    if (auto w = upgraded_.lock()) // a WebSocket now: it closes with 1001
      return w->stop();
    if (facts_) // a fact stream: its client resumes from the last id it got
      return end_stream(srv_->closing.load() ? end::stopping : end::client);
    if (closed_)
      return;
    closed_ = true;
    ++deadline_gen_;
    deadline_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  /// The connection's strand (kept: the stream moves to a WebSocket session on an upgrade).
  net::any_io_executor executor() { return ex_; }

 private:
  const http_limits& limits() const { return srv_->gw.config().limits; }

  void arm_deadline(std::chrono::milliseconds d) {
    auto gen = ++deadline_gen_;
    timed_out_ = false;
    deadline_.expires_after(d);
    deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->deadline_gen_ || self->closed_)
        return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  void disarm_deadline() {
    ++deadline_gen_;
    deadline_.cancel();
  }

  void read_request() {
    if (closed_)
      return;
    if (srv_->closing.load())
      return close();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits().max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    // The parser checks a Content-Length against this as soon as the header is complete: the
    // largest limit any request may have here; on_header() sets the request's own.
    auto widest = limits().max_body_bytes;
    if (srv_->gw.config().cluster)
      widest = std::max(widest, limits().max_move_file_bytes);
    parser_->body_limit(static_cast<std::uint64_t>(widest));
    arm_deadline(limits().request_timeout);
    bhttp::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec)
      return on_read_error(ec);
    auto& h = parser_->get();
    auto limit = body_limit_of(h);
    parser_->body_limit(static_cast<std::uint64_t>(limit));
    if (auto cl = parser_->content_length(); cl && *cl > limit)
      return refuse(problems::body_too_large, "the body has " + std::to_string(*cl) +
                                                " bytes; the limit is " + std::to_string(limit));
    if (parser_->is_done())
      return dispatch_request();
    if (beast::iequals(h[bhttp::field::expect], "100-continue")) {
      continue_ = {};
      continue_.version(11);
      continue_.result(bhttp::status::continue_);
      bhttp::async_write(stream_, continue_,
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                           if (ec)
                             return self->on_read_error(ec);
                           self->read_body();
                         });
      return;
    }
    read_body();
  }

  /// The body limit of a request: max_body_bytes, or max_move_file_bytes for a shard move's
  /// file signed with the cluster's secret (checked before any of the body is read).
  template <class Header> size_t body_limit_of(const Header& h) const {
    const auto* c = srv_->gw.config().cluster.get();
    auto sv = [](auto v) { return std::string_view(v.data(), v.size()); };
    auto target = sv(h.target());
    if (c && target.rfind("/v1/cluster/moves/", 0) == 0 &&
        c->authentic({target, sv(h["X-Factum-Move-Epoch"]), sv(h["X-Factum-Content-Sha256"]),
                      sv(h["X-Factum-Move-Time"]), sv(h["X-Factum-Move-Signature"])}))
      return limits().max_move_file_bytes;
    return limits().max_body_bytes;
  }

  void read_body() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec)
                          return self->on_read_error(ec);
                        self->dispatch_request();
                      });
  }

  void on_read_error(beast::error_code ec) {
    bool timed_out = timed_out_;
    disarm_deadline();
    if (closed_)
      return;
    if (timed_out) {
      if ((parser_ && parser_->got_some()) || buffer_.size() > 0)
        return refuse(problems::request_timeout,
                      "the request was not received within " +
                        std::to_string(limits().request_timeout.count()) + " ms");
      return close(); // an idle keep-alive connection
    }
    if (ec == bhttp::error::body_limit)
      return refuse(problems::body_too_large, "the body exceeds the limit of " +
                                                std::to_string(limits().max_body_bytes) + " bytes");
    if (ec == bhttp::error::header_limit)
      return refuse(problems::headers_too_large, "the request line and headers exceed " +
                                                   std::to_string(limits().max_header_bytes) +
                                                   " bytes");
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
      return refuse(problems::bad_request, "malformed HTTP request: " + ec.message());
    close(); // end of stream, reset, or aborted by stop()
  }

  void dispatch_request() {
    disarm_deadline();
    auto msg = parser_->release();
    parser_.reset();
    if (beast::websocket::is_upgrade(msg)) {
      // The WebSocket session keeps this one (and so the server's count of the connection)
      // until it ends. A client sends nothing before the handshake's answer (RFC 6455, 4.1),
      // so nothing is left in buffer_.
      closed_ = true;
      buffer_ = {};
      upgraded_ = http::start_websocket(srv_->gw, std::move(stream_), std::move(msg),
                                        shared_from_this(), srv_->gate);
      return;
    }
    auto r = http::to_http_request(msg);
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    head_ = msg.method() == bhttp::verb::head;
    srv_->request_started();
    auto ex = stream_.get_executor();
    srv_->gw.handle(std::move(r), [self = shared_from_this(), ex](http::http_response res) {
      self->srv_->gate->post(
        ex, [self, res = std::move(res)]() mutable { self->write(std::move(res), true); });
    });
  }

  /// Answers a request that is not read to its end (or not at all), then closes.
  void refuse(const problem_kind& kind, std::string detail) {
    std::string verb, target, tp, xt;
    if (parser_ && parser_->is_header_done()) {
      auto& h = parser_->get();
      verb = std::string(h.method_string());
      target = std::string(h.target());
      tp = std::string(h["traceparent"]);
      xt = std::string(h["X-Trace-Id"]);
      version_ = h.version();
    }
    head_ = !verb.empty() && parser_->get().method() == bhttp::verb::head;
    auto r = srv_->gw.reject(kind, std::move(detail), verb, target, tp, xt);
    keep_alive_ = false;
    write(std::move(r), false);
  }

  void write(http::http_response r, bool counted) {
    if (closed_) {
      if (counted)
        srv_->request_done();
      return;
    }
    if (r.stream)
      return begin_stream(std::move(r));
    res_ = {};
    res_.version(version_ == 10 ? 10 : 11);
    res_.result(static_cast<unsigned>(r.status));
    res_.set(bhttp::field::server, "factum");
    res_.set(bhttp::field::content_type, r.content_type);
    if (!r.trace_id.empty())
      res_.set("X-Trace-Id", r.trace_id);
    if (r.replayed)
      res_.set("Idempotent-Replayed", "true");
    if (!r.allow.empty())
      res_.set(bhttp::field::allow, r.allow);
    if (r.retry_after_s > 0)
      res_.set(bhttp::field::retry_after, std::to_string(r.retry_after_s));
    if (!r.link.empty())
      res_.set(bhttp::field::link, r.link);
    if (r.not_owner)
      res_.set("X-Factum-Not-Owner", "1");
    for (auto& [name, value] : r.headers)
      res_.set(name, value);
    bool keep = keep_alive_ && !r.close && !srv_->gw.draining() && !srv_->closing.load();
    res_.keep_alive(keep);
    if (head_) {
      // The answer to HEAD: GET's headers, its Content-Length, no body (RFC 9110, 9.3.2).
      res_.content_length(r.body.size());
    } else {
      res_.body() = std::move(r.body);
      res_.prepare_payload();
    }
    stream_.expires_after(limits().request_timeout);
    bhttp::async_write(stream_, res_,
                       [self = shared_from_this(), counted, keep](beast::error_code ec, size_t) {
                         self->on_write(ec, counted, keep);
                       });
  }

  void on_write(beast::error_code ec, bool counted, bool keep) {
    stream_.expires_never();
    if (counted)
      srv_->request_done();
    if (ec)
      return close();
    if (!keep)
      return linger();
    read_request();
  }

  /// Half-closes, then reads and drops what the peer still sends (bounded in bytes and time),
  /// so that closing with unread data does not reset the connection before the peer has read
  /// the response.
  void linger() {
    if (closed_)
      return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec)
      return close();
    drained_ = buffer_.size();
    buffer_.consume(buffer_.size());
    drain_buf_ = std::make_unique<std::array<char, 16 * 1024>>();
    arm_deadline(std::min(linger_time, limits().request_timeout));
    drain();
  }

  void drain() {
    stream_.socket().async_read_some(
      net::buffer(*drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->drained_ += n;
        if (ec || self->drained_ > linger_cap || self->srv_->closing.load())
          return self->close();
        self->drain();
      });
  }

  // -- a fact stream (http_response::stream): its headers, then its events until it ends --

  using end = http::http_metrics::stream_end;

  /// Writes the stream's headers (the request is answered then), then its events. The
  /// connection ends with the stream: chunked for HTTP/1.1, delimited by the close for 1.0.
  void begin_stream(http::http_response r) {
    facts_ = std::move(r.stream);
    chunked_ = version_ != 10;
    std::string h = version_ == 10 ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.1 200 OK\r\n";
    h += "Server: factum\r\nContent-Type: " + r.content_type + "\r\n";
    if (!r.trace_id.empty())
      h += "X-Trace-Id: " + r.trace_id + "\r\n";
    for (auto& [name, value] : r.headers)
      h += name + ": " + value + "\r\n";
    if (chunked_)
      h += "Transfer-Encoding: chunked\r\n";
    h += "Connection: close\r\n\r\n";
    out_ = std::move(h);
    writing_ = true;
    stream_.expires_after(limits().request_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->srv_->request_done(); // answered; the stream goes on
                       self->on_stream_write(ec, false);
                       if (ec || !self->facts_)
                         return;
                       std::weak_ptr<session> weak = self;
                       self->facts_->attach([weak, ex = self->ex_, gate = self->srv_->gate] {
                         gate->post(ex, [weak] {
                           if (auto s = weak.lock())
                             s->pump_stream();
                         });
                       });
                       self->watch_peer();
                       self->arm_keepalive();
                       self->pump_stream();
                     });
  }

  /// Writes what the stream has queued, unless a write is out.
  void pump_stream() {
    if (!facts_ || writing_)
      return;
    auto c = facts_->take();
    if (c.bytes.empty() && !c.last)
      return;
    srv_->gw.metrics().stream_events.inc(c.facts);
    write_stream(std::move(c.bytes), c.last);
  }

  /// One chunk (the last one ends the body); a write the client does not take within
  /// request_timeout ends the stream.
  void write_stream(std::string bytes, bool last) {
    out_.clear();
    if (chunked_ && !bytes.empty()) {
      static constexpr char hex[] = "0123456789abcdef";
      std::string size;
      for (size_t n = bytes.size(); n > 0; n >>= 4)
        size.insert(size.begin(), hex[n & 15]);
      out_.append(size).append("\r\n").append(bytes).append("\r\n");
    } else {
      out_ = std::move(bytes);
    }
    if (chunked_ && last)
      out_.append("0\r\n\r\n");
    writing_ = true;
    last_write_ = std::chrono::steady_clock::now();
    stream_.expires_after(limits().request_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = shared_from_this(), last](beast::error_code ec, size_t) {
                       self->on_stream_write(ec, last);
                       if (!ec && self->facts_) {
                         self->facts_->written();
                         self->pump_stream();
                       }
                     });
  }

  void on_stream_write(beast::error_code ec, bool last) {
    writing_ = false;
    stream_.expires_never();
    if (!facts_)
      return;
    if (ec)
      return end_stream(ec == beast::error::timeout ? end::slow_reader
                        : srv_->closing.load()      ? end::stopping
                                                    : end::client);
    if (last)
      end_stream(facts_->reason());
  }

  /// Reads (and drops) what the client sends, to see it go away.
  void watch_peer() {
    stream_.socket().async_read_some(
      net::buffer(peer_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->peer_bytes_ += n;
        if (!self->facts_)
          return;
        if (ec || self->peer_bytes_ > 64 * 1024)
          return self->end_stream(self->srv_->closing.load() ? end::stopping : end::client);
        self->watch_peer();
      });
  }

  /// A comment after stream_keepalive without a write; a draining server ends its streams.
  void arm_keepalive() {
    keepalive_.expires_after(limits().stream_keepalive);
    keepalive_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->facts_)
        return;
      if (self->srv_->gw.draining())
        return self->end_stream(end::stopping);
      auto idle = std::chrono::steady_clock::now() - self->last_write_;
      if (!self->writing_ && idle >= self->limits().stream_keepalive)
        self->write_stream(": keep-alive\n\n", false);
      self->arm_keepalive();
    });
  }

  void end_stream(end why) {
    if (!facts_)
      return;
    facts_->end();
    auto decided = facts_->reason(); // an overflow or a failed read was counted when it happened
    facts_.reset();
    if (decided != end::overflow && decided != end::failed)
      srv_->gw.metrics().stream_closed(why);
    keepalive_.cancel();
    close();
  }

  // First: released last, after the socket and timers bound to the server's io_context (the
  // last connection may hold the last reference to the server).
  std::shared_ptr<http_server::impl> srv_;
  beast::tcp_stream stream_;
  net::any_io_executor ex_;
  net::steady_timer deadline_;
  net::steady_timer keepalive_;              ///< a fact stream's keep-alive
  std::shared_ptr<http::fact_stream> facts_; ///< the fact stream this connection writes
  std::string out_;                          ///< the stream's bytes being written
  bool chunked_ = true;
  bool writing_ = false;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
  std::array<char, 512> peer_buf_{};
  size_t peer_bytes_ = 0;
  std::string client_; ///< the peer's address (per-client connection count)
  uint64_t deadline_gen_ = 0;
  bool timed_out_ = false;
  bool closed_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool head_ = false; ///< the request being answered is a HEAD: its response has no body
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
  bhttp::response<bhttp::empty_body> continue_;
  std::unique_ptr<std::array<char, 16 * 1024>> drain_buf_; ///< made when lingering
  std::weak_ptr<http::ws_handle> upgraded_; ///< the WebSocket session this connection became
  size_t drained_ = 0;
};

} // namespace

void http_server::impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
    auto self = weak_self.lock();
    if (!self)
      return;
    on_accept(ec, std::move(s), self);
  });
}

void http_server::impl::on_accept(beast::error_code ec, tcp::socket s,
                                  const std::shared_ptr<impl>& self) {
  if (ec == net::error::operation_aborted || !acceptor.is_open())
    return;
  if (ec) {
    // e.g. EMFILE: back off instead of spinning, then accept again.
    gw.log({{"level", "error"}, {"event", "accept_failed"}, {"detail", ec.message()}});
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](beast::error_code e) {
      if (!e && acceptor.is_open())
        do_accept();
    });
    return;
  }
  if (closing.load() || gw.draining()) {
    beast::error_code ignored;
    s.close(ignored);
  } else {
    beast::error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);
    auto peer = s.remote_endpoint(ignored);
    std::string client = ignored ? std::string() : peer.address().to_string();
    auto why = session::refusal::none;
    std::shared_ptr<session> sess;
    {
      std::lock_guard<std::mutex> g(mu);
      auto& mine = per_client[client];
      if (sessions.size() >= gw.config().limits.max_connections)
        why = session::refusal::server_full;
      else if (mine >= gw.config().limits.max_connections_per_client)
        why = session::refusal::client_full;
      ++mine; // every session counts until it is gone, the refused ones too
      sess = std::make_shared<session>(std::move(s), self, std::move(client));
      sessions.emplace(sess.get(), sess);
    }
    gw.metrics().connections.add(1);
    gw.metrics().connections_total.inc();
    if (why != session::refusal::none)
      gw.metrics().connections_refused.inc();
    sess->start(why);
  }
  do_accept();
}

result<std::unique_ptr<http_server>> http_server::start(runtime& rt, http_server_config config) {
  // The runtime keeps descriptors for each entity it may hold open (max_active_entities).
  size_t asked = config.limits.max_connections;
  auto fds = rt.descriptors();
  config.limits.max_connections = std::min(asked, fds.connections);
  auto p = std::make_shared<impl>(rt, std::move(config));
  p->weak_self = p;
  if (p->gw.config().limits.max_connections < asked) {
    auto n = [](size_t v) { return std::to_string(v); };
    p->gw.log({{"level", "warn"},
               {"event", "max_connections_lowered"},
               {"asked", asked},
               {"max_connections", fds.connections},
               {"descriptor_limit", fds.limit},
               {"max_active_entities", fds.max_active_entities},
               {"detail",
                "this process may open " + n(fds.limit) + " files (RLIMIT_NOFILE); up to " +
                  n(fds.max_active_entities) + " open entities use " + n(fds.per_entity) +
                  " each (max_active_entities) and " + n(fds.reserved) +
                  " are kept for the listener, tools and indexes, which leaves " +
                  n(fds.connections) + " for connections, fewer than max_connections " + n(asked) +
                  "; raise the limit (ulimit -n, or LimitNOFILE in a systemd unit) or lower "
                  "max_active_entities to allow more"}});
  }
  const auto& cfg = p->gw.config();
  beast::error_code ec;
  std::string host = cfg.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  tcp::endpoint ep;
  auto addr = net::ip::make_address(host, ec);
  if (!ec) {
    ep = tcp::endpoint(addr, cfg.port);
  } else {
    tcp::resolver resolver(p->ioc);
    auto found = resolver.resolve(host, std::to_string(cfg.port), ec);
    if (ec || found.empty())
      return status{errc::invalid_argument,
                    "cannot resolve listen host '" + cfg.host + "': " + ec.message()};
    ep = found.begin()->endpoint();
  }
  auto where = cfg.host + ":" + std::to_string(cfg.port);
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return status{errc::unavailable, "cannot listen on " + where + ": " + ec.message()};
  p->port = p->acceptor.local_endpoint(ec).port();
  p->work.emplace(net::make_work_guard(p->ioc));
  net::post(p->acceptor.get_executor(), [raw = p.get()] { raw->do_accept(); });
  size_t n = std::max<size_t>(1, cfg.io_threads);
  for (size_t i = 0; i < n; ++i)
    p->threads.emplace_back([raw = p.get()] { raw->run_thread(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

http_server::http_server(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() {
  stop();
}

uint16_t http_server::port() const {
  return impl_->port;
}

void http_server::begin_shutdown() {
  if (impl_->gw.draining())
    return;
  impl_->gw.begin_shutdown();
  impl_->close_acceptor();
}

bool http_server::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> g(impl_->mu);
  return impl_->cv.wait_for(g, timeout, [&] { return impl_->in_flight == 0; });
}

void http_server::stop() {
  auto& p = *impl_;
  if (p.stopped.exchange(true))
    return;
  p.closing.store(true);
  p.gw.begin_shutdown();
  p.close_acceptor();
  std::vector<std::shared_ptr<session>> open;
  {
    std::lock_guard<std::mutex> g(p.mu);
    for (auto& [_, w] : p.sessions)
      if (auto s = w.lock())
        open.push_back(std::move(s));
  }
  for (auto& s : open)
    net::post(s->executor(), [s] { s->close(); });
  open.clear();
  {
    std::unique_lock<std::mutex> g(p.mu);
    p.cv.wait_for(g, close_grace, [&] { return p.sessions.empty(); });
  }
  p.gw.wait_restores(); // rollbacks and forks on threads of their own answer first
  p.gw.stop_relay();    // relayed requests still out are answered (cancelled) before the I/O stops
  p.work.reset();
  p.ioc.stop();
  for (auto& t : p.threads)
    if (t.joinable())
      t.join();
  // Replies that come from now on are dropped; the handlers queued and never run (a reply that
  // came after the grace, a connection's pending reads) are destroyed, and the connections they
  // held with them. Queued in a stopped io_context, they held the server alive for good.
  p.gate->close();
  p.ioc.destroy_queued();
}

std::string http_server::metrics_text() const {
  return impl_->gw.metrics_text();
}

} // namespace factum
