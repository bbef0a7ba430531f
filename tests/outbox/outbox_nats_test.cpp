// outbox_nats_test.cpp: the NATS JetStream sink against a real nats-server that the test starts
// (a child process on a free loopback port, JetStream in a temporary directory, stopped by pid):
// the sink makes its stream, publishes with Nats-Msg-Id = fact_id (a redelivery is dropped by
// JetStream's dedupe), answers `retry` while the server is down and delivers again once it is
// back; and a runtime relaying two entities' facts to it, read back in seq order.
#include <doctest/doctest.h>

#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <map>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "factum/sinks/nats_sink.hpp"
#include "support/etcd_server.hpp"
#include "support/eventually.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace outbox_nats_test {

namespace {

/// nats-server -js on 127.0.0.1:<free port>, its store in a temporary directory; dies with the
/// test's thread (PR_SET_PDEATHSIG). The binary is $FACTUM_NATS_SERVER, else Debian's
/// /usr/sbin/nats-server, else nats-server on the PATH.
class nats_server {
 public:
  nats_server() : port_(test::free_ports(1)[0]) { start(); }
  ~nats_server() { kill9(); }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  void start() {
    // Debian installs it in /usr/sbin, which a user's PATH may not hold.
    std::string bin = std::getenv("FACTUM_NATS_SERVER") ? std::getenv("FACTUM_NATS_SERVER")
                      : std::filesystem::exists("/usr/sbin/nats-server") ? "/usr/sbin/nats-server"
                                                                         : "nats-server";
    auto store = (dir_.path() / "js").string(), port = std::to_string(port_);
    auto log = (dir_.path() / "nats.log").string();
    std::vector<std::string> args{bin, "-js", "-sd", store, "-a", "127.0.0.1", "-p", port};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    REQUIRE(log_fd >= 0);
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        _exit(127);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::close_range(3, ~0U, 0);
      ::execvp(argv[0], argv.data());
      _exit(127);
    }
    ::close(log_fd);
    REQUIRE(pid_ > 0);
    // Ready when it answers a JetStream request (a stream that does not exist: NOT_FOUND).
    auto end = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      auto r = read_nats_stream(url(), "READY_PROBE", 500ms);
      if (!r && r.error().code() == errc::not_found)
        break;
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < end, "nats-server did not start");
      std::this_thread::sleep_for(20ms);
    }
  }
  void kill9() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  test::temp_dir dir_;
  uint16_t port_;
  pid_t pid_ = -1;
};

outbox_ack deliver(const outbox_fn& fn, const outbox_message& m) {
  std::promise<outbox_ack> p;
  fn(m, [&](outbox_ack a) { p.set_value(a); });
  return p.get_future().get();
}

outbox_message message(int64_t seq, std::string id = "e1") {
  auto fid = "fct_" + id + "_" + std::to_string(seq);
  return {"bus",     entity_key{"acme", "ledger", id},           seq, fid,
          "payment", json{{"fact_id", fid}, {"seq", seq}}.dump()};
}

} // namespace

TEST_CASE("outbox NATS sink: publishes to its stream with Nats-Msg-Id = fact_id (a redelivery "
          "is deduplicated) and retries a server that is down until it returns") {
  nats_server ns;
  nats_sink_options o;
  o.url = ns.url();
  o.subject = "factum.facts";
  o.stream = "FACTS";
  o.publish_timeout = 1'000ms;
  o.threads = 2;
  auto s = nats_sink::start(o);
  REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
  auto fn = (*s)->deliver();
  for (int64_t i = 1; i <= 3; ++i)
    CHECK(deliver(fn, message(i)).result == outbox_ack::outcome::acknowledged);
  CHECK(deliver(fn, message(2)).result == outbox_ack::outcome::acknowledged); // a redelivery
  auto got = read_nats_stream(ns.url(), "FACTS", 2s);
  REQUIRE_MESSAGE(got.is_ok(), got.error().to_string());
  REQUIRE(got->size() == 3); // the redelivery was dropped by JetStream's dedupe
  for (int64_t i = 1; i <= 3; ++i) {
    auto& m = (*got)[static_cast<size_t>(i - 1)];
    CHECK(m.subject == "factum.facts");
    CHECK(m.msg_id == "fct_e1_" + std::to_string(i));
    CHECK(m.entity == "acme/ledger/e1");
    CHECK(m.seq == i);
    CHECK(json::parse(m.data)["seq"] == i);
  }
  ns.kill9();
  auto down = deliver(fn, message(4));
  CHECK(down.result == outbox_ack::outcome::retry);
  CHECK_FALSE(down.error_code.empty());
  ns.start(); // same port and store: the sink reconnects by itself
  REQUIRE(test::eventually(
    [&] { return deliver(fn, message(4)).result == outbox_ack::outcome::acknowledged; }, 15s));
  CHECK(read_nats_stream(ns.url(), "FACTS", 2s)->size() == 4);
  (*s)->stop();
  CHECK(deliver(fn, message(5)).error_code == "CANCELLED");
}

TEST_CASE("outbox NATS sink: a runtime relays each entity's facts to the stream in seq order") {
  nats_server ns;
  test::temp_dir tmp;
  nats_sink_options o;
  o.url = ns.url();
  o.subject = "factum.facts";
  o.stream = "FACTS";
  auto s = nats_sink::start(o);
  REQUIRE(s.is_ok());
  runtime_config c;
  c.data_dir = tmp.path();
  c.storage_threads = 2;
  c.sync_threads = 2;
  c.scheduler_threads = 2;
  add_builtin_types(c.types);
  c.outbox.sinks["bus"].deliver = (*s)->deliver();
  c.outbox.routes.push_back({"bus", {"payment"}, {}, {}});
  auto rt = runtime::start(std::move(c));
  REQUIRE(rt.is_ok());
  for (int i = 1; i <= 20; ++i)
    for (auto id : {"n1", "n2"}) {
      auto r = (*rt)->call_sync(entity_key{"acme", "ledger", id}, "append",
                                json{{"type", "payment"}, {"data", {{"i", i}}}}.dump());
      REQUIRE(r.ok);
    }
  REQUIRE(test::eventually(
    [&] {
      return (*rt)->metrics().value("factum_outbox_delivered_total", {{"sink", "bus"}}) == 40;
    },
    15s));
  auto got = read_nats_stream(ns.url(), "FACTS", 2s);
  REQUIRE(got.is_ok());
  std::map<std::string, std::vector<int64_t>> by_entity;
  for (auto& m : *got)
    by_entity[m.entity].push_back(m.seq);
  std::vector<int64_t> want;
  for (int64_t i = 1; i <= 20; ++i)
    want.push_back(i);
  CHECK(by_entity["acme/ledger/n1"] == want);
  CHECK(by_entity["acme/ledger/n2"] == want);
  (*rt)->stop();
  (*s)->stop();
}

} // namespace outbox_nats_test
