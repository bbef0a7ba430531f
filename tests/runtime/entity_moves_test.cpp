// entity_moves_test.cpp: the runtime's side of a shard move (runtime.hpp, "cluster mode: shard
// moves") between two real runtimes on two data directories: release closes the selected live
// activations only; entities_where lists the selected keys of every tenant; an exported file
// adopted by the other runtime serves the same facts, verifies, fires its alarm there and is
// counted in its tenant's usage; the export's claim fences older claims; a live activation
// makes export, adopt and forget answer BUSY; adopt refuses foreign bytes, another key's file and
// a wrong epoch, and a failed tenant-index write, leaving nothing behind; adopt replaces a file;
// forget removes the files, the index row, the alarm entry and the usage. Test thread; replies
// and adopt's answer arrive on other threads.
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <future>

#include "factum/runtime/runtime.hpp"
#include "factum/storage/entity_store.hpp"
#include "runtime_core.hpp"
#include "support/runtime_helpers.hpp"
#include "support/runtime_internals.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

namespace entity_moves_test {

namespace {

using tweak = std::function<void(runtime_config&)>;

std::unique_ptr<runtime> start(const fs::path& dir, tweak t = {}) {
  runtime_config c;
  c.data_dir = dir;
  c.storage_threads = 4;
  c.alarm_poll = 100ms;
  test::add_test_types(c.types);
  if (t)
    t(c);
  return test::start_ok(std::move(c));
}

using test::all_keys;
using test::call_ok;
using test::facts_of;

std::string export_ok(runtime& rt, const entity_key& k, int64_t epoch, const char* node = "n-a") {
  auto r = rt.export_entity(k, epoch, node);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

status adopt(runtime& rt, const entity_key& k, std::string bytes, int64_t epoch) {
  auto p = std::make_shared<std::promise<status>>();
  auto f = p->get_future();
  rt.adopt_entity(k, std::move(bytes), epoch, [p](status st) { p->set_value(std::move(st)); });
  return f.get();
}

/// Whether `k` has a live activation (the registry's entry).
bool live(runtime& rt, const entity_key& k) {
  auto& core = detail::runtime_testing::core(rt);
  std::lock_guard<std::mutex> g(core.reg.mu);
  return core.reg.map.count(k.to_string()) > 0;
}

using test::alarm_entry;

/// Files a move left under DATA/runtime/ (its temporary files are named move-*).
std::vector<std::string> temp_files_left(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir / "runtime"))
    if (e.path().filename().string().rfind("move-", 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

/// Whether `k` has any file at its path (the database, its -wal or its -shm).
bool has_files(const fs::path& dir, const entity_key& k) {
  auto db = k.file_path(dir);
  for (const char* suffix : {"", "-wal", "-shm"})
    if (fs::exists(db.string() + suffix))
      return true;
  return false;
}

/// Nothing of `k` is left on `rt` (on `dir`): no file, no index row, no usage, no temporary file.
void check_nothing_of(runtime& rt, const fs::path& dir, const entity_key& k) {
  CHECK_FALSE(has_files(dir, k));
  auto keys = rt.entities_where(all_keys);
  REQUIRE(keys.is_ok());
  CHECK(keys->empty());
  auto u = rt.tenant_usage_of(k.tenant);
  CHECK(u.entities == 0);
  CHECK(u.bytes == 0);
  CHECK(temp_files_left(dir).empty());
}

/// An ownership that always grants `epoch` to `node` (tests/http/cluster_test.cpp scripts more).
struct fixed_ownership final : entity_ownership {
  fixed_ownership(int64_t e, std::string n) : epoch(e), node(std::move(n)) {}
  result<owner_claim> claim_for(const entity_key&) const override {
    return owner_claim{epoch.load(), 0};
  }
  bool may_commit(const owner_claim&) const override { return true; }
  const std::string& node_id() const override { return node; }
  std::atomic<int64_t> epoch;
  std::string node;
};

auto& events = test::event_log::get();

} // namespace

TEST_CASE("shard moves: release closes the live activations of the selected keys only") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key a1{"acme", "counter", "a1"}, a2{"acme", "counter", "a2"},
    g1{"globex", "counter", "g1"};
  for (auto& k : {a1, a2, g1})
    call_ok(*rt, k, "add", {{"by", 1}});
  REQUIRE((live(*rt, a1) && live(*rt, a2) && live(*rt, g1))); // the idle timeout is 60 s
  CHECK(rt->release_entities([](const entity_key& k) { return k.tenant == "acme"; }, 10s) == 0);
  CHECK_FALSE(live(*rt, a1));
  CHECK_FALSE(live(*rt, a2));
  CHECK(live(*rt, g1));
  CHECK(rt->metrics().value("factum_hibernations_total") == 2);
  CHECK(rt->release_entities([](const entity_key&) { return false; }, 10s) == 0);
  CHECK(live(*rt, g1));
  // Released, not gone: the next call activates the entity again, with its state.
  CHECK(call_ok(*rt, a1, "add", {{"by", 1}})["value"] == 2);
}

TEST_CASE("shard moves: entities_where lists the selected keys of every tenant, in key order") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key x{"initech", "counter", "x"}, y{"acme", "alarmer", "y"}, z{"acme", "counter", "z"},
    w{"globex", "counter", "w"};
  for (auto& k : {x, z, w})
    call_ok(*rt, k, "add", {{"by", 1}});
  call_ok(*rt, y, "arm", {{"name", "later"}, {"delay_ms", 3'600'000}});
  auto counters = rt->entities_where([](const entity_key& k) { return k.type == "counter"; });
  REQUIRE(counters.is_ok());
  CHECK(*counters == std::vector<entity_key>{z, w, x});
  auto all = rt->entities_where(all_keys);
  REQUIRE(all.is_ok());
  CHECK(*all == std::vector<entity_key>{y, z, w, x});
  auto none = rt->entities_where([](const entity_key&) { return false; });
  REQUIRE(none.is_ok());
  CHECK(none->empty());
}

TEST_CASE("shard moves: an exported file adopted by another runtime serves the same facts, "
          "verifies, fires its alarm there and counts in its tenant's usage") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  entity_key k1{"acme", "counter", "moved"}, k2{"globex", "alarmer", "moved"};
  for (int by : {1, 2, 3})
    call_ok(*a, k1, "add", {{"by", by}});
  call_ok(*a, k2, "arm", {{"name", "later"}, {"delay_ms", 3000}, {"tag", "moved-there"}});
  auto facts_before = facts_of(*a, k1);
  REQUIRE(facts_before.size() == 3);

