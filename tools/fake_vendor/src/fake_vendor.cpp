// fake_vendor.cpp: the fake vendor (fake_vendor.hpp): a Beast HTTP/1.1 server with keep-alive,
// the control API under /_vendor/, the vendor-call behaviours (modes and scripted responses),
// pricing, Idempotency-Key de-duplication and the counters (in all and per Idempotency-Key). The
// only Beast translation unit of factum_fake_vendor. Sessions run on the vendor's single Asio
// thread; the control state is guarded by a mutex because tests also change it from their own
// threads.
#include "factum/fake_vendor/fake_vendor.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "factum/resilience/money.hpp"

namespace factum::fake_vendor {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;
using resilience::decimal;

namespace {

class session;

/// Longest hold of the timeout mode and longest delay: every fault ends by itself.
constexpr int64_t max_hold_ms = 30'000;

/// How one vendor call ends.
struct action {
  enum kind_t { answer, reset, hold } kind = answer;
  int status = 200;
  json body;
  std::optional<int64_t> retry_after_s;
  std::map<std::string, std::string> headers; ///< extra answer headers (scripted)
  std::optional<std::string> raw_body;        ///< a body sent as is (scripted)
  int64_t delay_ms = 0;
  int64_t hold_ms = max_hold_ms;
};

/// The behaviour set by POST /_vendor/mode (fields merge into the current mode).
struct mode_state {
  std::string name = "ok";
  int64_t retry_after_s = 1;
  double fail_ratio = 0.3;
  double timeout_ratio = 0.0; ///< share of `flaky` calls held without an answer
  uint64_t seed = 1;
  int64_t delay_ms = 0;
  int64_t delay_jitter_ms = 0; ///< a random extra wait of 0..this, per answer
  int64_t hold_ms = max_hold_ms;
  std::optional<std::string> price; ///< unset: no X-Cost header and nothing charged
  bool charge_failed = false;
  /// Set: a call without `Authorization: Bearer <token>` is answered 401; POST /_vendor/token
  /// hands it out.
  std::optional<std::string> token;
};

/// A completed (2xx) answer kept for its Idempotency-Key, with what it was charged (X-Cost).
struct stored_answer {
  int status = 200;
  std::string body;
  std::optional<std::string> cost;
};

/// What the vendor did with the calls of one Idempotency-Key (GET /_vendor/keys).
struct key_counts {
  uint64_t calls = 0;
  uint64_t delivered = 0; ///< 2xx answers made fresh (not replays)
  uint64_t replayed = 0;  ///< 2xx answers replayed from the key's stored answer
  uint64_t failed = 0;    ///< non-2xx answers
  uint64_t no_answer = 0; ///< held (timeout) or reset
  uint64_t in_flight = 0; ///< calls of this key being handled now
};

std::string problem(const std::string& why) {
  return json{{"error", why}}.dump();
}

bool known_keys(const json& obj, std::initializer_list<const char*> names, std::string& err,
                const std::string& where) {
  for (auto& [k, _] : obj.items()) {
    bool ok = std::any_of(names.begin(), names.end(), [&](const char* n) { return k == n; });
    if (!ok) {
      err = where + "unknown key '" + k + "'";
      return false;
    }
  }
  return true;
}

bool read_int(const json& obj, const char* name, int64_t lo, int64_t hi, int64_t& out,
              std::string& err, const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end())
    return true;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    err = where + name + " must be an integer between " + std::to_string(lo) + " and " +
          std::to_string(hi);
    return false;
  }
  out = it->get<int64_t>();
  return true;
}

} // namespace

struct vendor::impl {
  // Declared first: destroyed last, after every I/O object bound to it.
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread thread;
  uint16_t port = 0;
  std::string host;
  std::once_flag stopped;
  std::set<session*> sessions; // I/O thread only

  mutable std::mutex mu;
  mode_state mode;                           // guarded by mu
  std::mt19937_64 rng{1};                    // guarded by mu
  std::deque<action> script;                 // guarded by mu
  std::map<std::string, stored_answer> keys; // guarded by mu
  std::map<std::string, key_counts> per_key; // guarded by mu
  uint64_t calls = 0;                        // guarded by mu (and the counters below)
  std::map<std::string, uint64_t> by_status;
  decimal charged_total = decimal::parse("0").value();
  json charges = json::array();
  uint64_t duplicates = 0;
  uint64_t tokens_issued = 0;
  uint64_t connections = 0;
  uint64_t open_connections = 0;
  uint64_t in_flight = 0;
  uint64_t max_in_flight = 0;

