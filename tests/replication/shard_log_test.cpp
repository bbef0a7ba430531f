// shard_log_test.cpp: a shard's log on NATS JetStream (factum/replication/shard_log.hpp) against
// real nats-server processes the tests start (tests/support/nats_cluster.hpp): appends and their
// predicted sequences, reading back, fencing by a newer writer's marker (strict: the server refuses
// every later append of the older writer), the first marker of an empty stream, JetStream's dedupe
// of a retried publish, the stream leader killed under a pipeline of appends (three servers), image
// parts and heads (the head's rollup, reads and get() across its holes, purge_parts), allowing
// rollups on an existing stream, the last message id the server keeps (across a leader change, a
// restart, a catch-up from a snapshot), trimming, the acknowledgement timeout of a server that
// stopped answering, and writers of two shards on one connection. Threads: each test's own, plus
// libnats' and the writers' callback threads.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <nats/nats.h>

#include "factum/replication/shard_log.hpp"
#include "support/eventually.hpp"
#include "support/nats_cluster.hpp"

using namespace factum;
using namespace factum::replication;
using namespace std::chrono_literals;

namespace shard_log_test {

namespace {

log_options options_for(const test::nats_cluster& nc, int replicas = 1) {
  log_options o;
  o.servers = nc.urls();
  o.replicas = replicas;
  o.ack_timeout = 2000ms;
  o.request_timeout = 2000ms;
  return o;
}

std::shared_ptr<log_connection> connect(const log_options& o) {
  auto c = log_connection::connect(o);
  REQUIRE_MESSAGE(c.is_ok(), c.error().to_string());
  return *c;
}

std::unique_ptr<shard_writer> open(const std::shared_ptr<log_connection>& c, uint32_t k,
                                   int64_t epoch) {
  auto w = shard_writer::open(c, k, epoch);
  REQUIRE_MESSAGE(w.is_ok(), w.error().to_string());
  return std::move(*w);
}

/// The answers of a writer's appends, in the order their callbacks ran.
class outcomes {
 public:
  struct answer {
    size_t index; ///< the append's number, in append order
    status st;
    uint64_t seq;
    std::chrono::steady_clock::time_point at;
  };

