// replay.hpp: the directory tree a power cut could leave (tests only), rebuilt from the tree as
// it was when recording began (a snapshot) and the write log (write_log.hpp) of what a process
// changed in it until it died. Plain functions, one thread.
//
// The model is strict POSIX, the one SQLite is written against: a change to a file's bytes or
// size is on disk once an fsync or fdatasync *of that file* that began after the change has
// returned; a new, removed or renamed name is on disk once such a sync *of the directory that
// holds it* has returned (a rename is its new name and the removal of its old one, each in its
// own directory). Every other change is lost: the harshest state a power cut can leave, and a
// legal one (an ext4 without a journal, as on this machine, may lose any of them). After a
// failed sync of a file, Linux's rule (op::write_error): a change of its bytes that no sync
// had made durable by the writeback error is lost for good, even if a later sync of the file
// returns 0; only what is written again after the error can be made durable. (Names in a
// directory whose fsync failed are only not synced by it: a file system's metadata after an
// error is its own.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "write_log.hpp"

namespace factum::powerloss {

/// A tree's files, directories and bytes, by path relative to its root.
struct snapshot {
  struct entry {
    uint64_t ino = 0;
    bool dir = false;
  };
  std::map<std::string, entry> names;      ///< relative path -> inode
  std::map<uint64_t, std::string> content; ///< inode -> bytes (files only)
};

/// Reads every file and directory under `root` (symlinks and other kinds are refused).
snapshot take_snapshot(const std::filesystem::path& root);

/// What a rebuild kept and dropped (for the test's messages and checks).
struct replay_stats {
  uint64_t records = 0;
  uint64_t kept_writes = 0, lost_writes = 0; ///< writes, zero runs and truncations
  uint64_t kept_names = 0, lost_names = 0;   ///< names added or dropped
  uint64_t torn_pieces = 0;                  ///< unsynced 512-byte pieces kept (torn_seed)
  uint64_t lost_to_errors = 0; ///< changes a later sync covered that a writeback error lost
  uint64_t failed_syncs = 0;   ///< syncs that returned an error (op::sync_failed)
  uint64_t write_errors = 0;   ///< writeback errors (op::write_error)
  uint64_t injected = 0;       ///< calls the fault plan failed (op::injected)
  bool torn_tail = false;      ///< the log ends inside a record (cut by the kill)
};

/// Writes to `out` (which must not exist) the tree a power cut at the end of `log` could leave
/// of the tree that was `base` under `root` when recording began. Throws std::runtime_error on
/// a log it cannot read. With `everything`, every change counts as synced: the tree the process
/// left in the page cache (the log's own check: it must equal the live tree). With a non-zero
/// `torn_seed`, changes no sync covered are not all lost but each kept or lost at random (seeded):
/// a write in pieces of 512 bytes, each piece on its own (torn writes, and later bytes on disk
/// before earlier ones), a truncation or a name as a whole: what a disk that reorders and tears
/// writes between syncs may leave.
replay_stats rebuild(const snapshot& base, const std::filesystem::path& root,
                     const std::filesystem::path& log, const std::filesystem::path& out,
                     bool everything = false, uint32_t torn_seed = 0);

/// A record of a log that names a path: a name added or dropped, or a call the fault plan
/// failed (write_log.hpp).
struct logged_name {
  op kind;
  std::string path;
};

/// The records of `log` that name a path, in the log's order (for a test's checks).
std::vector<logged_name> logged_names(const std::filesystem::path& log);

} // namespace factum::powerloss
