// shard_writer.cpp: the writer of a shard's log (factum/replication/shard_log.hpp): the epoch
// marker published on open, then pipelined appends (records, image parts), each expecting the
// sequence predicted for the one before it, and image heads, each published only once every
// earlier append of the writer was answered (stored). Threads:
// append() may be called from any thread (appends of one writer are serialised: the order they
// reach the server is the order their sequences were predicted in); each publish's answer (PubAck,
// error, or libnats' MaxWait timeout) arrives on the JetStream context's reply thread
// (log_connection::impl::on_ack), which runs the `done` callbacks that are due, in append order;
// the few that no answer will bring (an append on a broken writer, a publish that failed at once)
// run on the connection's callback thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "log/nats_log.hpp"

namespace factum::replication {

namespace detail {

struct writer_state : std::enable_shared_from_this<writer_state> {
  struct entry {
    uint64_t seq = 0; ///< the predicted sequence; 0 for an append never published
    shard_writer::done_fn done;
    bool resolved = false; ///< its answer came (or it failed before it was published)
    bool breaks = true;    ///< a failure breaks the writer (not so an invalid entity token)
    status st;
  };

  log_connection::impl* c = nullptr;
  uint32_t k = 0;
  int64_t epoch = 0;
  std::string id;
  uint64_t marker_seq = 0;
  std::string epoch_text;

  /// Serialises appends: predicting a sequence and publishing are one step.
  std::mutex publish_mu;
  uint64_t next_seq = 0; ///< the sequence the next append gets (publish_mu)

  std::mutex mu;
  std::condition_variable drained;
  std::condition_variable answered; ///< `waiting` became empty
  std::deque<entry> queue;          ///< appends whose `done` has not run, in append order
  /// The published entries of `queue` still waiting for their answer (deque elements stay where
  /// they are while others are added at the back or removed at the front).
  std::unordered_map<uint64_t, entry*> waiting;
  bool doomed = false; ///< a failure is known: no further publish (broken())
  status doom;
  bool broke = false; ///< a failure was reported in append order: every later append fails
  status broke_with;
  bool dispatching = false; ///< a thread is running `done` callbacks
  bool closed = false;      ///< the shard_writer is gone
  std::atomic<size_t> in_flight{0};

  /// Whether the first entry can be answered (mu held).
  bool ready() const { return !queue.empty() && (queue.front().resolved || broke); }

  /// An entry's answer: from the reply thread (`here`: dispatch on it) or from an append's
  /// thread (dispatch on the callback thread).
  void resolve(uint64_t seq, status st, bool here) {
    bool run = false;
    {
      std::lock_guard<std::mutex> g(mu);
      auto it = waiting.find(seq);
      if (it == waiting.end())
        return; // answered already: failed when the writer broke
      it->second->resolved = true;
      it->second->st = std::move(st);
      if (!it->second->st && !doomed) {
        doomed = true;
        doom = it->second->st;
      }
      waiting.erase(it);
      if (waiting.empty())
        answered.notify_all();
      run = !dispatching && ready();
      if (run)
        dispatching = true;
    }
    if (run && here)
      dispatch();
    else if (run)
      c->callbacks->post([self = shared_from_this()] { self->dispatch(); });
  }

  /// Posts a dispatch when the first entry can be answered and no thread is at it (mu held).
  void kick() {
    if (dispatching || !ready())
      return;
    dispatching = true;
    c->callbacks->post([self = shared_from_this()] { self->dispatch(); });
  }

