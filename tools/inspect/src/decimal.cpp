// decimal.cpp: exact decimal addition over digit strings (see decimal.hpp). Pure; any thread.
#include "decimal.hpp"

#include <algorithm>

namespace factum::tools {

namespace {

// a >= b for magnitudes of equal length or different length without leading zeros.
int compare_magnitude(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string add_magnitude(const std::string& a, const std::string& b) {
  std::string out;
  out.reserve(std::max(a.size(), b.size()) + 1);
  int carry = 0;
  auto i = a.rbegin(), j = b.rbegin();
  while (i != a.rend() || j != b.rend() || carry) {
    int s = carry;
    if (i != a.rend())
      s += *i++ - '0';
    if (j != b.rend())
      s += *j++ - '0';
    out.push_back(static_cast<char>('0' + s % 10));
    carry = s / 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// a - b with a >= b.
std::string sub_magnitude(const std::string& a, const std::string& b) {
  std::string out;
  out.reserve(a.size());
  int borrow = 0;
  auto i = a.rbegin(), j = b.rbegin();
  while (i != a.rend()) {
    int d = (*i++ - '0') - borrow;
    if (j != b.rend())
      d -= *j++ - '0';
    borrow = d < 0;
    out.push_back(static_cast<char>('0' + (d + 10) % 10));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

} // namespace

result<exact_decimal> exact_decimal::parse(std::string_view text) {
  auto bad = [&] {
    return status{errc::invalid_argument,
                  "not an exact decimal: \"" + std::string(text.substr(0, 60)) + "\""};
  };
  exact_decimal d;
  size_t i = 0;
  if (!text.empty() && text[0] == '-') {
    d.negative_ = true;
    ++i;
  }
  std::string digits;
  size_t int_digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    digits.push_back(text[i++]), ++int_digits;
  if (int_digits == 0)
    return bad();
  if (i < text.size()) {
    if (text[i] != '.')
      return bad();
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
      digits.push_back(text[i++]), ++d.scale_;
    if (d.scale_ == 0 || i != text.size())
      return bad();
  }
  d.digits_ = std::move(digits);
  d.trim();
  return d;
}

void exact_decimal::rescale(size_t scale) {
  if (scale > scale_) {
    digits_.append(scale - scale_, '0');
    scale_ = scale;
    trim();
  }
}

void exact_decimal::trim() {
  auto nz = digits_.find_first_not_of('0');
  if (nz == std::string::npos) {
    digits_ = "0";
    negative_ = false;
  } else if (nz > 0) {
    digits_.erase(0, nz);
  }
}

bool exact_decimal::is_zero() const noexcept {
  return digits_ == "0";
}

exact_decimal& exact_decimal::operator+=(const exact_decimal& other) {
  exact_decimal b = other;
  size_t scale = std::max(scale_, b.scale_);
  rescale(scale);
  b.rescale(scale);
  if (negative_ == b.negative_) {
    digits_ = add_magnitude(digits_, b.digits_);
  } else if (compare_magnitude(digits_, b.digits_) >= 0) {
    digits_ = sub_magnitude(digits_, b.digits_);
  } else {
    digits_ = sub_magnitude(b.digits_, digits_);
    negative_ = b.negative_;
  }
  trim();
  return *this;
}

std::string exact_decimal::to_string(size_t min_scale) const {
  if (min_scale > scale_) {
    exact_decimal wider = *this;
    wider.rescale(min_scale);
    return wider.to_string();
  }
  std::string m = digits_;
  if (m.size() <= scale_)
    m.insert(0, scale_ + 1 - m.size(), '0');
  if (scale_ > 0)
    m.insert(m.size() - scale_, 1, '.');
  return negative_ && !is_zero() ? "-" + m : m;
}

} // namespace factum::tools
