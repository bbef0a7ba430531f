// decimal.hpp (private to factum_inspect): exact decimal arithmetic over strings, so that money
// summed by `factum inspect economics` stays exact (never binary floating point). Plain value
// type; any thread.
#pragma once

#include <string>
#include <string_view>

#include "factum/error/status.hpp"

namespace factum::tools {

/// A signed exact decimal: an arbitrary-length digit string scaled by 10^-scale. Only addition
/// is needed (sums of cost amounts); the scale of a sum is the largest scale of its terms, so
/// "0.10" + "0.005" = "0.105" and "1.50" + "2" = "3.50".
class exact_decimal {
 public:
  /// Zero with scale 0.
  exact_decimal() = default;

  /// Parses -?digits(.digits)? (the store's amount syntax); INVALID_ARGUMENT otherwise.
  static result<exact_decimal> parse(std::string_view text);

  /// Adds `other` exactly.
  exact_decimal& operator+=(const exact_decimal& other);

  /// Canonical text: no leading zeros (one before the point), max(scale, min_scale) fraction
  /// digits, and a '-' only when the value is not zero.
  std::string to_string(size_t min_scale = 0) const;

  /// Fraction digits: the largest scale of the terms summed so far.
  size_t scale() const noexcept { return scale_; }

  bool is_zero() const noexcept;

 private:
  void rescale(size_t scale);
  void trim();

  bool negative_ = false;
  std::string digits_ = "0"; ///< magnitude * 10^scale_, most significant digit first
  size_t scale_ = 0;
};

} // namespace factum::tools
