// fence_test.cpp: owner epochs of cluster mode (docs/storage-format.md section 15): claims,
// the check of every write transaction of a store holding a claim, two stores of one file in one
// process (they share its wal-index and SQLite's locks) interleaving their claims and writes, a
// claimant killed mid-stream, files of the previous format, injected faults, and the owner
// history's check in verify().
#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "support/child_process.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace fence_test {

namespace {

using test::draft;
using test::open_ok;
using test::opts_for;
using test::raw_exec_factum;

const entity_key the_key{"acme", "ledger", "fenced"};

/// One append and its commit; the first error.
status write_one(entity_store& s, const char* type = "invocation") {
  auto f = s.append(draft(type));
  if (!f)
    return f.error();
  return s.commit();
}

/// Rows of `sql` on the file (test::raw_rows: factum's VFS, as the wal-index of a file open in
/// this process is in its memory), each row's columns joined by ' '.
std::vector<std::string> joined_rows(const fs::path& file, const std::string& sql) {
  std::vector<std::string> out;
  for (auto& columns : test::raw_rows(file, sql)) {
    std::string row;
    for (size_t i = 0; i < columns.size(); ++i)
      row += (i ? " " : "") + columns[i];
    out.push_back(row);
  }
  return out;
}

/// "epoch node first_seq" of each row of the owner history, oldest first.
std::vector<std::string> history(const fs::path& file) {
  return joined_rows(file, "SELECT epoch, node, first_seq FROM owners ORDER BY epoch");
}

int64_t facts_on_disk(const fs::path& file) {
  return std::stoll(joined_rows(file, "SELECT COUNT(*) FROM facts")[0]);
}

/// A fault hook that counts the statements a store runs through it (store_options::fault), to
/// tell a write that touched the file from one refused without looking.
struct statement_counter {
  std::shared_ptr<std::atomic<int>> n = std::make_shared<std::atomic<int>>(0);
  fault_hook hook() const {
    return [n = n](uint64_t, std::string_view) {
      ++*n;
      return SQLITE_OK;
    };
  }
  int operator()() const { return n->load(); }
};

} // namespace

TEST_CASE("fence: a write of a store whose claim was superseded is refused and leaves nothing, "
          "the new owner writes, an older claim is refused, a re-claim adds no row") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  statement_counter a_statements;
  auto ao = o;
  ao.fault = a_statements.hook();
  ao.busy_timeout_ms = 0; // a refused write must not even wait for the lock
  auto a = open_ok(ao, the_key);
  auto file = a->path();
  CHECK(a->owner_epoch() == 0);
  REQUIRE(a->claim_owner(5, "n1").is_ok());
  CHECK(a->owner_epoch() == 5);
  REQUIRE(write_one(*a).is_ok());

  auto b = open_ok(o, the_key);
  REQUIRE(b->claim_owner(7, "n2").is_ok());
  CHECK(history(file) == std::vector<std::string>{"5 n1 1", "7 n2 2"});

  // A's next write: refused in its transaction, nothing of it reaches the file.
  auto head = a->head_hash();
  auto f = a->append(draft("stale"));
  REQUIRE_FALSE(f.is_ok());
  CHECK(f.error().code() == errc::not_owner);
  CHECK(to_string(f.error().code()) == "NOT_OWNER");
  CHECK(f.error().message().find("7 (node n2)") != std::string::npos);
  CHECK(f.error().message().find("claimed 5") != std::string::npos);
  CHECK(a->commit().is_ok()); // no batch is open: nothing to commit
  CHECK_FALSE(a->in_batch());
  CHECK(a->last_seq() == 1);
  CHECK(a->head_hash() == head);
  CHECK(a->fenced());
  CHECK(a->fenced_writes() == 1);
  CHECK(facts_on_disk(file) == 1);

  // Every later write is refused without touching the file, even while B holds the write lock
  // (A's busy timeout is 0: a BEGIN would answer BUSY).
  REQUIRE(b->begin_batch().is_ok());
  int before = a_statements();
  CHECK(a->begin_turn().code() == errc::not_owner);
  CHECK(a->set_alarm({"x", 1, "{}", 0, 1}).code() == errc::not_owner);
  CHECK(a->put_config("c", "{}").error().code() == errc::not_owner);
  CHECK(a_statements() == before);
  CHECK(a->fenced_writes() == 4);
  // Reads go on.
  CHECK(a->get(1).is_ok());
  CHECK(a->verify()->ok);

  // B, the owner, writes.
  REQUIRE(b->append(draft("owned")).is_ok());
  REQUIRE(b->commit().is_ok());
  CHECK(b->last_seq() == 2);
  CHECK(facts_on_disk(file) == 2);

  // An older claim is refused and names the holder; a claim of the same epoch by another node
  // too; B's re-claim under its own epoch (a re-activation) adds no row.
  auto older = a->claim_owner(6, "n1");
  CHECK(older.code() == errc::not_owner);
  CHECK(older.message().find("epoch 7 (node n2)") != std::string::npos);
  CHECK(older.message().find("epoch 6 by node n1") != std::string::npos);
  CHECK(a->owner_epoch() == 5);
  CHECK(a->claim_owner(7, "n1").code() == errc::not_owner);
  REQUIRE(b->claim_owner(7, "n2").is_ok());
  CHECK(history(file).size() == 2);

  // A third node claims a newer epoch: a row appended, from the next seq; B is refused now.
  auto c = open_ok(o, the_key);
  REQUIRE(c->claim_owner(9, "n3").is_ok());
  CHECK(history(file) == std::vector<std::string>{"5 n1 1", "7 n2 2", "9 n3 3"});
  CHECK(b->append(draft("late")).error().code() == errc::not_owner);
  REQUIRE(write_one(*c).is_ok());
  auto owners = c->owners();
  REQUIRE(owners.is_ok());
  REQUIRE(owners->size() == 3);
  CHECK((*owners)[2].epoch == 9);
  CHECK((*owners)[2].node == "n3");
  CHECK((*owners)[2].first_seq == 3);
  CHECK((*owners)[2].claimed_ms > 0);
  auto v = c->verify();
  REQUIRE(v.is_ok());
  CHECK_MESSAGE(v->ok, v->problem);
  CHECK(v->owner_epoch == 9);
  CHECK(c->info()->owner_epoch == 9);
  CHECK(c->info()->owner_node == "n3");
}

