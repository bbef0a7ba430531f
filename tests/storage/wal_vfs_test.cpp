// wal_vfs_test.cpp: factum's SQLite VFS (storage/src/wal/wal_vfs.cpp), which hands a commit's WAL
// writes to the kernel in one write. What it must never do: let another connection see a commit
// before its frames are in the file, or lose frames SQLite rewrote inside a transaction.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>

#include "factum/storage/entity_store.hpp"
#include "file/file_io.hpp"
#include "support/child_process.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"
#include "wal/wal_vfs.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace {

store_options opts_in(const fs::path& dir) {
  store_options o;
  o.data_dir = dir;
  o.mode = durability::normal;
  o.auto_checkpoint = false; // the owner checkpoints; wal_frames() is kept
  return o;
}

using test::open_ok;

/// acme/ledger/`id`: the entities of these tests.
entity_key ledger(std::string id) {
  return entity_key{"acme", "ledger", std::move(id)};
}

/// In a forked child: the store of `id`, or the child exits with status 2.
std::unique_ptr<entity_store> open_in_child(const store_options& o, const std::string& id) {
  auto r = entity_store::open(o, ledger(id));
  if (!r)
    _exit(2);
  return std::move(r.value());
}

fact_draft padded(int i, size_t pad) {
  fact_draft d;
  d.type = "invocation";
  d.data = {{"i", i}, {"pad", std::string(pad, static_cast<char>('a' + i % 26))}};
  return d;
}

/// A counter of this thread's I/O from /proc/thread-self/io ("syscr:", "syscw:"), or -1.
long thread_io(const char* counter) {
  std::ifstream f("/proc/thread-self/io");
  std::string name;
  long value = 0;
  while (f >> name >> value)
    if (name == counter)
      return value;
  return -1;
}

/// Write system calls this thread has made (pwrite included).
long thread_write_syscalls() {
  return thread_io("syscw:");
}

/// Read system calls this thread has made (pread included).
long thread_read_syscalls() {
  return thread_io("syscr:");
}

/// WAL frames in a -wal file of `size` bytes (a 32-byte header, then 24 + 4096 bytes each).
int64_t frames_in(int64_t size) {
  return (size - 32) / (4096 + 24);
}

/// Options under which a close keeps every WAL frame, so that the next open rebuilds the
/// wal-index from them.
store_options kept_wal_opts(const fs::path& dir) {
  auto o = opts_in(dir);
  o.wal_kept_on_close_kib = 8192;
  return o;
}

/// Makes entity `id` with `commits` one-fact commits (data padded by `pad` bytes), closes it
/// and returns the size of the -wal it kept (at least one frame per commit).
int64_t make_kept_wal(const store_options& o, const std::string& id, int commits, size_t pad) {
  std::string wal;
  {
    auto s = open_ok(o, ledger(id));
    for (int i = 0; i < commits; ++i) {
      REQUIRE(s->append(padded(i, pad)).is_ok());
      REQUIRE(s->commit().is_ok());
    }
    wal = detail::with_suffix(s->path(), "-wal").string();
  }
  auto size = static_cast<int64_t>(fs::file_size(wal));
  REQUIRE(frames_in(size) >= commits); // the frames are there to be read
  return size;
}

/// The store's chain of facts verifies.
void check_verified(entity_store& s) {
  auto v = s.verify();
  REQUIRE(v.is_ok());
  CHECK(v->ok);
}

/// Waits for the forked child and returns its wait status.
int wait_child(test::child_process& child) {
  REQUIRE(child.wait());
  return child.status();
}

/// The child whose wait status is `wst` exited with status 0.
void require_exited_ok(int wst) {
  REQUIRE_MESSAGE((WIFEXITED(wst) && WEXITSTATUS(wst) == 0), "child status " << WEXITSTATUS(wst));
}

