// config_runtime.cpp: the top-level members of `factum serve`'s configuration that set the
// listener and the runtime (docs/configuration.md, "Top level"): `listen`, `data_dir`,
// `archive_dir`, `durability`, `dev`, `journal` and the numbers (threads, caches, WAL sizes,
// timeouts, the archive's retention). Runs once, on the thread that loads the configuration.
#include "config_util.hpp"
#include "factum/tools/serve.hpp"

namespace factum::tools {

using namespace config_util;

status apply_listen(serve_config& cfg, std::string_view listen) {
  auto fail = [&](const std::string& why) {
    return bad("listen", "\"" + std::string(listen.substr(0, 200)) + "\": " + why +
                           " (expected host:port, e.g. 127.0.0.1:8080 or [::1]:8080)");
  };
  std::string_view host, port;
  if (!listen.empty() && listen.front() == '[') {
    auto close = listen.find(']');
    if (close == std::string_view::npos || close + 1 >= listen.size() || listen[close + 1] != ':')
      return fail("bad IPv6 form");
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string_view::npos)
      return fail("no port");
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return fail("an IPv6 address needs brackets");
  }
  if (host.empty())
    return fail("no host");
  if (port.empty() || port.size() > 5)
    return fail("bad port");
  uint32_t p = 0;
  for (char c : port) {
    if (c < '0' || c > '9')
      return fail("bad port");
    p = p * 10 + static_cast<uint32_t>(c - '0');
  }
  if (p > 65535)
    return fail("port out of range");
  cfg.http.host = std::string(host);
  cfg.http.port = static_cast<uint16_t>(p);
  return status::ok();
}

/// `dev`, `journal`, `listen`, `data_dir`, `archive_dir` and `durability`.
status parse_basics(const json& doc, serve_config& cfg) {
  if (auto it = doc.find("dev"); it != doc.end()) {
    if (!it->is_boolean())
      return bad("dev", "must be true or false");
    cfg.dev = it->get<bool>();
  }
  if (auto it = doc.find("journal"); it != doc.end()) {
    if (!it->is_boolean())
      return bad("journal", "must be true or false");
    cfg.runtime.journal = it->get<bool>();
  }
  if (auto it = doc.find("listen"); it != doc.end()) {
    if (!it->is_string())
      return bad("listen", "must be a string host:port");
    if (auto st = apply_listen(cfg, it->get<std::string>()); !st)
      return st;
  }
  if (auto it = doc.find("data_dir"); it != doc.end()) {
    if (!it->is_string() || it->get<std::string>().empty())
      return bad("data_dir", "must be a non-empty path");
    cfg.runtime.data_dir = it->get<std::string>();
  }
  if (auto it = doc.find("archive_dir"); it != doc.end()) {
    if (!it->is_string() || it->get<std::string>().empty())
      return bad("archive_dir", "must be a non-empty path");
    cfg.runtime.archive_dir = it->get<std::string>();
  }
  if (auto it = doc.find("durability"); it != doc.end()) {
    if (!it->is_string() || (*it != "full" && *it != "normal"))
      return bad("durability", "must be \"full\" or \"normal\"");
    cfg.runtime.mode = *it == "full" ? durability::full : durability::normal;
  }
  return {};
}

/// The numeric settings, each with its range (docs/configuration.md).
status parse_numbers(const json& doc, serve_config& cfg) {
  auto& rt = cfg.runtime;
  if (auto st = read_ms(doc, "idle_timeout_ms", 1, int64_t{1} << 40, rt.idle_timeout); !st)
    return st;
  if (auto st = read_field(doc, "max_active_entities", 0, 100'000'000, rt.max_active_entities); !st)
    return st;
  if (auto st = read_field(doc, "storage_threads", 1, 1024, rt.storage_threads); !st)
    return st;
  if (auto st = read_field(doc, "sync_threads", 1, 1024, rt.sync_threads); !st)
    return st;
  if (auto st = read_field(doc, "cache_kib", 16, 1 << 20, rt.cache_kib); !st)
    return st;
  if (auto st = read_field(doc, "wal_kept_on_close_kib", 0, 1 << 20, rt.wal_kept_on_close_kib); !st)
    return st;
  if (auto st = read_field(doc, "wal_grow_kib", 0, 65536, rt.wal_grow_kib); !st)
    return st;
  if (auto st = read_field(doc, "spare_files", 0, 1024, rt.spare_files); !st)
    return st;
  int64_t retention_days = 0;
  if (auto st =
        read_field(doc, "archive_retention_days", int64_t{0}, int64_t{36500}, retention_days);
      !st)
    return st;
  rt.archive_retention = std::chrono::hours(24 * retention_days);
  if (auto st = read_ms(doc, "archive_prune_interval_ms", 1000, int64_t{1} << 40,
                        rt.archive_prune_interval);
      !st)
    return st;
  if (rt.archive_retention.count() > 0 && rt.archive_dir.empty())
    return bad("archive_retention_days", "needs archive_dir");
  if (auto st = read_field(doc, "scheduler_threads", 0, 1024, rt.scheduler_threads); !st)
    return st;
  if (auto st = read_field(doc, "http_threads", 1, 64, cfg.http.io_threads); !st)
    return st;
  if (auto st = read_ms(doc, "key_ttl_ms", 0, int64_t{1} << 45, rt.key_ttl); !st)
    return st;
  if (auto st = read_ms(doc, "call_timeout_ms", 1, 3'600'000, cfg.http.call_timeout); !st)
    return st;
  if (auto st = read_ms(doc, "alarm_retry_base_ms", 1, 86'400'000, rt.alarm_retry_base); !st)
    return st;
  if (auto st = read_field(doc, "alarm_max_retries", 0, 100, rt.alarm_max_retries); !st)
    return st;
  if (auto st = read_ms(doc, "alarm_poll_ms", 10, 3'600'000, rt.alarm_poll); !st)
    return st;
  if (auto st = read_ms(doc, "shutdown_timeout_ms", 1, 3'600'000, cfg.shutdown_timeout); !st)
    return st;
  return {};
}

} // namespace factum::tools
