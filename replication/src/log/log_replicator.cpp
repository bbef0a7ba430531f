// log_replicator.cpp: commits to their shard's log on NATS JetStream (log_replicator.hpp). The
// appends of one entity come from its activation one call at a time; the writers' callbacks run
// on NATS threads. Any thread.
#include "factum/replication/log_replicator.hpp"

#include <atomic>

#include "factum/replication/commit_record.hpp"
#include "factum/replication/log_applier.hpp"

namespace factum::replication {

log_replicator::log_replicator(std::shared_ptr<log_connection> c,
                               std::function<uint32_t(const entity_key&)> shard_of)
    : c_(std::move(c)), shard_of_(std::move(shard_of)) {
  opener_ = std::thread([this] { run_opener(); });
}

log_replicator::~log_replicator() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (opener_.joinable())
    opener_.join();
  // The writers' callbacks reach this object: let them all run first.
  std::map<uint32_t, shard_slot> slots;
  {
    std::lock_guard<std::mutex> g(mu_);
    slots.swap(shards_);
  }
  for (auto& [k, slot] : slots)
    if (slot.writer)
      (void)slot.writer->drain(std::chrono::seconds(10));
}

result<const log_replicator::shard_slot*> log_replicator::sound_locked(uint32_t k,
                                                                       int64_t epoch) const {
  auto it = shards_.find(k);
  if (it == shards_.end() || !it->second.writer)
    return static_cast<const shard_slot*>(nullptr);
  auto& w = *it->second.writer;
  if (w.epoch() > epoch)
    return status{errc::not_owner, "shard " + std::to_string(k) + " is written under epoch " +
                                     std::to_string(w.epoch()) + " here, not " +
                                     std::to_string(epoch)};
  return w.epoch() == epoch && !w.broken() ? &it->second : nullptr;
}

status log_replicator::open_shard(uint32_t k, int64_t epoch) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto sound = sound_locked(k, epoch);
    if (!sound || *sound)
      return sound ? status::ok() : sound.error();
  }
  // Opened without the mutex: appends of other shards go on meanwhile (an open waits for the
  // log's answers: a stream to create, a marker to store).
  auto w = shard_writer::open(c_, k, epoch);
  if (!w)
    return w.error();
  // A writer replaced or refused here is destroyed after the mutex is released: its destructor
  // waits for its callbacks, which take the mutex.
  std::shared_ptr<shard_writer> old;
  std::lock_guard<std::mutex> g(mu_);
  auto& slot = shards_[k];
  if (slot.writer && slot.writer->epoch() > epoch) {
    old = std::move(*w);
    return {errc::not_owner, "shard " + std::to_string(k) + " was opened under a newer epoch"};
  }
  old = std::exchange(slot.writer, std::move(*w));
  slot.generation = ++generations_;
  return status::ok();
}

void log_replicator::close_shard(uint32_t k) {
  std::shared_ptr<shard_writer> old; // destroyed after the mutex is released (open_shard)
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = shards_.find(k); it != shards_.end()) {
    old = std::move(it->second.writer);
    shards_.erase(it);
  }
  to_open_.erase(k);
}

void log_replicator::run_opener() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || !to_open_.empty(); });
    if (stop_)
      return;
    auto [k, epoch] = *to_open_.begin();
    to_open_.erase(to_open_.begin());
    g.unlock();
    (void)open_shard(k, epoch); // a failure: the next append asks again
    g.lock();
  }
}

result<std::pair<std::shared_ptr<shard_writer>, uint64_t>>
log_replicator::writer_for(uint32_t k, int64_t epoch) {
  std::lock_guard<std::mutex> g(mu_);
  auto sound = sound_locked(k, epoch);
  if (!sound)
    return sound.error();
  if (*sound)
    return std::make_pair((*sound)->writer, (*sound)->generation);
  // No sound writer: one is opened in the background (never on the caller's thread, an
  // entity's actor), and this append fails meanwhile.
  auto& want = to_open_[k];
  want = std::max(want, epoch);
  cv_.notify_all();
  return status{errc::unavailable, "the log of shard " + std::to_string(k) +
                                     " has no writer open here now (opening one)"};
}

result<log_tip> log_replicator::last_of(const entity_key& key) {
  {
    std::lock_guard<std::mutex> g(mu_);
    tracks_.erase(key.to_string()); // a new activation: what the log holds decides from here
  }
  auto m = c_->last_of_entity(shard_of_(key), entity_token(key));
  if (!m)
    return m.error();
  if (!m->has_value())
    return log_tip{};
  auto r = decode((*m)->data);
  if (!r)
    return r.error();
  return log_tip{r->commit.number, r->commit.id};
}

