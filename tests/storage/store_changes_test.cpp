// store_changes_test.cpp: the store's side of the replicated log (store_changes.cpp): every
// commit of a capturing store becomes a numbered changeset, a replica built from the genesis and
// those changesets holds the owner's rows in every table, and a replica refuses a gap, an
// order it cannot follow and a row that is not the owner's.
#include <doctest/doctest.h>

#include <map>

#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

namespace factum {
namespace store_changes_test {

namespace {

store_options capturing(const std::filesystem::path& dir) {
  auto o = test::opts_for(dir);
  o.capture_changes = true;
  return o;
}

std::vector<captured_commit> take(entity_store& s) {
  auto c = s.take_captured();
  REQUIRE_MESSAGE(c.is_ok(), c.error().to_string());
  return std::move(*c);
}

/// A replica of `owner`'s entity under `dir`, built from its genesis, `commits` applied.
std::unique_ptr<entity_store> replica_of(entity_store& owner, const std::filesystem::path& dir,
                                         const std::vector<captured_commit>& commits) {
  auto g = owner.genesis();
  REQUIRE(g.is_ok());
  auto o = test::opts_for(dir);
  REQUIRE(entity_store::create_replica(o, owner.key(), *g).is_ok());
  auto r = test::open_ok(o, owner.key());
  for (auto& c : commits) {
    auto st = r->apply_captured(c);
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  }
  return r;
}

/// Writes of most kinds, in three commits.
void write_some(entity_store& s) {
  REQUIRE(s.append(test::draft("opened", {{"n", 1}})).is_ok());
  REQUIRE(s.record_key("k1", key_status::completed, "fp", "{\"ok\":true}", 0, 1000).is_ok());
  REQUIRE(s.commit().is_ok());
  alarm_record a;
  a.name = "later";
  a.due_ms = 5000;
  a.created_at_ms = 1000;
  REQUIRE(s.set_alarm(a).is_ok());
  REQUIRE(s.append(test::draft("armed")).is_ok());
  REQUIRE(s.commit().is_ok());
  REQUIRE(s.cancel_alarm("later").is_ok());
  REQUIRE(s.append_many({test::draft("a"), test::draft("b", {{"x", "y"}})}).is_ok());
  REQUIRE(s.commit().is_ok());
}

} // namespace

TEST_CASE("replicated log: each commit is captured with the next number, and a replica built "
          "from the genesis and the commits holds the owner's rows in every table") {
  test::temp_dir a, b;
  auto owner = test::open_ok(capturing(a.path()), {"acme", "cart", "c1"});
  write_some(*owner);
  auto commits = take(*owner);
  REQUIRE(commits.size() == 3);
  CHECK(commits[0].number == 1);
  CHECK(commits[2].number == 3);
  CHECK(owner->replicated_commit() == 3);
  CHECK(take(*owner).empty()); // taken once
  auto r = replica_of(*owner, b.path(), commits);
  CHECK(r->replicated_commit() == 3);
  CHECK(r->last_seq() == 4);
  auto key = owner->key();
  owner.reset();
  r.reset();
  CHECK(test::table_rows(key.file_path(a.path())) == test::table_rows(key.file_path(b.path())));
  auto o2 = test::open_ok(test::opts_for(b.path()), key);
  CHECK(o2->verify()->ok);
}

TEST_CASE("replicated log: a rolled-back batch and a rolled-back turn are in no commit") {
  test::temp_dir a, b;
  auto owner = test::open_ok(capturing(a.path()), {"acme", "cart", "c2"});
  REQUIRE(owner->append(test::draft("dropped")).is_ok());
  REQUIRE(owner->rollback().is_ok());
  REQUIRE(owner->begin_turn().is_ok());
  REQUIRE(owner->append(test::draft("kept")).is_ok());
  REQUIRE(owner->end_turn(true).is_ok());
  REQUIRE(owner->begin_turn().is_ok());
  REQUIRE(owner->record_key("gone", key_status::completed, "fp", "{}", 0, 1).is_ok());
  REQUIRE(owner->end_turn(false).is_ok());
  REQUIRE(owner->commit().is_ok());
  auto commits = take(*owner);
  REQUIRE(commits.size() == 1);
  CHECK(commits[0].number == 1);
  auto r = replica_of(*owner, b.path(), commits);
  CHECK(r->last_seq() == 1);
  CHECK_FALSE(r->get_key("gone").is_ok());
  auto key = owner->key();
  owner.reset();
  r.reset();
  CHECK(test::table_rows(key.file_path(a.path())) == test::table_rows(key.file_path(b.path())));
}

TEST_CASE("replicated log: a replica refuses a gap, skips a commit it holds, and stops at a row "
          "that is not the owner's") {
  test::temp_dir a, b;
  auto owner = test::open_ok(capturing(a.path()), {"acme", "cart", "c3"});
  write_some(*owner);
  auto commits = take(*owner);
  REQUIRE(commits.size() == 3);
  auto r = replica_of(*owner, b.path(), {commits[0]});
  auto gap = r->apply_captured(commits[2]);
  CHECK(gap.code() == errc::conflict);
  CHECK(r->replicated_commit() == 1);
  CHECK(r->apply_captured(commits[0]).is_ok()); // held already: nothing done
  CHECK(r->last_seq() == 1);
  // A replica whose alarm row was changed behind the log: the commit that cancels that alarm
  // finds another row than the owner had.
  REQUIRE(r->apply_captured(commits[1]).is_ok());
  auto path = r->path();
  r.reset();
  REQUIRE(test::raw_exec_factum(path, "UPDATE alarms SET due_at = 7 WHERE name = 'later'") ==
          SQLITE_OK);
  r = test::open_ok(test::opts_for(b.path()), owner->key());
  auto diverged = r->apply_captured(commits[2]);
  CHECK(diverged.code() == errc::corruption);
  CHECK(r->replicated_commit() == 2);
  CHECK(r->last_seq() == 2); // nothing of commit 3 applied
}

TEST_CASE("replicated log: a replica that holds another commit of a number than the log (two "
          "owners wrote it) is found diverged, at that number or at the next") {
  test::temp_dir a, fork, b, b2;
  entity_key k{"acme", "cart", "split"};
  captured_commit c1, c2, c2_other, c3;
  replica_genesis g;
  {
    auto owner = test::open_ok(capturing(a.path()), k);
    REQUIRE(owner->append(test::draft("one")).is_ok());
    REQUIRE(owner->commit().is_ok());
    c1 = take(*owner).at(0);
    g = *owner->genesis();
  }
  std::filesystem::copy(a.path(), fork.path(),
                        std::filesystem::copy_options::recursive |
                          std::filesystem::copy_options::overwrite_existing);
  {
    auto owner = test::open_ok(capturing(a.path()), k);
    REQUIRE(owner->append(test::draft("two")).is_ok());
    REQUIRE(owner->commit().is_ok());
    REQUIRE(owner->append(test::draft("three")).is_ok());
    REQUIRE(owner->commit().is_ok());
    auto cs = take(*owner);
    c2 = cs.at(0);
    c3 = cs.at(1);
  }
  {
    auto other = test::open_ok(capturing(fork.path()), k);
    auto appended = other->append(test::draft("two_elsewhere"));
    REQUIRE_MESSAGE(appended.is_ok(), appended.error().to_string());
    REQUIRE(other->commit().is_ok());
    c2_other = take(*other).at(0);
  }
  CHECK(c2.number == c2_other.number);
  CHECK(c2.id != c2_other.id);
  REQUIRE(entity_store::create_replica(test::opts_for(b.path()), k, g).is_ok());
  auto r = test::open_ok(test::opts_for(b.path()), k);
  REQUIRE(r->apply_captured(c1).is_ok());
  REQUIRE(r->apply_captured(c2).is_ok());
  CHECK(r->apply_captured(c2_other).code() == errc::corruption);
  REQUIRE(entity_store::create_replica(test::opts_for(b2.path()), k, g).is_ok());
  auto r2 = test::open_ok(test::opts_for(b2.path()), k);
  REQUIRE(r2->apply_captured(c1).is_ok());
  REQUIRE(r2->apply_captured(c2_other).is_ok());
  CHECK(r2->apply_captured(c3).code() == errc::corruption);
  CHECK(r2->replicated_commit_id() == c2_other.id);
}

TEST_CASE("replicated log: a store that captures numbers the commits after the file's last one "
          "across a reopen, and refuses a file whose facts no log holds") {
  test::temp_dir a, plain;
  entity_key k{"acme", "cart", "c4"};
  {
    auto owner = test::open_ok(capturing(a.path()), k);
    REQUIRE(owner->append(test::draft("one")).is_ok());
    REQUIRE(owner->commit().is_ok());
    CHECK(take(*owner).size() == 1);
  }
  auto again = test::open_ok(capturing(a.path()), k);
  CHECK(again->replicated_commit() == 1);
  REQUIRE(again->append(test::draft("two")).is_ok());
  REQUIRE(again->commit().is_ok());
  auto c = take(*again);
  REQUIRE(c.size() == 1);
  CHECK(c[0].number == 2);
  {
    auto local = test::open_ok(test::opts_for(plain.path()), k);
    REQUIRE(local->append(test::draft("local")).is_ok());
    REQUIRE(local->commit().is_ok());
  }
  auto refused = entity_store::open(capturing(plain.path()), k);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.error().code() == errc::conflict);
}

TEST_CASE("replicated log: a capturing store refuses tenant table definitions, which its log "
          "would not carry, and writes nothing") {
  test::temp_dir a, plain;
  entity_key k{"acme", "cart", "ddl"};
  auto owner = test::open_ok(capturing(a.path()), k);
  auto r =
    owner->tenant_sql("CREATE TABLE u_items(id INTEGER PRIMARY KEY, name TEXT)", nullptr, false);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK(r.error().message().find("replicated") != std::string::npos);
  REQUIRE(owner->rollback().is_ok());
  CHECK(take(*owner).empty());
  // Without capture the same statement creates the table.
  auto local = test::open_ok(test::opts_for(plain.path()), k);
  CHECK(local->tenant_sql("CREATE TABLE u_items(id INTEGER PRIMARY KEY, name TEXT)", nullptr, false)
          .is_ok());
}

TEST_CASE("replicated log: an owner claim is captured like any commit") {
  test::temp_dir a, b;
  auto o = capturing(a.path());
  o.owner_epoch = 7;
  o.owner_node = "n1";
  auto owner = test::open_ok(o, {"acme", "cart", "c5"});
  REQUIRE(owner->append(test::draft("one")).is_ok());
  REQUIRE(owner->commit().is_ok());
  auto commits = take(*owner);
  REQUIRE(commits.size() == 2);
  auto r = replica_of(*owner, b.path(), commits);
  auto owners = r->owners();
  REQUIRE(owners.is_ok());
  REQUIRE(owners->size() == 1);
  CHECK(owners->back().epoch == 7);
}

TEST_CASE("replicated log: an image of the owner's file at a commit, installed over a replica "
          "that lags (with its -wal), holds the owner's rows, and the next commits apply to it") {
  test::temp_dir a, b;
  auto owner = test::open_ok(capturing(a.path()), {"acme", "cart", "c1"});
  write_some(*owner);
  auto commits = take(*owner);
  // A replica that holds only the first commit, its WAL not checkpointed.
  auto o = test::opts_for(b.path());
  o.wal_kept_on_close_kib = 1024;
  replica_of(*owner, b.path(), {commits[0]}).reset();
  auto key = owner->key();
  REQUIRE(std::filesystem::exists(key.file_path(b.path()).string() + "-wal"));
  auto img = owner->image();
  REQUIRE_MESSAGE(img.is_ok(), img.error().to_string());
  CHECK(img->number == 3);
  CHECK(img->id == owner->replicated_commit_id());
  REQUIRE(entity_store::install_image(o, key, *img).is_ok());
  CHECK_FALSE(std::filesystem::exists(key.file_path(b.path()).string() + "-wal"));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(key.file_path(b.path()).parent_path()))
    files += e.path().filename() == key.file_path(b.path()).filename() ? 1 : 100;
  CHECK(files == 1); // nothing left beside it: no temporary file, no -wal or -shm of one
  // The owner commits on; the replica takes the next commit after the image.
  REQUIRE(owner->append(test::draft("after")).is_ok());
  REQUIRE(owner->commit().is_ok());
  auto next = take(*owner);
  REQUIRE(next.size() == 1);
  {
    auto r = test::open_ok(o, key); // at commit 3: commit 4 follows it (a gap would CONFLICT)
    REQUIRE(r->apply_captured(next[0]).is_ok());
    CHECK(r->verify()->ok);
  }
  owner.reset();
  CHECK(test::table_rows(key.file_path(a.path())) == test::table_rows(key.file_path(b.path())));
}

