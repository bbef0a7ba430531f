// http/io_gate.hpp: the door through which threads other than the HTTP server's I/O threads
// (CAF workers with a runtime reply, the WebSocket hub, a fact stream's writer) post work to a
// connection's strand. The server closes it once its I/O threads have stopped; from then on such
// work is dropped on the poster's thread, its captures released there, instead of being queued
// in an io_context nobody runs, where it would hold the connection, and through it the server
// (its io_context included), alive for good. Any thread.
#pragma once

#include <mutex>
#include <utility>

#include <boost/asio/post.hpp>

namespace factum::http {

class io_gate {
 public:
  /// Posts `f` to `ex` unless the gate is closed; false when it was (`f` is left to its caller,
  /// who destroys it).
  template <class Executor, class F> bool post(const Executor& ex, F&& f) {
    std::lock_guard<std::mutex> g(mu_);
    if (!open_)
      return false;
    boost::asio::post(ex, std::forward<F>(f));
    return true;
  }

  /// No more posts: every later one is dropped. Returns once no post is under way.
  void close() {
    std::lock_guard<std::mutex> g(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  bool open_ = true; // guarded by mu_
};

} // namespace factum::http
