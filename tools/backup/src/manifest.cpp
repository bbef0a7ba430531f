// manifest.cpp: a backup's manifest (read, validated, written atomically) and the file steps
// backup and restore share: streamed SHA-256, copies that checksum what they write, syncs,
// path checks. Stateless; the one thread that runs a subcommand.
#include "manifest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/sha256.hpp"

namespace fs = std::filesystem;

namespace factum::tools::backup {

namespace {

// -- helpers ------------------------------------------------------------------------------------

status os_error(const std::string& what, const fs::path& p, int e) {
  return {errc::io_error, what + " " + p.string() + ": " + std::strerror(e)};
}

/// Closes a descriptor at scope exit.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

bool is_hex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

nlohmann::json sum_json(const file_sum& s) {
  return {{"bytes", s.bytes}, {"sha256", s.sha256}};
}

file_sum sum_of(const nlohmann::json& j) {
  file_sum s;
  s.bytes = j.at("bytes").get<uint64_t>();
  s.sha256 = j.at("sha256").get<std::string>();
  if (!is_hex64(s.sha256))
    throw std::invalid_argument("sha256 is not 64 lowercase hex digits");
  return s;
}

manifest_entity entity_of(const nlohmann::json& j) {
  manifest_entity e;
  auto k = entity_key::make(j.at("tenant").get<std::string>(), j.at("type").get<std::string>(),
                            j.at("id").get<std::string>());
  if (!k)
    throw std::invalid_argument(k.error().message());
  e.key = *k;
  e.file = j.at("file").get<std::string>();
  // The file is where the key's digest puts it, never a path the manifest chose.
  if (fs::path(e.file) != e.key.file_path("").relative_path())
    throw std::invalid_argument("entity " + e.key.to_string() + ": file " + e.file +
                                " is not the key's path");
  e.last_seq = j.at("last_seq").get<int64_t>();
  e.head = j.at("head").get<std::string>();
  if (!is_hex64(e.head) || e.last_seq < 0)
    throw std::invalid_argument("entity " + e.key.to_string() + ": bad last_seq or head");
  e.db = sum_of(j.at("db"));
  if (j.contains("wal") && !j.at("wal").is_null())
    e.wal = sum_of(j.at("wal"));
  e.wal_end = j.value("wal_end", int64_t{0});
  e.source_db_bytes = j.value("source_db_bytes", uint64_t{0});
  e.source_db_mtime_ns = j.value("source_db_mtime_ns", int64_t{0});
  return e;
}

} // namespace

// -- layout -------------------------------------------------------------------------------------

std::string generation_dir(int64_t generation) {
  auto n = std::to_string(generation);
  return "gen-" + std::string(n.size() < 6 ? 6 - n.size() : 0, '0') + n;
}

bool is_generation_dir(const std::string& name) {
  return name.size() > 4 && name.rfind("gen-", 0) == 0 &&
         name.find_first_not_of("0123456789", 4) == std::string::npos;
}

// -- the manifest -------------------------------------------------------------------------------

result<manifest> read_manifest(const fs::path& dest) {
  auto path = dest / manifest_name;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return status{errc::not_found, "no " + std::string(manifest_name) + " in " + dest.string()};
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return status{errc::io_error, "cannot read " + path.string()};
  std::stringstream text;
  text << in.rdbuf();
  auto not_backup = [&](const std::string& why) {
    return status{errc::invalid_argument,
                  path.string() + " is not a factum backup manifest: " + why};
  };
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return not_backup("not a JSON object");
  if (j.value("format", std::string()) != manifest_format)
    return not_backup("its \"format\" is not \"" + std::string(manifest_format) + "\"");
  try {
    manifest m;
    m.version = j.at("version").get<int>();
    if (m.version != manifest_version)
      return not_backup("version " + std::to_string(m.version) + " (this build reads " +
                        std::to_string(manifest_version) + ")");
    m.generation = j.at("generation").get<int64_t>();
    if (m.generation < 1)
      return not_backup("generation must be at least 1");
    m.started_ms = j.at("started_ms").get<int64_t>();
    m.finished_ms = j.at("finished_ms").get<int64_t>();
    m.source = j.value("source", std::string());
    m.bytes_copied = j.value("bytes_copied", uint64_t{0});
    for (auto& e : j.at("entities"))
      m.entities.push_back(entity_of(e));
    return m;
  } catch (const std::exception& e) {
    return not_backup(e.what());
  }
}

status write_manifest(const fs::path& dest, const manifest& m) {
  nlohmann::json j = {{"format", manifest_format},     {"version", m.version},
                      {"generation", m.generation},    {"started_ms", m.started_ms},
                      {"finished_ms", m.finished_ms},  {"source", m.source},
                      {"bytes_copied", m.bytes_copied}};
  auto& list = j["entities"] = nlohmann::json::array();
  for (auto& e : m.entities) {
    nlohmann::json x = {{"tenant", e.key.tenant},
                        {"type", e.key.type},
                        {"id", e.key.id},
                        {"key", e.key.to_string()},
                        {"file", e.file},
                        {"last_seq", e.last_seq},
                        {"head", e.head},
                        {"db", sum_json(e.db)},
                        {"wal", e.wal ? sum_json(*e.wal) : nlohmann::json(nullptr)},
                        {"wal_end", e.wal_end},
                        {"source_db_bytes", e.source_db_bytes},
                        {"source_db_mtime_ns", e.source_db_mtime_ns}};
    list.push_back(std::move(x));
  }
  auto text = j.dump(1) + "\n";
  auto tmp = dest / (std::string(manifest_name) + ".tmp");
  auto path = dest / manifest_name;
  {
    fd_guard fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (fd.fd < 0)
      return os_error("cannot create", tmp, errno);
    for (size_t off = 0; off < text.size();) {
      ssize_t n = ::write(fd.fd, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return os_error("cannot write", tmp, n < 0 ? errno : EIO);
      off += static_cast<size_t>(n);
    }
    if (::fsync(fd.fd) != 0)
      return os_error("cannot sync", tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return os_error("cannot rename to", path, errno);
  return sync_dir(dest);
}

// -- files --------------------------------------------------------------------------------------

namespace {

/// Reads `from` once, summing it, and writes each block to `out` too when it is open (`to` names
/// it in messages).
result<file_sum> read_summing(const fs::path& from, int out, const fs::path& to) {
  fd_guard in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0)
    return os_error("cannot open", from, errno);
  sha256_stream h;
  file_sum s;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return os_error("cannot read", from, errno);
    if (n == 0)
      break;
    h.update({buf.data(), static_cast<size_t>(n)});
    s.bytes += static_cast<uint64_t>(n);
    for (ssize_t off = 0; out >= 0 && off < n;) {
      ssize_t w = ::write(out, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return os_error("cannot write", to, w < 0 ? errno : EIO);
      off += w;
    }
  }
  s.sha256 = h.hex();
  return s;
}

} // namespace

result<file_sum> sum_file(const fs::path& file) {
  return read_summing(file, -1, {});
}

result<file_sum> copy_and_sum(const fs::path& from, const fs::path& to) {
  fd_guard out{::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (out.fd < 0)
    return os_error("cannot create", to, errno);
  return read_summing(from, out.fd, to);
}

status sync_dir(const fs::path& dir) {
  fd_guard fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (fd.fd < 0)
    return os_error("cannot open", dir, errno);
  if (::fsync(fd.fd) != 0)
    return os_error("cannot sync", dir, errno);
  return status::ok();
}

status durable_batch::add_file(const fs::path& file) {
  fd_guard fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0)
    return os_error("cannot open", file, errno);
  ::sync_file_range(fd.fd, 0, 0, SYNC_FILE_RANGE_WRITE); // a hint: sync() checks
  files_.push_back(file);
  return status::ok();
}

status durable_batch::sync() {
  for (auto& f : files_) {
    fd_guard fd{::open(f.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0)
      return os_error("cannot open", f, errno);
    if (::fdatasync(fd.fd) != 0)
      return os_error("cannot sync", f, errno);
  }
  std::sort(dirs_.begin(), dirs_.end());
  dirs_.erase(std::unique(dirs_.begin(), dirs_.end()), dirs_.end());
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) // a child sorts after its parent
    if (auto st = sync_dir(*it); !st)
      return st;
  files_.clear();
  dirs_.clear();
  return status::ok();
}

// -- paths --------------------------------------------------------------------------------------

fs::path normal_path(const fs::path& p) {
  std::error_code ec;
  auto abs = fs::absolute(p, ec);
  auto n = fs::weakly_canonical(ec ? p : abs, ec);
  auto out = (ec ? abs : n).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path())
    out = out.parent_path(); // "/a/b/" is "/a/b"
  return out;
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

} // namespace factum::tools::backup
