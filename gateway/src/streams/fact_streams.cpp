// http/fact_streams.cpp: live fact streams (fact_streams.hpp). A stream reads its entity's facts
// a page at a time through the runtime's @facts read, whose answer the entity's output gate lets
// out only once every fact in it is durable: a stream never sends a fact that a crash could take
// back. It catches up page by page, each page once the transport has written the previous one;
// then each notice of new durable facts (the hub, from the runtime's commits) reads what came
// after the last seq it queued. A client that does not read lets those live events pile up:
// past the queue's bound the stream drops them and ends with an `overflow` event naming the last
// seq it handed out, from which the client resumes. Threads: the transport's strand, CAF workers
// (replies, notices); each stream's state is under its mutex, released around runtime calls and
// the transport's wake.
#include "streams/fact_streams.hpp"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/fact_ids.hpp"
#include "gateway.hpp"

namespace factum::http {

using nlohmann::json;

namespace {

/// One Server-Sent Event: its id, its event name (empty: the default "message") and its data
/// (one line: JSON is written without newlines).
std::string sse_event(std::string_view id, std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(data.size() + event.size() + id.size() + 24);
  if (!id.empty())
    out.append("id: ").append(id).push_back('\n');
  if (!event.empty())
    out.append("event: ").append(event).push_back('\n');
  out.append("data: ").append(data).append("\n\n");
  return out;
}

} // namespace

// -- fact_stream --

fact_stream::fact_stream(gateway& gw, entity_key key, int64_t after_seq,
                         std::optional<std::string> resume_prefix, size_t max_queue_bytes,
                         std::string trace_id)
    : gw_(gw), key_(std::move(key)), key_str_(key_.to_string()), max_queue_bytes_(max_queue_bytes),
      trace_id_(std::move(trace_id)), resume_prefix_(std::move(resume_prefix)), after_(after_seq),
      sent_(after_seq) {}

std::string fact_stream::event_id(int64_t seq, std::string_view fact_id,
                                  std::string_view first_prefix) {
  auto id = std::to_string(seq);
  if (fact_id.size() == fact_id_prefix_size + 12 && fact_id.substr(0, 4) == "fct_" &&
      !first_prefix.empty() && fact_id.substr(0, fact_id_prefix_size) != first_prefix)
    id.append(".").append(fact_id.substr(4, fact_id_prefix_size - 4));
  return id;
}

call_options fact_stream::read_options() const {
  call_options opts;
  opts.timeout = gw_.config().call_timeout;
  opts.trace_id = trace_id_;
  return opts;
}

fact_stream::~fact_stream() {
  end();
}

void fact_stream::start(std::function<void(call_reply)> first) {
  int64_t after = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    first_ = std::move(first);
    fetching_ = true;
    after = after_;
  }
  // Where the client stands in the entity's history, and its first fact-id prefix (the events'
  // ids), before the first page.
  json args = {{"seq", after}, {"prefix", resume_prefix_.value_or("")}};
  gw_.rt().call(key_, "@history", args.dump(), read_options(),
                [self = shared_from_this()](call_reply r) { self->on_history(r); });
}

void fact_stream::on_history(const call_reply& r) {
  std::function<void(call_reply)> first;
  {
    std::lock_guard<std::mutex> g(mu_);
    fetching_ = false;
    if (ended_)
      return;
    auto h = r.ok ? json::parse(r.body, nullptr, false) : json();
    if (!h.is_object()) {
      started_ = true;
      ended_ = true; // the request answers the failure; nothing was sent
      first = std::move(first_);
      first_ = nullptr;
    } else {
      first_prefix_ = h.value("first_prefix", std::string());
      auto shared = h.value("shared_until", after_);
      if (resume_prefix_ && shared < after_) // it received facts a rollback took away
        history_event_locked(shared);
    }
  }
  if (first) {
    first(r.ok ? problems::unavailable.reply("the entity's history could not be read") : r);
    return;
  }
  fetch(false);
}

