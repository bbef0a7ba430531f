// store_create_test.cpp: how entity files come to be: a new file's schema and page size, threads
// creating at once, spare files (spare_pool.hpp), a stray -wal, the first directory sync, files
// that are not factum's, read-only opens.
#include "storage/store_support.hpp"

namespace store_tests {

TEST_CASE("create: a new file is a whole WAL-mode database with its own meta and nothing of "
          "another entity's") {
  // New files are copies of one in-memory template whose meta rows are replaced per entity
  // (entity_image.cpp); the header is patched to WAL. Long keys and short ones, in turn.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto long_key = entity_key{std::string(128, 't'), std::string(128, 'y'), std::string(128, 'i')};
  std::vector<entity_key> keys = {key("short"), long_key, key("x"), key("short-again")};
  std::set<std::string> prefixes;
  for (auto& k : keys) {
    auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    auto syncs = detail::wal_vfs_stats().db_syncs;
    fs::path file = open_ok(o, k)->path();
    // Already a WAL-mode file: SQLite did not have to switch it (a rollback-journal write with
    // syncs through the VFS).
    CHECK(detail::wal_vfs_stats().db_syncs == syncs);
    auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    CAPTURE(file);
    CHECK(raw_rows(file, "PRAGMA integrity_check") ==
          std::vector<std::vector<std::string>>{{"ok"}});
    CHECK(raw_rows(file, "PRAGMA journal_mode")[0][0] == "wal");
    CHECK(raw_rows(file, "PRAGMA user_version")[0][0] == std::to_string(current_schema_version));
    CHECK(raw_rows(file, "PRAGMA freelist_count")[0][0] == "0");
    auto pages = std::stoll(raw_rows(file, "PRAGMA page_count")[0][0]);
    CHECK(static_cast<int64_t>(fs::file_size(file)) ==
          pages * std::stoll(raw_rows(file, "PRAGMA page_size")[0][0]));
    auto meta = raw_rows(file, "SELECT key, value FROM meta ORDER BY key");
    REQUIRE(meta.size() == 6);
    CHECK(meta[0] == std::vector<std::string>{"created_at", meta[0][1]});
    auto created = std::stoll(meta[0][1]);
    CHECK(created >= before);
    CHECK(created <= after);
    CHECK(meta[1][0] == "fact_id_prefix");
    CHECK(meta[1][1].size() == 20);
    CHECK(meta[1][1].rfind("fct_", 0) == 0);
    prefixes.insert(meta[1][1]);
    CHECK(meta[2] == std::vector<std::string>{"format", "factum-entity"});
    CHECK(meta[3] == std::vector<std::string>{"id", k.id});
    CHECK(meta[4] == std::vector<std::string>{"tenant", k.tenant});
    CHECK(meta[5] == std::vector<std::string>{"type", k.type});
    // And the store reads it as its own: facts get ids from its prefix.
    auto s = open_ok(o, k);
    auto f = s->append(draft("created"));
    REQUIRE(f.is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK(f->fact_id.rfind(meta[1][1], 0) == 0);
  }
  CHECK(prefixes.size() == keys.size());
  // A schema version this build does not know is refused before any file is made.
  auto bad = o;
  bad.target_schema_version = current_schema_version + 1;
  auto r = entity_store::open(bad, key("unknown-version"));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK_FALSE(fs::exists(key("unknown-version").file_path(tmp.path())));
}

TEST_CASE("create: threads creating entities at once each get a file naming their own entity") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  constexpr int threads = 4, per_thread = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto k = key("t" + std::to_string(t) + "-" + std::to_string(i));
        auto r = entity_store::open(o, k);
        if (!r || !(r.value()->key() == k))
          ++failures;
      }
    });
  for (auto& t : ts)
    t.join();
  CHECK(failures == 0);
  auto files = list_entity_files(tmp.path());
  CHECK(files.size() == threads * per_thread);
  std::set<std::string> ids;
  for (auto& f : files) {
    auto ro = o;
    ro.read_only = true;
    auto s = entity_store::open_file(f, ro);
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
    CHECK(s.value()->key().file_path(tmp.path()) == f); // the file names the entity it is for
    ids.insert(s.value()->key().id);
  }
  CHECK(ids.size() == threads * per_thread);
}

