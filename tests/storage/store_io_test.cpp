// store_io_test.cpp: entity files on disk and their faults: what a close leaves, the shared
// wal-index, read-only stores, tenant SQL, injected I/O errors and a full disk, the alarm index,
// deferred sync and checkpoints.
#include "storage/store_support.hpp"

namespace store_tests {

namespace {

/// `n` facts in `file`, as plain SQLite reads it (through any -wal) and as the store does, with a
/// valid chain.
void check_facts_on_disk(const fs::path& file, const store_options& o, int n) {
  CHECK(raw_rows(file, "SELECT count(*) FROM facts") ==
        std::vector<std::vector<std::string>>{{std::to_string(n)}});
  auto s = open_ok(o, key());
  CHECK(s->last_seq() == n);
  CHECK(s->verify()->ok);
}

} // namespace

TEST_CASE("store files: a closed entity keeps its -wal emptied and its -shm (never written: the "
          "wal-index is in memory), so a reopen creates no file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.wal_kept_on_close_kib = 0; // every close checkpoints (a small WAL is kept: next test)
  fs::path file;
  {
    auto s = open_ok(o, key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  REQUIRE(fs::exists(wal));
  REQUIRE(fs::exists(shm));
  CHECK(fs::file_size(wal) == 0); // checkpointed into the database, then truncated
  CHECK(fs::file_size(shm) == 0); // only its DMS byte is used, as a lock
  auto wal_inode = inode_of(wal), shm_inode = inode_of(shm);
  for (int round = 0; round < 3; ++round) {
    auto s = open_ok(o, key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK(fs::file_size(shm) == 0); // the wal-index is in the process's memory
    s.reset();
    CHECK(inode_of(wal) == wal_inode);
    CHECK(inode_of(shm) == shm_inode);
    CHECK(fs::file_size(wal) == 0);
    CHECK(fs::file_size(shm) == 0);
  }
  // Nothing was lost by emptying them: the facts are in the database file itself.
  check_facts_on_disk(file, o, 4);
}

TEST_CASE("store files: the connections of one process share one wal-index: a reader goes on "
          "after the writer closes, and sees its last commit") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto writer = open_ok(o, key());
  REQUIRE(writer->append(draft("invocation")).is_ok());
  REQUIRE(writer->commit().is_ok());
  fs::path shm = writer->path().string() + "-shm";
  auto ro = o;
  ro.read_only = true;
  auto reader = open_ok(ro, key());
  REQUIRE(reader->verify()->ok);
  REQUIRE(writer->append(draft("invocation")).is_ok());
  REQUIRE(writer->commit().is_ok());
  writer.reset(); // not the last connection: the wal-index stays with the reader
  CHECK(fs::file_size(shm) == 0);
  // The reader goes on reading through it, and sees the writer's last commit, which may still
  // be only in the -wal.
  auto v = reader->verify();
  REQUIRE(v.is_ok());
  CHECK(v->ok);
  CHECK(v->facts_checked == 2);
}

TEST_CASE("store files: a close keeps a small WAL with its frames and no sync, checkpoints and "
          "empties a large one, and never writes the -shm") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path()); // durability full: each commit syncs the WAL
  fs::path file;
  {
    auto s = open_ok(o, key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
    sync_counter::reset();
  }
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  CHECK(sync_counter::wal() == 0); // no checkpoint: nothing to sync, the frames already are
  CHECK(sync_counter::db() == 0);
  CHECK(fs::file_size(wal) > 0);
  CHECK(fs::file_size(wal) <= 256 * 1024);
  CHECK(fs::file_size(shm) == 0); // the next opener rebuilds its wal-index from the WAL
  // The database file does not have the fact yet; SQLite reads it from the WAL.
  CHECK(raw_rows(file, "SELECT count(*) FROM facts") ==
        std::vector<std::vector<std::string>>{{"1"}});
  {
    auto s = open_ok(o, key());
    CHECK(s->last_seq() == 1);
    for (int i = 0; i < 10; ++i) { // ~600 KiB of WAL
      for (int j = 0; j < 30; ++j)
        REQUIRE(s->append(draft("big", {{"pad", std::string(1500, 'a' + j % 26)}})).is_ok());
      REQUIRE(s->commit().is_ok());
    }
    REQUIRE(fs::file_size(wal) > 256 * 1024);
    sync_counter::reset();
  }
  CHECK(sync_counter::wal() >= 1); // checkpointed: the WAL synced, then the database
  CHECK(sync_counter::db() >= 1);
  CHECK(fs::file_size(wal) == 0);
  CHECK(fs::file_size(shm) == 0);
  check_facts_on_disk(file, o, 301);
}

TEST_CASE("read-only stores read and refuse writes") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto o = opts_for(tmp.path());
  o.read_only = true;
  auto s = open_ok(o, key());
  CHECK(s->last_seq() == 1);
  CHECK(s->verify()->ok);
  CHECK(s->append(draft("x")).error().code() == errc::read_only);
  CHECK(s->begin_key("k", "f", 0, 1).error().code() == errc::read_only);
  auto files = list_entity_files(tmp.path());
  REQUIRE(files.size() == 1);
  auto by_file = entity_store::open_file(files[0], o);
  REQUIRE(by_file.is_ok());
  CHECK((*by_file)->key() == key());
}

TEST_CASE("tenant SQL: own u_* tables, read-only queries, system tables refused") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  using nlohmann::json;
  REQUIRE(s->tenant_sql("CREATE TABLE u_items(name TEXT, qty INTEGER)", json(), false).is_ok());
  REQUIRE(
    s->tenant_sql("INSERT INTO u_items VALUES (?, ?)", json::array({"apple", 3}), false).is_ok());
  auto rows = s->tenant_sql("SELECT name, qty FROM u_items", json(), true);
  REQUIRE(rows.is_ok());
  CHECK((*rows)[0]["qty"] == 3);
  REQUIRE(s->append(draft("invocation")).is_ok());
  CHECK(s->tenant_sql("SELECT COUNT(*) AS n FROM facts", json(), true)->at(0)["n"] == 1);
  for (const char* bad :
       {"DELETE FROM facts", "UPDATE idempotency_keys SET status='completed'",
        "INSERT INTO alarms VALUES ('x', 1, '{}', 0, 1)", "CREATE TABLE evil(x)",
        "DROP TABLE facts", "PRAGMA writable_schema=1", "ATTACH DATABASE '/tmp/x.db' AS x",
        "CREATE TRIGGER u_t AFTER INSERT ON u_items BEGIN DELETE FROM facts; END",
        "SELECT 1; DELETE FROM u_items"}) {
    CAPTURE(bad);
    auto r = s->tenant_sql(bad, json(), false);
    CHECK_FALSE(r.is_ok());
  }
  CHECK_FALSE(s->tenant_sql("INSERT INTO u_items VALUES ('x', 1)", json(), true).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: a failed COMMIT rolls the batch back and the store recovers") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view sql) {
    return armed && sql == "COMMIT" ? SQLITE_FULL : SQLITE_OK;
  };
  auto s = open_ok(o, key());
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto head = s->head_hash();
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->begin_key("kb", "fp", 0, 1).is_ok());
  armed = true;
  auto st = s->commit();
  CHECK(st.code() == errc::full);
  CHECK(st.message().find("injected") != std::string::npos);
  CHECK_FALSE(s->in_batch());
  CHECK(s->last_seq() == 1);
  CHECK(s->head_hash() == head);
  armed = false;
  auto c = s->append(draft("c"));
  REQUIRE(c.is_ok());
  CHECK(c->seq == 2);
  CHECK(c->prev_hash == head);
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->last_seq() == 2);
  CHECK(s2->get(2)->type == "c");
  CHECK(s2->get_key("kb").error().code() == errc::not_found);
  CHECK(s2->verify()->ok);
}