TEST_CASE("replicated log: an image is refused inside a batch, and installed only as the file "
          "of its own entity at its own commit") {
  test::temp_dir a, b;
  auto owner = test::open_ok(capturing(a.path()), {"acme", "cart", "c1"});
  write_some(*owner);
  REQUIRE(owner->append(test::draft("pending")).is_ok());
  CHECK(owner->image().error().code() == errc::internal); // the batch is open
  REQUIRE(owner->commit().is_ok());
  auto img = owner->image();
  REQUIRE(img.is_ok());
  auto o = test::opts_for(b.path());
  entity_key other{"acme", "cart", "c2"};
  CHECK(entity_store::install_image(o, other, *img).code() == errc::corruption);
  auto wrong = *img;
  wrong.id = "0123456789abcdef";
  CHECK(entity_store::install_image(o, owner->key(), wrong).code() == errc::corruption);
  wrong = *img;
  wrong.bytes.resize(wrong.bytes.size() / 2);
  CHECK(entity_store::install_image(o, owner->key(), wrong).code() == errc::corruption);
  CHECK_FALSE(std::filesystem::exists(owner->key().file_path(b.path())));
  CHECK_FALSE(std::filesystem::exists(other.file_path(b.path())));
}

} // namespace store_changes_test
} // namespace factum
