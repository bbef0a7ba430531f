// output_gate.hpp (private): the output gate of one entity: which replies may leave, given the
// commits made and the WAL syncs that came back, and what a failed sync does (quarantine).
//
// A reply leaves only when every commit it may reveal is durable. Commits are numbered by
// generation; a reply is held at the generation of the last commit made when it was produced,
// and released when a sync that covers that generation is known good. Syncs of one entity
// overlap (up to max_syncs_in_flight), all on one descriptor of the -wal, and Linux reports a
// writeback error to one fdatasync of a descriptor only: of two overlapping syncs, the one whose
// pages were lost may return 0 while the other takes the error. So a sync that returned 0 is
// known good only once every sync that had started before its fdatasync returned has come back
// without error (each sync carries its start ticket and the tickets taken when it returned:
// sync_ticketer). Any failed sync quarantines the entity: every reply still held fails with 503
// STORAGE_UNAVAILABLE (retryable), later syncs are ignored, and every reply produced afterwards
// fails too; the owner then closes the store without trusting its WAL (docs/reliability.md,
// "Failed syncs").
//
// In a replicated runtime (runtime_config::replicator) a commit is covered once its sync is
// good AND the replicated log holds it (replicated()); a commit the log refused quarantines the
// entity like a failed sync.
//
// A plain class template over the replies' destination (the entity actor's reply sink; a
// recorder in tests): no actor system, no threads. Owned by the entity actor and touched only on
// its thread; sync_ticketer alone is shared with the sync threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "factum/entities/call.hpp"
#include "factum/error/status.hpp"

namespace factum::detail {

/// WAL syncs of one entity that may run at once. A commit made while a sync runs starts
/// another (up to this many) instead of waiting for that one to return: each covers every
/// commit made before it began, and the kernel merges the cache flushes of overlapping ones.
inline constexpr int max_syncs_in_flight = 4;

/// How long a client is told to wait before retrying a call that a quarantine failed: the time
/// the entity needs to close, re-sync its files and reopen.
inline constexpr int64_t quarantine_retry_after_ms = 1000;

/// What one WAL sync reported back to its entity.
struct sync_report {
  uint64_t covers = 0;         ///< the commit generation it makes durable (and all before it)
  uint64_t ticket = 0;         ///< its place in start order (1, 2, ...): taken before fdatasync
  uint64_t started_by_end = 0; ///< tickets taken when its fdatasync returned
  status st;                   ///< ok, or why the sync failed
};

/// Numbers the syncs of one entity as they start and end: every call of the store's sync()
/// goes through run(), on whichever thread runs it.
class sync_ticketer {
 public:
  /// Runs `sync` (returning a status) and reports it as covering generation `covers`.
  /// Starts over at ticket 1 (a new activation; no sync of the old one may still run).
  void reset() { taken_.store(0, std::memory_order_release); }

  template <class Sync> sync_report run(uint64_t covers, Sync&& sync) {
    sync_report r;
    r.covers = covers;
    r.ticket = taken_.fetch_add(1, std::memory_order_acq_rel) + 1;
    r.st = sync();
    r.started_by_end = taken_.load(std::memory_order_acquire);
    return r;
  }

