// http/forwarder.cpp: see forwarder.hpp. Threads: send() from any thread (pools under mu_);
// completions on the I/O thread.
#include "forwarder.hpp"

#include <charconv>
#include <optional>

namespace factum::http {

forwarder::forwarder(std::chrono::milliseconds timeout) : timeout_(timeout) {}

forwarder::~forwarder() {
  stop();
}

void forwarder::stop() {
  io_.stop();
}

namespace {

/// The owner's answer as the gateway writes it to its client.
http_response to_response(client::response& r) {
  http_response res;
  res.status = r.status;
  res.body = std::move(r.body);
  if (auto ct = r.header("Content-Type"); !ct.empty())
    res.content_type = std::string(ct);
  res.trace_id = std::string(r.header("X-Trace-Id"));
  res.replayed = r.header("Idempotent-Replayed") == "true";
  res.link = std::string(r.header("Link"));
  auto ra = r.header("Retry-After");
  int64_t s = 0;
  if (!ra.empty() && std::from_chars(ra.data(), ra.data() + ra.size(), s).ec == std::errc{})
    res.retry_after_s = s;
  return res;
}

} // namespace

void forwarder::send(const std::string& address, const http_request& req,
                     const std::string& trace_id, int64_t epoch,
                     std::function<void(forwarded_reply)> done) {
  std::optional<client::pool> p;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pools_.find(address);
    if (it == pools_.end()) {
      auto u = client::parse_url("http://" + address);
      if (!u) {
        forwarded_reply fr;
        fr.failed = client::failure::resolve;
        fr.error = "bad node address '" + address + "': " + u.error().message();
        done(std::move(fr));
        return;
      }
      client::pool_options o;
      o.connect_timeout = std::chrono::milliseconds(1'000);
      o.request_timeout = timeout_;
      o.max_connections = 64;
      o.resend_on_stale = true;
      it = pools_.emplace(address, io_.make_pool(*u, o)).first;
    }
    p = it->second;
  }
  client::request r;
  r.method = req.verb == "GET" ? client::verb::get : client::verb::post;
  r.target = req.target;
  r.body = req.body;
  r.idempotency_key = req.idempotency_key;
  r.trace_id = trace_id;
  r.content_type = req.has_content_type ? req.content_type : std::string();
  if (req.has_api_key)
    r.headers.emplace_back("X-API-Key", req.api_key);
  r.headers.emplace_back(forwarded_header, std::to_string(epoch));
  p->submit(std::move(r), [done = std::move(done)](client::response& resp) {
    forwarded_reply fr;
    if (resp.status == 0) {
      fr.failed = resp.failed;
      fr.error = resp.error;
      fr.maybe_sent = resp.failed_at != client::stage::resolve &&
                      resp.failed_at != client::stage::connect &&
                      resp.failed != client::failure::refused;
    } else {
      fr.not_owner = resp.header(not_owner_header) == "1";
      fr.res = to_response(resp);
    }
    done(std::move(fr));
  });
}

} // namespace factum::http
