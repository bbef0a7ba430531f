// shard_map_test.cpp: cluster mode's shard map (factum/cluster/shard_map.hpp): the shard of an
// entity and the rendezvous owner of a shard are the documented functions (expected values
// computed once from the header's definitions with Python's hashlib), independent of the node
// list's order, balanced, and move only what a membership change must move. Pure; no etcd.
#include <algorithm>
#include <map>
#include <set>

#include <doctest/doctest.h>

#include "factum/cluster/shard_map.hpp"

using namespace factum;
using namespace factum::cluster;

namespace {

entity_key key(const char* tenant, const char* type, const char* id) {
  auto k = entity_key::make(tenant, type, id);
  REQUIRE(k.is_ok());
  return *k;
}

std::vector<std::string> owners(const std::vector<std::string>& nodes, uint32_t shards) {
  std::vector<std::string> out;
  for (uint32_t s = 0; s < shards; ++s)
    out.push_back(rendezvous_owner(s, nodes));
  return out;
}

} // namespace

TEST_CASE("shard_of is the first 8 bytes of SHA-256(tenant NUL type NUL id), big-endian, mod "
          "shards") {
  // sha256(b"acme\0order\0o-1")[:8] etc., as a big-endian integer, modulo 64 and 256.
  struct expected {
    entity_key k;
    uint32_t of64, of256, of7;
  };
  std::vector<expected> cases = {
    {key("acme", "order", "o-1"), 19, 147, 4},    {key("acme", "order", "o-2"), 0, 0, 0},
    {key("t1", "cart", "42"), 23, 23, 1},         {key("globex", "account", "a:7"), 4, 196, 1},
    {key("acme", "order", "o-1000"), 38, 166, 5},
  };
  for (auto& c : cases) {
    CAPTURE(c.k.to_string());
    CHECK(shard_of(c.k, 64) == c.of64);
    CHECK(shard_of(c.k, 256) == c.of256);
    CHECK(shard_of(c.k, 7) == c.of7);
    CHECK(shard_of(c.k, 1) == 0);
    // The same bytes as the entity's file name: the digest's first 16 hex digits.
    CHECK(shard_of(c.k, 1000) == std::stoull(c.k.digest().substr(0, 16), nullptr, 16) % 1000);
  }
  CHECK(shard_of(key("acme", "order", "o-1"), 0) == 0);
}

TEST_CASE("rendezvous_owner is the documented weight's winner, whatever the list's order") {
  // max over nodes of sha256(node + b"\0" + str(shard))[:8], big-endian.
  CHECK(owners({"n1", "n2", "n3"}, 8) ==
        std::vector<std::string>{"n3", "n2", "n2", "n2", "n1", "n2", "n1", "n3"});
  CHECK(owners({"n1", "n2", "n3", "n4"}, 8) ==
        std::vector<std::string>{"n3", "n4", "n2", "n2", "n1", "n2", "n1", "n3"});
  CHECK(rendezvous_owner(5, {}) == "");
  CHECK(rendezvous_owner(5, {"solo"}) == "solo");

  std::vector<std::string> nodes = {"n1", "n2", "n3", "n4"};
  auto reference = owners(nodes, 64);
  do {
    CHECK(owners(nodes, 64) == reference);
  } while (std::next_permutation(nodes.begin(), nodes.end()));
  CHECK(owners({"n4", "n1", "n4", "n2", "n3", "n1"}, 64) == reference); // duplicates
}

TEST_CASE("64 shards over 3 nodes: each node gets between 10 and 35, and shards_of partitions "
          "them") {
  for (auto nodes :
       std::vector<std::vector<std::string>>{{"n1", "n2", "n3"},
                                             {"node-a", "node-b", "node-c"},
                                             {"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}}) {
    CAPTURE(nodes[0]);
    std::set<uint32_t> all;
    for (auto& n : nodes) {
      auto mine = shards_of(n, nodes, 64);
      CHECK(mine.size() >= 10);
      CHECK(mine.size() <= 35);
      CHECK(std::is_sorted(mine.begin(), mine.end()));
      for (auto s : mine) {
        CHECK(rendezvous_owner(s, nodes) == n);
        CHECK(all.insert(s).second); // no shard has two owners
      }
    }
    CHECK(all.size() == 64);
  }
  CHECK(shards_of("n1", {"n1"}, 0).empty());
  CHECK(shards_of("n9", {"n1", "n2"}, 64).empty());
}

TEST_CASE("a membership change moves only the shards it must") {
  const uint32_t shards = 64;
  std::vector<std::string> three = {"n1", "n2", "n3"};
  std::vector<std::string> four = {"n1", "n2", "n3", "n4"};
  auto before = owners(three, shards);
  auto after_join = owners(four, shards);
  size_t moved = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    CAPTURE(s);
    if (after_join[s] != before[s]) {
      CHECK(after_join[s] == "n4"); // a join moves shards to the new node only
      ++moved;
    }
  }
  CHECK(moved == shards_of("n4", four, shards).size());
  CHECK(moved > 0);

  std::vector<std::string> without_n2 = {"n1", "n3"};
  auto after_leave = owners(without_n2, shards);
  for (uint32_t s = 0; s < shards; ++s) {
    CAPTURE(s);
    if (before[s] != "n2")
      CHECK(after_leave[s] == before[s]); // a leave moves only the leaver's shards
    else
      CHECK(after_leave[s] != "n2");
  }
}