  /// A `done` for append number `index`.
  shard_writer::done_fn done(size_t index) {
    return [this, index](const status& st, uint64_t seq) {
      std::lock_guard<std::mutex> g(mu_);
      got_.push_back({index, st, seq, std::chrono::steady_clock::now()});
      cv_.notify_all();
    };
  }
  /// Waits (bounded) until `n` answers came.
  bool wait(size_t n, std::chrono::milliseconds limit = 15s) {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, limit, [&] { return got_.size() >= n; });
  }
  std::vector<answer> all() {
    std::lock_guard<std::mutex> g(mu_);
    return got_;
  }
  size_t count() {
    std::lock_guard<std::mutex> g(mu_);
    return got_.size();
  }
  size_t ok_count() {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (auto& a : got_)
      n += a.st.is_ok() ? 1 : 0;
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<answer> got_;
};

/// One append, waited for.
std::pair<status, uint64_t> append_one(shard_writer& w, const std::string& entity, std::string data,
                                       append_kind kind = append_kind::record) {
  std::promise<std::pair<status, uint64_t>> p;
  auto f = p.get_future();
  w.append(
    entity, std::move(data),
    [&](const status& st, uint64_t seq) {
      p.set_value({st, seq});
    },
    kind);
  REQUIRE(f.wait_for(15s) == std::future_status::ready);
  return f.get();
}

std::vector<log_message> read_all(log_connection& c, uint32_t k, uint64_t from = 0,
                                  uint64_t to = 0) {
  std::vector<log_message> out;
  auto st = c.read(k, from, to, [&](const log_message& m) {
    out.push_back(m);
    return true;
  });
  REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  return out;
}

/// A raw JetStream client (libnats) for what the log never does: a publish with the given
/// headers, a stream of other settings, a stream leader's stepdown.
struct raw_publisher {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  explicit raw_publisher(const std::string& url) {
    REQUIRE(natsConnection_ConnectTo(&nc, url.c_str()) == NATS_OK);
    REQUIRE(natsConnection_JetStream(&js, nc, nullptr) == NATS_OK);
  }
  ~raw_publisher() {
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
  }
  /// The stored sequence and whether it was a duplicate, or the JetStream error code (< 0).
  std::pair<int64_t, bool> publish(const std::string& subject,
                                   const std::vector<std::pair<std::string, std::string>>& hdrs) {
    natsMsg* m = nullptr;
    REQUIRE(natsMsg_Create(&m, subject.c_str(), nullptr, "r", 1) == NATS_OK);
    for (auto& [k, v] : hdrs)
      REQUIRE(natsMsgHeader_Set(m, k.c_str(), v.c_str()) == NATS_OK);
    jsPubAck* pa = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_PublishMsg(&pa, js, m, nullptr, &jerr);
    natsMsg_Destroy(m);
    if (s != NATS_OK)
      return {-static_cast<int64_t>(jerr == 0 ? 1 : jerr), false};
    std::pair<int64_t, bool> out{static_cast<int64_t>(pa->Sequence), pa->Duplicate};
    jsPubAck_Destroy(pa);
    return out;
  }
  /// Creates stream `name` on `subject` (R1, file storage) with the given settings.
  void add_stream(const std::string& name, const std::string& subject, bool allow_rollup,
                  bool deny_purge, std::chrono::seconds duplicates = 120s) {
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = name.c_str();
    const char* subjects[] = {subject.c_str()};
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(duplicates).count();
    sc.AllowRollup = allow_rollup;
    sc.DenyPurge = deny_purge;
    jsStreamInfo* si = nullptr;
    REQUIRE(js_AddStream(&si, js, &sc, nullptr, nullptr) == NATS_OK);
    jsStreamInfo_Destroy(si);
  }
  /// Whether stream `name` allows rollups (and does not deny purges).
  bool allows_rollup(const std::string& name) {
    jsStreamInfo* si = nullptr;
    REQUIRE(js_GetStreamInfo(&si, js, name.c_str(), nullptr, nullptr) == NATS_OK);
    bool out = si->Config->AllowRollup && !si->Config->DenyPurge;
    jsStreamInfo_Destroy(si);
    return out;
  }
  /// Asks the leader of stream `name` to step down; whether it answered without an error.
  bool step_down(const std::string& name) {
    natsMsg* reply = nullptr;
    auto subject = "$JS.API.STREAM.LEADER.STEPDOWN." + name;
    if (natsConnection_RequestString(&reply, nc, subject.c_str(), "", 5000) != NATS_OK)
      return false;
    std::string body(natsMsg_GetData(reply), static_cast<size_t>(natsMsg_GetDataLength(reply)));
    natsMsg_Destroy(reply);
    return body.find("\"error\"") == std::string::npos;
  }
};

} // namespace

TEST_CASE("shard log: appends get the sequences after the marker, read returns them in order "
          "with their headers, and the last record of an entity and the last marker are found") {
  test::nats_cluster nc(1);
  log_options nowhere;
  nowhere.servers = {"nats://127.0.0.1:1"};
  CHECK(log_connection::connect(nowhere).error().code() == errc::unavailable);
  auto c = connect(options_for(nc));
  CHECK(c->last_seq(0).error().code() == errc::not_found);
  auto w = open(c, 0, 7);
  CHECK(w->shard() == 0);
  CHECK(w->epoch() == 7);
  CHECK(w->marker_seq() == 1);
  CHECK(w->writer_id().size() == 16);
  CHECK(w->writer_id().find_first_not_of("0123456789abcdef") == std::string::npos);

  const std::vector<std::string> entities{"0a1", "b2", "c3ff"};
  const size_t n = 60;
  outcomes out;
  for (size_t i = 0; i < n; ++i)
    w->append(entities[i % 3], "record " + std::to_string(i), out.done(i));
  REQUIRE(out.wait(n));
  CHECK(w->drain(5s).is_ok());
  CHECK(w->in_flight() == 0);
  CHECK_FALSE(w->broken());
  auto got = out.all();
  for (size_t i = 0; i < n; ++i) {
    CHECK(got[i].index == i); // in append order
    CHECK_MESSAGE(got[i].st.is_ok(), got[i].st.to_string());
    CHECK(got[i].seq == w->marker_seq() + 1 + i);
  }
  CHECK(*c->last_seq(0) == n + 1);
  CHECK(*c->first_seq(0) == 1);

  auto log = read_all(*c, 0); // an ordered consumer: more than a short range
  REQUIRE(log.size() == n + 1);
  CHECK(log[0].seq == 1);
  CHECK(log[0].marker);
  CHECK(log[0].epoch == 7);
  CHECK(log[0].writer == w->writer_id());
  CHECK(log[0].entity.empty());
  for (size_t i = 0; i < n; ++i) {
    auto& m = log[i + 1];
    CHECK(m.seq == i + 2);
    CHECK_FALSE(m.marker);
    CHECK(m.epoch == 7);
    CHECK(m.writer == w->writer_id());
    CHECK(m.entity == entities[i % 3]);
    CHECK(m.data == "record " + std::to_string(i));
  }
  // A short range (one request per message), a range past the end, and an early stop.
  auto part = read_all(*c, 0, 5, 8);
  REQUIRE(part.size() == 4);
  CHECK(part[0].seq == 5);
  CHECK(part[3].seq == 8);
  CHECK(part[3].data == "record 6");
  CHECK(read_all(*c, 0, 55, 1000).size() == 7);
  CHECK(read_all(*c, 0, 62, 0).empty());
  size_t seen = 0;
  CHECK(c->read(0, 1, 0, [&](const log_message&) { return ++seen < 25; }).is_ok());
  CHECK(seen == 25);

  auto last = c->last_of_entity(0, "b2");
  REQUIRE(last.is_ok());
  REQUIRE(last->has_value());
  CHECK((*last)->seq == n + 1 - 1); // record 58 (58 % 3 == 1) at seq 60
  CHECK((*last)->data == "record 58");
  CHECK((*last)->entity == "b2");
  CHECK((*last)->writer == w->writer_id());
  auto none = c->last_of_entity(0, "dead");
  REQUIRE(none.is_ok());
  CHECK_FALSE(none->has_value());
  CHECK(c->last_of_entity(0, "a.b").error().code() == errc::invalid_argument);
  auto marker = c->last_marker(0);
  REQUIRE(marker.is_ok());
  REQUIRE(marker->has_value());
  CHECK((*marker)->seq == 1);
  CHECK((*marker)->marker);
  CHECK(c->last_marker(9).error().code() == errc::not_found);

  // An entity that is not a token fails that append only; the writer goes on.
  auto bad = append_one(*w, "x.y", "no");
  CHECK(bad.first.code() == errc::invalid_argument);
  CHECK_FALSE(w->broken());
  auto next = append_one(*w, "abc", "yes");
  CHECK(next.first.is_ok());
  CHECK(next.second == n + 2);
}

TEST_CASE("shard log: a writer opened under a newer epoch fences the older one: its next "
          "appends fail CONFLICT, even those that would land, and it cannot open again") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w1 = open(c, 3, 1);
  for (int i = 0; i < 3; ++i)
    REQUIRE(append_one(*w1, "e1", "w1 " + std::to_string(i)).first.is_ok());
  CHECK(*c->last_seq(3) == 4);

