// http/ws_server.cpp: the WebSocket transport (Boost.Beast): one ws_session per connection,
// from the upgrade request to the close. It asks the gateway (auth, the entity's on_connect),
// completes the handshake, hands each message to the entity as a turn (one at a time, in order,
// a bounded number read ahead), answers auto-responses itself, enforces the message size, rate
// and send-queue limits, and runs on_close once the connection has ended and its last message's
// turn is done. Every member runs on the connection's strand; the hub and the runtime call in
// through ws_link, which posts to it.
#include "ws/ws_server.hpp"

#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "factum/storage/base64.hpp"
#include "gateway.hpp"
#include "io_gate.hpp"

namespace factum::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;
namespace net = boost::asio;
using ws_end = http_metrics::ws_end;
using tcp = net::ip::tcp;

namespace {

/// How long a close handshake may take before the TCP connection is dropped.
constexpr std::chrono::seconds close_grace{5};
/// The subprotocol a browser offers (with "factum-key.<API key>": browsers cannot set headers).
constexpr std::string_view factum_protocol = "factum";
constexpr std::string_view key_protocol_prefix = "factum-key.";

struct out_frame {
  std::shared_ptr<const std::string> data;
  bool binary = false;
};

/// A FIFO of frames that holds no memory while empty (a std::deque allocates a 512-byte block
/// up front: two per connection were a tenth of an idle connection's memory).
class frame_queue {
 public:
  bool empty() const noexcept { return head_ == v_.size(); }
  size_t size() const noexcept { return v_.size() - head_; }
  out_frame& front() { return v_[head_]; }
  void push_back(out_frame f) { v_.push_back(std::move(f)); }
  void pop_front() {
    v_[head_++] = {};
    if (head_ == v_.size())
      clear();
  }
  void clear() {
    v_.clear();
    head_ = 0;
    if (v_.capacity() > 64)
      v_.shrink_to_fit();
  }

 private:
  std::vector<out_frame> v_;
  size_t head_ = 0;
};

/// A connection as a connection turn's arguments carry it (connection_turns.cpp reads it).
nlohmann::json conn_json(const connection& c) {
  return {{"id", c.id}, {"tags", c.tags}, {"attachment", c.attachment}, {"params", c.params}};
}

class ws_session final : public ws_link,
                         public ws_handle,
                         public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(gateway& gw, beast::tcp_stream&& s, std::shared_ptr<void> keep,
             std::shared_ptr<io_gate> gate)
      : keep_(std::move(keep)), gate_(std::move(gate)), gw_(gw), ws_(std::move(s)),
        ex_(ws_.get_executor()), grace_(ex_), lim_(gw.config().limits) {}

  void start(bhttp::request<bhttp::string_body>&& req) {
    req_ = std::move(req);
    auto r = to_http_request(req_);
    r.websocket = true;
    r.link = std::weak_ptr<ws_link>(shared_from_this());
    take_subprotocols(r);
    api_key_ = r.api_key;
    gw_.handle(std::move(r), [self = shared_from_this()](http_response res) {
      self->gate_->post(self->ex_,
                        [self, res = std::move(res)]() mutable { self->decided(std::move(res)); });
    });
  }

  // -- ws_link (any thread) --

  void send(std::shared_ptr<const std::string> data, bool binary) override {
    gate_->post(ex_, [self = shared_from_this(), data = std::move(data), binary]() mutable {
      self->enqueue({std::move(data), binary});
    });
  }
  void close(int code, std::string reason) override {
    gate_->post(ex_, [self = shared_from_this(), code, reason = std::move(reason)] {
      self->start_close(code, reason, code == 1012 ? ws_end::moved : ws_end::entity);
    });
  }

  // -- ws_handle (any thread) --

  void stop() override {
    gate_->post(ex_, [self = shared_from_this()] {
      if (!self->open_)
        return self->end_transport(ws_end::stopping, 1001);
      self->start_close(1001, "server stopping", ws_end::stopping);
    });
  }

