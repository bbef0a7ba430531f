// factum/fake_vendor/fake_vendor.hpp: a scriptable fake external vendor on loopback for tests,
// the example apps and the benchmarks (tools/fake_vendor/README.md has the full control API).
// Every POST to a path outside /_vendor/ is a vendor call, answered according to a mode (ok,
// timeout, rate_limit, down, error, reset, flaky) or a queue of scripted responses; the vendor
// prices calls (X-Cost), de-duplicates by Idempotency-Key and counts everything it did
// (GET /_vendor/stats; per Idempotency-Key, GET /_vendor/keys). It runs on its own Asio thread;
// every public member function is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace factum::fake_vendor {

/// Where the vendor listens.
struct vendor_options {
  /// Address to bind (an IPv4/IPv6 literal). Default 127.0.0.1.
  std::string host = "127.0.0.1";
  /// Port; 0 picks a free one (see vendor::port()). Default 0.
  uint16_t port = 0;
};

/// The fake vendor. Starts listening in its constructor; stops in stop() or its destructor.
class vendor {
 public:
  /// Binds and starts the I/O thread; throws std::runtime_error when it cannot bind.
  explicit vendor(vendor_options opts = {});
  /// Stops (as stop()).
  ~vendor();

  vendor(const vendor&) = delete;
  vendor& operator=(const vendor&) = delete;

  /// The bound port.
  uint16_t port() const;
  /// "http://127.0.0.1:<port>".
  std::string url() const;

  /// Same as `POST /_vendor/mode` with `body`; returns "" or why the body was refused.
  std::string set_mode(const nlohmann::json& body);
  /// Same as `POST /_vendor/script` with `body`; returns "" or why the body was refused.
  std::string script(const nlohmann::json& body);
  /// Same as `GET /_vendor/stats`.
  nlohmann::json stats() const;
  /// Same as `GET /_vendor/keys`: what happened to the calls of each Idempotency-Key.
  nlohmann::json keys() const;
  /// Same as `POST /_vendor/reset`: default mode, empty script, zero counters, no stored keys.
  void reset();

  /// Closes the listener and every connection (held and delayed calls end without an
  /// answer) and joins the thread. Idempotent.
  void stop();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

} // namespace factum::fake_vendor
