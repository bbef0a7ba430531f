// fsync_probe.hpp: the disk's price of durability, measured apart from any software of factum's,
// shared by store_bench (its fsync* workloads) and runtime_bench (the ceiling it prints beside
// the 1,000-entity appends, taken in the same runs). Header-only; the probe's threads are its
// own and end before it returns.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace factum::bench {

/// What one probe measured: its wall time, one latency per sync, or why it failed.
struct fsync_probe_result {
  double seconds = 0;         ///< wall time of the timed part
  std::vector<double> lat_us; ///< one entry per pwrite + fdatasync, microseconds
  std::string error;          ///< empty on success
  /// CPU time (user + system) the probe's threads spent in their timed loops, summed: on a
  /// virtual machine most of a sync's price is the guest kernel's, not the disk's.
  double cpu_seconds = 0;
  double rate() const { return seconds > 0 ? static_cast<double>(lat_us.size()) / seconds : 0; }
  /// Microseconds of CPU per pwrite + fdatasync.
  double cpu_us_per_sync() const {
    return lat_us.empty() ? 0 : cpu_seconds * 1e6 / static_cast<double>(lat_us.size());
  }
};

/// CPU time (user + system) used so far, in seconds: by the calling thread (RUSAGE_THREAD) or by
/// the whole process (RUSAGE_SELF, as runtime_bench reads it per call).
inline double cpu_seconds(int who = RUSAGE_THREAD) {
  rusage u{};
  ::getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// `threads` threads, each with its own file in `dir`, each writing `kib` KiB with one `pwrite`
/// and then `fdatasync`ing, `num` syncs in all (rounded down to a multiple of `threads`, at
/// least one each). Each file is 1 MiB (or 4 writes, if larger) written and synced untimed
/// first and is then overwritten in place, like a WAL after its first checkpoint: no size
/// change, so no inode or bitmap write joins the data (a growing file costs about twice as much
/// on ext4 without a journal; docs/performance.md). The files are removed before it returns.
inline fsync_probe_result fsync_probe(const std::filesystem::path& dir, const std::string& tag,
                                      int kib, int threads, int64_t num) {
  using clock_type = std::chrono::steady_clock;
  auto us_since = [](clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  };
  fsync_probe_result r;
  const size_t bytes = static_cast<size_t>(kib) * 1024;
  const off_t file_bytes = std::max<off_t>(1 << 20, static_cast<off_t>(bytes) * 4);
  const int64_t per_thread = std::max<int64_t>(1, num / threads);
  std::vector<int> fds;
  std::vector<std::filesystem::path> paths;
  auto cleanup = [&] {
    for (size_t t = 0; t < fds.size(); ++t) {
      ::close(fds[t]);
      std::error_code ec;
      std::filesystem::remove(paths[t], ec);
    }
  };
  for (int t = 0; t < threads; ++t) {
    paths.push_back(dir / ("fsync-" + tag + "-" + std::to_string(t) + ".dat"));
    int fd = ::open(paths.back().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      r.error = "open " + paths.back().string() + ": " + std::strerror(errno);
      paths.pop_back();
      cleanup();
      return r;
    }
    fds.push_back(fd);
    std::vector<char> fill(static_cast<size_t>(file_bytes), 'x');
    if (::pwrite(fd, fill.data(), fill.size(), 0) != static_cast<ssize_t>(fill.size()) ||
        ::fsync(fd) != 0) {
      r.error = "prepare " + paths.back().string() + ": " + std::strerror(errno);
      cleanup();
      return r;
    }
  }
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<int> failed{0}; // the errno of the first failed pwrite or fdatasync
  std::vector<double> cpu(static_cast<size_t>(threads), 0.0);
  auto body = [&](int t) {
    std::vector<char> block(bytes, 'y');
    auto& mine = lat[static_cast<size_t>(t)];
    mine.reserve(static_cast<size_t>(per_thread));
    const int64_t slots = file_bytes / static_cast<off_t>(bytes);
    ready.fetch_add(1);
    while (!go.load())
      std::this_thread::yield();
    const double cpu0 = cpu_seconds();
    struct cpu_mark { // also on the early return of a failed call
      std::vector<double>& cpu;
      int t;
      double cpu0;
      ~cpu_mark() { cpu[static_cast<size_t>(t)] = cpu_seconds() - cpu0; }
    } mark{cpu, t, cpu0};
    for (int64_t i = 0; i < per_thread; ++i) {
      auto t1 = clock_type::now();
      block[0] = static_cast<char>(i);
      if (::pwrite(fds[static_cast<size_t>(t)], block.data(), bytes,
                   static_cast<off_t>(i % slots) * static_cast<off_t>(bytes)) !=
            static_cast<ssize_t>(bytes) ||
          ::fdatasync(fds[static_cast<size_t>(t)]) != 0) {
        int zero = 0;
        failed.compare_exchange_strong(zero, errno != 0 ? errno : EIO);
        return;
      }
      mine.push_back(us_since(t1));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(body, t);
  while (ready.load() < threads - 1)
    std::this_thread::yield();
  auto t0 = clock_type::now();
  go.store(true);
  body(0);
  for (auto& th : pool)
    th.join();
  r.seconds = us_since(t0) / 1e6;
  if (int e = failed.load(); e != 0)
    r.error = "pwrite/fdatasync in " + dir.string() + ": " + std::strerror(e);
  for (auto& v : lat)
    r.lat_us.insert(r.lat_us.end(), v.begin(), v.end());
  for (double c : cpu)
    r.cpu_seconds += c;
  cleanup();
  return r;
}

} // namespace factum::bench