  /// Runs the `done` callbacks that are due, in order, until none is (dispatching is set).
  void dispatch() {
    auto self = shared_from_this(); // an entry of the connection's list may go meanwhile
    struct due {
      shard_writer::done_fn done;
      status st;
      uint64_t seq;
    };
    std::vector<due> batch;
    for (;;) {
      batch.clear();
      bool unregister = false;
      {
        std::lock_guard<std::mutex> g(mu);
        while (ready()) {
          auto& e = queue.front();
          if (e.seq != 0 && !e.resolved && waiting.erase(e.seq) > 0 && waiting.empty())
            answered.notify_all(); // its answer, when it comes, is ignored
          status st;
          if (broke) {
            st = {broke_with.code(),
                  "the writer broke at an earlier append: " + broke_with.message()};
          } else if (!e.st) {
            st = e.st;
            if (e.breaks) {
              broke = true;
              broke_with = e.st;
              if (!doomed) {
                doomed = true;
                doom = e.st;
              }
            }
          }
          uint64_t seq = st ? e.seq : 0;
          batch.push_back({std::move(e.done), std::move(st), seq});
          queue.pop_front();
        }
        if (batch.empty()) {
          dispatching = false;
          unregister = closed && queue.empty();
        }
      }
      if (batch.empty()) {
        if (unregister) {
          std::lock_guard<std::mutex> g(c->writers_mu);
          c->writers.erase(id);
        }
        return;
      }
      bool outer = in_callback;
      in_callback = true;
      for (auto& d : batch) {
        if (d.done)
          d.done(d.st, d.seq);
        d.done = nullptr;
        in_flight.fetch_sub(1);
      }
      in_callback = outer;
      { std::lock_guard<std::mutex> g(mu); }
      drained.notify_all();
    }
  }

  uint64_t append(const std::string& entity, std::string data, shard_writer::done_fn done,
                  append_kind kind) {
    in_flight.fetch_add(1);
    std::lock_guard<std::mutex> p(publish_mu);
    uint64_t seq = 0;
    {
      std::unique_lock<std::mutex> g(mu);
      if (kind == append_kind::image_head) {
        // A head removes messages (its rollup), so it must never land after a newer writer's
        // marker. It is published alone: once every earlier append of this writer was stored
        // (or one failed, which breaks the writer), it expects the sequence after the last of
        // them, which a marker stored since has taken. An earlier append pipelined behind a
        // refused one can still land after a marker (it is reported failed and readers skip
        // it), a head cannot: nothing of this writer is in flight when it goes.
        auto limit = c->opts.ack_timeout + std::chrono::seconds(2);
        if (!answered.wait_for(g, limit, [&] { return waiting.empty() || doomed; })) {
          doomed = true;
          doom = {errc::unavailable, "shard " + std::to_string(k) +
                                       " log: earlier appends unanswered before an image head"};
        }
      }
      entry e;
      e.done = std::move(done);
      if (!valid_token(entity)) {
        e.resolved = true;
        e.breaks = false;
        e.st = {errc::invalid_argument, "entity token '" + entity + "' is not a subject token"};
      } else if (doomed) {
        e.resolved = true;
        e.st = {doom.code(), "the writer is broken: " + doom.message()};
      } else {
        seq = e.seq = next_seq++;
      }
      queue.push_back(std::move(e));
      if (seq == 0) {
        kick();
        return 0;
      }
      waiting[seq] = &queue.back();
    }
    bool part = kind == append_kind::image_part || kind == append_kind::image_first_part;
    auto subject = part ? parts_subject(c->opts, k, entity) : entity_subject(c->opts, k, entity);
    auto msg_id = id + ":" + std::to_string(seq);
    auto expected = std::to_string(seq - 1);
    natsMsg* m = nullptr;
    natsStatus s =
      natsMsg_Create(&m, subject.c_str(), nullptr, data.data(), static_cast<int>(data.size()));
    if (s == NATS_OK)
      s = natsMsgHeader_Set(m, epoch_header, epoch_text.c_str());
    if (s == NATS_OK)
      s = natsMsgHeader_Set(m, writer_header, id.c_str());
    if (s == NATS_OK)
      s = natsMsgHeader_Set(m, msg_id_header, msg_id.c_str());
    if (s == NATS_OK)
      s = natsMsgHeader_Set(m, expected_last_seq_header, expected.c_str());
    if (s == NATS_OK && (kind == append_kind::image_head || kind == append_kind::image_first_part))
      s = natsMsgHeader_Set(m, rollup_header, rollup_subject);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = c->opts.ack_timeout.count(); // the timeout comes back as an answer
    c->published_async.store(true);
    if (s == NATS_OK)
      s = js_PublishMsgAsync(c->js, &m, &po);
    natsMsg_Destroy(m); // no-op once libnats took it
    if (s != NATS_OK) {
      resolve(seq,
              {errc::unavailable, "shard " + std::to_string(k) + " log: publish of seq " +
                                    std::to_string(seq) + ": " + nats_error(s)},
              false);
      return 0;
    }
    return seq;
  }
};

namespace {

/// 16 hex digits from the system's random device.
std::string new_writer_id() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  static const char hex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    out[size_t(i)] = hex[v & 0xf];
  return out;
}

} // namespace

} // namespace detail

