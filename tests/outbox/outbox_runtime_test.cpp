// outbox_runtime_test.cpp: the relay in an in-process runtime with an in-process sink whose
// answers are scripted: delivery in seq order per entity of the routed types only, a refusal
// dead-lettered while delivery goes on, failures retried after a backoff without reordering, and
// facts left unacknowledged at a stop delivered by the next runtime on the same data directory
// without any call to their entity (the alarm index wakes it). Short real delays; waits poll with
// a bound.
#include <doctest/doctest.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "factum/runtime/runtime.hpp"
#include "support/eventually.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

/// A sink that answers as scripted (then `otherwise`) and logs every delivery. Thread-safe.
class scripted_sink {
 public:
  struct delivery {
    std::string entity;
    int64_t seq;
    std::string fact_id;
    outbox_ack::outcome result;
  };
  outbox_fn fn() {
    return [this](const outbox_message& m, std::function<void(outbox_ack)> done) {
      outbox_ack a;
      {
        std::lock_guard<std::mutex> g(mu_);
        a.result = otherwise_;
        if (!script_.empty()) {
          a.result = script_.front();
          script_.pop_front();
        }
        if (auto it = refuse_.find(m.entity.id + "#" + std::to_string(m.seq)); it != refuse_.end())
          a.result = outbox_ack::outcome::refused;
        if (a.result != outbox_ack::outcome::acknowledged)
          a.error_code = a.result == outbox_ack::outcome::refused ? "HTTP_422" : "HTTP_503";
        log_.push_back({m.entity.to_string(), m.seq, m.fact_id, a.result});
      }
      // From another thread, as a real transport answers.
      std::thread([a, done = std::move(done)] { done(a); }).detach();
    };
  }
  void script(std::vector<outbox_ack::outcome> s) {
    std::lock_guard<std::mutex> g(mu_);
    script_.assign(s.begin(), s.end());
  }
  void otherwise(outbox_ack::outcome o) {
    std::lock_guard<std::mutex> g(mu_);
    otherwise_ = o;
  }
  void accept_all() {
    std::lock_guard<std::mutex> g(mu_);
    refuse_.clear();
    otherwise_ = outbox_ack::outcome::acknowledged;
  }
  void refuse(const std::string& id, int64_t seq) {
    std::lock_guard<std::mutex> g(mu_);
    refuse_.insert(id + "#" + std::to_string(seq));
  }
  std::vector<delivery> log() {
    std::lock_guard<std::mutex> g(mu_);
    return log_;
  }
  /// Seqs acknowledged or refused per entity, in the order they were.
  std::map<std::string, std::vector<int64_t>> settled() {
    std::map<std::string, std::vector<int64_t>> out;
    for (auto& d : log())
      if (d.result != outbox_ack::outcome::retry)
        out[d.entity].push_back(d.seq);
    return out;
  }

 private:
  std::mutex mu_;
  std::deque<outbox_ack::outcome> script_;
  outbox_ack::outcome otherwise_ = outbox_ack::outcome::acknowledged;
  std::set<std::string> refuse_;
  std::vector<delivery> log_;
};

runtime_config config_for(const std::filesystem::path& dir, outbox_fn sink) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 2;
  c.sync_threads = 2;
  c.scheduler_threads = 2;
  c.alarm_poll = 50ms;
  c.alarm_retry_base = 50ms;
  add_builtin_types(c.types);
  c.outbox.sinks["bus"].deliver = std::move(sink);
  c.outbox.sinks["bus"].retry =
    json{{"base_delay_ms", 20}, {"max_delay_ms", 100}, {"jitter", "none"}};
  c.outbox.routes.push_back({"bus", {"payment"}, {"acme"}, {"ledger"}});
  c.outbox.batch = 4; // several relay turns per entity
  return c;
}

std::unique_ptr<runtime> start(runtime_config c) {
  return test::start_ok(std::move(c));
}

json append(runtime& rt, const std::string& id, const std::string& type, int n) {
  auto r = rt.call_sync(entity_key{"acme", "ledger", id}, "append",
                        json{{"type", type}, {"data", {{"n", n}}}}.dump());
  REQUIRE_MESSAGE(r.ok, r.body);
  return r.json();
}