  auto c2 = connect(options_for(nc)); // another node
  auto w2 = open(c2, 3, 2);
  CHECK(w2->marker_seq() == 5);

  // Two appends of the old writer in flight together (both sent while the server is stopped,
  // so that neither is refused before the other is sent): the first expects 4 and fails; the
  // second expects 5, the new marker's sequence, and lands at 6, yet is reported failed.
  outcomes out;
  nc.pause(0);
  w1->append("e1", "late 0", out.done(0));
  w1->append("e1", "late 1", out.done(1));
  nc.resume(0);
  REQUIRE(out.wait(2));
  auto got = out.all();
  CHECK(got[0].index == 0);
  CHECK(got[0].st.code() == errc::conflict);
  CHECK(got[1].index == 1);
  CHECK(got[1].st.code() == errc::conflict);
  CHECK(w1->broken());
  // Once broken, nothing more is published.
  auto later = append_one(*w1, "e1", "later");
  CHECK(later.first.code() == errc::conflict);
  CHECK(w1->drain(5s).is_ok());
  CHECK(w1->in_flight() == 0);

  auto log = read_all(*c, 3);
  REQUIRE(log.size() == 6);
  CHECK(log[4].marker);
  CHECK(log[4].writer == w2->writer_id());
  CHECK(log[4].epoch == 2);
  // The old writer's record after the new marker: readers skip it (not the marker's writer).
  CHECK_FALSE(log[5].marker);
  CHECK(log[5].writer == w1->writer_id());
  CHECK(log[5].data == "late 1");

  // The old writer cannot open again under its epoch: the last marker is newer.
  auto again = shard_writer::open(c, 3, 1);
  REQUIRE_FALSE(again.is_ok());
  CHECK(again.error().code() == errc::conflict);

  // That late record moved the log past the new writer's prediction: its next append fails
  // CONFLICT, and it opens again under its own epoch (the last marker's: not newer).
  CHECK(append_one(*w2, "e1", "w2 0").first.code() == errc::conflict);
  auto w2b = open(c2, 3, 2);
  CHECK(w2b->marker_seq() == 7);
  auto ok = append_one(*w2b, "e1", "w2 1");
  CHECK(ok.first.is_ok());
  CHECK(ok.second == 8);
}

