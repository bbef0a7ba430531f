// fixture.hpp: an in-process gateway for the HTTP tests: a runtime with the built-in and test
// entity types, and an http_server on a free loopback port, with its log lines captured.
// Built and stopped on the test's thread; log lines arrive from I/O threads and CAF workers.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "factum/gateway/http_server.hpp"
#include "factum/runtime/runtime.hpp"
#include "http/client.hpp"
#include "support/eventually.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

namespace factum::test {

inline constexpr const char* acme_key = "key-acme";
inline constexpr const char* globex_key = "key-globex";

/// A runtime plus a gateway on 127.0.0.1:<free port>.
class gateway_fixture {
 public:
  using tweak = std::function<void(runtime_config&, http_server_config&)>;

  explicit gateway_fixture(tweak t = {}, std::filesystem::path data = {}) {
    start(std::move(t), std::move(data));
  }
  ~gateway_fixture() { stop(); }

  /// (Re)starts on `data` (default: this fixture's temp dir).
  void start(tweak t = {}, std::filesystem::path data = {}) {
    runtime_config rc;
    rc.data_dir = data.empty() ? dir_.path() : data;
    rc.storage_threads = 4;
    add_builtin_types(rc.types);
    add_test_types(rc.types);
    http_server_config hc;
    hc.host = "127.0.0.1";
    hc.port = 0;
    // acme's key may do everything (operator tests use it); globex's reads and writes only.
    hc.tenants = {{"acme", {{api_key_sha256(acme_key), scope_all}}},
                  {"globex", {{api_key_sha256(globex_key)}}}};
    hc.require_idempotency_key["ledger"]["append"] = true;
    hc.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> g(log_mu_);
      logs_.emplace_back(line);
    };
    if (t)
      t(rc, hc);
    rt_ = start_ok(std::move(rc));
    auto s = http_server::start(*rt_, std::move(hc));
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
    srv_ = std::move(s.value());
  }

  /// Graceful stop in serve's order: stop accepting, drain, stop the I/O threads, stop the
  /// runtime.
  void stop() {
    if (srv_) {
      srv_->begin_shutdown();
      srv_->wait_idle(std::chrono::seconds(20));
      srv_->stop();
    }
    if (rt_)
      rt_->stop();
    srv_.reset();
    rt_.reset();
  }

  uint16_t port() const { return srv_->port(); }
  runtime& rt() { return *rt_; }
  http_server& server() { return *srv_; }
  const std::filesystem::path& data_dir() const { return dir_.path(); }

  std::vector<std::string> logs() {
    std::lock_guard<std::mutex> g(log_mu_);
    return logs_;
  }
  /// The log lines that mention `needle`.
  std::vector<std::string> log_lines(const std::string& needle) {
    std::lock_guard<std::mutex> g(log_mu_);
    std::vector<std::string> out;
    for (auto& l : logs_)
      if (l.find(needle) != std::string::npos)
        out.push_back(l);
    return out;
  }
  /// How many log lines mention `needle`.
  size_t log_count(const std::string& needle) { return log_lines(needle).size(); }

  /// Every fact of an entity, read through the runtime (not through HTTP).
  nlohmann::json facts(const std::string& tenant, const std::string& type, const std::string& id,
                       nlohmann::json filter = nlohmann::json::object()) {
    filter["limit"] = 10000;
    auto r = rt_->call_sync(entity_key{tenant, type, id}, "@facts", filter.dump());
    REQUIRE_MESSAGE(r.ok, r.body);
    return r.json();
  }

  /// How many entity files exist under the data directory.
  size_t entity_files() const {
    size_t n = 0;
    std::error_code ec;
    auto root = dir_.path() / "entities";
    if (!std::filesystem::exists(root, ec))
      return 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(root, ec))
      n += e.path().extension() == ".db";
    return n;
  }

 private:
  temp_dir dir_;
  std::unique_ptr<runtime> rt_;
  std::unique_ptr<http_server> srv_;
  std::mutex log_mu_;
  std::vector<std::string> logs_;
};

/// Headers of an authenticated JSON call.
inline header_list json_headers(const std::string& api_key = acme_key,
                                const std::string& idempotency_key = {}) {
  header_list h{{"X-API-Key", api_key}, {"Content-Type", "application/json"}};
  if (!idempotency_key.empty())
    h.emplace_back("Idempotency-Key", idempotency_key);
  return h;
}

} // namespace factum::test
