// connections_test.cpp: WebSocket connections' turns through the runtime, with a recording
// connection_host in place of the gateway's hub: on_connect's decision, frames that leave only
// once what the turn wrote is durable (none from a turn whose sync failed or that threw; those
// sent before an await leave with the await's commit), connections listed from the host across
// a hibernation, and the refusals of a type without WebSockets. The storage fault seam fails
// "sync" (the fdatasync of the WAL).
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <condition_variable>
#include <mutex>

#include "factum/entities/entity.hpp"
#include "factum/runtime/runtime.hpp"
#include "factum/storage/base64.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace connections_test {

namespace {

/// Records what the runtime hands to the holder of connections.
class recording_host final : public connection_host {
 public:
  std::vector<connection> open;

  std::vector<connection> connections(const entity_key&, const std::string& tag) override {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<connection> out;
    for (auto& c : open)
      if (tag.empty() || std::find(c.tags.begin(), c.tags.end(), tag) != c.tags.end())
        out.push_back(c);
    ++listed_;
    return out;
  }
  void deliver(const entity_key&, std::vector<outgoing_frame> frames) override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& f : frames)
      sent_.push_back((f.broadcast ? "*" + f.tag : f.conn_id) + ":" +
                      (f.what == outgoing_frame::kind::close    ? "close " + std::to_string(f.code)
                       : f.what == outgoing_frame::kind::binary ? "bin " + f.data
                                                                : f.data));
    cv_.notify_all();
  }
  /// Waits (bounded) until `n` frames were delivered; what was delivered by then.
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait_for(g, 10s, [&] { return sent_.size() >= n; });
    return sent_;
  }
  std::vector<std::string> sent() {
    std::lock_guard<std::mutex> g(mu_);
    return sent_;
  }
  int listed() {
    std::lock_guard<std::mutex> g(mu_);
    return listed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> sent_;
  int listed_ = 0;
};

/// A gate the test opens: the tool "gate" answers only once released.
struct tool_gate {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void(tool_reply)> pending;
  void release() {
    std::function<void(tool_reply)> done;
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait_for(g, 10s, [&] { return bool(pending); });
      done = std::move(pending);
    }
    REQUIRE(done);
    tool_reply r;
    r.ok = true;
    r.http_status = 200;
    done(r);
  }
  bool waiting() {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, 10s, [&] { return bool(pending); });
  }
};

class talk final : public entity {
 public:
  task<connect_decision> on_connect(context& ctx, const connection& c) override {
    if (c.params.value("tags", "") == "too-many")
      co_return connect_decision::accept_with(std::vector<std::string>(17, "t"));
    if (c.params.value("refuse", "") == "yes")
      co_return connect_decision::refuse(4001, "not today");
    ctx.send(c.id, "welcome");
    co_return connect_decision::accept_with({"all"}, {{"n", 1}});
  }
  task<void> on_message(context& ctx, const connection& c, const ws_message& m) override {
    if (m.binary) { // bytes back as bytes, reversed
      ctx.send(c.id, std::string(m.data.rbegin(), m.data.rend()), true);
      co_return;
    }
    fact_draft d;
    d.type = "said";
    d.data = {{"text", m.data}};
    ctx.append(std::move(d));
    ctx.send(c.id, "echo " + m.data);
    if (m.data == "throw")
      throw client_error("NO", "refused after sending");
    if (m.data == "await") {
      tool_request r;
      r.tool = "gate";
      r.operation = "wait";
      (void)co_await ctx.call_tool_once(r);
      ctx.send(c.id, "after");
    }
    if (m.data == "list")
      ctx.send(c.id, "members " + std::to_string(ctx.connections("all").size()));
    if (m.data == "bye")
      ctx.close(c.id, 4002, "bye");
    co_return;
  }
  task<void> on_close(context& ctx, const connection& c, int code) override {
    fact_draft d;
    d.type = "closed";
    d.data = {{"conn", c.id}, {"code", code}, {"n", c.attachment.value("n", 0)}};
    ctx.append(std::move(d));
    co_return;
  }
};

