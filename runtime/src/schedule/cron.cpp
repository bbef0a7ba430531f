// cron.cpp: parsing and evaluating cron expressions in a time zone (cron.hpp). Pure functions
// of their arguments and the system's time zone database; any thread.
#include "schedule/cron.hpp"

#include <date/tz.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace factum::detail {

namespace {

using std::chrono::minutes;

/// How far next_after() looks: ten years covers February 29 (at most eight years apart).
constexpr int64_t horizon_days = 3660;
/// The largest offset change of any zone is well under this (the search starts this much before
/// the instant, in local time, so that a repeated hour is seen from its first occurrence).
constexpr int64_t lookback_min = 3 * 60;

constexpr std::array<std::string_view, 12> month_names = {"jan", "feb", "mar", "apr", "may", "jun",
                                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> weekday_names = {"sun", "mon", "tue", "wed",
                                                           "thu", "fri", "sat"};

struct field_def {
  const char* name;
  int lo;
  int hi;
  const std::string_view* names; ///< names of lo..hi, or null
  size_t name_count;
};

const field_def fields[5] = {
  {"minute", 0, 59, nullptr, 0},
  {"hour", 0, 23, nullptr, 0},
  {"day of month", 1, 31, nullptr, 0},
  {"month", 1, 12, month_names.data(), month_names.size()},
  {"day of week", 0, 7, weekday_names.data(), weekday_names.size()},
};

status field_error(const field_def& f, std::string_view text, const std::string& what) {
  return {errc::invalid_argument,
          "cron " + std::string(f.name) + " field '" + std::string(text) + "': " + what};
}

/// A number or (for month and weekday) a name; nullopt when it is neither.
std::optional<int> value_of(const field_def& f, std::string_view s) {
  if (s.empty())
    return std::nullopt;
  if (std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (s.size() > 3)
      return std::nullopt;
    return std::stoi(std::string(s));
  }
  std::string lower;
  for (char c : s)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < f.name_count; ++i)
    if (f.names[i] == lower)
      return f.lo + static_cast<int>(i);
  return std::nullopt;
}

/// Parses one field into `bits` (indexes lo..hi).
status parse_field(const field_def& f, std::string_view text, std::vector<bool>& bits) {
  bits.assign(static_cast<size_t>(f.hi + 1), false);
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    start = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (item.empty())
      return field_error(f, text, "empty list element");
    int step = 1;
    bool has_step = item.find('/') != std::string_view::npos;
    if (auto slash = item.find('/'); slash != std::string_view::npos) {
      auto s = item.substr(slash + 1);
      auto v = s.empty() || s.size() > 3 ||
                   !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })
                 ? std::nullopt
                 : std::optional<int>(std::stoi(std::string(s)));
      if (!v || *v < 1 || *v > f.hi)
        return field_error(f, text,
                           "step '" + std::string(s) + "' must be 1 to " + std::to_string(f.hi));
      step = *v;
      item = item.substr(0, slash);
    }
    int lo = f.lo;
    int hi = f.hi;
    if (item != "*") {
      auto dash = item.find('-');
      auto a = value_of(f, item.substr(0, dash));
      if (!a)
        return field_error(f, text, "'" + std::string(item.substr(0, dash)) + "' is not a value");
      lo = *a;
      if (dash != std::string_view::npos) {
        auto b = value_of(f, item.substr(dash + 1));
        if (!b)
          return field_error(f, text,
                             "'" + std::string(item.substr(dash + 1)) + "' is not a value");
        hi = *b;
      } else if (!has_step) {
        hi = lo; // a single value; N/STEP runs from N to the maximum
      }
      if (lo < f.lo || hi > f.hi)
        return field_error(
          f, text, "values must be " + std::to_string(f.lo) + " to " + std::to_string(f.hi));
      if (lo > hi)
        return field_error(f, text, "a range must not run backwards");
    }
    for (int v = lo; v <= hi; v += step)
      bits[static_cast<size_t>(v)] = true;
  }
  return {};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

/// The five fields of a nickname, or the expression itself.
std::string expand_nickname(std::string_view expr) {
  static const std::pair<std::string_view, std::string_view> nicknames[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"}};
  for (auto& [n, e] : nicknames)
    if (expr == n)
      return std::string(e);
  return std::string(expr);
}

} // namespace

// -- parsing ------------------------------------------------------------------------------------

