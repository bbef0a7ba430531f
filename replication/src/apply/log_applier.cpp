// log_applier.cpp: a shard's log applied to a node's entity files (log_applier.hpp), the
// persisted state of how far, and the rebuild of one entity from the whole log. One thread.
#include "factum/replication/log_applier.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "factum/replication/commit_record.hpp"

namespace factum::replication {

namespace fs = std::filesystem;

namespace {

/// Stores open at once while applying; past it, they are synced and closed.
constexpr size_t max_open = 128;

int sync_path(const fs::path& p, int flags) {
  int fd = ::open(p.c_str(), flags | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return e;
}

/// Removes an entity's files: the database, its -wal and -shm, and any mark beside them.
status remove_entity(const entity_key& key, const store_options& opts) {
  auto path = key.file_path(opts.data_dir);
  std::error_code ec;
  auto dir = path.parent_path();
  auto stem = path.filename().string();
  if (!fs::exists(dir, ec))
    return status::ok();
  for (auto& e : fs::directory_iterator(dir, ec)) {
    auto name = e.path().filename().string();
    if (name.rfind(stem, 0) == 0 && !fs::remove(e.path(), ec) && ec)
      return {errc::io_error, "remove " + e.path().string() + ": " + ec.message()};
  }
  if (int e = sync_path(dir, O_RDONLY | O_DIRECTORY); e != 0)
    return {errc::io_error, "sync " + dir.string() + ": " + std::strerror(e)};
  return status::ok();
}

} // namespace

// -- the state ----------------------------------------------------------------------------------

result<follow_state> load_follow_state(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec))
    return follow_state{};
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!in || j.is_discarded() || !j.is_object() || !j.contains("applied") ||
      !j["applied"].is_number_unsigned() || !j.value("writer", nlohmann::json()).is_string())
    return status{errc::corruption, file.string() + " is not a follower's state"};
  follow_state s;
  s.applied = j["applied"].get<uint64_t>();
  s.epoch = j.value("epoch", int64_t{0});
  s.writer = j["writer"].get<std::string>();
  return s;
}

status save_follow_state(const fs::path& file, const follow_state& s) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  auto tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"applied", s.applied}, {"epoch", s.epoch}, {"writer", s.writer}}.dump();
    if (!out)
      return {errc::io_error, "write " + tmp.string()};
  }
  if (int e = sync_path(tmp, O_RDONLY); e != 0)
    return {errc::io_error, "sync " + tmp.string() + ": " + std::strerror(e)};
  fs::rename(tmp, file, ec);
  if (ec)
    return {errc::io_error, "rename " + tmp.string() + ": " + ec.message()};
  if (int e = sync_path(file.parent_path(), O_RDONLY | O_DIRECTORY); e != 0)
    return {errc::io_error, "sync " + file.parent_path().string() + ": " + std::strerror(e)};
  return status::ok();
}

// -- the applier --------------------------------------------------------------------------------

log_applier::log_applier(store_options opts, follow_state start, std::optional<entity_key> only,
                         part_reader parts)
    : opts_(std::move(opts)), state_(std::move(start)), only_(std::move(only)),
      parts_(std::move(parts)) {
  opts_.capture_changes = false;
  opts_.owner_epoch = 0;
  opts_.owner_node.clear();
  opts_.create_if_missing = false;
  opts_.read_only = false;
  opts_.spares.reset();
  opts_.archive_dir.clear();
  opts_.defer_sync = opts_.mode == durability::full; // synced by finish()
  opts_.wal_grow_kib = 0; // a copy takes records in bursts: no -wal grown ahead per file
  opts_.auto_checkpoint = true;
}

log_applier::~log_applier() = default;

entity_store* log_applier::store_for(const entity_key& key,
                                     const std::optional<replica_genesis>& genesis, status& error) {
  auto name = key.to_string();
  if (auto it = open_.find(name); it != open_.end())
    return it->second.get();
  if (open_.size() >= max_open)
    if (error = close_some(); !error)
      return nullptr;
  std::error_code ec;
  bool exists = fs::exists(key.file_path(opts_.data_dir), ec);
  if (!exists && !genesis) {
    diverged_.insert(name); // a record without the file it follows
    return nullptr;
  }
  if (!exists)
    if (auto st = entity_store::create_replica(opts_, key, *genesis, false); !st) {
      if (st.code() == errc::corruption)
        diverged_.insert(name);
      else
        error = st;
      return nullptr;
    }
  created_ = created_ || !exists;
  auto s = entity_store::open(opts_, key);
  if (!s) {
    error = s.error();
    return nullptr;
  }
  touched_.insert(name);
  return open_.emplace(name, std::move(*s)).first->second.get();
}

