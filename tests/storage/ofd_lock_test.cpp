// ofd_lock_test.cpp: the locks of factum's VFS for database files (storage/src/file/ofd_file.cpp),
// which takes SQLite's locks as open-file-description locks. What it must do: exclude writers
// between connections of one process and against other processes using SQLite's "unix" VFS,
// and let SQLite recognise the last connection at close (which decides whether the -wal and
// -shm may go).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <sqlite3.h>

#include "factum/storage/entity_store.hpp"
#include "file/ofd_file.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

sqlite3* open_db(const fs::path& path, const char* vfs) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs);
  REQUIRE(rc == SQLITE_OK);
  sqlite3_busy_timeout(db, 0);
  return db;
}

int exec(sqlite3* db, const char* sql) {
  return sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
}

int64_t count(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, nullptr) == SQLITE_OK);
  int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return n;
}

/// A fresh database with table t in the given journal mode, made through factum's VFS.
fs::path make_db(const fs::path& dir, const char* name, const char* mode) {
  auto path = dir / name;
  sqlite3* db = open_db(path, factum::entity_store::default_vfs());
  REQUIRE(exec(db, (std::string("PRAGMA journal_mode=") + mode).c_str()) == SQLITE_OK);
  REQUIRE(exec(db, "CREATE TABLE t(x)") == SQLITE_OK);
  sqlite3_close(db);
  return path;
}

/// In a forked child: a connection through SQLite's "unix" VFS, or the child exits with 2.
sqlite3* open_unix_in_child(const fs::path& path, int busy_ms) {
  sqlite3* c = nullptr;
  if (sqlite3_open_v2(path.c_str(), &c, SQLITE_OPEN_READWRITE, "unix") != SQLITE_OK)
    _exit(2);
  sqlite3_busy_timeout(c, busy_ms);
  return c;
}

/// In a forked child: a connection through `vfs`, or the child exits with 2.
sqlite3* open_db_in_child(const fs::path& path, const char* vfs) {
  sqlite3* c = nullptr;
  if (sqlite3_open_v2(path.c_str(), &c, SQLITE_OPEN_READWRITE, vfs) != SQLITE_OK)
    _exit(2);
  sqlite3_busy_timeout(c, 0);
  return c;
}

/// Waits for the forked child and checks that it exited with status 0.
void expect_child_ok(factum::test::child_process& child) {
  REQUIRE(child.wait());
  CHECK(WIFEXITED(child.status()));
  CHECK(WEXITSTATUS(child.status()) == 0);
}

/// Parent and child exchange one byte per step, on the child's pipes (child_process: the child
/// reports on one and reads the parent's words on the other).
struct channel {
  static void put(int fd) {
    char c = 1;
    (void)!::write(fd, &c, 1);
  }
  static bool get(int fd) {
    char c = 0;
    return ::read(fd, &c, 1) == 1;
  }
};

/// Forks `child`, a process that opens `path` on SQLite's "unix" VFS and runs `first` (or exits
/// with 2), tells the parent so, waits for the parent's word (child.tell()), and then exits with 0
/// when `then` succeeds on its connection, else 3. The parent waits for the first word before it
/// returns.
template <class Then>
void fork_unix_holder(const fs::path& path, const char* first, factum::test::child_process& child,
                      Then then) {
  REQUIRE(child.run([&](int report, int words) {
    sqlite3* c = open_unix_in_child(path, 0);
    if (exec(c, first) != SQLITE_OK)
      _exit(2);
    channel::put(report);
    channel::get(words);
    _exit(then(c) ? 0 : 3);
  }));
  REQUIRE(channel::get(child.reports()));
}

} // namespace

