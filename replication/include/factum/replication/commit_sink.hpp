// commit_sink.hpp: where a replicated runtime sends its entities' commits, and what it asks of
// the log before an activation serves (docs/cluster.md, "Replication"). The runtime calls it;
// log_replicator (factum/replication/log_replicator.hpp) is the implementation on NATS
// JetStream, and tests put their own. Implementations are safe to call from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::replication {

class commit_sink {
 public:
  using done_fn = std::function<void(const status&)>;

  virtual ~commit_sink() = default;

  /// The number of `key`'s last commit in the log (0: none), as of this call. UNAVAILABLE when
  /// the log cannot be read.
  virtual result<int64_t> last_number(const entity_key& key) = 0;

  /// Appends `commits` of `key` (in number order, following the log's last one; `genesis` with
  /// an entity's first commit), committed under `epoch`. Returns at once; `done` runs exactly
  /// once, on any thread: ok once the log holds every one of them, else why not (then none of
  /// them may be acknowledged). Calls for one key are appended in the order they were made.
  virtual void append(const entity_key& key, int64_t epoch, std::optional<replica_genesis> genesis,
                      std::vector<captured_commit> commits, done_fn done) = 0;
};

} // namespace factum::replication
