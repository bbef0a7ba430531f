// archive_test.cpp: the continuous archive (store_options::archive_dir, wal_archive.hpp). A store
// ships each commit into its archive; an entity file rebuilt at any archived commit holds exactly
// the facts and keys up to it, across WAL restarts, closes, a crash of the writer (SIGKILL), a
// mirror that lost its tail, commits made without the archive, and an archive that cannot be
// written.
#include <doctest/doctest.h>

#include <unistd.h>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/wal_archive.hpp"
#include "support/child_process.hpp"
#include "support/file_bytes.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
namespace fs = std::filesystem;

namespace archive_test {

namespace {

const entity_key key{"acme", "ledger", "a1"};

using test::archive_opts;

/// One commit: a key and `facts` facts, as a turn writes them; synced unless `sync` is false.
void commit_turn(entity_store& s, const std::string& k, int facts = 2, bool sync = true) {
  REQUIRE(s.begin_turn().is_ok());
  REQUIRE(s.begin_key(k, "fp", 0, now_ms()).is_ok());
  for (int i = 0; i < facts; ++i) {
    fact_draft d;
    d.type = "invocation";
    d.idempotency_key = k;
    d.data = {{"k", k}, {"i", i}, {"pad", std::string(300, 'p')}};
    REQUIRE(s.append(d).is_ok());
  }
  REQUIRE(s.complete_key(k, "{}").is_ok());
  REQUIRE(s.end_turn(true).is_ok());
  REQUIRE(s.commit().is_ok());
  if (sync && s.wal_frames() > 0)
    REQUIRE(s.sync().is_ok());
}

/// The entity file rebuilt at `p`, opened read-only: its last seq, chain verified, and whether
/// key `k` is there.
struct rebuilt {
  int64_t last_seq = -1;
  bool chain_ok = false;
  std::unique_ptr<entity_store> store;
};

rebuilt rebuild(const fs::path& root, const archive_point& p, const std::string& name) {
  auto out = root / (name + ".db");
  auto st = materialize_archive_point(entity_archive_dir(root / "archive", key), p, out);
  REQUIRE_MESSAGE(st.is_ok(), st.message());
  store_options ro;
  ro.data_dir = root;
  ro.read_only = true;
  auto s = entity_store::open_file(out, ro);
  REQUIRE(s.is_ok());
  rebuilt r;
  r.last_seq = s.value()->last_seq();
  auto v = s.value()->verify();
  r.chain_ok = v.is_ok() && v->ok;
  r.store = std::move(s.value());
  return r;
}

std::vector<archive_point> points(const fs::path& root) {
  auto p = archive_points(entity_archive_dir(root / "archive", key));
  REQUIRE(p.is_ok());
  return *p;
}

} // namespace

TEST_CASE("archive: bookmarks name four numbers and nothing else") {
  archive_point p{2, 3, 4096, 17, 0};
  CHECK(p.bookmark() == "2.3.4096.17");
  auto back = archive_point::parse("2.3.4096.17");
  REQUIRE(back.is_ok());
  CHECK(*back == p);
  CHECK(archive_point::parse("1.0.0.0").is_ok()); // an epoch's base alone
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "a.2.3.4", "-1.2.3.4", "1.2.3.4x", "0.1.32.1",
                          "01.2.3.4", "1..3.4", "1.0.32.1", "../../etc"})
    CHECK_MESSAGE(archive_point::parse(bad).error().code() == errc::invalid_argument, bad);
}

