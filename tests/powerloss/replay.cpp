// replay.cpp: rebuilds the tree a power cut could leave (replay.hpp). One thread.
#include "replay.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <vector>

#include "write_log.hpp"

namespace fs = std::filesystem;

namespace factum::powerloss {

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw std::runtime_error("replay: cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct record {
  record_header h;
  std::string path;
  std::string_view data;
};

// The syncs of one file (or directory) that returned 0, and its writeback errors, by seq. A
// change of a file's bytes at seq i is on disk when a sync began after it and returned before
// the first writeback error after it (if any): Linux marks the pages of a failed writeback
// clean, so no later sync writes them (write_log.hpp, op::write_error). A name in a directory
// needs only the sync: what a file system does with the entries of a directory whose fsync
// failed is its own (they are metadata, not pages of the directory), and is not modelled.
struct sync_history {
  std::vector<std::pair<uint64_t, uint64_t>> good; // (begin, end), sorted by begin
  std::vector<uint64_t> min_end;                   // min_end[k]: the least end of good[k..]
  std::vector<uint64_t> errors;                    // ascending

  void prepare() {
    std::sort(good.begin(), good.end());
    min_end.assign(good.size(), 0);
    uint64_t m = UINT64_MAX;
    for (size_t k = good.size(); k-- > 0;)
      min_end[k] = m = std::min(m, good[k].second);
  }
  // 1 kept, 0 lost, -1 lost to a writeback error only (never with !data).
  int covers(uint64_t seq, bool data) const {
    auto g =
      std::upper_bound(good.begin(), good.end(), std::pair<uint64_t, uint64_t>{seq, UINT64_MAX});
    if (g == good.end())
      return 0;
    auto e = std::upper_bound(errors.begin(), errors.end(), seq);
    uint64_t limit = e == errors.end() || !data ? UINT64_MAX : *e;
    return min_end[static_cast<size_t>(g - good.begin())] < limit ? 1 : -1;
  }
};

std::string root_string(const fs::path& root) {
  auto s = root.lexically_normal().string();
  if (!s.empty() && s.back() == '/')
    s.pop_back();
  return s;
}

// The records of a log's bytes (views into them), up to a record the kill cut short.
std::vector<record> parse(const std::string& bytes, bool& torn_tail) {
  std::vector<record> recs;
  for (size_t pos = 0; pos < bytes.size();) {
    record r;
    if (bytes.size() - pos < sizeof r.h) {
      torn_tail = true;
      break;
    }
    std::memcpy(&r.h, bytes.data() + pos, sizeof r.h);
    if (r.h.magic != record_header{}.magic)
      throw std::runtime_error("replay: bad record at byte " + std::to_string(pos));
    size_t need = sizeof r.h + r.h.path_len + r.h.data_len;
    if (bytes.size() - pos < need) {
      torn_tail = true;
      break;
    }
    r.path.assign(bytes.data() + pos + sizeof r.h, r.h.path_len);
    r.data = std::string_view(bytes.data() + pos + sizeof r.h + r.h.path_len, r.h.data_len);
    recs.push_back(std::move(r));
    pos += need;
  }
  return recs;
}

} // namespace

std::vector<logged_name> logged_names(const fs::path& log) {
  const std::string bytes = read_all(log);
  bool torn = false;
  std::vector<logged_name> out;
  for (auto& r : parse(bytes, torn)) {
    auto kind = static_cast<op>(r.h.kind);
    if (kind == op::add_name || kind == op::drop_name || kind == op::injected)
      out.push_back({kind, r.path});
  }
  return out;
}

snapshot take_snapshot(const fs::path& root) {
  snapshot s;
  struct stat st {};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error("snapshot: not a directory: " + root.string());
  s.names[""] = {st.st_ino, true};
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    auto rel = fs::relative(it->path(), root).string();
    if (::lstat(it->path().c_str(), &st) != 0)
      throw std::runtime_error("snapshot: cannot stat " + it->path().string());
    if (S_ISDIR(st.st_mode)) {
      s.names[rel] = {st.st_ino, true};
    } else if (S_ISREG(st.st_mode)) {
      s.names[rel] = {st.st_ino, false};
      if (!s.content.count(st.st_ino))
        s.content[st.st_ino] = read_all(it->path());
    } else {
      throw std::runtime_error("snapshot: neither file nor directory: " + it->path().string());
    }
  }
  return s;
}