TEST_CASE("fence: a claim waits for a batch begun before it, that batch commits and is kept, "
          "the claim follows it, and the next batch of the old owner is refused") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto a = open_ok(o, the_key);
  auto file = a->path();
  REQUIRE(a->claim_owner(5, "n1").is_ok());
  REQUIRE(a->begin_batch().is_ok());
  REQUIRE(a->append(draft("before-claim")).is_ok()); // A holds the write lock from here

  // With no busy timeout the claim answers BUSY at once: A's lock is held, and nothing changed.
  auto impatient = o;
  impatient.busy_timeout_ms = 0;
  auto b0 = open_ok(impatient, the_key);
  CHECK(b0->claim_owner(7, "n2").code() == errc::busy);
  CHECK(b0->owner_epoch() == 0);
  CHECK(history(file) == std::vector<std::string>{"5 n1 1"});

  // With one it waits: started on a thread of its own, it reaches its BEGIN IMMEDIATE (seen
  // through its fault hook) while A still holds the lock; A commits; the claim then goes through.
  std::promise<void> at_begin;
  auto reached = at_begin.get_future();
  auto patient = o;
  patient.busy_timeout_ms = 60'000;
  bool told = false;
  patient.fault = [&](uint64_t, std::string_view sql) {
    if (sql == "BEGIN IMMEDIATE" && !told) {
      told = true;
      at_begin.set_value();
    }
    return SQLITE_OK;
  };
  auto b = open_ok(patient, the_key); // opens, then the claim below is its first BEGIN IMMEDIATE
  told = false;
  auto claim = std::async(std::launch::async, [&] { return b->claim_owner(7, "n2"); });
  reached.wait();
  REQUIRE(a->commit().is_ok());
  auto st = claim.get();
  REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  // The claim came after A's commit: it starts at the seq after A's fact, which is kept.
  CHECK(history(file) == std::vector<std::string>{"5 n1 1", "7 n2 2"});
  CHECK(facts_on_disk(file) == 1);
  CHECK(b->last_seq() == 1);
  CHECK(a->begin_batch().code() == errc::not_owner);
  CHECK(a->append(draft("after-claim")).error().code() == errc::not_owner);
  CHECK(facts_on_disk(file) == 1);
  REQUIRE(write_one(*b).is_ok());
  CHECK(b->verify()->ok);
}