TEST_CASE("archive: every commit is a point, rebuilt exactly, across WAL restarts and closes") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path(), true);
  std::vector<archive_point> at; // the point after each turn
  auto starts = wal_archive_stats().wal_starts;
  {
    auto s = entity_store::open(o, key).value();
    for (int t = 0; t < 12; ++t) {
      commit_turn(*s, "k" + std::to_string(t));
      at.push_back(points(tmp.path()).back());
      if (t == 3 || t == 7)
        REQUIRE(s->checkpoint().is_ok()); // the next commit restarts the WAL
    }
  }
  {
    auto s = entity_store::open(o, key).value(); // the close truncated the WAL: a new generation
    commit_turn(*s, "k12");
    at.push_back(points(tmp.path()).back());
  }
  CHECK(at.front().epoch == 1);
  CHECK(at.back().epoch == 1);
  CHECK(at.back().gen >= 4); // restarts after turns 3 and 7, and after the reopen
  // The archive synced its copy before each new WAL header (factum's VFS called it).
  CHECK(wal_archive_stats().wal_starts >= starts + 3);
  for (size_t i = 1; i < at.size(); ++i)
    CHECK(at[i].seq == at[i - 1].seq + 2);
  for (size_t i : {size_t{0}, size_t{3}, size_t{4}, size_t{8}, size_t{11}, size_t{12}}) {
    auto r = rebuild(tmp.path(), at[i], "at" + std::to_string(i));
    CHECK(r.last_seq == at[i].seq);
    CHECK(r.chain_ok);
    CHECK(r.store->get_key("k" + std::to_string(i)).is_ok());
    auto later = r.store->get_key("k" + std::to_string(i + 1));
    CHECK_FALSE(later.is_ok());
  }
  // Bookmarks by seq and by time name those points.
  auto dir = entity_archive_dir(tmp.path() / "archive", key);
  auto by_seq = find_bookmark(dir, {std::nullopt, at[5].seq + 1});
  REQUIRE(by_seq.is_ok());
  CHECK(by_seq->bookmark() == at[5].bookmark());
  auto by_time = find_bookmark(dir, {points(tmp.path()).back().time_ms, std::nullopt});
  REQUIRE(by_time.is_ok());
  CHECK(by_time->bookmark() == at.back().bookmark());
  CHECK(find_bookmark(dir, {int64_t{1}, std::nullopt}).error().code() == errc::not_found);
  // A point that is not a commit of the archive, and an existing target, are refused.
  auto wrong = at[4];
  wrong.end += 1;
  CHECK(materialize_archive_point(dir, wrong, tmp.path() / "x.db").code() == errc::not_found);
  CHECK(materialize_archive_point(dir, at[4], tmp.path() / "at4.db").code() == errc::conflict);
}

TEST_CASE("archive: commits made while the archive was not attached are shipped at the next open") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path());
  o.wal_kept_on_close_kib = 1024; // the WAL (same generation) outlives the closes
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k0");
  }
  auto plain = o;
  plain.archive_dir.clear();
  {
    auto s = entity_store::open(plain, key).value();
    commit_turn(*s, "k1");
    commit_turn(*s, "k2");
  }
  auto s = entity_store::open(o, key).value();
  auto last = points(tmp.path()).back();
  CHECK(last.epoch == 1);
  CHECK(last.seq == s->last_seq());
  auto r = rebuild(tmp.path(), last, "caught-up");
  CHECK(r.last_seq == 6);
  CHECK(r.store->get_key("k2").is_ok());
}

TEST_CASE("archive: generations it did not see start a new epoch with its own base") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path(), true);
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k0");
  }
  auto plain = o;
  plain.archive_dir.clear();
  for (int round = 0; round < 2; ++round) { // two closes that truncate: two generations unseen
    auto s = entity_store::open(plain, key).value();
    commit_turn(*s, "u" + std::to_string(round));
    commit_turn(*s, "w" + std::to_string(round));
  }
  auto before = wal_archive_stats().epochs_started;
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k1");
  }
  // The open finds no WAL (the plain close truncated it) and a database file that is not the
  // one the archive's last close left: a new epoch. Every point the archive names rebuilds.
  for (const auto& p : points(tmp.path())) {
    auto r = rebuild(tmp.path(), p, "p" + p.bookmark());
    CHECK_MESSAGE(r.last_seq == p.seq, p.bookmark());
    CHECK(r.chain_ok);
  }
  CHECK(points(tmp.path()).back().seq == 12);
  CHECK(points(tmp.path()).back().epoch == 2);
  CHECK(wal_archive_stats().epochs_started == before + 1);
}

