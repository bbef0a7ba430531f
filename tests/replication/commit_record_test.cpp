// commit_record_test.cpp: the bytes of commit records, image heads and image parts
// (factum/replication/commit_record.hpp): what encode() writes decode() reads back whole, and
// anything cut short, extended, foreign or newer is refused.
#include <doctest/doctest.h>

#include "factum/replication/commit_record.hpp"

namespace factum {
namespace commit_record_test {

namespace {

replication::commit_record sample(bool genesis) {
  replication::commit_record r;
  r.key = {"acme", "cart", "c-1"};
  r.epoch = 41;
  r.commit.number = genesis ? 1 : 7;
  r.commit.id = "0123456789abcdef";
  r.commit.changeset = std::string("\x12\x00\x34 changes", 11);
  if (genesis)
    r.genesis = replica_genesis{{{"created_at", "1700000000000"}, {"tenant", "acme"}}, 1024};
  return r;
}

} // namespace

TEST_CASE("commit records: encode and decode are inverse, with and without a genesis") {
  for (bool g : {false, true}) {
    auto r = sample(g);
    auto back = replication::decode(replication::encode(r));
    REQUIRE_MESSAGE(back.is_ok(), back.error().to_string());
    CHECK(back->key == r.key);
    CHECK(back->epoch == r.epoch);
    CHECK(back->commit.number == r.commit.number);
    CHECK(back->commit.id == r.commit.id);
    CHECK(back->commit.changeset == r.commit.changeset);
    CHECK(back->genesis.has_value() == g);
    if (g) {
      CHECK(back->genesis->meta == r.genesis->meta);
      CHECK(back->genesis->page_size == 1024);
    }
  }
}

TEST_CASE("commit records: a record cut short, with bytes after it, foreign or of a newer version "
          "is refused") {
  auto bytes = replication::encode(sample(true));
  for (size_t n = 0; n < bytes.size(); ++n)
    CHECK(replication::decode(std::string_view(bytes).substr(0, n)).error().code() ==
          errc::corruption);
  CHECK(replication::decode(bytes + "x").error().code() == errc::corruption);
  CHECK(replication::decode("not a record at all").error().code() == errc::corruption);
  auto newer = bytes;
  newer[3] = static_cast<char>(replication::commit_record_version + 1);
  CHECK(replication::decode(newer).error().code() == errc::newer_schema);
}

TEST_CASE("commit records: an image head names its parts, a part carries its bytes, both are "
          "read back whole, a version 1 record is read, and one flagged as an image is refused") {
  auto r = sample(false);
  r.commit.changeset.clear();
  r.image = replication::image_ref{70000, std::string(32, '\x5a'), {12, 13, 19}};
  auto bytes = replication::encode(r);
  auto back = replication::decode(bytes);
  REQUIRE_MESSAGE(back.is_ok(), back.error().to_string());
  REQUIRE(back->image.has_value());
  CHECK(back->image->size == 70000);
  CHECK(back->image->sha256 == r.image->sha256);
  CHECK(back->image->parts == std::vector<uint64_t>{12, 13, 19});
  CHECK(back->commit.id == r.commit.id);
  for (size_t n = 0; n < bytes.size(); ++n)
    CHECK(replication::decode(std::string_view(bytes).substr(0, n)).error().code() ==
          errc::corruption);

  auto v1 = replication::encode(sample(true));
  v1[3] = 1;
  CHECK(replication::decode(v1).is_ok());
  auto v1_image = bytes;
  v1_image[3] = 1;
  CHECK(replication::decode(v1_image).error().code() == errc::corruption);

  replication::image_part p{7, 2, std::string("\x00page bytes\xff", 12)};
  auto pb = replication::encode(p);
  auto pback = replication::decode_part(pb);
  REQUIRE(pback.is_ok());
  CHECK(pback->number == 7);
  CHECK(pback->index == 2);
  CHECK(pback->bytes == p.bytes);
  CHECK(replication::decode_part(bytes).error().code() == errc::corruption); // a head, not a part
  CHECK(replication::decode_part(pb.substr(0, 10)).error().code() == errc::corruption);
}

TEST_CASE("commit records: the entity token is 32 hex digits that tell the parts apart") {
  auto t = replication::entity_token({"acme", "cart", "c1"});
  CHECK(t.size() == 32);
  CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(t != replication::entity_token({"acme", "cartc", "1"}));
  CHECK(t == replication::entity_token({"acme", "cart", "c1"}));
}

} // namespace commit_record_test
} // namespace factum
