// http/tool_client.cpp: the HTTP transport of external tools (factum/sinks/http_tool.hpp) over
// factum's HTTP client (factum/http/client.hpp): option validation, one connection pool per tool
// on the client's I/O thread, and the mapping of answers and transport failures onto
// tool_reply. No Beast here. tool_fn callers (CAF workers) build the request and submit it; the
// replies are made on the client's I/O thread.
#include "factum/sinks/http_tool.hpp"

#include <algorithm>
#include <ctime>
#include <mutex>
#include <optional>

#include "factum/http/client.hpp"
#include "factum/resilience/money.hpp"

namespace factum {

namespace hc = http::client;
using nlohmann::json;

namespace {

bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

/// ASCII case-insensitive equality of header names.
bool equals_ignoring_case(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
  return std::ranges::equal(a, b, [&](char x, char y) { return lower(x) == lower(y); });
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

/// One tool: its pool, what its messages name, and its refreshed credential.
struct tool {
  std::string name;
  http_tool_options opts;
  http_tool_url url;
  std::string where; ///< "tool NAME (host[:port])"
  hc::pool pool;
  std::optional<hc::pool> auth_pool; ///< to opts.auth_refresh->url
  std::mutex auth_mu;                ///< guards auth_value (callers' threads and the I/O thread)
  std::string auth_value;            ///< the header's value once refreshed; empty before

  tool(std::string n, http_tool_options o, http_tool_url u, std::string w, hc::pool p)
      : name(std::move(n)), opts(std::move(o)), url(std::move(u)), where(std::move(w)),
        pool(std::move(p)) {}
};

std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

/// The tool_reply of a response or of its transport failure.
tool_reply to_tool_reply(const tool& t, hc::response& res) {
  switch (res.failed) {
  case hc::failure::none: break;
  case hc::failure::timeout:
    return transport_failure(
      "timeout", res.failed_at == hc::stage::resolve || res.failed_at == hc::stage::connect
                   ? "could not connect to " + t.where + " within " + ms(t.opts.connect_timeout)
                   : "no answer from " + t.where + " within " + ms(t.opts.request_timeout));
  case hc::failure::resolve:
    return transport_failure("dns_failure",
                             "cannot resolve the host of " + t.where + ": " + res.error);
  case hc::failure::refused:
    return transport_failure("connection_refused", "connection refused by " + t.where);
  case hc::failure::closed:
    return transport_failure("connection_reset", t.where + " closed the connection without a " +
                                                   "complete answer (" + res.error + ")");
  case hc::failure::pool_full:
    return transport_failure("POOL_EXHAUSTED", "tool " + t.name + ": " + res.error);
  case hc::failure::cancelled:
    return transport_failure("CANCELLED", "tool " + t.name + ": the HTTP tool client is stopping");
  case hc::failure::not_loopback:
  case hc::failure::other:
    return transport_failure("other",
                             std::string(hc::to_string(res.failed_at)) + " failed for " + t.where +
                               ": " + res.error,
                             error_category::external);
  }
  tool_reply r;
  r.http_status = res.status;
  r.ok = res.status >= 200 && res.status < 300;
  r.body = parse_body(res.body);
  if (!r.ok) {
    auto snippet = res.body.substr(0, 200);
    r.error_message = "HTTP " + std::to_string(res.status) + " from " + t.where +
                      (snippet.empty() ? "" : ": " + snippet);
  }
  if (auto v = res.header("Retry-After"); !v.empty())
    r.retry_after_ms = parse_retry_after(v);
  r.replayed = res.header("Idempotent-Replayed") == "true";
  if (auto v = res.header("X-Cost"); !v.empty()) {
    auto d = resilience::decimal::parse(v);
    if (d && !d->is_negative())
      r.cost_amount = d.value().to_string();
  }
  return r;
}

/// The request of one call: POST <url>/<operation>, the payload as JSON.
hc::request to_request(const tool& t, const tool_request& req) {
  hc::request r;
  r.target = t.url.path;
  if (!req.operation.empty())
    r.target += "/" + hc::percent_encode(req.operation, "/");
  if (r.target.empty())
    r.target = "/";
  r.body = req.payload.dump(-1, ' ', false, json::error_handler_t::replace);
  r.idempotency_key = req.idempotency_key;
  r.trace_id = req.trace_id;
  if (t.opts.auth_refresh) {
    std::lock_guard<std::mutex> g(const_cast<tool&>(t).auth_mu);
    if (!t.auth_value.empty())
      r.headers.emplace_back(t.opts.auth_refresh->header, t.auth_value);
  }
  return r;
}

/// The refreshed credential in a refresh's answer, or nullopt.
std::optional<std::string> refreshed_value(const http_tool_auth_refresh& a, hc::response& res) {
  if (res.failed != hc::failure::none || res.status < 200 || res.status >= 300)
    return std::nullopt;
  auto j = json::parse(res.body, nullptr, false);
  if (!j.is_object() || !j.contains(a.field) || !j[a.field].is_string())
    return std::nullopt;
  auto v = a.prefix + j[a.field].get<std::string>();
  if (v.empty() || v.size() > 8192 || v.find_first_of(std::string("\r\n\0", 3)) != v.npos)
    return std::nullopt;
  return v;
}

} // namespace

// -- URL ----------------------------------------------------------------------------------------

result<http_tool_url> parse_http_tool_url(std::string_view url) {
  auto u = hc::parse_url(url);
  if (!u)
    return status{errc::invalid_argument,
                  "\"" + std::string(url.substr(0, 200)) + "\": " + u.error().message()};
  return http_tool_url{std::move(u->host), u->port, std::move(u->path)};
}

// -- client -------------------------------------------------------------------------------------

struct http_tool_client::impl {
  hc::io_thread io;
  mutable std::mutex mu;
  bool stopped = false;                                            // guarded by mu
  std::map<std::string, std::shared_ptr<tool>, std::less<>> tools; // guarded by mu
};

http_tool_client::http_tool_client() : impl_(std::make_shared<impl>()) {}

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
      if (equals_ignoring_case(k, reserved))
        return bad("headers." + k, "set by the transport itself");
    for (char c : v)
      if (c == '\r' || c == '\n' || c == '\0')
        return bad("headers." + k, "the value may not contain CR, LF or NUL");
  }
  if (auto& a = opts.auth_refresh) {
    auto au = parse_http_tool_url(a->url);
    if (!au)
      return bad("auth_refresh.url", au.error().message());
    if (a->field.empty())
      return bad("auth_refresh.field", "must not be empty");
    if (a->header.empty() || !std::all_of(a->header.begin(), a->header.end(), is_token_char))
      return bad("auth_refresh.header", "not a valid header name");
    for (auto& [k, v] : a->headers)
      if (k.empty() || !std::all_of(k.begin(), k.end(), is_token_char) ||
          v.find_first_of(std::string("\r\n\0", 3)) != v.npos)
        return bad("auth_refresh.headers." + k, "not a valid header");
    if (auto st = hc::check_resolves(au->host, au->port); !st)
      return bad("auth_refresh.url", "host '" + au->host + "' does not resolve");
  }
  // The host must resolve now: a typo fails the configuration, not the first call.
  if (auto st = hc::check_resolves(url->host, url->port); !st)
    return bad("url", "host '" + url->host + "' does not resolve" +
                        (st.message().empty() ? std::string() : ": " + st.message()));
  return status::ok();
}