TEST_CASE("shard log: an image head goes only once its writer's earlier appends are answered: "
          "a superseded writer's head is never stored after a newer marker, and removes "
          "nothing") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w1 = open(c, 3, 1);
  for (int i = 0; i < 3; ++i)
    REQUIRE(append_one(*w1, "e1", "w1 " + std::to_string(i)).first.is_ok());
  auto w2 = open(connect(options_for(nc)), 3, 2);
  REQUIRE(w2->marker_seq() == 5);
  // A record of the old writer, then its image head, sent while the server is stopped: had the
  // head been pipelined behind the record, it would expect 5, the new marker's sequence, and
  // be stored at 6, removing e1's records.
  outcomes out;
  nc.pause(0);
  w1->append("e1", "late record", out.done(0));
  std::thread head([&] { w1->append("e1", "late head", out.done(1), append_kind::image_head); });
  REQUIRE(test::eventually([&] { return w1->in_flight() == 2; }, 5s)); // the head is in append()
  nc.resume(0);
  head.join();
  REQUIRE(out.wait(2));
  CHECK(out.all()[0].st.code() == errc::conflict);
  CHECK(out.all()[1].st.code() == errc::conflict);
  auto log = read_all(*c, 3);
  REQUIRE(log.size() == 5); // e1's three records and both markers: nothing removed, no head
  CHECK(log[1].data == "w1 0");
  CHECK(log[4].marker);
  // The new writer's head is stored, and removes e1's earlier records.
  auto ok = append_one(*w2, "e1", "w2 record");
  REQUIRE(ok.first.is_ok());
  outcomes mine;
  w2->append("e1", "w2 head", mine.done(0), append_kind::image_head);
  REQUIRE(mine.wait(1));
  CHECK_MESSAGE(mine.all()[0].st.is_ok(), mine.all()[0].st.to_string());
  CHECK(mine.all()[0].seq == 7);
  log = read_all(*c, 3);
  REQUIRE(log.size() == 3); // the two markers and the head
  CHECK(log[2].data == "w2 head");
}
TEST_CASE("shard log: an empty stream's first marker is fenced: of writers racing to open, "
          "one marker lands at seq 1 and no two read the same last sequence") {
  test::nats_cluster nc(1);
  // nats-server enforces an expectation of last sequence 0 (libnats would not send it).
  {
    auto c = connect(options_for(nc));
    REQUIRE(c->ensure_stream(40).is_ok());
    raw_publisher raw(nc.url());
    auto first = raw.publish("factum.log.40.epoch", {{"Nats-Expected-Last-Sequence", "0"}});
    CHECK(first.first == 1);
    auto second = raw.publish("factum.log.40.epoch", {{"Nats-Expected-Last-Sequence", "0"}});
    CHECK(second.first == -10071); // wrong last sequence
    CHECK(*c->last_seq(40) == 1);
    // A writer opening on it now reads 1 and continues after it.
    CHECK(open(c, 40, 1)->marker_seq() == 2);
  }
  size_t raced = 0;
  for (uint32_t k = 0; k < 8; ++k) {
    auto a = connect(options_for(nc));
    auto b = connect(options_for(nc));
    REQUIRE(a->ensure_stream(k).is_ok());
    std::promise<void> go;
    auto start = go.get_future().share();
    auto racer = [&](std::shared_ptr<log_connection> c, int64_t epoch) {
      start.wait();
      return shard_writer::open(c, k, epoch);
    };
    auto fa = std::async(std::launch::async, racer, a, int64_t(5));
    auto fb = std::async(std::launch::async, racer, b, int64_t(5));
    go.set_value();
    auto ra = fa.get();
    auto rb = fb.get();
    auto log = read_all(*a, k);
    REQUIRE(!log.empty());
    CHECK(log[0].seq == 1);
    CHECK(log[0].marker);
    size_t opened = 0;
    for (auto* r : {&ra, &rb}) {
      if (!r->is_ok()) {
        CHECK_MESSAGE(r->error().code() == errc::conflict, r->error().to_string());
        ++raced;
        continue;
      }
      ++opened;
      auto& w = **r;
      REQUIRE(w->marker_seq() <= log.size());
      CHECK(log[w->marker_seq() - 1].writer == w->writer_id());
    }
    CHECK(opened >= 1);
    CHECK(log.size() == opened); // every marker in the log is one writer that opened
  }
  MESSAGE(raced << " of 8 races had a loser refused by the expectation");
}

TEST_CASE("shard log: a retried publish with the same Nats-Msg-Id is deduplicated, and an "
          "acknowledgement at another sequence than predicted fails the append") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w = open(c, 1, 1);
  REQUIRE(append_one(*w, "e", "one").first.is_ok()); // seq 2
  // A retry of the writer's next append (seq 3, expecting 2), sent twice: the second is
  // answered as a duplicate of seq 3 although the log's last sequence is no longer 2.
  raw_publisher raw(nc.url());
  std::vector<std::pair<std::string, std::string>> hdrs{{"Nats-Msg-Id", w->writer_id() + ":3"},
                                                        {"Nats-Expected-Last-Sequence", "2"},
                                                        {"Factum-Epoch", "1"},
                                                        {"Factum-Writer", w->writer_id()}};
  auto first = raw.publish("factum.log.1.e.e", hdrs);
  CHECK(first.first == 3);
  CHECK_FALSE(first.second);
  auto retry = raw.publish("factum.log.1.e.e", hdrs);
  CHECK(retry.first == 3);
  CHECK(retry.second);
  CHECK(*c->last_seq(1) == 3);
  CHECK(read_all(*c, 1).size() == 3);

  // A writer whose next message id is already stored at another sequence than it predicts:
  // JetStream answers the duplicate's sequence, and the writer fails CONFLICT.
  auto w2 = open(c, 1, 2); // marker at 4
  CHECK(raw.publish("factum.log.1.e.x", {{"Nats-Msg-Id", "other:5"}}).first == 5);
  CHECK(raw.publish("factum.log.1.e.x", {{"Nats-Msg-Id", w2->writer_id() + ":5"}}).first == 6);
  auto dup = append_one(*w2, "x", "mine");
  CHECK(dup.first.code() == errc::conflict);
  CHECK(dup.first.message().find("stored at seq 6") != std::string::npos);
  CHECK(w2->broken());
}

