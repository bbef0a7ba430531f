// compaction_test.cpp: the log's compaction (log_replicator::compact, log_applier) against a
// real nats-server the test starts: an image of an entity's file lets the shard's log drop the
// entity's records before it and the parts of its earlier images (rolled up by its first part),
// and every copy still ends equal to the owner's file: one that followed from before the image,
// a new one that starts from the log as it is, an entity rebuilt alone, and a copy whose image
// parts went while it read the head (it awaits the later image, or rebuilds the entity). The
// test's thread; the replicator's and libnats' threads beside it.
#include <doctest/doctest.h>

#include <future>
#include <map>

#include "factum/replication/commit_record.hpp"
#include "factum/replication/log_applier.hpp"
#include "factum/replication/log_replicator.hpp"
#include "support/nats_cluster.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::replication;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace compaction_test {

namespace {

constexpr uint32_t shard = 0;
constexpr int64_t epoch = 1;

/// An owner: a capturing store whose commits go to the log through `sink`.
struct owner {
  std::unique_ptr<entity_store> store;
  log_replicator& sink;
  int n = 0;

  owner(const fs::path& dir, const entity_key& key, log_replicator& s) : sink(s) {
    auto o = test::opts_for(dir);
    o.capture_changes = true;
    store = test::open_ok(o, key);
  }

  /// `turns` commits of a fact with some padding each, appended and acknowledged.
  void commit(int turns) {
    for (int i = 0; i < turns; ++i) {
      REQUIRE(
        store->append(test::draft("step", {{"n", ++n}, {"pad", std::string(700, 'p')}})).is_ok());
      REQUIRE(store->commit().is_ok());
    }
    auto commits = store->take_captured();
    REQUIRE(commits.is_ok());
    std::optional<replica_genesis> g;
    if (!commits->empty() && commits->front().number == 1)
      g = *store->genesis();
    std::promise<status> done;
    sink.append(store->key(), epoch, std::move(g), std::move(*commits),
                [&](const status& st) { done.set_value(st); });
    auto st = done.get_future().get();
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  }

  /// An image of the file now, appended and acknowledged.
  void compact() {
    auto img = store->image();
    REQUIRE(img.is_ok());
    std::promise<status> done;
    sink.compact(store->key(), epoch, std::move(*img),
                 [&](const status& st) { done.set_value(st); });
    auto st = done.get_future().get();
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  }
};

/// The log's messages now: records and heads of `token`, and its parts.
struct census {
  int records = 0, heads = 0, parts = 0;
};

census count(log_connection& c, const std::string& token) {
  census out;
  REQUIRE(c.read(shard, 1, 0,
                 [&](const log_message& m) {
                   if (m.entity != token)
                     return true;
                   if (m.part)
                     ++out.parts;
                   else if (decode(m.data)->image)
                     ++out.heads;
                   else
                     ++out.records;
                   return true;
                 })
            .is_ok());
  return out;
}

/// The stream sequences of the parts of `token`'s latest image (its head is its last record
/// right after a compaction).
std::vector<uint64_t> last_image_parts(log_connection& c, const std::string& token) {
  auto m = c.last_of_entity(shard, token);
  REQUIRE(m.is_ok());
  REQUIRE(m->has_value());
  auto r = decode((*m)->data);
  REQUIRE(r.is_ok());
  REQUIRE(r->image.has_value());
  return r->image->parts;
}

/// Whether every one of `seqs` is still in the log (all) or none is (!all).
bool parts_held(log_connection& c, const std::vector<uint64_t>& seqs, bool all) {
  for (auto q : seqs) {
    auto m = c.get(shard, q);
    REQUIRE(m.is_ok());
    if (m->has_value() != all)
      return false;
  }
  return true;
}

/// A connection to the test's nats-server and a replicator whose one shard is open under
/// `epoch`, cutting images in parts of 16 KiB (several per image).
struct log_fixture {
  result<std::shared_ptr<log_connection>> c;
  std::unique_ptr<log_replicator> sink;

  explicit log_fixture(const test::nats_cluster& nc) : c(connect(nc)) {
    REQUIRE_MESSAGE(c.is_ok(), c.error().to_string());
    sink = std::make_unique<log_replicator>(*c, [](const entity_key&) { return shard; });
    sink->set_image_part_bytes(16 * 1024);
    REQUIRE(sink->open_shard(shard, epoch).is_ok());
  }

  static result<std::shared_ptr<log_connection>> connect(const test::nats_cluster& nc) {
    log_options lo;
    lo.servers = nc.urls();
    lo.replicas = 1;
    return log_connection::connect(lo);
  }
};

store_options copy_opts(const fs::path& dir) {
  return test::opts_for(dir);
}

} // namespace

