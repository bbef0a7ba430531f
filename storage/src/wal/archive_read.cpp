// archive_read.cpp: the continuous archive's read side (factum/storage/wal_archive.hpp): the
// index's records as points, bookmarks, and an entity file rebuilt at a point by replaying the
// archived WAL generations over the epoch's base with SQLite itself. Stateless; any thread.
#include <sqlite3.h>
#include <sys/stat.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "factum/storage/wal_archive.hpp"
#include "factum/storage/wal_copy.hpp"
#include "wal/wal_archiver.hpp"

namespace fs = std::filesystem;

namespace factum {

// -- bookmarks ----------------------------------------------------------------------------------

std::string archive_point::bookmark() const {
  return std::to_string(epoch) + "." + std::to_string(gen) + "." + std::to_string(end) + "." +
         std::to_string(seq);
}

result<archive_point> archive_point::parse(std::string_view text) {
  int64_t v[4];
  const char* p = text.data();
  const char* e = text.data() + text.size();
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      if (p == e || *p != '.')
        break;
      ++p;
    }
    auto [q, ec] = std::from_chars(p, e, v[i]);
    if (ec != std::errc() || q == p || v[i] < 0 || (q - p > 1 && *p == '0')) {
      p = nullptr;
      break;
    }
    p = q;
    if (i == 3 && p == e && v[0] > 0 && (v[1] > 0 || v[2] == 0))
      return archive_point{v[0], v[1], v[2], v[3], 0};
  }
  return status{errc::invalid_argument,
                "a bookmark is EPOCH.GEN.END.SEQ (four decimal numbers, as factum inspect "
                "bookmark prints it)"};
}

fs::path entity_archive_dir(const fs::path& archive_dir, const entity_key& key) {
  auto rel = key.file_path(fs::path()); // entities/<aa>/<digest>.db
  return archive_dir / rel.parent_path() / rel.stem();
}

// -- reading ------------------------------------------------------------------------------------

result<std::vector<archive_point>> archive_points(const fs::path& dir) {
  std::ifstream in(dir / "index", std::ios::binary);
  if (!in)
    return status{errc::not_found, "no archive at " + dir.string()};
  std::vector<archive_point> out;
  char rec[detail::archive_record_size];
  archive_point p;
  while (in.read(rec, sizeof rec) && detail::decode_archive_record(rec, p))
    out.push_back(p);
  if (out.empty())
    return status{errc::not_found, "the archive at " + dir.string() + " has no commit"};
  return out;
}

result<archive_point> find_bookmark(const fs::path& dir, const bookmark_query& q) {
  if (q.at_time_ms.has_value() == q.at_seq.has_value())
    return status{errc::invalid_argument, "a bookmark is asked for a time or a seq"};
  auto points = archive_points(dir);
  if (!points)
    return points.error();
  const archive_point* found = nullptr;
  for (const auto& p : *points)
    if (q.at_time_ms ? p.time_ms <= *q.at_time_ms : p.seq <= *q.at_seq)
      found = &p;
  if (found && !archive_point_restorable(dir, *found))
    return status{errc::not_found, "the commit at that point was pruned from the archive"};
  if (!found)
    return status{errc::not_found, q.at_time_ms ? "the archive begins after that time"
                                                : "the archive begins after that seq"};
  return *found;
}

namespace {

/// Copies the first `len` bytes of `from` to a new file `to` (len < 0: all of it).
status copy_prefix(const fs::path& from, const fs::path& to, int64_t len) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!in || !out)
    return {errc::io_error, "copy " + from.string() + " to " + to.string()};
  std::vector<char> buf(1 << 20);
  int64_t left = len;
  while (len < 0 || left > 0) {
    auto want = static_cast<std::streamsize>(
      len < 0 ? buf.size() : std::min<int64_t>(left, static_cast<int64_t>(buf.size())));
    in.read(buf.data(), want);
    auto n = in.gcount();
    if (n <= 0)
      break;
    out.write(buf.data(), n);
    left -= n;
  }
  out.flush();
  if (!out || (len >= 0 && left != 0))
    return {len >= 0 && left != 0 ? errc::corruption : errc::io_error,
            "copy " + from.string() + ": it is shorter than the archive's index says"};
  return status::ok();
}