result<cron_schedule> cron_schedule::parse(std::string_view expr, std::string_view time_zone) {
  cron_schedule c;
  c.expr_ = std::string(trim(expr));
  c.zone_name_ = time_zone.empty() ? "UTC" : std::string(time_zone);
  if (!c.expr_.empty() && c.expr_[0] == '@' && expand_nickname(c.expr_) == c.expr_)
    return status{errc::invalid_argument, "unknown cron nickname '" + c.expr_ + "'"};
  std::string text = expand_nickname(c.expr_);
  std::vector<std::string_view> parts;
  std::string_view rest = text;
  while (!(rest = trim(rest)).empty()) {
    size_t end = 0;
    while (end < rest.size() && !std::isspace(static_cast<unsigned char>(rest[end])))
      ++end;
    parts.push_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  if (parts.size() != 5)
    return status{errc::invalid_argument,
                  "a cron expression has 5 fields (minute hour day-of-month month day-of-week), '" +
                    c.expr_ + "' has " + std::to_string(parts.size())};
  std::vector<bool> bits;
  for (size_t i = 0; i < 5; ++i) {
    if (auto st = parse_field(fields[i], parts[i], bits); !st)
      return st;
    for (size_t v = 0; v < bits.size(); ++v) {
      if (!bits[v])
        continue;
      switch (i) {
      case 0: c.minutes_.set(v); break;
      case 1: c.hours_.set(v); break;
      case 2: c.days_.set(v); break;
      case 3: c.months_.set(v); break;
      default: c.weekdays_.set(v % 7); break; // 7 is Sunday too
      }
    }
  }
  c.days_star_ = parts[2][0] == '*';
  c.weekdays_star_ = parts[4][0] == '*';
  c.wildcard_time_ = parts[0][0] == '*' || parts[1][0] == '*';
  try {
    c.zone_ = date::locate_zone(c.zone_name_);
  } catch (const std::exception& e) {
    return status{errc::invalid_argument,
                  "unknown time zone '" + c.zone_name_ + "' (an IANA name such as Europe/Berlin)"};
  }
  // An expression such as "0 0 30 2 *" never fires: refuse it rather than never waking.
  int64_t y2000 = date::sys_days(date::year{2000} / 1 / 1).time_since_epoch().count();
  if (!c.next_local(y2000 * 1440, (y2000 + horizon_days) * 1440))
    return status{errc::invalid_argument,
                  "cron expression '" + c.expr_ + "' matches no day (such as February 30)"};
  return c;
}

// -- evaluation ---------------------------------------------------------------------------------

bool cron_schedule::day_matches(int64_t local_day) const {
  date::sys_days d{date::days{local_day}};
  date::year_month_day ymd{d};
  if (!months_[static_cast<unsigned>(ymd.month())])
    return false;
  bool dom = days_[static_cast<unsigned>(ymd.day())];
  bool dow = weekdays_[date::weekday{d}.c_encoding()];
  // crontab(5): both restricted, either may match; otherwise both must.
  return days_star_ || weekdays_star_ ? dom && dow : dom || dow;
}

std::optional<int64_t> cron_schedule::next_local(int64_t from, int64_t limit) const {
  int64_t t = from;
  while (t <= limit) {
    int64_t day = t >= 0 ? t / 1440 : (t - 1439) / 1440;
    if (!day_matches(day)) {
      t = (day + 1) * 1440;
      continue;
    }
    auto h = static_cast<size_t>((t - day * 1440) / 60);
    auto m = static_cast<size_t>((t - day * 1440) % 60);
    if (!hours_[h]) {
      t = day * 1440 + static_cast<int64_t>(h + 1) * 60;
      continue;
    }
    if (!minutes_[m]) {
      ++t;
      continue;
    }
    return t;
  }
  return std::nullopt;
}

int cron_schedule::instants_of(int64_t local_min, int64_t (&out)[2]) const {
  using namespace std::chrono;
  date::local_seconds ls{seconds{local_min * 60}};
  auto info = zone_->get_info(ls);
  auto ms = [](sys_seconds t) { return duration_cast<milliseconds>(t.time_since_epoch()).count(); };
  switch (info.result) {
  case date::local_info::unique:
    out[0] = ms(sys_seconds{ls.time_since_epoch() - info.first.offset});
    return 1;
  case date::local_info::ambiguous: // the first occurrence, then (wildcard times) the second
    out[0] = ms(sys_seconds{ls.time_since_epoch() - info.first.offset});
    out[1] = ms(sys_seconds{ls.time_since_epoch() - info.second.offset});
    return wildcard_time_ ? 2 : 1;
  case date::local_info::nonexistent: // skipped: fixed times fire at the change
    out[0] = ms(info.first.end);
    return wildcard_time_ ? 0 : 1;
  }
  return 0;
}

std::optional<int64_t> cron_schedule::next_after(int64_t after_ms) const {
  using namespace std::chrono;
  sys_seconds after{duration_cast<seconds>(milliseconds(after_ms)) -
                    (after_ms % 1000 < 0 ? seconds(1) : seconds(0))};
  auto local = zone_->to_local(after);
  int64_t from = duration_cast<minutes>(local.time_since_epoch()).count();
  // Only near a change of offset can a local minute before the instant's own fire after it (its
  // second occurrence, when the change repeats it): look back then.
  auto period = zone_->get_info(after);
  if (after - period.begin < hours(3) || period.end - after < hours(3))
    from -= lookback_min;
  int64_t limit = from + horizon_days * 1440;
  // The first occurrences of matching local minutes never decrease with the minute: the first
  // one after the instant bounds the answer. A second occurrence (a repeated hour) of an
  // earlier minute may come before it; the look-back covers every such minute.
  std::optional<int64_t> best;
  while (auto m = next_local(from, limit)) {
    int64_t at[2];
    int n = instants_of(*m, at);
    if (n == 2 && at[1] > after_ms && (!best || at[1] < *best))
      best = at[1];
    if (n >= 1 && at[0] > after_ms)
      return best && *best < at[0] ? *best : at[0];
    from = *m + 1;
  }
  return best;
}

} // namespace factum::detail