using namespace detail;

struct shard_writer::impl {
  std::shared_ptr<log_connection> conn; ///< kept while the writer is
  std::shared_ptr<writer_state> s;
};

void log_connection::impl::on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae,
                                  void* closure) {
  auto* c = static_cast<log_connection::impl*>(closure);
  msg_ptr owned(msg);
  const char* v = nullptr;
  if (natsMsgHeader_Get(msg, msg_id_header, &v) != NATS_OK || !v)
    return;
  std::string msg_id = v;
  auto colon = msg_id.rfind(':');
  if (colon == std::string::npos)
    return;
  auto writer = msg_id.substr(0, colon);
  uint64_t seq = std::strtoull(msg_id.c_str() + colon + 1, nullptr, 10);
  std::shared_ptr<writer_state> w;
  {
    std::lock_guard<std::mutex> g(c->writers_mu);
    auto it = c->writers.find(writer);
    if (it == c->writers.end())
      return;
    w = it->second;
  }
  auto where = "shard " + std::to_string(w->k) + " log: append at seq " + std::to_string(seq);
  status st;
  if (pa && pa->Sequence != seq)
    st = {errc::conflict, where + " was stored at seq " + std::to_string(pa->Sequence)};
  else if (!pa && pae && pae->Err == NATS_TIMEOUT)
    st = {errc::unavailable, where + ": no acknowledgement within " +
                               std::to_string(c->opts.ack_timeout.count()) + " ms"};
  else if (!pa && pae && pae->ErrCode != 0)
    st = {errc::conflict, where + " refused: " + (pae->ErrText ? pae->ErrText : "") +
                            " (JetStream error " + std::to_string(int(pae->ErrCode)) + ")"};
  else if (!pa)
    st = {errc::unavailable,
          where + ": " + (pae && pae->ErrText ? pae->ErrText : "no acknowledgement")};
  owned.reset();
  w->resolve(seq, std::move(st), true);
}

// -- the writer --

