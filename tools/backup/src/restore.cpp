// restore.cpp: `factum restore --from DEST --data NEWDIR`. Checks every file of the backup
// against its manifest while copying it into a temporary directory beside NEWDIR, opens and
// verifies each restored entity, builds the runtime's indexes (alarms, tenants) from the
// restored files, syncs everything, and only then renames the directory to NEWDIR: NEWDIR is
// either absent (or empty) or a whole restore. The one thread that runs the subcommand.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "factum/storage/alarm_index.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/tenant_index.hpp"
#include "manifest.hpp"
#include "restore.hpp"

namespace fs = std::filesystem;

namespace factum::tools::backup {

namespace {

/// A directory removed with everything in it when the restore does not finish.
struct temp_tree {
  fs::path path;
  bool keep = false;
  ~temp_tree() {
    std::error_code ec;
    if (!keep && !path.empty())
      fs::remove_all(path, ec);
  }
};

/// Copies one backup file to `to`, checking it against the manifest's `want` (`what` names it).
status restore_file(const fs::path& from, const fs::path& to, const file_sum& want,
                    const std::string& what) {
  auto got = copy_and_sum(from, to);
  if (!got)
    return got.error();
  if (got->bytes != want.bytes || got->sha256 != want.sha256)
    return status{errc::corruption,
                  "backup file " + from.string() + " (" + what + ") does not match the manifest: " +
                    std::to_string(got->bytes) + " bytes, sha256 " + got->sha256 + "; expected " +
                    std::to_string(want.bytes) + " bytes, sha256 " + want.sha256};
  return status::ok();
}

/// Opens a restored entity read-only: its key, chain head and verify() as the manifest says.
status check_restored(const fs::path& db, const manifest_entity& e) {
  store_options o;
  o.read_only = true;
  o.create_if_missing = false;
  auto s = entity_store::open_file(db, o);
  if (!s)
    return status{s.error().code(),
                  "restored entity " + e.key.to_string() + ": " + s.error().message()};
  auto& store = **s;
  if (!(store.key() == e.key))
    return status{errc::corruption, "restored file of " + e.key.to_string() + " names entity " +
                                      store.key().to_string()};
  if (store.last_seq() != e.last_seq || store.head_hash() != e.head)
    return status{errc::corruption, "restored entity " + e.key.to_string() + " ends at seq " +
                                      std::to_string(store.last_seq()) +
                                      " (manifest: " + std::to_string(e.last_seq) + ")"};
  auto v = store.verify();
  if (!v)
    return v.error();
  if (!v->ok)
    return status{errc::corruption,
                  "restored entity " + e.key.to_string() + " fails verify: " + v->problem};
  return status::ok();
}

/// The runtime's derived indexes, built from the restored entity files (docs/operations.md).
status build_indexes(const fs::path& dir) {
  {
    auto ix = alarm_index::open(dir, durability::full);
    if (!ix)
      return ix.error();
    if (auto r = (*ix)->rebuild(dir); !r)
      return r.error();
  }
  auto tx = tenant_index::open(dir, durability::full);
  if (!tx)
    return tx.error();
  if (auto r = (*tx)->rebuild(dir); !r)
    return r.error();
  return status::ok();
}

class restore_run {
 public:
  restore_run(fs::path from, fs::path into, std::ostream& err)
      : from_(std::move(from)), into_(std::move(into)), err_(err) {}
  int check();
  int run(std::ostream& out);

 private:
  status restore_all();
  int refuse(const std::string& msg) {
    err_ << "factum restore: " << msg << "\n";
    return 2;
  }
  int failed(const status& st) {
    err_ << "factum restore: failed, nothing restored: " << st.message() << "\n";
    return 1;
  }

  fs::path from_, into_;
  std::ostream& err_;
  manifest m_;
  temp_tree tmp_;
};

int restore_run::check() {
  std::error_code ec;
  if (!fs::is_directory(from_, ec))
    return refuse("--from " + from_.string() + " is not a directory");
  auto m = read_manifest(from_);
  if (!m)
    return refuse(m.error().code() == errc::not_found
                    ? "--from " + from_.string() + " holds no factum backup (no manifest.json)"
                    : m.error().message());
  m_ = std::move(*m);
  from_ = normal_path(from_);
  into_ = normal_path(into_);
  if (is_within(into_, from_) || is_within(from_, into_))
    return refuse("--data " + into_.string() + " and --from " + from_.string() + " overlap");
  if (fs::exists(into_, ec)) {
    if (!fs::is_directory(into_, ec))
      return refuse("--data " + into_.string() + " exists and is not a directory");
    if (!fs::is_empty(into_, ec) || ec)
      return refuse("--data " + into_.string() + " is not empty");
  }
  if (!fs::is_directory(into_.parent_path(), ec))
    return refuse("the parent of --data " + into_.string() + " is not a directory");
  return 0;
}

status restore_run::restore_all() {
  auto gen = from_ / generation_dir(m_.generation);
  for (auto& e : m_.entities) {
    auto to = tmp_.path / e.file;
    auto src = gen / e.file;
    std::error_code ec;
    fs::create_directories(to.parent_path(), ec);
    if (ec)
      return status{errc::io_error, "cannot create " + to.parent_path().string()};
    if (auto st = restore_file(src, to, e.db, e.key.to_string()); !st)
      return st;
    if (e.wal)
      if (auto st = restore_file(suffixed(src, "-wal"), suffixed(to, "-wal"), *e.wal,
                                 e.key.to_string() + " -wal");
          !st)
        return st;
    if (auto st = check_restored(to, e); !st)
      return st;
  }
  if (auto st = build_indexes(tmp_.path); !st)
    return st;
  // Every file and directory of the restore durable before its rename.
  durable_batch durable;
  for (auto& ent : fs::recursive_directory_iterator(tmp_.path)) {
    auto st = ent.is_directory() ? (durable.add_dir(ent.path()), status::ok())
                                 : durable.add_file(ent.path());
    if (!st)
      return st;
  }
  durable.add_dir(tmp_.path);
  return durable.sync();
}

int restore_run::run(std::ostream& out) {
  auto t0 = std::chrono::steady_clock::now();
  // The temporary directory beside NEWDIR (same file system: the rename is atomic).
  std::string tmpl =
    (into_.parent_path() / ("." + into_.filename().string() + ".restore-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    return failed(status{errc::io_error, "cannot create a directory beside " + into_.string() +
                                           ": " + std::strerror(errno)});
  tmp_.path = tmpl;
  if (auto st = prepare_data_dir(tmp_.path, durability::full); !st)
    return failed(st);
  if (auto st = restore_all(); !st)
    return failed(st);
  // rename(2) replaces an empty directory; a non-empty one (filled meanwhile) fails it.
  if (::rename(tmp_.path.c_str(), into_.c_str()) != 0)
    return failed(status{errc::io_error, "cannot rename " + tmp_.path.string() + " to " +
                                           into_.string() + ": " + std::strerror(errno)});
  tmp_.keep = true;
  if (auto st = sync_dir(into_.parent_path()); !st)
    return failed(st);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json line = {{"restored", into_.string()},
                         {"generation", m_.generation},
                         {"backup_started_ms", m_.started_ms},
                         {"entities", m_.entities.size()},
                         {"seconds", s}};
  out << line.dump() << "\n";
  return 0;
}

} // namespace

int run_restore(const fs::path& from, const fs::path& into) {
  restore_run r(from, into, std::cerr);
  if (int rc = r.check(); rc != 0)
    return rc;
  return r.run(std::cout);
}

} // namespace factum::tools::backup