// -- spare files (spare_pool.hpp) ----------------------------------------------------------------

namespace {

// The inode numbers of the .db files in `dir`.
std::set<uint64_t> inodes_in(const fs::path& dir) {
  std::set<uint64_t> out;
  for (auto& e : fs::directory_iterator(dir)) {
    struct stat st {};
    if (e.path().extension() == ".db" && ::stat(e.path().c_str(), &st) == 0)
      out.insert(st.st_ino);
  }
  return out;
}

std::shared_ptr<spare_pool> full_pool(const fs::path& data_dir, int target, int page_size = 4096) {
  auto pool = spare_pool::start(data_dir, target, page_size);
  REQUIRE_MESSAGE(pool.is_ok(), pool.error().to_string());
  REQUIRE((*pool)->wait_ready(target, std::chrono::seconds(30)) == target);
  return *pool;
}

} // namespace

TEST_CASE("create: a new file has the store's page size, from the template or a spare of that "
          "size only, and keeps it, and sizes SQLite cannot have are refused") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto reference = open_ok(o, key("p4096"))->path();
  for (int page : {512, 1024, 8192, 65536}) {
    CAPTURE(page);
    o.page_size = page;
    auto k = key("p" + std::to_string(page));
    auto path = open_ok(o, k)->path();
    CHECK(raw_rows(path, "PRAGMA page_size")[0][0] == std::to_string(page));
    CHECK(raw_rows(path, "PRAGMA integrity_check")[0][0] == "ok");
    CHECK(raw_rows(path, "PRAGMA journal_mode")[0][0] == "wal");
    CHECK(schema_lines(path) == schema_lines(reference));
    // A file keeps the size it was made with, whatever the opener asks for new files.
    o.page_size = 4096;
    auto s = open_ok(o, k);
    REQUIRE(s->append(draft("after-reopen")).is_ok());
    REQUIRE(s->commit().is_ok());
    s.reset();
    CHECK(raw_rows(path, "PRAGMA page_size")[0][0] == std::to_string(page));
  }
  // An older schema version (built with SQL, for migration tests) gets the size too.
  auto old = o;
  old.page_size = 1024;
  old.target_schema_version = 1;
  CHECK(raw_rows(open_ok(old, key("old-1024"))->path(), "PRAGMA page_size")[0][0] == "1024");
  // Spares of 1 KiB live apart and serve only stores that make files of 1 KiB.
  auto pool = full_pool(tmp.path(), 2, 1024);
  CHECK(pool->page_size() == 1024);
  CHECK(pool->dir() == tmp.path() / "spares-1024");
  for (auto& e : fs::directory_iterator(pool->dir()))
    if (e.path().extension() == ".db")
      CHECK(raw_rows(e.path(), "PRAGMA page_size")[0][0] == "1024");
  o.spares = pool;
  o.page_size = 4096;
  CHECK_FALSE(open_ok(o, key("not-from-spare"))->claimed_on_open());
  CHECK(pool->get_stats().taken == 0);
  o.page_size = 1024;
  auto from_spare = open_ok(o, key("from-spare"));
  CHECK(from_spare->claimed_on_open());
  CHECK(pool->get_stats().taken == 1);
  CHECK(raw_rows(from_spare->path(), "PRAGMA page_size")[0][0] == "1024");
  for (int bad : {0, 256, 1000, 131072}) {
    CAPTURE(bad);
    auto b = opts_for(tmp.path());
    b.page_size = bad;
    auto r = entity_store::open(b, key("bad"));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
    CHECK_FALSE(spare_pool::start(tmp.path(), 1, bad).is_ok());
  }
  CHECK_FALSE(fs::exists(key("bad").file_path(tmp.path())));
}