 private:
  std::atomic<uint64_t> taken_{0};
};

/// The reply of a call that a quarantined entity cannot answer truthfully.
inline call_reply quarantine_reply(const status& why) {
  call_error e = problems::storage_unavailable.error(
    "the entity's storage failed to sync (" + why.message() +
    "); nothing of this call is known durable. Retry with the same idempotency key");
  auto r = call_reply::failure(e);
  r.retry_after_ms = quarantine_retry_after_ms;
  return r;
}

/// The gate. `Dest` is movable and has `void deliver(call_reply)`.
template <class Dest> class output_gate {
 public:
  using reply_batch = std::vector<std::pair<Dest, call_reply>>;

  // -- commits --

  /// A commit was made whose durability a sync must establish: its generation.
  uint64_t committed() {
    ++commit_gen_;
    if (!replicating_)
      replicated_gen_ = commit_gen_;
    return commit_gen_;
  }
  /// A commit was made that is durable already (durability normal, where none is synced).
  void committed_durable() { durable_gen_ = asked_gen_ = committed(); }

  // -- the replicated log --

  /// From now on a commit is covered only once replicated() says the log holds it too.
  void replicate(bool on) noexcept { replicating_ = on; }
  /// Commits the log does not hold yet (replicate() on).
  bool log_pending() const noexcept { return replicating_ && replicated_gen_ < commit_gen_; }
  /// The log holds every commit up to generation `gen`: replies that need no more leave.
  void replicated(uint64_t gen) {
    replicated_gen_ = std::max(replicated_gen_, gen);
    release();
  }
  /// Generation of the last commit.
  uint64_t commit_gen() const noexcept { return commit_gen_; }

  // -- replies --

  /// Takes `v` (replies that may reveal the state of every commit so far): delivered now when
  /// that is durable, held until a sync covers it, or failed when quarantined.
  void hold(reply_batch& v) {
    for (auto& [to, r] : v) {
      if (quarantine_)
        to.deliver(quarantine_reply(*quarantine_));
      else if (covered() >= commit_gen_)
        to.deliver(std::move(r));
      else
        held_.push_back({commit_gen_, std::move(to), std::move(r)});
    }
    v.clear();
  }
  /// Fails `v` at once (nothing of it committed): every reply gets `r`.
  static void fail(reply_batch& v, const call_reply& r) {
    for (auto& [to, _] : v)
      to.deliver(r);
    v.clear();
  }
  /// Replies held now.
  size_t held() const noexcept { return held_.size(); }

  // -- syncs --

  /// Whether a sync should start now: the generation it is to cover (counted in flight), or
  /// nothing (every commit covered already, the cap reached, or quarantined).
  std::optional<uint64_t> want_sync() {
    if (quarantine_ || in_flight_ >= max_syncs_in_flight || asked_gen_ >= commit_gen_)
      return std::nullopt;
    ++in_flight_;
    asked_gen_ = commit_gen_;
    return commit_gen_;
  }
  /// Syncs started by want_sync() that have not come back.
  int in_flight() const noexcept { return in_flight_; }

  /// A sync started by want_sync() came back.
  void synced(const sync_report& r) {
    --in_flight_;
    record(r);
  }
  /// A commit made and synced in one job (the slow path): its sync covers it.
  void committed_and_synced(sync_report r) {
    r.covers = committed();
    asked_gen_ = std::max(asked_gen_, r.covers);
    record(r);
  }

  // -- quarantine --

  /// Why the entity is quarantined, or null while it is not.
  const status* quarantined() const noexcept { return quarantine_ ? &*quarantine_ : nullptr; }
  /// Quarantines the entity (a sync, or the store, failed in a way that leaves the WAL's
  /// durability unknown): every held reply fails now.
  void quarantine(status why) {
    if (quarantine_)
      return;
    quarantine_ = std::move(why);
    trust_wait_.clear();
    auto r = quarantine_reply(*quarantine_);
    while (!held_.empty()) {
      held_.front().to.deliver(r);
      held_.pop_front();
    }
  }

 private:
  struct held_reply {
    uint64_t gen;
    Dest to;
    call_reply reply;
  };
  struct good_sync {
    uint64_t started_by_end;
    uint64_t covers;
  };

  void record(const sync_report& r) {
    mark_reported(r.ticket);
    if (quarantine_)
      return;
    if (!r.st) {
      quarantine(r.st);
      return;
    }
    trust_wait_.push_back({r.started_by_end, r.covers});
    // Every sync that started before one of these returned has come back without error: what
    // they cover is durable.
    for (auto it = trust_wait_.begin(); it != trust_wait_.end();) {
      if (it->started_by_end <= reported_upto_) {
        durable_gen_ = std::max(durable_gen_, it->covers);
        it = trust_wait_.erase(it);
      } else {
        ++it;
      }
    }
    release();
  }

  /// Every commit up to this generation is durable and, when replicating, in the log.
  uint64_t covered() const noexcept { return std::min(durable_gen_, replicated_gen_); }

  void release() {
    if (quarantine_)
      return;
    while (!held_.empty() && held_.front().gen <= covered()) {
      held_.front().to.deliver(std::move(held_.front().reply));
      held_.pop_front();
    }
  }

  void mark_reported(uint64_t ticket) {
    if (ticket == reported_upto_ + 1) {
      ++reported_upto_;
      while (!ahead_.empty()) {
        auto it = std::find(ahead_.begin(), ahead_.end(), reported_upto_ + 1);
        if (it == ahead_.end())
          break;
        ahead_.erase(it);
        ++reported_upto_;
      }
    } else if (ticket > reported_upto_) {
      ahead_.push_back(ticket);
    }
  }

  uint64_t commit_gen_ = 0;     ///< generation of the last commit
  uint64_t durable_gen_ = 0;    ///< every commit up to this one is known durable
  uint64_t asked_gen_ = 0;      ///< the latest generation a sync was started for
  uint64_t replicated_gen_ = 0; ///< every commit up to this one is in the replicated log
  bool replicating_ = false;    ///< replicate(): commits wait for the log as well
  int in_flight_ = 0;
  std::deque<held_reply> held_;
  std::vector<good_sync> trust_wait_; ///< syncs that returned 0, not yet known good
  uint64_t reported_upto_ = 0;        ///< every ticket up to this one came back
  std::vector<uint64_t> ahead_;       ///< tickets that came back out of order (at most a few)
  std::optional<status> quarantine_;
};

} // namespace factum::detail