TEST_CASE("faults: a failed RELEASE of a turn leaves it to be rolled back, facts and key too") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view what) {
    return armed && what == "RELEASE turn" ? SQLITE_IOERR_WRITE : SQLITE_OK;
  };
  auto s = open_ok(o, key());
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->begin_key("k1", "fp", 0, now_ms()).is_ok());
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->complete_key("k1", "{}").is_ok());
  armed = true;
  CHECK_FALSE(s->end_turn(true).is_ok());
  armed = false;
  REQUIRE(s->end_turn(false).is_ok()); // what the runtime does with a turn that failed
  REQUIRE(s->commit().is_ok());
  CHECK(s->last_seq() == 1);
  CHECK(s->get_key("k1").error().code() == errc::not_found);
  CHECK(s->append(draft("c"))->seq == 2);
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: an injected IOERR on a fact insert fails only that append") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  bool armed = false;
  o.fault = [&](uint64_t, std::string_view what) {
    return armed && what == "append fact" ? SQLITE_IOERR_WRITE : SQLITE_OK;
  };
  auto s = open_ok(o, key());
  REQUIRE(s->append(draft("a")).is_ok());
  armed = true;
  auto r = s->append(draft("b"));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::io_error);
  armed = false;
  CHECK(s->append(draft("c"))->seq == 2);
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
}