  std::string apply_mode(const json& body);
  std::string apply_script(const json& body);
  json stats_json() const;
  json keys_json() const;
  void reset_all();
  void do_accept();
  void close_all();
};

namespace {

/// One connection. Every member function runs on the vendor's I/O thread.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket s, vendor::impl& v) : sock_(std::move(s)), v_(v), timer_(v.ioc) {
    v_.sessions.insert(this);
    std::lock_guard<std::mutex> g(v_.mu);
    ++v_.connections;
    ++v_.open_connections;
  }
  // Sessions end while the I/O thread runs (stop() lets it run out), so v_ is alive here.
  ~session() {
    v_.sessions.erase(this);
    std::lock_guard<std::mutex> g(v_.mu);
    --v_.open_connections;
  }

  void start() { read(); }

  /// Ends the connection at once (vendor stop): no answer for a call in progress.
  void kill() {
    closed_ = true;
    timer_.cancel();
    beast::error_code ec;
    sock_.close(ec);
    if (in_call_)
      end_call();
  }

 private:
  void read() {
    if (closed_)
      return;
    parser_.emplace();
    parser_->body_limit(16 * 1024 * 1024);
    bhttp::async_read(
      sock_, buf_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec || closed_)
      return close();
    req_ = parser_->release();
    keep_alive_ = req_.keep_alive();
    std::string target(req_.target());
    auto q = target.find('?');
    std::string path = q == std::string::npos ? target : target.substr(0, q);
    if (path.rfind("/_vendor/", 0) == 0)
      return control(path);
    if (req_.method() != bhttp::verb::post)
      return respond(405, problem("vendor calls are POST requests"), {});
    vendor_call(path);
  }

  void control(const std::string& path) {
    bool post = req_.method() == bhttp::verb::post;
    if (path == "/_vendor/stats" && req_.method() == bhttp::verb::get)
      return respond(200, v_.stats_json().dump(), {});
    if (path == "/_vendor/keys" && req_.method() == bhttp::verb::get)
      return respond(200, v_.keys_json().dump(), {});
    if (path == "/_vendor/token" && post) {
      std::lock_guard<std::mutex> g(v_.mu);
      if (!v_.mode.token)
        return respond(404, problem("no token is set (POST /_vendor/mode {\"token\": ...})"), {});
      ++v_.tokens_issued;
      return respond(200, json{{"access_token", *v_.mode.token}, {"token_type", "Bearer"}}.dump(),
                     {});
    }
    if (path == "/_vendor/reset" && post) {
      v_.reset_all();
      return respond(200, json{{"ok", true}}.dump(), {});
    }
    if ((path == "/_vendor/mode" || path == "/_vendor/script") && post) {
      auto body =
        json::parse(req_.body().empty() ? std::string("{}") : req_.body(), nullptr, false);
      if (body.is_discarded())
        return respond(400, problem("the body is not JSON"), {});
      auto err = path == "/_vendor/mode" ? v_.apply_mode(body) : v_.apply_script(body);
      if (!err.empty())
        return respond(400, problem(err), {});
      return respond(200, json{{"ok", true}}.dump(), {});
    }
    respond(404, problem("no control endpoint " + req_.method_string().to_string() + " " + path),
            {});
  }

  /// What the mode (or the next scripted action) does with a new call. Under v_.mu.
  action mode_action() {
    auto& m = v_.mode;
    action a;
    if (!v_.script.empty()) {
      a = v_.script.front();
      v_.script.pop_front();
      return a;
    }
    a.hold_ms = m.hold_ms;
    double draw =
      m.name == "flaky" ? std::uniform_real_distribution<double>(0.0, 1.0)(v_.rng) : 1.0;
    // After the draw, so that delay_jitter_ms does not change which calls of a seed fail.
    a.delay_ms = m.delay_ms + jitter();
    auto fail = [&](int status) {
      a.status = status;
      a.body = json{{"error", status == 429   ? "rate limited"
                              : status == 503 ? "service unavailable"
                                              : "internal error"}};
    };
    if (m.name == "timeout")
      a.kind = action::hold;
    else if (m.name == "reset")
      a.kind = action::reset;
    else if (m.name == "rate_limit") {
      fail(429);
      a.retry_after_s = m.retry_after_s;
    } else if (m.name == "down")
      fail(503);
    else if (m.name == "error")
      fail(500);
    else if (m.name == "flaky" && draw < m.fail_ratio)
      fail(503);
    else if (m.name == "flaky" && draw < m.fail_ratio + m.timeout_ratio)
      a.kind = action::hold;
    return a;
  }

  /// The mode's random extra delay (delay_jitter_ms). Under v_.mu.
  int64_t jitter() {
    auto& m = v_.mode;
    return m.delay_jitter_ms > 0
             ? std::uniform_int_distribution<int64_t>(0, m.delay_jitter_ms)(v_.rng)
             : int64_t{0};
  }

  /// A fresh answer's body and charge; a 2xx is stored for the key's replays. Under v_.mu.
  void fresh_answer(action& a, const std::string& path, const std::string& key, std::string& body,
                    std::optional<std::string>& cost) {
    auto& m = v_.mode;
    if (a.body.is_null()) {
      a.body = {{"ok", a.status >= 200 && a.status < 300}, {"path", path}, {"call", v_.calls}};
      auto in = json::parse(req_.body(), nullptr, false);
      if (!in.is_discarded())
        a.body["received"] = std::move(in);
      if (!key.empty())
        a.body["idempotency_key"] = key;
      if (auto t = req_["X-Trace-Id"]; !t.empty())
        a.body["trace_id"] = std::string(t);
    }
    body = a.raw_body ? *a.raw_body : a.body.dump();
    bool ok = a.status >= 200 && a.status < 300;
    if (m.price) {
      bool charged = ok || m.charge_failed;
      cost = charged ? *m.price : std::string("0");
      if (charged) {
        v_.charged_total += decimal::parse(*m.price).value();
        v_.charges.push_back(
          {{"path", path}, {"idempotency_key", key}, {"amount", *m.price}, {"status", a.status}});
      }
    }
    if (ok && !key.empty())
      v_.keys[key] = stored_answer{a.status, body, cost};
  }

  /// The call in the counts by status and by key. Under v_.mu.
  void count_call(const action& a, const std::string& key, bool replay) {
    ++v_.by_status[a.kind == action::reset  ? std::string("reset")
                   : a.kind == action::hold ? std::string("timeout")
                                            : std::to_string(a.status)];
    if (key.empty())
      return;
    auto& k = v_.per_key[key];
    ++k.calls;
    ++k.in_flight;
    bool ok = a.status >= 200 && a.status < 300;
    ++(a.kind != action::answer ? k.no_answer : !ok ? k.failed : replay ? k.replayed : k.delivered);
  }

  void vendor_call(const std::string& path) {
    std::string key(req_["Idempotency-Key"]);
    action a;
    std::optional<std::string> cost; // X-Cost value
    bool replay = false;
    std::string body;
    {
      std::lock_guard<std::mutex> g(v_.mu);
      ++v_.calls;
      ++v_.in_flight;
      v_.max_in_flight = std::max(v_.max_in_flight, v_.in_flight);
      if (v_.mode.token && std::string(req_["Authorization"]) != "Bearer " + *v_.mode.token) {
        a.status = 401; // before replays: a replay needs the credential too
        a.body = json{{"error", "unauthorized"}};
        body = a.body.dump();
      } else if (auto it = key.empty() ? v_.keys.end() : v_.keys.find(key); it != v_.keys.end()) {
        ++v_.duplicates;
        replay = true;
        a.status = it->second.status;
        body = it->second.body;
        a.delay_ms = v_.mode.delay_ms + jitter();
        cost = it->second.cost; // what the original call was charged (charged once)
      } else {
        a = mode_action();
        if (a.kind == action::answer)
          fresh_answer(a, path, key, body, cost);
      }
      count_call(a, key, replay);
    }
    in_call_ = true;
    call_key_ = key;
    auto go = [this, a, cost, replay, body] {
      if (a.kind == action::reset) {
        // An abortive close: the peer sees a connection reset and no answer.
        beast::error_code ec;
        sock_.set_option(net::socket_base::linger(true, 0), ec);
        end_call();
        return close(false);
      }
      if (a.kind == action::hold)
        return wait(a.hold_ms, [this] {
          end_call();
          close();
        });
      std::map<std::string, std::string> headers = a.headers;
      if (cost)
        headers["X-Cost"] = *cost;
      if (a.retry_after_s)
        headers["Retry-After"] = std::to_string(*a.retry_after_s);
      if (replay)
        headers["Idempotent-Replayed"] = "true";
      respond(a.status, body, std::move(headers));
    };
    if (a.delay_ms > 0)
      wait(a.delay_ms, go);
    else
      go();
  }

  template <class F> void wait(int64_t ms, F f) {
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self = shared_from_this(), f](beast::error_code ec) mutable {
      if (ec || self->closed_)
        return;
      f();
    });
  }

  void end_call() {
    if (!in_call_)
      return;
    in_call_ = false;
    std::lock_guard<std::mutex> g(v_.mu);
    --v_.in_flight;
    if (auto it = v_.per_key.find(call_key_); !call_key_.empty() && it != v_.per_key.end())
      --it->second.in_flight;
  }

  void respond(int status, std::string body, std::map<std::string, std::string> headers) {
    if (closed_)
      return;
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(status));
    res_.set(bhttp::field::content_type, "application/json");
    for (auto& [k, val] : headers)
      res_.set(k, val);
    res_.body() = std::move(body);
    res_.keep_alive(keep_alive_);
    res_.prepare_payload();
    bhttp::async_write(sock_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->end_call();
      if (ec || !self->keep_alive_)
        return self->close();
      self->read();
    });
  }

  /// Closes the socket; `graceful` false skips the FIN (with linger 0 the close sends a RST).
  void close(bool graceful = true) {
    if (closed_ && !sock_.is_open())
      return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ec;
    if (graceful)
      sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    end_call();
  }

  tcp::socket sock_;
  vendor::impl& v_;
  net::steady_timer timer_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::request<bhttp::string_body> req_;
  bhttp::response<bhttp::string_body> res_;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool in_call_ = false;
  std::string call_key_; ///< the Idempotency-Key of the call in progress
};

} // namespace

