// factum/storage/durability.hpp: the commit durability levels and the storage fault-injection
// seam, apart from the entity store so that the runtime's public header needs only these.
// Plain declarations; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "factum/error/status.hpp"

namespace factum {

/// How hard a commit tries to survive failures.
enum class durability {
  full,   ///< WAL + synchronous=FULL: a commit survives power loss (one fsync per commit)
  normal, ///< WAL + synchronous=NORMAL: a commit survives a process crash, not power loss
};

/// Parses "full" / "normal".
result<durability> parse_durability(std::string_view text);

/// A fault-injection seam: called before every SQLite step or exec with a running count of
/// operations on this store; a non-zero SQLite result code fails that operation with it. Also
/// called with op_index 0 and the names "sync", "sync_dir" (sync() about to fsync the entity's
/// directory: the first sync of each open) and "checkpoint_concurrently" from the threads that
/// run those (so a hook must be thread-safe).
using fault_hook = std::function<int(uint64_t op_index, std::string_view sql)>;

} // namespace factum
