// schedule.cpp: schedule specs, their times, jitter and missed-fire policy (schedule.hpp). Pure
// functions of their arguments; any thread.
#include "schedule/schedule.hpp"

#include <algorithm>
#include <deque>
#include <limits>

namespace factum::detail {

using nlohmann::json;

namespace {

status invalid(std::string what) {
  return {errc::invalid_argument, std::move(what)};
}

/// An integer member of `spec`, checked against [lo, hi]; `fallback` when absent.
result<int64_t> int_field(const json& spec, const char* name, int64_t fallback, int64_t lo,
                          int64_t hi) {
  auto it = spec.find(name);
  if (it == spec.end())
    return fallback;
  if (!it->is_number_integer())
    return invalid(std::string(name) + " must be an integer");
  auto v = it->get<int64_t>();
  if (v < lo || v > hi)
    return invalid(std::string(name) + " must be " + std::to_string(lo) + " to " +
                   std::to_string(hi) + ", not " + std::to_string(v));
  return v;
}

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

} // namespace

std::string_view to_string(missed_policy p) noexcept {
  switch (p) {
  case missed_policy::skip: return "skip";
  case missed_policy::fire_once: return "fire_once";
  case missed_policy::fire_all: return "fire_all";
  }
  return "fire_once";
}

// -- parsing ------------------------------------------------------------------------------------

result<schedule> schedule::parse_text(std::string_view spec_json, int64_t now_ms) {
  auto spec = json::parse(spec_json, nullptr, false);
  if (spec.is_discarded())
    return invalid("a schedule spec must be a JSON object");
  return parse(spec, now_ms);
}

result<schedule> schedule::parse(const json& spec, int64_t now_ms) {
  if (!spec.is_object())
    return invalid("a schedule spec must be a JSON object");
  static const char* known[] = {"every_ms", "anchor_ms",    "cron",      "time_zone",
                                "missed",   "max_catch_up", "jitter_ms", "grace_ms"};
  for (auto& [k, v] : spec.items())
    if (std::none_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; }))
      return invalid("unknown schedule field '" + k +
                     "' (fields: every_ms, anchor_ms, cron, time_zone, missed, max_catch_up, "
                     "jitter_ms, grace_ms)");
  bool every = spec.contains("every_ms");
  bool cron = spec.contains("cron");
  if (every == cron)
    return invalid("a schedule spec has exactly one of every_ms and cron");
  schedule s;
  if (every) {
    if (spec.contains("time_zone"))
      return invalid("time_zone goes with cron, not every_ms");
    auto e = int_field(spec, "every_ms", 0, min_every_ms, max_every_ms);
    if (!e)
      return e.error();
    auto a = int_field(spec, "anchor_ms", now_ms, -max_anchor_ms, max_anchor_ms);
    if (!a)
      return a.error();
    s.every_ms_ = *e;
    s.anchor_ms_ = *a;
  } else {
    if (spec.contains("anchor_ms"))
      return invalid("anchor_ms goes with every_ms, not cron");
    if (!spec["cron"].is_string())
      return invalid("cron must be a string such as \"*/5 * * * *\"");
    auto tz = spec.value("time_zone", json("UTC"));
    if (!tz.is_string())
      return invalid("time_zone must be a string such as \"Europe/Berlin\"");
    auto c = cron_schedule::parse(spec["cron"].get<std::string>(), tz.get<std::string>());
    if (!c)
      return c.error();
    s.cron_ = std::move(*c);
  }
  auto policy = spec.value("missed", json("fire_once"));
  if (policy == "skip")
    s.policy_ = missed_policy::skip;
  else if (policy == "fire_once")
    s.policy_ = missed_policy::fire_once;
  else if (policy == "fire_all")
    s.policy_ = missed_policy::fire_all;
  else
    return invalid("missed must be \"skip\", \"fire_once\" or \"fire_all\"");
  if (spec.contains("max_catch_up") && s.policy_ != missed_policy::fire_all)
    return invalid("max_catch_up goes with missed: \"fire_all\"");
  auto cap = int_field(spec, "max_catch_up", default_max_catch_up, 1, max_catch_up_limit);
  if (!cap)
    return cap.error();
  s.max_catch_up_ = *cap;
  auto j = int_field(spec, "jitter_ms", 0, 0, s.cron_ ? max_cron_jitter_ms : s.every_ms_ - 1);
  if (!j)
    return invalid(j.error().message() +
                   (s.cron_ ? " (below a minute, the shortest gap between two cron fires)"
                            : " (below every_ms)"));
  s.jitter_ms_ = *j;
  auto g = int_field(spec, "grace_ms", default_grace_ms, 0, max_every_ms);
  if (!g)
    return g.error();
  s.grace_ms_ = *g;
  return s;
}

