// storage_pool.hpp (private): a fixed set of threads that run blocking storage work (open,
// commit + fsync, close) for entity actors, so CAF's few workers never wait on the disk.
// post() is thread-safe; jobs run on the pool's threads, in FIFO order per submission.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace factum::detail {

class storage_pool {
 public:
  explicit storage_pool(size_t threads) {
    for (size_t i = 0; i < (threads ? threads : 1); ++i)
      threads_.emplace_back([this] { run(); });
  }
  ~storage_pool() { stop(); }

  /// Queues a job. Jobs posted after stop() are run inline (nothing is ever dropped).
  void post(std::function<void()> job) {
    bool queued = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!stopped_) {
        jobs_.push_back(std::move(job));
        queued = true;
      }
    }
    // Woken after the unlock: a thread woken under the lock would find it held and sleep again
    // until the unlock wakes it a second time.
    if (queued)
      cv_.notify_one();
    else
      job();
  }

  /// Runs every queued job, then joins the threads.
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stopped_)
        return;
      stopped_ = true;
      cv_.notify_all();
    }
    for (auto& t : threads_)
      t.join();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return stopped_ || !jobs_.empty(); });
        if (jobs_.empty())
          return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

} // namespace factum::detail