TEST_CASE("archive: a mirror that lost its tail (power cut) is trimmed and caught up at open") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path());
  o.wal_kept_on_close_kib = 1024;
  archive_point third;
  {
    auto s = entity_store::open(o, key).value();
    for (int t = 0; t < 5; ++t) {
      commit_turn(*s, "k" + std::to_string(t));
      if (t == 2)
        third = points(tmp.path()).back();
    }
  }
  auto mirror = entity_archive_dir(tmp.path() / "archive", key) / "e000001" /
                ("g" + std::string(5, '0') + std::to_string(third.gen) + ".wal");
  REQUIRE(fs::exists(mirror));
  fs::resize_file(mirror, static_cast<uintmax_t>(third.end + 100)); // past k2, into k3's frames
  auto s = entity_store::open(o, key).value();
  auto pts = points(tmp.path());
  CHECK(pts.back().seq == s->last_seq());
  auto r = rebuild(tmp.path(), pts.back(), "trimmed");
  CHECK(r.last_seq == 10);
  CHECK(r.chain_ok);
  CHECK(r.store->get_key("k4").is_ok());
}

namespace {

using test::file_bytes;

/// An entity file's bytes (file_bytes) written back into the same file (same inode), or put in
/// its place as a new file (a rename, as a rollback or a restore does).
void write_back(const fs::path& db, const std::string& bytes, bool new_file) {
  for (const char* suffix : {"-wal", "-shm"})
    fs::remove(db.string() + suffix);
  auto target = new_file ? fs::path(db.string() + ".new") : db;
  {
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  if (new_file)
    fs::rename(target, db);
}

/// A power cut that took a whole WAL generation from the entity file (its header never reached
/// the disk) after the archive had copied and synced it: the file is left as the close before
/// that generation left it (`new_file` false). With `new_file`, the same bytes come as another
/// file put in place. Returns the live store reopened on it.
std::unique_ptr<entity_store> lose_a_generation(const fs::path& root, bool new_file,
                                                int64_t& file_seq) {
  auto o = archive_opts(root);
  auto db = key.file_path(o.data_dir);
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k0");
    file_seq = s->last_seq();
  } // the close truncates the WAL: the file holds k0
  auto saved = file_bytes(db);
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k1"); // a new WAL generation, shipped and synced by the archive
    commit_turn(*s, "k2");
  }
  REQUIRE(points(root).back().seq > file_seq);
  write_back(db, saved, new_file);
  return entity_store::open(o, key).value();
}

} // namespace

namespace {

/// The tree a power cut can leave after three WAL generations: the store (WALs restarted twice,
/// every commit synced) copied while open, as a SIGKILL would leave it, with the last
/// generation's mirror cut to `kept` bytes while the index records naming it stayed (the
/// archive does not sync either per commit, and unsynced writes reach the disk in any order).
/// Returns the copy's root; `live_seq` is the entity's last seq.
fs::path cut_last_mirror(const fs::path& root, uintmax_t kept, int64_t& live_seq) {
  auto o = archive_opts(root / "live", true);
  auto s = entity_store::open(o, key).value();
  for (int t = 0; t < 8; ++t) {
    commit_turn(*s, "k" + std::to_string(t));
    if (t == 2 || t == 5)
      REQUIRE(s->checkpoint().is_ok()); // the next commit restarts the WAL
  }
  live_seq = s->last_seq();
  auto last = points(root / "live").back();
  REQUIRE(last.gen >= 3);
  auto copy = root / "cut";
  fs::copy(root / "live", copy, fs::copy_options::recursive);
  s.reset();
  char epoch_name[16], gen_name[16];
  std::snprintf(epoch_name, sizeof epoch_name, "e%06lld", static_cast<long long>(last.epoch));
  std::snprintf(gen_name, sizeof gen_name, "g%06lld.wal", static_cast<long long>(last.gen));
  auto mirror = entity_archive_dir(copy / "archive", key) / epoch_name / gen_name;
  REQUIRE(fs::exists(mirror));
  fs::resize_file(mirror, kept);
  return copy;
}

} // namespace

