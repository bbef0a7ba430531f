// group_commit.hpp (private to runtime/): the group commit of an index written through one
// SQLite connection (the alarm index, the tenant index). Callers queue a change under the
// index's mutex and wait until a batch holding it is applied; whoever finds no batch in
// progress takes everything queued and applies it, without the mutex, for everyone. A reader of
// the same connection takes a turn the same way (exclusive). Any thread that may block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace factum::detail {

/// The turn-taking state of one index connection; guarded by the owner's mutex.
struct group_commit {
  bool busy = false;    ///< a batch (or an exclusive reader) uses the connection now
  uint64_t tickets = 0; ///< changes queued so far
  uint64_t applied = 0; ///< changes queued before the last finished batch
  std::condition_variable done;

  /// A ticket for a change just queued (under `g`).
  uint64_t ticket() noexcept { return ++tickets; }

  /// Returns once the change of `ticket` is applied: waits for the batch in progress, or
  /// applies one: `take()` (under `g`) empties the queue into a batch, `write(batch)` (without
  /// `g`) applies it and answers its status, `settle(batch, status)` (under `g`) hands the
  /// outcome to its waiters.
  template <class Take, class Write, class Settle>
  void wait_applied(std::unique_lock<std::mutex>& g, uint64_t ticket, Take take, Write write,
                    Settle settle) {
    while (applied < ticket) {
      if (busy) {
        done.wait(g);
        continue;
      }
      busy = true;
      auto batch = take();
      uint64_t upto = tickets;
      g.unlock();
      auto st = write(batch);
      g.lock();
      settle(batch, st);
      applied = upto;
      busy = false;
      done.notify_all();
    }
  }

  /// Runs `fn()` (without `g`) with the connection to itself, between batches.
  template <class Fn> auto exclusive(std::unique_lock<std::mutex>& g, Fn fn) {
    done.wait(g, [&] { return !busy; });
    busy = true;
    g.unlock();
    auto out = fn();
    g.lock();
    busy = false;
    done.notify_all();
    return out;
  }

  /// Waits until no batch or reader uses the connection (under `g`): before closing it.
  void wait_idle(std::unique_lock<std::mutex>& g) {
    done.wait(g, [&] { return !busy; });
  }
};

} // namespace factum::detail