  // The old home: release, export under the move's epoch; the new home adopts; the old forgets.
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto e1 = export_ok(*a, k1, 3, "node-a");
  auto e2 = export_ok(*a, k2, 3, "node-a");
  auto e1_size = static_cast<int64_t>(e1.size()), e2_size = static_cast<int64_t>(e2.size());
  REQUIRE(adopt(*b, k1, std::move(e1), 3).is_ok());
  REQUIRE(adopt(*b, k2, std::move(e2), 3).is_ok());
  REQUIRE(a->forget_entity(k1).is_ok());
  REQUIRE(a->forget_entity(k2).is_ok());
  CHECK(temp_files_left(dir_a.path()).empty());
  CHECK(temp_files_left(dir_b.path()).empty());

  // The new home counts both, lists both and has k2's alarm in its index.
  CHECK(b->tenant_usage_of("acme").entities == 1);
  CHECK(b->tenant_usage_of("acme").bytes == e1_size);
  CHECK(b->tenant_usage_of("globex").entities == 1);
  CHECK(b->tenant_usage_of("globex").bytes == e2_size);
  auto listed = b->entities_where(all_keys);
  REQUIRE(listed.is_ok());
  CHECK(*listed == std::vector<entity_key>{k1, k2});
  CHECK(alarm_entry(*b, k2).has_value());
  CHECK(fs::exists(k1.file_path(dir_b.path())));
  CHECK_FALSE(fs::exists(k1.file_path(dir_b.path()).string() + "-wal")); // one file, WAL folded

  // The same facts, and the chain goes on from them.
  CHECK(facts_of(*b, k1) == facts_before);
  CHECK(call_ok(*b, k1, "add", {{"by", 4}})["value"] == 10);
  REQUIRE(b->release_entities([&](const entity_key& k) { return k == k1; }, 10s) == 0);
  {
    store_options ro;
    ro.read_only = true;
    auto s = entity_store::open_file(k1.file_path(dir_b.path()), ro);
    REQUIRE(s.is_ok());
    auto v = (*s)->verify();
    REQUIRE(v.is_ok());
    CHECK(v->ok);
    CHECK(v->facts_checked == 4);
    auto owners = (*s)->owners();
    REQUIRE(owners.is_ok());
    REQUIRE(owners->size() == 1);
    CHECK(owners->back().epoch == 3);
    CHECK(owners->back().node == "node-a");
  }