TEST_CASE("log compaction: an image drops its entity's records and older parts from the log, and "
          "copies that followed from before it, start from the log as it is, or rebuild the "
          "entity alone all end equal to the owner's file") {
  test::nats_cluster nc(1);
  log_fixture f(nc);
  auto& c = f.c;
  auto& sink = *f.sink;

  test::temp_dir owner_dir, early_dir, fresh_dir, rebuilt_dir;
  entity_key big{"acme", "ledger", "big"}, small{"acme", "ledger", "small"};
  owner a(owner_dir.path(), big, sink), b(owner_dir.path(), small, sink);
  a.commit(20);
  b.commit(3);
  // A copy that applied the log before any image.
  auto early_state = early_dir.path() / "state.json";
  REQUIRE(apply_shard(**c, shard, copy_opts(early_dir.path()), early_state).is_ok());

  a.commit(20);
  a.compact();
  auto token = entity_token(big);
  auto after_first = count(**c, token);
  CHECK(after_first.records == 0); // every record before the image is gone
  CHECK(after_first.heads == 1);
  CHECK(after_first.parts >= 2);
  auto first_parts = last_image_parts(**c, token);
  a.commit(10);
  a.compact();
  // The second image's first part rolled the parts subject up: the first image's parts are gone.
  auto second_parts = last_image_parts(**c, token);
  CHECK(parts_held(**c, first_parts, false));
  CHECK(parts_held(**c, second_parts, true));
  CHECK(count(**c, token).parts == static_cast<int>(second_parts.size()));
  a.commit(5);
  b.commit(2);
  auto now = count(**c, token);
  CHECK(now.heads == 1);
  CHECK(now.records == 5);
  CHECK(count(**c, entity_token(small)).records == 5); // another entity keeps its records
  CHECK(sink.images_appended() == 2);

  a.store.reset();
  b.store.reset();
  auto owner_big = test::table_rows(big.file_path(owner_dir.path()));
  auto owner_small = test::table_rows(small.file_path(owner_dir.path()));

  // The copy from before the images catches up through the latest head.
  auto caught = apply_shard(**c, shard, copy_opts(early_dir.path()), early_state);
  REQUIRE_MESSAGE(caught.is_ok(), caught.error().to_string());
  CHECK(test::table_rows(big.file_path(early_dir.path())) == owner_big);
  CHECK(test::table_rows(small.file_path(early_dir.path())) == owner_small);

  // A new copy from the log as it is.
  auto fresh = apply_shard(**c, shard, copy_opts(fresh_dir.path()), fresh_dir.path() / "s.json");
  REQUIRE_MESSAGE(fresh.is_ok(), fresh.error().to_string());
  CHECK(test::table_rows(big.file_path(fresh_dir.path())) == owner_big);
  CHECK(test::table_rows(small.file_path(fresh_dir.path())) == owner_small);

  // One entity rebuilt alone.
  REQUIRE(rebuild_entity(**c, shard, big, copy_opts(rebuilt_dir.path())).is_ok());
  CHECK(test::table_rows(big.file_path(rebuilt_dir.path())) == owner_big);
  auto v = test::open_ok(copy_opts(rebuilt_dir.path()), big)->verify();
  CHECK((v.is_ok() && v->ok));
}

TEST_CASE("log compaction: a copy that reads an image head whose parts are gone (a later image "
          "replaced it) awaits a later image, and its rebuild from the log is the owner's "
          "file") {
  test::nats_cluster nc(1);
  log_fixture f(nc);
  auto& c = f.c;
  auto& sink = *f.sink;
  test::temp_dir owner_dir, copy_dir;
  entity_key key{"acme", "ledger", "e1"};
  owner a(owner_dir.path(), key, sink);
  a.commit(10);
  a.compact();
  auto first_parts = last_image_parts(**c, entity_token(key));
  a.commit(3);
  // The copy has read the log up to here (the first image's head among it) ...
  std::vector<log_message> seen;
  REQUIRE((*c)
            ->read(shard, 1, 0,
                   [&](const log_message& m) {
                     seen.push_back(m);
                     return true;
                   })
            .is_ok());
  // ... when another image replaces the first, whose parts go with the new one's first part.
  a.commit(2);
  a.compact();
  CHECK(parts_held(**c, first_parts, false));
  a.store.reset();
  auto owner_file = test::table_rows(key.file_path(owner_dir.path()));

  log_applier ap(copy_opts(copy_dir.path()), follow_state{}, std::nullopt,
                 [&](uint64_t seq) { return (*c)->get(shard, seq); });
  for (auto& m : seen)
    REQUIRE(ap.take(m).is_ok());
  REQUIRE(ap.finish().is_ok());
  CHECK(ap.awaiting_image().count(key.to_string()) == 1);
  CHECK(ap.diverged().empty());
  CHECK(ap.images_installed() == 0);
  REQUIRE(rebuild_entity(**c, shard, key, copy_opts(copy_dir.path())).is_ok());
  CHECK(test::table_rows(key.file_path(copy_dir.path())) == owner_file);
}

} // namespace compaction_test
