// write_log.hpp: a log of every change a process makes to a directory tree, in the order the
// changes happened, with the syncs that made them durable (tests only). The process that links
// write_log.cpp has its own open, write, pwrite, ftruncate, fsync, fdatasync, rename, unlink,
// mkdir, ... ahead of libc's in symbol lookup, so that SQLite's and libstdc++'s calls reach them
// too; each passes the call on to libc and, once start() ran, appends to the log what the call
// changed (one mutex: the log's order is the order in which the calls changed the files).
// replay.hpp rebuilds from such a log the tree a power cut at the end of the log could leave.
// start() is for a forked child that is about to run the code under test; any thread after it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace factum::powerloss {

/// What a log record says happened. Every record names a file by its inode number as the
/// process saw it; `seq` is the record's position in the log (0-based).
enum class op : uint8_t {
  write = 1,      ///< `len` bytes at `offset` of inode `ino` (the bytes follow the record)
  zeros = 2,      ///< like write, for bytes that were all zero (no bytes follow)
  truncate = 3,   ///< the inode's size set to `offset`
  sync_begin = 4, ///< fsync or fdatasync of `ino` (file or directory) called
  sync_end = 5,   ///< that call returned success; `offset` is the seq of its sync_begin
  add_name = 6,   ///< `path` now names `ino` (open with O_CREAT that created it, mkdir, link,
                  ///< or the new name of a rename); `dir` is the parent directory's inode;
                  ///< `len` is 1 for a directory. `offset` is 1 when the inode is new.
  drop_name = 7,  ///< `path` (in directory `dir`) no longer names anything (unlink, rmdir, or
                  ///< the old name of a rename)
};

/// One record as stored: this header, then `path_len` bytes of path, then `data_len` bytes.
struct record_header {
  uint32_t magic = 0x464c4f47; // "FLOG"
  uint8_t kind = 0;            // op
  uint8_t pad[3] = {};
  uint64_t ino = 0;
  uint64_t dir = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  uint32_t path_len = 0;
  uint32_t data_len = 0;
};

/// Starts recording every change under `root` (absolute) to a new file `log`, and every sync.
/// Aborts the process if the log cannot be created. Call once, in a child, before any thread of
/// the code under test starts. With a `control` descriptor (a socket), a thread waits for a byte
/// on it, then takes the log's lock for good, so that no call changes a file any more, and
/// answers with a byte: the moment of the power cut. Every change made before it is in the
/// log whole (a change and its record are made under that lock), none after it happens; a
/// sync that had begun and not yet recorded its end counts as not done (its caller never
/// learns that it returned). The parent then kills the process.
void start(const std::filesystem::path& log, const std::filesystem::path& root, int control = -1);

/// The parent's side: asks the child behind `control` to stop changing files and waits until
/// it has (false if the child is gone).
bool freeze(int control);

} // namespace factum::powerloss