  // The alarm fires on the new home, once.
  REQUIRE(events.wait_for("alarm:moved-there", 1, 20s));
  auto fired = call_ok(*b, k2, "@facts", {{"type", "alarm_fired"}, {"limit", 10}});
  CHECK(fired.size() == 1);
  CHECK(a->metrics().value("factum_alarms_fired_total") == 0);

  // Nothing of either entity is left on the old home.
  CHECK_FALSE(has_files(dir_a.path(), k1));
  CHECK_FALSE(has_files(dir_a.path(), k2));
  auto left = a->entities_where(all_keys);
  REQUIRE(left.is_ok());
  CHECK(left->empty());
  CHECK(a->tenant_usage_of("acme").entities == 0);
  CHECK(a->tenant_usage_of("acme").bytes == 0);
  CHECK(a->tenant_usage_of("globex").entities == 0);
  CHECK_FALSE(alarm_entry(*a, k2).has_value());
  CHECK(events.count("alarm:moved-there") == 1);
}

TEST_CASE("shard moves: exports and adopts running at once each use temporary files of their own") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  constexpr int n = 8;
  std::vector<entity_key> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back({"acme", "counter", "c" + std::to_string(i)});
    call_ok(*a, keys.back(), "add", {{"by", i}});
  }
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  std::vector<std::future<result<std::string>>> exports;
  for (auto& k : keys)
    exports.push_back(
      std::async(std::launch::async, [&a, k] { return a->export_entity(k, 2, "n-a"); }));
  std::vector<std::future<status>> adopted; // all under way at once on b's storage threads
  for (int i = 0; i < n; ++i) {
    auto e = exports[i].get();
    REQUIRE_MESSAGE(e.is_ok(), e.error().to_string());
    auto p = std::make_shared<std::promise<status>>();
    adopted.push_back(p->get_future());
    b->adopt_entity(keys[i], std::move(e.value()), 2,
                    [p](status st) { p->set_value(std::move(st)); });
  }
  for (auto& f : adopted) {
    auto st = f.get();
    CHECK_MESSAGE(st.is_ok(), st.to_string());
  }
  CHECK(temp_files_left(dir_a.path()).empty());
  CHECK(temp_files_left(dir_b.path()).empty());
  CHECK(b->tenant_usage_of("acme").entities == n);
  for (int i = 0; i < n; ++i)
    CHECK(call_ok(*b, keys[i], "get")["value"] == i);
}

TEST_CASE("shard moves: the export's claim fences a store and an activation of an older epoch") {
  test::temp_dir tmp;
  auto owner = std::make_shared<fixed_ownership>(4, "n-a");
  auto rt = start(tmp.path(), [&](runtime_config& c) { c.ownership = owner; });
  entity_key k{"acme", "counter", "fenced"};
  call_ok(*rt, k, "add", {{"by", 1}}); // claimed under epoch 4 by its activation
  REQUIRE(rt->release_entities(all_keys, 10s) == 0);

  // A connection that claimed epoch 4 (an activation the release did not reach) writes before
  // the export and is refused after it.
  store_options o;
  o.data_dir = tmp.path();
  o.create_if_missing = false;
  o.owner_epoch = 4;
  o.owner_node = "n-a";
  auto old = entity_store::open(o, k);
  REQUIRE(old.is_ok());
  auto write_one = [&](entity_store& s) {
    fact_draft d;
    d.type = "counter";
    d.data = {{"by", 1}};
    auto f = s.append(d);
    return f ? s.commit() : f.error();
  };
  REQUIRE(write_one(**old).is_ok());
  auto bytes = export_ok(*rt, k, 5);
  CHECK(write_one(**old).code() == errc::not_owner);
  CHECK((*old)->fenced());
  old.value().reset();

  // An older or equal claim of another node cannot export it again.
  CHECK(rt->export_entity(k, 4, "n-a").error().code() == errc::not_owner);
  CHECK(rt->export_entity(k, 5, "n-b").error().code() == errc::not_owner);

  // The runtime's own next activation, under epoch 4, is refused and writes nothing.
  auto r = rt->call_sync(k, "add", R"({"by":1})");
  CHECK_FALSE(r.ok);
  CHECK(r.code == "NOT_OWNER");
  CHECK(rt->metrics().value("factum_cluster_activations_refused_total") >= 1);
  owner->epoch = 5;
  CHECK(call_ok(*rt, k, "get")["value"] == 2);
  CHECK(bytes.size() > 0);
}

