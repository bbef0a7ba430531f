// write_log.hpp: a log of every change a process makes to a directory tree, in the order the
// changes happened, with the syncs that made them durable (tests only). The process that links
// write_log.cpp has its own open, write, pwrite, sendfile, copy_file_range, ftruncate, fsync,
// fdatasync, rename, unlink, mkdir, ... ahead of libc's in symbol lookup, so that SQLite's and
// libstdc++'s calls reach them too; each passes the call on to libc and, once start() ran, appends
// to the log what the call changed (one mutex: the log's order is the order in which the calls
// changed the files). replay.hpp rebuilds from such a log the tree a power cut at the end of the
// log could leave. A fault plan (set_faults()) makes chosen calls fail instead, as a failing disk
// would: a sync with EIO (and Linux's writeback-error rules after it), an open with EMFILE, a write
// short or with ENOSPC; each failure is a record of its own. start() and set_faults() are for a
// forked child that is about to run the code under test; the calls, any thread after them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace factum::powerloss {

/// What a log record says happened. Every record names a file by its inode number as the
/// process saw it; `seq` is the record's position in the log (0-based).
enum class op : uint8_t {
  write = 1,       ///< `len` bytes at `offset` of inode `ino` (the bytes follow the record)
  zeros = 2,       ///< like write, for bytes that were all zero (no bytes follow)
  truncate = 3,    ///< the inode's size set to `offset`
  sync_begin = 4,  ///< fsync or fdatasync of `ino` (file or directory) called
  sync_end = 5,    ///< that call returned success; `offset` is the seq of its sync_begin
  add_name = 6,    ///< `path` now names `ino` (open with O_CREAT that created it, mkdir, link,
                   ///< or the new name of a rename); `dir` is the parent directory's inode;
                   ///< `len` is 1 for a directory. `offset` is 1 when the inode is new.
  drop_name = 7,   ///< `path` (in directory `dir`) no longer names anything (unlink, rmdir, or
                   ///< the old name of a rename)
  sync_failed = 8, ///< the sync of `ino` that began at seq `offset` returned an error (`len`:
                   ///< errno); it made nothing durable
  write_error = 9, ///< a writeback error on `ino`: every change to its bytes that no sync had
                   ///< made durable by now is lost for good, whatever later syncs return (Linux
                   ///< marks the failed pages clean; replay.hpp). Before the sync_begin of an
                   ///< injected sync failure (the harshest moment: its call), before the
                   ///< sync_failed of a real one (the latest moment it can have happened)
  injected = 10,   ///< the fault plan failed a call on `path` (`dir`: the fault's index in the
                   ///< plan; `offset`: its fault::call; `len`: the errno returned, or for a short
                   ///< write the bytes written). Informational: the call's own records follow
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

/// A call that the fault plan makes fail (set_faults()). A call matches when the file it names
/// or acts on is under the recorded root and its path contains `path_has` and ends with
/// `path_ends`; each fault counts the calls that match it while recording, from set_faults()
/// on (1, 2, ...), and those numbered `first` .. `first + count - 1` fail. A call two faults would
/// fail fails by the first of them.
struct fault {
  enum call : uint8_t {
    /// fsync or fdatasync: returns `error` (EIO). The real sync still runs (it takes its time,
    /// so that other syncs overlap it as they would a failing one). As Linux does after a
    /// writeback error, every change to the file that no sync had made durable (returned)
    /// when the failing call began is lost for good (op::write_error, logged at that moment),
    /// and every other descriptor of the file open then fails its next sync once too (errseq:
    /// each open file description sees a writeback error once; one opened later does not).
    /// Descriptors opened before start(), or made by dup, are not followed.
    sync = 1,
    /// open/openat (of the file itself, before it exists too): returns -1 with `error`
    /// (EMFILE) and opens nothing. `accmode` >= 0: only opens whose O_ACCMODE bits equal it.
    open = 2,
    /// write/pwrite (and their vector forms): with `error` 0, writes the first half of the
    /// bytes (at least one) and returns that short count; else returns -1 with `error`
    /// (ENOSPC) and writes nothing.
    write = 3,
  };
  call what = sync;
  std::string path_has;
  std::string path_ends;
  int error = 0;
  uint64_t first = 1;
  uint64_t count = 1;
  int accmode = -1;
};

/// Sets the faults the recorded calls meet from now on (replacing any set before), in the
/// child, before start() or while the code under test runs. With a `notify` descriptor (a
/// pipe), each failure also writes the int32 `notify_value` to it in the same step as its
/// record: the failures the parent has read are in the log (and, once it froze the child,
/// every failure in the log has been written to the pipe).
void set_faults(std::vector<fault> plan, int notify = -1, int32_t notify_value = 0);

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
