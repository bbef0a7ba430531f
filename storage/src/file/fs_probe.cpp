// fs_probe.cpp: the data directory's file system, read from /sys and /proc. No state; any thread.
#include "factum/storage/fs_probe.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <system_error>

namespace factum {

namespace fs = std::filesystem;

std::optional<std::string> file_system_warning(const fs::path& dir, const fs_probe_roots& roots) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return std::nullopt;
  std::error_code ec;
  auto dev = roots.sys / "dev" / "block" /
             (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)));
  auto target = fs::read_symlink(dev, ec);
  if (ec)
    return std::nullopt; // not a block device (tmpfs, overlay, NFS...): nothing known
  auto name = target.filename().string();
  if (name.empty() || !fs::is_directory(roots.proc / "fs" / "ext4" / name, ec))
    return std::nullopt; // not ext4
  auto jbd2 = roots.proc / "fs" / "jbd2";
  for (auto it = fs::directory_iterator(jbd2, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto n = it->path().filename().string();
    if (n.size() > name.size() && n.compare(0, name.size(), name) == 0 && n[name.size()] == '-')
      return std::nullopt; // journaled
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return std::nullopt; // cannot tell
  return dir.string() + " is on ext4 without a journal (device " + name +
         "): activating and hibernating entities measured 5x slower there; a journaled file "
         "system is recommended (docs/configuration.md, data_dir)";
}

} // namespace factum