result<std::unique_ptr<shard_writer>> shard_writer::open(std::shared_ptr<log_connection> conn,
                                                         uint32_t k, int64_t epoch) {
  if (!conn)
    return status{errc::invalid_argument, "shard writer: no connection"};
  auto& c = conn->internals();
  auto where = "shard " + std::to_string(k) + " log";
  if (auto st = conn->ensure_stream(k); !st)
    return st;
  auto last = conn->last_seq(k);
  if (!last)
    return last.error();
  auto marker = conn->last_marker(k);
  if (!marker)
    return marker.error();
  if (*marker && (*marker)->epoch > epoch)
    return status{errc::conflict, where + ": its last marker (seq " +
                                    std::to_string((*marker)->seq) + ") has epoch " +
                                    std::to_string((*marker)->epoch) + ", newer than " +
                                    std::to_string(epoch)};
  auto state = std::make_shared<writer_state>();
  state->c = &c;
  state->k = k;
  state->epoch = epoch;
  state->id = new_writer_id();
  state->epoch_text = std::to_string(epoch);
  uint64_t seq = *last + 1;
  // The marker expects the last sequence read, 0 for an empty stream included: libnats sends no
  // expectation for jsPubOptions.ExpectLastSeq == 0, so the header is set here (nats-server
  // 2.9.10 enforces an expected last sequence of 0: a publish onto a non-empty stream fails).
  auto subject = epoch_subject(c.opts, k);
  auto msg_id = state->id + ":" + std::to_string(seq);
  auto expected = std::to_string(*last);
  natsMsg* m = nullptr;
  natsStatus s = natsMsg_Create(&m, subject.c_str(), nullptr, nullptr, 0);
  msg_ptr owned(m);
  if (s == NATS_OK)
    s = natsMsgHeader_Set(m, epoch_header, state->epoch_text.c_str());
  if (s == NATS_OK)
    s = natsMsgHeader_Set(m, writer_header, state->id.c_str());
  if (s == NATS_OK)
    s = natsMsgHeader_Set(m, msg_id_header, msg_id.c_str());
  if (s == NATS_OK)
    s = natsMsgHeader_Set(m, expected_last_seq_header, expected.c_str());
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = c.opts.ack_timeout.count();
  jsPubAck* pa = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (s == NATS_OK)
    s = js_PublishMsg(&pa, c.js, m, &po, &jerr);
  if (s != NATS_OK)
    return nats_status(where + ": marker expecting seq " + expected, s, int(jerr));
  uint64_t got = pa->Sequence;
  jsPubAck_Destroy(pa);
  if (got != seq)
    return status{errc::conflict, where + ": marker stored at seq " + std::to_string(got) +
                                    ", not " + std::to_string(seq)};
  state->marker_seq = seq;
  state->next_seq = seq + 1;
  {
    std::lock_guard<std::mutex> g(c.writers_mu);
    c.writers[state->id] = state;
  }
  auto p = std::make_unique<impl>();
  p->conn = std::move(conn);
  p->s = std::move(state);
  return std::unique_ptr<shard_writer>(new shard_writer(std::move(p)));
}

shard_writer::shard_writer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

shard_writer::~shard_writer() {
  auto& s = *impl_->s;
  // Every append is answered within ack_timeout (libnats times it out): wait for them, unless
  // this runs inside a callback, where the rest run after it returns.
  if (!in_callback)
    (void)drain(s.c->opts.ack_timeout + std::chrono::seconds(2));
  bool unregister = false;
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.closed = true;
    unregister = s.queue.empty() && !s.dispatching;
  }
  if (unregister) {
    std::lock_guard<std::mutex> g(s.c->writers_mu);
    s.c->writers.erase(s.id);
  }
}

uint32_t shard_writer::shard() const noexcept {
  return impl_->s->k;
}

int64_t shard_writer::epoch() const noexcept {
  return impl_->s->epoch;
}

const std::string& shard_writer::writer_id() const noexcept {
  return impl_->s->id;
}

uint64_t shard_writer::marker_seq() const noexcept {
  return impl_->s->marker_seq;
}

uint64_t shard_writer::append(const std::string& entity, std::string data, done_fn done,
                              append_kind kind) {
  return impl_->s->append(entity, std::move(data), std::move(done), kind);
}

bool shard_writer::broken() const noexcept {
  std::lock_guard<std::mutex> g(impl_->s->mu);
  return impl_->s->doomed;
}

size_t shard_writer::in_flight() const noexcept {
  return impl_->s->in_flight.load();
}

status shard_writer::drain(std::chrono::milliseconds wait) {
  auto& s = *impl_->s;
  std::unique_lock<std::mutex> g(s.mu);
  // Inside a callback the others wait for this one: no waiting there.
  if (!in_callback)
    s.drained.wait_for(g, wait, [&] { return s.in_flight.load() == 0; });
  if (auto n = s.in_flight.load(); n != 0)
    return {errc::unavailable, "shard " + std::to_string(s.k) + " log: " + std::to_string(n) +
                                 " appends still in flight after " + std::to_string(wait.count()) +
                                 " ms"};
  return {};
}

} // namespace factum::replication
