// start_notes.hpp (tests): the runtime's start notes about one subject. The machine may add
// notes of its own (the file-system warning of factum/storage/fs_probe.hpp), so tests look for
// theirs instead of counting all of them. Header-only; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace factum::test {

/// The notes that mention `what`.
inline std::vector<std::string> notes_about(const std::vector<std::string>& notes,
                                            std::string_view what) {
  std::vector<std::string> out;
  for (auto& n : notes)
    if (n.find(what) != std::string::npos)
      out.push_back(n);
  return out;
}

} // namespace factum::test
