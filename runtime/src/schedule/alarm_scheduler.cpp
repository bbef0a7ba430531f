// alarm_scheduler.cpp: the alarm scheduler, a detached CAF actor that reads the alarm index
// (DATA/runtime/alarms.db) for due alarms of entities that may be hibernated, wakes each with an
// internal @wake call, and parks the index entries of wakes that cannot reach their entity
// (docs/architecture.md, "Alarms"). Its own thread (detached actor); wake_failed() from any.
#include <algorithm>
#include <unordered_map>

#include "runtime_core.hpp"

namespace factum::detail {

namespace {

struct scheduler_state {
  static inline const char* name = "factum.alarm_scheduler";
  uint64_t gen = 0;
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> woken; // key -> (due, at)
};

/// How long an alarm whose entity could not be woken waits before the next try: 1 s, doubling
/// with each failed try, at most an hour.
int64_t park_backoff_ms(int64_t attempts) {
  return std::min<int64_t>(3'600'000, int64_t{1000} << std::min<int64_t>(attempts, 12));
}

/// Parks the index entries whose wake failed since the last scan (runtime_core::wake_failed):
/// due() leaves them out for a while, so that other entities' alarms keep firing. How many.
size_t park_failed_wakes(runtime_core* rt) {
  std::vector<failed_wake> failed;
  {
    std::lock_guard<std::mutex> g(rt->alarms.mu);
    failed.swap(rt->alarms.failed_wakes);
  }
  if (failed.empty())
    return 0;
  int64_t now = rt->now();
  std::vector<alarm_index_parked> parks;
  parks.reserve(failed.size());
  for (auto& f : failed)
    parks.push_back({f.entry, now + park_backoff_ms(f.entry.park_attempts), std::move(f.reason)});
  auto st = rt->with_index_writer([&](alarm_index& w) { return w.park(parks); });
  rt->stats.alarms_parked.inc(parks.size());
  for (auto& p : parks)
    rt->log_event({{"level", "warn"},
                   {"event", "alarm_parked"},
                   {"entity", p.entry.key.to_string()},
                   {"due_ms", p.entry.due_ms},
                   {"retry_at_ms", p.parked_until_ms},
                   {"attempts", p.entry.park_attempts + 1},
                   {"reason", p.reason},
                   {"written", st.is_ok()}});
  return parks.size();
}

void scheduler_scan(caf::stateful_actor<scheduler_state>* self, runtime_core* rt) {
  auto& s = self->state;
  park_failed_wakes(rt);
  int64_t now = rt->now();
  std::vector<alarm_index_entry> due;
  std::optional<int64_t> next;
  {
    std::lock_guard<std::mutex> g(rt->alarms.mu);
    auto d = rt->alarms.index->due(now, 512);
    if (d)
      due = std::move(*d);
    auto n = rt->alarms.index->next_due();
    if (n)
      next = *n;
  }
  for (auto it = s.woken.begin(); it != s.woken.end();)
    it = now - it->second.second > 5'000 ? s.woken.erase(it) : std::next(it);
  for (auto& e : due) {
    auto k = e.key.to_string();
    auto w = s.woken.find(k);
    if (w != s.woken.end() && w->second.first == e.due_ms)
      continue; // woken recently for this very due time
    s.woken[k] = {e.due_ms, now};
    // A wake that cannot reach its entity (type not hosted, file that does not open, a call
    // that times out) is parked at the next scan; the runtime stopping is no failure.
    rt->route(e.key, call_request{"@wake", "", "", "", ""}, std::chrono::seconds(30),
              [rt, e](call_reply r) {
                if (!r.ok && r.code != problems::unavailable.code)
                  rt->wake_failed(e, r.code + ": " + r.json().value("detail", std::string()));
              });
  }
  // Wakes that failed at once (an unknown type) are parked now, and the entries behind them
  // looked at without waiting for the next tick.
  if (park_failed_wakes(rt) > 0) {
    self->send(self, atoms::kick::value);
    return;
  }
  int64_t poll = rt->cfg.alarm_poll.count();
  int64_t delay = poll;
  if (next && *next > now)
    delay = std::min<int64_t>(poll, *next - now);
  self->delayed_send(self, std::chrono::milliseconds(std::max<int64_t>(delay, 1)),
                     atoms::tick::value, ++s.gen);
}

caf::behavior alarm_scheduler(caf::stateful_actor<scheduler_state>* self, runtime_core* rt) {
  self->send(self, atoms::kick::value);
  return {
    [=](atoms::tick, uint64_t gen) {
      if (gen == self->state.gen)
        scheduler_scan(self, rt);
    },
    [=](atoms::kick) { scheduler_scan(self, rt); },
  };
}

} // namespace

caf::actor spawn_alarm_scheduler(runtime_core* rt) {
  return rt->sys->spawn<caf::detached>(alarm_scheduler, rt);
}

} // namespace factum::detail
