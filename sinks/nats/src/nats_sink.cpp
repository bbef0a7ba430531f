// nats_sink.cpp: the outbox's NATS JetStream sink (factum/sinks/nats_sink.hpp), the outbox's
// one translation unit that includes <nats.h> (the replicated log has its own, under
// replication/src/log). Threads: the caller (an entity's CAF worker) only queues a delivery; the
// sink's own threads publish, wait for the PubAck and call `done`; libnats runs its own
// reconnect thread behind the connection.
#include "factum/sinks/nats_sink.hpp"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <nats/nats.h>

namespace factum {

namespace {

status bad(const std::string& field, const std::string& why) {
  return {errc::invalid_argument, field + ": " + why};
}

/// A subject or stream name: printable ASCII without spaces (and, for a stream, no '.', '*',
/// '>'), 1..255 bytes.
bool valid_name(const std::string& s, bool stream) {
  if (s.empty() || s.size() > 255)
    return false;
  for (char c : s) {
    if (c <= ' ' || c > '~')
      return false;
    if (stream && (c == '.' || c == '*' || c == '>'))
      return false;
  }
  return true;
}

std::string nats_error(natsStatus s, int jerr) {
  std::string m = natsStatus_GetText(s);
  if (jerr != 0)
    m += " (JetStream error " + std::to_string(jerr) + ")";
  if (const char* last = nats_GetLastError(nullptr); last && *last)
    m += std::string(": ") + last;
  return m;
}

} // namespace

status validate_nats_sink_options(const nats_sink_options& o) {
  if (o.url.empty())
    return bad("url", "required: nats://host:port");
  if (!valid_name(o.subject, false) || o.subject.find_first_of("*>") != std::string::npos)
    return bad("subject", "required: a subject without spaces or wildcards");
  if (!o.stream.empty() && !valid_name(o.stream, true))
    return bad("stream", "a stream name without spaces, '.', '*' or '>'");
  if (o.publish_timeout.count() < 1 || o.connect_timeout.count() < 1 ||
      o.duplicate_window.count() < 1)
    return bad("publish_timeout_ms", "timeouts and the duplicate window must be at least 1 ms");
  if (o.threads < 1 || o.threads > 64)
    return bad("threads", "must be between 1 and 64");
  return {};
}

// -- the sink -----------------------------------------------------------------------------------

struct nats_sink::impl {
  struct job {
    outbox_message msg;
    std::function<void(outbox_ack)> done;
    std::chrono::steady_clock::time_point queued_at;
  };

  nats_sink_options opts;
  natsOptions* nopts = nullptr;
  natsConnection* conn = nullptr;
  jsCtx* js = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<job> queue;
  bool stopping = false;
  bool stream_ready = false; ///< the stream exists (or none is ours to make)
  std::mutex stream_mu;
  std::vector<std::thread> threads;

  ~impl() { close(); }

  void close() {
    if (js)
      jsCtx_Destroy(js);
    js = nullptr;
    if (conn)
      natsConnection_Destroy(conn);
    conn = nullptr;
    if (nopts)
      natsOptions_Destroy(nopts);
    nopts = nullptr;
  }

  status connect() {
    auto fail = [](const char* what, natsStatus s) {
      return status{errc::unavailable, std::string("nats: ") + what + ": " + nats_error(s, 0)};
    };
    natsStatus s = natsOptions_Create(&nopts);
    if (s == NATS_OK)
      s = natsOptions_SetServers(nopts, nullptr, 0);
    if (s == NATS_OK)
      s = natsOptions_SetURL(nopts, opts.url.c_str());
    if (s == NATS_OK)
      s = natsOptions_SetTimeout(nopts, opts.connect_timeout.count());
    if (s == NATS_OK)
      s = natsOptions_SetMaxReconnect(nopts, -1); // forever: the outbox waits for its sink
    if (s == NATS_OK)
      s = natsOptions_SetReconnectWait(nopts, 500);
    if (s == NATS_OK)
      s = natsOptions_SetRetryOnFailedConnect(nopts, true, nullptr, nullptr);
    if (s != NATS_OK)
      return fail("options", s);
    s = natsConnection_Connect(&conn, nopts);
    if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED)
      return fail("connect", s);
    jsOptions jo; // JetStream API requests (the stream's info and creation) wait this long
    jsOptions_Init(&jo);
    jo.Wait = opts.publish_timeout.count();
    s = natsConnection_JetStream(&js, conn, &jo);
    if (s != NATS_OK)
      return fail("JetStream context", s);
    stream_ready = opts.stream.empty();
    return {};
  }