 private:
  /// Browsers authenticate with the subprotocol "factum-key.<key>" (and must offer "factum",
  /// which the handshake selects). Each key subprotocol counts as one more key beside the
  /// X-API-Key headers: two keys, whichever way they came, are refused (authenticate).
  void take_subprotocols(http_request& r) {
    for (auto it = req_.find(bhttp::field::sec_websocket_protocol);
         it != req_.end() && it->name() == bhttp::field::sec_websocket_protocol; ++it) {
      std::string_view v(it->value().data(), it->value().size());
      while (!v.empty()) {
        auto comma = v.find(',');
        auto tok = v.substr(0, comma);
        v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
        while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t'))
          tok.remove_prefix(1);
        while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t'))
          tok.remove_suffix(1);
        if (tok == factum_protocol)
          offers_factum_ = true;
        else if (tok.substr(0, key_protocol_prefix.size()) == key_protocol_prefix &&
                 ++r.api_key_count == 1) {
          r.api_key = std::string(tok.substr(key_protocol_prefix.size()));
          r.has_api_key = true;
        }
      }
    }
  }

  // -- the handshake --

  void decided(http_response res) {
    if (ended_) { // the server stopped meanwhile: the hub must forget an accepted connection
      if (res.upgrade) {
        id_ = res.upgrade->conn_id;
        key_ = res.upgrade->key;
        record_ = gw_.hub().remove(id_);
        maybe_run_close();
      }
      return;
    }
    if (!res.upgrade)
      return refuse_http(std::move(res));
    up_ = res.upgrade;
    id_ = up_->conn_id;
    key_ = up_->key;
    if (!up_->proxy_to.empty())
      return connect_peer();
    accept_client();
  }

  void accept_client() {
    beast::get_lowest_layer(ws_).expires_never();
    auto t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.handshake_timeout = std::chrono::seconds(10);
    if (lim_.ws_idle_timeout.count() > 0) {
      t.idle_timeout = lim_.ws_idle_timeout;
      t.keep_alive_pings = true;
    }
    ws_.set_option(t);
    ws_.read_message_max(lim_.ws_max_message_bytes);
    ws_.set_option(websocket::stream_base::decorator([p = offers_factum_](auto& m) {
      m.set(bhttp::field::server, "factum");
      if (p)
        m.set(bhttp::field::sec_websocket_protocol,
              beast::string_view(factum_protocol.data(), factum_protocol.size()));
    }));
    ws_.async_accept(req_,
                     [self = shared_from_this()](beast::error_code ec) { self->on_accept(ec); });
  }

  void on_accept(beast::error_code ec) {
    if (ended_)
      return;
    if (ec)
      return end_transport(ws_end::client, 1006);
    open_ = true;
    req_ = {}; // the handshake's request is not needed any more (its headers cost ~1 KiB)
    if (up_->accept) {
      counted_ = true;
      gw_.metrics().ws_open.add(1);
    }
    if (!up_->accept || pending_close_) {
      auto code = up_->accept ? close_code_ : up_->close_code;
      auto reason = up_->accept ? close_reason_ : up_->reason;
      auto why = pending_close_ ? end_reason_ : ws_end::entity;
      closing_ = false;
      return start_close(code, reason, why);
    }
    write_next();
    read();
    if (peer_)
      read_peer();
  }