TEST_CASE(
  "faults: a migration that fails at its last step leaves the file whole at its old version") {
  // Migrations 2, 3 and 4 run in one transaction: a failure in migration 4 undoes 2 and 3 too.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  std::string old_id;
  fs::path file;
  {
    auto s = open_ok(o, key());
    old_id = s->append(draft("invocation")).value().fact_id;
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  auto faulty = opts_for(tmp.path());
  int migration4_runs = 0;
  faulty.fault = [&](uint64_t, std::string_view sql) {
    if (sql.find("'fact_id_prefix'") == std::string_view::npos)
      return SQLITE_OK;
    ++migration4_runs;
    return SQLITE_IOERR_WRITE;
  };
  auto r = entity_store::open(faulty, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(migration4_runs == 1);
  CHECK(r.error().code() == errc::io_error);
  CHECK(r.error().message().find("schema version 4") != std::string::npos);
  CHECK(raw_rows(file, "PRAGMA user_version")[0][0] == "1");
  CHECK(raw_rows(file, "SELECT name FROM sqlite_master WHERE name IN ('configs', "
                       "'facts_by_subtype')")
          .empty());
  CHECK(meta_value(file, "fact_id_prefix") == "(absent)");
  // Without the fault the same file migrates, and its fact is still found by its old id.
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->get(old_id)->seq == 1);
  CHECK(s->verify()->ok);
}

TEST_CASE("faults: a full disk (max_page_count) fails the write and leaves a valid file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.max_page_count = 64; // 256 KiB
  auto s = open_ok(o, key());
  std::string blob(2000, 'x');
  status last;
  int64_t committed = 0;
  for (int i = 0; i < 1000 && last.is_ok(); ++i) {
    auto r = s->append(draft("blob", {{"b", blob}}));
    if (!r) {
      last = r.error();
      break;
    }
    last = s->commit();
    if (last)
      committed = s->last_seq();
  }
  CHECK(last.code() == errc::full);
  CHECK(s->last_seq() == committed);
  (void)s->rollback();
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->last_seq() == committed);
  CHECK(s2->verify()->ok);
}

TEST_CASE("alarm index: due entries, removal, next due, survives reopen") {
  test::temp_dir tmp;
  {
    auto ix = alarm_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    REQUIRE((*ix)->apply({{key("a"), 100}, {key("b"), 50}, {key("c"), 300}}).is_ok());
    REQUIRE((*ix)->apply({{key("c"), -1}}).is_ok());
  }
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  CHECK((*ix)->next_due()->value() == 50);
  auto due = (*ix)->due(100, 10);
  REQUIRE(due->size() == 2);
  CHECK(due->at(0).key == key("b"));
  CHECK((*ix)->all()->size() == 2);
}

TEST_CASE("alarm index: a damaged index is set aside and rebuilt from the entity files") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  {
    auto a = open_ok(o, key("a")); // two alarms: the index holds the earliest
    REQUIRE(a->set_alarm({"late", 9000, "{}", 0, 0}).is_ok());
    REQUIRE(a->set_alarm({"early", 700, "{}", 0, 0}).is_ok());
    REQUIRE(a->commit().is_ok());
    auto b = open_ok(o, key("b")); // no alarm: no entry
    REQUIRE(b->append(draft("x")).is_ok());
    REQUIRE(b->commit().is_ok());
    auto c = open_ok(o, key("c")); // unreadable below
    REQUIRE(c->set_alarm({"x", 5, "{}", 0, 0}).is_ok());
    REQUIRE(c->commit().is_ok());
  }
  {
    std::ofstream(key("c").file_path(tmp.path()), std::ios::binary | std::ios::trunc)
      << std::string(8192, 'Z');
  }
  auto db = tmp.path() / "runtime" / "alarms.db";
  {
    auto ix = alarm_index::open(tmp.path(), durability::full);
    REQUIRE(ix.is_ok());
    REQUIRE((*ix)->apply({{key("stale"), 1}}).is_ok());
  }
  { std::ofstream(db, std::ios::binary | std::ios::trunc) << std::string(4096, '\x5a'); }
  auto bad = alarm_index::open(tmp.path(), durability::full);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.error().code() == errc::corruption);

  auto aside = alarm_index::set_aside(tmp.path());
  REQUIRE(aside.is_ok());
  CHECK_FALSE(fs::exists(db));
  CHECK(fs::file_size(*aside) == 4096); // kept as it was, for a post-mortem
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto rep = (*ix)->rebuild(tmp.path());
  REQUIRE(rep.is_ok());
  CHECK(rep->entity_files == 3);
  CHECK(rep->entries == 1);
  CHECK(rep->unreadable == 1);
  auto all = (*ix)->all();
  REQUIRE(all->size() == 1);
  CHECK(all->at(0).key == key("a"));
  CHECK(all->at(0).due_ms == 700);
  // The entity files were only read.
  auto a = open_ok(o, key("a"));
  CHECK(a->list_alarms()->size() == 2);
}

