// backup.cpp: `factum backup --data DIR --to DEST` and the registration of both subcommands.
// Copies every entity file of DIR, each at a commit boundary, while a server may be writing it
// (entity_store::copy_files, refresh_copy), into a new generation directory of DEST, then writes
// the manifest last (docs/operations.md, docs/storage-format.md "Backups"). Files of an entity
// unchanged since the previous generation are hard links to it; a changed one gets the previous
// copy's -wal and only the commits since. The one thread that runs the subcommand.
#include "factum/tools/backup.hpp"
#include "factum/tools/inspect.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/wal_copy.hpp"
#include "manifest.hpp"
#include "restore.hpp"

namespace fs = std::filesystem;

namespace factum::tools::backup {

namespace {

// -- the source's files -------------------------------------------------------------------------

/// The size and mtime of a source .db before it is copied (exists = false: gone).
struct db_stat {
  bool exists = false;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};

db_stat stat_db(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return {};
  return {true, static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

/// Whether the source entity `src` has committed nothing since the copy `prev` (whose files
/// are `copy`, `copy`-wal). With a WAL in the copy: the source's -wal is the same generation
/// (same header: a restart changes the salts) and holds no frame of it where the copy's last
/// commit ended (a later commit writes its first frame there). A checkpoint since changed only
/// the source's database file, which the copy's WAL covers. Without one: the source has no
/// WAL either and its database file has the size and mtime it had before the copy.
bool unchanged(const fs::path& src, const manifest_entity& prev, const fs::path& copy,
               const db_stat& now) {
  auto copy_head = read_at(suffixed(copy, "-wal"), 32, 0);
  auto src_head = read_at(suffixed(src, "-wal"), 32, 0);
  if (copy_head.size() < 32 || prev.wal_end < 32)
    return src_head.empty() && now.bytes == prev.source_db_bytes &&
           now.mtime_ns == prev.source_db_mtime_ns;
  if (src_head != copy_head)
    return false;
  auto frame = read_at(suffixed(src, "-wal"), 24, prev.wal_end);
  return !(frame.size() == 24 && std::memcmp(frame.data() + 8, copy_head.data() + 16, 8) == 0);
}

int64_t file_bytes(const fs::path& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

/// What one backup did.
struct counters {
  int64_t whole = 0, refreshed = 0, unchanged = 0, skipped = 0;
  uint64_t bytes_copied = 0, bytes = 0;
};

// -- one backup ---------------------------------------------------------------------------------

class backup_run {
 public:
  backup_run(fs::path data, fs::path dest, std::ostream& err)
      : data_(std::move(data)), dest_(std::move(dest)), err_(err) {}

  /// Checks the arguments and DEST (exit 2 when refused), takes DEST's lock.
  int check();
  /// The backup itself (exit 1 on failure).
  int run(std::ostream& out);

 private:
  /// Copies the entity file `src` (`rel` under the data directory) into the generation.
  status copy_entity(const fs::path& src, const std::string& rel);
  /// An entity unchanged since `prev`: its files hard-linked from the previous generation.
  status link_unchanged(const fs::path& prev_copy, const fs::path& to, const manifest_entity& prev);
  /// A changed one: refresh_copy over the previous copy; true when it copied the file whole.
  result<bool> refresh_changed(const fs::path& src, const fs::path& prev_copy, const fs::path& to,
                               const manifest_entity& prev);
  status describe(const fs::path& copy, const std::string& rel, const db_stat& before,
                  manifest_entity& e, bool& skip);
  int refuse(const std::string& msg) {
    err_ << "factum backup: " << msg << "\n";
    return 2;
  }
  int failed(const status& st) {
    err_ << "factum backup: failed: " << st.message() << "\n";
    return 1;
  }

  fs::path data_, dest_;
  std::ostream& err_;
  int lock_fd_ = -1;
  std::optional<manifest> prev_;
  std::map<std::string, const manifest_entity*> prev_by_file_;
  fs::path prev_gen_, gen_;
  manifest next_;
  counters n_;
  durable_batch durable_;
};

int backup_run::check() {
  std::error_code ec;
  if (!fs::is_directory(data_, ec))
    return refuse("--data " + data_.string() + " is not a directory");
  if (!fs::is_directory(data_ / "entities", ec))
    return refuse("--data " + data_.string() + " is not a factum data directory (no entities/)");
  data_ = normal_path(data_);
  dest_ = normal_path(dest_);
  if (is_within(dest_, data_))
    return refuse("--to " + dest_.string() + " is inside the data directory " + data_.string());
  if (is_within(data_, dest_))
    return refuse("the data directory " + data_.string() + " is inside --to " + dest_.string());
  if (fs::exists(dest_, ec) && !fs::is_directory(dest_, ec))
    return refuse("--to " + dest_.string() + " is not a directory");
  fs::create_directories(dest_, ec);
  if (ec)
    return refuse("cannot create --to " + dest_.string() + ": " + ec.message());
  auto m = read_manifest(dest_);
  if (!m && m.error().code() != errc::not_found)
    return refuse(m.error().message());
  if (m) {
    prev_ = std::move(*m);
  } else {
    // No manifest: an empty directory, or what an interrupted first backup left.
    for (auto& ent : fs::directory_iterator(dest_, ec)) {
      auto name = ent.path().filename().string();
      if (!is_generation_dir(name) && name != "manifest.json.tmp" && name != "backup.lock")
        return refuse("--to " + dest_.string() +
                      " is not empty and holds no factum backup (no manifest.json)");
    }
  }
  auto lock = dest_ / "backup.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    return refuse("cannot open " + lock.string() + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return refuse("--to " + dest_.string() + " is in use by another factum backup");
  return 0;
}

status backup_run::describe(const fs::path& copy, const std::string& rel, const db_stat& before,
                            manifest_entity& e, bool& skip) {
  store_options o;
  o.read_only = true;
  o.create_if_missing = false;
  {
    auto s = entity_store::open_file(copy, o);
    if (!s && s.error().code() == errc::not_found) {
      skip = true; // an unclaimed file (a spare put in place): no entity yet
      return status::ok();
    }
    if (!s)
      return status{s.error().code(), "the copy of " + rel + ": " + s.error().message()};
    e.key = (*s)->key();
    e.last_seq = (*s)->last_seq();
    e.head = (*s)->head_hash();
  }
  if (e.key.file_path("").relative_path() != fs::path(rel))
    return status{errc::corruption,
                  rel + " names entity " + e.key.to_string() + ", whose file is elsewhere"};
  std::error_code ec;
  for (const char* s : {"-shm", "-journal"})
    fs::remove(suffixed(copy, s), ec);
  e.file = rel;
  e.source_db_bytes = before.bytes;
  e.source_db_mtime_ns = before.mtime_ns;
  auto wal = suffixed(copy, "-wal");
  e.wal_end = wal_commit_end(wal);
  auto db_sum = sum_file(copy);
  if (!db_sum)
    return db_sum.error();
  e.db = *db_sum;
  e.wal.reset();
  if (fs::exists(wal, ec)) {
    auto w = sum_file(wal);
    if (!w)
      return w.error();
    e.wal = *w;
    if (auto st = durable_.add_file(wal); !st)
      return st;
  }
  return durable_.add_file(copy);
}

status backup_run::link_unchanged(const fs::path& prev_copy, const fs::path& to,
                                  const manifest_entity& prev) {
  // Hard links: nothing writes these files again (a later copy replaces them).
  std::error_code ec;
  fs::create_hard_link(prev_copy, to, ec);
  if (!ec && prev.wal)
    fs::create_hard_link(suffixed(prev_copy, "-wal"), suffixed(to, "-wal"), ec);
  if (ec)
    return status{errc::io_error, "cannot link " + to.string() + ": " + ec.message()};
  next_.entities.push_back(prev);
  ++n_.unchanged;
  n_.bytes += prev.db.bytes + (prev.wal ? prev.wal->bytes : 0);
  return status::ok();
}

result<bool> backup_run::refresh_changed(const fs::path& src, const fs::path& prev_copy,
                                         const fs::path& to, const manifest_entity& prev) {
  // The previous database file by a second name (refresh_copy replaces it, never writes it,
  // when it must copy it again), and a -wal of this generation's own, which it appends to.
  std::error_code ec;
  fs::create_hard_link(prev_copy, to, ec);
  if (!ec && prev.wal)
    fs::copy_file(suffixed(prev_copy, "-wal"), suffixed(to, "-wal"), ec);
  if (ec)
    return status{errc::io_error, "cannot prepare " + to.string() + ": " + ec.message()};
  auto r = entity_store::refresh_copy(src, to);
  if (r && !*r) // only what followed the copy's last whole commit was read
    n_.bytes_copied +=
      static_cast<uint64_t>(std::max<int64_t>(0, file_bytes(suffixed(to, "-wal")) - prev.wal_end));
  return r;
}

status backup_run::copy_entity(const fs::path& src, const std::string& rel) {
  auto before = stat_db(src);
  auto to = gen_ / rel;
  auto drop = [&] { // the entity is left out: deleted since the listing, or unclaimed
    std::error_code ec;
    for (const char* s : {"", "-wal", "-shm"})
      fs::remove(suffixed(to, s), ec);
    ++n_.skipped;
    return status::ok();
  };
  if (!before.exists)
    return drop();
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  if (ec)
    return status{errc::io_error, "cannot create " + to.parent_path().string()};
  auto it = prev_by_file_.find(rel);
  const manifest_entity* prev = it == prev_by_file_.end() ? nullptr : it->second;
  auto prev_copy = prev_gen_ / rel;
  bool whole = true;
  if (prev && fs::exists(prev_copy, ec)) {
    if (unchanged(src, *prev, prev_copy, before))
      return link_unchanged(prev_copy, to, *prev);
    auto r = refresh_changed(src, prev_copy, to, *prev);
    if (!r)
      return r.error().code() == errc::not_found ? drop() : r.error();
    whole = *r;
  } else if (auto st = entity_store::copy_files(src, to); !st) {
    return st.code() == errc::not_found ? drop() : st;
  }
  if (whole)
    n_.bytes_copied += static_cast<uint64_t>(file_bytes(to) + file_bytes(suffixed(to, "-wal")));
  ++(whole ? n_.whole : n_.refreshed);
  manifest_entity e;
  bool skip = false;
  if (auto st = describe(to, rel, before, e, skip); !st)
    return st;
  if (skip)
    return drop();
  n_.bytes += e.db.bytes + (e.wal ? e.wal->bytes : 0);
  next_.entities.push_back(std::move(e));
  return status::ok();
}

int backup_run::run(std::ostream& out) {
  auto t0 = std::chrono::steady_clock::now();
  next_.started_ms = now_ms();
  next_.source = data_.string();
  next_.generation = prev_ ? prev_->generation + 1 : 1;
  std::error_code ec;
  // What an interrupted backup left: generations the manifest does not name, its temporary.
  std::vector<fs::path> stale;
  for (auto& ent : fs::directory_iterator(dest_, ec)) {
    auto name = ent.path().filename().string();
    bool current = prev_ && name == generation_dir(prev_->generation);
    if ((is_generation_dir(name) && !current) || name == "manifest.json.tmp")
      stale.push_back(ent.path());
  }
  for (auto& p : stale)
    if (fs::remove_all(p, ec); ec)
      return failed(status{errc::io_error, "cannot delete " + p.string() + ": " + ec.message()});
  if (prev_) {
    prev_gen_ = dest_ / generation_dir(prev_->generation);
    for (auto& e : prev_->entities)
      prev_by_file_[e.file] = &e;
  }
  gen_ = dest_ / generation_dir(next_.generation);
  fs::create_directories(gen_ / "entities", ec);
  if (ec)
    return failed(status{errc::io_error, "cannot create " + gen_.string() + ": " + ec.message()});
  for (auto& file : list_entity_files(data_)) {
    auto rel = file.lexically_relative(data_).string();
    if (auto st = copy_entity(file, rel); !st)
      return failed(st);
  }
  // Every file this backup wrote and every name of the generation durable before the manifest
  // names them (the hard-linked files were synced by an earlier backup).
  for (auto& ent : fs::directory_iterator(gen_ / "entities", ec))
    durable_.add_dir(ent.path());
  for (auto& d : {gen_ / "entities", gen_, dest_})
    durable_.add_dir(d);
  if (auto st = durable_.sync(); !st)
    return failed(st);
  next_.bytes_copied = n_.bytes_copied;
  next_.finished_ms = now_ms();
  if (auto st = write_manifest(dest_, next_); !st)
    return failed(st);
  if (prev_)
    fs::remove_all(prev_gen_, ec); // its files that this generation kept are hard links
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json line = {{"backup", dest_.string()},
                         {"generation", next_.generation},
                         {"entities", next_.entities.size()},
                         {"copied_whole", n_.whole},
                         {"refreshed", n_.refreshed},
                         {"unchanged", n_.unchanged},
                         {"skipped", n_.skipped},
                         {"bytes_copied", n_.bytes_copied},
                         {"bytes", n_.bytes},
                         {"seconds", s}};
  out << line.dump() << "\n";
  if (next_.entities.empty()) // e.g. a cluster node on shared storage: its files are elsewhere
    err_ << "factum backup: warning: no entity file under " << (data_ / "entities").string()
         << " (a cluster node with storage \"shared\" keeps them under its shared_dir: back that "
            "directory up with --data SHARED_DIR)\n";
  return 0;
}

} // namespace

int run_backup(const fs::path& data, const fs::path& dest) {
  backup_run b(data, dest, std::cerr);
  if (int rc = b.check(); rc != 0)
    return rc;
  return b.run(std::cout);
}

} // namespace factum::tools::backup

namespace factum::tools {

namespace {

/// `factum restore`: a backup into a new data directory, or one entity rolled back in a running
/// server; which one, from the options given (exit 2 with a message naming what is missing).
int restore_command(const std::string& from, const std::string& into,
                    const entity_rollback_args& rb) {
  auto usage = [](const char* what) {
    std::cerr << "factum restore: " << what << "\n";
    return 2;
  };
  bool backup_mode = !from.empty() || !into.empty();
  bool entity_mode = !rb.entity.empty() || !rb.bookmark.empty();
  if (backup_mode && entity_mode)
    return usage("--from and --data (a backup into a new data directory) exclude --entity and "
                 "--to-bookmark (one entity rolled back in a running server)");
  if (!backup_mode && !entity_mode)
    return usage("give --from and --data (a backup into a new data directory), or --entity and "
                 "--to-bookmark (one entity rolled back in a running server)");
  if (backup_mode) {
    if (from.empty())
      return usage("--from is required (the backup directory)");
    if (into.empty())
      return usage("--data is required (the new data directory)");
    if (!rb.server.empty() || !rb.note.empty() || rb.json)
      return usage("--server, --note and --json go with --entity");
    return backup::run_restore(from, into);
  }
  if (rb.entity.empty())
    return usage("--entity is required with --to-bookmark (TENANT/TYPE/ID)");
  if (rb.bookmark.empty())
    return usage("--to-bookmark is required with --entity (factum inspect bookmark names one)");
  if (rb.server.empty())
    return usage("--entity needs --server URL: the entity is rolled back by the server that "
                 "runs it (held, rebuilt from its archive, released)");
  return run_entity_rollback(rb);
}

} // namespace

void add_backup_commands(CLI::App& app, int* exit_code) {
  struct args {
    std::string data, to, from, into;
    entity_rollback_args rollback;
  };
  auto a = std::make_shared<args>();
  auto* b = app.add_subcommand(
    "backup", "Copy a data directory's entities, also while a server writes them (incremental)");
  b->add_option("--data", a->data, "The data directory to back up")->required();
  b->add_option("--to", a->to, "The backup directory (made when missing)")->required();
  b->callback([a, exit_code] { *exit_code = backup::run_backup(a->data, a->to); });
  auto* r = app.add_subcommand(
    "restore", "Restore a backup into a new data directory (--from, --data), or roll one entity "
               "back to a bookmark in a running server (--entity, --to-bookmark, --server)");
  r->add_option("--from", a->from, "The backup directory");
  r->add_option("--data", a->into, "The new data directory (absent or empty)");
  auto& rb = a->rollback;
  r->add_option("--entity", rb.entity, "The entity to roll back, as TENANT/TYPE/ID")
    ->type_name("TENANT/TYPE/ID");
  r->add_option("--to-bookmark", rb.bookmark, "Its bookmark (factum inspect bookmark)")
    ->type_name("BOOKMARK");
  r->add_option("--server", rb.server, "With --entity: the running server (http://127.0.0.1:PORT)")
    ->type_name("URL");
  r->add_option("--api-key", rb.api_key, "With --entity: a key of its tenant with scope operate")
    ->type_name("KEY")
    ->envname("FACTUM_API_KEY");
  r->add_option("--note", rb.note, "With --entity: why (recorded in the rollback's fact)")
    ->type_name("TEXT");
  r->add_flag("--json", rb.json, "With --entity: the answer as JSON even on a terminal");
  r->callback([a, exit_code] { *exit_code = restore_command(a->from, a->into, a->rollback); });
}

} // namespace factum::tools