json schedule::to_json() const {
  json out = json::object();
  if (cron_) {
    out["cron"] = cron_->expression();
    out["time_zone"] = cron_->time_zone();
  } else {
    out["every_ms"] = every_ms_;
    out["anchor_ms"] = anchor_ms_;
  }
  out["missed"] = std::string(to_string(policy_));
  if (policy_ == missed_policy::fire_all)
    out["max_catch_up"] = max_catch_up_;
  out["jitter_ms"] = jitter_ms_;
  out["grace_ms"] = grace_ms_;
  return out;
}

// -- times --------------------------------------------------------------------------------------

std::optional<int64_t> schedule::next_after(int64_t after_ms) const {
  if (cron_)
    return cron_->next_after(after_ms);
  if (after_ms < anchor_ms_)
    return anchor_ms_; // no fire before the anchor
  return anchor_ms_ + (floor_div(after_ms - anchor_ms_, every_ms_) + 1) * every_ms_;
}

std::vector<int64_t> schedule::fires_between(int64_t after_ms, int64_t until_ms, size_t cap) const {
  std::vector<int64_t> out;
  auto t = next_after(after_ms);
  while (t && *t <= until_ms && out.size() < cap) {
    out.push_back(*t);
    t = next_after(*t);
  }
  return out;
}

int64_t schedule::jitter(std::string_view seed, int64_t scheduled_ms) const {
  if (jitter_ms_ == 0)
    return 0;
  uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a over the seed, then the time
  for (unsigned char c : seed)
    h = (h ^ c) * 0x100000001b3ULL;
  h = mix(h ^ static_cast<uint64_t>(scheduled_ms));
  return static_cast<int64_t>(h % static_cast<uint64_t>(jitter_ms_ + 1));
}

// -- the missed-fire policy ---------------------------------------------------------------------

schedule::due_run schedule::due_from(std::string_view seed, int64_t first, int64_t now_ms,
                                     size_t keep) const {
  due_run run;
  std::deque<int64_t> last;
  std::optional<int64_t> t = first;
  if (!cron_) {
    // Every time up to now - jitter_ms is due: counted at once, the last `keep` walked.
    int64_t sure = now_ms - jitter_ms_ >= first ? (now_ms - jitter_ms_ - first) / every_ms_ + 1 : 0;
    int64_t skipped = std::max<int64_t>(0, sure - static_cast<int64_t>(keep));
    run.count = skipped;
    t = first + skipped * every_ms_;
  }
  // Jitter is below the shortest gap between two fires, so due times keep the fires' order.
  while (t && due_ms(seed, *t) <= now_ms && (!cron_ || run.count < max_counted_misses)) {
    ++run.count;
    last.push_back(*t);
    if (last.size() > keep)
      last.pop_front();
    t = next_after(*t);
  }
  if (cron_ && run.count >= max_counted_misses && t && due_ms(seed, *t) <= now_ms) {
    // The count stopped short of now: the latest due times come from the day before now.
    std::deque<int64_t> recent;
    auto r = next_after(std::max(first, now_ms - 86'400'000));
    while (r && due_ms(seed, *r) <= now_ms) {
      recent.push_back(*r);
      if (recent.size() > keep)
        recent.pop_front();
      r = next_after(*r);
    }
    if (!recent.empty())
      last = std::move(recent);
  }
  run.last.assign(last.begin(), last.end());
  return run;
}

schedule_step schedule::step(std::string_view seed, int64_t scheduled_ms, int64_t now_ms) const {
  schedule_step out;
  size_t keep = policy_ == missed_policy::fire_all ? static_cast<size_t>(max_catch_up_) : 1;
  auto run = due_from(seed, scheduled_ms, now_ms, keep);
  if (run.count == 0) { // not due yet: nothing happens
    out.next_ms = scheduled_ms;
    return out;
  }
  // The first scheduled time not yet due. Jitter is below the gap between fires, so every time
  // before now - jitter_ms is due and at most one after it is not.
  auto pending = [&] {
    auto t = next_after(std::max(scheduled_ms, now_ms - jitter_ms_ - 1));
    while (t && due_ms(seed, *t) <= now_ms)
      t = next_after(*t);
    return t.value_or(std::numeric_limits<int64_t>::max());
  };
  if (run.count == 1 && now_ms - due_ms(seed, scheduled_ms) <= grace_ms_) {
    out.fire = schedule_fire{scheduled_ms, 0};
    out.next_ms = next_after(scheduled_ms).value_or(std::numeric_limits<int64_t>::max());
    return out;
  }
  switch (policy_) {
  case missed_policy::skip:
    out.dropped = run.count;
    out.next_ms = pending();
    break;
  case missed_policy::fire_once:
    out.fire = schedule_fire{run.last.back(), run.count};
    out.next_ms = pending();
    break;
  case missed_policy::fire_all:
    out.dropped = run.count - static_cast<int64_t>(run.last.size());
    out.fire = schedule_fire{run.last.front(), 1};
    out.next_ms = run.last.size() > 1 ? run.last[1] : pending();
    break;
  }
  return out;
}

} // namespace factum::detail
