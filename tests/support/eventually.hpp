// eventually.hpp (tests): a bounded poll of a condition that other threads or processes make
// true (counters, files, a server's answers), for the waits that have nothing to wait on.
// Header-only; any thread.
#pragma once

#include <chrono>
#include <thread>

namespace factum::test {

/// Polls `cond` every `every` until it holds or `limit` has passed, then once more; whether it
/// held.
template <class F>
bool eventually(F&& cond, std::chrono::milliseconds limit = std::chrono::seconds(10),
                std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond())
      return true;
    std::this_thread::sleep_for(every);
  }
  return cond();
}

} // namespace factum::test