// -- control state ------------------------------------------------------------------------------

std::string vendor::impl::apply_mode(const json& body) {
  if (!body.is_object())
    return "the mode must be a JSON object";
  std::string err;
  if (!known_keys(body,
                  {"mode", "retry_after_s", "fail_ratio", "timeout_ratio", "seed", "delay_ms",
                   "delay_jitter_ms", "hold_ms", "price", "charge_failed", "token"},
                  err, ""))
    return err;
  std::lock_guard<std::mutex> g(mu);
  mode_state m = mode;
  if (auto it = body.find("mode"); it != body.end()) {
    static const std::set<std::string> names = {"ok",    "timeout", "rate_limit", "down",
                                                "error", "reset",   "flaky"};
    if (!it->is_string() || !names.count(it->get<std::string>()))
      return "mode must be one of ok, timeout, rate_limit, down, error, reset, flaky";
    m.name = it->get<std::string>();
  }
  if (!read_int(body, "retry_after_s", 0, 86'400, m.retry_after_s, err, "") ||
      !read_int(body, "delay_ms", 0, max_hold_ms, m.delay_ms, err, "") ||
      !read_int(body, "delay_jitter_ms", 0, max_hold_ms, m.delay_jitter_ms, err, "") ||
      !read_int(body, "hold_ms", 0, max_hold_ms, m.hold_ms, err, ""))
    return err;
  if (auto it = body.find("fail_ratio"); it != body.end()) {
    if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0)
      return "fail_ratio must be a number between 0 and 1";
    m.fail_ratio = it->get<double>();
  }
  if (auto it = body.find("timeout_ratio"); it != body.end()) {
    if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0)
      return "timeout_ratio must be a number between 0 and 1";
    m.timeout_ratio = it->get<double>();
  }
  if (m.fail_ratio + m.timeout_ratio > 1.0)
    return "fail_ratio + timeout_ratio must be at most 1";
  bool reseed = false;
  if (auto it = body.find("seed"); it != body.end()) {
    if (!it->is_number_unsigned())
      return "seed must be a non-negative integer";
    m.seed = it->get<uint64_t>();
    reseed = true;
  }
  if (auto it = body.find("token"); it != body.end()) {
    if (!it->is_null() && (!it->is_string() || it->get<std::string>().empty() ||
                           it->get<std::string>().find_first_of(" \r\n") != std::string::npos))
      return "token must be a non-empty string without spaces (or null)";
    m.token = it->is_null() ? std::nullopt : std::optional<std::string>(it->get<std::string>());
  }
  if (auto it = body.find("price"); it != body.end()) {
    if (it->is_null()) {
      m.price.reset();
    } else {
      const char* why = "price must be a non-negative decimal string such as \"0.013\" (or null)";
      if (!it->is_string())
        return why;
      auto d = decimal::parse(it->get<std::string>());
      if (!d || d.value() < decimal::parse("0").value())
        return why;
      m.price = d.value().to_string();
    }
  }
  if (auto it = body.find("charge_failed"); it != body.end()) {
    if (!it->is_boolean())
      return "charge_failed must be true or false";
    m.charge_failed = it->get<bool>();
  }
  mode = m;
  if (reseed)
    rng.seed(m.seed);
  return "";
}

