// json_util.hpp: strict readers for the JSON forms of the resilience classes (configs and saved
// state). Private to factum_resilience. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::resilience::detail {

using nlohmann::json;

/// INVALID_ARGUMENT "<what>: <message>".
inline status invalid(std::string_view what, std::string_view message) {
  return status{errc::invalid_argument, std::string(what) + ": " + std::string(message)};
}

/// Ok when every member of the object `j` is one of `known`; else INVALID_ARGUMENT
/// "<what>.<member>: unknown key (known: ...)".
inline status known_keys(const json& j, std::initializer_list<std::string_view> known,
                         std::string_view what) {
  for (const auto& [k, _] : j.items()) {
    bool ok = false;
    for (auto n : known)
      ok = ok || k == n;
    if (ok)
      continue;
    std::string list;
    for (auto n : known)
      list.append(list.empty() ? "" : ", ").append(n);
    return invalid(std::string(what) + "." + k, "unknown key (known: " + list + ")");
  }
  return status::ok();
}

/// Ok when `j` is a JSON object, INVALID_ARGUMENT otherwise.
inline status expect_object(const json& j, std::string_view what) {
  if (!j.is_object())
    return invalid(what, "must be a JSON object");
  return status::ok();
}

/// Reads `obj[key]` into `out` when the member exists (`out` keeps its value otherwise);
/// INVALID_ARGUMENT when it has the wrong type or does not fit. T: bool, an integer type,
/// double or std::string.
template <class T>
status read_field(const json& obj, std::string_view key, T& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end())
    return status::ok();
  const json& v = *it;
  std::string name = std::string(what) + "." + std::string(key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean())
      return invalid(name, "must be true or false");
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer())
      return invalid(name, "must be an integer");
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max()))
        return invalid(name, "is out of range");
      out = static_cast<T>(u);
    } else {
      auto s = v.get<int64_t>();
      if (s < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          s > static_cast<int64_t>(std::numeric_limits<T>::max()))
        return invalid(name, "is out of range");
      out = static_cast<T>(s);
    }
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number())
      return invalid(name, "must be a number");
    out = v.get<double>();
  } else {
    static_assert(std::is_same_v<T, std::string>, "unsupported field type");
    if (!v.is_string())
      return invalid(name, "must be a string");
    out = v.get<std::string>();
  }
  return status::ok();
}

} // namespace factum::resilience::detail