TEST_CASE("shard log: three servers, the stream leader killed under a pipeline of appends: "
          "every append answered ok is in the log in order, the rest failed, a new writer "
          "opens, and the killed server catches up once restarted") {
  test::nats_cluster nc(3);
  auto o = options_for(nc, 3);
  auto c = connect(o);
  auto w = open(c, 0, 1);
  int leader = nc.stream_leader("FACTUM_LOG_0");
  REQUIRE(leader >= 0);

  outcomes out;
  std::string pad(100, 'p');
  size_t appended = 0;
  bool killed = false;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!w->broken() && appended < 20000 && std::chrono::steady_clock::now() < deadline) {
    // At most 64 in flight: wait for answers (bounded) before the next append.
    while (w->in_flight() >= 64 && !w->broken())
      out.wait(appended - 63, 100ms);
    w->append("e" + std::to_string(appended % 5), std::to_string(appended) + pad,
              out.done(appended));
    ++appended;
    if (!killed && out.ok_count() >= 300) {
      nc.kill9(static_cast<size_t>(leader));
      killed = true;
    }
  }
  REQUIRE(killed);
  REQUIRE(w->drain(o.ack_timeout + 10s).is_ok());
  auto got = out.all();
  REQUIRE(got.size() == appended);
  size_t oks = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].index == i);
    if (got[i].st.is_ok()) {
      CHECK(oks == i); // the answered-ok appends come first, then only failures
      CHECK(got[i].seq == w->marker_seq() + 1 + i);
      ++oks;
    } else {
      CHECK_MESSAGE((got[i].st.code() == errc::unavailable || got[i].st.code() == errc::conflict),
                    got[i].st.to_string());
    }
  }
  MESSAGE(oks << " of " << appended << " appends ok before the writer broke: "
              << (oks < got.size() ? got[oks].st.to_string() : std::string("none failed")));
  CHECK(oks >= 300);
  CHECK(w->broken());

  // A new leader: read back what was acknowledged.
  int next = nc.stream_leader("FACTUM_LOG_0", 30s);
  REQUIRE(next >= 0);
  CHECK(next != leader);
  std::vector<log_message> log;
  REQUIRE(test::eventually(
    [&] {
      log.clear();
      return c
        ->read(0, 0, 0,
               [&](const log_message& m) {
                 log.push_back(m);
                 return true;
               })
        .is_ok();
    },
    20s, 100ms));
  REQUIRE(log.size() >= oks + 1);
  for (size_t i = 0; i < oks; ++i) {
    auto& m = log[i + 1];
    CHECK(m.seq == w->marker_seq() + 1 + i);
    CHECK(m.writer == w->writer_id());
    CHECK(m.data == std::to_string(i) + pad);
  }

  // A new writer opens after (the old one's appends still in flight time out first).
  std::unique_ptr<shard_writer> w2;
  REQUIRE(test::eventually(
    [&] {
      auto r = shard_writer::open(c, 0, 2);
      if (r)
        w2 = std::move(*r);
      return r.is_ok();
    },
    20s, 100ms));
  CHECK(w2->marker_seq() > w->marker_seq() + oks);
  auto after = append_one(*w2, "e1", "after");
  CHECK_MESSAGE(after.first.is_ok(), after.first.to_string());
  CHECK(after.second == w2->marker_seq() + 1);

  // The killed server comes back on its store and catches up: three current peers again.
  nc.restart(static_cast<size_t>(leader));
  CHECK(test::eventually([&] { return nc.current_peers("FACTUM_LOG_0") == 3; }, 30s, 100ms));
  auto last = append_one(*w2, "e1", "last");
  CHECK_MESSAGE(last.first.is_ok(), last.first.to_string());
  CHECK(last.second == after.second + 1);
}

