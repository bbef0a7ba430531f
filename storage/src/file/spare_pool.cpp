// spare_pool.cpp: entity files made ahead of need (spare_pool.hpp). The maker thread owns the
// writing of spares; take() / put_back() / stop() / get_stats() run on any thread under mu_.
#include "factum/storage/spare_pool.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "file/file_io.hpp"
#include "store/entity_image.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace {

using detail::with_suffix;

/// A spare's empty companions, made with it and moved with it.
constexpr const char* companions[] = {"-wal", "-shm"};

bool make_shards(const fs::path& data_dir);

// Whether `file` holds exactly `image` (a spare of this build).
bool same_bytes(const fs::path& file, const std::string& image) {
  std::error_code ec;
  if (fs::file_size(file, ec) != image.size() || ec)
    return false;
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.good() || in.eof() ? bytes == image : false;
}

// Whether `file` has exactly one name. A spare always has: a second name means that a crash
// kept both names of a rename out of spares/ (possible where renames are not atomic on disk,
// as on ext4 without a journal after e2fsck), so that an entity owns its inode.
bool single_link(const fs::path& file) {
  struct stat st {};
  return ::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1;
}

} // namespace

result<std::shared_ptr<spare_pool>> spare_pool::start(const fs::path& data_dir, int target,
                                                      int page_size, const fs::path& entity_root) {
  if (data_dir.empty())
    return status{errc::invalid_argument, "spare_pool: data_dir is empty"};
  if (target < 1 || target > 1024)
    return status{errc::invalid_argument, "spare_pool: target must be 1..1024"};
  auto image = detail::unclaimed_entity_image(page_size);
  if (!image)
    return image.error();
  auto dir =
    data_dir / (page_size == 4096 ? std::string("spares") : "spares-" + std::to_string(page_size));
  std::error_code ec;
  fs::create_directories(dir / "making", ec);
  if (ec)
    return status{errc::io_error,
                  "spare_pool: cannot create " + dir.string() + ": " + ec.message()};
  std::shared_ptr<spare_pool> pool(
    new spare_pool(dir, entity_root.empty() ? data_dir : entity_root, target, page_size));
  // Keep what an earlier process finished (renamed to .db only after its fdatasync, its empty
  // -wal and -shm made before that) if it is this build's image and nothing wrote beside it;
  // delete the rest (a .tmp was cut short; another build's bytes would give a file of another
  // schema; a -wal or -shm with content, or a -journal, means something opened it here; spares
  // beyond the target are not needed; a -wal or -shm whose .db is gone is an orphan).
  std::vector<fs::path> found;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec))
      found.push_back(it->path());
  if (ec)
    return status{errc::io_error, "spare_pool: cannot list " + dir.string() + ": " + ec.message()};
  auto empty_or_absent = [](const fs::path& p) {
    std::error_code e2;
    auto size = fs::file_size(p, e2);
    return e2 ? !fs::exists(p, e2) : size == 0 && single_link(p);
  };
  auto whole = [&](const fs::path& db) {
    std::error_code e2;
    return single_link(db) && same_bytes(db, *image) &&
           empty_or_absent(with_suffix(db, companions[0])) &&
           empty_or_absent(with_suffix(db, companions[1])) &&
           !fs::exists(with_suffix(db, "-journal"), e2);
  };
  auto& kept = pool->spares_;
  std::vector<fs::path> drop;
  for (auto& p : found) {
    if (p.extension() != ".db")
      continue;
    if (static_cast<int>(kept.size()) < target && whole(p))
      kept.push_back(p);
    else
      drop.push_back(p);
  }
  for (auto& p : found) {
    auto ext = p.extension();
    bool companion = ext == ".db-wal" || ext == ".db-shm";
    auto db = fs::path(p).replace_extension(".db");
    if (ext == ".tmp" || ext == ".db-journal" ||
        (companion && std::find(kept.begin(), kept.end(), db) == kept.end()))
      drop.push_back(p);
  }
  // making/ holds only what the maker had not finished.
  for (auto it = fs::directory_iterator(dir / "making", ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    drop.push_back(it->path());
  for (auto& p : drop) {
    fs::remove(p, ec); // a name only: an entity that shares the inode keeps its own
    ++pool->stats_.discarded;
  }
  pool->stats_.reused = static_cast<int64_t>(pool->spares_.size());
  pool->maker_ = std::thread([p = pool.get()] { p->run(); });
  return pool;
}

spare_pool::spare_pool(fs::path dir, fs::path entity_root, int target, int page_size)
    : dir_(std::move(dir)), making_(dir_ / "making"), entity_root_(std::move(entity_root)),
      target_(target), page_size_(page_size) {}

spare_pool::~spare_pool() {
  stop();
}

std::optional<fs::path> spare_pool::take() {
  std::lock_guard<std::mutex> g(mu_);
  if (spares_.empty()) {
    ++stats_.missed;
    return std::nullopt;
  }
  auto p = std::move(spares_.front());
  spares_.pop_front();
  ++stats_.taken;
  wake_.notify_one();
  return p;
}

void spare_pool::put_back(fs::path spare) {
  std::lock_guard<std::mutex> g(mu_);
  --stats_.taken;
  spares_.push_front(std::move(spare));
  ready_.notify_all();
}

spare_pool::placed spare_pool::place(const fs::path& db) {
  auto spare = take();
  if (!spare)
    return placed::none;
  auto rename = [](const fs::path& from, const fs::path& to) {
    return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0 ? 0
                                                                                            : errno;
  };
  int e = rename(*spare, db);
  if (e == EEXIST) {
    put_back(std::move(*spare));
    return placed::existing;
  }
  std::error_code ec;
  if (e != 0) { // e.g. EXDEV (entities/ on another file system)
    fs::remove(*spare, ec);
    for (const char* suffix : companions)
      fs::remove(with_suffix(*spare, suffix), ec);
    return placed::none;
  }
  for (const char* suffix : companions)
    if (rename(with_suffix(*spare, suffix), with_suffix(db, suffix)) != 0)
      fs::remove(with_suffix(*spare, suffix), ec);
  return placed::spare;
}

void spare_pool::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  ready_.notify_all();
  if (maker_.joinable() && maker_.get_id() != std::this_thread::get_id())
    maker_.join();
}