/// Replays the -wal beside `db` into it and removes it (SQLite's recovery, then a TRUNCATE
/// checkpoint that must copy every frame).
status replay(const fs::path& db) {
  sqlite3* h = nullptr;
  int rc = sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, "unix");
  std::string what = "replay the archived WAL into " + db.string();
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(h, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
  int log = -1, done = -1;
  if (rc == SQLITE_OK)
    rc = sqlite3_wal_checkpoint_v2(h, "main", SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
  std::string msg = h ? sqlite3_errmsg(h) : sqlite3_errstr(rc);
  sqlite3_close_v2(h);
  if (rc != SQLITE_OK)
    return {(rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ? errc::corruption
                                                                          : errc::io_error,
            what + ": " + msg};
  if (log != done)
    return {errc::internal, what + ": the checkpoint copied " + std::to_string(done) + " of " +
                              std::to_string(log) + " frames"};
  return status::ok();
}

status fsync_file(const fs::path& p) {
  detail::scoped_fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || ::fdatasync(fd.get()) != 0)
    return {errc::io_error, "fdatasync " + p.string() + ": " + std::strerror(errno)};
  return status::ok();
}

} // namespace

namespace {

/// The epoch directory's base for a state in generation `gen`: the start generation of the
/// newest base whose start is at most max(gen, 1) (`base.db` starts at 1; `base-gNNNNNN.db`, a
/// pruned epoch's, at N: the generations before N folded in), or 0 when there is none (gen 0,
/// the base alone, needs `base.db`).
int64_t base_start(const fs::path& ed, int64_t gen) {
  std::error_code ec;
  int64_t best = fs::exists(ed / "base.db", ec) ? 1 : 0;
  if (gen == 0)
    return best;
  for (auto& e : fs::directory_iterator(ed, ec)) {
    auto n = e.path().filename().string();
    int64_t start = 0;
    if (n.size() > 11 && n.rfind("base-g", 0) == 0 && n.ends_with(".db") &&
        std::from_chars(n.data() + 6, n.data() + n.size() - 3, start).ec == std::errc() &&
        start <= gen && start > best)
      best = start;
  }
  return best;
}

fs::path base_path(const fs::path& ed, int64_t start) {
  if (start == 1)
    return ed / "base.db";
  char b[40];
  std::snprintf(b, sizeof b, "base-g%06lld.db", static_cast<long long>(start));
  return ed / b;
}

/// Where each generation of `epoch` ends (its last recorded commit), up to generation `gen`.
std::vector<int64_t> gen_ends(const std::vector<archive_point>& points, int64_t epoch,
                              int64_t gen) {
  std::vector<int64_t> out(static_cast<size_t>(gen) + 1, 0);
  for (const auto& q : points)
    if (q.epoch == epoch && q.gen <= gen)
      out[static_cast<size_t>(q.gen)] = std::max(out[static_cast<size_t>(q.gen)], q.end);
  return out;
}

/// Builds at `tmp` (fresh) the state of the epoch at `ed` at byte `end` of generation `gen`
/// (the earlier generations to their last recorded commit), from the newest base that allows.
status build_at(const fs::path& ed, const std::vector<int64_t>& ends, int64_t gen, int64_t end,
                const fs::path& tmp) {
  std::error_code ec;
  auto tmp_wal = detail::with_suffix(tmp, "-wal");
  for (const char* s : {"", "-wal", "-shm", "-journal"})
    fs::remove(detail::with_suffix(tmp, s), ec);
  int64_t start = base_start(ed, gen);
  if (start == 0)
    return {errc::not_found, "the archive at " + ed.string() + " no longer holds a base for " +
                               "generation " + std::to_string(gen) + " (pruned)"};
  if (auto st = copy_prefix(base_path(ed, start), tmp, -1); !st)
    return st.code() == errc::io_error
             ? status{errc::corruption,
                      "the archive's base " + base_path(ed, start).string() + " cannot be read"}
             : st;
  for (int64_t g = start; g <= gen; ++g) {
    int64_t len = g == gen ? end : ends[static_cast<size_t>(g)];
    if (len < 32)
      continue; // a generation whose commits the index does not name: nothing of it replays
    auto src = ed / detail::archive_gen_name(g);
    if (wal_commit_end(src) < len)
      return {errc::corruption, src.string() + " ends before the commit the index names (" +
                                  std::to_string(len) + ")"};
    if (auto st = copy_prefix(src, tmp_wal, len); !st)
      return st;
    if (auto st = replay(tmp); !st)
      return st;
  }
  for (const char* s : {"-wal", "-shm"})
    fs::remove(detail::with_suffix(tmp, s), ec);
  return fsync_file(tmp);
}

} // namespace

