// etcd_client_test.cpp: the etcd v3 client (factum/cluster/etcd_client.hpp) against a real etcd
// started by tests/support/etcd_server.hpp: leases, conditional writes and their revisions,
// prefix reads of binary keys. The test's thread; etcd runs as child processes.
#include <algorithm>
#include <thread>

#include <doctest/doctest.h>

#include "etcd_test_client.hpp"
#include "factum/cluster/etcd_client.hpp"
#include "support/etcd_server.hpp"

using namespace factum;
using namespace factum::cluster;
using namespace std::chrono_literals;

namespace {

using test::client_of;

/// Polls `key` until it is absent (true) or `limit` passed (false).
bool wait_absent(etcd_client& c, const std::string& key, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto got = c.get(key);
    REQUIRE_MESSAGE(got.is_ok(), got.error().to_string());
    if (!got->has_value())
      return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

} // namespace

TEST_CASE("a lease kept alive keeps its key past its TTL") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto lease = c->grant(1s);
  REQUIRE_MESSAGE(lease.is_ok(), lease.error().to_string());
  CHECK(*lease > 0);
  auto rev = c->put("/nodes/n1", "127.0.0.1:7000", *lease);
  REQUIRE(rev.is_ok());
  // Keep it alive at TTL/4 for 2.5 TTLs: the key stays, bound to the lease.
  auto until = std::chrono::steady_clock::now() + 2500ms;
  while (std::chrono::steady_clock::now() < until) {
    auto ttl = c->keepalive(*lease);
    REQUIRE_MESSAGE(ttl.is_ok(), ttl.error().to_string());
    CHECK(*ttl == 1000); // etcd's whole seconds, in ms
    auto got = c->get("/nodes/n1");
    REQUIRE(got.is_ok());
    REQUIRE(got->has_value());
    CHECK((*got)->lease == *lease);
    CHECK((*got)->value == "127.0.0.1:7000");
    CHECK((*got)->mod_revision == *rev);
    std::this_thread::sleep_for(250ms);
  }
  auto left = c->time_to_live(*lease);
  REQUIRE(left.is_ok());
  CHECK(*left == 0); // alive, less than a second left (etcd rounds down)
}

TEST_CASE("a lease not kept alive expires: its key disappears, keepalive answers 0") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto lease = c->grant(1s);
  REQUIRE(lease.is_ok());
  REQUIRE(c->put("/nodes/n2", "x", *lease).is_ok());
  auto start = std::chrono::steady_clock::now();
  CHECK(wait_absent(*c, "/nodes/n2", 5s));
  CHECK(std::chrono::steady_clock::now() - start >= 500ms); // not before (most of) its TTL
  auto ttl = c->keepalive(*lease);
  REQUIRE_MESSAGE(ttl.is_ok(), ttl.error().to_string());
  CHECK(*ttl == 0);
  auto left = c->time_to_live(*lease);
  REQUIRE(left.is_ok());
  CHECK(*left == -1);
  // A write bound to the expired lease: NOT_FOUND, at once (not a failover to nowhere).
  auto put = c->put("/nodes/n2", "x", *lease);
  REQUIRE_FALSE(put.is_ok());
  CHECK(put.error().code() == errc::not_found);
  auto created = c->create_if_absent("/nodes/n2", "x", *lease);
  REQUIRE_FALSE(created.is_ok());
  CHECK(created.error().code() == errc::not_found);
  // A lease that never existed is the same as an expired one.
  auto unknown = c->keepalive(12345);
  REQUIRE(unknown.is_ok());
  CHECK(*unknown == 0);
  CHECK(c->revoke(*lease).is_ok());
  CHECK(c->revoke(12345).is_ok());
}

TEST_CASE("grant rounds the TTL up to whole seconds, and revoke deletes the lease's keys") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto lease = c->grant(1500ms);
  REQUIRE(lease.is_ok());
  auto remaining = c->time_to_live(*lease);
  REQUIRE(remaining.is_ok());
  CHECK((*remaining == 1000 || *remaining == 2000)); // 2 s granted, whole seconds left rounded down
  auto ttl = c->keepalive(*lease);
  REQUIRE(ttl.is_ok());
  CHECK(*ttl == 2000);
  REQUIRE(c->put("/shards/1", "n1", *lease).is_ok());
  REQUIRE(c->put("/shards/2", "n1", *lease).is_ok());
  REQUIRE(c->put("/shards/3", "n1").is_ok()); // not bound
  CHECK(c->revoke(*lease).is_ok());
  auto left = c->range_prefix("/shards/");
  REQUIRE(left.is_ok());
  REQUIRE(left->size() == 1);
  CHECK(left->at(0).key == "/shards/3");
  CHECK(left->at(0).lease == 0);
  CHECK(c->revoke(*lease).is_ok()); // again: ok
  auto gone = c->keepalive(*lease);
  REQUIRE(gone.is_ok());
  CHECK(*gone == 0);
}