int spare_pool::wait_ready(int n, std::chrono::milliseconds timeout) {
  return wait_stats([n](const stats& s) { return s.ready >= n; }, timeout).ready;
}

spare_pool::stats spare_pool::wait_stats(const std::function<bool(const stats&)>& until,
                                         std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> g(mu_);
  ready_.wait_for(g, timeout, [&] { return stopping_ || until(snapshot()); });
  return snapshot();
}

spare_pool::stats spare_pool::get_stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return snapshot();
}

spare_pool::stats spare_pool::snapshot() const {
  stats s = stats_;
  s.ready = static_cast<int>(spares_.size());
  return s;
}

namespace {

// Makes the 256 shard directories entities/00 .. entities/ff that are missing, and fsyncs
// their parents, so that no creation has to (entity_store::open makes a missing one itself).
// False when a directory sync failed: the caller tries again before it makes spares, which
// would otherwise go into directories whose names may not survive a power cut.
bool make_shards(const fs::path& data_dir) {
  auto root = data_dir / "entities";
  std::error_code ec;
  bool made_root = !fs::exists(root, ec) && fs::create_directory(root, ec);
  bool made_any = false;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 256; ++i) {
    char name[3] = {hex[i >> 4], hex[i & 15], '\0'};
    made_any |= fs::create_directory(root / name, ec); // false when it exists
  }
  if (made_any && detail::sync_dir(root) != 0)
    return false;
  if (made_root && detail::sync_dir(data_dir) != 0)
    return false;
  return true;
}

} // namespace

void spare_pool::run() {
  std::string image;
  std::unique_lock<std::mutex> g(mu_);
  // No spare goes into a shard directory whose name a power cut could take away.
  for (;;) {
    g.unlock();
    bool made = make_shards(entity_root_);
    g.lock();
    if (made)
      break;
    ++stats_.errors;
    ready_.notify_all();
    if (wake_.wait_for(g, std::chrono::seconds(1), [&] { return stopping_; }))
      return;
  }
  // Refills start once `step` spares are gone, not at the first: a batch of several files
  // costs the creations that run beside it less than as many batches of one (measured with
  // runtime_bench's creation workload).
  const int step = std::max(1, std::min(16, target_ / 2));
  for (;;) {
    wake_.wait(g, [&] { return stopping_ || static_cast<int>(spares_.size()) <= target_ - step; });
    if (stopping_)
      return;
    // Up to 16 at a time: written first, then synced, so that their metadata (inode table and
    // bitmap blocks, shared by neighbouring inodes) is written once for several files.
    int n = std::min(16, target_ - static_cast<int>(spares_.size()));
    g.unlock();
    auto st = make_batch(n, image);
    g.lock();
    if (!st) {
      ++stats_.errors;
      ready_.notify_all(); // wait_stats() callers watch the errors too
      // A full or read-only disk: try again later, not in a loop. Creations meanwhile build
      // their files themselves (and report the error themselves).
      wake_.wait_for(g, std::chrono::seconds(1), [&] { return stopping_; });
    }
  }
}

