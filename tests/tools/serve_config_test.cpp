// serve_config_test.cpp: the "tools" object of `factum serve`'s configuration: a complete tool
// parsed into transport options and policy, defaults, and one clear error per bad key (unknown
// keys at every level, bad URL, name, price, currency, fallback). Pure parsing on the test
// thread (the URL hosts are loopback literals, so resolving them needs no network).
#include <doctest/doctest.h>

#include "factum/tools/serve.hpp"
#include "support/serve_types.hpp"

using namespace factum;
using namespace factum::tools;
using nlohmann::json;

namespace {

json base() {
  return {{"data_dir", "/tmp/unused"},
          {"tenants", {{"acme", {{"api_keys", {"sha256:" + std::string(64, 'a')}}}}}}};
}

std::string error_of(json tools) {
  auto doc = base();
  doc["tools"] = std::move(tools);
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_FALSE(r.is_ok());
  return r.error().message();
}

} // namespace

TEST_CASE("serve config: parses a complete tool into transport and policy") {
  auto doc = base();
  doc["tools"] = {{"telephony",
                   {{"url", "http://127.0.0.1:9100/telephony"},
                    {"connect_timeout_ms", 500},
                    {"request_timeout_ms", 3000},
                    {"max_connections", 4},
                    {"max_queued", 8},
                    {"headers", {{"Authorization", "Bearer x"}}},
                    {"retry", {{"max_attempts", 3}, {"base_delay_ms", 100}}},
                    {"breaker", {{"cooldown_ms", 5000}, {"count_window", {{"size", 20}}}}},
                    {"budget", {{"ratio", 0.5}}},
                    {"price", "0.0130"},
                    {"currency", "EUR"},
                    {"charge_on_failure", true},
                    {"vendor", "acme_telco"},
                    {"idempotent", false},
                    {"max_inline_delay_ms", 100},
                    {"fallback", {{"body", {{"queued", true}}}}}}},
                  {"plain", {{"url", "http://127.0.0.1:9"}}}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().message());
  auto& specs = r.value().tool_specs;
  REQUIRE(specs.size() == 2);
  auto& t = specs[0].name == "telephony" ? specs[0] : specs[1];
  auto& p = specs[0].name == "plain" ? specs[0] : specs[1];
  CHECK(t.http.url == "http://127.0.0.1:9100/telephony");
  CHECK(t.http.connect_timeout.count() == 500);
  CHECK(t.http.request_timeout.count() == 3000);
  CHECK(t.http.max_connections == 4);
  CHECK(t.http.max_queued == 8);
  CHECK(t.http.headers.at("Authorization") == "Bearer x");
  CHECK(t.policy.retry["max_attempts"] == 3);
  CHECK(t.policy.retry["base_delay_ms"] == 100);
  CHECK(t.policy.breaker["cooldown_ms"] == 5000);
  CHECK(t.policy.breaker["count_window"]["size"] == 20);
  CHECK(t.policy.budget["ratio"] == 0.5);
  CHECK(t.policy.price == "0.013");
  CHECK(t.policy.currency == "EUR");
  CHECK(t.policy.charge_on_failure);
  CHECK(t.policy.vendor == "acme_telco");
  CHECK_FALSE(t.policy.idempotent);
  CHECK(t.policy.max_inline_delay_ms == 100);
  REQUIRE(t.fallback_body.has_value());
  CHECK((*t.fallback_body)["queued"] == true);
  // defaults
  CHECK(p.http.connect_timeout.count() == 2000);
  CHECK(p.http.request_timeout.count() == 10000);
  CHECK(p.http.max_connections == 16);
  CHECK(p.policy.price == "0");
  CHECK(p.policy.currency == "USD");
  CHECK(p.policy.retry.is_null());
  CHECK_FALSE(p.fallback_body.has_value());
  // the static fallback answers ok with its body
  tool_reply got;
  static_fallback(json{{"a", 1}})(tool_request{}, [&](tool_reply x) { got = std::move(x); });
  CHECK(got.ok);
  CHECK(got.body == json{{"a", 1}});
}

