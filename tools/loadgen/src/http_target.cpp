// http_target.cpp: the HTTP target of `factum bench`: one pool of factum's HTTP client
// (factum/http/client.hpp) with `concurrency` keep-alive connections multiplexed on ONE I/O
// thread (no thread per connection), and a FIFO of requests waiting for a free connection (open
// loop: the wait counts in the latency). No Beast here. send() may run on any thread (the pool
// posts to its I/O thread); completions run on the I/O thread; usage() reads /proc of
// --server-pid on the caller's thread (proc_usage.cpp).
#include <cstdint>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "factum/http/client.hpp"
#include "target.hpp"

namespace factum::tools::loadgen {

namespace {

namespace hc = http::client;

/// The bench's view of an answer: status, Idempotent-Replayed, a next page (Link), problem
/// code; the body moved.
response to_response(hc::response& res) {
  response r;
  if (res.failed != hc::failure::none) {
    r.code = res.failed == hc::failure::timeout ? "TIMEOUT" : "TRANSPORT";
    r.body = std::move(res.error);
    return r;
  }
  r.status = res.status;
  r.ok = r.status >= 200 && r.status < 300;
  r.replayed = res.header("Idempotent-Replayed") == "true";
  r.more = res.header("Link").find("rel=\"next\"") != std::string_view::npos;
  r.body = std::move(res.body);
  if (!r.ok) {
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    r.code = j.is_object() && j.contains("code") && j["code"].is_string()
               ? j["code"].get<std::string>()
               : "HTTP_" + std::to_string(r.status);
  }
  return r;
}

/// "/v1/entities/{type}/{id}/{tail}", built in one allocation.
std::string entity_target(const request& q, std::string_view tail, std::string_view query) {
  std::string t;
  t.reserve(16 + q.type.size() + q.id.size() + tail.size() + query.size());
  t.append("/v1/entities/").append(q.type).append("/").append(q.id).append("/").append(tail);
  if (!query.empty())
    t.append("?").append(query);
  return t;
}

class http_target final : public target {
 public:
  explicit http_target(const bench_options& o) : opts_(o) {}

  bool start(std::string& error) {
    const std::string& url = opts_.url;
    if (url.rfind("http://", 0) != 0) {
      error = "--url must start with http:// (got \"" + url.substr(0, 100) + "\")";
      return false;
    }
    auto u = hc::parse_url(url);
    if (!u) {
      error = "bad --url \"" + url.substr(0, 100) + "\": expected http://HOST:PORT";
      return false;
    }
    if (!u->path.empty()) {
      error = "--url takes no path: http://HOST:PORT";
      return false;
    }
    if (auto st = hc::check_resolves(u->host, u->port); !st) {
      error = "cannot resolve " + u->host + ": " + st.message();
      return false;
    }
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000));
    hc::pool_options po;
    po.connect_timeout = timeout;
    po.request_timeout = timeout;
    po.max_connections = static_cast<size_t>(std::max(1, opts_.concurrency));
    po.max_queued = std::numeric_limits<size_t>::max(); // open loop: --max-inflight bounds it
    po.resend_on_stale = false; // a lost connection is the server's answer: counted, not hidden
    po.max_body = 8 * 1024 * 1024;
    if (!opts_.api_key.empty())
      po.headers.emplace_back("X-API-Key", opts_.api_key);
    pool_ = io_.make_pool(*u, std::move(po));
    return true;
  }

  void send(request r, std::unique_ptr<answer_handler> done) override {
    hc::request q;
    if (r.read) {
      q.method = hc::verb::get;
      q.target = entity_target(r, "facts", r.query);
    } else {
      q.method = hc::verb::post;
      q.target = entity_target(r, r.method, {});
      q.body = std::move(r.body);
    }
    q.idempotency_key = std::move(r.idempotency_key);
    // A lambda holding one pointer is stored inside the pool's std::function: no allocation.
    pool_->submit(std::move(q),
                  [h = done.release()](hc::response& res) { answer(h, to_response(res)); });
  }

  server_usage usage() override { return proc_usage(opts_.server_pid); }

 private:
  bench_options opts_;
  hc::io_thread io_; ///< stopped (and joined) by its destructor, after pool_ is gone
  std::optional<hc::pool> pool_;
};

} // namespace

std::unique_ptr<target> make_http_target(const bench_options& opts, std::string& error) {
  auto t = std::make_unique<http_target>(opts);
  if (!t->start(error))
    return nullptr;
  return t;
}

} // namespace factum::tools::loadgen
