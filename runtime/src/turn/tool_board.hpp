// tool_board.hpp (private): the runtime's view of each configured tool across its entities,
// for operators (/metrics): errors by category, retries by outcome, dead letters, fast
// fails, breaker transitions by the state entered, and how many entities hold the tool's breaker
// open, half-open or disabled as last seen by this process. Tools are the configured names
// (runtime_config::tools and tool_policies): label values stay bounded, and a tool that is not
// configured is not counted here. Counters are atomics any CAF worker bumps; the breaker states
// are under a mutex (a breaker moves rarely); each move kicks the degradation watcher. The
// per-tool families of /metrics are registered here (tool_board.cpp) and collected at scrape
// time from these counters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "factum/entities/errors.hpp"
#include "factum/metrics/metrics.hpp"
#include "factum/resilience/circuit_breaker.hpp"

namespace factum::detail {

/// Error categories counted per tool (error_category's values, in order).
inline constexpr size_t tool_error_categories = 7;
/// Breaker states (resilience::breaker_state's values, in order).
inline constexpr size_t breaker_states = 5;

struct tool_counters {
  std::atomic<uint64_t> retries{0}, retried_ok{0}, budget_refused{0}, fast_fails{0},
    dead_letters{0};
  std::array<std::atomic<uint64_t>, tool_error_categories> errors{};
  std::array<std::atomic<uint64_t>, breaker_states> entered{}; ///< transitions into each state
};

/// One tool's counters at one instant, and its breakers by state (tool_board::snapshot).
struct tool_snapshot {
  std::string tool;
  uint64_t retries = 0, retried_ok = 0, budget_refused = 0, fast_fails = 0, dead_letters = 0;
  std::array<uint64_t, tool_error_categories> errors{};
  std::array<uint64_t, breaker_states> entered{};
  /// Entities whose breaker of this tool is in each state now, as last seen by this process
  /// (seen when it moves or when the entity loads it); closed is 0.
  std::array<uint64_t, breaker_states> breakers{};
};

class tool_board {
 public:
  /// One entry per name; the map is read-only afterwards. Registers the per-tool families in
  /// `r`.
  tool_board(const std::vector<std::string>& tools, metrics::registry& r);
  /// The counters of `tool`; null when it is not configured.
  tool_counters* find(const std::string& tool) const {
    auto it = counters_.find(tool);
    return it == counters_.end() ? nullptr : it->second.get();
  }
  /// `entity`'s breaker of `tool` is in state `s` now.
  void breaker_seen(const std::string& entity, const std::string& tool,
                    resilience::breaker_state s) {
    if (!find(tool))
      return;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& m = states_[tool];
      if (s == resilience::breaker_state::closed)
        m.erase(entity);
      else
        m[entity] = s;
    }
    if (on_move_)
      on_move_();
  }
  /// Called after each breaker_seen (any thread, no lock held): the degradation watcher's kick.
  /// Set before any entity runs.
  void on_breaker_move(std::function<void()> fn) { on_move_ = std::move(fn); }
  /// The entities whose breaker of each tool is open or forced open, by tool.
  std::map<std::string, std::vector<std::string>> open_breakers() const {
    std::map<std::string, std::vector<std::string>> out;
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [tool, m] : states_)
      for (auto& [entity, s] : m)
        if (s == resilience::breaker_state::open || s == resilience::breaker_state::forced_open)
          out[tool].push_back(entity);
    return out;
  }
  /// Every tool's counters now (collected by /metrics).
  std::vector<tool_snapshot> snapshot() const {
    std::vector<tool_snapshot> out;
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [name, c] : counters_) {
      tool_snapshot t;
      t.tool = name;
      t.retries = ld(c->retries);
      t.retried_ok = ld(c->retried_ok);
      t.budget_refused = ld(c->budget_refused);
      t.fast_fails = ld(c->fast_fails);
      t.dead_letters = ld(c->dead_letters);
      for (size_t i = 0; i < tool_error_categories; ++i)
        t.errors[i] = ld(c->errors[i]);
      for (size_t i = 0; i < breaker_states; ++i)
        t.entered[i] = ld(c->entered[i]);
      if (auto it = states_.find(name); it != states_.end())
        for (auto& [entity, s] : it->second)
          ++t.breakers[static_cast<size_t>(s)];
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::map<std::string, std::unique_ptr<tool_counters>> counters_;
  mutable std::mutex mu_;
  /// tool -> entity -> its breaker's state, when not closed (under mu_).
  std::map<std::string, std::map<std::string, resilience::breaker_state>> states_;
  std::function<void()> on_move_;
};

} // namespace factum::detail