TEST_CASE(
  "create_if_absent succeeds once, and its revision is the key's create_revision and grows") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto first = c->create_if_absent("/shards/7", "n1");
  REQUIRE_MESSAGE(first.is_ok(), first.error().to_string());
  CHECK(first->succeeded);
  CHECK_FALSE(first->current.has_value());
  int64_t read_rev = 0;
  auto got = c->get("/shards/7", &read_rev);
  REQUIRE(got.is_ok());
  REQUIRE(got->has_value());
  CHECK((*got)->create_revision == first->revision);
  CHECK((*got)->mod_revision == first->revision);
  CHECK((*got)->version == 1);
  CHECK(read_rev == first->revision);

  auto second = c->create_if_absent("/shards/7", "n2");
  REQUIRE(second.is_ok());
  CHECK_FALSE(second->succeeded);
  REQUIRE(second->current.has_value());
  CHECK(second->current->value == "n1");
  CHECK(second->current->create_revision == first->revision);
  CHECK(second->revision == first->revision); // a failed txn writes nothing

  auto other = c->create_if_absent("/shards/8", "n2");
  REQUIRE(other.is_ok());
  CHECK(other->succeeded);
  CHECK(other->revision > first->revision); // cluster-wide monotonic: usable as an epoch
  REQUIRE(c->delete_key("/shards/7").is_ok());
  auto again = c->create_if_absent("/shards/7", "n3");
  REQUIRE(again.is_ok());
  CHECK(again->succeeded);
  CHECK(again->revision > other->revision);
}

TEST_CASE("put_if_mod_revision and delete_if_mod_revision succeed only at the key's revision") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto created = c->create_if_absent("/shards/1", "n1");
  REQUIRE(created.is_ok());
  int64_t rev = created->revision;

  auto stale = c->put_if_mod_revision("/shards/1", "n2", rev - 1);
  REQUIRE(stale.is_ok());
  CHECK_FALSE(stale->succeeded);
  REQUIRE(stale->current.has_value());
  CHECK(stale->current->value == "n1");
  CHECK(stale->current->mod_revision == rev);

  auto moved = c->put_if_mod_revision("/shards/1", "n2", rev);
  REQUIRE(moved.is_ok());
  CHECK(moved->succeeded);
  CHECK(moved->revision > rev);
  auto got = c->get("/shards/1");
  REQUIRE(got.is_ok());
  CHECK((*got)->value == "n2");
  CHECK((*got)->mod_revision == moved->revision);
  CHECK((*got)->create_revision == rev);
  CHECK((*got)->version == 2);

  auto old_delete = c->delete_if_mod_revision("/shards/1", rev);
  REQUIRE(old_delete.is_ok());
  CHECK_FALSE(old_delete->succeeded);
  REQUIRE(old_delete->current.has_value());
  CHECK(old_delete->current->mod_revision == moved->revision);
  CHECK(c->get("/shards/1")->has_value());

  auto deleted = c->delete_if_mod_revision("/shards/1", moved->revision);
  REQUIRE(deleted.is_ok());
  CHECK(deleted->succeeded);
  CHECK(deleted->revision > moved->revision);
  CHECK_FALSE(c->get("/shards/1")->has_value());

  // On an absent key: a stale revision fails with current == nullopt; 0 matches.
  auto absent = c->put_if_mod_revision("/shards/1", "n3", moved->revision);
  REQUIRE(absent.is_ok());
  CHECK_FALSE(absent->succeeded);
  CHECK_FALSE(absent->current.has_value());
  auto zero = c->put_if_mod_revision("/shards/1", "n3", 0);
  REQUIRE(zero.is_ok());
  CHECK(zero->succeeded);
  CHECK(c->delete_key("/shards/1").is_ok());
  CHECK(c->delete_key("/shards/1").is_ok()); // absent: ok
}

TEST_CASE("transact writes every key only when every comparison holds") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  auto home = c->put("/homes/3", "n1");
  REQUIRE(home.is_ok());
  auto move = c->create_if_absent("/moves/3", R"({"from":"n1","to":"n2"})");
  REQUIRE(move.is_ok());
  using f = etcd_compare::field;
  auto hand_over = [&](const std::string& home_is, int64_t move_epoch) {
    return c->transact(
      {{"/homes/3", f::value, home_is, 0}, {"/moves/3", f::create, {}, move_epoch}},
      {{"/homes/3", std::string("n2")}, {"/moves/3", std::nullopt}});
  };
  auto wrong_home = hand_over("n3", move->revision);
  REQUIRE(wrong_home.is_ok());
  CHECK_FALSE(wrong_home->succeeded);
  auto wrong_epoch = hand_over("n1", move->revision + 1);
  REQUIRE(wrong_epoch.is_ok());
  CHECK_FALSE(wrong_epoch->succeeded);
  CHECK((*c->get("/homes/3"))->value == "n1"); // nothing written
  CHECK(c->get("/moves/3")->has_value());
  auto done = hand_over("n1", move->revision);
  REQUIRE(done.is_ok());
  CHECK(done->succeeded);
  CHECK(done->revision > move->revision);
  CHECK((*c->get("/homes/3"))->value == "n2");
  CHECK_FALSE(c->get("/moves/3")->has_value());
  // A mod-revision comparison, and a put bound to a lease.
  auto lease = c->grant(std::chrono::seconds(5));
  REQUIRE(lease.is_ok());
  auto mod = (*c->get("/homes/3"))->mod_revision;
  auto leased = c->transact({{"/homes/3", f::mod, {}, mod}}, {{"/shards/3", "n2", *lease}});
  REQUIRE(leased.is_ok());
  CHECK(leased->succeeded);
  CHECK((*c->get("/shards/3"))->lease == *lease);
  CHECK(c->transact({}, {}).error().code() == errc::invalid_argument);
  CHECK(c->transact({{"/homes/3", f::mod, {}, -1}}, {{"/x", "y"}}).error().code() ==
        errc::invalid_argument);
}