TEST_CASE("shard log: an image head rolls up its entity's subject: the entity's earlier records "
          "go, its image parts, other entities' records and the marker stay, and reads see the "
          "holes") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w = open(c, 6, 1); // marker at 1
  outcomes out;
  size_t n = 0;
  // Records 0..39 at sequences 2..41: "a" at the even sequences, "b" at the odd ones.
  for (; n < 40; ++n)
    CHECK(w->append(n % 2 == 0 ? "a" : "b", "r" + std::to_string(n), out.done(n)) == n + 2);
  CHECK(w->append("a", "part 0", out.done(n++), append_kind::image_part) == 42);
  CHECK(w->append("a", "part 1", out.done(n++), append_kind::image_part) == 43);
  CHECK(w->append("a", "head", out.done(n++), append_kind::image_head) == 44);
  CHECK(w->append("a", "after", out.done(n++)) == 45);
  // An entity that is not a token fails at once: 0, and the writer goes on.
  CHECK(w->append("x.y", "no", out.done(n++), append_kind::image_part) == 0);
  REQUIRE(out.wait(n));
  CHECK(w->drain(5s).is_ok());
  for (auto& a : out.all()) {
    if (a.index == n - 1) {
      CHECK(a.st.code() == errc::invalid_argument);
      continue;
    }
    CHECK_MESSAGE(a.st.is_ok(), a.st.to_string());
    CHECK(a.seq == a.index + 2);
  }
  CHECK_FALSE(w->broken());
  CHECK(*c->first_seq(6) == 1);
  CHECK(*c->last_seq(6) == 45);

  // The marker, b's 20 records, a's two parts, its head and its record after the head.
  auto check_log = [&](const std::vector<log_message>& log) {
    REQUIRE(log.size() == 25);
    CHECK(log[0].seq == 1);
    CHECK(log[0].marker);
    for (size_t i = 0; i < 20; ++i) {
      CHECK(log[1 + i].seq == 3 + 2 * i);
      CHECK(log[1 + i].entity == "b");
      CHECK_FALSE(log[1 + i].part);
      CHECK(log[1 + i].data == "r" + std::to_string(1 + 2 * i));
    }
    for (size_t i = 0; i < 2; ++i) {
      auto& m = log[21 + i];
      CHECK(m.seq == 42 + i);
      CHECK(m.part);
      CHECK_FALSE(m.marker);
      CHECK(m.entity == "a");
      CHECK(m.writer == w->writer_id());
      CHECK(m.data == "part " + std::to_string(i));
    }
    CHECK(log[23].seq == 44);
    CHECK_FALSE(log[23].part);
    CHECK(log[23].entity == "a");
    CHECK(log[23].data == "head");
    CHECK(log[24].seq == 45);
    CHECK(log[24].data == "after");
  };
  check_log(read_all(*c, 6)); // an ordered consumer
  std::vector<log_message> each;
  for (uint64_t from = 1; from <= 45; from += 15) // short ranges, one request per message
    for (auto& m : read_all(*c, 6, from, from + 14))
      each.push_back(m);
  check_log(each);

  auto removed = c->get(6, 2);
  REQUIRE_MESSAGE(removed.is_ok(), removed.error().to_string());
  CHECK_FALSE(removed->has_value());
  auto kept = c->get(6, 3);
  REQUIRE(kept.is_ok());
  REQUIRE(kept->has_value());
  CHECK((*kept)->seq == 3);
  CHECK((*kept)->entity == "b");
  CHECK((*kept)->data == "r1");
  auto part = c->get(6, 43);
  REQUIRE(part.is_ok());
  REQUIRE(part->has_value());
  CHECK((*part)->part);
  CHECK((*part)->entity == "a");
  CHECK((*part)->data == "part 1");
  CHECK_FALSE(c->get(6, 0)->has_value());
  CHECK_FALSE(c->get(6, 46)->has_value()); // not written yet
  CHECK(c->get(60, 1).error().code() == errc::not_found);
  auto last_a = c->last_of_entity(6, "a");
  REQUIRE(last_a.is_ok());
  REQUIRE(last_a->has_value());
  CHECK((*last_a)->seq == 45);

  // With the marker trimmed, the first message held is the first the rollup left.
  CHECK(c->trim(6, 2).is_ok());
  CHECK(*c->first_seq(6) == 3);
  // The writer goes on after the rollup and the trim.
  auto next = append_one(*w, "b", "next");
  CHECK_MESSAGE(next.first.is_ok(), next.first.to_string());
  CHECK(next.second == 46);
}

