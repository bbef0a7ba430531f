// output.hpp (private to factum_inspect): what every subcommand shares to report: exit codes,
// the run context (streams, format, clock), aligned tables, JSON lines, UTC/local ISO 8601 times
// and the parsing of time arguments. Used by the one thread that runs a subcommand.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::tools {

/// Exit codes of `factum inspect` (docs/inspect.md, "Exit codes").
enum exit_code : int {
  exit_ok = 0,
  exit_verify_failed = 1, ///< verify found a problem
  exit_usage = 2,         ///< bad arguments
  exit_no_entity = 3,     ///< no such entity, file or data directory
  exit_not_factum = 4,    ///< a file factum did not write
  exit_newer_schema = 5,  ///< written by a newer factum
  exit_corrupt = 6,       ///< corrupt or unreadable file
  exit_server = 7,        ///< the server (HTTP) failed or refused
};

/// The exit code for a storage / client error.
int exit_code_for(errc code) noexcept;

/// Where and how a subcommand writes. One per run.
struct run_ctx {
  run_ctx(std::ostream& o, std::ostream& e) : out(o), err(e) {}

  std::ostream& out;
  std::ostream& err;
  bool json = false;                    ///< JSON lines instead of a table
  bool color = false;                   ///< ANSI colour in tables
  bool local_time = false;              ///< local time instead of UTC in tables
  std::function<int64_t()> clock;       ///< wall clock, ms since the epoch
  std::function<void(int64_t)> on_poll; ///< follow: after each poll (tests)
  std::string tool = "factum inspect";  ///< the prefix of messages

  /// Writes "<tool>: <message>" to err and returns `code`.
  int fail(int code, std::string_view message) const;
  /// fail(exit_code_for(st.code()), st.message()).
  int fail(const status& st) const;
  /// Writes "<tool>: <message>" to err (no exit code).
  void warn(std::string_view message) const;
  int64_t now() const;

  /// A time for a table cell: ISO 8601 with milliseconds, UTC ("Z") or local ("+01:00").
  std::string time(int64_t ms) const;
  /// `text` in bold/red/green when colour is on.
  std::string bold(std::string_view text) const;
  std::string red(std::string_view text) const;
  std::string green(std::string_view text) const;
  /// One compact JSON line.
  void json_line(const nlohmann::json& j) const;
};

/// ISO 8601 with milliseconds: "2024-01-17T14:00:00.000Z", or local time with its offset.
std::string format_time(int64_t ms, bool local);

/// Parses a time argument: epoch milliseconds ("1705500000000"), ISO 8601 ("2024-01-17",
/// "2024-01-17T14:00", "2024-01-17T14:00:00.250Z", "...+01:00"; no zone = UTC, or local with
/// `local`), or an age before `now_ms` ("90s", "15m", "2h", "7d", "500ms").
result<int64_t> parse_time_arg(std::string_view text, int64_t now_ms, bool local);

/// Parses a non-negative decimal integer (a seq); INVALID_ARGUMENT naming `what` otherwise.
result<int64_t> parse_count(std::string_view text, std::string_view what);

/// "-" for an empty cell.
inline std::string or_dash(std::string s) {
  return s.empty() ? "-" : s;
}

/// `s` cut to `max` characters (UTF-8 aware), ending in "..." when cut.
std::string ellipsize(std::string_view s, size_t max);

/// Human size: "812 B", "24.0 KiB", "3.2 MiB".
std::string human_bytes(uint64_t bytes);

/// A percentage of count/total with one decimal ("12.5%"), "-" when total is 0. Exact integer
/// arithmetic, rounded half up.
std::string percent(int64_t count, int64_t total);

/// An aligned text table: a header row and rows of cells; numeric columns right-aligned.
class text_table {
 public:
  struct column {
    std::string title;
    bool right = false; ///< right-align (numbers)
  };
  explicit text_table(std::vector<column> columns) : columns_(std::move(columns)) {}
  /// Adds a row; `styled` may hold the same cells with colour codes (widths come from `cells`).
  void add(std::vector<std::string> cells, std::vector<std::string> styled = {});
  size_t size() const noexcept { return rows_.size(); }
  /// Prints the header (bold when colour is on) and every row, two spaces between columns.
  void print(const run_ctx& ctx) const;

  /// Fixed-width streaming (follow): prints the header / one row with at least `widths`.
  void print_header(const run_ctx& ctx, const std::vector<size_t>& widths) const;
  void print_row(const run_ctx& ctx, const std::vector<size_t>& widths, size_t row) const;
  void clear() { rows_.clear(); }

 private:
  struct row {
    std::vector<std::string> cells;
    std::vector<std::string> styled;
  };
  void print_line(const run_ctx& ctx, const std::vector<size_t>& widths,
                  const std::vector<std::string>& cells, const std::vector<std::string>& styled,
                  bool header) const;
  std::vector<column> columns_;
  std::vector<row> rows_;
};

/// Display width of UTF-8 text (code points; good enough for the tool's own output).
size_t display_width(std::string_view s);

} // namespace factum::tools