TEST_CASE("range_prefix returns only the prefix, sorted, with binary keys and values") {
  test::etcd_server etcd;
  auto c = client_of({etcd.url()});
  std::string every_byte;
  for (int b = 0; b < 256; ++b)
    every_byte.push_back(char(b));
  std::string p = std::string("p\0/", 3);
  std::vector<std::pair<std::string, std::string>> inside = {
    {p + "b", every_byte},
    {p + std::string("\0", 1), ""},
    {p + "\xff\xfe", every_byte.substr(0, 1)},
    {p + "a", every_byte.substr(0, 2)},
    {p + "a\xff", every_byte.substr(0, 4)},
  };
  std::vector<std::string> outside = {std::string("p\0", 2),
                                      std::string("p\0"
                                                  "0",
                                                  3),
                                      "p",
                                      std::string("o\0/", 3),
                                      "q",
                                      "\xff"};
  for (auto& [k, v] : inside)
    REQUIRE(c->put(k, v).is_ok());
  int64_t last_put = 0;
  for (auto& k : outside) {
    auto r = c->put(k, "out");
    REQUIRE(r.is_ok());
    last_put = *r;
  }

  int64_t rev = 0;
  auto got = c->range_prefix(p, &rev);
  REQUIRE_MESSAGE(got.is_ok(), got.error().to_string());
  std::sort(inside.begin(), inside.end());
  REQUIRE(got->size() == inside.size());
  for (size_t i = 0; i < inside.size(); ++i) {
    CHECK(got->at(i).key == inside[i].first);
    CHECK(got->at(i).value == inside[i].second);
  }
  CHECK(rev == last_put); // the read saw every put

  // A prefix ending in 0xff bytes, and the empty prefix (every key).
  REQUIRE(c->put("\xff\xff\x01", "z").is_ok());
  auto ff = c->range_prefix("\xff\xff");
  REQUIRE(ff.is_ok());
  REQUIRE(ff->size() == 1);
  CHECK(ff->at(0).key == "\xff\xff\x01");
  auto all = c->range_prefix("");
  REQUIRE(all.is_ok());
  CHECK(all->size() == inside.size() + outside.size() + 1);
  CHECK(std::is_sorted(all->begin(), all->end(),
                       [](const etcd_kv& x, const etcd_kv& y) { return x.key < y.key; }));
  auto none = c->range_prefix("nothing/");
  REQUIRE(none.is_ok());
  CHECK(none->empty());
}

TEST_CASE("bad arguments are INVALID_ARGUMENT, before any request") {
  auto bad = [](std::vector<std::string> urls) {
    auto c = etcd_client::make(std::move(urls));
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.error().code() == errc::invalid_argument);
    return c.error().message();
  };
  CHECK(bad({}).find("no endpoint") != std::string::npos);
  CHECK(bad({"http://127.0.0.1:2379", "https://x:1"}).find("https://x:1") != std::string::npos);
  CHECK(bad({"127.0.0.1:2379"}).find("must start with http://") != std::string::npos);
  CHECK(bad({"http://127.0.0.1:x"}).find("bad port") != std::string::npos);
  CHECK(bad({"http://127.0.0.1:0"}).find("port out of range") != std::string::npos);

  // An endpoint nobody listens on: any request would fail with UNAVAILABLE, so these show the
  // arguments are checked first.
  auto c = client_of({"http://127.0.0.1:1"});
  CHECK(c->grant(0ms).error().code() == errc::invalid_argument);
  CHECK(c->grant(-5ms).error().code() == errc::invalid_argument);
  CHECK(c->get("").error().code() == errc::invalid_argument);
  CHECK(c->put("", "v").error().code() == errc::invalid_argument);
  CHECK(c->put("k", "v", -1).error().code() == errc::invalid_argument);
  CHECK(c->put_if_mod_revision("k", "v", -1).error().code() == errc::invalid_argument);
  CHECK(c->delete_if_mod_revision("k", -1).error().code() == errc::invalid_argument);
  CHECK(c->delete_key("").code() == errc::invalid_argument);
  CHECK(c->get("k").error().code() == errc::unavailable);
}