TEST_CASE("archive: a generation whose index records reached the disk but whose mirror did not "
          "(power cut) is dropped and copied again from the live WAL at open, in the same epoch") {
  for (uintmax_t kept : {uintmax_t{0}, uintmax_t{32}}) { // nothing, or only the header
    CAPTURE(kept);
    test::temp_dir tmp;
    int64_t live_seq = 0;
    auto root = cut_last_mirror(tmp.path(), kept, live_seq);
    auto o = archive_opts(root, true);
    auto s = entity_store::open(o, key).value();
    REQUIRE(s->last_seq() == live_seq);
    auto pts = points(root);
    REQUIRE_FALSE(pts.empty());
    for (size_t i = 1; i < pts.size(); ++i)
      CHECK_MESSAGE(pts[i].seq >= pts[i - 1].seq, pts[i].bookmark());
    CHECK(pts.back().epoch == 1);
    CHECK(pts.back().seq == live_seq);
    auto r = rebuild(root, pts.back(), "newest");
    CHECK(r.last_seq == live_seq);
    CHECK(r.chain_ok);
    CHECK(r.store->get_key("k7").is_ok());
    commit_turn(*s, "k8");
    auto after = rebuild(root, points(root).back(), "after");
    CHECK(after.last_seq == s->last_seq());
    CHECK(after.store->get_key("k8").is_ok());
  }
}

TEST_CASE("archive: commits a power cut took from the entity file before its WAL reached the disk "
          "leave the archive too, and the next epoch starts where the file is (they stayed, "
          "as an epoch that ended past the file's seq)") {
  test::temp_dir tmp;
  int64_t file_seq = 0;
  auto s = lose_a_generation(tmp.path(), false, file_seq);
  CHECK(s->last_seq() == file_seq);
  auto pts = points(tmp.path());
  REQUIRE(pts.size() >= 2);
  for (size_t i = 1; i < pts.size(); ++i) {
    CHECK_MESSAGE(pts[i].seq >= pts[i - 1].seq, pts[i].bookmark());
    if (pts[i].epoch != pts[i - 1].epoch)
      CHECK_MESSAGE(pts[i].seq == pts[i - 1].seq, pts[i].bookmark());
  }
  CHECK(pts.back().epoch == 2);
  CHECK(pts.back().seq == file_seq);
  for (const auto& p : pts) {
    CHECK_MESSAGE(p.seq <= file_seq, p.bookmark() << " names a commit the file lost");
    auto r = rebuild(tmp.path(), p, "p" + p.bookmark());
    CHECK(r.last_seq == p.seq);
    CHECK(r.chain_ok);
    CHECK_FALSE(r.store->get_key("k1").is_ok());
  }
  // The lost generation's mirror is gone with its records; the archive goes on from the file.
  auto dir = entity_archive_dir(tmp.path() / "archive", key);
  CHECK_FALSE(fs::exists(dir / "e000001" / "g000002.wal"));
  commit_turn(*s, "k3");
  auto r = rebuild(tmp.path(), points(tmp.path()).back(), "after");
  CHECK(r.last_seq == s->last_seq());
  CHECK(r.store->get_key("k3").is_ok());
  CHECK_FALSE(r.store->get_key("k1").is_ok());
}

TEST_CASE("archive: an older file put in the entity file's place (a rollback, a restore) keeps "
          "the archive's later commits: a new epoch starts beside them") {
  test::temp_dir tmp;
  int64_t file_seq = 0;
  auto s = lose_a_generation(tmp.path(), true, file_seq);
  CHECK(s->last_seq() == file_seq);
  auto pts = points(tmp.path());
  CHECK(pts.back().epoch == 2);
  CHECK(pts.back().seq == file_seq);
  int64_t newest_of_first = 0;
  for (const auto& p : pts)
    if (p.epoch == 1)
      newest_of_first = std::max(newest_of_first, p.seq);
  CHECK(newest_of_first > file_seq);
  for (const auto& p : pts)
    if (p.epoch == 1 && p.seq == newest_of_first) {
      auto r = rebuild(tmp.path(), p, "kept");
      CHECK(r.last_seq == p.seq);
      CHECK(r.store->get_key("k2").is_ok());
    }
}