std::string vendor::impl::apply_script(const json& body) {
  if (!body.is_object() || !body.contains("responses") || !body["responses"].is_array())
    return "the script must be {\"responses\": [...]}";
  std::string err;
  if (!known_keys(body, {"responses", "append"}, err, ""))
    return err;
  std::deque<action> out;
  int64_t delay = 0;
  {
    std::lock_guard<std::mutex> g(mu);
    delay = mode.delay_ms;
  }
  auto& rs = body["responses"];
  for (size_t i = 0; i < rs.size(); ++i) {
    auto& r = rs[i];
    std::string where = "responses[" + std::to_string(i) + "].";
    if (!r.is_object())
      return where.substr(0, where.size() - 1) + " must be an object";
    if (!known_keys(r,
                    {"status", "body", "raw_body", "headers", "delay_ms", "retry_after_s", "reset",
                     "timeout", "hold_ms"},
                    err, where))
      return err;
    action a;
    a.delay_ms = delay;
    int64_t status = 200;
    if (!read_int(r, "status", 100, 599, status, err, where) ||
        !read_int(r, "delay_ms", 0, max_hold_ms, a.delay_ms, err, where) ||
        !read_int(r, "hold_ms", 0, max_hold_ms, a.hold_ms, err, where))
      return err;
    a.status = static_cast<int>(status);
    if (r.contains("retry_after_s")) {
      int64_t ra = 0;
      if (!read_int(r, "retry_after_s", 0, 86'400, ra, err, where))
        return err;
      a.retry_after_s = ra;
    }
    if (r.contains("body"))
      a.body = r["body"].is_null() ? json::object() : r["body"];
    if (auto it = r.find("raw_body"); it != r.end()) {
      if (!it->is_string())
        return where + "raw_body must be a string";
      a.raw_body = it->get<std::string>();
    }
    if (auto it = r.find("headers"); it != r.end()) {
      if (!it->is_object())
        return where + "headers must be an object of name -> string";
      for (auto& [k, hv] : it->items()) {
        bool name_ok = !k.empty() && k.find_first_of(" :\r\n\t") == std::string::npos;
        if (!name_ok || !hv.is_string() ||
            hv.get<std::string>().find_first_of("\r\n") != std::string::npos)
          return where + "headers." + k + " must be a valid header with a string value";
        a.headers[k] = hv.get<std::string>();
      }
    }
    for (const char* flag : {"reset", "timeout"})
      if (auto it = r.find(flag); it != r.end()) {
        if (!it->is_boolean())
          return where + flag + " must be true or false";
        if (it->get<bool>())
          a.kind = std::string(flag) == "reset" ? action::reset : action::hold;
      }
    out.push_back(std::move(a));
  }
  bool append = body.value("append", false);
  std::lock_guard<std::mutex> g(mu);
  if (!append)
    script.clear();
  for (auto& a : out)
    script.push_back(std::move(a));
  return "";
}

json vendor::impl::stats_json() const {
  std::lock_guard<std::mutex> g(mu);
  json bs = json::object();
  for (auto& [k, n] : by_status)
    bs[k] = n;
  json m = {{"mode", mode.name},
            {"retry_after_s", mode.retry_after_s},
            {"fail_ratio", mode.fail_ratio},
            {"timeout_ratio", mode.timeout_ratio},
            {"seed", mode.seed},
            {"delay_ms", mode.delay_ms},
            {"delay_jitter_ms", mode.delay_jitter_ms},
            {"hold_ms", mode.hold_ms},
            {"charge_failed", mode.charge_failed}};
  m["price"] = mode.price ? json(*mode.price) : json(nullptr);
  m["token"] = mode.token ? json(*mode.token) : json(nullptr);
  return {{"calls", calls},
          {"by_status", bs},
          {"charged_total", charged_total.to_string()},
          {"charges", charges},
          {"duplicates", duplicates},
          {"tokens_issued", tokens_issued},
          {"connections", connections},
          {"open_connections", open_connections},
          {"in_flight", in_flight},
          {"max_in_flight", max_in_flight},
          {"scripted_left", script.size()},
          {"mode", m}};
}

json vendor::impl::keys_json() const {
  std::lock_guard<std::mutex> g(mu);
  json out = json::object();
  for (auto& [k, c] : per_key)
    out[k] = {{"calls", c.calls},   {"delivered", c.delivered}, {"replayed", c.replayed},
              {"failed", c.failed}, {"no_answer", c.no_answer}, {"in_flight", c.in_flight}};
  return {{"keys", std::move(out)}};
}

void vendor::impl::reset_all() {
  std::lock_guard<std::mutex> g(mu);
  mode = mode_state{};
  rng.seed(mode.seed);
  script.clear();
  keys.clear();
  // Calls in progress stay counted in in_flight (as in the totals): they end later.
  for (auto it = per_key.begin(); it != per_key.end();) {
    if (it->second.in_flight == 0) {
      it = per_key.erase(it);
      continue;
    }
    key_counts left;
    left.in_flight = it->second.in_flight;
    it->second = left;
    ++it;
  }
  calls = 0;
  by_status.clear();
  charged_total = decimal::parse("0").value();
  charges = json::array();
  duplicates = 0;
  tokens_issued = 0;
  connections = 0;
  max_in_flight = in_flight;
}

// -- listener -----------------------------------------------------------------------------------

void vendor::impl::do_accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open())
        return;
      return do_accept();
    }
    beast::error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);
    std::make_shared<session>(std::move(s), *this)->start();
    do_accept();
  });
}