/// The sink "bus"'s series of /metrics, read at one call.
struct bus_series {
  double delivered = 0, retried = 0, refused = 0, lag = 0;
};

bus_series bus_stats(runtime& rt) {
  auto v = [&](const char* name) { return rt.metrics().value(name, {{"sink", "bus"}}); };
  return {v("factum_outbox_delivered_total"), v("factum_outbox_retries_total"),
          v("factum_outbox_refused_total"), v("factum_outbox_lag")};
}

std::vector<int64_t> seqs(int64_t from, int64_t to, int64_t step = 1) {
  std::vector<int64_t> v;
  for (auto i = from; i <= to; i += step)
    v.push_back(i);
  return v;
}

} // namespace

TEST_CASE("outbox relay: routed facts reach the sink once each in seq order per entity (other "
          "types and tenants and entity types stay home)") {
  test::temp_dir tmp;
  scripted_sink sink;
  auto rt = start(config_for(tmp.path(), sink.fn()));
  for (int i = 1; i <= 10; ++i)
    for (auto id : {"a", "b", "c"})
      append(*rt, id, i % 2 ? "payment" : "note", i); // odd seqs are payments
  auto r =
    rt->call_sync(entity_key{"globex", "ledger", "a"}, "append", json{{"type", "payment"}}.dump());
  REQUIRE(r.ok);
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 15; }));
  auto settled = sink.settled();
  CHECK(settled.size() == 3);
  for (auto id : {"acme/ledger/a", "acme/ledger/b", "acme/ledger/c"})
    CHECK(settled[id] == seqs(1, 9, 2));
  REQUIRE(test::eventually([&] { return bus_stats(*rt).lag == 0; }));
  auto st = bus_stats(*rt);
  CHECK(st.retried == 0);
  CHECK(st.refused == 0);
  // Nothing more arrives: the relay's alarm is gone once it caught up.
  auto alarms = rt->call_sync(entity_key{"acme", "ledger", "a"}, "@alarms", "{}");
  REQUIRE(alarms.ok);
  CHECK(alarms.json().dump().find("@outbox") == std::string::npos);
  rt->stop();
}

TEST_CASE("outbox relay: a fact the sink refuses becomes a dead letter and delivery goes on "
          "with the next one (an operator's retry delivers it again)") {
  test::temp_dir tmp;
  scripted_sink sink;
  sink.refuse("r", 2);
  auto rt = start(config_for(tmp.path(), sink.fn()));
  std::vector<int64_t> payments; // the refusal's own lifecycle fact may come between them
  for (int i = 1; i <= 3; ++i)
    payments.push_back(append(*rt, "r", "payment", i)["seq"]);
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 2; }));
  CHECK(sink.settled()["acme/ledger/r"] == payments);
  CHECK(bus_stats(*rt).refused == 1);
  auto dls = rt->call_sync(entity_key{"acme", "ledger", "r"}, "@dead_letters", "{}");
  REQUIRE(dls.ok);
  auto list = dls.json();
  REQUIRE(list.size() == 1);
  CHECK(list[0]["operation"] == "@outbox:bus");
  CHECK(list[0]["reason"] == "outbox_refused");
  CHECK(list[0]["status"] == "pending");
  CHECK(list[0]["error_code"] == "HTTP_422");
  auto facts =
    rt->call_sync(entity_key{"acme", "ledger", "r"}, "@facts", json{{"type", "lifecycle"}}.dump());
  REQUIRE(facts.ok);
  auto f = facts.json();
  REQUIRE(f.size() == 1);
  CHECK(f[0]["subtype"] == "dead_letter_created");
  CHECK(f[0]["data"]["seq"] == 2);
  // An operator's retry delivers the fact once more; acknowledged, the dead letter is resolved.
  sink.accept_all();
  auto retry = rt->call_sync(entity_key{"acme", "ledger", "r"}, "@dead_letter",
                             json{{"id", list[0]["id"]}, {"action", "retry"}}.dump());
  REQUIRE_MESSAGE(retry.ok, retry.body);
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 3; }));
  auto settled = sink.settled()["acme/ledger/r"];
  CHECK(settled.back() == payments[1]);
  REQUIRE(test::eventually([&] {
    auto l = rt->call_sync(entity_key{"acme", "ledger", "r"}, "@dead_letters", "{}").json();
    return l.size() == 1 && l[0]["status"] == "resolved";
  }));
  rt->stop();
}