TEST_CASE("shard log: purge_parts removes one entity's image parts below a sequence, nothing "
          "else") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w = open(c, 7, 1); // marker at 1
  outcomes out;
  w->append("a", "a0 part 0", out.done(0), append_kind::image_part); // 2
  w->append("a", "a0 part 1", out.done(1), append_kind::image_part); // 3
  w->append("b", "b0 part 0", out.done(2), append_kind::image_part); // 4
  w->append("a", "a0 head", out.done(3), append_kind::image_head);   // 5
  w->append("a", "a record", out.done(4));                           // 6
  w->append("a", "a1 part 0", out.done(5), append_kind::image_part); // 7
  w->append("b", "b1 part 0", out.done(6), append_kind::image_part); // 8
  w->append("a", "a1 head", out.done(7), append_kind::image_head);   // 9: removes 5 and 6
  REQUIRE(out.wait(8));
  for (auto& a : out.all())
    CHECK_MESSAGE(a.st.is_ok(), a.st.to_string());
  auto seqs = [&] {
    std::vector<uint64_t> v;
    for (auto& m : read_all(*c, 7))
      v.push_back(m.seq);
    return v;
  };
  CHECK(seqs() == std::vector<uint64_t>{1, 2, 3, 4, 7, 8, 9});

  // The parts of a's images that its head at 9 replaced: those below 9 (the first image's and
  // the second's). b's parts stay.
  CHECK(c->purge_parts(7, "a", 9).is_ok());
  CHECK(seqs() == std::vector<uint64_t>{1, 4, 8, 9});
  CHECK(c->purge_parts(7, "a", 9).is_ok()); // nothing left there: ok
  CHECK(c->purge_parts(7, "b", 1).is_ok()); // nothing below 1
  CHECK(c->purge_parts(7, "b", 8).is_ok()); // b's parts below 8 only
  CHECK(seqs() == std::vector<uint64_t>{1, 8, 9});
  CHECK(c->purge_parts(7, "x.y", 9).code() == errc::invalid_argument);
  CHECK(c->purge_parts(70, "a", 9).code() == errc::not_found);
  CHECK(*c->first_seq(7) == 1);
  CHECK(*c->last_seq(7) == 9);

  // A purge that removes the stream's last message leaves the writer's expectations as they
  // were: the server keeps the last message id.
  w->append("b", "b2 part 0", out.done(8), append_kind::image_part); // 10
  REQUIRE(out.wait(9));
  CHECK(c->purge_parts(7, "b", 11).is_ok());
  CHECK(seqs() == std::vector<uint64_t>{1, 9});
  auto next = append_one(*w, "a", "next");
  CHECK_MESSAGE(next.first.is_ok(), next.first.to_string());
  CHECK(next.second == 11);
}

TEST_CASE("shard log: ensure_stream allows rollups on a stream created without them, keeping its "
          "messages, and refuses a stream that denies purges") {
  test::nats_cluster nc(1);
  raw_publisher raw(nc.url());
  raw.add_stream("FACTUM_LOG_8", "factum.log.8.>", false, false);
  CHECK(raw.publish("factum.log.8.e.a", {}).first == 1);
  CHECK(raw.publish("factum.log.8.e.a", {{"Nats-Rollup", "sub"}}).first == -10111); // refused
  CHECK_FALSE(raw.allows_rollup("FACTUM_LOG_8"));

  auto c = connect(options_for(nc));
  REQUIRE(c->ensure_stream(8).is_ok());
  CHECK(raw.allows_rollup("FACTUM_LOG_8"));
  CHECK(*c->last_seq(8) == 1);
  CHECK(c->ensure_stream(8).is_ok()); // as it should be now: nothing to do

  auto w = open(c, 8, 1); // marker at 2
  CHECK(append_one(*w, "a", "record 0").second == 3);
  CHECK(append_one(*w, "a", "record 1").second == 4);
  CHECK(append_one(*w, "b", "record").second == 5);
  auto head = append_one(*w, "a", "head", append_kind::image_head);
  CHECK_MESSAGE(head.first.is_ok(), head.first.to_string());
  CHECK(head.second == 6);
  std::vector<uint64_t> seqs;
  for (auto& m : read_all(*c, 8))
    seqs.push_back(m.seq);
  CHECK(seqs == std::vector<uint64_t>{2, 5, 6}); // a's messages at 1, 3 and 4 went

  raw.add_stream("FACTUM_LOG_9", "factum.log.9.>", false, true);
  auto denied = c->ensure_stream(9);
  CHECK(denied.code() == errc::conflict);
  CHECK(shard_writer::open(c, 9, 1).error().code() == errc::conflict);
}

TEST_CASE("shard log: trim removes the messages below a sequence and first_seq follows") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto w = open(c, 2, 1);
  outcomes out;
  for (size_t i = 0; i < 20; ++i)
    w->append("e", std::to_string(i), out.done(i));
  REQUIRE(out.wait(20));
  CHECK(w->drain(5s).is_ok());
  CHECK(*c->first_seq(2) == 1);
  CHECK(*c->last_seq(2) == 21);
  CHECK(c->trim(2, 11).is_ok());
  CHECK(*c->first_seq(2) == 11);
  CHECK(*c->last_seq(2) == 21);
  auto log = read_all(*c, 2);
  REQUIRE(log.size() == 11);
  CHECK(log.front().seq == 11);
  CHECK(log.back().seq == 21);
  CHECK(read_all(*c, 2, 3, 12).size() == 2); // from below the first: from the first
  CHECK(c->trim(2, 1).is_ok());              // nothing below 1
  CHECK(*c->first_seq(2) == 11);
  // The writer goes on after a trim.
  auto next = append_one(*w, "e", "after trim");
  CHECK(next.first.is_ok());
  CHECK(next.second == 22);
  CHECK(c->trim(2, 23).is_ok()); // everything
  CHECK(*c->first_seq(2) == 0);
  CHECK(*c->last_seq(2) == 22);
  CHECK(read_all(*c, 2).empty());
  CHECK(c->delete_stream(2).is_ok());
  CHECK(c->last_seq(2).error().code() == errc::not_found);
  CHECK(c->delete_stream(2).is_ok()); // gone already: ok
}

