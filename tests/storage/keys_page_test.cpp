// keys_page_test.cpp: entity_store::list_keys_after, the paged read of an entity's idempotency
// keys in key order that GET .../keys serves (docs/http-api.md, "Idempotency keys"). One thread.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;

namespace keys_page_test {

namespace {

using test::open_ok;
using test::opts_for;

const entity_key key{"acme", "ledger", "keys"};

std::vector<std::string> names(const std::vector<idempotency_record>& rs) {
  std::vector<std::string> out;
  for (auto& r : rs)
    out.push_back(r.key);
  return out;
}

} // namespace

TEST_CASE("idempotency keys: pages in key order after a cursor, saying whether more follow") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key);
  // Inserted out of order, created at times that do not follow the key order.
  int64_t t = 100;
  for (const char* k : {"k-3", "k-1", "k-5", "k-2", "k-4"})
    REQUIRE(s->record_key(k, key_status::completed, "fp", R"({"ok":true})", 0, t--).is_ok());
  REQUIRE(s->begin_key("k-0", "fp", 1000, 200)->outcome == key_outcome::fresh);
  REQUIRE(s->fail_key("k-0", R"({"status":422})").is_ok());
  REQUIRE(s->begin_key("k-6", "fp", 1000, 300)->outcome == key_outcome::fresh); // pending
  REQUIRE(s->commit().is_ok());

  bool more = false;
  auto p1 = s->list_keys_after("", 3, more);
  REQUIRE(p1.is_ok());
  CHECK(names(*p1) == std::vector<std::string>{"k-0", "k-1", "k-2"});
  CHECK(more);
  CHECK((*p1)[0].status == key_status::failed);
  CHECK((*p1)[0].response == R"({"status":422})");
  CHECK((*p1)[0].expires_at_ms == 1200);
  CHECK((*p1)[1].created_at_ms == 99);
  auto p2 = s->list_keys_after("k-2", 3, more);
  REQUIRE(p2.is_ok());
  CHECK(names(*p2) == std::vector<std::string>{"k-3", "k-4", "k-5"});
  CHECK(more);
  auto p3 = s->list_keys_after("k-5", 3, more);
  REQUIRE(p3.is_ok());
  CHECK(names(*p3) == std::vector<std::string>{"k-6"});
  CHECK((*p3)[0].status == key_status::pending);
  CHECK_FALSE(more);
  // A page that ends exactly at the last key says nothing follows.
  auto exact = s->list_keys_after("k-3", 3, more);
  CHECK(names(*exact) == std::vector<std::string>{"k-4", "k-5", "k-6"});
  CHECK_FALSE(more);
  // A cursor past every key, or between keys (not itself a key), pages from where it falls.
  CHECK(s->list_keys_after("z", 3, more)->empty());
  CHECK_FALSE(more);
  CHECK(names(*s->list_keys_after("k-25", 2, more)) == std::vector<std::string>{"k-3", "k-4"});
  CHECK(more);
  // A page is at least one key.
  CHECK(s->list_keys_after("", 0, more).error().code() == errc::invalid_argument);
}

} // namespace keys_page_test
