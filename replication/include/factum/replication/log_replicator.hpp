// log_replicator.hpp: the commit sink of a replicated runtime on NATS JetStream
// (commit_sink.hpp, shard_log.hpp): each entity's commits go, as commit records, to its shard's
// log through the shard's one writer on this node; the log's last record of an entity tells an
// activation whether its file is current; a file that is not is rebuilt from the log; an image
// of an entity's file lets the log drop the entity's records before it (compact()). The
// cluster node opens a shard's writer when it acquires the shard (fencing the previous owner)
// and closes it when the shard leaves. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "factum/replication/commit_sink.hpp"
#include "factum/replication/shard_log.hpp"

namespace factum::replication {

class log_replicator final : public commit_sink {
 public:
  /// `shard_of` maps an entity to its shard (the cluster's; a node alone may map all to 0).
  log_replicator(std::shared_ptr<log_connection> c,
                 std::function<uint32_t(const entity_key&)> shard_of);
  ~log_replicator() override;

  /// Opens shard k's writer under `epoch` unless one is open and sound under it: its marker
  /// fences every writer of an older epoch. CONFLICT when the log holds a newer epoch's marker.
  /// Blocks on the log (the caller's thread: the cluster's replica thread); an append that
  /// finds no sound writer fails at once and has one opened in the background.
  status open_shard(uint32_t k, int64_t epoch);
  /// Forgets shard k's writer (the shard left this node); appends to it fail from now on.
  void close_shard(uint32_t k);

  result<log_tip> last_of(const entity_key& key) override;
  void append(const entity_key& key, int64_t epoch, std::optional<replica_genesis> genesis,
              std::vector<captured_commit> commits, done_fn done) override;
  status rebuild(const entity_key& key, const store_options& opts) override;
  /// The image goes as parts of at most image_part_bytes on the entity's parts subject (the
  /// first rolls it up: the parts of the entity's earlier images go), then its head (rolling up
  /// the entity's subject: its records before it go).
  void compact(const entity_key& key, int64_t epoch, replica_image image, done_fn done) override;

  /// The largest image part (NATS refuses a message over its max_payload, 1 MiB by default).
  void set_image_part_bytes(size_t n) { part_bytes_ = n; }
  /// Images appended (their heads stored) and their bytes, since the start.
  uint64_t images_appended() const noexcept { return images_.load(); }
  uint64_t image_bytes_appended() const noexcept { return image_bytes_.load(); }

  log_connection& connection() noexcept { return *c_; }

  /// Called once per appended commit, on a NATS thread, with the time from its append to the
  /// log's answer and whether the log took it (metrics). Set before the first append.
  using observer_fn = std::function<void(std::chrono::nanoseconds, bool)>;
  void observe(observer_fn fn) { observer_ = std::move(fn); }

 private:
  struct shard_slot {
    std::shared_ptr<shard_writer> writer;
    uint64_t generation = 0; ///< of `writer`: a new one for every writer opened
  };

  /// The writer for `k` under `epoch`: the open one; else UNAVAILABLE, and one is opened in the
  /// background (run_opener).
  result<std::pair<std::shared_ptr<shard_writer>, uint64_t>> writer_for(uint32_t k, int64_t epoch);
  void run_opener();
  /// Counts `appends` of entity `name` in flight on the writer of `generation`; UNAVAILABLE
  /// when the entity must not append (entity_track below).
  status admit(const std::string& name, uint64_t generation, int appends);
  /// One of them was answered `st`.
  void answered(const std::string& name, const status& st);
  /// Under mu_: shard k's slot when its writer takes appends under `epoch`, null when there is
  /// none (or it is broken, or of an older epoch), NOT_OWNER when it is of a newer epoch.
  result<const shard_slot*> sound_locked(uint32_t k, int64_t epoch) const;

  std::shared_ptr<log_connection> c_;
  observer_fn observer_;
  std::condition_variable cv_;          ///< wakes the opener
  std::map<uint32_t, int64_t> to_open_; ///< under mu_: shards to open a writer for, and epoch
  size_t part_bytes_ = 512 * 1024;
  std::atomic<uint64_t> images_{0}, image_bytes_{0};
  bool stop_ = false;  ///< under mu_
  std::thread opener_; ///< opens writers, never an entity's actor
  std::function<uint32_t(const entity_key&)> shard_of_;
  std::mutex mu_;
  std::map<uint32_t, shard_slot> shards_;
  uint64_t generations_ = 0;
  /// Each entity's appends: to which writer the last went, how many are unanswered, and whether
  /// one failed. An entity with a failed commit, or with commits in flight on a writer that
  /// broke, must not append to a later writer (its records would have a gap): it is refused
  /// until its next activation reads the log again (last_of() forgets it).
  struct entity_track {
    uint64_t generation = 0;
    int in_flight = 0;
    bool failed = false;
  };
  std::unordered_map<std::string, entity_track> tracks_;
};

} // namespace factum::replication