TEST_CASE("shard log: appends to a server that stopped answering fail UNAVAILABLE within "
          "ack_timeout") {
  test::nats_cluster nc(1);
  auto o = options_for(nc);
  o.ack_timeout = 500ms;
  auto c = connect(o);
  auto w = open(c, 0, 1);
  REQUIRE(append_one(*w, "e", "before").first.is_ok());

  nc.pause(0);
  outcomes out;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 3; ++i)
    w->append("e", "while stopped " + std::to_string(i), out.done(i));
  bool answered = out.wait(3, 5s);
  nc.resume(0);
  REQUIRE(answered);
  for (auto& a : out.all()) {
    CHECK(a.st.code() == errc::unavailable);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(a.at - t0);
    CHECK_MESSAGE(took < o.ack_timeout + 1500ms, "answered after " << took.count() << " ms");
  }
  CHECK(w->broken());
  CHECK(append_one(*w, "e", "after").first.code() == errc::unavailable);

  // The server answers again: a new writer opens (after whatever of the three landed late).
  std::unique_ptr<shard_writer> w2;
  REQUIRE(test::eventually(
    [&] {
      auto r = shard_writer::open(c, 0, 2);
      if (r)
        w2 = std::move(*r);
      return r.is_ok();
    },
    15s, 50ms));
  CHECK(w2->marker_seq() >= 3); // after the three when they landed late, else after "before"
  CHECK(append_one(*w2, "e", "again").first.is_ok());
}

TEST_CASE("shard log: writers of two shards on one connection each get their own answers, in "
          "order") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  auto a = open(c, 10, 1);
  auto b = open(c, 11, 1);
  outcomes oa, ob;
  const size_t n = 500;
  std::thread ta([&] {
    for (size_t i = 0; i < n; ++i)
      a->append("aa", "a" + std::to_string(i), oa.done(i));
  });
  std::thread tb([&] {
    for (size_t i = 0; i < n; ++i)
      b->append("bb", "b" + std::to_string(i), ob.done(i));
  });
  ta.join();
  tb.join();
  REQUIRE(oa.wait(n));
  REQUIRE(ob.wait(n));
  for (auto* o : {&oa, &ob}) {
    auto got = o->all();
    REQUIRE(got.size() == n);
    for (size_t i = 0; i < n; ++i) {
      CHECK(got[i].index == i);
      CHECK(got[i].st.is_ok());
      CHECK(got[i].seq == 2 + i);
    }
  }
  auto la = read_all(*c, 10), lb = read_all(*c, 11);
  REQUIRE(la.size() == n + 1);
  REQUIRE(lb.size() == n + 1);
  CHECK(la.back().data == "a" + std::to_string(n - 1));
  CHECK(lb.back().data == "b" + std::to_string(n - 1));
  CHECK(la.back().writer == a->writer_id());
  CHECK(lb.back().writer == b->writer_id());
}

TEST_CASE("shard log: a writer destroyed with appends in flight answers each of them before "
          "its destructor returns, and appends from inside a done callback are answered too") {
  test::nats_cluster nc(1);
  auto c = connect(options_for(nc));
  outcomes out;
  const size_t n = 300;
  {
    auto w = open(c, 5, 1);
    auto* raw = w.get();
    // The first answer appends once more from inside its callback.
    w->append("e", "0", [&, raw](const status& st, uint64_t seq) {
      out.done(0)(st, seq);
      raw->append("e", "chained", out.done(n));
    });
    for (size_t i = 1; i < n; ++i)
      w->append("e", std::to_string(i), out.done(i));
  }
  // Answers in append order: sequences one after the other; the test thread's appends in their
  // order, with the chained one wherever it came in (after the first answer).
  auto got = out.all();
  REQUIRE(got.size() == n + 1);
  size_t next = 0;
  bool chained = false;
  for (size_t i = 0; i <= n; ++i) {
    CHECK(got[i].st.is_ok());
    CHECK(got[i].seq == 2 + i);
    if (got[i].index == n) {
      CHECK(i > 0);
      chained = true;
    } else {
      CHECK(got[i].index == next++);
    }
  }
  CHECK(chained);
  CHECK(*c->last_seq(5) == n + 2);
}

} // namespace shard_log_test
