// tenant_quota_test.cpp: per-tenant quotas through the runtime (runtime_config::tenant_quotas):
// a tenant at its max_entities is refused 429 TENANT_QUOTA_EXCEEDED for a new entity and no
// file is made, while its existing entities and other tenants go on; the count is exact under
// concurrent creations, survives restarts, and is rebuilt from the entity files when the tenant
// index is deleted or damaged; a creation that made no file is not counted; a tenant at its
// max_bytes is refused 507 on writes and not on reads, until its files take less again. Test
// thread; replies arrive on CAF workers.
#include <doctest/doctest.h>

#include <fstream>
#include <future>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/tenant_index.hpp"
#include "support/eventually.hpp"
#include "support/runtime_helpers.hpp"
#include "support/start_notes.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace tenant_quota_test {

namespace {

using tweak = std::function<void(runtime_config&)>;

std::unique_ptr<runtime> start(const fs::path& dir, tweak t = {}) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 8;
  test::add_test_types(c.types);
  if (t)
    t(c);
  return test::start_ok(std::move(c));
}

tweak max_entities(const std::string& tenant, int64_t n) {
  return [tenant, n](runtime_config& c) { c.tenant_quotas[tenant].max_entities = n; };
}

call_reply add(runtime& rt, const std::string& tenant, const std::string& id) {
  return rt.call_sync(entity_key{tenant, "counter", id}, "add", R"({"by":1})");
}

bool has_file(const fs::path& dir, const std::string& tenant, const std::string& id) {
  return fs::exists(entity_key{tenant, "counter", id}.file_path(dir));
}

/// Polls `cond` until it holds or 10 s pass (for gauges the runtime sets on other threads).
using test::eventually;

} // namespace

TEST_CASE("tenant quotas: a tenant at max_entities gets 429 for a new entity and no file, then its "
          "existing entities and other tenants go on") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), max_entities("acme", 2));
  REQUIRE(add(*rt, "acme", "a1").ok);
  REQUIRE(add(*rt, "acme", "a2").ok);
  auto r = add(*rt, "acme", "a3");
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 429);
  CHECK(r.code == "TENANT_QUOTA_EXCEEDED");
  CHECK_FALSE(r.retryable);
  auto body = r.json();
  CHECK(body["quota"] == "max_entities");
  CHECK(body["used"] == 2);
  CHECK(body["limit"] == 2);
  CHECK(body["detail"].get<std::string>().find("max_entities 2") != std::string::npos);
  CHECK_FALSE(has_file(tmp.path(), "acme", "a3"));
  // A read of the entity that was not created is a 404, as for any entity never written.
  CHECK(rt->call_sync(entity_key{"acme", "counter", "a3"}, "@facts", "{}").code ==
        "ENTITY_NOT_FOUND");
  // Existing entities keep working, reads and writes.
  auto again = add(*rt, "acme", "a1");
  REQUIRE(again.ok);
  CHECK(again.json()["value"] == 2);
  CHECK(rt->call_sync(entity_key{"acme", "counter", "a2"}, "@facts", "{}").ok);
  // Another tenant is not touched by acme's quota.
  for (int i = 0; i < 3; ++i)
    CHECK(add(*rt, "globex", "g" + std::to_string(i)).ok);
  auto u = rt->tenant_usage_of("acme");
  CHECK(u.entities == 2);
  CHECK(u.bytes > 0);
  CHECK(rt->tenant_usage_of("globex").entities == 3);
  auto& m = rt->metrics();
  CHECK(m.value("factum_tenant_quota_refusals_total", {{"quota", "max_entities"}}) == 1);
  // The tenants with a quota only.
  CHECK(m.value("factum_tenant_entities", {{"tenant", "acme"}}) == 2);
  CHECK(m.value("factum_tenant_max_entities", {{"tenant", "acme"}}) == 2);
  auto text = metrics::text({&m});
  CHECK(text.find("factum_tenant_entities{tenant=\"globex\"}") == std::string::npos);
}

