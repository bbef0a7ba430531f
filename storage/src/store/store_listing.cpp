// store_listing.cpp: what is in a data directory and in an entity (see entity_store.hpp): the
// entity files, the orphan write-ahead logs, and one entity's summary (entity_store::info).
// The listings are stateless (any thread); info() belongs to the store's owner thread.
#include "factum/storage/entity_store.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <vector>

#include "file/file_io.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace fs = std::filesystem;

namespace factum {

using detail::col_text;
using detail::stmt_guard;

// -- the data directory -------------------------------------------------------------------------

status prepare_data_dir(const fs::path& data_dir, durability mode) {
  std::vector<fs::path> made; // directories made here, outermost last
  std::error_code ec;
  for (auto d = data_dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path())
    made.push_back(d);
  for (const char* sub : {"entities", "runtime"})
    if (!fs::exists(data_dir / sub, ec))
      made.insert(made.begin(), data_dir / sub);
  for (auto it = made.rbegin(); it != made.rend(); ++it)
    if (!fs::create_directory(*it, ec) && ec)
      return {detail::errno_code(ec.value()),
              "cannot create " + it->string() + ": " + ec.message()};
  if (mode != durability::full)
    return status::ok();
  // Children first, then their parents: a name is durable once its directory's sync returned.
  std::vector<fs::path> to_sync = {data_dir};
  for (auto& d : made)
    if (d != data_dir)
      to_sync.push_back(d.parent_path());
  std::sort(to_sync.begin(), to_sync.end());
  to_sync.erase(std::unique(to_sync.begin(), to_sync.end()), to_sync.end());
  std::sort(to_sync.begin(), to_sync.end(), [](const fs::path& a, const fs::path& b) {
    return std::distance(a.begin(), a.end()) > std::distance(b.begin(), b.end());
  });
  for (auto& d : to_sync)
    if (int e = detail::sync_dir(d); e != 0)
      return {detail::errno_code(e), "fsync " + d.string() + ": " + std::strerror(e)};
  return status::ok();
}

// -- summary ------------------------------------------------------------------------------------

result<entity_info> entity_store::info() {
  entity_info i;
  i.key = key_;
  i.path = path_;
  i.schema_version = schema_version_;
  i.fact_count = last_seq_;
  if (last_seq_ > 0) {
    auto f = get(last_seq_);
    if (!f)
      return f.error();
    i.last_fact_ms = f->timestamp_ms;
  }
  auto st = prepare("SELECT value FROM meta WHERE key='created_at'");
  if (st) {
    stmt_guard g{st};
    if (sqlite3_step(st) == SQLITE_ROW)
      i.created_at_ms = std::atoll(col_text(st, 0).c_str());
  }
  if (schema_version_ >= schema::owners_version) {
    auto owner = current_owner();
    if (!owner)
      return owner.error();
    i.owner_epoch = owner->epoch;
    i.owner_node = owner->node;
  }
  std::error_code ec;
  i.file_bytes = fs::file_size(path_, ec);
  i.file_bytes += static_cast<uint64_t>(std::max<int64_t>(wal_bytes(), 0));
  return i;
}

// -- listings -----------------------------------------------------------------------------------

namespace {

/// The files directly inside the shard directories of data_dir/entities that `keep` accepts
/// (it gets the directory entry), in path order.
template <class Keep> std::vector<fs::path> list_shard_files(const fs::path& data_dir, Keep keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  auto root = data_dir / "entities";
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!it->is_directory(ec))
      continue;
    for (auto jt = fs::directory_iterator(it->path(), ec); !ec && jt != fs::directory_iterator();
         jt.increment(ec))
      if (keep(*jt))
        out.push_back(jt->path());
    ec.clear();
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

std::vector<fs::path> list_entity_files(const fs::path& data_dir) {
  return list_shard_files(data_dir, [](const fs::directory_entry& e) {
    std::error_code ec;
    return e.path().extension() == ".db" && e.is_regular_file(ec);
  });
}

std::vector<fs::path> list_orphan_wals(const fs::path& data_dir) {
  return list_shard_files(data_dir, [](const fs::directory_entry& e) {
    return e.path().extension() == ".db-wal" &&
           orphan_wal(fs::path(e.path()).replace_extension(".db")); // x.db-wal -> x.db
  });
}

std::optional<fs::path> orphan_wal(const fs::path& db_file) {
  auto wal = detail::with_suffix(db_file, "-wal");
  struct stat st {};
  if (::lstat(wal.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
    return std::nullopt;
  std::error_code ec;
  if (fs::exists(db_file, ec) || ec)
    return std::nullopt;
  return wal;
}

} // namespace factum
