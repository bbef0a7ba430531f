// fs_probe.hpp: what the file system under the data directory means for the store. Owns no
// state; any thread (called once at start by the runtime).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace factum {

/// Where the probe looks; the defaults are the live kernel's, tests point them at a fake tree.
struct fs_probe_roots {
  std::filesystem::path sys = "/sys";
  std::filesystem::path proc = "/proc";
};

/// A warning when `dir` lies on a file system known to make entity files slow, else nothing.
///
/// Today one case: ext4 without a journal. There, ext4 does not reuse an inode freed in the
/// last seconds and scans past every recently freed one; every new entity and spare file
/// allocates inodes. (When each activation still created and deleted its `-wal` and `-shm`,
/// before they were kept across a close, reopens were measured 5x slower.) Found
/// through the block device of `dir` (`/sys/dev/block/MAJ:MIN`), whether ext4 knows it
/// (`/proc/fs/ext4/NAME`) and whether it has a jbd2 journal
/// (`/proc/fs/jbd2/NAME-*`). Anything the probe cannot read gives no warning.
std::optional<std::string> file_system_warning(const std::filesystem::path& dir,
                                               const fs_probe_roots& roots = {});

} // namespace factum