TEST_CASE("ofd locks: two connections of one process exclude each other's writes, and the last "
          "to close is the one that removes the WAL") {
  factum::test::temp_dir tmp;
  const char* vfs = factum::entity_store::default_vfs();
  auto path = make_db(tmp.path(), "wal.db", "WAL");
  sqlite3* a = open_db(path, vfs);
  sqlite3* b = open_db(path, vfs);
  REQUIRE(exec(a, "BEGIN IMMEDIATE") == SQLITE_OK);
  CHECK(exec(b, "BEGIN IMMEDIATE") == SQLITE_BUSY);
  CHECK(count(b) == 0); // readers go on beside a writer
  REQUIRE(exec(a, "INSERT INTO t VALUES (1)") == SQLITE_OK);
  REQUIRE(exec(a, "COMMIT") == SQLITE_OK);
  REQUIRE(exec(b, "BEGIN IMMEDIATE") == SQLITE_OK);
  CHECK(count(b) == 1);
  REQUIRE(exec(b, "COMMIT") == SQLITE_OK);
  // Closing while the other is open: not the last (its EXCLUSIVE lock is refused).
  sqlite3_close(a);
  CHECK(fs::exists(path.string() + "-wal"));
  CHECK(count(b) == 1);
  sqlite3_close(b); // the last: checkpoints and deletes the WAL and the -shm
  CHECK_FALSE(fs::exists(path.string() + "-wal"));
  CHECK_FALSE(fs::exists(path.string() + "-shm"));

  // Rollback-journal mode uses every lock level of the database file: a writer's EXCLUSIVE
  // lock keeps readers out until it commits.
  auto rpath = make_db(tmp.path(), "journal.db", "DELETE");
  a = open_db(rpath, vfs);
  b = open_db(rpath, vfs);
  sqlite3_stmt* st = nullptr; // prepared first: preparing reads the schema (a SHARED lock)
  REQUIRE(sqlite3_prepare_v2(b, "SELECT count(*) FROM t", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(exec(a, "BEGIN EXCLUSIVE") == SQLITE_OK);
  REQUIRE(exec(a, "INSERT INTO t VALUES (1)") == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_BUSY);
  sqlite3_reset(st);
  REQUIRE(exec(a, "COMMIT") == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK(sqlite3_column_int64(st, 0) == 1);
  sqlite3_finalize(st);
  // A reader's SHARED lock holds a writer at PENDING, and the writer gets in once it is gone.
  REQUIRE(exec(b, "BEGIN") == SQLITE_OK);
  CHECK(count(b) == 1);
  REQUIRE(exec(a, "BEGIN IMMEDIATE") == SQLITE_OK);
  REQUIRE(exec(a, "INSERT INTO t VALUES (2)") == SQLITE_OK);
  CHECK(exec(a, "COMMIT") == SQLITE_BUSY);
  REQUIRE(exec(b, "COMMIT") == SQLITE_OK);
  CHECK(exec(a, "COMMIT") == SQLITE_OK);
  CHECK(count(b) == 2);
  sqlite3_close(a);
  sqlite3_close(b);
}

TEST_CASE("ofd locks: factum's VFS and another process's unix VFS lock a rollback-journal database "
          "against each other, and their interleaved writes all land") {
  // (A WAL database is not shared that way: the next test.)
  factum::test::temp_dir tmp;
  const char* vfs = factum::entity_store::default_vfs();
  auto path = make_db(tmp.path(), "shared.db", "DELETE");

  // The other process holds the write lock: factum's connection is refused, then gets it.
  {
    factum::test::child_process child;
    fork_unix_holder(path, "BEGIN IMMEDIATE", child, [](sqlite3* c) {
      return exec(c, "INSERT INTO t VALUES (1)") == SQLITE_OK && exec(c, "COMMIT") == SQLITE_OK;
    });
    sqlite3* p = open_db(path, vfs);
    CHECK(exec(p, "BEGIN IMMEDIATE") == SQLITE_BUSY);
    child.tell();
    expect_child_ok(child);
    REQUIRE(exec(p, "BEGIN IMMEDIATE") == SQLITE_OK);
    CHECK(count(p) == 1);
    REQUIRE(exec(p, "COMMIT") == SQLITE_OK);
    sqlite3_close(p);
  }

  // factum's connection holds the write lock: the other process is refused.
  {
    sqlite3* p = open_db(path, vfs);
    REQUIRE(exec(p, "BEGIN IMMEDIATE") == SQLITE_OK);
    factum::test::child_process child;
    REQUIRE(child.run(
      [&] { _exit(exec(open_unix_in_child(path, 0), "BEGIN IMMEDIATE") == SQLITE_BUSY ? 0 : 3); }));
    expect_child_ok(child);
    REQUIRE(exec(p, "COMMIT") == SQLITE_OK);
    sqlite3_close(p);
  }

  // Both write at once, each waiting for the other's locks: every row lands, the file is whole.
  constexpr int rows = 300;
  sqlite3* p = open_db(path, vfs);
  sqlite3_busy_timeout(p, 10'000);
  factum::test::child_process child;
  REQUIRE(child.run([&] {
    sqlite3* c = open_unix_in_child(path, 10'000);
    for (int i = 0; i < rows; ++i)
      if (exec(c, "INSERT INTO t VALUES ('child')") != SQLITE_OK)
        _exit(3);
    sqlite3_close(c);
    _exit(0);
  }));
  int failed = 0;
  for (int i = 0; i < rows; ++i)
    failed += exec(p, "INSERT INTO t VALUES ('parent')") != SQLITE_OK ? 1 : 0;
  expect_child_ok(child);
  CHECK(failed == 0);
  CHECK(count(p) == 1 + 2 * rows);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(p, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "ok");
  sqlite3_finalize(st);
  sqlite3_close(p);
}

TEST_CASE("ofd shm: while a process of factum has a WAL database open, another process's unix VFS "
          "is refused (the wal-index is in factum's memory), and the other way round") {
  factum::test::temp_dir tmp;
  const char* vfs = factum::entity_store::default_vfs();
  auto path = make_db(tmp.path(), "wal.db", "WAL");
  {
    sqlite3* p = open_db(path, vfs);
    REQUIRE(exec(p, "INSERT INTO t VALUES (1)") == SQLITE_OK); // attached: DMS byte held
    factum::test::child_process child;
    REQUIRE(child.run([&] {
      sqlite3* c = open_unix_in_child(path, 0);
      int rc = exec(c, "SELECT count(*) FROM t") & 0xff;
      _exit(rc == SQLITE_BUSY || rc == SQLITE_PROTOCOL ? 0 : 3);
    }));
    expect_child_ok(child);
    CHECK(count(p) == 1); // and factum's connection goes on
    sqlite3_close(p);
  }
  // Closed: the other process reads and writes it, and while it holds it open (with its -shm
  // mapped), factum's connection is the one refused.
  factum::test::child_process child;
  fork_unix_holder(path, "INSERT INTO t VALUES (2)", child,
                   [](sqlite3* c) { return sqlite3_close(c) == SQLITE_OK; });
  sqlite3* p = open_db(path, vfs);
  int rc = exec(p, "SELECT count(*) FROM t") & 0xff;
  CHECK((rc == SQLITE_BUSY || rc == SQLITE_PROTOCOL));
  sqlite3_close(p);
  child.tell();
  expect_child_ok(child);
  p = open_db(path, vfs);
  CHECK(count(p) == 2);
  sqlite3_close(p);
}

TEST_CASE("ofd shm: the connections of one process share one wal-index in memory, and the -shm "
          "file is never written") {
  factum::test::temp_dir tmp;
  auto path = make_db(tmp.path(), "shared.db", "wal");
  sqlite3* a = open_db(path, factum::entity_store::default_vfs());
  sqlite3* b = open_db(path, factum::entity_store::default_vfs());
  REQUIRE(exec(a, "BEGIN") == SQLITE_OK);
  for (int i = 0; i < 300; ++i)
    REQUIRE(exec(a, "INSERT INTO t VALUES(randomblob(100))") == SQLITE_OK);
  REQUIRE(exec(a, "COMMIT") == SQLITE_OK);
  CHECK(count(b) == 300); // b found the frames through the wal-index a wrote
  auto shm = path;
  shm += "-shm";
  CHECK(fs::file_size(shm) == 0);
  REQUIRE(exec(b, "INSERT INTO t VALUES(1)") == SQLITE_OK);
  CHECK(count(a) == 301);
  sqlite3_close(a);
  CHECK(count(b) == 301); // the index outlives a's close
  sqlite3_close(b);
}

TEST_CASE("ofd shm: a forked child does not inherit its parent's wal-index: it is refused while "
          "the parent has the file open, and reads it once the parent closed it") {
  factum::test::temp_dir tmp;
  const char* vfs = factum::entity_store::default_vfs();
  auto path = make_db(tmp.path(), "forked.db", "WAL");
  sqlite3* p = open_db(path, vfs);
  REQUIRE(exec(p, "INSERT INTO t VALUES (1)") == SQLITE_OK); // attached: the index is made
  factum::test::child_process child;
  REQUIRE(child.run([&](int report, int words) {
    sqlite3* c = open_db_in_child(path, vfs);
    int rc = exec(c, "SELECT count(*) FROM t") & 0xff;
    if (rc != SQLITE_BUSY && rc != SQLITE_PROTOCOL)
      _exit(3); // a copy of the parent's index would have let it in
    sqlite3_close(c);
    channel::put(report);
    channel::get(words);
    c = open_db_in_child(path, vfs);
    sqlite3_stmt* st = nullptr;
    bool ok = sqlite3_prepare_v2(c, "SELECT count(*) FROM t", -1, &st, nullptr) == SQLITE_OK &&
              sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) == 2;
    sqlite3_finalize(st);
    sqlite3_close(c);
    _exit(ok ? 0 : 4);
  }));
  // (The child's ends are closed here: a child that died gives end of file, not a wait forever.)
  REQUIRE(channel::get(child.reports()));
  REQUIRE(exec(p, "INSERT INTO t VALUES (2)") == SQLITE_OK);
  sqlite3_close(p);
  child.tell();
  expect_child_ok(child);
}
