// dead_letter_rules.cpp: dead-letter retention, automatic retry and state moves. Pure functions
// over plain values; any single thread.
#include "factum/resilience/dead_letter_rules.hpp"

#include <algorithm>
#include <string>

#include "json_util.hpp"

namespace factum::resilience {

namespace {

using nlohmann::json;

constexpr int64_t minute = 60 * 1000;
constexpr int64_t hour = 60 * minute;
constexpr int64_t day = 24 * hour;

constexpr std::array<failure_reason, 7> all_reasons{
  failure_reason::rate_limit,      failure_reason::server_error, failure_reason::timeout,
  failure_reason::invalid_payload, failure_reason::unauthorized, failure_reason::budget,
  failure_reason::unknown};

size_t index(failure_reason r) {
  return static_cast<size_t>(r);
}

status conflict(dl_status from, dl_status to) {
  return status{errc::conflict, "dead letter cannot move from " + std::string(to_string(from)) +
                                  " to " + std::string(to_string(to))};
}

status check_rule(const dead_letter_rule& r, const std::string& what) {
  if (r.retention_ms < 0)
    return detail::invalid(what + ".retention_ms", "must not be negative");
  if (r.auto_retry_after_ms && *r.auto_retry_after_ms < 0)
    return detail::invalid(what + ".auto_retry_after_ms", "must not be negative");
  if (r.max_auto_retries < 0)
    return detail::invalid(what + ".max_auto_retries", "must not be negative");
  if (r.alert_per_hour < 0)
    return detail::invalid(what + ".alert_per_hour", "must not be negative");
  return status::ok();
}

} // namespace

std::string_view to_string(dl_action a) noexcept {
  switch (a) {
  case dl_action::retry: return "retry";
  case dl_action::discard: return "discard";
  case dl_action::acknowledge: return "acknowledge";
  }
  return "retry";
}

std::optional<dl_action> parse_dl_action(std::string_view s) noexcept {
  for (auto a : {dl_action::retry, dl_action::discard, dl_action::acknowledge})
    if (to_string(a) == s)
      return a;
  return std::nullopt;
}

std::vector<dl_status> allowed_transitions(dl_status from) {
  using d = dl_status;
  switch (from) {
  case d::pending: return {d::scheduled, d::discarded, d::acknowledged};
  case d::scheduled: return {d::resolved, d::scheduled, d::pending, d::discarded, d::acknowledged};
  case d::acknowledged: return {d::scheduled, d::discarded};
  case d::resolved:
  case d::discarded: return {};
  }
  return {};
}

status validate_transition(dl_status from, dl_status to) {
  auto next = allowed_transitions(from);
  if (std::find(next.begin(), next.end(), to) == next.end())
    return conflict(from, to);
  return status::ok();
}

bool is_final(dl_status s) noexcept {
  return s == dl_status::resolved || s == dl_status::discarded;
}

result<dl_status> apply_action(dl_status from, dl_action action) {
  dl_status to = dl_status::scheduled;
  switch (action) {
  case dl_action::retry: to = dl_status::scheduled; break;
  case dl_action::discard: to = dl_status::discarded; break;
  case dl_action::acknowledge: to = dl_status::acknowledged; break;
  }
  if (auto s = validate_transition(from, to); !s)
    return s;
  return to;
}

dead_letter_rules::dead_letter_rules() {
  auto set = [this](failure_reason r, int64_t retention, std::optional<int64_t> retry, bool hint,
                    bool review, int64_t alert) {
    rules_[index(r)] = dead_letter_rule{retention, retry, hint, 3, review, alert};
  };
  set(failure_reason::rate_limit, day, hour, true, false, 10);
  set(failure_reason::server_error, 7 * day, hour, false, true, 50);
  set(failure_reason::timeout, day, 5 * minute, false, false, 20);
  set(failure_reason::invalid_payload, 30 * day, std::nullopt, false, true, 5);
  set(failure_reason::unauthorized, day, std::nullopt, false, true, 1);
  set(failure_reason::budget, 30 * day, std::nullopt, false, true, 1);
  set(failure_reason::unknown, 30 * day, std::nullopt, false, true, 10);
}

const dead_letter_rule& dead_letter_rules::rule(failure_reason r) const noexcept {
  return rules_[index(r)];
}

status dead_letter_rules::set_rule(failure_reason r, dead_letter_rule rule) {
  if (auto s = check_rule(rule, "dead_letter_rules." + std::string(to_string(r))); !s)
    return s;
  rules_[index(r)] = std::move(rule);
  return status::ok();
}

dl_status dead_letter_rules::initial_status(failure_reason r) const noexcept {
  const auto& x = rule(r);
  return x.auto_retry_after_ms && x.max_auto_retries > 0 ? dl_status::scheduled
                                                         : dl_status::pending;
}

std::optional<int64_t>
dead_letter_rules::next_retry_at(failure_reason r, int64_t now_ms, int64_t auto_retries_done,
                                 std::optional<int64_t> cooldown_hint_ms) const {
  const auto& x = rule(r);
  if (!x.auto_retry_after_ms || auto_retries_done >= x.max_auto_retries)
    return std::nullopt;
  int64_t delay = *x.auto_retry_after_ms;
  if (x.use_cooldown_hint && cooldown_hint_ms)
    delay = std::max<int64_t>(*cooldown_hint_ms, 0);
  return now_ms + delay;
}

int64_t dead_letter_rules::expires_at(failure_reason r, int64_t created_at_ms) const noexcept {
  return created_at_ms + rule(r).retention_ms;
}

bool dead_letter_rules::purgeable(dl_status s, int64_t expires_at_ms, int64_t now_ms) noexcept {
  return (is_final(s) || s == dl_status::acknowledged) && now_ms >= expires_at_ms;
}

nlohmann::json dead_letter_rules::to_json() const {
  json j = json::object();
  for (auto r : all_reasons) {
    const auto& x = rule(r);
    j[std::string(to_string(r))] = {
      {"retention_ms", x.retention_ms},
      {"auto_retry_after_ms", x.auto_retry_after_ms ? json(*x.auto_retry_after_ms) : json()},
      {"use_cooldown_hint", x.use_cooldown_hint},
      {"max_auto_retries", x.max_auto_retries},
      {"manual_review", x.manual_review},
      {"alert_per_hour", x.alert_per_hour}};
  }
  return j;
}

result<dead_letter_rules> dead_letter_rules::from_json(const nlohmann::json& j) {
  if (auto s = detail::expect_object(j, "dead_letter_rules"); !s)
    return s;
  dead_letter_rules out;
  for (const auto& [key, value] : j.items()) {
    std::string what = "dead_letter_rules." + key;
    auto r = parse_failure_reason(key);
    if (!r)
      return detail::invalid(what, "is not a failure reason");
    if (auto s = detail::expect_object(value, what); !s)
      return s;
    dead_letter_rule x = out.rule(*r);
    for (auto s : {detail::read_field(value, "retention_ms", x.retention_ms, what),
                   detail::read_field(value, "use_cooldown_hint", x.use_cooldown_hint, what),
                   detail::read_field(value, "max_auto_retries", x.max_auto_retries, what),
                   detail::read_field(value, "manual_review", x.manual_review, what),
                   detail::read_field(value, "alert_per_hour", x.alert_per_hour, what)})
      if (!s)
        return s;
    if (auto it = value.find("auto_retry_after_ms"); it != value.end()) {
      if (it->is_null()) {
        x.auto_retry_after_ms.reset();
      } else {
        int64_t delay = 0;
        if (auto s = detail::read_field(value, "auto_retry_after_ms", delay, what); !s)
          return s;
        x.auto_retry_after_ms = delay;
      }
    }
    if (auto s = out.set_rule(*r, std::move(x)); !s)
      return s;
  }
  return out;
}

} // namespace factum::resilience
