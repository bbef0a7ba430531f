// temp_dir.hpp: a fresh directory under $TMPDIR for one test, removed at scope exit.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace factum::test {

class temp_dir {
 public:
  temp_dir() {
    auto base = std::filesystem::temp_directory_path() / "factum-test-XXXXXX";
    std::string tmpl = base.string();
    if (!::mkdtemp(tmpl.data()))
      std::abort();
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

} // namespace factum::test