TEST_CASE("idempotency keys: record_key stores a finished key in one statement") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  REQUIRE(s->record_key("done", key_status::completed, "fp", R"({"ok":1})", 1000, 100).is_ok());
  auto r = s->peek_key("done", "fp", 200);
  REQUIRE(r.is_ok());
  CHECK(r->outcome == key_outcome::completed);
  CHECK(r->record.response == R"({"ok":1})");
  CHECK(r->record.expires_at_ms.value() == 1100);
  CHECK(s->peek_key("done", "other", 200)->outcome == key_outcome::mismatch);
  CHECK(s->peek_key("done", "fp", 1100)->outcome == key_outcome::fresh); // expired
  CHECK(s->peek_key("never", "fp", 200)->outcome == key_outcome::fresh);
  // a pending row (a turn that awaited) is replaced by the finished record
  REQUIRE(s->begin_key("p", "fp", 0, 1)->outcome == key_outcome::fresh);
  CHECK(s->peek_key("p", "fp", 2)->outcome == key_outcome::in_flight);
  REQUIRE(s->record_key("p", key_status::failed, "fp", R"({"code":"X"})", 0, 2).is_ok());
  CHECK(s->peek_key("p", "fp", 3)->outcome == key_outcome::failed);
  CHECK_FALSE(s->record_key("q", key_status::pending, "fp", "{}", 0, 1).is_ok());
  CHECK_FALSE(s->record_key("", key_status::completed, "fp", "{}", 0, 1).is_ok());
  REQUIRE(s->commit().is_ok());
}

TEST_CASE("deferred sync: commit without fsync, sync() from another thread, checkpoint") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  std::atomic<int> syncs{0}; // sync() runs on another thread than the steps that call the hook
  o.fault = [&](uint64_t, std::string_view what) {
    if (what == "sync")
      ++syncs;
    return SQLITE_OK;
  };
  auto s = open_ok(o, key());
  for (int i = 0; i < 50; ++i) {
    REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  CHECK(s->wal_frames() > 0);
  // sync runs on another thread while the owner keeps writing
  std::thread t([&] { CHECK(s->sync().is_ok()); });
  REQUIRE(s->append(draft("b")).is_ok());
  t.join();
  REQUIRE(s->commit().is_ok());
  CHECK(s->sync().is_ok());
  CHECK(syncs == 2);
  REQUIRE(s->checkpoint().is_ok());
  CHECK(s->wal_frames() == 0);
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->last_seq() == 51);
  CHECK(s2->verify()->ok);
}

TEST_CASE("deferred sync: commits never sync inside SQLite, checkpoints and the close do") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true; // durability full (opts_for)
  {
    auto s = open_ok(o, key());
    sync_counter::reset();
    for (int round = 0; round < 2; ++round) {
      // A commit into a new WAL generation (the first after the open, then the first after a
      // checkpoint): SQLite would sync the WAL header here with synchronous=NORMAL.
      for (int i = 0; i < 3; ++i) {
        REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
        REQUIRE(s->commit().is_ok());
      }
      CHECK(sync_counter::wal() == 0);
      CHECK(sync_counter::db() == 0);
      REQUIRE(s->sync().is_ok()); // the store's own fdatasync, not through SQLite
      REQUIRE(s->checkpoint().is_ok());
      CHECK(sync_counter::wal() >= 1); // the WAL before its pages go into the database
      CHECK(sync_counter::db() >= 1);  // the database before the WAL restarts
      sync_counter::reset();
    }
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
  } // a small WAL: the close leaves it as it is, without a sync
  CHECK(sync_counter::wal() == 0);
  CHECK(sync_counter::db() == 0);
  {
    auto s = open_ok(o, key());
    CHECK(s->last_seq() == 7); // the kept frame is read back
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
  } // with none kept, the close checkpoints: with its syncs
  o.wal_kept_on_close_kib = 0;
  {
    auto s = open_ok(o, key());
    CHECK(s->last_seq() == 8);
    sync_counter::reset();
  }
  CHECK(sync_counter::wal() >= 1);
  CHECK(sync_counter::db() >= 1);
  auto s = open_ok(o, key());
  CHECK(s->last_seq() == 8);
  CHECK(s->verify()->ok);
}