  /// Makes the configured stream when it does not exist (once it is known to exist: nothing).
  std::optional<std::string> ensure_stream() {
    std::lock_guard<std::mutex> g(stream_mu);
    if (stream_ready)
      return std::nullopt;
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&si, js, opts.stream.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      jsStreamInfo_Destroy(si);
      stream_ready = true;
      return std::nullopt;
    }
    if (s != NATS_NOT_FOUND)
      return "stream " + opts.stream + ": " + nats_error(s, jerr);
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = opts.stream.c_str();
    const char* subjects[] = {opts.subject.c_str()};
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Duplicates = static_cast<int64_t>(opts.duplicate_window.count()) * 1'000'000; // ns
    s = js_AddStream(&si, js, &sc, nullptr, &jerr);
    if (s != NATS_OK)
      return "create stream " + opts.stream + ": " + nats_error(s, jerr);
    jsStreamInfo_Destroy(si);
    stream_ready = true;
    return std::nullopt;
  }

  outbox_ack publish(const outbox_message& m) {
    outbox_ack a;
    a.result = outbox_ack::outcome::retry;
    if (auto err = ensure_stream()) {
      a.error_code = "NATS_STREAM";
      a.error_message = *err;
      return a;
    }
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, opts.subject.c_str(), nullptr, m.body.data(),
                                  static_cast<int>(m.body.size()));
    auto entity = m.entity.to_string();
    auto seq = std::to_string(m.seq);
    if (s == NATS_OK)
      s = natsMsgHeader_Set(msg, "Factum-Entity", entity.c_str());
    if (s == NATS_OK)
      s = natsMsgHeader_Set(msg, "Factum-Seq", seq.c_str());
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = m.fact_id.c_str(); // Nats-Msg-Id: JetStream's dedupe key
    po.MaxWait = opts.publish_timeout.count();
    jsPubAck* ack = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    if (s == NATS_OK)
      s = js_PublishMsg(&ack, js, msg, &po, &jerr);
    natsMsg_Destroy(msg);
    if (s == NATS_OK) {
      jsPubAck_Destroy(ack);
      a.result = outbox_ack::outcome::acknowledged;
      return a;
    }
    a.error_code = s == NATS_TIMEOUT ? "timeout" : "NATS_" + std::to_string(static_cast<int>(s));
    a.error_message = nats_error(s, jerr);
    // A message the server will never take: too large for it, or not a valid message.
    if (s == NATS_MAX_PAYLOAD || s == NATS_INVALID_ARG)
      a.result = outbox_ack::outcome::refused;
    return a;
  }

  void run() {
    for (;;) {
      job j;
      {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return stopping || !queue.empty(); });
        if (queue.empty())
          return;
        j = std::move(queue.front());
        queue.pop_front();
      }
      // A delivery that waited for a thread longer than a publish may take is answered
      // `retry` unsent: an entity's relay waits for its delivery, and a sink that cannot keep
      // up must not hold every entity for the whole queue.
      if (std::chrono::steady_clock::now() - j.queued_at > opts.publish_timeout) {
        outbox_ack a;
        a.error_code = "timeout";
        a.error_message = "the delivery waited for a publishing thread longer than publish_timeout";
        j.done(a);
        continue;
      }
      j.done(publish(j.msg));
    }
  }

  static outbox_ack cancelled() {
    outbox_ack a;
    a.result = outbox_ack::outcome::retry;
    a.error_code = "CANCELLED";
    a.error_message = "the NATS sink stopped";
    return a;
  }

  void submit(const outbox_message& m, std::function<void(outbox_ack)> done) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!stopping && queue.size() < opts.max_queued) {
        queue.push_back(job{m, std::move(done), std::chrono::steady_clock::now()});
        cv.notify_one();
        return;
      }
    }
    auto a = cancelled();
    if (!stopping)
      a.error_code = "QUEUE_FULL";
    done(a);
  }

  void stop() {
    std::deque<job> left;
    {
      std::lock_guard<std::mutex> g(mu);
      if (stopping)
        return;
      stopping = true;
      left.swap(queue);
    }
    cv.notify_all();
    for (auto& j : left)
      j.done(cancelled());
    for (auto& t : threads)
      if (t.joinable())
        t.join();
    threads.clear();
    close();
  }
};