void fact_stream::history_event_locked(int64_t kept) {
  json d = {{"code", "HISTORY_CHANGED"},
            {"last_seq_kept", kept},
            {"detail", "the entity was rolled back: the facts after last_seq_kept that this "
                       "client received are no longer its history; the facts from there follow"}};
  auto bytes = sse_event({}, "history", d.dump());
  queued_bytes_ += bytes.size();
  queue_.push_back(std::move(bytes));
  after_ = sent_ = kept;
}

void fact_stream::rewound(int64_t kept_seq) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (ended_ || last_ || !started_)
      return;
    ++gen_; // a page read before this is not used
    known_ = kept_seq;
    // Events not yet handed out go (those of facts kept are read again); a client that got a
    // fact rolled away is told.
    queue_.clear();
    queued_bytes_ = 0;
    if (sent_ > kept_seq)
      history_event_locked(kept_seq);
    else
      after_ = sent_;
    paced_ = false;
  }
  fetch(true);
}

void fact_stream::attach(std::function<void()> wake) {
  std::lock_guard<std::mutex> g(mu_);
  wake_ = std::move(wake);
}

void fact_stream::notify(int64_t seq) {
  {
    std::lock_guard<std::mutex> g(mu_);
    known_ = std::max(known_, seq);
    if (seq <= after_ || !started_)
      return; // queued already, or the first read (which follows the registration) has it
  }
  fetch(true);
}

void fact_stream::fetch(bool live) {
  int64_t after = 0;
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (ended_ || last_)
      return;
    if (fetching_) {
      again_ = again_ || live;
      return;
    }
    fetching_ = true;
    again_ = false;
    after = after_;
    gen = gen_;
  }
  json args = {{"after_seq", after}, {"limit", page_limit}};
  gw_.rt().call(
    key_, "@facts", args.dump(), read_options(),
    [self = shared_from_this(), live, gen](call_reply r) { self->on_page(r, live, gen); });
}

void fact_stream::on_page(const call_reply& r, bool live, uint64_t gen) {
  std::function<void(call_reply)> first;
  std::function<void()> wake;
  bool next_page = false, read_again = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    fetching_ = false;
    bool stale = started_ && gen != gen_; // read before a rollback: its facts may be gone
    if (!started_) {
      started_ = true;
      first = std::move(first_);
      first_ = nullptr;
    }
    if (ended_)
      return;
    if (stale) {
      read_again = true;
      wake = wake_; // the rollback's event
    } else if (!r.ok) {
      if (first) {
        ended_ = true; // the request answers the failure; nothing was sent
      } else {
        fail_locked(r);
        wake = wake_;
      }
    } else {
      auto page = json::parse(r.body, nullptr, false);
      auto before = after_;
      if (page.is_array())
        for (auto& f : page) {
          auto seq = f.value("seq", int64_t{0});
          if (seq <= after_)
            continue; // read twice (a notice and a page crossed): sent once
          auto bytes = sse_event(event_id(seq, f.value("fact_id", std::string()), first_prefix_),
                                 {}, f.dump());
          queued_bytes_ += bytes.size();
          queue_.push_back(std::move(bytes));
          after_ = seq;
        }
      if (live && queued_bytes_ > max_queue_bytes_) {
        overflow_locked();
      } else {
        // A full page: more is stored. The next page waits until the transport has written
        // this one down to half the bound (a catch-up never outgrows the queue).
        if (!r.cursor.empty()) {
          paced_ = queued_bytes_ >= max_queue_bytes_ / 2;
          next_page = !paced_;
        }
        // A notice came while the read was out, or one told of facts past this page's
        // (only when the page made progress: a notice never makes a stream spin).
        read_again = again_ || (known_ > after_ && after_ > before);
      }
      wake = wake_;
    }
  }
  if (first)
    first(r);
  if (wake)
    wake();
  if (next_page)
    fetch(false);
  else if (read_again)
    fetch(true);
}