TEST_CASE("archive: a writer SIGKILLed mid-stream leaves an archive whose every point rebuilds") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path(), false);
  o.wal_kept_on_close_kib = 64;
  test::child_process child;
  REQUIRE(child.run([&](int report) {
    auto r = entity_store::open(o, key);
    if (!r)
      _exit(2);
    auto& s = *r.value();
    for (int64_t t = 0; t < 100000; ++t) {
      if (!s.begin_turn() || !s.begin_key("k" + std::to_string(t), "fp", 0, now_ms()).is_ok())
        _exit(3);
      fact_draft d;
      d.type = "invocation";
      d.data = {{"t", t}, {"pad", std::string(2000, 'x')}};
      if (!s.append(d).is_ok() || !s.complete_key("k" + std::to_string(t), "{}") ||
          !s.end_turn(true) || !s.commit())
        _exit(4);
      if (t % 200 == 199 && !s.checkpoint())
        _exit(5);
      if (write(report, &t, sizeof t) != sizeof t)
        _exit(6);
    }
    _exit(0);
  }));
  int64_t t = -1, acked = -1;
  while (acked < 700 && read(child.reports(), &t, sizeof t) == sizeof t)
    acked = t;
  child.kill_now();
  REQUIRE(acked >= 700);
  auto pts = points(tmp.path());
  REQUIRE(pts.size() >= 2);
  CHECK(pts.back().seq >= acked + 1); // every acknowledged commit shipped (seq = t + 1)
  CHECK(pts.front().epoch == 1);
  CHECK(pts.back().epoch == 1); // nothing broke the archive
  for (size_t i : {size_t{0}, pts.size() / 3, pts.size() / 2, pts.size() - 1}) {
    auto r = rebuild(tmp.path(), pts[i], "k" + std::to_string(i));
    CHECK(r.last_seq == pts[i].seq);
    CHECK(r.chain_ok);
  }
  // The next open attaches (anything the kill left unshipped is shipped) and keeps the epoch.
  auto s = entity_store::open(o, key).value();
  auto after = points(tmp.path());
  CHECK(after.back().epoch == 1);
  CHECK(after.back().seq == s->last_seq());
  CHECK(rebuild(tmp.path(), after.back(), "reopened").last_seq == s->last_seq());
}

TEST_CASE("archive: an archive that cannot be written fails no commit and restarts as an epoch") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path());
  fs::create_directories(o.archive_dir);
  // A file where the entity's archive directory would be: every archive write fails (ENOTDIR).
  auto dir = entity_archive_dir(o.archive_dir, key);
  fs::create_directories(dir.parent_path());
  std::ofstream(dir) << "in the way";
  auto failures = wal_archive_stats().failures;
  auto s = entity_store::open(o, key).value();
  commit_turn(*s, "k0");
  commit_turn(*s, "k1");
  CHECK(wal_archive_stats().failures > failures);
  CHECK(s->last_seq() == 4);
  fs::remove(dir);
  commit_turn(*s, "k2"); // the archive is writable again: a new epoch whose base holds k0..k2
  commit_turn(*s, "k3");
  auto pts = points(tmp.path());
  CHECK(pts.front().seq == 6);
  auto r = rebuild(tmp.path(), pts.back(), "after-break");
  CHECK(r.last_seq == 8);
  CHECK(r.store->get_key("k0").is_ok());
}

