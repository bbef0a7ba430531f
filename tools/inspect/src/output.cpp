// output.cpp: exit codes, run context, tables, times (see output.hpp). Used by the one thread
// that runs a subcommand.
#include "output.hpp"

#include <cstdio>
#include <ctime>
#include <limits>
#include <ostream>

#include "factum/storage/fact.hpp"

namespace factum::tools {

int exit_code_for(errc code) noexcept {
  switch (code) {
  case errc::ok: return exit_ok;
  case errc::invalid_argument: return exit_usage;
  case errc::not_found: return exit_no_entity;
  case errc::not_factum_file: return exit_not_factum;
  case errc::newer_schema: return exit_newer_schema;
  case errc::unavailable: return exit_server;
  default: return exit_corrupt;
  }
}

// -- run context --------------------------------------------------------------------------------

int run_ctx::fail(int code, std::string_view message) const {
  warn(message);
  return code;
}

int run_ctx::fail(const status& st) const {
  return fail(exit_code_for(st.code()), st.message());
}

void run_ctx::warn(std::string_view message) const {
  err << tool << ": " << message << '\n' << std::flush;
}

int64_t run_ctx::now() const {
  return clock();
}

std::string run_ctx::time(int64_t ms) const {
  return format_time(ms, local_time);
}

std::string run_ctx::bold(std::string_view t) const {
  return color ? "\x1b[1m" + std::string(t) + "\x1b[0m" : std::string(t);
}
std::string run_ctx::red(std::string_view t) const {
  return color ? "\x1b[31m" + std::string(t) + "\x1b[0m" : std::string(t);
}
std::string run_ctx::green(std::string_view t) const {
  return color ? "\x1b[32m" + std::string(t) + "\x1b[0m" : std::string(t);
}

void run_ctx::json_line(const nlohmann::json& j) const {
  out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

// -- times --------------------------------------------------------------------------------------

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

unsigned month_days(int64_t y, unsigned m) {
  static constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leap(y) ? 29 : days[m - 1];
}

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

} // namespace

std::string format_time(int64_t ms, bool local) {
  if (!local)
    return format_utc_ms(ms);
  time_t secs = static_cast<time_t>(floor_div(ms, 1000));
  int milli = static_cast<int>(ms - static_cast<int64_t>(secs) * 1000);
  std::tm t{};
  localtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03d", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, milli);
  std::string out = buf;
  long off = t.tm_gmtoff / 60;
  char sign = off < 0 ? '-' : '+';
  if (off < 0)
    off = -off;
  std::snprintf(buf, sizeof buf, "%c%02ld:%02ld", sign, off / 60, off % 60);
  return out + buf;
}

result<int64_t> parse_count(std::string_view text, std::string_view what) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != text.npos)
    return status{errc::invalid_argument, std::string(what) +
                                            " must be a non-negative integer, got \"" +
                                            std::string(text.substr(0, 40)) + "\""};
  int64_t v = 0;
  for (char c : text)
    v = v * 10 + (c - '0');
  return v;
}