void fact_stream::overflow_locked() {
  queue_.clear();
  queued_bytes_ = 0;
  after_ = sent_; // the dropped events were never handed out
  last_ = true;
  reason_ = end_reason::overflow;
  gw_.metrics().stream_closed(reason_); // now: its client may not read the event for a while
  json d = {{"code", "SLOW_READER"},
            {"last_seq", sent_},
            {"detail", "the client did not read its events fast enough; resume after last_seq"}};
  queue_.push_back(sse_event({}, "overflow", d.dump()));
  queued_bytes_ = queue_.back().size();
}

void fact_stream::fail_locked(const call_reply& r) {
  last_ = true;
  reason_ = end_reason::failed;
  gw_.metrics().stream_closed(reason_);
  auto problem = json::parse(r.body, nullptr, false);
  json d = {{"code", r.code},
            {"last_seq", after_},
            {"detail", problem.is_object() ? problem.value("detail", std::string()) : r.body}};
  auto bytes = sse_event({}, "failed", d.dump());
  queued_bytes_ += bytes.size();
  queue_.push_back(std::move(bytes));
}

fact_stream::chunk fact_stream::take() {
  chunk c;
  std::lock_guard<std::mutex> g(mu_);
  c.bytes.reserve(queued_bytes_);
  for (auto& e : queue_) {
    c.facts += e.rfind("id: ", 0) == 0;
    c.bytes += e;
  }
  queue_.clear();
  queued_bytes_ = 0;
  sent_ = after_;
  c.last = last_;
  return c;
}

void fact_stream::written() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!paced_ || fetching_ || queued_bytes_ >= max_queue_bytes_ / 2)
      return;
    paced_ = false;
  }
  fetch(false);
}

void fact_stream::end() {
  fact_streams* reg = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    ended_ = true;
    wake_ = nullptr;
    reg = std::exchange(registry_, nullptr);
  }
  if (reg)
    reg->remove(this);
}

int64_t fact_stream::last_sent() const {
  std::lock_guard<std::mutex> g(mu_);
  return sent_;
}

fact_stream::end_reason fact_stream::reason() const {
  std::lock_guard<std::mutex> g(mu_);
  return reason_;
}

// -- fact_streams --

fact_streams::refusal fact_streams::add(const std::shared_ptr<fact_stream>& s) {
  std::lock_guard<std::mutex> g(mu_);
  auto& mine = by_entity_[s->key_str_];
  if (auto why = caps_.admit(mine.size(), s->key_.tenant); why != refusal::none) {
    if (mine.empty())
      by_entity_.erase(s->key_str_);
    return why;
  }
  mine.emplace(s.get(), s);
  open_.fetch_add(1);
  if (gauge_)
    gauge_->add(1);
  std::lock_guard<std::mutex> sg(s->mu_);
  s->registry_ = this;
  return refusal::none;
}

void fact_streams::remove(fact_stream* s) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_entity_.find(s->key_str_);
  if (it == by_entity_.end() || it->second.erase(s) == 0)
    return;
  if (it->second.empty())
    by_entity_.erase(it);
  caps_.release(s->key_.tenant);
  open_.fetch_sub(1);
  if (gauge_)
    gauge_->add(-1);
}

std::vector<std::shared_ptr<fact_stream>> fact_streams::of(const entity_key& key) {
  std::vector<std::shared_ptr<fact_stream>> out;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_entity_.find(key.to_string());
  if (it != by_entity_.end())
    for (auto& [_, w] : it->second)
      if (auto s = w.lock())
        out.push_back(std::move(s));
  return out;
}

void fact_streams::notify(const entity_key& key, int64_t seq) {
  for (auto& s : of(key))
    s->notify(seq);
}

void fact_streams::rewound(const entity_key& key, int64_t kept_seq) {
  for (auto& s : of(key))
    s->rewound(kept_seq);
}

} // namespace factum::http
