// config_util.hpp (private): the readers every part of `factum serve`'s configuration shares:
// typed members with their bounds, comments, unknown keys. Runs on the thread that loads the
// configuration.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::tools::config_util {

using nlohmann::json;

inline status bad(const std::string& key, const std::string& why) {
  return status{errc::invalid_argument, key + ": " + why};
}

/// Reads an optional integer member into `out`, checking [lo, hi].
inline status read_int(const json& obj, const char* name, const std::string& path, int64_t lo,
                       int64_t hi, int64_t& out) {
  auto it = obj.find(name);
  if (it == obj.end())
    return status::ok();
  if (!it->is_number_integer())
    return bad(path + name,
               "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi));
  int64_t v;
  if (it->is_number_unsigned()) {
    auto u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return bad(path + name, "must be at most " + std::to_string(hi));
    v = static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  if (v < lo || v > hi)
    return bad(path + name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                              " (got " + std::to_string(v) + ")");
  out = v;
  return status::ok();
}

/// read_int into `field` (kept when absent), whatever its integer type.
template <class T>
status read_field(const json& obj, const char* name, int64_t lo, int64_t hi, T& field,
                  const std::string& path = "") {
  auto v = static_cast<int64_t>(field);
  if (auto st = read_int(obj, name, path, lo, hi, v); !st)
    return st;
  field = static_cast<T>(v);
  return {};
}

/// read_int into a duration in milliseconds (kept when absent).
inline status read_ms(const json& obj, const char* name, int64_t lo, int64_t hi,
                      std::chrono::milliseconds& field, const std::string& path = "") {
  auto v = static_cast<int64_t>(field.count());
  if (auto st = read_int(obj, name, path, lo, hi, v); !st)
    return st;
  field = std::chrono::milliseconds(v);
  return {};
}

inline bool is_comment(const std::string& key) {
  return key.rfind("//", 0) == 0;
}

inline status check_keys(const json& obj, const std::string& path,
                         std::initializer_list<const char*> known) {
  for (auto& [k, _] : obj.items()) {
    if (is_comment(k))
      continue;
    bool ok = false;
    for (auto* n : known)
      ok = ok || k == n;
    if (!ok) {
      std::string list;
      for (auto* n : known)
        list += std::string(list.empty() ? "" : ", ") + n;
      return bad(path + k, "unknown key (known: " + list + ")");
    }
  }
  return status::ok();
}

} // namespace factum::tools::config_util

namespace factum::tools {

struct serve_config;

/// The "degradation" member (config_degradation.cpp), after the tenants, types and tools.
status parse_degradation(const nlohmann::json& doc, serve_config& cfg);
/// `dev`, `journal`, `listen`, `data_dir`, `archive_dir` and `durability` (config_runtime.cpp).
status parse_basics(const nlohmann::json& doc, serve_config& cfg);
/// The runtime's numbers: threads, caches, WAL sizes, timeouts, retention (config_runtime.cpp).
status parse_numbers(const nlohmann::json& doc, serve_config& cfg);

} // namespace factum::tools