status log_applier::take(const log_message& m) {
  if (m.seq <= state_.applied)
    return status::ok();
  state_.applied = m.seq;
  if (m.marker) {
    if (m.epoch >= state_.epoch) {
      state_.epoch = m.epoch;
      state_.writer = m.writer;
    }
    return status::ok();
  }
  if (m.epoch != state_.epoch || m.writer != state_.writer) {
    ++skipped_; // a superseded writer's record: never acknowledged
    return status::ok();
  }
  if (m.part)
    return status::ok(); // read through its image's head
  auto r = decode(m.data);
  if (!r)
    return {r.error().code(), "message " + std::to_string(m.seq) + ": " + r.error().message()};
  auto name = r->key.to_string();
  if (only_ && !(*only_ == r->key)) {
    ++skipped_;
    return status::ok();
  }
  if (r->image)
    return take_image(*r); // an image heals a diverged copy
  if (diverged_.count(name) || awaiting_.count(name)) {
    ++skipped_;
    return status::ok();
  }
  status error;
  auto* store = store_for(r->key, r->genesis, error);
  if (!store)
    return error;
  auto st = store->apply_captured(r->commit);
  if (st.code() == errc::conflict || st.code() == errc::corruption) {
    diverged_.insert(name);
    open_.erase(name);
    return status::ok();
  }
  if (!st)
    return st;
  ++applied_;
  return status::ok();
}

status log_applier::take_image(const commit_record& r) {
  auto name = r.key.to_string();
  status error;
  std::error_code ec;
  if (fs::exists(r.key.file_path(opts_.data_dir), ec) && !diverged_.count(name)) {
    // A copy that holds the image's commit already (it applied the records before it) keeps
    // its file.
    auto* store = store_for(r.key, std::nullopt, error);
    if (!store)
      return error;
    if (auto st = store->read_replicated_commit(); !st)
      return st;
    if (store->replicated_commit() == r.commit.number &&
        store->replicated_commit_id() == r.commit.id) {
      ++skipped_;
      return status::ok();
    }
  }
  open_.erase(name);
  // The parts, by the sequences the head names. One that is gone (a later image replaced this
  // one) or that is not this image's leaves the entity diverged: the caller rebuilds it from
  // the log, whose later head holds it.
  replica_image img{r.commit.number, r.commit.id, {}};
  img.bytes.reserve(static_cast<size_t>(r.image->size));
  if (!parts_) {
    diverged_.insert(name);
    return status::ok();
  }
  bool whole = true;
  for (size_t i = 0; whole && i < r.image->parts.size(); ++i) {
    auto m = parts_(r.image->parts[i]);
    if (!m)
      return m.error();
    if (!m->has_value()) { // purged: a later image replaced this one, and comes later
      awaiting_.insert(name);
      return status::ok();
    }
    result<image_part> p = status{errc::corruption, "not an image part"};
    if ((*m)->part)
      p = decode_part((*m)->data);
    whole = p.is_ok() && p->number == r.commit.number && p->index == i;
    if (whole)
      img.bytes += p->bytes;
  }
  if (!whole || img.bytes.size() != r.image->size || image_digest(img.bytes) != r.image->sha256) {
    diverged_.insert(name);
    return status::ok();
  }
  auto st = entity_store::install_image(opts_, r.key, img, false);
  if (st.code() == errc::corruption) {
    diverged_.insert(name);
    return status::ok();
  }
  if (!st)
    return st;
  created_ = true;
  touched_.insert(name);
  diverged_.erase(name); // the image is the whole entity: whatever its copy missed is in it
  awaiting_.erase(name);
  ++images_;
  return status::ok();
}

