// shared_storage_test.cpp: two real runtimes, each with a data directory of its own, over one
// entity root (runtime_config::entity_root; runtime.hpp, "cluster mode: shards on shared
// storage"): files created by one are indexed in place by the other (listed, counted, their
// alarms fired there, a parked entry's parking ended) and unindexed without being touched; a
// file a child process has open is neither read by the index nor served, until it is closed;
// spare files are made in the data directory and taken into the entity root. Test thread;
// replies arrive on other threads.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/spare_pool.hpp"
#include "runtime_core.hpp"
#include "support/child_process.hpp"
#include "support/runtime_helpers.hpp"
#include "support/runtime_internals.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

namespace shared_storage_test {

namespace {

std::unique_ptr<runtime> start_on(const fs::path& data, const fs::path& root, int spares = 0) {
  runtime_config c;
  c.data_dir = data;
  c.entity_root = root;
  c.storage_threads = 4;
  c.alarm_poll = 100ms;
  c.spare_files = spares;
  test::add_test_types(c.types);
  return test::start_ok(std::move(c));
}

using test::all_keys;
using test::call_ok;

bool all_digests(std::string_view) {
  return true;
}

using test::alarm_entry;

size_t parked_entries(runtime& rt) {
  auto& core = detail::runtime_testing::core(rt);
  std::lock_guard<std::mutex> g(core.alarms.mu);
  auto p = core.alarms.index->parked();
  REQUIRE(p.is_ok());
  return p->size();
}

std::vector<entity_key> listed(runtime& rt) {
  auto keys = rt.entities_where(all_keys);
  REQUIRE(keys.is_ok());
  return *keys;
}

auto& events = test::event_log::get();

/// A child process that opens an entity file read-write (storage only: no runtime, no threads),
/// reports whether it could, and keeps it open until let_go().
struct holder {
  test::child_process child;
  bool holding = false;