result<tool_fn> http_tool_client::make_tool(std::string name, http_tool_options opts) {
  if (name.empty())
    return status{errc::invalid_argument, "name: must not be empty"};
  if (auto st = validate_http_tool_options(opts); !st)
    return st;
  auto url = parse_http_tool_url(opts.url).value();
  hc::pool_options po;
  po.connect_timeout = opts.connect_timeout;
  po.request_timeout = opts.request_timeout;
  po.max_connections = opts.max_connections;
  po.max_queued = opts.max_queued;
  po.headers = {{"User-Agent", "factum"}, {"Accept", "application/json"}};
  po.headers.insert(po.headers.end(), opts.headers.begin(), opts.headers.end());
  std::lock_guard<std::mutex> g(impl_->mu);
  if (impl_->stopped)
    return status{errc::unavailable, "the HTTP tool client is stopped"};
  if (impl_->tools.count(name))
    return status{errc::invalid_argument, "name: tool '" + name + "' is already defined"};
  hc::url target{url.host, url.port, url.path};
  auto where = "tool " + name + " (" + target.host_header() + ")";
  auto pool = impl_->io.make_pool(target, std::move(po));
  auto t = std::make_shared<tool>(name, std::move(opts), std::move(url), std::move(where),
                                  std::move(pool));
  if (auto& a = t->opts.auth_refresh) {
    auto au = parse_http_tool_url(a->url).value(); // validated above
    hc::pool_options ao;
    ao.connect_timeout = t->opts.connect_timeout;
    ao.request_timeout = t->opts.request_timeout;
    ao.max_connections = 1;
    ao.headers = {{"User-Agent", "factum"}, {"Accept", "application/json"}};
    ao.headers.insert(ao.headers.end(), a->headers.begin(), a->headers.end());
    t->auth_pool = impl_->io.make_pool(hc::url{au.host, au.port, au.path}, std::move(ao));
  }
  impl_->tools.emplace(std::move(name), t);
  return tool_fn([t](const tool_request& req, std::function<void(tool_reply)> done) {
    t->pool.submit(to_request(*t, req), [t, done = std::move(done)](hc::response& res) {
      done(to_tool_reply(*t, res));
    });
  });
}

std::function<void(std::function<void(bool)>)>
http_tool_client::auth_refresher(std::string_view name) const {
  std::shared_ptr<tool> t;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->tools.find(name);
    if (it == impl_->tools.end() || !it->second->auth_pool)
      return nullptr;
    t = it->second;
  }
  return [t](std::function<void(bool)> done) {
    hc::request r;
    auto u = parse_http_tool_url(t->opts.auth_refresh->url).value();
    r.target = u.path.empty() ? "/" : u.path;
    r.body = "{}";
    t->auth_pool->submit(std::move(r), [t, done = std::move(done)](hc::response& res) {
      auto v = refreshed_value(*t->opts.auth_refresh, res);
      if (v) {
        std::lock_guard<std::mutex> g(t->auth_mu);
        t->auth_value = std::move(*v);
      }
      done(v.has_value());
    });
  };
}

http_tool_stats http_tool_client::stats(std::string_view name) const {
  std::shared_ptr<tool> t;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->tools.find(name);
    if (it == impl_->tools.end())
      return {};
    t = it->second;
  }
  auto p = t->pool.stats();
  http_tool_stats s;
  s.requests = p.requests;
  s.connections_opened = p.connections_opened;
  s.reused = p.reused;
  s.stale_retries = p.stale_retries;
  s.stale_dropped = p.stale_dropped;
  s.queued = p.queued;
  s.rejected = p.rejected;
  s.open_connections = p.open_connections;
  return s;
}

void http_tool_client::stop() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stopped = true;
  }
  impl_->io.stop();
}

} // namespace factum