TEST_CASE("tenant quotas: many creations at once for one tenant never exceed max_entities") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), max_entities("acme", 5));
  constexpr int rounds = 3, per_round = 40;
  int created = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::future<call_reply>> replies;
    for (int i = 0; i < per_round; ++i) {
      auto p = std::make_shared<std::promise<call_reply>>();
      replies.push_back(p->get_future());
      rt->call(entity_key{"acme", "counter", "r" + std::to_string(round) + "-" + std::to_string(i)},
               "add", R"({"by":1})", {}, [p](call_reply r) { p->set_value(std::move(r)); });
    }
    for (auto& f : replies) {
      auto r = f.get();
      if (r.ok)
        ++created;
      else
        CHECK(r.code == "TENANT_QUOTA_EXCEEDED");
    }
  }
  CHECK(created == 5);
  CHECK(rt->tenant_usage_of("acme").entities == 5);
  int files = 0;
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < per_round; ++i)
      files += has_file(tmp.path(), "acme", "r" + std::to_string(round) + "-" + std::to_string(i));
  CHECK(files == 5);
  CHECK(rt->metrics().value("factum_tenant_quota_refusals_total", {{"quota", "max_entities"}}) ==
        rounds * per_round - 5);
}

TEST_CASE("tenant quotas: the count survives a restart, then a deleted or damaged tenant index is "
          "rebuilt from the entity files") {
  test::temp_dir tmp;
  {
    auto rt = start(tmp.path(), max_entities("acme", 2));
    REQUIRE(add(*rt, "acme", "a1").ok);
    REQUIRE(add(*rt, "acme", "a2").ok);
    REQUIRE(add(*rt, "globex", "g1").ok);
  }
  auto refused_after_start = [&](const std::string& what) {
    INFO(what);
    auto rt = start(tmp.path(), max_entities("acme", 2));
    CHECK(rt->tenant_usage_of("acme").entities == 2);
    CHECK(rt->tenant_usage_of("globex").entities == 1);
    CHECK(add(*rt, "acme", "a3").code == "TENANT_QUOTA_EXCEEDED");
    CHECK(add(*rt, "acme", "a1").ok);
    CHECK_FALSE(has_file(tmp.path(), "acme", "a3"));
    return std::make_pair(test::notes_about(rt->start_notes(), "tenant index"),
                          rt->metrics().value("factum_tenant_index_rebuilds_total"));
  };
  auto [notes, rebuilds] = refused_after_start("a plain restart");
  CHECK(notes.empty());
  CHECK(rebuilds == 0);
  // Deleted: rebuilt, and the start says so.
  for (const char* f : {"tenants.db", "tenants.db-wal", "tenants.db-shm"})
    fs::remove(tmp.path() / "runtime" / f);
  std::tie(notes, rebuilds) = refused_after_start("a deleted index");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("missing") != std::string::npos);
  CHECK(notes[0].find("3 entity files: 3 entities") != std::string::npos);
  CHECK(rebuilds == 1);
  // Damaged: set aside, rebuilt.
  for (const char* f : {"tenants.db-wal", "tenants.db-shm"})
    fs::remove(tmp.path() / "runtime" / f);
  {
    std::ofstream out(tmp.path() / "runtime" / "tenants.db", std::ios::binary | std::ios::trunc);
    out << std::string(8192, 'x');
  }
  std::tie(notes, rebuilds) = refused_after_start("a damaged index");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("damaged") != std::string::npos);
  CHECK(rebuilds == 1);
}

TEST_CASE("tenant quotas: a creation that made no file is not counted") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), max_entities("acme", 1));
  // A -wal without its database at the entity's path: the store refuses to create over it.
  auto blocked = entity_key{"acme", "counter", "blocked"}.file_path(tmp.path());
  fs::create_directories(blocked.parent_path());
  {
    std::ofstream out(blocked.native() + "-wal", std::ios::binary);
    out << std::string(4096, 'w');
  }
  auto r = add(*rt, "acme", "blocked");
  CHECK(r.code == "ENTITY_STORAGE_CORRUPT");
  CHECK(rt->tenant_usage_of("acme").entities == 0);
  // Its reservation was given back: the one entity acme may have can still be made.
  CHECK(add(*rt, "acme", "a1").ok);
  CHECK(add(*rt, "acme", "a2").code == "TENANT_QUOTA_EXCEEDED");
}