/// The reopened store holds every one of the `commits` facts, its chain verifies, and the last
/// fact is the last commit's.
void check_all_commits(entity_store& s, int commits) {
  CHECK(s.last_seq() == commits);
  check_verified(s);
  fact_filter all;
  all.limit = 10000;
  auto facts = s.query(all);
  REQUIRE(facts.is_ok());
  REQUIRE(facts->size() == static_cast<size_t>(commits));
  CHECK(nlohmann::json::parse(facts->back().data)["i"] == commits - 1);
}

} // namespace

TEST_CASE("wal vfs: a commit of many WAL frames reaches the kernel in a few writes, not two per "
          "frame") {
  test::temp_dir tmp;
  REQUIRE(thread_write_syscalls() >= 0);
  auto commit_writes = [&](const std::string& vfs, const std::string& id) {
    auto o = opts_in(tmp.path());
    o.vfs = vfs;
    auto s = open_ok(o, ledger(id));
    REQUIRE(s->append(padded(0, 10)).is_ok()); // the WAL header and the first frames
    REQUIRE(s->commit().is_ok());
    int frames_before = s->wal_frames();
    for (int i = 1; i <= 60; ++i)
      REQUIRE(s->append(padded(i, 1500)).is_ok()); // ~25+ pages, all under the page cache
    long before = thread_write_syscalls();
    auto vfs_before = detail::wal_vfs_stats();
    auto st = s->commit();
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
    long writes = thread_write_syscalls() - before;
    auto vfs_after = detail::wal_vfs_stats();
    int frames = s->wal_frames() - frames_before;
    REQUIRE(frames >= 20);
    MESSAGE(vfs << ": " << frames << " frames in " << writes << " write calls");
    return std::tuple{frames, writes, vfs_after.wal_flushes - vfs_before.wal_flushes};
  };
  auto [frames, writes, flushed] = commit_writes("", "coalesced"); // factum's VFS
  CHECK(flushed >= 1);                                             // the commit went through it
  CHECK(flushed <= static_cast<uint64_t>(frames) / 20 + 2); // a buffer holds 30 frames of 4 KiB
  // What the kernel saw (sanitizer builds make write calls of their own, so only an upper
  // figure is certain): at least the flushes; without sanitizers exactly those.
  CHECK(writes >= static_cast<long>(flushed));
  // The control: SQLite's own VFS makes two write calls per frame, none through factum's.
  auto [raw_frames, raw_writes, raw_flushed] = commit_writes("unix", "raw");
  CHECK(raw_writes >= 2 * raw_frames);
  CHECK(raw_flushed == 0);
}

