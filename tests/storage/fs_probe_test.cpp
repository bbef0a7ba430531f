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

/// A fake /sys and /proc under `root` in which `data`'s device is block device `name`.
fs_probe_roots fake_roots(const fs::path& root, const fs::path& data, const std::string& name) {
  struct stat st {};
  REQUIRE(::stat(data.c_str(), &st) == 0);
  fs_probe_roots r{root / "sys", root / "proc"};
  fs::create_directories(r.sys / "dev" / "block");
  fs::create_symlink("../../devices/virtual/block/" + name,
                     r.sys / "dev" / "block" /
                       (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev))));
  return r;
}

} // namespace

TEST_CASE("fs probe: ext4 without a journal under the data directory is named, with its device") {
  test::temp_dir tmp;
  auto data = tmp.path() / "data";
  fs::create_directories(data);
  auto r = fake_roots(tmp.path() / "fake", data, "vdz");
  fs::create_directories(r.proc / "fs" / "ext4" / "vdz");

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
  test::temp_dir tmp;
  auto data = tmp.path() / "data";
  fs::create_directories(data);
  // Not ext4: the device is not under /proc/fs/ext4.
  auto r = fake_roots(tmp.path() / "a", data, "vdz");
  fs::create_directories(r.proc / "fs" / "ext4" / "vdy");
  CHECK_FALSE(file_system_warning(data, r).has_value());
  // No block device for the directory (tmpfs, overlay...): no /sys/dev/block entry.
  fs_probe_roots none{tmp.path() / "b" / "sys", tmp.path() / "b" / "proc"};
  CHECK_FALSE(file_system_warning(data, none).has_value());
  // A data directory that does not exist.
  CHECK_FALSE(file_system_warning(tmp.path() / "missing", r).has_value());
}
