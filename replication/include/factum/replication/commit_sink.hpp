// commit_sink.hpp: where a replicated runtime sends its entities' commits, and what it asks of
// the log before an activation serves (docs/cluster.md, "Replication"). The runtime calls it;
// log_replicator (factum/replication/log_replicator.hpp) is the implementation on NATS
// JetStream, and tests put their own. Implementations are safe to call from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::replication {

/// The last commit of an entity in the log.
struct log_tip {
  int64_t number = 0; ///< 0: the log has none
  std::string id;     ///< captured_commit::id
};

class commit_sink {
 public:
  using done_fn = std::function<void(const status&)>;

  virtual ~commit_sink() = default;

  /// `key`'s last commit in the log as of this call (number 0: none). UNAVAILABLE when the log
  /// cannot be read.
  virtual result<log_tip> last_of(const entity_key& key) = 0;

  /// Replaces `key`'s files under opts.data_dir with the entity as the log has it (nothing when
  /// the log has no commit of it). The entity must not be open. Default: UNAVAILABLE (a sink
  /// that cannot read its log back).
  virtual status rebuild(const entity_key& key, const store_options& opts) {
    (void)opts;
    return {errc::unavailable, "the log cannot rebuild entity " + key.to_string()};
  }

  /// Appends `commits` of `key` (in number order, following the log's last one; `genesis` with
  /// an entity's first commit), committed under `epoch`. Returns at once; `done` runs exactly
  /// once, on any thread: ok once the log holds every one of them, else why not (then none of
  /// them may be acknowledged). Calls for one key are appended in the order they were made, and
  /// their `done` run in that order.
  virtual void append(const entity_key& key, int64_t epoch, std::optional<replica_genesis> genesis,
                      std::vector<captured_commit> commits, done_fn done) = 0;

  /// Appends `image` of `key` (its whole file at commit image.number: the last one appended
  /// before this call) after the commits appended before it, and lets the log drop the
  /// entity's records before the image. `done` as append's, once the log holds the image or
  /// not. Default: ok at once, nothing appended (a sink that keeps every record).
  virtual void compact(const entity_key& key, int64_t epoch, replica_image image, done_fn done) {
    (void)key;
    (void)epoch;
    (void)image;
    done(status::ok());
  }
};

} // namespace factum::replication