status materialize_archive_point(const fs::path& dir, const archive_point& p, const fs::path& out) {
  auto points = archive_points(dir);
  if (!points)
    return points.error();
  bool known = false;
  for (const auto& q : *points)
    known = known || (q.epoch == p.epoch && q.gen == p.gen && q.end == p.end && q.seq == p.seq);
  if (!known)
    return {errc::not_found,
            "bookmark " + p.bookmark() + " is not a commit of the archive at " + dir.string()};
  std::error_code ec;
  if (fs::exists(out, ec))
    return {errc::conflict, out.string() + " exists"};
  auto ed = dir / detail::archive_epoch_name(p.epoch);
  if (!fs::is_directory(ed, ec))
    return {errc::not_found, "bookmark " + p.bookmark() + " was pruned from the archive"};
  auto tmp = out.parent_path() / ("." + out.filename().string() + ".materialize");
  if (auto st = build_at(ed, gen_ends(*points, p.epoch, p.gen), p.gen, p.end, tmp); !st) {
    fs::remove(tmp, ec);
    return st;
  }
  fs::rename(tmp, out, ec);
  if (ec)
    return {errc::io_error, "rename " + tmp.string() + ": " + ec.message()};
  if (detail::sync_dir(out.parent_path()) != 0)
    return {errc::io_error, "fsync " + out.parent_path().string() + ": " + std::strerror(errno)};
  return status::ok();
}

bool archive_point_restorable(const fs::path& dir, const archive_point& p) {
  std::error_code ec;
  auto ed = dir / detail::archive_epoch_name(p.epoch);
  return fs::is_directory(ed, ec) && base_start(ed, p.gen) > 0;
}

// -- pruning ------------------------------------------------------------------------------------

result<archive_prune_report> prune_archive(const fs::path& dir, int64_t keep_after_ms) {
  archive_prune_report r;
  auto points = archive_points(dir);
  if (!points)
    return points.error();
  // The oldest commit that stays: the first at or after the cutoff (the newest when all are
  // older: the present stays restorable).
  const archive_point* keep = &points->back();
  for (const auto& p : *points)
    if (p.time_ms >= keep_after_ms) {
      keep = &p;
      break;
    }
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) { // whole epochs before the kept one
    auto n = e.path().filename().string();
    int64_t epoch = 0;
    if (n.size() > 1 && n[0] == 'e' &&
        std::from_chars(n.data() + 1, n.data() + n.size(), epoch).ec == std::errc() &&
        epoch < keep->epoch) {
      for (auto& f : fs::recursive_directory_iterator(e.path(), ec))
        if (f.is_regular_file(ec))
          r.bytes_freed += static_cast<int64_t>(f.file_size(ec));
      fs::remove_all(e.path(), ec);
      if (ec)
        return status{errc::io_error, "remove " + e.path().string() + ": " + ec.message()};
      ++r.epochs_removed;
    }
  }
  auto ed = dir / detail::archive_epoch_name(keep->epoch);
  int64_t g = keep->gen;
  if (g >= 2 && base_start(ed, g) < g) {
    // A base at the start of the kept commit's generation: the ones before it folded in.
    auto ends = gen_ends(*points, keep->epoch, g - 1);
    auto tmp = ed / ".base.prune";
    if (auto st = build_at(ed, ends, g - 1, ends[static_cast<size_t>(g - 1)], tmp); !st) {
      fs::remove(tmp, ec);
      return st;
    }
    fs::rename(tmp, base_path(ed, g), ec);
    if (ec || detail::sync_dir(ed) != 0)
      return status{errc::io_error, "put " + base_path(ed, g).string() + " in place"};
    r.generations_folded = g - 1;
  }
  // What the newest base makes unnecessary: older bases and the generations before it.
  int64_t start = base_start(ed, std::max<int64_t>(g, 1));
  for (auto& e : fs::directory_iterator(ed, ec)) {
    auto n = e.path().filename().string();
    int64_t num = 0;
    bool old_gen = n.size() > 5 && n[0] == 'g' && n.ends_with(".wal") &&
                   std::from_chars(n.data() + 1, n.data() + n.size() - 4, num).ec == std::errc() &&
                   num < start;
    bool old_base =
      (n == "base.db" && start > 1) ||
      (n.rfind("base-g", 0) == 0 && n.ends_with(".db") &&
       std::from_chars(n.data() + 6, n.data() + n.size() - 3, num).ec == std::errc() &&
       num < start);
    if (old_gen || old_base) {
      r.bytes_freed += static_cast<int64_t>(e.file_size(ec));
      fs::remove(e.path(), ec);
    }
  }
  r.oldest_kept = *keep;
  return r;
}

} // namespace factum