void vendor::impl::close_all() {
  beast::error_code ec;
  acceptor.close(ec);
  // kill() may free sessions: iterate over a copy.
  std::vector<session*> all(sessions.begin(), sessions.end());
  for (auto* s : all)
    if (sessions.count(s))
      s->kill();
}

// -- vendor -------------------------------------------------------------------------------------

vendor::vendor(vendor_options opts) : impl_(std::make_shared<impl>()) {
  auto& v = *impl_;
  beast::error_code ec;
  auto addr = net::ip::make_address(opts.host, ec);
  if (ec)
    throw std::runtime_error("fake vendor: bad listen address '" + opts.host + "'");
  tcp::endpoint ep(addr, opts.port);
  v.acceptor.open(ep.protocol(), ec);
  if (!ec)
    v.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    v.acceptor.bind(ep, ec);
  if (!ec)
    v.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("fake vendor: cannot listen on " + opts.host + ":" +
                             std::to_string(opts.port) + ": " + ec.message());
  v.port = v.acceptor.local_endpoint().port();
  v.host = opts.host;
  v.work.emplace(net::make_work_guard(v.ioc));
  v.do_accept();
  v.thread = std::thread([&v] { v.ioc.run(); });
}

vendor::~vendor() {
  stop();
}

uint16_t vendor::port() const {
  return impl_->port;
}

std::string vendor::url() const {
  auto h = impl_->host.find(':') != std::string::npos ? "[" + impl_->host + "]" : impl_->host;
  return "http://" + h + ":" + std::to_string(impl_->port);
}

std::string vendor::set_mode(const json& body) {
  return impl_->apply_mode(body);
}
std::string vendor::script(const json& body) {
  return impl_->apply_script(body);
}
json vendor::stats() const {
  return impl_->stats_json();
}
json vendor::keys() const {
  return impl_->keys_json();
}
void vendor::reset() {
  impl_->reset_all();
}

void vendor::stop() {
  auto& v = *impl_;
  std::call_once(v.stopped, [&v] {
    net::post(v.ioc, [&v] { v.close_all(); });
    v.work.reset();
    if (v.thread.joinable())
      v.thread.join();
  });
}

} // namespace factum::fake_vendor
