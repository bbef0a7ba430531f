// fs_probe_test.cpp: file_system_warning against a fake /sys and /proc tree built around the
// real device of a temporary directory.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>

#include "factum/storage/fs_probe.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace {

/// A data directory, and fake /sys and /proc trees in which its device is a block device.
struct probe_fixture {
  test::temp_dir tmp;
  fs::path data = tmp.path() / "data";

  probe_fixture() { fs::create_directories(data); }

  /// Under `sub`: `data`'s device named `name`; `ext4_name`, when not empty, known to ext4.
  fs_probe_roots roots(const std::string& sub, const std::string& name,
                       const std::string& ext4_name) {
    struct stat st {};
    REQUIRE(::stat(data.c_str(), &st) == 0);
    fs_probe_roots r{tmp.path() / sub / "sys", tmp.path() / sub / "proc"};
    fs::create_directories(r.sys / "dev" / "block");
    fs::create_symlink(
      "../../devices/virtual/block/" + name,
      r.sys / "dev" / "block" /
        (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev))));
    if (!ext4_name.empty())
      fs::create_directories(r.proc / "fs" / "ext4" / ext4_name);
    return r;
  }
};

} // namespace

TEST_CASE("fs probe: ext4 without a journal under the data directory is named, with its device") {
  probe_fixture f;
  auto& data = f.data;
  auto r = f.roots("fake", "vdz", "vdz");

  // No jbd2 directory at all (no journaled file system on the machine).
  auto w = file_system_warning(data, r);
  REQUIRE(w.has_value());
  CHECK(w->find("ext4 without a journal") != std::string::npos);
  CHECK(w->find("vdz") != std::string::npos);
  CHECK(w->find(data.string()) != std::string::npos);

  // A journal of another device whose name starts with this one's does not count.
  fs::create_directories(r.proc / "fs" / "jbd2" / "vdz1-8");
  fs::create_directories(r.proc / "fs" / "jbd2" / "loop0-8");
  CHECK(file_system_warning(data, r).has_value());

  // Its own journal: no warning.
  fs::create_directories(r.proc / "fs" / "jbd2" / "vdz-8");
  CHECK_FALSE(file_system_warning(data, r).has_value());
}

TEST_CASE("fs probe: other file systems, unknown devices and missing paths give no warning") {
  probe_fixture f;
  // Not ext4: the device is not under /proc/fs/ext4 (another one is).
  auto r = f.roots("a", "vdz", "vdy");
  CHECK_FALSE(file_system_warning(f.data, r).has_value());
  // No block device for the directory (tmpfs, overlay...): no /sys/dev/block entry.
  fs_probe_roots none{f.tmp.path() / "b" / "sys", f.tmp.path() / "b" / "proc"};
  CHECK_FALSE(file_system_warning(f.data, none).has_value());
  // A data directory that does not exist.
  CHECK_FALSE(file_system_warning(f.tmp.path() / "missing", r).has_value());
}