void log_replicator::append(const entity_key& key, int64_t epoch,
                            std::optional<replica_genesis> genesis,
                            std::vector<captured_commit> commits, done_fn done) {
  auto k = shard_of_(key);
  auto w = writer_for(k, epoch);
  if (!w) {
    done(status{w.error().code() == errc::not_owner ? errc::not_owner : errc::unavailable,
                "the log of shard " + std::to_string(k) + ": " + w.error().message()});
    return;
  }
  auto& [writer, generation] = *w;
  if (commits.empty()) {
    done(status::ok());
    return;
  }
  auto name = key.to_string();
  if (auto st = admit(name, generation, static_cast<int>(commits.size())); !st) {
    done(st);
    return;
  }
  struct pending {
    std::atomic<size_t> left;
    status first_error;
    std::mutex mu;
    done_fn done;
  };
  auto p = std::make_shared<pending>();
  p->left = commits.size();
  p->done = std::move(done);
  auto token = entity_token(key);
  for (auto& c : commits) {
    commit_record r{key, epoch, std::move(c), std::exchange(genesis, std::nullopt), std::nullopt};
    writer->append(
      token, encode(r),
      [this, p, name, t0 = std::chrono::steady_clock::now()](const status& st, uint64_t) {
        if (observer_)
          observer_(std::chrono::steady_clock::now() - t0, st.is_ok());
        answered(name, st);
        if (!st) {
          std::lock_guard<std::mutex> g(p->mu);
          if (p->first_error) // the first error is the one to report
            p->first_error = st;
        }
        if (p->left.fetch_sub(1) == 1) {
          std::lock_guard<std::mutex> g(p->mu);
          p->done(p->first_error);
        }
      });
  }
}

status log_replicator::admit(const std::string& name, uint64_t generation, int appends) {
  std::lock_guard<std::mutex> g(mu_);
  auto& t = tracks_[name];
  if (t.failed || (t.in_flight > 0 && t.generation != generation))
    return {errc::unavailable, "entity " + name + " has commits that the log did not take"};
  if (tracks_.size() > 100'000) // forget entities with nothing in flight and nothing failed
    for (auto i = tracks_.begin(); i != tracks_.end();)
      i = i->second.in_flight > 0 || i->second.failed || i->first == name ? std::next(i)
                                                                          : tracks_.erase(i);
  t.generation = generation;
  t.in_flight += appends;
  return status::ok();
}

void log_replicator::answered(const std::string& name, const status& st) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = tracks_.find(name); it != tracks_.end()) {
    --it->second.in_flight;
    it->second.failed = it->second.failed || !st;
  }
}

void log_replicator::compact(const entity_key& key, int64_t epoch, replica_image image,
                             done_fn done) {
  auto k = shard_of_(key);
  auto w = writer_for(k, epoch);
  if (!w) {
    done(w.error());
    return;
  }
  auto& [writer, generation] = *w;
  auto name = key.to_string();
  if (auto st = admit(name, generation, 1); !st) {
    done(st);
    return;
  }
  auto token = entity_token(key);
  image_ref ref{image.bytes.size(), image_digest(image.bytes), {}};
  for (size_t off = 0, i = 0; off < image.bytes.size(); off += part_bytes_, ++i) {
    image_part part{image.number, static_cast<uint32_t>(i),
                    image.bytes.substr(off, std::min(part_bytes_, image.bytes.size() - off))};
    // A part's own answer tells nothing the head's does not: a writer that failed a part fails
    // every later append, the head included.
    // The first part rolls up the parts subject: the parts of the entity's earlier images go
    // (a copy that read an earlier head then awaits this one, which follows).
    ref.parts.push_back(writer->append(
      token, encode(part), [](const status&, uint64_t) {},
      i == 0 ? append_kind::image_first_part : append_kind::image_part));
  }
  commit_record head{key, epoch, captured_commit{image.number, {}, image.id}, std::nullopt,
                     std::move(ref)};
  auto bytes = image.bytes.size();
  writer->append(
    token, encode(head),
    [this, name, bytes, done = std::move(done)](const status& st, uint64_t) {
      answered(name, st);
      if (st) {
        images_.fetch_add(1);
        image_bytes_.fetch_add(bytes);
      }
      done(st);
    },
    append_kind::image_head);
}

status log_replicator::rebuild(const entity_key& key, const store_options& opts) {
  return rebuild_entity(*c_, shard_of_(key), key, opts);
}

} // namespace factum::replication