TEST_CASE("archive: a failed fdatasync of the live WAL in the archive fails the store's next "
          "sync, after a reopen and while the archive is broken (Linux reports a writeback "
          "error once per descriptor: the store's own, opened after it, would sync with "
          "success over the lost pages)") {
  test::temp_dir tmp;
  bool fail_live = false;
  int failed = 0;
  auto o = archive_opts(tmp.path(), true);
  o.fault = [&](uint64_t, std::string_view what) {
    if (what != "archive_sync_live" || !fail_live)
      return SQLITE_OK;
    ++failed;
    return SQLITE_IOERR;
  };
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k0");
  } // the close truncates the WAL
  {
    auto s = entity_store::open(o, key).value();
    fail_live = true;
    // The first commit of a truncated WAL: the archive syncs it before the store does.
    commit_turn(*s, "k1", 2, false);
    CHECK(failed > 0);
    auto st = s->sync();
    CHECK(st.code() == errc::io_error);
    CHECK(st.message().find("archive") != std::string::npos);
    fail_live = false;
    CHECK_FALSE(s->sync().is_ok()); // for the rest of the activation: the pages are gone
  }
  // A broken archive starts an epoch at each commit, syncing the live files first.
  auto dir = entity_archive_dir(o.archive_dir, key);
  fs::remove_all(dir);
  std::ofstream(dir) << "in the way";
  {
    auto s = entity_store::open(o, key).value();
    commit_turn(*s, "k2"); // the archive fails, the store syncs
    fs::remove(dir);
    fail_live = true;
    int before = failed;
    commit_turn(*s, "k3", 2, false);
    CHECK(failed > before);
    CHECK(s->sync().code() == errc::io_error);
  }
}

TEST_CASE("archive: a first epoch whose base copy has a WAL ships the next commits") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path(), true);
  o.wal_kept_on_close_kib = 1024;
  auto plain = o;
  plain.archive_dir.clear();
  {
    auto s = entity_store::open(plain, key).value();
    commit_turn(*s, "k0");
  }
  auto s = entity_store::open(o, key).value(); // epoch 1: the file and its WAL's commits
  commit_turn(*s, "k1");
  commit_turn(*s, "k2");
  auto pts = points(tmp.path());
  REQUIRE(pts.size() == 3);
  CHECK(pts.front().gen == 1); // the base's WAL is the first generation's start
  auto r = rebuild(tmp.path(), pts.back(), "next");
  CHECK(r.last_seq == 6);
  CHECK(r.chain_ok);
}

TEST_CASE("archive: pruning keeps every commit after the cutoff rebuildable and frees the rest") {
  test::temp_dir tmp;
  auto o = archive_opts(tmp.path(), true);
  auto dir = entity_archive_dir(o.archive_dir, key);
  std::vector<archive_point> at;
  auto s = entity_store::open(o, key).value();
  for (int t = 0; t < 9; ++t) {
    commit_turn(*s, "k" + std::to_string(t));
    at.push_back(points(tmp.path()).back());
    if (t % 3 == 2)
      REQUIRE(s->checkpoint().is_ok()); // generations of three commits
  }
  REQUIRE(at[5].gen >= 2);
  auto r = prune_archive(dir, at[5].time_ms);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK(r->bytes_freed > 0);
  CHECK(r->oldest_kept.time_ms <= at[5].time_ms); // the first commit shipped in that ms
  CHECK_FALSE(fs::exists(dir / "e000001" / "base.db"));
  CHECK_FALSE(fs::exists(dir / "e000001" / "g000001.wal"));
  for (const auto& p : at) // the kept commit's generation stays whole
    CHECK(archive_point_restorable(dir, p) == (p.gen >= r->oldest_kept.gen));
  for (size_t i : {size_t{5}, size_t{6}, size_t{8}}) {
    auto b = rebuild(tmp.path(), at[i], "kept" + std::to_string(i));
    CHECK(b.last_seq == at[i].seq);
    CHECK(b.chain_ok);
  }
  CHECK(materialize_archive_point(dir, at[0], tmp.path() / "gone.db").code() == errc::not_found);
  CHECK(find_bookmark(dir, {std::nullopt, at[0].seq}).error().code() == errc::not_found);
  // The writer goes on; a second prune with nothing older changes nothing it needs.
  commit_turn(*s, "k9");
  REQUIRE(s->checkpoint().is_ok());
  commit_turn(*s, "k10");
  auto again = prune_archive(dir, at[5].time_ms);
  REQUIRE(again.is_ok());
  auto last = points(tmp.path()).back();
  auto b = rebuild(tmp.path(), last, "after");
  CHECK(b.last_seq == 22);
  CHECK(b.store->get_key("k10").is_ok());
  CHECK(rebuild(tmp.path(), at[6], "kept6-again").last_seq == at[6].seq);
}

} // namespace archive_test