replay_stats rebuild(const snapshot& base, const fs::path& root, const fs::path& log,
                     const fs::path& out, bool everything, uint32_t torn_seed) {
  replay_stats stats;
  const std::string bytes = read_all(log);
  auto recs = parse(bytes, stats.torn_tail);
  stats.records = recs.size();

  // Inode numbers are reused once a file is gone; the model names each file by an identity of
  // its own, given when its inode appears (base) or is created (add_name of a new inode).
  uint64_t next_id = 1;
  std::map<uint64_t, uint64_t> current; // inode -> identity now
  auto id_of = [&](uint64_t ino) {
    auto [it, fresh] = current.try_emplace(ino, 0);
    if (fresh)
      it->second = next_id++;
    return it->second;
  };
  std::map<std::string, snapshot::entry> names; // relative path -> {identity, dir}
  std::map<uint64_t, std::string> content;      // identity -> bytes on disk
  for (auto& [rel, e] : base.names) {
    auto id = id_of(e.ino);
    names[rel] = {id, e.dir};
    if (!e.dir) {
      auto c = base.content.find(e.ino);
      content[id] = c == base.content.end() ? std::string() : c->second;
    }
  }
  std::vector<uint64_t> id(recs.size()), dir_id(recs.size());
  std::map<uint64_t, sync_history> history; // identity -> its syncs and writeback errors
  for (size_t i = 0; i < recs.size(); ++i) {
    auto& h = recs[i].h;
    auto kind = static_cast<op>(h.kind);
    if (kind == op::add_name && h.offset == 1)
      current[h.ino] = next_id++;
    if (kind != op::drop_name && kind != op::injected)
      id[i] = id_of(h.ino);
    if (h.dir && kind != op::injected)
      dir_id[i] = id_of(h.dir);
    if (kind == op::sync_end || kind == op::sync_failed) {
      if (h.offset >= i || static_cast<op>(recs[h.offset].h.kind) != op::sync_begin)
        throw std::runtime_error("replay: a sync's end without its sync_begin");
      if (kind == op::sync_end)
        history[id[h.offset]].good.push_back({h.offset, i});
      else
        ++stats.failed_syncs;
    }
    if (kind == op::write_error) {
      history[id[i]].errors.push_back(i);
      ++stats.write_errors;
    }
    if (kind == op::injected)
      ++stats.injected;
  }
  for (auto& [_, h] : history)
    h.prepare();
  // 1: the change at `seq` of `who` (its bytes: `data`, else a name in it) is on disk; 0: lost;
  // -1: lost to a writeback error (a sync began after it and returned, but no sync that did so
  // had returned by the error).
  auto covered = [&](uint64_t who, size_t seq, bool data) {
    if (everything)
      return 1;
    auto it = history.find(who);
    return it == history.end() ? 0 : it->second.covers(seq, data);
  };
  const std::string prefix = root_string(root) + "/";
  auto relative = [&](const std::string& abs) {
    if (abs.compare(0, prefix.size(), prefix) != 0)
      throw std::runtime_error("replay: a name outside the root: " + abs);
    return abs.substr(prefix.size());
  };
  std::mt19937 rng(torn_seed);
  auto coin = [&] { return torn_seed != 0 && (rng() & 1) != 0; };
  for (size_t i = 0; i < recs.size(); ++i) {
    auto& r = recs[i];
    switch (static_cast<op>(r.h.kind)) {
    case op::write:
    case op::zeros:
    case op::truncate: {
      int cover = covered(id[i], i, true);
      bool kept = cover > 0;
      stats.lost_to_errors += cover < 0;
      if (!kept && torn_seed != 0 && static_cast<op>(r.h.kind) != op::truncate) {
        // Torn: each 512-byte piece (aligned in the file) on disk or not, on its own.
        auto& c = content[id[i]];
        for (uint64_t at = r.h.offset; at < r.h.offset + r.h.len;) {
          uint64_t end = std::min(r.h.offset + r.h.len, (at / 512 + 1) * 512);
          if (coin()) {
            if (c.size() < end)
              c.resize(end);
            if (static_cast<op>(r.h.kind) == op::write)
              c.replace(at, end - at, r.data.substr(at - r.h.offset, end - at));
            else
              c.replace(at, end - at, std::string(end - at, '\0'));
            ++stats.torn_pieces;
          }
          at = end;
        }
      }
      if (!kept && !(static_cast<op>(r.h.kind) == op::truncate && coin())) {
        ++stats.lost_writes;
        break;
      }
      ++stats.kept_writes;
      auto& c = content[id[i]];
      if (static_cast<op>(r.h.kind) == op::truncate) {
        c.resize(r.h.offset);
        break;
      }
      if (c.size() < r.h.offset + r.h.len)
        c.resize(r.h.offset + r.h.len);
      if (static_cast<op>(r.h.kind) == op::write)
        c.replace(r.h.offset, r.h.len, r.data);
      else
        c.replace(r.h.offset, r.h.len, std::string(r.h.len, '\0'));
      break;
    }
    case op::add_name:
    case op::drop_name: {
      if (!covered(dir_id[i], i, false) && !coin()) {
        ++stats.lost_names;
        break;
      }
      ++stats.kept_names;
      auto rel = relative(r.path);
      if (static_cast<op>(r.h.kind) == op::add_name)
        names[rel] = {id[i], r.h.len == 1};
      else
        names.erase(rel);
      break;
    }
    case op::sync_begin:
    case op::sync_end:
    case op::sync_failed:
    case op::write_error:
    case op::injected: break;
    default: throw std::runtime_error("replay: unknown record kind " + std::to_string(r.h.kind));
    }
  }

  // Write the tree out, parents first (a map orders "a" before "a/b"). A name whose directory
  // did not survive is unreachable and left out; two names of one file become hard links.
  fs::create_directory(out);
  std::map<uint64_t, fs::path> written;
  for (auto& [rel, e] : names) {
    if (rel.empty())
      continue;
    auto parent = fs::path(rel).parent_path().string();
    auto p = names.find(parent);
    if (p == names.end() || !p->second.dir || !fs::is_directory(out / parent))
      continue;
    auto target = out / rel;
    if (e.dir) {
      fs::create_directory(target);
      continue;
    }
    if (auto w = written.find(e.ino); w != written.end()) {
      fs::create_hard_link(w->second, target);
      continue;
    }
    std::ofstream f(target, std::ios::binary | std::ios::trunc);
    auto& c = content[e.ino];
    f.write(c.data(), static_cast<std::streamsize>(c.size()));
    if (!f)
      throw std::runtime_error("replay: cannot write " + target.string());
    written[e.ino] = target;
  }
  return stats;
}

} // namespace factum::powerloss