status log_applier::close_some() {
  // One syncfs of the file system of the copies for everything written since the last one
  // (new files, their directories, their WALs): a rebuild creates thousands of files, and a
  // sync of each (about five per new file) would bound it at a few hundred files a second.
  // Linux reports a writeback error of any file of the file system to syncfs (5.8 and later).
  if (!open_.empty() || created_) {
    int fd = ::open(opts_.data_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      return {errc::io_error, "open " + opts_.data_dir.string() + ": " + std::strerror(errno)};
    int e = ::syncfs(fd) == 0 ? 0 : errno;
    ::close(fd);
    if (e != 0)
      return {errc::io_error, "syncfs " + opts_.data_dir.string() + ": " + std::strerror(e)};
  }
  created_ = false;
  open_.clear();
  return status::ok();
}

status log_applier::finish() {
  if (auto st = close_some(); !st)
    return st;
  touched_.clear();
  return status::ok();
}

// -- whole shards and entities ------------------------------------------------------------------

namespace {

/// Reads image parts of shard k's log.
log_applier::part_reader parts_of(log_connection& c, uint32_t k) {
  return [&c, k](uint64_t seq) { return c.get(k, seq); };
}

/// Gives `a` shard k's messages from sequence `from` to the log's end, then syncs what it wrote.
status apply_from(log_connection& c, uint32_t k, uint64_t from, log_applier& a) {
  status failed;
  auto st = c.read(k, from, 0, [&](const log_message& m) {
    failed = a.take(m);
    return failed.is_ok();
  });
  if (!failed)
    return failed;
  if (!st)
    return st;
  return a.finish();
}

} // namespace

result<follow_state> apply_shard(log_connection& c, uint32_t k, const store_options& opts,
                                 const fs::path& state_file) {
  auto start = load_follow_state(state_file);
  if (!start)
    return start.error();
  // Messages after start->applied may be gone: an entity's records before its latest image
  // head (which comes later and holds them), and image parts. Nothing else leaves the log.
  log_applier a(opts, *start, std::nullopt, parts_of(c, k));
  if (auto st = apply_from(c, k, start->applied + 1, a); !st)
    return st;
  auto unfinished = a.diverged();
  unfinished.insert(a.awaiting_image().begin(), a.awaiting_image().end());
  for (auto& name : unfinished) {
    auto key = entity_key::parse(name);
    if (!key)
      return key.error();
    if (auto rb = rebuild_entity(c, k, *key, opts); !rb)
      return rb;
  }
  if (auto sv = save_follow_state(state_file, a.state()); !sv)
    return sv;
  return a.state();
}

namespace {

/// One attempt of rebuild_entity; `again` when an image replaced the one it read meanwhile.
status rebuild_once(log_connection& c, uint32_t k, const entity_key& key, const store_options& opts,
                    bool& again);

} // namespace

status rebuild_entity(log_connection& c, uint32_t k, const entity_key& key,
                      const store_options& opts) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    bool again = false;
    auto st = rebuild_once(c, k, key, opts, again);
    if (!again)
      return st;
  }
  return {errc::unavailable, "entity " + key.to_string() + " of shard " + std::to_string(k) +
                               ": its images were replaced faster than it could be read"};
}

namespace {

status rebuild_once(log_connection& c, uint32_t k, const entity_key& key, const store_options& opts,
                    bool& again) {
  // Built aside, under a data directory of its own beside the live one, and put in place only
  // once the whole log was read: a read that fails leaves the entity's files as they were.
  auto aside = opts;
  aside.data_dir = opts.data_dir.parent_path() /
                   (opts.data_dir.filename().string() + ".rebuild-" + time_ordered_id("", 8));
  aside.wal_kept_on_close_kib = 0; // closed checkpointed: one file to move
  struct cleanup {
    fs::path dir;
    ~cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } tmp{aside.data_dir};
  log_applier a(aside, follow_state{}, key, parts_of(c, k));
  if (auto st = apply_from(c, k, 1, a); !st)
    return st;
  if (!a.diverged().empty())
    return {errc::corruption, "the log of shard " + std::to_string(k) + " cannot rebuild entity " +
                                key.to_string() + ": its records do not follow each other"};
  if (!a.awaiting_image().empty()) {
    again = true;
    return status::ok();
  }
  if (auto rm = remove_entity(key, opts); !rm)
    return rm;
  auto built = key.file_path(aside.data_dir);
  std::error_code ec;
  if (!fs::exists(built, ec))
    return status::ok(); // the log has no commit of it: no entity
  auto to = key.file_path(opts.data_dir);
  fs::create_directories(to.parent_path(), ec);
  fs::rename(built, to, ec);
  if (ec)
    return {errc::io_error,
            "rename " + built.string() + " to " + to.string() + ": " + ec.message()};
  if (int e = sync_path(to.parent_path(), O_RDONLY | O_DIRECTORY); e != 0)
    return {errc::io_error, "sync " + to.parent_path().string() + ": " + std::strerror(e)};
  return status::ok();
}

} // namespace

} // namespace factum::replication