TEST_CASE("serve config: names the bad key of a tool") {
  auto u = json{{"url", "http://127.0.0.1:9/x"}};
  auto with = [&](const char* k, json v) {
    auto t = u;
    t[k] = std::move(v);
    return json{{"t", t}};
  };
  CHECK(error_of(json::array()).find("tools:") == 0);
  CHECK(error_of({{"bad/name", u}}).find("tools.bad/name:") == 0);
  CHECK(error_of({{std::string(65, 'a'), u}}).find("1 to 64") != std::string::npos);
  CHECK(error_of({{"t", json::object()}}).find("tools.t.url: required") == 0);
  CHECK(error_of({{"t", {{"url", "https://127.0.0.1/"}}}}).find("tools.t.url:") == 0);
  CHECK(error_of({{"t", {{"url", "http://127.0.0.1:0/"}}}}).find("tools.t.url:") == 0);
  CHECK(error_of(with("bogus", 1)).find("tools.t.bogus: unknown key") == 0);
  CHECK(error_of(with("request_timeout_ms", 0)).find("tools.t.request_timeout_ms") == 0);
  CHECK(error_of(with("max_connections", "4")).find("tools.t.max_connections") == 0);
  CHECK(error_of(with("headers", {{"Host", "x"}})).find("tools.t.headers.Host") == 0);
  CHECK(error_of(with("headers", {{"X-A", 1}})).find("tools.t.headers.X-A") == 0);
  CHECK(error_of(with("retry", {{"bogus", 1}})).find("tools.t.retry.bogus: unknown key") == 0);
  CHECK(error_of(with("retry", {{"max_attempts", 0}})).find("tools.t.retry:") == 0);
  CHECK(error_of(with("breaker", {{"count_window", {{"sise", 3}}}}))
          .find("tools.t.breaker.count_window.sise") == 0);
  CHECK(error_of(with("budget", json::array())).find("tools.t.budget") == 0);
  CHECK(error_of(with("price", 0.013)).find("tools.t.price") == 0);
  CHECK(error_of(with("price", "-1")).find("tools.t.price") == 0);
  CHECK(error_of(with("currency", "usd")).find("tools.t.currency") == 0);
  CHECK(error_of(with("charge_on_failure", "yes")).find("tools.t.charge_on_failure") == 0);
  CHECK(error_of(with("vendor", "a/b")).find("tools.t.vendor") == 0);
  CHECK(error_of(with("fallback", {{"status", 200}})).find("tools.t.fallback.status") == 0);
  CHECK(error_of(with("fallback", json::object())).find("tools.t.fallback.body") == 0);
}