TEST_CASE("spares: a creation renames a synced spare into place and claims it with one unsynced "
          "WAL transaction, and the pool refills") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 3);
  // The maker made every shard directory, so that no creation makes one.
  int shards = 0;
  for (auto& e : fs::directory_iterator(tmp.path() / "entities"))
    shards += e.is_directory();
  CHECK(shards == 256);
  for (auto mode : {durability::full, durability::normal}) {
    o.mode = mode;
    auto k = key(mode == durability::full ? "from-spare-full" : "from-spare-normal");
    CAPTURE(k.id);
    auto spares = inodes_in(o.spares->dir());
    REQUIRE(spares.size() == 3);
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> companions; // .db -> its -wal, -shm
    for (auto& e : fs::directory_iterator(o.spares->dir()))
      if (e.path().extension() == ".db") {
        auto wal = e.path(), shm = e.path();
        wal += "-wal";
        shm += "-shm";
        companions[inode_of(e.path())] = {inode_of(wal), inode_of(shm)};
      }
    auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    sync_counter::reset();
    auto s = open_ok(o, k);
    // Neither the claim nor anything else in the creation synced through SQLite (in full the
    // directory and the WAL become durable with the first commit, below).
    CHECK(sync_counter::wal() == 0);
    CHECK(sync_counter::db() == 0);
    CHECK(s->claimed_on_open());
    CHECK(spares.count(inode_of(s->path())) == 1); // the file is one of the spares
    CHECK(inodes_in(o.spares->dir()).count(inode_of(s->path())) == 0);
    { // and its -wal and -shm are the spare's: the open created no file
      auto wal = s->path(), shm = s->path();
      wal += "-wal";
      shm += "-shm";
      CHECK(companions[inode_of(s->path())] == std::make_pair(inode_of(wal), inode_of(shm)));
    }
    auto f = s->append(draft("created"));
    REQUIRE(f.is_ok());
    REQUIRE(s->commit().is_ok());
    if (mode == durability::full)
      CHECK(sync_counter::wal() >= 1);
    auto path = s->path();
    s.reset();
    CHECK(raw_rows(path, "PRAGMA integrity_check") ==
          std::vector<std::vector<std::string>>{{"ok"}});
    CHECK(raw_rows(path, "PRAGMA journal_mode")[0][0] == "wal");
    auto meta = raw_rows(path, "SELECT key, value FROM meta ORDER BY key");
    REQUIRE(meta.size() == 6);
    CHECK(std::stoll(meta[0][1]) >= before);
    CHECK(meta[1][0] == "fact_id_prefix");
    CHECK(meta[1][1].rfind("fct_", 0) == 0);
    CHECK(meta[1][1].size() == 20);
    CHECK(f->fact_id.rfind(meta[1][1], 0) == 0);
    CHECK(meta[3] == std::vector<std::string>{"id", k.id});
    CHECK(meta[4] == std::vector<std::string>{"tenant", k.tenant});
    CHECK(meta[5] == std::vector<std::string>{"type", k.type});
    auto again = open_ok(o, k); // claimed once: a reopen reads it as any entity
    CHECK_FALSE(again->claimed_on_open());
    CHECK(again->last_seq() == 1);
    CHECK(again->verify()->ok);
    CHECK(o.spares->wait_ready(3, std::chrono::seconds(30)) == 3);
    // The spare's -wal and -shm went with it: with the pool full again (its maker idle), every
    // file in spares/ is a .db or the -wal or -shm of one, and the maker's making/ is empty.
    CHECK(fs::is_empty(o.spares->dir() / "making"));
    int files = 0;
    for (auto& e : fs::directory_iterator(o.spares->dir())) {
      if (e.is_directory())
        continue;
      auto db = e.path();
      CHECK(fs::exists(db.replace_extension(".db")));
      ++files;
    }
    CHECK(files == 9);
  }
  auto st = o.spares->get_stats();
  CHECK(st.taken == 2);
  CHECK(st.made == 5);
  CHECK(st.missed == 0);
  // Older schema versions (tests) never take a spare.
  auto old = o;
  old.target_schema_version = 3;
  CHECK(open_ok(old, key("old-version"))->schema_version() == 3);
  CHECK(o.spares->get_stats().taken == 2);
}