TEST_CASE("deferred sync: a checkpoint through its own connection runs beside the owner's "
          "commits, syncs the WAL and the database, and lets the WAL restart") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true; // durability full (opts_for)
  int64_t n = 0;
  {
    auto s = open_ok(o, key());
    auto append_commit = [&] {
      REQUIRE(s->append(draft("a", {{"i", n}})).is_ok());
      REQUIRE(s->commit().is_ok());
      ++n;
    };
    for (int i = 0; i < 40; ++i)
      append_commit();
    int frames = s->wal_frames();
    CHECK(frames >= 40);
    REQUIRE(s->sync().is_ok());
    sync_counter::reset();
    std::thread t([&] { CHECK(s->checkpoint_concurrently().is_ok()); });
    for (int i = 0; i < 10; ++i) // the owner keeps committing meanwhile
      append_commit();
    t.join();
    CHECK(sync_counter::wal() >= 1); // the WAL before its pages go into the database
    // The database is synced by the checkpoint that reaches the WAL's end: the one above if it
    // ran after the commits, else this one (the owner idle), which copies what they added.
    REQUIRE(s->sync().is_ok());
    REQUIRE(s->checkpoint_concurrently().is_ok());
    CHECK(sync_counter::db() >= 1); // the database before the WAL may restart
    // Once every frame is in the database, the owner's next commit starts the WAL over.
    append_commit();
    CHECK(s->wal_frames() < frames / 4);
    CHECK(s->last_seq() == n);
  }
  auto s = open_ok(o, key());
  CHECK(s->last_seq() == 51);
  CHECK(s->verify()->ok);
  auto ro = o;
  ro.read_only = true;
  CHECK(open_ok(ro, key())->checkpoint_concurrently().error().code() == errc::invalid_argument);
}

TEST_CASE("auto_checkpoint off: no commit checkpoints past 1,000 WAL frames (durability "
          "normal), the owner's checkpoint does, with its syncs") {
  test::temp_dir tmp;
  auto run = [&](bool auto_checkpoint, const std::string& id) {
    auto o = opts_for(tmp.path());
    o.mode = durability::normal;
    o.auto_checkpoint = auto_checkpoint;
    auto s = open_ok(o, key(id));
    sync_counter::reset();
    for (int i = 0; i < 400; ++i) { // 3+ frames per commit: past SQLite's 1,000
      REQUIRE(s->append(draft("a", {{"i", i}})).is_ok());
      REQUIRE(s->commit().is_ok());
    }
    return s;
  };
  {
    auto s = run(true, "auto"); // the control: SQLite checkpoints inside a commit, with syncs
    CHECK(sync_counter::db() >= 1);
  }
  auto s = run(false, "owner");
  // synchronous=NORMAL syncs a new WAL's header once, in its first commit; nothing else.
  CHECK(sync_counter::wal() <= 1);
  CHECK(sync_counter::db() == 0);
  CHECK(s->wal_frames() > 1000);
  REQUIRE(s->checkpoint_concurrently().is_ok());
  CHECK(sync_counter::wal() >= 1);
  CHECK(sync_counter::db() >= 1);
  s.reset();
  auto again = open_ok(opts_for(tmp.path()), key("owner"));
  CHECK(again->last_seq() == 400);
  CHECK(again->verify()->ok);
}

TEST_CASE("deferred sync: an injected fsync failure is reported") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  o.fault = [](uint64_t, std::string_view what) {
    return what == "sync" ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  };
  auto s = open_ok(o, key());
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto st = s->sync();
  CHECK(st.code() == errc::io_error);
}

} // namespace store_tests