struct fixture {
  test::temp_dir tmp;
  std::mutex mu;
  bool failing_sync = false;
  tool_gate gate;
  std::shared_ptr<recording_host> host = std::make_shared<recording_host>();
  std::unique_ptr<runtime> rt;
  entity_key key{"acme", "talk", "t1"};

  fixture() {
    runtime_config c;
    c.data_dir = tmp.path();
    c.types.add(type_builder<talk>("talk").websocket().build());
    add_builtin_types(c.types);
    c.storage_fault = [this](uint64_t, std::string_view what) {
      std::lock_guard<std::mutex> g(mu);
      return failing_sync && what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    };
    c.tools["gate"] = [this](const tool_request&, std::function<void(tool_reply)> done) {
      std::lock_guard<std::mutex> g(gate.mu);
      gate.pending = std::move(done);
      gate.cv.notify_all();
    };
    c.log = [](std::string_view) {};
    auto r = runtime::start(std::move(c));
    REQUIRE(r.is_ok());
    rt = std::move(r.value());
    rt->attach_connections(host);
  }
  ~fixture() { rt->attach_connections(nullptr); }

  call_reply connect(const std::string& id, json params = json::object()) {
    return rt->call_sync(key, "@ws_connect",
                         json{{"conn", {{"id", id}, {"params", params}}}}.dump());
  }
  call_reply message(const std::string& id, const std::string& text) {
    json conn = {{"id", id}, {"tags", {"all"}}, {"attachment", {{"n", 1}}}};
    return rt->call_sync(key, "@ws_message", json{{"conn", conn}, {"text", text}}.dump());
  }
  call_reply binary(const std::string& id, const std::string& bytes) {
    json conn = {{"id", id}, {"tags", {"all"}}, {"attachment", {{"n", 1}}}};
    return rt->call_sync(key, "@ws_message",
                         json{{"conn", conn}, {"binary_b64", base64_encode(bytes)}}.dump());
  }
  void fail_sync(bool on) {
    std::lock_guard<std::mutex> g(mu);
    failing_sync = on;
  }
};

} // namespace

TEST_CASE("connections: on_connect decides, its frames leave with its reply, an invalid "
          "decision fails the turn") {
  fixture f;
  auto r = f.connect("w1");
  REQUIRE_MESSAGE(r.ok, r.body);
  CHECK(r.json() == json{{"accept", true}, {"tags", {"all"}}, {"attachment", {{"n", 1}}}});
  CHECK(f.host->wait_for(1) == std::vector<std::string>{"w1:welcome"});
  auto no = f.connect("w2", {{"refuse", "yes"}});
  REQUIRE(no.ok);
  CHECK(no.json() == json{{"accept", false}, {"close_code", 4001}, {"reason", "not today"}});
  auto bad = f.connect("w3", {{"tags", "too-many"}});
  CHECK_FALSE(bad.ok);
  CHECK(bad.code == "INVALID_CONNECT_DECISION");
}

TEST_CASE("connections: a message's frames leave only when its commit is durable: a failed "
          "sync sends none of them") {
  fixture f;
  REQUIRE(f.connect("w1").ok);
  f.host->wait_for(1);
  f.fail_sync(true);
  auto r = f.message("w1", "lost");
  f.fail_sync(false);
  CHECK_FALSE(r.ok);
  CHECK(r.code == "STORAGE_UNAVAILABLE");
  auto ok = f.message("w1", "kept");
  REQUIRE_MESSAGE(ok.ok, ok.body);
  auto sent = f.host->wait_for(2);
  CHECK(sent == std::vector<std::string>{"w1:welcome", "w1:echo kept"});
}

