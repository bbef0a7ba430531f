// log_format.cpp: the forms of `factum serve`'s log lines (format_log_line): JSON lines as they
// are made, or text, one readable line per event. Called by whichever thread writes a line (the
// main thread, the gateway's I/O threads, CAF workers, the cluster node's threads); it keeps no
// state.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "factum/storage/fact.hpp"
#include "factum/tools/serve.hpp"

namespace factum::tools {

namespace {

using nlohmann::json;

std::string dump(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// Whether `s` reads back unambiguously without quotes: printable ASCII, no space, quote,
/// backslash or '='.
bool bare(std::string_view s) {
  if (s.empty())
    return false;
  for (unsigned char c : s)
    if (c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '=')
      return false;
  return true;
}

bool bare_scalar(const json& v) {
  return v.is_number() || v.is_boolean() ||
         (v.is_string() && bare(v.get_ref<const std::string&>()));
}

/// A value of a key=value pair: a bare word when it is one, a list of bare words joined by
/// commas, else its JSON (a string quoted and escaped: a value never spans two lines).
std::string value_text(const json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return bare(s) ? s : dump(v);
  }
  if (v.is_array() && std::all_of(v.begin(), v.end(), bare_scalar)) {
    std::string out;
    for (const auto& e : v)
      out += (out.empty() ? "" : ",") + (e.is_string() ? e.get<std::string>() : dump(e));
    return out;
  }
  return dump(v);
}

/// Whether a field says nothing (null, an empty list or object) and is left out.
bool empty_value(const json& v) {
  return v.is_null() || ((v.is_array() || v.is_object()) && v.empty());
}

std::string text_line(const json& e) {
  std::string out;
  auto ts = e.find("ts");
  if (ts != e.end() && ts->is_string())
    out = ts->get<std::string>();
  else if (ts != e.end() && ts->is_number_integer()) // the runtime's: epoch milliseconds
    out = format_utc_ms(ts->get<int64_t>());
  else
    out = format_utc_ms(now_ms());
  auto level = e.value("level", std::string("info"));
  if (level.size() < 5)
    level.resize(5, ' ');
  out += " " + level + " " + e.value("event", std::string("log"));
  // The other fields in key order, the prose of `detail` last.
  for (const auto& [k, v] : e.items())
    if (k != "ts" && k != "level" && k != "event" && k != "detail" && !empty_value(v))
      out += " " + k + "=" + value_text(v);
  if (auto d = e.find("detail"); d != e.end() && !empty_value(*d))
    out += " detail=" + value_text(*d);
  return out;
}

} // namespace

std::string format_log_line(std::string_view line, log_format format) {
  if (format == log_format::json)
    return std::string(line);
  auto e = json::parse(line, nullptr, false);
  if (!e.is_object())
    return std::string(line);
  return text_line(e);
}

} // namespace factum::tools
