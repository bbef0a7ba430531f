// restore.hpp (private to factum_backup): the entry points of the two subcommands
// (backup.cpp registers both). The thread that runs the subcommand.
#pragma once

#include <filesystem>

namespace factum::tools::backup {

/// `factum backup --data data --to dest`: the exit code (backup.hpp).
int run_backup(const std::filesystem::path& data, const std::filesystem::path& dest);
/// `factum restore --from from --data into`: the exit code (backup.hpp).
int run_restore(const std::filesystem::path& from, const std::filesystem::path& into);

} // namespace factum::tools::backup
