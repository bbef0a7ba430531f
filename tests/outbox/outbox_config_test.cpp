// outbox_config_test.cpp: the "outbox" object of `factum serve`'s configuration: sinks of both
// kinds parsed with their defaults, routes and batch into runtime_config::outbox, and one clear
// error per bad key (unknown keys at every level, a route naming no sink, a bad kind, subject or
// fact type). Pure parsing on the test thread (hosts are loopback literals).
#include <doctest/doctest.h>

#include "factum/tools/serve.hpp"
#include "support/serve_types.hpp"

using namespace factum;
using namespace factum::tools;
using nlohmann::json;

namespace {

json with_outbox(json outbox) {
  return {{"data_dir", "/tmp/unused"},
          {"tenants", {{"acme", {{"api_keys", {"sha256:" + std::string(64, 'a')}}}}}},
          {"outbox", std::move(outbox)}};
}

std::string error_of(json outbox) {
  auto r = parse_serve_config(with_outbox(std::move(outbox)), test::serve_types());
  REQUIRE_FALSE(r.is_ok());
  return r.error().message();
}

json sinks() {
  return {{"audit", {{"kind", "http"}, {"url", "http://127.0.0.1:9200/facts"}}},
          {"bus", {{"kind", "nats"}, {"subject", "factum.facts"}}}};
}

} // namespace

TEST_CASE("outbox config: sinks of both kinds with their defaults and routes and batch") {
  auto r =
    parse_serve_config(with_outbox({{"batch", 16},
                                    {"sinks",
                                     {{"audit",
                                       {{"kind", "http"},
                                        {"url", "http://127.0.0.1:9200/facts"},
                                        {"request_timeout_ms", 3000},
                                        {"retry", {{"base_delay_ms", 200}}},
                                        {"breaker", {{"cooldown_ms", 5000}}}}},
                                      {"bus",
                                       {{"kind", "nats"},
                                        {"url", "nats://127.0.0.1:4223"},
                                        {"subject", "factum.facts"},
                                        {"stream", "FACTS"},
                                        {"threads", 2}}}}},
                                    {"routes",
                                     {{{"sink", "bus"}, {"fact_types", {"payment", "refund"}}},
                                      {{"sink", "audit"},
                                       {"fact_types", {"payment"}},
                                       {"tenants", {"acme"}},
                                       {"entity_types", {"ledger"}}}}}}),
                       test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  auto& ob = r->runtime.outbox;
  CHECK(ob.batch == 16);
  REQUIRE(ob.routes.size() == 2);
  CHECK(ob.routes[0].sink == "bus");
  CHECK(ob.routes[0].fact_types == std::vector<std::string>{"payment", "refund"});
  CHECK(ob.routes[0].tenants.empty());
  CHECK(ob.routes[1].tenants == std::vector<std::string>{"acme"});
  CHECK(ob.routes[1].entity_types == std::vector<std::string>{"ledger"});
  REQUIRE(r->outbox_sinks.size() == 2);
  auto& audit = r->outbox_sinks[0];
  CHECK(audit.name == "audit");
  CHECK(audit.kind == "http");
  CHECK(audit.http.url == "http://127.0.0.1:9200/facts");
  CHECK(audit.http.request_timeout.count() == 3000);
  CHECK(audit.http.connect_timeout.count() == 2000); // default
  CHECK(audit.sink.retry["base_delay_ms"] == 200);
  CHECK(audit.sink.retry["max_delay_ms"] == 60000); // the policy's default, filled in
  CHECK(audit.sink.breaker["cooldown_ms"] == 5000);
  auto& bus = r->outbox_sinks[1];
  CHECK(bus.kind == "nats");
  CHECK(bus.nats.url == "nats://127.0.0.1:4223");
  CHECK(bus.nats.subject == "factum.facts");
  CHECK(bus.nats.stream == "FACTS");
  CHECK(bus.nats.threads == 2);
  CHECK(bus.nats.publish_timeout.count() == 5000); // default
  CHECK(bus.nats.duplicate_window.count() == 120000);
  CHECK(bus.sink.retry.is_null()); // the runtime's default policy
  // No outbox: nothing configured.
  json none = with_outbox({});
  none.erase("outbox");
  auto n = parse_serve_config(none, test::serve_types());
  REQUIRE(n.is_ok());
  CHECK(n->runtime.outbox.routes.empty());
  CHECK(n->outbox_sinks.empty());
  CHECK(n->runtime.outbox.batch == 64);
}

TEST_CASE("outbox config: one clear error per bad key") {
  CHECK(error_of({{"sink", {}}}).find("outbox.sink: unknown key") == 0);
  CHECK(error_of({{"batch", 0}}).find("outbox.batch") == 0);
  CHECK(
    error_of({{"sinks", {{"a", {{"url", "http://127.0.0.1:1"}}}}}}).find("outbox.sinks.a.kind") ==
    0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "kafka"}}}}}}).find("outbox.sinks.a.kind") == 0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "http"}, {"url", "http://127.0.0.1:1"}, {"x", 1}}}}}})
          .find("outbox.sinks.a.x: unknown key") == 0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "http"}}}}}}).find("outbox.sinks.a.url") == 0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "nats"}, {"subject", "a b"}}}}}})
          .find("outbox.sinks.a.subject") == 0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "nats"}}}}}}).find("outbox.sinks.a.subject") == 0);
  CHECK(error_of({{"sinks", {{"a", {{"kind", "nats"}, {"subject", "s"}, {"threads", 0}}}}}})
          .find("outbox.sinks.a.threads") == 0);
  CHECK(
    error_of({{"sinks", {{"a", {{"kind", "nats"}, {"subject", "s"}, {"retry", {{"nope", 1}}}}}}}})
      .find("outbox.sinks.a.retry.nope: unknown key") == 0);
  CHECK(error_of({{"sinks", sinks()}, {"routes", {{{"sink", "nope"}, {"fact_types", {"x"}}}}}})
          .find("outbox.routes[0].sink: no sink named 'nope'") == 0);
  CHECK(error_of({{"sinks", sinks()}, {"routes", {{{"sink", "bus"}}}}})
          .find("outbox.routes[0].fact_types") == 0);
  CHECK(
    error_of({{"sinks", sinks()}, {"routes", {{{"sink", "bus"}, {"fact_types", {"Bad Type"}}}}}})
      .find("outbox.routes[0].fact_types") == 0);
  CHECK(error_of({{"sinks", sinks()},
                  {"routes", {{{"sink", "bus"}, {"fact_types", {"x"}}, {"tenant", {"acme"}}}}}})
          .find("outbox.routes[0].tenant: unknown key") == 0);
}