TEST_CASE("spares: a spare put in place but never claimed (a crash between) holds no entity for "
          "readers and is claimed by the next writable open of its key") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto pool = full_pool(tmp.path(), 1);
  pool->stop();
  auto spare = pool->take();
  REQUIRE(spare.has_value());
  auto k = key("unclaimed");
  auto path = k.file_path(tmp.path());
  fs::rename(*spare, path);
  // Readers: no entity there yet.
  auto ro = o;
  ro.read_only = true;
  auto r1 = entity_store::open(ro, k);
  REQUIRE_FALSE(r1.is_ok());
  CHECK(r1.error().code() == errc::not_found);
  auto r2 = entity_store::open_file(path, ro);
  REQUIRE_FALSE(r2.is_ok());
  CHECK(r2.error().code() == errc::not_found);
  CHECK(r2.error().message().find("unclaimed") != std::string::npos);
  auto ix = alarm_index::open(tmp.path(), durability::full);
  REQUIRE(ix.is_ok());
  auto rep = (*ix)->rebuild(tmp.path());
  REQUIRE(rep.is_ok());
  CHECK(rep->entity_files == 1);
  CHECK(rep->unreadable == 0); // not an unreadable file: no entity yet
  // A writable open, even one that would not create, claims it.
  auto w = o;
  w.create_if_missing = false;
  auto s = open_ok(w, k);
  CHECK(s->claimed_on_open());
  CHECK(s->key() == k);
  REQUIRE(s->append(draft("x")).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto r3 = entity_store::open_file(path, ro);
  REQUIRE_MESSAGE(r3.is_ok(), r3.error().to_string());
  CHECK(r3.value()->key() == k);
  CHECK(r3.value()->last_seq() == 1);
}