TEST_CASE("serve config: alarm retry settings and dead-letter rules reach the runtime") {
  auto doc = base();
  doc["alarm_retry_base_ms"] = 50;
  doc["alarm_max_retries"] = 2;
  doc["alarm_poll_ms"] = 100;
  doc["dead_letter_rules"] = {{"server_error", {{"auto_retry_after_ms", nullptr}}}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK(r->runtime.alarm_retry_base == std::chrono::milliseconds(50));
  CHECK(r->runtime.alarm_max_retries == 2);
  CHECK(r->runtime.alarm_poll == std::chrono::milliseconds(100));
  CHECK(r->runtime.dead_letter_rules == doc["dead_letter_rules"]);
  // Defaults when absent.
  auto d = parse_serve_config(base(), test::serve_types());
  REQUIRE(d.is_ok());
  CHECK(d->runtime.alarm_max_retries == 6);
  CHECK(d->runtime.wal_kept_on_close_kib == 256);
  auto w = base();
  w["wal_kept_on_close_kib"] = 0;
  auto wr = parse_serve_config(w, test::serve_types());
  REQUIRE(wr.is_ok());
  CHECK(wr->runtime.wal_kept_on_close_kib == 0);
  CHECK(d->runtime.sync_threads == 16);
  w["sync_threads"] = 4;
  auto tr = parse_serve_config(w, test::serve_types());
  REQUIRE(tr.is_ok());
  CHECK(tr->runtime.sync_threads == 4);
  CHECK(d->runtime.wal_grow_kib == 256);
  w["wal_grow_kib"] = 0;
  auto gr = parse_serve_config(w, test::serve_types());
  REQUIRE(gr.is_ok());
  CHECK(gr->runtime.wal_grow_kib == 0);
  CHECK(d->runtime.spare_files == 32);
  w["spare_files"] = 0;
  auto sr = parse_serve_config(w, test::serve_types());
  REQUIRE(sr.is_ok());
  CHECK(sr->runtime.spare_files == 0);
  CHECK(d->runtime.dead_letter_rules.is_null());
  // Each bad value names its key.
  auto err = [](const char* key, json v) {
    auto doc = base();
    doc[key] = std::move(v);
    auto r = parse_serve_config(doc, test::serve_types());
    REQUIRE_FALSE(r.is_ok());
    return r.error().message();
  };
  CHECK(err("alarm_retry_base_ms", 0).find("alarm_retry_base_ms") != std::string::npos);
  CHECK(err("wal_kept_on_close_kib", -1).find("wal_kept_on_close_kib") != std::string::npos);
  CHECK(err("spare_files", 1025).find("spare_files") != std::string::npos);
  CHECK(err("wal_grow_kib", 65537).find("wal_grow_kib") != std::string::npos);
  CHECK(err("sync_threads", 0).find("sync_threads") != std::string::npos);
  CHECK(err("alarm_max_retries", 101).find("alarm_max_retries") != std::string::npos);
  CHECK(err("alarm_poll_ms", "fast").find("alarm_poll_ms") != std::string::npos);
  CHECK(
    err("dead_letter_rules", json{{"no_such_reason", json::object()}}).find("dead_letter_rules") !=
    std::string::npos);
  CHECK(err("dead_letter_rules", json{{"timeout", {{"retention_ms", "x"}}}})
          .find("dead_letter_rules") != std::string::npos);
}

TEST_CASE("serve config: a tool's classify overrides are parsed, and a bad one names its key") {
  auto doc = base();
  doc["tools"] = {{"crm",
                   {{"url", "http://127.0.0.1:9"},
                    {"classify",
                     {{"statuses", {{"404", {{"category", "transient"}, {"retryable", true}}}}},
                      {"codes", {{"QUOTA", {{"category", "budget"}, {"code", "CRM_QUOTA"}}}}}}}}}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().message());
  auto& pol = r.value().tool_specs.at(0).policy;
  CHECK(pol.classify["statuses"]["404"]["category"] == "transient");
  CHECK(pol.classify["codes"]["QUOTA"]["code"] == "CRM_QUOTA");
  auto tool = [](json classify) {
    return json{{"crm", {{"url", "http://127.0.0.1:9"}, {"classify", std::move(classify)}}}};
  };
  CHECK(error_of(tool({{"status", json::object()}})).find("tools.crm.classify.status") == 0);
  CHECK(error_of(tool({{"statuses", {{"404", {{"category", "weird"}}}}}}))
          .find("tools.crm.classify.statuses.404.category") == 0);
  CHECK(error_of(tool({{"statuses", {{"4040", {{"category", "client"}}}}}}))
          .find("tools.crm.classify.statuses.4040") == 0);
  CHECK(error_of(tool({{"codes", {{"E1", {{"category", "client"}, {"retry", true}}}}}}))
          .find("tools.crm.classify.codes.E1.retry") == 0);
  CHECK(error_of(tool(json::array())).find("tools.crm.classify") == 0);
}

TEST_CASE("serve config: fallback.after_retries is a boolean, false by default") {
  auto doc = base();
  doc["tools"] = {{"crm",
                   {{"url", "http://127.0.0.1:9"},
                    {"fallback", {{"body", {{"queued", true}}}, {"after_retries", true}}}}},
                  {"plain", {{"url", "http://127.0.0.1:9"}, {"fallback", {{"body", 1}}}}}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE_MESSAGE(r.is_ok(), r.error().message());
  for (auto& t : r.value().tool_specs)
    CHECK(t.policy.fallback_after_retries == (t.name == "crm"));
  CHECK(error_of({{"crm",
                   {{"url", "http://127.0.0.1:9"},
                    {"fallback", {{"body", 1}, {"after_retries", "yes"}}}}}})
          .find("tools.crm.fallback.after_retries") == 0);
}

TEST_CASE("serve config: retry.preset starts from an operation's policy, retry.priority scales "
          "it, retry.by_status is kept, and a bad one names its key") {
  auto retry_of = [](json retry) {
    auto doc = base();
    doc["tools"] = {{"crm", {{"url", "http://127.0.0.1:9"}, {"retry", std::move(retry)}}}};
    auto r = parse_serve_config(doc, test::serve_types());
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    return r.value().tool_specs.at(0).policy;
  };
  auto hook = retry_of({{"preset", "webhook_delivery"}});
  CHECK(hook.retry["base_delay_ms"] == 5000);
  CHECK(hook.retry["max_delay_ms"] == 300000);
  CHECK(hook.retry["max_attempts"] == 5);
  CHECK_FALSE(hook.retry_by_status);
  auto two = retry_of({{"preset", "webhook"}, {"max_attempts", 2}}); // an alias, then a field
  CHECK(two.retry["base_delay_ms"] == 5000);
  CHECK(two.retry["max_attempts"] == 2);
  auto fast = retry_of({{"priority", "realtime"}, {"by_status", true}});
  CHECK(fast.retry["base_delay_ms"] == 500); // the default 1 s, halved
  CHECK(fast.retry["max_attempts"] == 2);
  CHECK(fast.retry_by_status);
  auto tool = [](json retry) {
    return json{{"crm", {{"url", "http://127.0.0.1:9"}, {"retry", std::move(retry)}}}};
  };
  CHECK(error_of(tool({{"preset", "fax"}})).find("tools.crm.retry.preset") == 0);
  CHECK(error_of(tool({{"priority", 1}})).find("tools.crm.retry.priority") == 0);
  CHECK(error_of(tool({{"by_status", "yes"}})).find("tools.crm.retry.by_status") == 0);
  CHECK(error_of(tool({{"presets", "crm"}})).find("tools.crm.retry.presets") == 0);
}

TEST_CASE("serve config: the cluster object is parsed with its defaults, and a bad one names "
          "its key") {
  auto doc = base();
  REQUIRE_FALSE(parse_serve_config(doc, test::serve_types())->cluster.has_value());
  doc["cluster"] = {{"node_id", "n1"},
                    {"etcd", {"http://127.0.0.1:2379", "http://127.0.0.1:2479"}},
                    {"advertise", "127.0.0.1:7101"}};
  auto r = parse_serve_config(doc, test::serve_types());
  REQUIRE(r.is_ok());
  REQUIRE(r->cluster.has_value());
  CHECK(r->cluster->name == "factum");
  CHECK(r->cluster->node_id == "n1");
  CHECK(r->cluster->etcd.size() == 2);
  CHECK(r->cluster->advertise == "127.0.0.1:7101");
  CHECK(r->cluster->shards == 64);
  CHECK(r->cluster->lease_ttl == std::chrono::milliseconds(10'000));
  CHECK(r->cluster->storage == "local");
  CHECK(r->cluster->min_nodes == 1);
  CHECK(r->cluster->secret.empty());

  doc["cluster"]["name"] = "c1";
  doc["cluster"]["shards"] = 256;
  doc["cluster"]["lease_ttl_ms"] = 2000;
  doc["cluster"]["secret"] = "sixteen-chars-ok";
  doc["cluster"]["min_nodes"] = 3;
  r = parse_serve_config(doc, test::serve_types());
  REQUIRE(r.is_ok());
  CHECK(r->cluster->min_nodes == 3);
  CHECK(r->cluster->secret == "sixteen-chars-ok");
  CHECK(r->cluster->name == "c1");
  CHECK(r->cluster->shards == 256);
  CHECK(r->cluster->lease_ttl == std::chrono::milliseconds(2000));
  auto shared = doc;
  shared["cluster"]["storage"] = "shared";
  shared["cluster"]["shared_dir"] = "/srv/factum-entities";
  r = parse_serve_config(shared, test::serve_types());
  REQUIRE(r.is_ok());
  CHECK(r->cluster->storage == "shared");
  CHECK(r->cluster->shared_dir == "/srv/factum-entities");
  shared["cluster"]["shared_dir"] = "relative/dir";
  r = parse_serve_config(shared, test::serve_types());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().message().starts_with("cluster.shared_dir: required with storage \"shared\""));
  shared["cluster"].erase("shared_dir");
  CHECK_FALSE(parse_serve_config(shared, test::serve_types()).is_ok());

  auto error_with = [&](const char* key, json value) {
    auto d = doc;
    if (value.is_null())
      d["cluster"].erase(key);
    else
      d["cluster"][key] = std::move(value);
    auto e = parse_serve_config(d, test::serve_types());
    REQUIRE_FALSE(e.is_ok());
    CHECK(e.error().code() == errc::invalid_argument);
    return e.error().message();
  };
  CHECK(error_with("node_id", nullptr).starts_with("cluster.node_id: required"));
  CHECK(error_with("node_id", "../n1").starts_with("cluster.node_id:"));
  CHECK(error_with("name", "a b").starts_with("cluster.name:"));
  CHECK(error_with("etcd", json::array()).starts_with("cluster.etcd:"));
  CHECK(error_with("etcd", {"https://127.0.0.1:2379"}).starts_with("cluster.etcd:"));
  CHECK(error_with("advertise", nullptr).starts_with("cluster.advertise:"));
  CHECK(error_with("shards", 0).starts_with("cluster.shards:"));
  CHECK(error_with("shards", 5000).starts_with("cluster.shards:"));
  CHECK(error_with("lease_ttl_ms", 999).starts_with("cluster.lease_ttl_ms:"));
  CHECK(error_with("min_nodes", 0).starts_with("cluster.min_nodes:"));
  CHECK(error_with("min_nodes", 1025).starts_with("cluster.min_nodes:"));
  CHECK(error_with("storage", "raft").starts_with("cluster.storage:"));
  // Storage "replicated" needs the log's servers; replication is refused in any other storage.
  CHECK(error_with("storage", "replicated").starts_with("cluster.replication: required"));
  CHECK(error_with("replication", {{"servers", {"nats://127.0.0.1:4222"}}})
          .starts_with("cluster.replication: is for storage \"replicated\""));
  auto replicated = [&](json r) {
    auto d = doc;
    d["cluster"]["storage"] = "replicated";
    d["cluster"]["replication"] = std::move(r);
    return parse_serve_config(d, test::serve_types());
  };
  auto ok = replicated({{"servers", {"nats://127.0.0.1:4222", "nats://127.0.0.1:4223"}}});
  REQUIRE_MESSAGE(ok.is_ok(), ok.error().to_string());
  CHECK(ok->cluster->replication_servers.size() == 2);
  CHECK(ok->cluster->replication_replicas == 3);
  CHECK(ok->cluster->replication_ack_timeout == std::chrono::milliseconds(5000));
  CHECK(ok->cluster->replication_image_min_bytes == 1u << 20);
  CHECK(ok->cluster->replication_image_ratio == 1.0);
  auto tuned =
    replicated({{"servers", {"nats://a:1"}}, {"image_min_bytes", 4096}, {"image_ratio", 0.5}});
  REQUIRE_MESSAGE(tuned.is_ok(), tuned.error().to_string());
  CHECK(tuned->cluster->replication_image_min_bytes == 4096);
  CHECK(tuned->cluster->replication_image_ratio == 0.5);
  CHECK(replicated({{"servers", {"nats://a:1"}}, {"image_ratio", -1}})
          .error()
          .message()
          .starts_with("cluster.replication.image_ratio:"));
  CHECK(replicated({{"servers", {"nats://a:1"}}, {"image_min_bytes", "big"}})
          .error()
          .message()
          .starts_with("cluster.replication.image_min_bytes:"));
  CHECK(replicated({{"servers", {"http://127.0.0.1:4222"}}})
          .error()
          .message()
          .starts_with("cluster.replication.servers:"));
  CHECK(replicated({{"servers", {"nats://a:1"}}, {"replicas", 2}})
          .error()
          .message()
          .starts_with("cluster.replication.replicas:"));
  CHECK(replicated({{"servers", {"nats://a:1"}}, {"ack_timeout_ms", 10}})
          .error()
          .message()
          .starts_with("cluster.replication.ack_timeout_ms:"));
  CHECK(replicated({{"servers", {"nats://a:1"}}, {"sync", true}})
          .error()
          .message()
          .starts_with("cluster.replication.sync: unknown key"));
  CHECK(error_with("shared_dir", "/srv/x").starts_with("cluster.shared_dir: is for storage"));
  CHECK(error_with("secret", "short").starts_with("cluster.secret:"));
  CHECK(error_with("secret", 1234567890123456789).starts_with("cluster.secret:"));
  CHECK(error_with("nodes", 3).starts_with("cluster.nodes: unknown key"));
}
