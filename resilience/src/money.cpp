// money.cpp: exact decimal arithmetic on digit strings. Plain value types; any single thread.
#include "factum/resilience/money.hpp"

#include <algorithm>

#include "json_util.hpp"

namespace factum::resilience {

namespace {

// Compares two magnitudes without leading zeros.
std::strong_ordering compare_mag(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return a.size() <=> b.size();
  int c = a.compare(b);
  return c < 0 ? std::strong_ordering::less
               : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

std::string strip_leading(std::string s) {
  size_t nz = s.find_first_not_of('0');
  if (nz == std::string::npos)
    return "0";
  return s.substr(nz);
}

std::string add_mag(const std::string& a, const std::string& b) {
  std::string out;
  out.reserve(std::max(a.size(), b.size()) + 1);
  int carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
    int d = carry;
    if (i < a.size())
      d += a[a.size() - 1 - i] - '0';
    if (i < b.size())
      d += b[b.size() - 1 - i] - '0';
    out.push_back(static_cast<char>('0' + d % 10));
    carry = d / 10;
  }
  std::reverse(out.begin(), out.end());
  return strip_leading(std::move(out));
}

// a - b for a >= b.
std::string sub_mag(const std::string& a, const std::string& b) {
  std::string out;
  out.reserve(a.size());
  int borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int d = (a[a.size() - 1 - i] - '0') - borrow;
    if (i < b.size())
      d -= b[b.size() - 1 - i] - '0';
    borrow = d < 0 ? 1 : 0;
    out.push_back(static_cast<char>('0' + d + 10 * borrow));
  }
  std::reverse(out.begin(), out.end());
  return strip_leading(std::move(out));
}

// Appends zeros so that `digits` (at `scale`) gets scale `target` (>= scale).
std::string rescale(const std::string& digits, int scale, int target) {
  if (digits == "0")
    return digits;
  return digits + std::string(static_cast<size_t>(target - scale), '0');
}

} // namespace

decimal::decimal(int64_t units) {
  negative_ = units < 0;
  // Via uint64_t so that INT64_MIN does not overflow.
  uint64_t mag = negative_ ? 0 - static_cast<uint64_t>(units) : static_cast<uint64_t>(units);
  digits_ = std::to_string(mag);
  normalise();
}

void decimal::normalise() {
  digits_ = strip_leading(std::move(digits_));
  while (scale_ > 0 && digits_.size() > 1 && digits_.back() == '0') {
    digits_.pop_back();
    --scale_;
  }
  if (digits_ == "0") {
    scale_ = 0;
    negative_ = false;
  }
}

result<decimal> decimal::parse(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return detail::invalid("amount \"" + std::string(text.substr(0, 64)) + "\"", why);
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && s.front() == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  size_t dot = s.find('.');
  std::string_view int_part = s.substr(0, dot);
  std::string_view frac_part =
    dot == std::string_view::npos ? std::string_view{} : s.substr(dot + 1);
  auto all_digits = [](std::string_view p) {
    return std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (int_part.empty() || !all_digits(int_part) ||
      (dot != std::string_view::npos && (frac_part.empty() || !all_digits(frac_part))))
    return bad("must be a decimal number like 12 or 0.005 (no exponent, sign '-' only)");
  size_t first = int_part.find_first_not_of('0');
  size_t int_digits = first == std::string_view::npos ? 1 : int_part.size() - first;
  size_t last = frac_part.find_last_not_of('0');
  size_t frac_digits = last == std::string_view::npos ? 0 : last + 1;
  if (int_digits > max_integer_digits || frac_digits > max_fraction_digits)
    return bad("has too many digits");
  decimal d;
  d.negative_ = negative;
  d.digits_ = std::string(int_part) + std::string(frac_part.substr(0, frac_digits));
  d.scale_ = static_cast<int>(frac_digits);
  d.normalise();
  return d;
}

result<decimal> decimal::from_json(const nlohmann::json& j) {
  if (j.is_string())
    return parse(j.get_ref<const std::string&>());
  if (j.is_number_unsigned())
    return parse(std::to_string(j.get<uint64_t>()));
  if (j.is_number_integer())
    return decimal(j.get<int64_t>());
  if (j.is_number_float())
    return detail::invalid("amount",
                           "must be a string (a JSON floating-point number is not exact)");
  return detail::invalid("amount", "must be a decimal string");
}

std::string decimal::to_string() const {
  return to_string(0);
}

std::string decimal::to_string(int min_fraction_digits) const {
  int scale = std::max(scale_, min_fraction_digits);
  std::string mag = digits_ + std::string(static_cast<size_t>(scale - scale_), '0');
  if (mag.size() <= static_cast<size_t>(scale))
    mag.insert(0, static_cast<size_t>(scale) + 1 - mag.size(), '0');
  std::string out = negative_ ? "-" : "";
  if (scale == 0)
    return out + mag;
  size_t split = mag.size() - static_cast<size_t>(scale);
  return out + mag.substr(0, split) + "." + mag.substr(split);
}

decimal decimal::operator-() const {
  decimal d = *this;
  if (!d.is_zero())
    d.negative_ = !d.negative_;
  return d;
}

decimal& decimal::operator+=(const decimal& o) {
  int scale = std::max(scale_, o.scale_);
  std::string a = rescale(digits_, scale_, scale);
  std::string b = rescale(o.digits_, o.scale_, scale);
  if (negative_ == o.negative_) {
    digits_ = add_mag(a, b);
  } else if (compare_mag(a, b) >= 0) {
    digits_ = sub_mag(a, b);
  } else {
    digits_ = sub_mag(b, a);
    negative_ = o.negative_;
  }
  scale_ = scale;
  normalise();
  return *this;
}

decimal& decimal::operator-=(const decimal& o) {
  return *this += -o;
}

std::strong_ordering operator<=>(const decimal& a, const decimal& b) {
  if (a.negative_ != b.negative_)
    return a.negative_ ? std::strong_ordering::less : std::strong_ordering::greater;
  int scale = std::max(a.scale_, b.scale_);
  auto mag = compare_mag(rescale(a.digits_, a.scale_, scale), rescale(b.digits_, b.scale_, scale));
  if (a.negative_)
    return 0 <=> mag; // reversed for negatives
  return mag;
}

void money_totals::add(std::string_view currency, const decimal& amount) {
  auto it = totals_.find(currency);
  if (it == totals_.end())
    it = totals_.emplace(std::string(currency), decimal{}).first;
  it->second += amount;
}

decimal money_totals::total(std::string_view currency) const {
  auto it = totals_.find(currency);
  return it == totals_.end() ? decimal{} : it->second;
}

nlohmann::json money_totals::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [currency, amount] : totals_)
    j[currency] = amount.to_string();
  return j;
}

} // namespace factum::resilience