TEST_CASE("tenant quotas: a creation whose count cannot be written is refused 503 and makes no "
          "file") {
  test::temp_dir tmp;
  auto fail = std::make_shared<std::atomic<bool>>(true);
  auto rt = start(tmp.path(), [fail](runtime_config& c) {
    c.tenant_index_fault = [fail](uint64_t, std::string_view what) {
      return fail->load() && what == "apply" ? 13 /* SQLITE_FULL */ : 0;
    };
  });
  auto r = add(*rt, "acme", "a1");
  CHECK(r.http_status == 503);
  CHECK(r.code == "STORAGE_FULL");
  CHECK_FALSE(has_file(tmp.path(), "acme", "a1"));
  CHECK(rt->tenant_usage_of("acme").entities == 0);
  CHECK(rt->metrics().value("factum_tenant_index_failures_total") >= 1);
  fail->store(false);
  CHECK(add(*rt, "acme", "a1").ok);
  CHECK(rt->tenant_usage_of("acme").entities == 1);
}

TEST_CASE("tenant quotas: a tenant at max_bytes gets 507 on writes and 200 on reads, and writes "
          "again once its files take less") {
  test::temp_dir tmp;
  // Every close checkpoints and empties the -wal; one entity open at a time, so that opening
  // another tenant's entity closes acme's.
  auto base = [](runtime_config& c) {
    c.wal_kept_on_close_kib = 0;
    c.max_active_entities = 1;
  };
  int64_t closed_bytes = 0;
  {
    auto rt = start(tmp.path(), base);
    REQUIRE(add(*rt, "acme", "b1").ok);
  }
  {
    auto rt = start(tmp.path(), base);
    closed_bytes = rt->tenant_usage_of("acme").bytes;
  }
  REQUIRE(closed_bytes > 0);
  CHECK(closed_bytes ==
        entity_disk_bytes(entity_key{"acme", "counter", "b1"}.file_path(tmp.path())));
  // Room for the database and 100 KiB of -wal: a few commits fill it (the -wal grows ahead by
  // 256 KiB once past 64 KiB).
  int64_t limit = closed_bytes + 100 * 1024;
  auto rt = start(tmp.path(), [&](runtime_config& c) {
    base(c);
    c.tenant_quotas["acme"].max_bytes = limit;
  });
  entity_key b1{"acme", "counter", "b1"};
  int ok = 0;
  call_reply refused;
  for (int i = 0; i < 500 && refused.code.empty(); ++i) {
    auto r = rt->call_sync(b1, "add", R"({"by":1})");
    if (r.ok)
      ++ok;
    else
      refused = r;
  }
  CHECK(ok >= 1);
  CHECK(refused.http_status == 507);
  CHECK(refused.code == "TENANT_STORAGE_QUOTA_EXCEEDED");
  CHECK(refused.json()["quota"] == "max_bytes");
  CHECK(refused.json()["limit"] == limit);
  CHECK(rt->tenant_usage_of("acme").bytes >= limit);
  // Reads and operator actions still work; so does another tenant.
  auto facts = rt->call_sync(b1, "@facts", R"({"type":"counter","limit":1000})");
  REQUIRE(facts.ok);
  CHECK(facts.json().size() == static_cast<size_t>(ok + 1));
  CHECK(rt->call_sync(b1, "@breakers", "{}").ok);
  auto before = rt->metrics().value("factum_hibernations_total");
  CHECK(add(*rt, "globex", "g1").ok); // takes the one slot: acme/b1 closes
  REQUIRE(eventually([&] { return rt->metrics().value("factum_hibernations_total") > before; }));
  REQUIRE(eventually([&] { return rt->tenant_usage_of("acme").bytes < limit; }));
  auto back = rt->call_sync(b1, "add", R"({"by":1})");
  CHECK(back.ok);
  CHECK(back.json()["value"] == ok + 2);
  CHECK(rt->metrics().value("factum_tenant_quota_refusals_total", {{"quota", "max_bytes"}}) == 1);
}

TEST_CASE("tenant quotas: invalid quotas are refused at start") {
  test::temp_dir tmp;
  runtime_config c;
  c.data_dir = tmp.path();
  c.tenant_quotas["acme"].max_bytes = -1;
  auto r = runtime::start(std::move(c));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().message().find("tenant_quotas.acme.max_bytes") != std::string::npos);
}

} // namespace tenant_quota_test