TEST_CASE("shard moves: export, adopt and forget of an entity with a live activation answer BUSY") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  entity_key k{"acme", "counter", "busy"}, other{"acme", "counter", "other"};
  call_ok(*a, other, "add", {{"by", 1}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto bytes = export_ok(*a, other, 2);
  call_ok(*a, k, "add", {{"by", 1}});
  REQUIRE(live(*a, k));
  CHECK(a->export_entity(k, 2, "n-a").error().code() == errc::busy);
  CHECK(a->forget_entity(k).code() == errc::busy);
  CHECK(fs::exists(k.file_path(dir_a.path())));
  call_ok(*b, other, "get");
  REQUIRE(live(*b, other));
  CHECK(adopt(*b, other, bytes, 2).code() == errc::busy);
  CHECK(temp_files_left(dir_a.path()).empty());
  CHECK(temp_files_left(dir_b.path()).empty());
  // No file, and keys no path may be made of.
  CHECK(a->export_entity({"acme", "counter", "never"}, 2, "n-a").error().code() == errc::not_found);
  CHECK(a->export_entity({"..", "counter", "x"}, 2, "n-a").error().code() ==
        errc::invalid_argument);
  CHECK(adopt(*b, {"acme", "counter", "a/b"}, bytes, 2).code() == errc::invalid_argument);
  CHECK(b->forget_entity({"acme", "", "x"}).code() == errc::invalid_argument);
}

TEST_CASE("shard moves: adopt refuses bytes that are not an entity file, another key's file and "
          "a wrong epoch, leaving nothing behind") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  entity_key k1{"acme", "counter", "k1"}, k2{"acme", "counter", "k2"};
  call_ok(*a, k1, "add", {{"by", 1}});
  call_ok(*a, k2, "add", {{"by", 2}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto e1 = export_ok(*a, k1, 3);
  auto e2 = export_ok(*a, k2, 3);

  auto st = adopt(*b, k1, "not a database at all, only a few bytes", 3);
  CHECK(st.code() == errc::corruption);
  check_nothing_of(*b, dir_b.path(), k1);
  // A SQLite database that is not an entity file: the old home's alarm index, whole once the
  // old home stopped.
  a->stop();
  std::string sqlite_file;
  {
    std::ifstream in(dir_a.path() / "runtime" / "alarms.db", std::ios::binary);
    sqlite_file.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(sqlite_file.size() > 0);
  st = adopt(*b, k1, sqlite_file, 3);
  CHECK(st.code() == errc::corruption);
  check_nothing_of(*b, dir_b.path(), k1);
  st = adopt(*b, k1, e2, 3);
  CHECK(st.code() == errc::corruption);
  CHECK(st.message().find("acme/counter/k2") != std::string::npos);
  check_nothing_of(*b, dir_b.path(), k1);
  st = adopt(*b, k1, e1, 4);
  CHECK(st.code() == errc::invalid_argument);
  CHECK(st.message().find("epoch 3") != std::string::npos);
  check_nothing_of(*b, dir_b.path(), k1);

  REQUIRE(adopt(*b, k1, e1, 3).is_ok());
  CHECK(call_ok(*b, k1, "get")["value"] == 1);
}

TEST_CASE("shard moves: adopt when the tenant index write fails leaves no file at the key's path") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto fail = std::make_shared<std::atomic<bool>>(true);
  auto b = start(dir_b.path(), [fail](runtime_config& c) {
    c.tenant_index_fault = [fail](uint64_t, std::string_view what) {
      return fail->load() && what == "apply" ? 13 /* SQLITE_FULL */ : 0;
    };
  });
  entity_key k{"acme", "counter", "index-full"};
  call_ok(*a, k, "add", {{"by", 1}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto bytes = export_ok(*a, k, 3);
  auto st = adopt(*b, k, bytes, 3);
  CHECK(st.code() == errc::full);
  CHECK(b->metrics().value("factum_tenant_index_failures_total") >= 1);
  check_nothing_of(*b, dir_b.path(), k);
  fail->store(false);
  REQUIRE(adopt(*b, k, bytes, 3).is_ok());
  CHECK(fs::exists(k.file_path(dir_b.path())));
  CHECK(b->tenant_usage_of("acme").entities == 1);
  CHECK(call_ok(*b, k, "get")["value"] == 1);
}

TEST_CASE("shard moves: adopt over an existing file of an older claim replaces it, its -wal "
          "included, and a file of an older move never replaces a newer claim") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  entity_key k{"acme", "counter", "again"};
  call_ok(*a, k, "add", {{"by", 1}});
  call_ok(*a, k, "add", {{"by", 1}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto first = export_ok(*a, k, 3);
  call_ok(*a, k, "add", {{"by", 5}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto second = export_ok(*a, k, 4);
  auto facts_second = facts_of(*a, k);

  REQUIRE(adopt(*b, k, first, 3).is_ok());
  // The new home writes to its copy: its -wal then holds frames of that file, which must not be
  // replayed into the next one.
  CHECK(call_ok(*b, k, "add", {{"by", 100}})["value"] == 102);
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  REQUIRE(fs::file_size(k.file_path(dir_b.path()).string() + "-wal") > 0);

  REQUIRE(adopt(*b, k, second, 4).is_ok());
  CHECK(facts_of(*b, k) == facts_second);
  CHECK(call_ok(*b, k, "get")["value"] == 7);
  CHECK(b->tenant_usage_of("acme").entities == 1);
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  store_options ro;
  ro.read_only = true;
  auto s = entity_store::open_file(k.file_path(dir_b.path()), ro);
  REQUIRE(s.is_ok());
  CHECK((*s)->verify()->ok);
  CHECK((*s)->owners()->back().epoch == 4);
  s->reset();
  // A late file of an older move never replaces a newer claim's.
  auto late = adopt(*b, k, first, 3);
  CHECK(late.code() == errc::conflict);
  CHECK(facts_of(*b, k) == facts_second);
}

TEST_CASE("shard moves: the same move's file sent again (its sender restarted mid-move) is "
          "adopted again, and a claim newer than the move's still stays") {
  test::temp_dir dir_a, dir_b;
  auto a = start(dir_a.path());
  auto b = start(dir_b.path());
  entity_key k{"acme", "counter", "resent"};
  call_ok(*a, k, "add", {{"by", 2}});
  REQUIRE(a->release_entities(all_keys, 10s) == 0);
  auto sent = export_ok(*a, k, 9);
  REQUIRE(adopt(*b, k, sent, 9).is_ok());
  // The sender, restarted, resumes the move under the same epoch: its export claims the file
  // under that epoch again and sends it again.
  auto resent = export_ok(*a, k, 9);
  REQUIRE(adopt(*b, k, resent, 9).is_ok());
  CHECK(facts_of(*b, k) == facts_of(*a, k));
  CHECK(b->tenant_usage_of("acme").entities == 1);
  // The new home served it since (a newer claim): the same move's file no longer replaces it.
  REQUIRE(b->release_entities(all_keys, 10s) == 0);
  export_ok(*b, k, 10);
  CHECK(adopt(*b, k, resent, 9).code() == errc::conflict);
  CHECK(call_ok(*b, k, "get")["value"] == 2);
}

TEST_CASE("shard moves: forget removes the files, the index row, the alarm entry and the usage") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key k{"acme", "alarmer", "gone"}, stays{"acme", "counter", "stays"};
  call_ok(*rt, k, "arm", {{"name", "later"}, {"delay_ms", 3'600'000}});
  call_ok(*rt, stays, "add", {{"by", 1}});
  REQUIRE(rt->release_entities(all_keys, 10s) == 0);
  REQUIRE(alarm_entry(*rt, k).has_value());
  REQUIRE(rt->tenant_usage_of("acme").entities == 2);
  auto stays_bytes = entity_disk_bytes(stays.file_path(tmp.path()));

  REQUIRE(rt->forget_entity(k).is_ok());
  CHECK_FALSE(has_files(tmp.path(), k));
  CHECK_FALSE(fs::exists(k.file_path(tmp.path()).string() + "-unsynced"));
  CHECK_FALSE(alarm_entry(*rt, k).has_value());
  auto keys = rt->entities_where(all_keys);
  REQUIRE(keys.is_ok());
  CHECK(*keys == std::vector<entity_key>{stays});
  CHECK(rt->tenant_usage_of("acme").entities == 1);
  CHECK(rt->tenant_usage_of("acme").bytes == stays_bytes);
  // Forgetting again is ok; the entity is unknown to reads now.
  CHECK(rt->forget_entity(k).is_ok());
  CHECK(rt->tenant_usage_of("acme").entities == 1);
  CHECK(rt->call_sync(k, "@facts", "{}").code == "ENTITY_NOT_FOUND");
}

} // namespace entity_moves_test
