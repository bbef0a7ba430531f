// entity_files.hpp (private to runtime/): the steps that the runtime's whole-file operations
// on entities share (entity_files.cpp): cluster mode's shard moves (entity_moves.cpp) and a
// rollback to a bookmark or a fork (entity_restore.cpp). Threads: as each says.
#pragma once

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime_core.hpp"

namespace factum::detail {

// -- files --

/// An operating-system error as a status: a full disk and a read-only file system are named.
status os_error(int e, const std::string& what);
/// fsyncs a directory, so that its changed entries survive power loss.
status sync_directory(const std::filesystem::path& dir);
/// Writes `bytes` to `path`, which must not exist yet, and fsyncs it.
status write_new_synced(const std::filesystem::path& path, std::string_view bytes);
/// The whole file at `path`.
result<std::string> read_whole(const std::filesystem::path& path);
/// `path` with `suffix` appended to its last component.
std::filesystem::path with_suffix(std::filesystem::path path, const char* suffix);
/// A name for one call's temporary file: DATA/runtime/move-<what>-<time-ordered random>.db
/// (removed at start: remove_move_temporaries).
std::filesystem::path temp_path(const std::filesystem::path& data_dir, const char* what);

/// Removes a temporary database and what SQLite may have made beside it, at scope exit.
struct temp_files {
  std::filesystem::path db;
  ~temp_files() {
    std::error_code ec;
    for (const char* suffix : {"-wal", "-shm", ""})
      std::filesystem::remove(with_suffix(db, suffix), ec);
  }
};

/// Removes `db`'s -wal, -shm and -unsynced marker (then `db` itself, when `with_db`) where they
/// exist, and fsyncs their directory when anything went. Whether anything went.
result<bool> remove_entity_files(const std::filesystem::path& db, bool with_db);
/// Renames `from` over the entity file `to`: its directory made where missing (synced into its
/// parent), the companions of a previous file removed first (synced), the directory synced after.
status put_in_place(const std::filesystem::path& from, const std::filesystem::path& to);
/// The options `key`'s file opens with here (store_opts_for) for a whole-file operation: it
/// never creates a file (no spare) and never ships to the archive.
store_options move_opts(const runtime_core& c, const entity_key& key);
/// ok, or INVALID_ARGUMENT when a part of `key` is not one a file path may be derived from.
status check_key(const entity_key& key);

// -- the registry --

/// UNAVAILABLE once stop() has begun (with `key_str`: BUSY while it has a live activation), else
/// ok.
status check_idle(runtime_core& c, const std::string& key_str = {});
/// Asks the live activations of `keys` to hibernate (again, for one that a new activation
/// replaced meanwhile) until none is left or `deadline` passed. How many were left then.
size_t release_keys(runtime_core& c, const std::vector<std::string>& keys,
                    std::chrono::steady_clock::time_point deadline);
/// Holds `key_str`: no activation of it starts (calls answer 503 ENTITY_RESTORING) until
/// unhold_entity. False when it was held already.
bool hold_entity(runtime_core& c, const std::string& key_str);
void unhold_entity(runtime_core& c, const std::string& key_str);

/// A hold taken by hold_entity, released when it goes out of scope.
class entity_hold {
 public:
  entity_hold(runtime_core& c, std::string key_str) : c_(c), key_(std::move(key_str)) {}
  ~entity_hold() { unhold_entity(c_, key_); }
  entity_hold(const entity_hold&) = delete;
  entity_hold& operator=(const entity_hold&) = delete;

 private:
  runtime_core& c_;
  std::string key_;
};

/// Runs `fn` on a storage thread and answers what it answered (or rethrows what it threw).
template <class T, class F> T on_storage_thread(runtime_core& c, F&& fn) {
  // Shared: the storage thread may still be inside set_value() when this returns.
  auto p = std::make_shared<std::promise<T>>();
  auto f = p->get_future();
  c.pool.post([p, &fn] {
    try {
      p->set_value(fn());
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  return f.get();
}

} // namespace factum::detail