TEST_CASE("fence: a fenced store that claims a newer epoch reads the chain head the other owner "
          "left and appends after it") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto a = open_ok(o, the_key);
  REQUIRE(a->claim_owner(1, "n1").is_ok());
  REQUIRE(write_one(*a).is_ok());
  auto b = open_ok(o, the_key);
  REQUIRE(b->claim_owner(2, "n2").is_ok());
  REQUIRE(write_one(*b).is_ok());
  REQUIRE(write_one(*b).is_ok());
  CHECK(write_one(*a).code() == errc::not_owner);
  CHECK(a->last_seq() == 1); // stale: B appended 2 and 3
  REQUIRE(a->claim_owner(3, "n1").is_ok());
  CHECK_FALSE(a->fenced());
  CHECK(a->last_seq() == 3);
  CHECK(a->head_hash() == b->head_hash());
  REQUIRE(write_one(*a).is_ok());
  CHECK(a->last_seq() == 4);
  CHECK(history(a->path()) == std::vector<std::string>{"1 n1 1", "2 n2 2", "3 n1 4"});
  CHECK(a->verify()->ok);
  CHECK(b->begin_turn().code() == errc::not_owner);
}

TEST_CASE("fence: claims refuse bad arguments, a batch in progress and a read-only store, and "
          "change nothing") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto s = open_ok(o, the_key);
  CHECK(s->claim_owner(0, "n1").code() == errc::invalid_argument);
  CHECK(s->claim_owner(-3, "n1").code() == errc::invalid_argument);
  CHECK(s->claim_owner(1, "").code() == errc::invalid_argument);
  CHECK(s->claim_owner(1, std::string(256, 'n')).code() == errc::invalid_argument);
  REQUIRE(s->begin_batch().is_ok());
  CHECK(s->claim_owner(1, "n1").code() == errc::internal);
  REQUIRE(s->rollback().is_ok());
  CHECK(s->owner_epoch() == 0);
  CHECK(history(s->path()).empty());
  auto ro = o;
  ro.read_only = true;
  auto r = open_ok(ro, the_key);
  CHECK(r->claim_owner(1, "n1").code() == errc::read_only);
  auto claiming_ro = ro;
  claiming_ro.owner_epoch = 1;
  claiming_ro.owner_node = "n1";
  CHECK(entity_store::open(claiming_ro, the_key).error().code() == errc::invalid_argument);
  auto no_node = o;
  no_node.owner_epoch = 1;
  CHECK(entity_store::open(no_node, the_key).error().code() == errc::invalid_argument);
  entity_key other{"acme", "ledger", "never-made"};
  CHECK(entity_store::open(no_node, other).error().code() == errc::invalid_argument);
  CHECK_FALSE(fs::exists(other.file_path(tmp.path()))); // refused before a file is made
  CHECK(history(s->path()).empty());
}

TEST_CASE("fence: the owner history is append-only, also through raw SQL") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), the_key);
  REQUIRE(s->claim_owner(4, "n1").is_ok());
  auto file = s->path();
  std::string err;
  CHECK(raw_exec_factum(file, "UPDATE owners SET epoch=40", &err) == SQLITE_CONSTRAINT);
  CHECK(err.find("append-only") != std::string::npos);
  CHECK(raw_exec_factum(file, "DELETE FROM owners") == SQLITE_CONSTRAINT);
  CHECK(raw_exec_factum(file, "INSERT INTO owners VALUES (3, 'n0', 1, 1)", &err) ==
        SQLITE_CONSTRAINT);
  CHECK(err.find("greater than every epoch") != std::string::npos);
  CHECK(raw_exec_factum(file, "INSERT INTO owners VALUES (5, '', 1, 1)") == SQLITE_CONSTRAINT);
  CHECK(history(file) == std::vector<std::string>{"4 n1 1"});
}

TEST_CASE("fence: a store opened without a claim writes a claimed file as before, checking "
          "nothing") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  {
    auto s = open_ok(o, the_key);
    REQUIRE(s->claim_owner(7, "n2").is_ok());
    REQUIRE(write_one(*s).is_ok());
  }
  // A single-node store (no claim) on a file a cluster claimed: the same statements per write
  // as on any file, and the writes land.
  statement_counter plain, claimed;
  auto po = o;
  po.fault = plain.hook();
  auto s = open_ok(po, the_key);
  CHECK(s->owner_epoch() == 0);
  int at = plain();
  REQUIRE(write_one(*s).is_ok());
  int per_write = plain() - at;
  CHECK(s->last_seq() == 2);
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_MESSAGE(v->ok, v->problem);
  CHECK(v->owner_epoch == 7);
  CHECK(s->info()->owner_epoch == 7);
  s.reset();
  test::temp_dir other;
  auto fresh_opts = opts_for(other.path());
  fresh_opts.fault = claimed.hook();
  auto fresh = open_ok(fresh_opts, the_key); // a file never claimed: the same count
  at = claimed();
  REQUIRE(write_one(*fresh).is_ok());
  CHECK(claimed() - at == per_write);
}

