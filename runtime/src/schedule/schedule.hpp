// schedule.hpp (private): a recurring schedule's spec (every N ms, or a cron expression in a
// time zone), its missed-fire policy and its jitter, and what a due schedule does now: which
// fire runs, how many scheduled times it covers, and the scheduled time after it
// (docs/architecture.md, "Schedules"). A plain value: no actor system, no store; the runtime
// keeps one row per schedule in the entity's file and fires it through an alarm
// (schedule_turns.cpp). Immutable after parse(), so any thread may use one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"
#include "schedule/cron.hpp"

namespace factum::detail {

/// What happens to scheduled times that passed while nothing could fire them.
enum class missed_policy {
  skip,      ///< none of them runs: the next fire is the next scheduled time to come
  fire_once, ///< one fire now stands for all of them
  fire_all,  ///< each runs, oldest first, at most max_catch_up of them (the latest ones)
};

std::string_view to_string(missed_policy p) noexcept;

// -- limits (docs/architecture.md, "Schedules") --

/// The smallest `every_ms`: every fire is a turn and a commit of the entity.
inline constexpr int64_t min_every_ms = 1'000;
/// The largest `every_ms` and `grace_ms` (about 34 years).
inline constexpr int64_t max_every_ms = int64_t{1} << 40;
/// The largest `anchor_ms` magnitude (about 35,000 years): interval arithmetic cannot overflow.
inline constexpr int64_t max_anchor_ms = int64_t{1} << 50;
/// The largest `max_catch_up` of `fire_all`.
inline constexpr int64_t max_catch_up_limit = 1'000;
/// `max_catch_up` when `fire_all` names none.
inline constexpr int64_t default_max_catch_up = 10;
/// `grace_ms` when the spec names none (Quartz's default misfire threshold).
inline constexpr int64_t default_grace_ms = 60'000;
/// The largest `jitter_ms` of a cron schedule: below a minute, the shortest gap between two of
/// its fires, so that jittered fires keep their order.
inline constexpr int64_t max_cron_jitter_ms = 59'999;
/// Missed scheduled times counted one by one at most (a cron schedule down for years): past
/// this the count says so much and no more.
inline constexpr int64_t max_counted_misses = 100'000;

/// One fire of a schedule as its handler sees it.
struct schedule_fire {
  int64_t scheduled_ms = 0; ///< the scheduled time it stands for (without jitter)
  int64_t missed = 0;       ///< missed scheduled times it covers; 0 for a fire on time
};

/// What a due schedule does now.
struct schedule_step {
  std::optional<schedule_fire> fire; ///< the fire to run; none when `skip` drops them all
  int64_t next_ms = 0;               ///< the scheduled time that comes after it
  int64_t dropped = 0;               ///< missed scheduled times that will never run
};

/// A recurring schedule.
class schedule {
 public:
  /// Parses a spec (a JSON object; docs/architecture.md "Schedules" lists its fields).
  /// `now_ms` is the default anchor of an interval. An error says what is wrong.
  static result<schedule> parse(const nlohmann::json& spec, int64_t now_ms);
  /// The same from JSON text.
  static result<schedule> parse_text(std::string_view spec_json, int64_t now_ms);

  /// The spec with every default filled in (the anchor too): parsing it again gives the same
  /// schedule at any time. What the store keeps.
  nlohmann::json to_json() const;

  // -- times --

  /// The first scheduled time strictly after `after_ms`; nullopt when none comes (never, for a
  /// spec parse() accepted).
  std::optional<int64_t> next_after(int64_t after_ms) const;
  /// The scheduled times in (after_ms, until_ms], oldest first; at most `cap` of them (the
  /// oldest ones).
  std::vector<int64_t> fires_between(int64_t after_ms, int64_t until_ms, size_t cap) const;
  /// The delay, 0 to jitter_ms, of the fire scheduled at `scheduled_ms`: a hash of `seed` (the
  /// entity and the schedule's name) and the time, so the same fire always gets the same one.
  int64_t jitter(std::string_view seed, int64_t scheduled_ms) const;
  /// When the fire scheduled at `scheduled_ms` is due: the time plus its jitter.
  int64_t due_ms(std::string_view seed, int64_t scheduled_ms) const {
    return scheduled_ms + jitter(seed, scheduled_ms);
  }

  // -- the missed-fire policy --

  /// What happens when the fire scheduled at `scheduled_ms` (the schedule's next one) runs at
  /// `now_ms`. It is on time when it is the only scheduled time due and at most grace_ms past
  /// its due time; otherwise every due scheduled time counts as missed and the policy decides.
  schedule_step step(std::string_view seed, int64_t scheduled_ms, int64_t now_ms) const;

  // -- the spec --

  bool is_cron() const noexcept { return cron_.has_value(); }
  int64_t every_ms() const noexcept { return every_ms_; }
  int64_t anchor_ms() const noexcept { return anchor_ms_; }
  const cron_schedule* cron() const noexcept { return cron_ ? &*cron_ : nullptr; }
  missed_policy policy() const noexcept { return policy_; }
  int64_t max_catch_up() const noexcept { return max_catch_up_; }
  int64_t jitter_ms() const noexcept { return jitter_ms_; }
  int64_t grace_ms() const noexcept { return grace_ms_; }

 private:
  schedule() = default;
  /// The due scheduled times from `first` (due itself) on: how many (at most
  /// max_counted_misses) and the last `keep` of them, oldest first.
  struct due_run {
    int64_t count = 0;
    std::vector<int64_t> last;
  };
  due_run due_from(std::string_view seed, int64_t first, int64_t now_ms, size_t keep) const;

  int64_t every_ms_ = 0;
  int64_t anchor_ms_ = 0;
  std::optional<cron_schedule> cron_;
  missed_policy policy_ = missed_policy::fire_once;
  int64_t max_catch_up_ = default_max_catch_up;
  int64_t jitter_ms_ = 0;
  int64_t grace_ms_ = default_grace_ms;
};

} // namespace factum::detail