  /// A refusal before the handshake: the gateway's problem+json, then close.
  void refuse_http(http_response r) {
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(r.status));
    res->set(bhttp::field::server, "factum");
    res->set(bhttp::field::content_type, r.content_type);
    if (!r.trace_id.empty())
      res->set("X-Trace-Id", r.trace_id);
    if (r.retry_after_s > 0)
      res->set(bhttp::field::retry_after, std::to_string(r.retry_after_s));
    if (!r.allow.empty())
      res->set(bhttp::field::allow, r.allow);
    res->keep_alive(false);
    res->body() = std::move(r.body);
    res->prepare_payload();
    auto& tcp = beast::get_lowest_layer(ws_);
    tcp.expires_after(lim_.request_timeout);
    bhttp::async_write(tcp, *res, [self = shared_from_this(), res](beast::error_code, size_t) {
      beast::error_code ignored;
      beast::get_lowest_layer(self->ws_).socket().shutdown(net::socket_base::shutdown_both,
                                                           ignored);
      self->end_transport(ws_end::client, 1006);
    });
  }

  // -- reading: each message a turn, one at a time --

  /// Reads the next message (a turn's), or once closing, until the client's close frame
  /// (error::closed), dropping messages before it.
  void read() {
    if (reading_ || ended_ || (!closing_ && pending_.size() >= lim_.ws_max_pending_messages))
      return;
    reading_ = true;
    ws_.async_read(rbuf_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->reading_ = false;
      if (ec)
        return self->on_read_error(ec);
      if (!self->closing_)
        return self->on_message();
      self->rbuf_.consume(self->rbuf_.size());
      self->read();
    });
  }

  void on_message() {
    bool binary = ws_.got_binary();
    auto data = beast::buffers_to_string(rbuf_.data());
    rbuf_.consume(rbuf_.size());
    if (rbuf_.capacity() > 16 * 1024)
      rbuf_.shrink_to_fit();
    if (!take_token())
      return start_close(
        1008, "more than " + std::to_string(lim_.ws_messages_per_second) + " messages per second",
        ws_end::rate_limit);
    if (!binary && up_->options) {
      auto& auto_responses = up_->options->auto_responses;
      if (auto it = auto_responses.find(data); it != auto_responses.end()) {
        gw_.metrics().ws_messages.inc(http_metrics::auto_response);
        enqueue({std::make_shared<const std::string>(it->second), false});
        return read();
      }
    }
    pending_.push_back({std::make_shared<const std::string>(std::move(data)), binary});
    run_next_message();
    read();
  }

  /// Token bucket: ws_messages_per_second per second, a burst of as many.
  bool take_token() {
    auto now = std::chrono::steady_clock::now();
    double rate = lim_.ws_messages_per_second;
    if (last_refill_ == std::chrono::steady_clock::time_point{})
      tokens_ = rate;
    else
      tokens_ =
        std::min(rate, tokens_ + rate * std::chrono::duration<double>(now - last_refill_).count());
    last_refill_ = now;
    if (tokens_ < 1)
      return false;
    tokens_ -= 1;
    return true;
  }

  void run_next_message() {
    if (turn_running_ || pending_.empty())
      return;
    if (peer_)
      return write_peer();
    // The hub holds the connection's record (one copy per connection); once it ended, record_.
    auto c = ended_ ? record_ : gw_.hub().find(id_);
    if (!c) {
      pending_.clear();
      return;
    }
    turn_running_ = true;
    auto m = std::move(pending_.front());
    pending_.pop_front();
    nlohmann::json args = {{"conn", conn_json(*c)}};
    if (m.binary)
      args["binary_b64"] = base64_encode(*m.data);
    else
      args["text"] = *m.data;
    gw_.metrics().ws_messages.inc(http_metrics::message_in);
    call_options opts;
    opts.timeout = gw_.config().call_timeout;
    gw_.rt().call(
      key_, "@ws_message", args.dump(), std::move(opts), [self = shared_from_this()](call_reply r) {
        self->gate_->post(self->ex_, [self, r = std::move(r)] { self->on_turn_done(r); });
      });
  }

  void on_turn_done(const call_reply& r) {
    turn_running_ = false;
    if (!r.ok) {
      gw_.metrics().ws_turn_failures.inc();
      // A retryable failure (overload, storage): the message was not processed. The client is
      // told to reconnect and send again; the messages read after it are not run (order).
      if (r.retryable) {
        pending_.clear();
        start_close(1013, "message not processed (" + r.code + "); reconnect and send it again",
                    ws_end::failed_turn);
      }
    }
    run_next_message();
    read();
    maybe_run_close();
  }

  void on_read_error(beast::error_code ec) {
    if (ended_)
      return maybe_run_close();
    if (ec == websocket::error::closed) {
      if (!closing_) { // a close frame without a code is 1005 (RFC 6455, 7.1.5)
        auto code = static_cast<int>(ws_.reason().code);
        return end_transport(ws_end::client, code == 0 ? 1005 : code);
      }
      return end_transport(end_reason_, close_code_);
    }
    if (ec == websocket::error::message_too_big)
      return end_transport(ws_end::too_big, 1009);
    if (ec == beast::error::timeout)
      return end_transport(ws_end::idle, 1006);
    if (ec == websocket::condition::protocol_violation)
      return end_transport(ws_end::protocol,
                           ec == websocket::error::bad_frame_payload ? 1007 : 1002);
    end_transport(closing_ ? end_reason_ : ws_end::client, closing_ ? close_code_ : 1006);
  }

  // -- writing --

  void enqueue(out_frame f) {
    if (ended_ || closing_)
      return;
    queued_bytes_ += f.data->size();
    queue_.push_back(std::move(f));
    if (queued_bytes_ > lim_.ws_max_send_queue_bytes) {
      // The client does not read: a close frame would wait behind the queue, so the TCP
      // connection goes now.
      return end_transport(ws_end::slow_reader, 1008);
    }
    if (open_ && !writing_)
      write_next();
  }

  void write_next() {
    if (writing_ || ended_)
      return;
    if (queue_.empty()) {
      if (close_after_writes_)
        do_close();
      return;
    }
    writing_ = true;
    auto& f = queue_.front();
    ws_.binary(f.binary);
    // The handler holds the data: end_transport() may clear the queue while the write is out.
    ws_.async_write(net::buffer(*f.data), [self = shared_from_this(),
                                           data = f.data](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (self->ended_)
        return;
      if (ec)
        return self->end_transport(self->closing_ ? self->end_reason_ : ws_end::client, 1006);
      self->queued_bytes_ -= self->queue_.front().data->size();
      self->queue_.pop_front();
      self->gw_.metrics().ws_messages.inc(http_metrics::message_out);
      self->write_next();
    });
  }

  // -- closing --

  void start_close(int code, std::string reason, ws_end why) {
    if (closing_ || ended_)
      return;
    closing_ = true;
    end_reason_ = why;
    close_code_ = code;
    close_reason_ = std::move(reason);
    if (!open_) { // before the handshake: on_accept closes once it is done
      pending_close_ = true;
      return;
    }
    grace_.expires_after(close_grace);
    grace_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec)
        self->end_transport(self->end_reason_, self->close_code_);
    });
    close_after_writes_ = true;
    if (!writing_)
      write_next();
  }

  void do_close() {
    close_after_writes_ = false;
    ws_.async_close(
      websocket::close_reason(static_cast<websocket::close_code>(close_code_), close_reason_),
      [self = shared_from_this()](beast::error_code ec) {
        if (ec)
          self->end_transport(self->end_reason_, self->close_code_);
        // else the read loop sees the client's close frame (error::closed)
      });
    read(); // the client's close frame completes the close
  }

  /// The connection has ended: the socket goes, the hub forgets it, and its on_close runs once
  /// the turn of its last message is done.
  void end_transport(ws_end why, int code) {
    if (ended_)
      return;
    ended_ = true;
    end_reason_ = why;
    close_code_ = code;
    grace_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    queue_.clear();
    queued_bytes_ = 0;
    if (counted_)
      gw_.metrics().ws_open.add(-1);
    if (counted_ || (up_ && up_->accept))
      gw_.metrics().ws_closed(why);
    if (!id_.empty())
      record_ = gw_.hub().remove(id_);
    keep_.reset(); // the HTTP server's accounting of this connection ends
    if (peer_) {
      pending_.clear();
      close_peer();
    }
    maybe_run_close();
  }

  void maybe_run_close() {
    if (!ended_ || turn_running_ || !pending_.empty() || !record_)
      return run_next_message();
    auto c = std::move(*record_);
    record_.reset();
    nlohmann::json args = {{"conn", conn_json(c)}, {"code", close_code_}};
    call_options opts;
    opts.timeout = gw_.config().call_timeout;
    gw_.rt().call(key_, "@ws_close", args.dump(), std::move(opts), [](call_reply) {});
  }

  // -- cluster mode: a relay to the entity's owner --
  //
  // The owner holds the connection (its hub, its turns); this node passes frames both ways,
  // answers auto-responses and applies the client-side limits. The owner's refusal before its
  // handshake is the client's; a peer that goes away closes the client with 1012 (reconnect).

  void connect_peer() {
    auto colon = up_->proxy_to.rfind(':');
    if (colon == std::string::npos)
      return peer_unavailable("the owner's address " + up_->proxy_to + " has no port");
    peer_.emplace(ex_);
    resolver_.emplace(ex_);
    beast::get_lowest_layer(*peer_).expires_after(lim_.request_timeout);
    resolver_->async_resolve(
      up_->proxy_to.substr(0, colon), up_->proxy_to.substr(colon + 1),
      [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type found) {
        if (ec || self->ended_)
          return self->peer_unavailable("cannot resolve the owner: " + ec.message());
        beast::get_lowest_layer(*self->peer_)
          .async_connect(found, [self](beast::error_code ec, const tcp::endpoint&) {
            self->peer_connected(ec);
          });
      });
  }

  void peer_connected(beast::error_code ec) {
    if (ended_)
      return close_peer();
    if (ec)
      return peer_unavailable("cannot reach the owner " + up_->proxy_to + ": " + ec.message());
    peer_->set_option(websocket::stream_base::decorator(
      [key = api_key_, epoch = std::to_string(up_->proxy_epoch)](websocket::request_type& m) {
        m.set("X-API-Key", key);
        m.set("X-Factum-Forwarded", epoch);
      }));
    peer_->read_message_max(17 * 1024 * 1024); // a turn sends at most 16 MiB of frames
    std::string target(req_.target().data(), req_.target().size());
    peer_->async_handshake(
      peer_res_, up_->proxy_to, target,
      [self = shared_from_this()](beast::error_code ec) { self->peer_handshake(ec); });
  }

  void peer_handshake(beast::error_code ec) {
    if (ended_)
      return close_peer();
    if (ec == websocket::error::upgrade_declined) { // the owner's own answer goes to the client
      http_response r;
      r.status = static_cast<int>(peer_res_.result_int());
      r.content_type = std::string(peer_res_[bhttp::field::content_type]);
      r.body = std::move(peer_res_.body());
      r.trace_id = std::string(peer_res_["X-Trace-Id"]);
      peer_.reset();
      return refuse_http(std::move(r));
    }
    if (ec)
      return peer_unavailable("the owner's handshake failed: " + ec.message());
    beast::get_lowest_layer(*peer_).expires_never();
    accept_client();
  }

  void peer_unavailable(const std::string& detail) {
    if (ended_)
      return;
    peer_.reset();
    auto r = gw_.reject(problems::shard_unavailable, detail + "; retry", "GET",
                        std::string_view(req_.target().data(), req_.target().size()));
    r.retry_after_s = 1;
    refuse_http(std::move(r));
  }

  /// The next message read from the client goes to the owner (one write at a time).
  void write_peer() {
    turn_running_ = true;
    auto m = std::move(pending_.front());
    pending_.pop_front();
    gw_.metrics().ws_messages.inc(http_metrics::message_in);
    peer_->binary(m.binary);
    peer_->async_write(net::buffer(*m.data),
                       [self = shared_from_this(), m](beast::error_code ec, size_t) {
                         self->turn_running_ = false;
                         if (ec)
                           return self->peer_gone();
                         self->run_next_message();
                         self->read();
                       });
  }

  void read_peer() {
    peer_->async_read(peer_buf_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec)
        return self->peer_gone();
      auto data = beast::buffers_to_string(self->peer_buf_.data());
      self->peer_buf_.consume(self->peer_buf_.size());
      self->enqueue(
        {std::make_shared<const std::string>(std::move(data)), self->peer_->got_binary()});
      self->read_peer();
    });
  }

  /// The owner closed the connection (its code goes to the client) or went away (1012).
  void peer_gone() {
    if (ended_ || !peer_)
      return;
    auto code = static_cast<int>(peer_->reason().code);
    std::string reason(peer_->reason().reason.data(), peer_->reason().reason.size());
    if (code == 0 || code == 1005 || code == 1006) {
      code = 1012;
      reason = "the entity's node went away; reconnect";
    }
    start_close(code, reason, code == 1012 ? ws_end::moved : ws_end::entity);
  }

  /// The client's end reaches the owner: its close code when it sent one (the owner's on_close
  /// sees it), else the TCP connection just closes (1006 there).
  void close_peer() {
    if (!peer_)
      return;
    bool sendable = end_reason_ == ws_end::client && close_code_ >= 1000 && close_code_ <= 4999 &&
                    close_code_ != 1005 && close_code_ != 1006 && close_code_ != 1015;
    if (sendable && peer_->is_open()) {
      beast::get_lowest_layer(*peer_).expires_after(close_grace);
      return peer_->async_close(
        websocket::close_reason(static_cast<websocket::close_code>(close_code_)),
        [self = shared_from_this()](beast::error_code) {
          beast::error_code ignored;
          beast::get_lowest_layer(*self->peer_).socket().close(ignored);
        });
    }
    beast::error_code ignored;
    beast::get_lowest_layer(*peer_).socket().close(ignored);
  }

  // First: released last, after the stream and timer bound to the server's io_context (the
  // HTTP session, which holds the server).
  std::shared_ptr<void> keep_;
  std::shared_ptr<io_gate> gate_;
  gateway& gw_;
  websocket::stream<beast::tcp_stream> ws_;
  net::any_io_executor ex_;
  net::steady_timer grace_;
  const http_limits& lim_;
  bhttp::request<bhttp::string_body> req_;
  bool offers_factum_ = false;
  std::string api_key_; ///< the client's (the owner authenticates it again)
  std::optional<websocket::stream<beast::tcp_stream>> peer_; ///< cluster: the owner's side
  std::optional<tcp::resolver> resolver_;
  websocket::response_type peer_res_;
  beast::flat_buffer peer_buf_;
  std::shared_ptr<const ws_upgrade> up_;
  std::string id_;
  entity_key key_;
  std::optional<connection> record_; ///< removed from the hub, its on_close not yet run
  beast::flat_buffer rbuf_;
  frame_queue pending_; ///< messages read, their turns not yet started
  frame_queue queue_;   ///< frames to write
  size_t queued_bytes_ = 0;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point last_refill_{};
  bool open_ = false, counted_ = false, reading_ = false, writing_ = false;
  bool turn_running_ = false, closing_ = false, pending_close_ = false;
  bool close_after_writes_ = false, ended_ = false;
  ws_end end_reason_ = ws_end::client;
  int close_code_ = 1006;
  std::string close_reason_;
};

} // namespace

std::shared_ptr<ws_handle> start_websocket(gateway& gw, beast::tcp_stream&& stream,
                                           bhttp::request<bhttp::string_body>&& req,
                                           std::shared_ptr<void> keep,
                                           std::shared_ptr<io_gate> gate) {
  auto s = std::make_shared<ws_session>(gw, std::move(stream), std::move(keep), std::move(gate));
  s->start(std::move(req));
  return s;
}

} // namespace factum::http