TEST_CASE("connections: a turn that throws sends nothing, and its fact is gone") {
  fixture f;
  REQUIRE(f.connect("w1").ok);
  f.host->wait_for(1);
  auto r = f.message("w1", "throw");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "NO");
  REQUIRE(f.message("w1", "next").ok);
  CHECK(f.host->wait_for(2) == std::vector<std::string>{"w1:welcome", "w1:echo next"});
  auto facts = f.rt->call_sync(f.key, "@facts", R"({"type":"said"})");
  REQUIRE(facts.ok);
  REQUIRE(facts.json().size() == 1);
  CHECK(facts.json()[0]["data"]["text"] == "next");
}

TEST_CASE("connections: frames sent before an await leave with the await's commit, while the "
          "turn still waits") {
  fixture f;
  REQUIRE(f.connect("w1").ok);
  f.host->wait_for(1);
  std::thread t([&] { CHECK(f.message("w1", "await").ok); });
  REQUIRE(f.gate.waiting()); // the turn waits at its tool call
  CHECK(f.host->wait_for(2) == std::vector<std::string>{"w1:welcome", "w1:echo await"});
  f.gate.release();
  t.join();
  CHECK(f.host->wait_for(3) == std::vector<std::string>{"w1:welcome", "w1:echo await", "w1:after"});
}

TEST_CASE("connections: turns list connections from the host, also after the entity "
          "hibernated, on_close gets the connection with its attachment") {
  fixture f;
  f.host->open = {connection{"w1", {"all"}, {{"n", 1}}, {}}, connection{"w2", {"x"}, {}, {}}};
  REQUIRE(f.connect("w1").ok);
  REQUIRE(f.message("w1", "list").ok);
  CHECK(f.host->wait_for(3).back() == "w1:members 1");
  auto left = f.rt->release_entities([](const entity_key&) { return true; }, 10s);
  REQUIRE(left == 0);
  auto before = f.rt->metrics().value("factum_activations_total");
  REQUIRE(f.message("w1", "list").ok);
  CHECK(f.rt->metrics().value("factum_activations_total") == before + 1);
  CHECK(f.host->wait_for(5).back() == "w1:members 1");
  REQUIRE(f.message("w1", "bye").ok);
  CHECK(f.host->wait_for(7).back() == "w1:close 4002");
  json conn = {{"id", "w1"}, {"tags", {"all"}}, {"attachment", {{"n", 1}}}};
  REQUIRE(f.rt->call_sync(f.key, "@ws_close", json{{"conn", conn}, {"code", 4002}}.dump()).ok);
  auto facts = f.rt->call_sync(f.key, "@facts", R"({"type":"closed"})");
  REQUIRE(facts.ok);
  REQUIRE(facts.json().size() == 1);
  CHECK(facts.json()[0]["data"] == json{{"conn", "w1"}, {"code", 4002}, {"n", 1}});
}

TEST_CASE("connections: a binary message reaches on_message as its bytes, and a binary frame "
          "leaves as bytes") {
  fixture f;
  REQUIRE(f.connect("w1").ok);
  std::string bytes("\x00\x01\xff\xfe\x80", 5);
  REQUIRE(f.binary("w1", bytes).ok);
  CHECK(f.host->wait_for(2).back() == "w1:bin " + std::string("\x80\xfe\xff\x01\x00", 5));
  auto bad =
    f.rt->call_sync(f.key, "@ws_message", R"({"conn":{"id":"w1"},"binary_b64":"not base64!"})");
  CHECK_FALSE(bad.ok);
  CHECK(bad.code == "INVALID_MESSAGE");
}

TEST_CASE("connections: a type without WebSockets refuses connection turns 404") {
  test::temp_dir tmp;
  runtime_config c;
  c.data_dir = tmp.path();
  add_builtin_types(c.types);
  c.log = [](std::string_view) {};
  auto rt = runtime::start(std::move(c));
  REQUIRE(rt.is_ok());
  entity_key k{"acme", "ledger", "l1"};
  auto r = (*rt)->call_sync(k, "@ws_connect", R"({"conn":{"id":"w1"}})");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "WEBSOCKET_NOT_SUPPORTED");
  CHECK(r.http_status == 404);
}

} // namespace connections_test
