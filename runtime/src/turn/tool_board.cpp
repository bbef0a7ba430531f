// tool_board.cpp: the per-tool families of /metrics, registered once when the board is made and
// collected from the board's counters and breaker states at each scrape (any thread).
#include "turn/tool_board.hpp"

namespace factum::detail {

namespace {

constexpr std::string_view breaker_state_labels[] = {"closed", "open", "half_open", "forced_open",
                                                     "disabled"};

} // namespace

tool_board::tool_board(const std::vector<std::string>& tools, metrics::registry& r) {
  for (auto& t : tools)
    counters_.emplace(t, std::make_unique<tool_counters>());
  using metrics::kind;
  auto each = [this](auto write) {
    return [this, write](metrics::sample_writer& w) {
      for (auto& t : snapshot())
        write(w, t);
    };
  };
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  r.add("factum_tool_errors_total", "Failed tool attempts by tool and error category.",
        kind::counter, {"tool", "category"},
        each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          for (size_t i = 0; i < t.errors.size(); ++i)
            w.add({t.tool, to_string(static_cast<error_category>(i))}, n(t.errors[i]));
        }));
  r.add("factum_tool_retry_outcomes_total",
        "Tool retries by tool: attempted, calls that succeeded after retrying, retries the retry "
        "budget refused.",
        kind::counter, {"tool", "outcome"},
        each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          w.add({t.tool, "attempted"}, n(t.retries));
          w.add({t.tool, "succeeded"}, n(t.retried_ok));
          w.add({t.tool, "budget_refused"}, n(t.budget_refused));
        }));
  r.add("factum_tool_dead_letters_total", "Tool calls that ended as a new dead letter, by tool.",
        kind::counter, {"tool"}, each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          w.add({t.tool}, n(t.dead_letters));
        }));
  r.add("factum_tool_fast_fails_total", "Tool attempts an open circuit breaker refused, by tool.",
        kind::counter, {"tool"}, each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          w.add({t.tool}, n(t.fast_fails));
        }));
  r.add("factum_tool_breaker_transitions_total",
        "Circuit breaker transitions by tool and the state entered.", kind::counter, {"tool", "to"},
        each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          for (size_t i = 0; i < t.entered.size(); ++i)
            w.add({t.tool, breaker_state_labels[i]}, n(t.entered[i]));
        }));
  r.add("factum_tool_breakers",
        "Entities whose breaker of the tool is in the state, as last seen by this process.",
        kind::gauge, {"tool", "state"},
        each([n](metrics::sample_writer& w, const tool_snapshot& t) {
          for (size_t i = 1; i < t.breakers.size(); ++i)
            w.add({t.tool, breaker_state_labels[i]}, n(t.breakers[i]));
        }));
}

} // namespace factum::detail