TEST_CASE("wal vfs: readers and a checkpointer on other connections see only whole commits "
          "while the owner commits") {
  test::temp_dir tmp;
  auto o = opts_in(tmp.path());
  auto writer = open_ok(o, ledger("shared"));
  auto ro = o;
  ro.read_only = true;
  auto reader = open_ok(ro, ledger("shared"));
  constexpr int commits = 1500;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, reads{0}, checkpoints{0};
  std::string first_error;
  std::thread read_thread([&] {
    fact_filter newest;
    newest.newest_first = true;
    newest.limit = 3;
    while (!done.load()) {
      auto r = reader->query(newest);
      if (!r) {
        if (bad++ == 0)
          first_error = r.error().to_string();
        continue;
      }
      // A page read before its frame reached the file would fail to parse or decode.
      for (auto& f : r.value()) {
        auto j = nlohmann::json::parse(f.data, nullptr, false);
        if (j.is_discarded() || !j.contains("i") || f.hash.size() != 64)
          if (bad++ == 0)
            first_error = "torn fact " + std::to_string(f.seq);
      }
      ++reads;
    }
  });
  std::thread checkpoint_thread([&] {
    while (!done.load()) {
      // A passive checkpoint may find the wal-index header mid-update (SQLITE_BUSY; it has no
      // busy timeout): that is SQLite's contract, not a failure. Anything else is.
      if (auto r = writer->checkpoint_concurrently(); r.is_ok())
        ++checkpoints;
      else if (r.error().code() != errc::busy && bad++ == 0)
        first_error = "checkpoint: " + r.error().to_string();
      std::this_thread::yield();
    }
  });
  for (int c = 0; c < commits; ++c) {
    REQUIRE(writer->append(padded(2 * c, 300 + c % 900)).is_ok());
    REQUIRE(writer->append(padded(2 * c + 1, 300 + c % 900)).is_ok());
    REQUIRE(writer->commit().is_ok());
  }
  done = true;
  read_thread.join();
  checkpoint_thread.join();
  INFO(first_error);
  CHECK(bad.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(checkpoints.load() > 0);
  check_verified(*reader);
  fact_filter newest;
  newest.newest_first = true;
  newest.limit = 1;
  auto last = reader->query(newest);
  REQUIRE(last.is_ok());
  REQUIRE(last->size() == 1);
  CHECK(last->front().seq == 2 * commits);
  reader.reset();
  writer.reset();
  auto again = open_ok(o, ledger("shared"));
  CHECK(again->last_seq() == 2 * commits);
  CHECK(again->verify()->ok);
}

TEST_CASE("wal vfs: a transaction larger than the page cache (frames rewritten in place, "
          "checksums redone at commit) survives the process dying right after its commit") {
  test::temp_dir tmp;
  auto o = opts_in(tmp.path());
  o.cache_kib = 64; // 16 pages: a 2,000-fact transaction spills many times
  for (int round = 0; round < 2; ++round) {
    auto before = detail::wal_vfs_stats();
    test::child_process child;
    REQUIRE(child.run([&] {
      auto store = open_in_child(o, "spill");
      auto& s = *store;
      for (int i = 0; i < 2000; ++i)
        if (!s.append(padded(i, 700)).is_ok())
          _exit(3);
      if (!s.commit().is_ok())
        _exit(4);
      auto after = detail::wal_vfs_stats();
      // The rewrite path ran: writes out of sequence passed through unbuffered.
      if (after.passthrough == before.passthrough)
        _exit(5);
      if (round == 0)
        _exit(0); // no close: the WAL stays as the commit left it
      raise(SIGKILL);
      _exit(6);
    }));
    int wst = wait_child(child);
    if (round == 0)
      require_exited_ok(wst);
    else
      REQUIRE((WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL));
    // Reopening recovers the wal-index from the -wal file alone, checking every frame's checksum:
    // a frame the VFS lost or a checksum it did not rewrite would drop the whole commit.
    auto s = open_ok(o, ledger("spill"));
    CHECK(s->last_seq() == 2000 * (round + 1));
    check_verified(*s);
  }
}

TEST_CASE("wal vfs: a commit whose gathered WAL write fails (file size limit) is reported, "
          "rolled back, and leaves the file at the previous commit") {
  test::temp_dir tmp;
  auto o = opts_in(tmp.path());
  o.wal_grow_kib = 0; // the frames' own write meets the limit (a grow-ahead's: its own test)
  test::child_process child;
  REQUIRE(child.run([&] {
    auto store = open_in_child(o, "efbig");
    auto& s = *store;
    for (int i = 0; i < 5; ++i)
      if (!s.append(padded(i, 100)).is_ok() || !s.commit().is_ok())
        _exit(3);
    // Every write past 64 KiB beyond the WAL's present end now fails (EFBIG; the signal ignored).
    std::error_code ec;
    auto wal = detail::with_suffix(s.path(), "-wal");
    auto size = fs::file_size(wal, ec);
    if (ec)
      _exit(4);
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{size + 64 * 1024, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
      _exit(5);
    for (int i = 5; i < 105; ++i) // ~40 frames: more than the limit allows
      if (!s.append(padded(i, 1500)).is_ok())
        _exit(6);
    auto st = s.commit();
    if (st.is_ok())
      _exit(7); // the failed write must fail the commit
    if (s.last_seq() != 5)
      _exit(8); // the store's head is back at the last commit
    // Without the limit the next commit goes through, after the failed one's remains.
    rlimit off{RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &off) != 0)
      _exit(9);
    if (!s.append(padded(5, 100)).is_ok() || !s.commit().is_ok())
      _exit(10);
    _exit(0); // no close: the parent reads what the WAL holds
  }));
  require_exited_ok(wait_child(child));
  auto s = open_ok(o, ledger("efbig"));
  CHECK(s->last_seq() == 6);
  check_verified(*s);
}

TEST_CASE("wal vfs: the wal-index rebuild at an open reads a kept WAL in a few large reads, "
          "not one per frame, and finds every commit, also past the 512 KiB it reads ahead") {
  test::temp_dir tmp;
  REQUIRE(thread_read_syscalls() >= 0);
  struct shape {
    const char* id;
    size_t pad;
    int commits;
  };
  for (auto [id, pad, commits] : {shape{"small", 100, 40}, shape{"big", 1500, 400}}) {
    CAPTURE(id);
    auto o = kept_wal_opts(tmp.path());
    auto wal_size = make_kept_wal(o, id, commits, pad);
    int64_t frames = frames_in(wal_size);
    if (std::string_view(id) == "big")
      REQUIRE(wal_size > 512 * 1024);
    auto before = detail::wal_vfs_stats().wal_readaheads;
    long reads0 = thread_read_syscalls();
    auto s = open_ok(o, ledger(id));
    long reads = thread_read_syscalls() - reads0;
    CHECK(detail::wal_vfs_stats().wal_readaheads == before + 1);
    if (std::string_view(id) == "small") // without the read-ahead: one per frame, and more
      CHECK(reads < frames / 2);
    check_all_commits(*s, commits);
    s.reset();
    // The same file through SQLite's own VFS (no read-ahead) reads the same.
    o.vfs = "unix";
    auto u = open_ok(o, ledger(id));
    CHECK(u->last_seq() == commits);
  }
}

TEST_CASE("wal vfs: a wal-index rebuild whose read-ahead cannot be made (no memory, a short read) "
          "reads the WAL plainly and finds every commit") {
  test::temp_dir tmp;
  REQUIRE(thread_read_syscalls() >= 0);
  constexpr int commits = 40;
  for (auto fault :
       {detail::readahead_fault_kind::allocation, detail::readahead_fault_kind::short_read}) {
    CAPTURE(static_cast<int>(fault));
    std::string id = fault == detail::readahead_fault_kind::allocation ? "alloc" : "short";
    auto o = kept_wal_opts(tmp.path());
    int64_t frames = frames_in(make_kept_wal(o, id, commits, 100));
    detail::wal_vfs_fail_next_readahead(fault);
    auto before = detail::wal_vfs_stats().wal_readaheads;
    long reads0 = thread_read_syscalls();
    auto s = open_ok(o, ledger(id));
    long reads = thread_read_syscalls() - reads0;
    // No read-ahead counted, and the frames read one by one (the plain path): at least one read
    // per frame, where the read-ahead needs a few.
    CHECK(detail::wal_vfs_stats().wal_readaheads == before);
    CHECK(reads >= frames);
    check_all_commits(*s, commits);
    s.reset();
    // The fault was taken once: the next rebuild of the same WAL reads ahead again.
    auto again = open_ok(o, ledger(id));
    CHECK(detail::wal_vfs_stats().wal_readaheads == before + 1);
    CHECK(again->last_seq() == commits);
  }
}

namespace {

/// Where the last commit's frames end in a -wal that has not restarted.
int64_t frames_end(const entity_store& s) {
  return 32 + int64_t{s.wal_frames()} * (4096 + 24);
}

/// Whether bytes [from, to) of `file` are all zero.
bool zeros_between(const fs::path& file, int64_t from, int64_t to) {
  std::ifstream in(file, std::ios::binary);
  in.seekg(from);
  std::string bytes(static_cast<size_t>(to - from), '\1');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return in.gcount() == static_cast<std::streamsize>(bytes.size()) &&
         bytes.find_first_not_of('\0') == std::string::npos;
}

} // namespace

TEST_CASE("wal vfs: a -wal that a commit makes longer grows ahead by zeros to the next 256 KiB, "
          "the commits after it leave its size alone, and a close that keeps it cuts the zeros") {
  test::temp_dir tmp;
  constexpr int64_t chunk = 256 * 1024;
  for (int grow_kib : {256, 0}) {
    CAPTURE(grow_kib);
    auto o = kept_wal_opts(tmp.path());
    o.wal_grow_kib = grow_kib;
    std::string id = "grow" + std::to_string(grow_kib);
    auto grows0 = detail::wal_vfs_stats().wal_grows;
    auto trims0 = detail::wal_vfs_stats().wal_trims;
    auto s = open_ok(o, ledger(id));
    auto wal = detail::with_suffix(s->path(), "-wal");
    int commits = 0;
    auto commit = [&] {
      REQUIRE(s->append(padded(commits, 1500)).is_ok());
      REQUIRE(s->commit().is_ok());
      ++commits;
    };
    // Below a quarter of the chunk the file is its frames only (a young entity writes no zeros).
    commit();
    CHECK(static_cast<int64_t>(fs::file_size(wal)) == frames_end(*s));
    while (frames_end(*s) < chunk / 4)
      commit();
    auto size = static_cast<int64_t>(fs::file_size(wal));
    if (grow_kib == 0) {
      CHECK(size == frames_end(*s));
      CHECK(detail::wal_vfs_stats().wal_grows == grows0);
    } else {
      CHECK(size % chunk == 0);
      CHECK(size > frames_end(*s));
      CHECK(zeros_between(wal, frames_end(*s), size));
      CHECK(detail::wal_vfs_stats().wal_grows == grows0 + 1);
      // The commits that fit leave the size as it is: they overwrite zeros.
      int fitting = 0;
      while (frames_end(*s) + 3 * (4096 + 24) < size) {
        commit();
        ++fitting;
        CHECK(static_cast<int64_t>(fs::file_size(wal)) == size);
      }
      CHECK(fitting >= 5);
      // The next one past the end grows it by one more chunk.
      while (frames_end(*s) <= size)
        commit();
      CHECK(static_cast<int64_t>(fs::file_size(wal)) == size + chunk);
      CHECK(detail::wal_vfs_stats().wal_grows == grows0 + 2);
    }
    auto end = frames_end(*s);
    s.reset(); // the close keeps the WAL (kept_wal_opts): no checkpoint
    CHECK(static_cast<int64_t>(fs::file_size(wal)) == end);
    CHECK(detail::wal_vfs_stats().wal_trims == trims0 + (grow_kib > 0 ? 1 : 0));
    auto again = open_ok(o, ledger(id));
    check_all_commits(*again, commits);
  }
}

TEST_CASE("wal vfs: a process killed while its -wal ends in zeros it grew ahead loses no commit, "
          "through factum's VFS or SQLite's own") {
  test::temp_dir tmp;
  auto o = opts_in(tmp.path());
  o.mode = durability::full;   // every commit synced before the next begins
  constexpr int commits = 120; // ~3 frames each of 4 KiB: past two chunks of 256 KiB
  test::child_process child;
  REQUIRE(child.run([&] {
    auto s = open_in_child(o, "killed");
    for (int i = 0; i < commits; ++i)
      if (!s->append(padded(i, 1500)).is_ok() || !s->commit().is_ok())
        _exit(3);
    ::kill(::getpid(), SIGKILL); // no close, no trim
    _exit(4);
  }));
  int wst = wait_child(child);
  REQUIRE_MESSAGE((WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL), "child status " << wst);
  auto wal = detail::with_suffix(ledger("killed").file_path(tmp.path()), "-wal");
  auto size = static_cast<int64_t>(fs::file_size(wal));
  CHECK(size % (256 * 1024) == 0); // it ends in zeros grown ahead
  for (std::string vfs : {"", "unix"}) {
    CAPTURE(vfs);
    auto u = o;
    u.vfs = vfs;
    u.mode = durability::normal;
    auto s = open_ok(u, ledger("killed"));
    check_all_commits(*s, commits);
  }
}

TEST_CASE("wal vfs: a -wal whose zeros cannot be written (file size limit) still takes the commit "
          "that reached its end, and grows ahead once it can") {
  test::temp_dir tmp;
  auto o = opts_in(tmp.path());
  test::child_process child;
  REQUIRE(child.run([&] {
    auto store = open_in_child(o, "nozeros");
    auto& s = *store;
    int i = 0;
    auto wal = detail::with_suffix(s.path(), "-wal");
    // Up to just below a quarter of the chunk: no zeros yet.
    while (32 + int64_t{s.wal_frames()} * (4096 + 24) < 64 * 1024 - 8 * (4096 + 24))
      if (!s.append(padded(i++, 100)).is_ok() || !s.commit().is_ok())
        _exit(3);
    std::error_code ec;
    auto size = fs::file_size(wal, ec);
    if (ec)
      _exit(4);
    // Room for the frames of the next commits, not for a chunk of zeros (EFBIG, signal ignored).
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{size + 40 * (4096 + 24), RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
      _exit(5);
    auto grows = detail::wal_vfs_stats().wal_grows;
    while (32 + int64_t{s.wal_frames()} * (4096 + 24) < 64 * 1024 + 4 * (4096 + 24))
      if (!s.append(padded(i++, 100)).is_ok() || !s.commit().is_ok())
        _exit(6); // a failed zero write must not fail the commit
    if (detail::wal_vfs_stats().wal_grows != grows)
      _exit(7); // no chunk was complete
    rlimit off{RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &off) != 0)
      _exit(8);
    // The limit lifted, the next commit that reaches the end grows the file.
    while (detail::wal_vfs_stats().wal_grows == grows && i < 1000)
      if (!s.append(padded(i++, 100)).is_ok() || !s.commit().is_ok())
        _exit(9);
    if (fs::file_size(wal, ec) % (256 * 1024) != 0)
      _exit(10);
    _exit(i < 1000 ? 0 : 11);
  }));
  require_exited_ok(wait_child(child));
  auto s = open_ok(o, ledger("nozeros"));
  CHECK(s->last_seq() > 10);
  check_verified(*s);
}

TEST_CASE("wal vfs: a WAL header is written at a -wal's first commit and again only at the commit "
          "that starts it over after a complete checkpoint (counted as a WAL generation)") {
  test::temp_dir tmp;
  auto s = open_ok(opts_in(tmp.path()), ledger("generations"));
  auto starts = [] { return detail::wal_vfs_stats().wal_starts; };
  auto commit = [&](int i) {
    REQUIRE(s->append(padded(i, 100)).is_ok());
    REQUIRE(s->commit().is_ok());
  };
  auto s0 = starts();
  commit(0);
  CHECK(starts() == s0 + 1); // the first commit writes the header, then its frames
  commit(1);
  commit(2);
  CHECK(starts() == s0 + 1); // later commits append frames under the same header
  REQUIRE(s->checkpoint().is_ok());
  CHECK(starts() == s0 + 1); // a checkpoint copies frames; it writes no WAL header
  commit(3);
  CHECK(starts() == s0 + 2); // the WAL was wholly copied: this commit starts it over
  CHECK(s->wal_frames() < 4);
  check_all_commits(*s, 4);
}

namespace {

/// The copy at `copy`, opened read-only as factum inspect opens its copies.
std::unique_ptr<entity_store> open_copy(const fs::path& copy) {
  store_options ro;
  ro.read_only = true;
  ro.create_if_missing = false;
  auto r = entity_store::open_file(copy, ro);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return std::move(r.value());
}

} // namespace

TEST_CASE("wal vfs: a copy of a live entity is brought up to date from its WAL's new commits, "
          "its database file copied again only after a WAL restart, and a tail it caught torn "
          "is copied again") {
  test::temp_dir tmp;
  auto s = open_ok(opts_in(tmp.path()), ledger("live"));
  int commits = 0;
  auto commit = [&] {
    REQUIRE(s->append(padded(commits, 300)).is_ok());
    REQUIRE(s->commit().is_ok());
    ++commits;
  };
  for (int i = 0; i < 3; ++i)
    commit();
  fs::create_directories(tmp.path() / "copy");
  auto copy = tmp.path() / "copy" / s->path().filename();
  auto copy_wal = detail::with_suffix(copy, "-wal");
  REQUIRE(entity_store::copy_files(s->path(), copy).is_ok());
  check_all_commits(*open_copy(copy), 3);
  // Commits since the copy: only the WAL's new frames are copied.
  commit();
  commit();
  auto db_time = fs::last_write_time(copy);
  auto r = entity_store::refresh_copy(s->path(), copy);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK_FALSE(*r);
  CHECK(fs::last_write_time(copy) == db_time);
  check_all_commits(*open_copy(copy), 5); // opened and closed: the copy's WAL stays as it is
  // A checkpoint changes the source's database file, not its WAL: still only the WAL.
  REQUIRE(s->checkpoint().is_ok());
  r = entity_store::refresh_copy(s->path(), copy);
  REQUIRE(r.is_ok());
  CHECK_FALSE(*r);
  check_all_commits(*open_copy(copy), 5);
  // The commit after that complete checkpoint restarts the WAL: a whole copy, which replaces
  // the copy's file: another name of the old one (a hard link) keeps the old bytes.
  commit();
  auto old_name = copy;
  old_name += ".old";
  fs::create_hard_link(copy, old_name);
  auto read_all = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto old_bytes = read_all(old_name);
  r = entity_store::refresh_copy(s->path(), copy);
  REQUIRE(r.is_ok());
  CHECK(*r);
  CHECK(fs::last_write_time(copy) != db_time);
  CHECK(read_all(old_name) == old_bytes);
  CHECK(fs::hard_link_count(old_name) == 1);
  fs::remove(old_name);
  check_all_commits(*open_copy(copy), 6);
  // A copy that caught its last commit torn (here: a byte of its last frame changed): the
  // refresh starts at the copy's last whole commit, so the commit is copied again whole.
  commit();
  commit();
  REQUIRE(entity_store::refresh_copy(s->path(), copy).is_ok());
  {
    // The last frame of the WAL's generation (frames of 24 + 4096 bytes after a 32-byte header,
    // with the header's salts; older frames past them belong to the generation before).
    std::fstream f(copy_wal, std::ios::in | std::ios::out | std::ios::binary);
    std::string head(32, '\0'), fh(24, '\0');
    REQUIRE(f.read(head.data(), 32));
    std::streamoff last = -1;
    for (std::streamoff off = 32;
         f.seekg(off) && f.read(fh.data(), 24) && fh.compare(8, 8, head, 16, 8) == 0;
         off += 24 + 4096)
      last = off;
    REQUIRE(last > 32);
    f.clear();
    f.seekp(last + 24 + 100);
    f.put('\x7f');
  }
  CHECK(open_copy(copy)->last_seq() < commits); // the torn commit is not read
  r = entity_store::refresh_copy(s->path(), copy);
  REQUIRE(r.is_ok());
  CHECK_FALSE(*r);
  check_all_commits(*open_copy(copy), commits);
  // The source's WAL gone (its entity closed and checkpointed into the database): whole copy.
  s.reset();
  r = entity_store::refresh_copy(tmp.path() / "acme" / "none.db", copy);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error().code() == errc::not_found);
}