  explicit holder(const fs::path& db) {
    REQUIRE(child.run([&](int report, int words) {
      store_options o;
      o.create_if_missing = false;
      auto s = entity_store::open_file(db, o);
      char c = s ? 'y' : 'n';
      (void)!::write(report, &c, 1);
      (void)!::read(words, &c, 1);
      ::_exit(0);
    }));
    char c = 'n';
    REQUIRE(::read(child.reports(), &c, 1) == 1);
    holding = c == 'y';
  }
  /// Tells the child to close the file and exit; whether it exited cleanly.
  bool let_go() {
    if (child.pid() < 0)
      return false;
    child.tell('x');
    return child.wait() && WIFEXITED(child.status()) && WEXITSTATUS(child.status()) == 0;
  }
  ~holder() { let_go(); }
};

} // namespace

TEST_CASE("shared storage: a second runtime indexes the files in place, serves them, fires their "
          "alarms, and unindexing drops its rows and entries without touching a file") {
  test::temp_dir root, data_a, data_b;
  entity_key k1{"acme", "counter", "shared-1"}, k2{"globex", "alarmer", "shared-2"};
  json facts_before;
  {
    auto a = start_on(data_a.path(), root.path());
    for (int by : {1, 2, 3})
      call_ok(*a, k1, "add", {{"by", by}});
    call_ok(*a, k2, "arm", {{"name", "later"}, {"delay_ms", 2500}, {"tag", "fired-on-b"}});
    facts_before = call_ok(*a, k1, "@facts", {{"limit", 100}});
    a->stop(); // the process that had them is gone (as after its kill)
  }
  CHECK(fs::exists(k1.file_path(root.path())));
  CHECK_FALSE(fs::exists(k1.file_path(data_a.path())));

  auto b = start_on(data_b.path(), root.path());
  CHECK(listed(*b).empty());
  // Only the selected digests: k1's.
  auto only_k1 = b->index_entities([&](std::string_view d) { return d == k1.digest(); });
  REQUIRE_MESSAGE(only_k1.is_ok(), only_k1.error().to_string());
  CHECK(only_k1->indexed == 1);
  CHECK(listed(*b) == std::vector<entity_key>{k1});
  auto rep = b->index_entities(all_digests);
  REQUIRE(rep.is_ok());
  CHECK(rep->indexed == 2); // k1 again: its row is kept, nothing counted twice
  CHECK(rep->busy.empty());
  CHECK(rep->unreadable == 0);
  CHECK(listed(*b) == std::vector<entity_key>{k1, k2});
  CHECK(b->tenant_usage_of("acme").entities == 1);
  CHECK(b->tenant_usage_of("acme").bytes > 0);
  CHECK(b->tenant_usage_of("globex").entities == 1);
  CHECK(alarm_entry(*b, k2).has_value());

  CHECK(call_ok(*b, k1, "@facts", {{"limit", 100}}) == facts_before);
  CHECK(call_ok(*b, k1, "add", {{"by", 4}})["value"] == 10);
  REQUIRE(events.wait_for("alarm:fired-on-b", 1, 20s));
  CHECK(call_ok(*b, k2, "@facts", {{"type", "alarm_fired"}, {"limit", 10}}).size() == 1);

  // Unindexed: no row, no usage, no alarm entry; the files stay, and still open as before.
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  call_ok(*b, k2, "arm", {{"name", "much-later"}, {"delay_ms", 3'600'000}});
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  CHECK(alarm_entry(*b, k2).has_value());
  auto gone = b->unindex_entities(all_keys);
  REQUIRE(gone.is_ok());
  CHECK(*gone == 2);
  CHECK(listed(*b).empty());
  CHECK(b->tenant_usage_of("acme").entities == 0);
  CHECK(b->tenant_usage_of("acme").bytes == 0);
  CHECK(b->tenant_usage_of("globex").entities == 0);
  CHECK_FALSE(alarm_entry(*b, k2).has_value());
  CHECK(fs::exists(k1.file_path(root.path())));
  CHECK(fs::exists(k2.file_path(root.path())));
  b->stop();
  auto c = start_on(data_a.path(), root.path());
  CHECK(call_ok(*c, k1, "add", {{"by", 5}})["value"] == 15);
  CHECK(events.count("alarm:fired-on-b") == 1);
}

TEST_CASE("shared storage: a file another process has open is neither indexed nor served until "
          "that process closes it") {
  test::temp_dir root, data_a, data_b;
  entity_key k{"acme", "counter", "held-elsewhere"};
  {
    auto a = start_on(data_a.path(), root.path());
    call_ok(*a, k, "add", {{"by", 1}});
    a->stop();
  }
  // Another process (a paused node that still has the file open) holds it.
  holder other(k.file_path(root.path()));
  REQUIRE(other.holding);
  auto b = start_on(data_b.path(), root.path());
  auto rep = b->index_entities(all_digests);
  REQUIRE(rep.is_ok());
  CHECK(rep->indexed == 0);
  CHECK(rep->busy == std::vector<std::string>{k.digest()});
  CHECK(listed(*b).empty());
  auto r = b->call_sync(k, "add", json{{"by", 1}}.dump());
  CHECK_FALSE(r.ok);
  CHECK(r.retryable);
  CHECK(r.http_status == 503);
  CHECK(r.code == "ENTITY_BUSY");
  CHECK(r.json().value("detail", "").find("open in another process") != std::string::npos);

  REQUIRE(other.let_go());
  rep = b->index_entities(all_digests);
  REQUIRE(rep.is_ok());
  CHECK(rep->indexed == 1);
  CHECK(rep->busy.empty());
  CHECK(listed(*b) == std::vector<entity_key>{k});
  CHECK(call_ok(*b, k, "add", {{"by", 1}})["value"] == 2);
  // The other way round: while b has it open, another process cannot open it.
  holder late(k.file_path(root.path()));
  CHECK_FALSE(late.holding);
}

TEST_CASE("shared storage: indexing a shard ends the parking of its alarm entries") {
  test::temp_dir root, data_a, data_b;
  entity_key k{"acme", "alarmer", "parked"};
  {
    auto a = start_on(data_a.path(), root.path());
    call_ok(*a, k, "arm", {{"name", "soon"}, {"delay_ms", 1500}, {"tag", "unparked"}});
    a->stop();
  }
  auto b = start_on(data_b.path(), root.path());
  auto& core = detail::runtime_testing::core(*b);
  // An entry parked for an hour, as a wake refused here (another node's shard) leaves it.
  call_ok(*b, k, "@facts", {{"limit", 10}}); // opens k here: its alarm entry is written
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  auto entry = alarm_entry(*b, k);
  REQUIRE(entry.has_value());
  REQUIRE(core
            .with_index_writer([&](alarm_index& w) {
              return w.park({alarm_index_parked{alarm_index_entry{k, *entry, 0},
                                                core.now() + 3'600'000, "another node's"}});
            })
            .is_ok());
  REQUIRE(parked_entries(*b) == 1);
  auto rep = b->index_entities(all_digests);
  REQUIRE(rep.is_ok());
  CHECK(rep->indexed == 1);
  CHECK(parked_entries(*b) == 0);
  REQUIRE(events.wait_for("alarm:unparked", 1, 20s)); // within the test's bound, not an hour
}

TEST_CASE("shared storage: spare files are made in the data directory and taken into the entity "
          "root") {
  test::temp_dir root, data;
  auto rt = start_on(data.path(), root.path(), 4);
  REQUIRE(detail::runtime_testing::core(*rt).store_opts.spares->wait_ready(1, 20s) >= 1);
  entity_key k{"acme", "counter", "from-a-spare"};
  call_ok(*rt, k, "add", {{"by", 1}});
  CHECK(rt->metrics().value("factum_spare_files_taken_total") == 1);
  CHECK(fs::exists(k.file_path(root.path())));
  CHECK_FALSE(fs::exists(k.file_path(data.path())));
  CHECK(fs::exists(data.path() / "spares"));
  CHECK_FALSE(fs::exists(root.path() / "spares"));
  CHECK_FALSE(fs::exists(root.path() / "runtime" / "LOCK"));
  CHECK(fs::exists(data.path() / "runtime" / "LOCK"));
}

} // namespace shared_storage_test