TEST_CASE("fence: an open that claims takes the file and releases its pending keys in the "
          "claim's transaction, one under an older epoch fails NOT_OWNER and keeps them") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto owner = open_ok(o, the_key);
  REQUIRE(owner->claim_owner(8, "n1").is_ok());
  REQUIRE(owner->begin_key("in-flight", "fp", 0, now_ms()).is_ok()); // a call awaiting a reply
  REQUIRE(owner->commit().is_ok());
  auto file = owner->path();

  auto stale = o;
  stale.owner_epoch = 6;
  stale.owner_node = "n0";
  auto r = entity_store::open(stale, the_key);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::not_owner);
  CHECK(joined_rows(file, "SELECT status FROM idempotency_keys WHERE key='in-flight'") ==
        std::vector<std::string>{"pending"});
  CHECK(history(file) == std::vector<std::string>{"8 n1 1"});
  // The owner goes on, its key intact.
  REQUIRE(owner->complete_key("in-flight", "{}").is_ok());
  REQUIRE(owner->begin_key("second", "fp", 0, now_ms()).is_ok());
  REQUIRE(owner->commit().is_ok());

  auto newer = o;
  newer.owner_epoch = 9;
  newer.owner_node = "n2";
  auto s = open_ok(newer, the_key);
  CHECK(s->owner_epoch() == 9);
  CHECK(s->released_on_open() == 1);
  CHECK(joined_rows(file, "SELECT key FROM idempotency_keys WHERE status='pending'").empty());
  CHECK(history(file) == std::vector<std::string>{"8 n1 1", "9 n2 1"});
  CHECK(owner->complete_key("second", "{}").code() == errc::not_owner);
  REQUIRE(write_one(*s).is_ok());
}

TEST_CASE("fence: a claimant killed mid-stream leaves its epoch in the file, the next owner "
          "claims past it and the history verifies") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    auto r = entity_store::open(o, the_key);
    if (!r || !r.value()->claim_owner(3, "child"))
      _exit(2);
    auto& s = *r.value();
    if (!s.begin_key("left-pending", "fp", 0, now_ms()) || !s.commit())
      _exit(3);
    for (int64_t i = 1;; ++i) {
      if (!s.append(draft("invocation")) || !s.commit())
        _exit(4);
      if (write(report, &i, sizeof i) != sizeof i)
        _exit(5);
    }
  }));
  int64_t acked = 0;
  for (int seen = 0; seen < 20 && read(child.reports(), &acked, sizeof acked) == sizeof acked;
       ++seen) {
  }
  child.kill_now();
  CHECK(WIFSIGNALED(child.status()));
  REQUIRE(acked == 20);

  auto mine = o;
  mine.owner_epoch = 4;
  mine.owner_node = "parent";
  auto s = open_ok(mine, the_key);
  CHECK(s->released_on_open() == 1); // the dead owner's pending key
  int64_t left = s->last_seq();
  CHECK(left >= acked);
  auto owners = s->owners();
  REQUIRE(owners.is_ok());
  REQUIRE(owners->size() == 2);
  CHECK((*owners)[0].epoch == 3);
  CHECK((*owners)[0].node == "child");
  CHECK((*owners)[0].first_seq == 1);
  CHECK((*owners)[1].epoch == 4);
  CHECK((*owners)[1].first_seq == left + 1);
  REQUIRE(write_one(*s).is_ok());
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_MESSAGE(v->ok, v->problem);
  CHECK(v->owner_epoch == 4);
}