status spare_pool::make_batch(int n, std::string& image) {
  if (image.empty()) {
    auto img = detail::unclaimed_entity_image(page_size_);
    if (!img)
      return img.error();
    image = std::move(*img);
  }
  { // spares/ or making/ deleted under a running pool (by hand): made again
    std::error_code ec;
    if (!fs::is_directory(making_, ec) && !fs::create_directories(making_, ec))
      return {errc::io_error, "spare_pool: cannot create " + making_.string() +
                                (ec ? ": " + ec.message() : std::string(": not a directory"))};
  }
  struct pending {
    fs::path tmp;
    int fd = -1;
  };
  std::vector<pending> batch;
  batch.reserve(static_cast<size_t>(n));
  int err = 0;
  std::string what;
  for (int i = 0; i < n && err == 0; ++i) {
    pending p;
    p.tmp = making_ / (time_ordered_id("", 16) + ".tmp");
    p.fd = ::open(p.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (p.fd < 0) {
      err = errno;
      what = "create " + p.tmp.string();
      break;
    }
    batch.push_back(p);
    if ((err = detail::write_all(p.fd, image)) != 0)
      what = "write " + p.tmp.string();
  }
  // Start the write-out of every file of the batch before waiting for any: the fdatasyncs that
  // follow then find their data in flight together (16 files of 80 KiB here: ~270 us per file
  // in all, against ~620 us when each fdatasync starts its own write-out). A hint only: each
  // file's fdatasync still writes what it must and flushes the device.
  if (err == 0)
    for (auto& p : batch)
      (void)::sync_file_range(p.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  for (auto& p : batch) {
    if (err == 0 && ::fdatasync(p.fd) != 0) {
      err = errno;
      what = "fdatasync " + p.tmp.string();
    }
    ::close(p.fd);
  }
  std::vector<fs::path> made;
  for (auto& p : batch) {
    std::error_code ec;
    auto stem = p.tmp.stem().string() + ".db";
    // Its -wal and -shm, empty, go with it into place (entity_store::open renames all three):
    // creating them is an inode allocation each, the dearest part of a first open here. All
    // three are made in making/ and moved to spares/ when whole (the companions first), so
    // that the inode allocations hold making/'s lock, not the lock of spares/ that every
    // take's rename needs (a take waited on them in profiles).
    for (const char* suffix : companions) {
      if (err != 0)
        break;
      auto companion = making_ / (stem + suffix);
      int fd = ::open(companion.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) {
        err = errno;
        what = "create " + companion.string();
      } else {
        ::close(fd);
      }
    }
    const char* moves[] = {companions[0], companions[1], ""}; // the .db last
    for (const char* suffix : moves) {
      if (err != 0)
        break;
      auto from = *suffix ? making_ / (stem + suffix) : p.tmp;
      fs::rename(from, dir_ / (stem + suffix), ec);
      if (ec) {
        err = ec.value();
        what = "rename " + from.string();
      }
    }
    if (err == 0) {
      made.push_back(dir_ / stem);
      continue;
    }
    fs::remove(p.tmp, ec);
    for (const char* suffix : companions) {
      fs::remove(making_ / (stem + suffix), ec);
      fs::remove(dir_ / (stem + suffix), ec);
    }
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& p : made)
      spares_.push_back(std::move(p));
    stats_.made += static_cast<int64_t>(made.size());
  }
  ready_.notify_all();
  if (err != 0)
    return {detail::errno_code(err), "spare_pool: " + what + ": " + std::strerror(err)};
  return status::ok();
}

} // namespace factum