result<int64_t> parse_time_arg(std::string_view text, int64_t now_ms, bool local) {
  auto bad = [&] {
    return status{errc::invalid_argument,
                  "bad time \"" + std::string(text.substr(0, 60)) +
                    "\": use ISO 8601 (2024-01-17T14:00:00Z), epoch milliseconds or an age "
                    "such as 15m, 2h, 7d"};
  };
  if (text.empty())
    return bad();
  size_t digits = text.find_first_not_of("0123456789");
  if (digits == std::string_view::npos) // epoch milliseconds
    return parse_count(text, "time");
  if (digits > 0 && digits <= 12) { // an age: <n><unit>
    auto unit = text.substr(digits);
    int64_t mult = 0;
    if (unit == "ms")
      mult = 1;
    else if (unit == "s")
      mult = 1000;
    else if (unit == "m")
      mult = 60'000;
    else if (unit == "h")
      mult = 3'600'000;
    else if (unit == "d")
      mult = 86'400'000;
    else if (unit == "w")
      mult = 7 * 86'400'000LL;
    if (mult) {
      auto n = parse_count(text.substr(0, digits), "age");
      if (!n || *n > std::numeric_limits<int64_t>::max() / mult) // found by fact_filter_fuzz
        return bad();
      return now_ms - *n * mult;
    }
  }
  // ISO 8601: YYYY-MM-DD[(T| )HH:MM[:SS[.fff]]][Z|(+|-)HH[:]MM]
  size_t i = 0;
  auto num = [&](size_t n, int64_t& v) {
    if (i + n > text.size())
      return false;
    v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = text[i + k];
      if (c < '0' || c > '9')
        return false;
      v = v * 10 + (c - '0');
    }
    i += n;
    return true;
  };
  auto lit = [&](char c) {
    if (i < text.size() && text[i] == c) {
      ++i;
      return true;
    }
    return false;
  };
  int64_t y, mo, d, h = 0, mi = 0, s = 0, ms = 0;
  if (!num(4, y) || !lit('-') || !num(2, mo) || !lit('-') || !num(2, d))
    return bad();
  if (mo < 1 || mo > 12 || d < 1 || d > month_days(y, static_cast<unsigned>(mo)))
    return bad();
  if (lit('T') || lit(' ')) {
    if (!num(2, h) || !lit(':') || !num(2, mi))
      return bad();
    if (lit(':')) {
      if (!num(2, s))
        return bad();
      if (lit('.')) {
        size_t start = i;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9')
          ++i;
        size_t n = i - start;
        if (n == 0 || n > 9)
          return bad();
        std::string frac(text.substr(start, std::min<size_t>(n, 3)));
        frac.append(3 - frac.size(), '0');
        ms = std::stoi(frac);
      }
    }
    if (h > 23 || mi > 59 || s > 59)
      return bad();
  }
  std::optional<int64_t> offset_min;
  if (lit('Z') || lit('z')) {
    offset_min = 0;
  } else if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    int sign = text[i] == '-' ? -1 : 1;
    ++i;
    int64_t oh, om;
    if (!num(2, oh))
      return bad();
    lit(':');
    if (!num(2, om) || oh > 23 || om > 59)
      return bad();
    offset_min = sign * (oh * 60 + om);
  }
  if (i != text.size())
    return bad();
  if (!offset_min && local) {
    std::tm t{};
    t.tm_year = static_cast<int>(y - 1900);
    t.tm_mon = static_cast<int>(mo - 1);
    t.tm_mday = static_cast<int>(d);
    t.tm_hour = static_cast<int>(h);
    t.tm_min = static_cast<int>(mi);
    t.tm_sec = static_cast<int>(s);
    t.tm_isdst = -1;
    time_t secs = std::mktime(&t);
    if (secs == static_cast<time_t>(-1))
      return bad();
    return static_cast<int64_t>(secs) * 1000 + ms;
  }
  int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  int64_t secs = days * 86400 + h * 3600 + mi * 60 + s - offset_min.value_or(0) * 60;
  return secs * 1000 + ms;
}

// -- cells --------------------------------------------------------------------------------------

size_t display_width(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xc0) != 0x80)
      ++n;
  return n;
}

std::string ellipsize(std::string_view s, size_t max) {
  if (display_width(s) <= max)
    return std::string(s);
  size_t keep = max > 3 ? max - 3 : 0, n = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) {
      if (n == keep)
        break;
      ++n;
    }
  }
  return std::string(s.substr(0, i)) + "...";
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b < 1024)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < 1024ull * 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024.0);
  else if (b < 1024ull * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string percent(int64_t count, int64_t total) {
  if (total <= 0)
    return "-";
  int64_t tenths = (count * 2000 + total) / (2 * total); // round half up
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + "%";
}

// -- tables -------------------------------------------------------------------------------------

void text_table::add(std::vector<std::string> cells, std::vector<std::string> styled) {
  cells.resize(columns_.size());
  rows_.push_back({std::move(cells), std::move(styled)});
}

void text_table::print_line(const run_ctx& ctx, const std::vector<size_t>& widths,
                            const std::vector<std::string>& cells,
                            const std::vector<std::string>& styled, bool header) const {
  std::string line;
  for (size_t c = 0; c < columns_.size(); ++c) {
    const std::string& plain = cells[c];
    std::string shown =
      header ? ctx.bold(plain) : (c < styled.size() && !styled[c].empty() ? styled[c] : plain);
    size_t pad = widths[c] > display_width(plain) ? widths[c] - display_width(plain) : 0;
    bool last = c + 1 == columns_.size();
    if (c > 0)
      line += "  ";
    if (columns_[c].right) {
      line.append(pad, ' ');
      line += shown;
    } else {
      line += shown;
      if (!last)
        line.append(pad, ' ');
    }
  }
  ctx.out << line << '\n';
}

void text_table::print(const run_ctx& ctx) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c)
    widths[c] = display_width(columns_[c].title);
  for (auto& r : rows_)
    for (size_t c = 0; c < columns_.size(); ++c)
      widths[c] = std::max(widths[c], display_width(r.cells[c]));
  print_header(ctx, widths);
  for (size_t i = 0; i < rows_.size(); ++i)
    print_row(ctx, widths, i);
}

void text_table::print_header(const run_ctx& ctx, const std::vector<size_t>& widths) const {
  std::vector<std::string> titles;
  for (auto& c : columns_)
    titles.push_back(c.title);
  print_line(ctx, widths, titles, {}, true);
}

void text_table::print_row(const run_ctx& ctx, const std::vector<size_t>& widths, size_t i) const {
  print_line(ctx, widths, rows_[i].cells, rows_[i].styled, false);
}

} // namespace factum::tools
