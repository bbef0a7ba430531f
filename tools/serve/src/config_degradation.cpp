// config_degradation.cpp: the "degradation" member of `factum serve`'s configuration
// (docs/configuration.md, "degradation"): critical tools, the feature matrix, the rules' bounds.
// Runs once, on the thread that loads the configuration, after the tenants and tools.
#include <set>

#include "config_util.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/tools/serve.hpp"

namespace factum::tools {

using namespace config_util;

namespace {

/// A feature's name, a tool's name: 1..64 characters of [A-Za-z0-9._-].
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64)
    return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

/// A method pattern: "*", "type.*" or "type.method" of a hosted type.
status check_pattern(const std::string& p, const std::string& path, const serve_config& cfg) {
  if (p == "*")
    return {};
  // Type names may hold dots: the method is after the last one.
  auto dot = p.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == p.size())
    return bad(path, "must be \"*\", \"type.*\" or \"type.method\" (got \"" + p + "\")");
  auto type = p.substr(0, dot), method = p.substr(dot + 1);
  if (!cfg.runtime.types.find(type))
    return bad(path, "names entity type '" + type + "', which the server does not host");
  if (method != "*" && !cfg.runtime.types.find(type)->find(method))
    return bad(path, "entity type " + type + " has no method '" + method + "'");
  return {};
}

status read_names(const json& f, const char* member, const std::string& path,
                  std::vector<std::string>& out) {
  auto it = f.find(member);
  if (it == f.end())
    return {};
  if (!it->is_array())
    return bad(path + member, "must be an array of strings");
  for (auto& v : *it) {
    if (!v.is_string())
      return bad(path + member, "must be an array of strings");
    out.push_back(v.get<std::string>());
  }
  return {};
}

status parse_feature(const std::string& name, const json& f, serve_config& cfg,
                     const std::set<std::string>& tools, degraded_feature& out) {
  std::string path = "degradation.features." + name + ".";
  if (!valid_name(name))
    return bad("degradation.features." + name, "a feature name is 1 to 64 of [A-Za-z0-9._-]");
  if (!f.is_object())
    return bad(path, "must be an object {\"max_level\": 0..4, \"methods\": [...], \"tools\": "
                     "[...]}");
  if (auto st = check_keys(f, path, {"max_level", "methods", "tools"}); !st)
    return st;
  out.name = name;
  if (!f.contains("max_level"))
    return bad(path + "max_level", "required: the highest level the feature runs at (0..4)");
  if (auto st = read_field(f, "max_level", 0, 4, out.max_level, path); !st)
    return st;
  if (auto st = read_names(f, "methods", path, out.methods); !st)
    return st;
  if (auto st = read_names(f, "tools", path, out.tools); !st)
    return st;
  if (out.methods.empty() && out.tools.empty())
    return bad(path, "names no method and no tool");
  for (auto& m : out.methods)
    if (auto st = check_pattern(m, path + "methods", cfg); !st)
      return st;
  for (auto& t : out.tools)
    if (!tools.count(t))
      return bad(path + "tools", "names tool '" + t + "', which \"tools\" does not configure");
  return {};
}

} // namespace

status parse_degradation(const json& doc, serve_config& cfg) {
  auto it = doc.find("degradation");
  if (it == doc.end())
    return {};
  if (!it->is_object())
    return bad("degradation", "must be an object");
  auto& d = *it;
  if (auto st = check_keys(d, "degradation.",
                           {"critical_tools", "features", "retry_after_s", "quarantine_hold_ms",
                            "min_free_bytes", "recover_after_ms", "check_interval_ms"});
      !st)
    return st;
  auto& out = cfg.runtime.degradation;
  out.enabled = true;
  std::set<std::string> tools;
  for (auto& t : cfg.tool_specs)
    tools.insert(t.name);
  if (auto st = read_names(d, "critical_tools", "degradation.", out.critical_tools); !st)
    return st;
  for (auto& t : out.critical_tools)
    if (!tools.count(t))
      return bad("degradation.critical_tools",
                 "names tool '" + t + "', which \"tools\" does not configure");
  if (auto f = d.find("features"); f != d.end()) {
    if (!f->is_object())
      return bad("degradation.features", "must be an object of feature name -> {...}");
    for (auto& [name, spec] : f->items()) {
      if (is_comment(name))
        continue;
      degraded_feature feat;
      if (auto st = parse_feature(name, spec, cfg, tools, feat); !st)
        return st;
      out.features.push_back(std::move(feat));
    }
  }
  int64_t retry_after = out.retry_after.count();
  if (auto st = read_int(d, "retry_after_s", "degradation.", 1, 3600, retry_after); !st)
    return st;
  out.retry_after = std::chrono::seconds(retry_after);
  if (auto st =
        read_ms(d, "quarantine_hold_ms", 0, 86'400'000, out.quarantine_hold, "degradation.");
      !st)
    return st;
  if (auto st = read_field(d, "min_free_bytes", 0, std::numeric_limits<int64_t>::max(),
                           out.min_free_bytes, "degradation.");
      !st)
    return st;
  if (auto st = read_ms(d, "recover_after_ms", 0, 3'600'000, out.recover_after, "degradation.");
      !st)
    return st;
  if (auto st = read_ms(d, "check_interval_ms", 10, 60'000, out.check_interval, "degradation.");
      !st)
    return st;
  for (auto& t : cfg.http.tenants)
    out.tenants.push_back(t.name);
  return {};
}

} // namespace factum::tools