result<std::shared_ptr<nats_sink>> nats_sink::start(nats_sink_options opts) {
  if (auto st = validate_nats_sink_options(opts); !st)
    return st;
  auto p = std::make_shared<impl>();
  p->opts = std::move(opts);
  if (auto st = p->connect(); !st)
    return st;
  for (size_t i = 0; i < p->opts.threads; ++i)
    p->threads.emplace_back([raw = p.get()] { raw->run(); });
  return std::shared_ptr<nats_sink>(new nats_sink(std::move(p)));
}

nats_sink::~nats_sink() {
  stop();
}

outbox_fn nats_sink::deliver() {
  return [p = impl_](const outbox_message& m, std::function<void(outbox_ack)> done) {
    p->submit(m, std::move(done));
  };
}

void nats_sink::stop() {
  impl_->stop();
}

// -- reading a stream back ----------------------------------------------------------------------

result<std::vector<nats_stream_message>> read_nats_stream(const std::string& url,
                                                          const std::string& stream,
                                                          std::chrono::milliseconds timeout) {
  natsOptions* o = nullptr;
  natsConnection* c = nullptr;
  jsCtx* js = nullptr;
  jsStreamInfo* si = nullptr;
  auto cleanup = [&] {
    if (si)
      jsStreamInfo_Destroy(si);
    if (js)
      jsCtx_Destroy(js);
    if (c)
      natsConnection_Destroy(c);
    if (o)
      natsOptions_Destroy(o);
  };
  natsStatus s = natsOptions_Create(&o);
  if (s == NATS_OK)
    s = natsOptions_SetURL(o, url.c_str());
  if (s == NATS_OK)
    s = natsOptions_SetTimeout(o, timeout.count());
  if (s == NATS_OK)
    s = natsConnection_Connect(&c, o);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = timeout.count();
  if (s == NATS_OK)
    s = natsConnection_JetStream(&js, c, &jo);
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (s == NATS_OK)
    s = js_GetStreamInfo(&si, js, stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) {
    auto why = nats_error(s, jerr);
    cleanup();
    return status{s == NATS_NOT_FOUND ? errc::not_found : errc::unavailable,
                  "nats stream " + stream + ": " + why};
  }
  std::vector<nats_stream_message> out;
  for (uint64_t q = si->State.FirstSeq; q <= si->State.LastSeq && q > 0; ++q) {
    natsMsg* m = nullptr;
    s = js_GetMsg(&m, js, stream.c_str(), q, nullptr, &jerr);
    if (s == NATS_NOT_FOUND)
      continue; // deleted
    if (s != NATS_OK) {
      auto why = nats_error(s, jerr);
      cleanup();
      return status{errc::unavailable,
                    "nats stream " + stream + " message " + std::to_string(q) + ": " + why};
    }
    nats_stream_message r;
    r.stream_seq = q;
    r.subject = natsMsg_GetSubject(m);
    r.data.assign(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
    const char* v = nullptr;
    if (natsMsgHeader_Get(m, "Nats-Msg-Id", &v) == NATS_OK && v)
      r.msg_id = v;
    if (natsMsgHeader_Get(m, "Factum-Entity", &v) == NATS_OK && v)
      r.entity = v;
    if (natsMsgHeader_Get(m, "Factum-Seq", &v) == NATS_OK && v)
      r.seq = std::strtoll(v, nullptr, 10);
    natsMsg_Destroy(m);
    out.push_back(std::move(r));
  }
  cleanup();
  return out;
}

} // namespace factum
