// file_bytes.hpp (tests): a file's bytes, for the tests that compare or damage files. Header-only;
// any thread.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace factum::test {

/// The bytes of the file at `p` ("" when it cannot be read).
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace factum::test
