// entity_files.cpp: the file steps and registry steps that the runtime's whole-file operations
// share (entity_moves.cpp: cluster mode's shard moves; entity_restore.cpp: rollback to a
// bookmark and fork): synced writes and renames, temporary files under DATA/runtime/, an entity
// released from the registry and held there, a job run on a storage thread.
//
// Threads: the file steps run on the storage thread of their caller's job; release_keys and
// the holds on the caller's thread (never a CAF worker: release_keys waits).
#include "entity_ops/entity_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace fs = std::filesystem;

namespace factum::detail {

// -- files ---------------------------------------------------------------------------------------

/// An operating-system error as a status: a full disk and a read-only file system are named.
status os_error(int e, const std::string& what) {
  errc code = e == ENOSPC || e == EDQUOT ? errc::full
              : e == EROFS               ? errc::read_only
                                         : errc::io_error;
  return {code, what + ": " + std::strerror(e)};
}

/// fsyncs a directory, so that its changed entries survive power loss.
status sync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return os_error(errno, "open " + dir.string());
  int e = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return e == 0 ? status::ok() : os_error(e, "fsync " + dir.string());
}

/// Writes `bytes` to `path`, which must not exist yet, and fsyncs it.
status write_new_synced(const fs::path& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return os_error(errno, "create " + path.string());
  int e = 0;
  for (size_t off = 0; off < bytes.size() && e == 0;) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n > 0)
      off += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR)
      e = n == 0 ? EIO : errno;
  }
  if (e == 0 && ::fsync(fd) != 0)
    e = errno;
  ::close(fd);
  return e == 0 ? status::ok() : os_error(e, "write " + path.string());
}

/// The whole content of `path`.
result<std::string> read_whole(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return os_error(errno, "open " + path.string());
  struct stat st {};
  std::string out;
  int e = ::fstat(fd, &st) == 0 ? 0 : errno;
  if (e == 0)
    out.resize(static_cast<size_t>(st.st_size));
  for (size_t off = 0; off < out.size() && e == 0;) {
    ssize_t n = ::pread(fd, out.data() + off, out.size() - off, static_cast<off_t>(off));
    if (n > 0)
      off += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR)
      e = n == 0 ? EIO : errno; // shorter than fstat said: the file is private, so a fault
  }
  ::close(fd);
  if (e != 0)
    return os_error(e, "read " + path.string());
  return out;
}

/// `path` with `suffix` appended to its last component.
fs::path with_suffix(fs::path path, const char* suffix) {
  return path += suffix;
}

/// A name for one call's temporary file: DATA/runtime/move-<what>-<time-ordered random>.db. The
/// 64 random bits keep two calls at once apart (and O_EXCL where the file is made here).
fs::path temp_path(const fs::path& data_dir, const char* what) {
  return data_dir / "runtime" /
         ("move-" + std::string(what) + "-" + time_ordered_id("", 16) + ".db");
}

/// Removes `db`'s -wal, -shm and -unsynced marker (then `db` itself, when `with_db`) where they
/// exist, and fsyncs their directory when anything went. Whether anything went.
result<bool> remove_entity_files(const fs::path& db, bool with_db) {
  bool removed = false;
  // -wal first: a database is always in place before its -wal (orphan_wal() relies on it), and
  // a -wal left beside another database file would be replayed into it.
  for (const char* suffix : {"-wal", "-shm", "-unsynced", ""}) {
    if (!*suffix && !with_db)
      break;
    auto p = with_suffix(db, suffix);
    if (::unlink(p.c_str()) == 0)
      removed = true;
    else if (errno != ENOENT)
      return os_error(errno, "remove " + p.string());
  }
  if (removed)
    if (auto st = sync_directory(db.parent_path()); !st)
      return st;
  return removed;
}

// -- the registry --------------------------------------------------------------------------------

/// UNAVAILABLE once stop() has begun (with `key_str`: BUSY while it has a live activation), else
/// ok.
status check_idle(runtime_core& c, const std::string& key_str) {
  std::lock_guard<std::mutex> g(c.reg.mu);
  if (c.reg.stopping)
    return {errc::unavailable, "the runtime is stopping"};
  if (!key_str.empty() && c.reg.map.count(key_str))
    return {errc::busy, "entity " + key_str + " has a live activation: release it first"};
  return status::ok();
}

/// Asks the live activations of `keys` to hibernate (again, for one that a new activation
/// replaced meanwhile) until none is left or `deadline` passed. How many were left then.
size_t release_keys(runtime_core& c, const std::vector<std::string>& keys,
                    std::chrono::steady_clock::time_point deadline) {
  std::unordered_map<std::string, caf::actor> asked; // key -> the activation asked last
  std::unique_lock<std::mutex> g(c.reg.mu);
  for (;;) {
    std::vector<caf::actor> ask;
    size_t live = 0;
    for (auto& k : keys) {
      auto it = c.reg.map.find(k);
      if (it == c.reg.map.end())
        continue;
      ++live;
      auto& a = asked[k];
      if (a != it->second.actor) {
        a = it->second.actor;
        ask.push_back(a);
      }
    }
    if (live == 0 || std::chrono::steady_clock::now() >= deadline)
      return live;
    if (!ask.empty()) { // sent unlocked: the registry lock is never held across a send
      g.unlock();
      for (auto& a : ask)
        caf::anon_send(a, atoms::hibernate::value);
      g.lock();
      continue;
    }
    c.reg.changed.wait_until(g, deadline); // notified whenever an activation ends
  }
}

/// The options `key`'s file opens with here (store_opts_for: VFS, durability, page size, fault
/// hook), for a move: it never creates a file, so takes no spare.
store_options move_opts(const runtime_core& c, const entity_key& key) {
  auto o = c.store_opts_for(c.cfg.types.find(key.type));
  o.spares.reset();
  o.archive_dir.clear(); // a copy or a temporary file is no entity's live file
  o.create_if_missing = false;
  return o;
}

/// Renames `from` over the entity file `to`: its directory made where missing (synced into its
/// parent), the companions of a previous file removed first (synced), the directory synced after.
status put_in_place(const fs::path& from, const fs::path& to) {
  auto dir = to.parent_path();
  std::error_code ec;
  // Each directory made on the way is synced into its parent, top-down: a restore into a data
  // directory that has no entity yet makes two levels.
  std::vector<fs::path> made;
  for (auto d = dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path())
    made.push_back(d);
  if (!made.empty()) {
    fs::create_directories(dir, ec);
    if (ec)
      return os_error(ec.value(), "create " + dir.string());
    for (auto it = made.rbegin(); it != made.rend(); ++it)
      if (auto st = sync_directory(it->parent_path()); !st)
        return st;
  }
  if (auto r = remove_entity_files(to, false); !r)
    return r.error();
  if (::rename(from.c_str(), to.c_str()) != 0)
    return os_error(errno, "rename " + from.string() + " to " + to.string());
  return sync_directory(dir);
}

/// ok, or INVALID_ARGUMENT when a part of `key` is not one a file path may be derived from.
status check_key(const entity_key& key) {
  auto k = entity_key::make(key.tenant, key.type, key.id);
  return k ? status::ok() : k.error();
}

// -- holds ---------------------------------------------------------------------------------------

bool hold_entity(runtime_core& c, const std::string& key_str) {
  std::lock_guard<std::mutex> g(c.reg.mu);
  return c.reg.held.insert(key_str).second;
}

void unhold_entity(runtime_core& c, const std::string& key_str) {
  std::lock_guard<std::mutex> g(c.reg.mu);
  c.reg.held.erase(key_str);
}

} // namespace factum::detail
