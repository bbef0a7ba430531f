// factum/resilience/money.hpp: exact decimal amounts for cost facts ("0.005" USD) and their sums
// by currency. Never binary floating point. Plain value types; any single thread (not
// thread-safe while being modified).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::resilience {

/// An exact signed decimal number of arbitrary size, e.g. an amount of money.
///
/// Kept normalised (no leading zeros, no trailing zeros after the point, zero is "0" and never
/// negative), so equal numbers have one representation: "1.50" == "1.5" and to_string() gives
/// "1.5". Addition and subtraction are exact; there is no division.
class decimal {
 public:
  /// Most digits accepted by parse() before and after the point (after normalisation).
  static constexpr size_t max_integer_digits = 40;
  static constexpr size_t max_fraction_digits = 30;

  /// Zero.
  decimal() = default;
  /// An integer.
  explicit decimal(int64_t units);

  /// Parses `-?[0-9]+(\.[0-9]+)?` ("0.005", "-12", "1.50"); no exponent, no '+', no spaces;
  /// INVALID_ARGUMENT otherwise or beyond the digit limits.
  static result<decimal> parse(std::string_view text);
  /// A JSON string as parse(), or a JSON integer; a JSON floating-point number is refused
  /// (INVALID_ARGUMENT): it may already have lost digits.
  static result<decimal> from_json(const nlohmann::json& j);

  /// The normalised text: "0.3", "-12", "0".
  std::string to_string() const;
  /// The text with at least `min_fraction_digits` digits after the point, padding with zeros
  /// (never rounding): to_string(2) of 0.3 is "0.30", of 0.005 is "0.005".
  std::string to_string(int min_fraction_digits) const;
  /// to_string() as a JSON string.
  nlohmann::json to_json() const { return to_string(); }

  bool is_zero() const noexcept { return digits_ == "0"; }
  bool is_negative() const noexcept { return negative_; }
  /// Digits after the point in the normalised form.
  int scale() const noexcept { return scale_; }

  /// The negated number (zero stays zero).
  decimal operator-() const;
  /// Exact addition.
  decimal& operator+=(const decimal& o);
  /// Exact subtraction.
  decimal& operator-=(const decimal& o);
  friend decimal operator+(decimal a, const decimal& b) { return a += b; }
  friend decimal operator-(decimal a, const decimal& b) { return a -= b; }

  friend bool operator==(const decimal&, const decimal&) = default;
  /// Numeric order ("1.5" == "1.50", "-2" < "-1.5").
  friend std::strong_ordering operator<=>(const decimal& a, const decimal& b);

 private:
  /// Restores the normal form (see the class).
  void normalise();

  bool negative_ = false;
  std::string digits_ = "0"; ///< the unscaled magnitude, no leading zeros
  int scale_ = 0;            ///< digits of digits_ after the point
};

/// Sums of amounts by currency (e.g. the cost facts of a tool).
class money_totals {
 public:
  /// Adds `amount` to `currency`'s total.
  void add(std::string_view currency, const decimal& amount);
  /// The total of `currency` (zero if none was added).
  decimal total(std::string_view currency) const;
  /// All totals by currency.
  const std::map<std::string, decimal, std::less<>>& totals() const noexcept { return totals_; }
  /// {"USD":"0.3", ...}.
  nlohmann::json to_json() const;

 private:
  std::map<std::string, decimal, std::less<>> totals_;
};

} // namespace factum::resilience
