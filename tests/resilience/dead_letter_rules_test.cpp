// dead_letter_rules_test.cpp: the default per-reason retention and automatic retry, the
// state machine (every pair checked), operator actions and the JSON configuration.
// Single-threaded.
#include <doctest/doctest.h>

#include <algorithm>

#include "factum/resilience/dead_letter_rules.hpp"

using namespace factum;
using namespace factum::resilience;

namespace dead_letter_rules_test {

namespace {

constexpr int64_t t0 = 1705500000000;
constexpr int64_t minute = 60000;
constexpr int64_t hour = 60 * minute;
constexpr int64_t day = 24 * hour;

} // namespace

TEST_CASE("dead_letter_rules: defaults: initial status and next retry") {
  dead_letter_rules r;
  CHECK(r.initial_status(failure_reason::rate_limit) == dl_status::scheduled);
  CHECK(r.initial_status(failure_reason::server_error) == dl_status::scheduled);
  CHECK(r.initial_status(failure_reason::timeout) == dl_status::scheduled);
  CHECK(r.initial_status(failure_reason::invalid_payload) == dl_status::pending);
  CHECK(r.initial_status(failure_reason::unauthorized) == dl_status::pending);
  CHECK(r.initial_status(failure_reason::budget) == dl_status::pending);
  CHECK(r.initial_status(failure_reason::unknown) == dl_status::pending);

  CHECK(r.next_retry_at(failure_reason::server_error, t0) == t0 + hour);
  CHECK(r.next_retry_at(failure_reason::timeout, t0) == t0 + 5 * minute);
  // Rate limits retry after the cooldown when it is known.
  CHECK(r.next_retry_at(failure_reason::rate_limit, t0, 0, 60000) == t0 + 60000);
  CHECK(r.next_retry_at(failure_reason::rate_limit, t0) == t0 + hour);
  // The hint is only for reasons whose rule asks for it.
  CHECK(r.next_retry_at(failure_reason::timeout, t0, 0, 60000) == t0 + 5 * minute);
  CHECK_FALSE(r.next_retry_at(failure_reason::invalid_payload, t0));
  CHECK_FALSE(r.next_retry_at(failure_reason::unknown, t0));
  CHECK_FALSE(r.next_retry_at(failure_reason::unauthorized, t0));
  // At most three automatic retries.
  CHECK(r.next_retry_at(failure_reason::timeout, t0, 2) == t0 + 5 * minute);
  CHECK_FALSE(r.next_retry_at(failure_reason::timeout, t0, 3));
  CHECK(r.rule(failure_reason::server_error).manual_review);
  CHECK_FALSE(r.rule(failure_reason::rate_limit).manual_review);
  CHECK(r.rule(failure_reason::server_error).alert_per_hour == 50);
}

TEST_CASE("dead_letter_rules: retention and purging") {
  dead_letter_rules r;
  CHECK(r.expires_at(failure_reason::rate_limit, t0) == t0 + day);
  CHECK(r.expires_at(failure_reason::server_error, t0) == t0 + 7 * day);
  CHECK(r.expires_at(failure_reason::invalid_payload, t0) == t0 + 30 * day);
  CHECK(r.expires_at(failure_reason::unauthorized, t0) == t0 + day);
  CHECK(r.expires_at(failure_reason::timeout, t0) == t0 + day);
  CHECK(r.expires_at(failure_reason::unknown, t0) == t0 + 30 * day);

  int64_t exp = r.expires_at(failure_reason::timeout, t0);
  CHECK(dead_letter_rules::purgeable(dl_status::resolved, exp, exp));
  CHECK(dead_letter_rules::purgeable(dl_status::discarded, exp, exp + 1));
  CHECK(dead_letter_rules::purgeable(dl_status::acknowledged, exp, exp));
  CHECK_FALSE(dead_letter_rules::purgeable(dl_status::resolved, exp, exp - 1));
  CHECK_FALSE(dead_letter_rules::purgeable(dl_status::pending, exp, exp + day));
  CHECK_FALSE(dead_letter_rules::purgeable(dl_status::scheduled, exp, exp + day));
}

TEST_CASE("dead_letter_rules: every state pair is allowed or refused as specified") {
  using d = dl_status;
  const d all[] = {d::pending, d::scheduled, d::resolved, d::discarded, d::acknowledged};
  auto allowed = [](d from, d to) {
    switch (from) {
    case d::pending: return to == d::scheduled || to == d::discarded || to == d::acknowledged;
    case d::scheduled:
      return to == d::resolved || to == d::scheduled || to == d::pending || to == d::discarded ||
             to == d::acknowledged;
    case d::acknowledged: return to == d::scheduled || to == d::discarded;
    default: return false;
    }
  };
  int ok = 0;
  for (auto from : all)
    for (auto to : all) {
      CAPTURE(to_string(from));
      CAPTURE(to_string(to));
      auto s = validate_transition(from, to);
      CHECK(s.is_ok() == allowed(from, to));
      if (!s.is_ok()) {
        CHECK(s.code() == errc::conflict);
        CHECK(s.message() == "dead letter cannot move from " + std::string(to_string(from)) +
                               " to " + std::string(to_string(to)));
      } else {
        ++ok;
      }
      auto next = allowed_transitions(from);
      CHECK((std::find(next.begin(), next.end(), to) != next.end()) == allowed(from, to));
    }
  CHECK(ok == 10);
  CHECK(is_final(d::resolved));
  CHECK(is_final(d::discarded));
  CHECK_FALSE(is_final(d::acknowledged));
}

TEST_CASE("dead_letter_rules: operator actions") {
  auto r = apply_action(dl_status::pending, dl_action::retry);
  REQUIRE(r.is_ok());
  CHECK(*r == dl_status::scheduled);
  CHECK(*apply_action(dl_status::pending, dl_action::acknowledge) == dl_status::acknowledged);
  CHECK(*apply_action(dl_status::acknowledged, dl_action::retry) == dl_status::scheduled);
  CHECK(*apply_action(dl_status::scheduled, dl_action::discard) == dl_status::discarded);
  auto bad = apply_action(dl_status::resolved, dl_action::discard);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.error().code() == errc::conflict);
  CHECK_FALSE(apply_action(dl_status::acknowledged, dl_action::acknowledge).is_ok());
  CHECK_FALSE(apply_action(dl_status::discarded, dl_action::retry).is_ok());
  CHECK(parse_dl_action("acknowledge") == dl_action::acknowledge);
  CHECK_FALSE(parse_dl_action("delete"));
}