TEST_CASE("outbox relay: a failing sink is retried after a backoff and no fact overtakes one "
          "that is not acknowledged") {
  test::temp_dir tmp;
  scripted_sink sink;
  using o = outbox_ack::outcome;
  sink.script({o::retry, o::retry, o::acknowledged, o::retry});
  auto rt = start(config_for(tmp.path(), sink.fn()));
  for (int i = 1; i <= 6; ++i)
    append(*rt, "x", "payment", i);
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 6; }));
  CHECK(bus_stats(*rt).retried == 3);
  CHECK(sink.settled()["acme/ledger/x"] == seqs(1, 6));
  // Every attempt at seq n + 1 came after seq n was acknowledged.
  int64_t acked = 0;
  for (auto& d : sink.log()) {
    CHECK(d.seq == acked + 1);
    if (d.result == o::acknowledged)
      acked = d.seq;
  }
  rt->stop();
}

TEST_CASE("outbox relay: a fact reaches its sink only once the sync that made it durable came "
          "back (never before its own append is answered)") {
  test::temp_dir tmp;
  std::mutex mu;
  std::map<int64_t, std::chrono::steady_clock::time_point> delivered, answered;
  outbox_fn sink = [&](const outbox_message& m, std::function<void(outbox_ack)> done) {
    {
      std::lock_guard<std::mutex> g(mu);
      delivered.emplace(m.seq, std::chrono::steady_clock::now());
    }
    outbox_ack a;
    a.result = outbox_ack::outcome::acknowledged;
    done(a);
  };
  auto c = config_for(tmp.path(), sink);
  c.outbox.batch = 1; // a relay turn per fact: appends queued meanwhile commit beside it
  // Every WAL sync takes 150 ms: a relay that did not wait for it would deliver a fact long
  // before the fact's append is answered (which waits for that sync).
  c.storage_fault = [](uint64_t, std::string_view what) {
    if (what == "sync")
      std::this_thread::sleep_for(150ms);
    return 0;
  };
  auto rt = start(std::move(c));
  std::atomic<int> replies{0};
  for (int i = 1; i <= 8; ++i)
    rt->call(entity_key{"acme", "ledger", "g"}, "append",
             json{{"type", "payment"}, {"data", {{"n", i}}}}.dump(), {}, [&](call_reply r) {
               auto now = std::chrono::steady_clock::now();
               if (r.ok) {
                 std::lock_guard<std::mutex> g(mu);
                 answered.emplace(r.json()["seq"].get<int64_t>(), now);
               }
               ++replies;
             });
  REQUIRE(test::eventually([&] { return replies == 8; }));
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 8; }));
  std::lock_guard<std::mutex> g(mu);
  REQUIRE(answered.size() == 8);
  for (auto& [seq, at] : answered) {
    REQUIRE(delivered.count(seq) == 1);
    // Both leave when the same sync comes back; the reply's callback may run a moment later.
    CHECK(delivered[seq] > at - 50ms);
  }
  rt->stop();
}

TEST_CASE("outbox relay: facts left unacknowledged at a stop are delivered by the next runtime "
          "without any call to their entity") {
  test::temp_dir tmp;
  scripted_sink down, up;
  down.otherwise(outbox_ack::outcome::retry);
  {
    auto rt = start(config_for(tmp.path(), down.fn()));
    for (int i = 1; i <= 5; ++i) {
      append(*rt, "p", "payment", i);
      append(*rt, "q", "payment", i);
    }
    REQUIRE(test::eventually([&] { return bus_stats(*rt).retried >= 2; }));
    CHECK(bus_stats(*rt).delivered == 0);
    CHECK(bus_stats(*rt).lag == 10);
    rt->stop();
  }
  auto rt = start(config_for(tmp.path(), up.fn()));
  REQUIRE(test::eventually([&] { return bus_stats(*rt).delivered == 10; }));
  auto settled = up.settled();
  CHECK(settled["acme/ledger/p"] == seqs(1, 5));
  CHECK(settled["acme/ledger/q"] == seqs(1, 5));
  rt->stop();
}
