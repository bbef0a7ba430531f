// archive_pruner.cpp: the continuous archive's retention (archive_pruner.hpp). Its own thread,
// or a caller's for runtime::prune_archives.
#include "entity_ops/archive_pruner.hpp"

#include <cstdio>

#include "factum/error/status.hpp"

namespace fs = std::filesystem;

namespace factum::detail {

namespace {

std::mutex one_pass; // two passes at once would race on the same epoch's new base

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace

archive_prune_totals archive_pruner::prune_all(const fs::path& archive_dir, int64_t keep_after_ms) {
  std::lock_guard<std::mutex> g(one_pass);
  archive_prune_totals t;
  std::error_code ec;
  // ARCHIVE/entities/<d0d1>/<digest>/
  for (auto& shard : fs::directory_iterator(archive_dir / "entities", ec)) {
    std::error_code ec2;
    for (auto& entity : fs::directory_iterator(shard.path(), ec2)) {
      if (!entity.is_directory(ec2))
        continue;
      ++t.archives;
      auto r = prune_archive(entity.path(), keep_after_ms);
      if (!r) {
        if (r.error().code() != errc::not_found) {
          ++t.failures;
          std::fprintf(stderr, "factum: archive prune %s: %s\n", entity.path().c_str(),
                       r.error().message().c_str());
        }
        continue;
      }
      t.epochs_removed += r->epochs_removed;
      t.generations_folded += r->generations_folded;
      t.bytes_freed += r->bytes_freed;
    }
  }
  return t;
}

void archive_pruner::start(fs::path archive_dir, std::chrono::milliseconds retention,
                           std::chrono::milliseconds interval) {
  if (archive_dir.empty() || retention.count() <= 0)
    return;
  dir_ = std::move(archive_dir);
  retention_ = retention;
  interval_ = interval;
  thread_ = std::thread([this] { run(); });
}

void archive_pruner::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void archive_pruner::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    if (cv_.wait_for(g, interval_, [this] { return stop_; }))
      return;
    g.unlock();
    (void)prune_all(dir_, wall_ms() - retention_.count());
    g.lock();
  }
}

} // namespace factum::detail
