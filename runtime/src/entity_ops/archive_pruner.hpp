// archive_pruner.hpp (private): the thread that prunes the continuous archive
// (runtime_config::archive_retention): every archive_prune_interval, each entity's archive under
// runtime_config::archive_dir keeps what rebuilds its commits of the retention window
// (prune_archive, factum/storage/wal_archive.hpp). start()/stop() on the runtime's starting and
// stopping thread; prune_all() on the pruner's thread or a caller's (runtime::prune_archives).
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "factum/storage/wal_archive.hpp"

namespace factum::detail {

/// What one pass over every entity's archive did.
struct archive_prune_totals {
  int64_t archives = 0;
  int64_t epochs_removed = 0;
  int64_t generations_folded = 0;
  int64_t bytes_freed = 0;
  int64_t failures = 0;
};

class archive_pruner {
 public:
  /// Starts the thread when `retention` > 0 (and an archive is configured).
  void start(std::filesystem::path archive_dir, std::chrono::milliseconds retention,
             std::chrono::milliseconds interval);
  /// Stops and joins the thread.
  void stop();
  /// One pass now, keeping commits shipped at or after `keep_after_ms`. Any thread; one pass at
  /// a time.
  static archive_prune_totals prune_all(const std::filesystem::path& archive_dir,
                                        int64_t keep_after_ms);

 private:
  void run();

  std::filesystem::path dir_;
  std::chrono::milliseconds retention_{0}, interval_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace factum::detail