TEST_CASE("a -wal left at a key's path without its database file is refused, not replayed "
          "into a new entity, with or without a spare") {
  // Only an operator deleting a .db by hand leaves this: the store never deletes entity files.
  // SQLite cannot tell a foreign WAL from the database's own and would copy its frames into the
  // new file; the WAL may also hold the lost entity's last commits. So a creation refuses.
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  auto k = key("lost");
  auto path = k.file_path(tmp.path());
  {
    auto s = open_ok(o, k);
    for (int i = 0; i < 5; ++i)
      REQUIRE(s->append(draft("x", {{"i", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
  } // closed with its small WAL kept (wal_kept_on_close_kib)
  auto wal = path;
  wal += "-wal";
  REQUIRE(fs::file_size(wal) > 0);
  auto wal_bytes = [&] {
    std::ifstream in(wal, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string before = wal_bytes();
  CHECK(list_orphan_wals(tmp.path()).empty());
  fs::remove(path);
  CHECK(list_orphan_wals(tmp.path()) == std::vector<fs::path>{wal});
  for (bool with_spares : {false, true}) {
    CAPTURE(with_spares);
    auto oc = o;
    if (with_spares)
      oc.spares = full_pool(tmp.path(), 2);
    auto r = entity_store::open(oc, k);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::corruption);
    CHECK(r.error().message().find("-wal") != std::string::npos);
    CHECK_FALSE(fs::exists(path)); // nothing created, no spare consumed
    CHECK(wal_bytes() == before);  // the WAL untouched
    if (with_spares) {
      CHECK(oc.spares->get_stats().taken == 0);
      oc.spares->stop();
    }
  }
  // Read-only opens answer as for any missing entity.
  auto ro = o;
  ro.read_only = true;
  auto r = entity_store::open(ro, k);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::not_found);
  // Moved away by the operator: the key can be created again, empty.
  fs::rename(wal, tmp.path() / "lost.wal.saved");
  CHECK(list_orphan_wals(tmp.path()).empty());
  auto s = open_ok(o, k);
  CHECK(s->last_seq() == 0);
  // An empty -wal is no WAL: SQLite ignores it, and so does the check.
  s.reset();
  fs::remove(path);
  fs::remove(wal);
  { std::ofstream(wal).flush(); }
  REQUIRE(fs::file_size(wal) == 0);
  auto s2 = open_ok(o, k);
  CHECK(s2->last_seq() == 0);
}

TEST_CASE("spares: a restarted pool keeps the whole spares an earlier one left and deletes "
          "unfinished, damaged, written-beside, twice-named and foreign files") {
  test::temp_dir tmp;
  fs::path dir;
  std::vector<fs::path> spares;
  {
    auto pool = full_pool(tmp.path(), 4);
    pool->stop();
    dir = pool->dir();
  }
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".db")
      spares.push_back(e.path());
  std::sort(spares.begin(), spares.end());
  REQUIRE(spares.size() == 4);
  for (auto& p : spares) { // each with its empty -wal and -shm
    for (const char* suffix : {"-wal", "-shm"}) {
      auto c = p;
      c += suffix;
      REQUIRE(fs::exists(c));
      CHECK(fs::file_size(c) == 0);
    }
  }
  std::string whole;
  {
    std::ifstream in(spares[0], std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  { std::ofstream(dir / "cut-short.tmp", std::ios::binary) << whole.substr(0, 4096); }
  { std::ofstream(dir / "truncated.db", std::ios::binary) << whole.substr(0, whole.size() - 1); }
  {
    auto flipped = whole;
    flipped[flipped.size() / 2] ^= 1;
    std::ofstream(dir / "flipped.db", std::ios::binary) << flipped;
  }
  // Something wrote beside spare 0: its three files go.
  { std::ofstream(dir / (spares[0].filename().string() + "-wal"), std::ios::binary) << "x"; }
  { std::ofstream(dir / "orphan.db-shm", std::ios::binary); }           // its .db is gone
  { std::ofstream(dir / "README", std::ios::binary) << "not a spare"; } // left alone
  // What the maker had not finished (a kill mid-batch) is in making/.
  { std::ofstream(dir / "making" / "unfinished.tmp", std::ios::binary) << whole; }
  { std::ofstream(dir / "making" / "unfinished.db-wal", std::ios::binary); }
  // A spare with a second name (a crash kept both names of a take's rename, as can happen
  // where renames are not atomic on disk): an entity owns it. Spare 1's .db, spare 2's -wal.
  fs::create_directories(tmp.path() / "elsewhere");
  auto owned_db = tmp.path() / "elsewhere" / "owned.db";
  auto owned_wal = tmp.path() / "elsewhere" / "owned.db-wal";
  fs::create_hard_link(spares[1], owned_db);
  fs::create_hard_link(fs::path(spares[2]) += "-wal", owned_wal);
  auto kept = inode_of(spares[3]);
  auto again = spare_pool::start(tmp.path(), 4);
  REQUIRE(again.is_ok());
  auto st = (*again)->get_stats();
  CHECK(st.reused == 1);
  // 3 of spare 0, cut-short, truncated, flipped, the orphan, 3 each of spares 1 and 2, the
  // two in making/.
  CHECK(st.discarded == 15);
  (*again)->stop();
  CHECK(inodes_in(dir).size() == 1 + static_cast<size_t>((*again)->get_stats().made));
  CHECK(inodes_in(dir).count(kept) == 1);
  for (const char* gone : {"cut-short.tmp", "truncated.db", "flipped.db", "orphan.db-shm"})
    CHECK_FALSE(fs::exists(dir / gone));
  CHECK(fs::is_empty(dir / "making"));
  for (size_t i = 0; i < 3; ++i)
    CHECK_FALSE(fs::exists(spares[i]));
  // Only the spares/ names went: the owners' files are whole.
  CHECK(fs::file_size(owned_db) == whole.size());
  CHECK(fs::hard_link_count(owned_db) == 1);
  CHECK(fs::hard_link_count(owned_wal) == 1);
  CHECK(fs::exists(dir / "README"));
  CHECK_FALSE(spare_pool::start(tmp.path(), 0).is_ok());
  CHECK_FALSE(spare_pool::start(tmp.path(), 1025).is_ok());
  CHECK_FALSE(spare_pool::start("", 1).is_ok());
}

TEST_CASE("spares: a maker that cannot write counts an error, creations build their own files "
          "meanwhile, and the pool refills once it can again") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 2);
  auto making = o.spares->dir() / "making";
  REQUIRE(fs::is_empty(making)); // idle: its batch is done
  fs::remove(making);
  { std::ofstream(making, std::ios::binary) << "in the way"; } // a file where the dir goes
  for (int i = 0; i < 3; ++i) { // two from the pool, then one built by the creation
    auto s = open_ok(o, key("while-broken-" + std::to_string(i)));
    CHECK(s->claimed_on_open() == (i < 2));
    REQUIRE(s->append(draft("made")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  // The maker woke at the first take and failed.
  auto st = o.spares->wait_stats([](const spare_pool::stats& s) { return s.errors >= 1; },
                                 std::chrono::seconds(20));
  CHECK(st.errors >= 1);
  CHECK(st.missed == 1);
  CHECK(st.ready == 0);
  fs::remove(making); // the cause goes: the maker (retrying each second) makes making/ again
  CHECK(o.spares->wait_ready(2, std::chrono::seconds(30)) == 2);
  CHECK(fs::is_directory(making));
  auto s = open_ok(o, key("after"));
  CHECK(s->claimed_on_open());
  CHECK(list_entity_files(tmp.path()).size() == 4);
}

TEST_CASE("spares: threads creating the same entities at once get one file each, and no spare "
          "is lost") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.spares = full_pool(tmp.path(), 8);
  constexpr int keys = 30, threads = 4;
  std::atomic<int> failures{0}, claims{0};
  std::atomic<int> round{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < keys; ++i) {
        while (round.load() < i) // start each key together
          std::this_thread::yield();
        auto k = key("same-" + std::to_string(i));
        auto r = entity_store::open(o, k);
        if (!r || !(r.value()->key() == k))
          ++failures;
        else
          claims += r.value()->claimed_on_open();
        if (round.load() == i && i + 1 < keys)
          round.compare_exchange_strong(i, i + 1);
      }
    });
  for (auto& t : ts)
    t.join();
  CHECK(failures == 0);
  CHECK(claims <= keys); // one claim per file at most (an entity built without a spare has none)
  CHECK(list_entity_files(tmp.path()).size() == keys);
  o.spares->stop();
  auto st = o.spares->get_stats();
  CHECK(st.taken == claims); // a spare that lost its rename went back to the pool
  CHECK(static_cast<int64_t>(inodes_in(o.spares->dir()).size()) == st.made + st.reused - st.taken);
  for (auto& f : list_entity_files(tmp.path())) {
    auto ro = o;
    ro.read_only = true;
    auto s = entity_store::open_file(f, ro);
    REQUIRE_MESSAGE(s.is_ok(), s.error().to_string());
    CHECK(s.value()->key().file_path(tmp.path()) == f);
  }
}

TEST_CASE("deferred sync: a creation fsyncs no directory, the first sync() does, once") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.defer_sync = true;
  std::mutex mu;
  std::vector<std::string> seen;
  o.fault = [&](uint64_t, std::string_view what) {
    if (what == "sync" || what == "sync_dir") {
      std::lock_guard<std::mutex> g(mu);
      seen.emplace_back(what);
    }
    return SQLITE_OK;
  };
  for (bool with_spares : {true, false}) {
    CAPTURE(with_spares);
    auto oo = o;
    if (with_spares)
      oo.spares = full_pool(tmp.path(), 1);
    auto s = open_ok(oo, key(with_spares ? "spare" : "built"));
    CHECK(s->claimed_on_open() == with_spares);
    CHECK(seen.empty());
    REQUIRE(s->append(draft("x")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    CHECK(seen == std::vector<std::string>{"sync_dir", "sync"});
    REQUIRE(s->append(draft("y")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->sync().is_ok());
    CHECK(seen == std::vector<std::string>{"sync_dir", "sync", "sync"});
    seen.clear();
  }
  // A failed directory fsync fails the sync (nothing may be acknowledged) and is tried again.
  int fail_dir = 1;
  o.fault = [&](uint64_t, std::string_view what) {
    return what == "sync_dir" && fail_dir-- > 0 ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  };
  auto s = open_ok(o, key("dir-fault"));
  REQUIRE(s->append(draft("x")).is_ok());
  REQUIRE(s->commit().is_ok());
  auto bad = s->sync();
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("injected") != std::string::npos);
  CHECK(s->sync().is_ok());
  CHECK(fail_dir == -1); // asked again at the second sync
}

TEST_CASE("schema: newer, foreign, garbage and missing files are clear errors") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  fs::path file;
  {
    auto s = open_ok(o, key());
    file = s->path();
  }
  REQUIRE(raw_exec_factum(file, "PRAGMA user_version=99") == SQLITE_OK);
  auto r = entity_store::open(o, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::newer_schema);

  auto foreign = tmp.path() / "foreign.db";
  REQUIRE(raw_exec_factum(foreign, "CREATE TABLE t(x)") == SQLITE_OK);
  auto r2 = entity_store::open_file(foreign, o);
  REQUIRE_FALSE(r2.is_ok());
  CHECK(r2.error().code() == errc::not_factum_file);
  // With a schema version set (every factum file has one, and then its meta rows are read
  // without a look at sqlite_master): no meta table, a meta table of another shape, or meta
  // rows of another format are foreign all the same.
  for (const char* sql : {"CREATE TABLE t(x); PRAGMA user_version=3",
                          "CREATE TABLE meta(x, y); PRAGMA user_version=3",
                          "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                          "INSERT INTO meta VALUES ('format', 'other'); PRAGMA user_version=4"}) {
    CAPTURE(sql);
    auto versioned = tmp.path() / "versioned.db";
    fs::remove(versioned);
    REQUIRE(raw_exec_factum(versioned, sql) == SQLITE_OK);
    auto r = entity_store::open_file(versioned, o);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::not_factum_file);
  }

  auto garbage = key("g").file_path(tmp.path());
  fs::create_directories(garbage.parent_path());
  std::ofstream(garbage) << std::string(8192, 'Z');
  auto r3 = entity_store::open(o, key("g"));
  REQUIRE_FALSE(r3.is_ok());
  CHECK(r3.error().code() == errc::corruption);

  auto ro = o;
  ro.read_only = true;
  auto r4 = entity_store::open(ro, key("never"));
  REQUIRE_FALSE(r4.is_ok());
  CHECK(r4.error().code() == errc::not_found);
  CHECK_FALSE(fs::exists(key("never").file_path(tmp.path())));

  // A file moved to another key's path is refused.
  auto other = key("b1").file_path(tmp.path());
  fs::create_directories(other.parent_path());
  fs::copy_file(key("a1").file_path(tmp.path()), other);
  REQUIRE(raw_exec_factum(other, "PRAGMA user_version=2") == SQLITE_OK);
  auto r5 = entity_store::open(o, key("b1"));
  REQUIRE_FALSE(r5.is_ok());
  CHECK(r5.error().code() == errc::corruption);
}

TEST_CASE("read-only stores: immutable mode creates no -wal or -shm and changes neither") {
  test::temp_dir tmp;
  fs::path file;
  auto w = opts_for(tmp.path());
  {
    auto s = open_ok(w, key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  } // a small WAL is kept at the close, with its frame
  fs::path wal = file.string() + "-wal", shm = file.string() + "-shm";
  auto o = opts_for(tmp.path());
  o.read_only = true;
  o.immutable = true;
  // immutable=1 would not read the WAL: refused while it holds anything.
  REQUIRE(fs::file_size(wal) > 0);
  auto r = entity_store::open(o, key());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::invalid_argument);
  CHECK(r.error().message().find("-wal") != std::string::npos);
  w.wal_kept_on_close_kib = 0; // a close that checkpoints and empties the WAL
  open_ok(w, key()).reset();
  // The emptied companions a clean close keeps: untouched.
  REQUIRE(fs::file_size(wal) == 0);
  REQUIRE(fs::file_size(shm) == 0);
  auto wal_time = fs::last_write_time(wal), shm_time = fs::last_write_time(shm);
  {
    auto s = open_ok(o, key());
    CHECK(s->last_seq() == 1);
    CHECK(s->verify()->ok);
  }
  CHECK(fs::file_size(wal) == 0);
  CHECK(fs::file_size(shm) == 0);
  CHECK(fs::last_write_time(wal) == wal_time);
  CHECK(fs::last_write_time(shm) == shm_time);
  // Without them (a file copied elsewhere, or a stopped server's data from before they were
  // kept): none is created.
  fs::remove(wal);
  fs::remove(shm);
  {
    auto s = open_ok(o, key());
    CHECK(s->last_seq() == 1);
  }
  CHECK_FALSE(fs::exists(wal));
  CHECK_FALSE(fs::exists(shm));
}

} // namespace store_tests