TEST_CASE("dead_letter_rules: JSON configuration") {
  dead_letter_rules defaults;
  auto round = dead_letter_rules::from_json(nlohmann::json::parse(defaults.to_json().dump()));
  REQUIRE(round.is_ok());
  CHECK(*round == defaults);
  CHECK(defaults.to_json()["invalid_payload"]["auto_retry_after_ms"].is_null());

  auto custom = dead_letter_rules::from_json(nlohmann::json::parse(R"({
    "server_error": {"auto_retry_after_ms": 600000, "retention_ms": 1000},
    "timeout": {"auto_retry_after_ms": null},
    "validation": {"auto_retry_after_ms": 1000, "max_auto_retries": 1}
  })"));
  REQUIRE(custom.is_ok());
  CHECK(custom->next_retry_at(failure_reason::server_error, t0) == t0 + 600000);
  CHECK(custom->expires_at(failure_reason::server_error, t0) == t0 + 1000);
  CHECK(custom->rule(failure_reason::server_error).manual_review); // untouched member
  CHECK(custom->initial_status(failure_reason::timeout) == dl_status::pending);
  CHECK(custom->initial_status(failure_reason::invalid_payload) == dl_status::scheduled);
  CHECK_FALSE(custom->next_retry_at(failure_reason::invalid_payload, t0, 1));
  CHECK(custom->rule(failure_reason::rate_limit) == defaults.rule(failure_reason::rate_limit));

  auto refused = [](const char* text) {
    return !dead_letter_rules::from_json(nlohmann::json::parse(text)).is_ok();
  };
  CHECK(refused(R"({"meteor_strike": {}})"));
  CHECK(refused(R"({"timeout": {"retention_ms": -1}})"));
  CHECK(refused(R"({"timeout": {"auto_retry_after_ms": "soon"}})"));
  CHECK(refused(R"({"timeout": 5})"));
  CHECK(refused(R"([])"));

  dead_letter_rules r;
  dead_letter_rule negative;
  negative.retention_ms = -1;
  CHECK_FALSE(r.set_rule(failure_reason::timeout, negative).is_ok());
  CHECK(r == defaults);
}

} // namespace dead_letter_rules_test