TEST_CASE("fence: a file of the format before owner histories migrates on open with an empty "
          "owner history, and a claim then works") {
  test::temp_dir tmp;
  auto old = opts_for(tmp.path());
  old.target_schema_version = 5;
  fs::path file;
  {
    auto s = open_ok(old, the_key);
    CHECK(s->schema_version() == 5);
    REQUIRE(write_one(*s).is_ok());
    CHECK(s->claim_owner(1, "n1").code() == errc::invalid_argument); // no history at version 5
    file = s->path();
  }
  {
    auto ro = opts_for(tmp.path());
    ro.read_only = true;
    auto s = open_ok(ro, the_key); // read as it is: no owners table, no history
    CHECK(s->schema_version() == 5);
    CHECK(s->owners()->empty());
    CHECK(s->info()->owner_epoch == 0);
  }
  auto s = open_ok(opts_for(tmp.path()), the_key);
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->owners()->empty());
  REQUIRE(s->claim_owner(2, "n1").is_ok());
  REQUIRE(write_one(*s).is_ok());
  CHECK(history(file) == std::vector<std::string>{"2 n1 2"});
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_MESSAGE(v->ok, v->problem);
}

TEST_CASE("fence: a claim whose COMMIT fails leaves no row and no claim, and retried it holds") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view sql) {
    return armed && sql == "COMMIT" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  };
  auto s = open_ok(o, the_key);
  REQUIRE(write_one(*s).is_ok());
  armed = true;
  auto st = s->claim_owner(5, "n1");
  armed = false;
  CHECK(st.code() == errc::io_error);
  CHECK(s->owner_epoch() == 0);
  CHECK(history(s->path()).empty());
  REQUIRE(write_one(*s).is_ok()); // unclaimed: checks nothing, writes
  REQUIRE(s->claim_owner(5, "n1").is_ok());
  CHECK(history(s->path()) == std::vector<std::string>{"5 n1 3"});
}

TEST_CASE(
  "fence: a deferred-sync claim is synced before it holds, and a failed sync leaves no claim "
  "in the store") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  int syncs = 0;
  bool fail_sync = false;
  o.fault = [&](uint64_t, std::string_view what) {
    if (what == "sync") {
      ++syncs;
      return fail_sync ? SQLITE_IOERR_FSYNC : SQLITE_OK;
    }
    return SQLITE_OK;
  };
  auto s = open_ok(o, the_key);
  REQUIRE(s->claim_owner(5, "n1").is_ok());
  CHECK(syncs == 1);
  REQUIRE(s->claim_owner(5, "n1").is_ok()); // a re-claim writes nothing, syncs nothing
  CHECK(syncs == 1);
  fail_sync = true;
  CHECK(s->claim_owner(6, "n1").code() == errc::io_error);
  CHECK(s->owner_epoch() == 5); // the claim it held before
  // The row was committed before the sync failed: the file's epoch is 6, which this store does
  // not hold, so its writes are refused until it claims 6. That claim adds no row, but syncs
  // (the row's sync failed); then it holds.
  CHECK(write_one(*s).code() == errc::not_owner);
  fail_sync = false;
  REQUIRE(s->claim_owner(6, "n1").is_ok());
  CHECK(syncs == 3);
  REQUIRE(write_one(*s).is_ok());
  REQUIRE(s->claim_owner(6, "n1").is_ok());
  CHECK(syncs == 3);
}

TEST_CASE("fence: verify reports an owner history edited behind the store's back") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), the_key);
  REQUIRE(s->claim_owner(2, "n1").is_ok());
  REQUIRE(write_one(*s).is_ok());
  REQUIRE(write_one(*s).is_ok());
  REQUIRE(s->claim_owner(5, "n2").is_ok());
  auto file = s->path();
  s.reset();
  REQUIRE(raw_exec_factum(file, "DROP TRIGGER owners_no_update; DROP TRIGGER owners_increase; "
                                "UPDATE owners SET first_seq=9 WHERE epoch=2; "
                                "INSERT INTO owners VALUES (7, 'n3', 2, 1)") == SQLITE_OK);
  auto ro = opts_for(tmp.path());
  ro.read_only = true;
  auto r = open_ok(ro, the_key);
  auto v = r->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 0); // the chain itself is whole
  CHECK(v->owner_epoch == 7);
  std::string all;
  for (auto& p : v->problems)
    all += p + "\n";
  CAPTURE(all);
  CHECK(all.find("trigger owners_no_update is missing") != std::string::npos);
  CHECK(all.find("owners: epoch 2 starts at seq 9, past the last fact (2)") != std::string::npos);
  CHECK(all.find("owners: epoch 5 starts at seq 3, before epoch 2 (seq 9)") != std::string::npos);
  CHECK(all.find("owners: epoch 7 starts at seq 2, before epoch 5 (seq 3)") != std::string::npos);
}

} // namespace fence_test
