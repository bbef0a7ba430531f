// tests/fuzz/entity_file_fuzz.cpp: entity files damaged on disk, read back. Two small valid
// entity files are built once with the storage API (facts, idempotency keys, alarms; 512-byte
// pages): one checkpointed (everything in the database file, an empty -wal) and one whose last
// commits are only in its -wal. The input picks one and describes mutations of it (the
// database header, any byte or page of the file, the -wal's header, frame headers and frame
// data, copies of pages and frames, truncations, a missing file, WAL checksums made valid
// again); the result is written into a scratch data directory and read two ways:
//   (a) entity_store::open_file read-only, then verify(), query(), get(), list_alarms() and the
//       other listings;
//   (b) what `factum inspect verify` runs (tools::run_verify, tools/inspect/src/data_cmd.cpp),
//       on the whole data directory or on the entity's key, in JSON lines or as a table.
// Properties: every call gives a clear error (a code and a message) or a result, never a crash,
// hang or sanitizer report; a verify report is consistent with itself; when verify() says ok,
// the facts every query and get() shows form the chain it checked (contiguous seqs from 1,
// prev_hash links, recomputed hashes) and the chain head the open loaded is its last fact; and
// inspect's verdict, exit code and counts agree with (a)'s, since both read the same bytes.
// Single-threaded (one libFuzzer thread; the scratch directory is this process's own).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "commands.hpp"
#include "factum/storage/entity_store.hpp"
#include "fuzz_check.hpp"

namespace fs = std::filesystem;
using namespace factum;

namespace {

constexpr int page = 512;             ///< page size of the seed files (small files, fast runs)
constexpr size_t frame = 24 + page;   ///< one WAL frame: header and page
constexpr size_t max_mutations = 32;  ///< the rest of a longer input is ignored
constexpr size_t max_run = 16;        ///< bytes one run mutation writes
constexpr size_t max_wal_frames = 64; ///< copies append frames up to this many
const std::string genesis(64, '0');   ///< prev_hash of seq 1 (docs/storage-format.md)

// -- the seed files ------------------------------------------------------------------------------

/// The files of one entity as bytes; a file that is absent has `has_*` false.
struct image {
  std::string db, wal;
  bool has_db = true, has_wal = true;
};

struct fixture {
  fs::path root; ///< this process's scratch directory (removed at exit)
  fs::path data; ///< root/data: the data directory the mutated files are written into
  entity_key key;
  fs::path db_path;
  image checkpointed; ///< every commit in the database file; its -wal empty
  image with_wal;     ///< the last commits only in the -wal
};

/// The bytes of the file at `p` (empty when it cannot be read).
std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The entity file `db` and its -wal as they are on disk.
image read_image(const fs::path& db) {
  image im;
  auto wal = fs::path(db.string() + "-wal");
  im.db = read_all(db);
  im.has_wal = fs::exists(wal);
  if (im.has_wal)
    im.wal = read_all(wal);
  return im;
}

/// Building the seed files must work: a failure here is the harness's, reported as such.
void must(const status& st, const char* what) {
  FUZZ_CHECK(st.is_ok(), std::string(what) + ": " + st.to_string());
}

/// The i-th fact of the seed files: every kind of field, some absent.
fact_draft draft(int i) {
  fact_draft d;
  d.type = i % 2 ? "invocation" : "outcome";
  d.subtype = i % 3 ? "charge" : "";
  d.timestamp_ms = 1'700'000'000'000 + i * 1000;
  d.trace_id = "trace-" + std::to_string(i);
  d.tool_id = i % 2 ? "vendor" : "";
  d.idempotency_key = "k-" + std::to_string(i);
  if (i % 3 == 0) {
    d.amount = "0.25";
    d.currency = "USD";
  }
  d.data = {{"n", i}, {"text", "caf\xc3\xa9"}, {"list", {1, 2, 3}}};
  return d;
}

/// Builds both seed images in root/seed with the storage API.
void build_images(fixture& fx) {
  store_options o;
  o.data_dir = fx.root / "seed";
  o.mode = durability::normal;
  o.page_size = page;
  o.wal_grow_kib = 0;
  o.wal_kept_on_close_kib = 0; // the close checkpoints: everything in the database file
  int64_t now = 1'700'000'100'000;
  {
    auto s = entity_store::open(o, fx.key);
    must(s.error(), "seed open");
    auto& st = **s;
    for (int i = 1; i <= 3; ++i)
      must(st.append(draft(i)).error(), "seed append");
    must(st.record_key("k-1", key_status::completed, "fp-1", R"({"ok":true})", 0, now), "seed key");
    must(st.set_alarm({"retry", now + 60'000, R"({"attempt":1})", 0, now}), "seed alarm");
    must(st.commit(), "seed commit");
  }
  auto file = fx.key.file_path(o.data_dir);
  fx.checkpointed = read_image(file);
  o.wal_kept_on_close_kib = 256; // the close keeps the -wal with its frames
  {
    auto s = entity_store::open(o, fx.key);
    must(s.error(), "seed reopen");
    auto& st = **s;
    must(st.append_many({draft(4), draft(5)}).error(), "seed append");
    must(st.commit(), "seed commit");
    must(st.set_alarm({"reminder", now + 1000, "{}", 2, now}), "seed alarm");
    must(st.record_key("k-2", key_status::failed, "fp-2", R"({"code":"X"})", 3'600'000, now),
         "seed key");
    must(st.commit(), "seed commit");
    must(st.append(draft(6)).error(), "seed append");
    must(st.commit(), "seed commit");
  }
  fx.with_wal = read_image(file);
  FUZZ_CHECK(fx.checkpointed.has_wal && fx.checkpointed.wal.empty() && fx.with_wal.has_wal &&
               fx.with_wal.wal.size() > 32 + frame,
             "seed files: " + std::to_string(fx.checkpointed.wal.size()) + " and " +
               std::to_string(fx.with_wal.wal.size()) + " bytes of -wal");
  fs::remove_all(o.data_dir);
}

/// The seed images as one file: four lengths (8 bytes each, this machine's byte order), then
/// the bytes.
std::string serialize(const fixture& fx) {
  std::string out;
  const std::string* parts[] = {&fx.checkpointed.db, &fx.checkpointed.wal, &fx.with_wal.db,
                                &fx.with_wal.wal};
  for (auto* p : parts) {
    uint64_t n = p->size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
  }
  for (auto* p : parts)
    out += *p;
  return out;
}

/// Reads serialize()'s file back into the seed images; false when it is not one.
bool deserialize(const std::string& in, fixture& fx) {
  std::string* parts[] = {&fx.checkpointed.db, &fx.checkpointed.wal, &fx.with_wal.db,
                          &fx.with_wal.wal};
  size_t at = 4 * sizeof(uint64_t);
  for (int i = 0; i < 4; ++i) {
    uint64_t n = 0;
    if (in.size() < at)
      return false;
    std::memcpy(&n, in.data() + i * sizeof n, sizeof n);
    if (n > in.size() - at)
      return false;
    parts[i]->assign(in, at, n);
    at += n;
  }
  return at == in.size() && !fx.checkpointed.db.empty() && !fx.with_wal.wal.empty();
}

/// Where this executable keeps its seed images: beside it, named by its size and time. The
/// store gives every new file a random fact id prefix and its creation time, so images built
/// in each process would differ in those bytes (and in every hash); kept, they are the same
/// for every run of this build, and an input that failed fails again on the same bytes. A
/// rebuild makes new ones. Empty when the executable cannot be found.
fs::path image_cache() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  struct stat st {};
  if (ec || ::stat(exe.c_str(), &st) != 0)
    return {};
  return exe.string() + ".seed-" + std::to_string(st.st_size) + "-" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

/// Loads the seed images from image_cache(), or builds them and stores them there (written
/// aside and renamed, so a process running beside this one reads all of them or none).
void load_images(fixture& fx) {
  auto cache = image_cache();
  if (!cache.empty() && deserialize(read_all(cache), fx))
    return;
  build_images(fx);
  if (cache.empty())
    return;
  auto tmp = fs::path(cache.string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << serialize(fx);
  }
  std::error_code ec;
  fs::rename(tmp, cache, ec);
  fs::remove(tmp, ec);
  // The images of earlier builds go.
  auto stem = cache.filename().string();
  stem = stem.substr(0, stem.find(".seed-") + 6);
  for (auto& e : fs::directory_iterator(cache.parent_path(), ec))
    if (auto name = e.path().filename().string(); name.rfind(stem, 0) == 0 && e.path() != cache)
      fs::remove(e.path(), ec);
}

/// The scratch directory and the seed images, made at the first input of the process.
const fixture& the_fixture() {
  static fixture* fx = [] {
    auto* f = new fixture;
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                      ? fs::path("/dev/shm")
                      : fs::temp_directory_path();
    std::string tmpl = (base / "factum-entity-file-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp " + tmpl);
    f->root = tmpl;
    // inspect's private copies (entity_reader) go below the scratch directory too.
    fs::create_directories(f->root / "tmp");
    ::setenv("TMPDIR", (f->root / "tmp").c_str(), 1);
    static fs::path cleanup = f->root;
    std::atexit([] {
      std::error_code e;
      fs::remove_all(cleanup, e);
    });
    f->data = f->root / "data";
    f->key = entity_key::make("acme", "ledger", "fuzz-1").value();
    f->db_path = f->key.file_path(f->data);
    load_images(*f);
    return f;
  }();
  return *fx;
}

// -- the mutations -------------------------------------------------------------------------------

/// Reads the input front to back; past its end every read is 0 and done() is true.
class input {
 public:
  input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool done() const { return i_ >= n_; }
  uint8_t byte() { return i_ < n_ ? p_[i_++] : 0; }
  /// Big-endian integers of 2, 3 and 4 bytes (each byte read in turn: the operands of `|`
  /// are not sequenced).
  uint32_t u16() { return bytes(2); }
  uint32_t u24() { return bytes(3); }
  uint32_t u32() { return bytes(4); }

 private:
  uint32_t bytes(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i)
      v = v << 8 | byte();
    return v;
  }

  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

/// A big-endian 32-bit integer at `b` (SQLite's byte order in both files).
uint32_t be32(const unsigned char* b) {
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

/// Writes `v` big-endian at `at`, when the 4 bytes are inside `s`.
void put_be32(std::string& s, size_t at, uint32_t v) {
  if (at + 4 > s.size())
    return;
  for (int i = 0; i < 4; ++i)
    s[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

/// SQLite's WAL checksum (walformat.html, "Checksum algorithm"), continuing from `s`.
void wal_checksum(bool big_endian, const unsigned char* p, size_t n, uint32_t s[2]) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint32_t a = be32(p + i), b = be32(p + i + 4);
    if (!big_endian) {
      a = __builtin_bswap32(a);
      b = __builtin_bswap32(b);
    }
    s[0] += a + s[1];
    s[1] += b + s[0];
  }
}

/// Makes the -wal's header checksum and the checksum chain of every whole frame valid again
/// (and, with `salts`, gives every frame the header's salts), so that SQLite's recovery reads
/// mutated frames instead of stopping at the first one.
void reseal_wal(std::string& wal, bool salts) {
  if (wal.size() < 32)
    return;
  auto* h = reinterpret_cast<unsigned char*>(wal.data());
  bool big_endian = (be32(h) & 1) != 0;
  uint32_t s[2] = {0, 0};
  wal_checksum(big_endian, h, 24, s);
  put_be32(wal, 24, s[0]);
  put_be32(wal, 28, s[1]);
  for (size_t off = 32; off + frame <= wal.size(); off += frame) {
    if (salts)
      std::memcpy(wal.data() + off + 8, wal.data() + 16, 8);
    auto* f = reinterpret_cast<unsigned char*>(wal.data() + off);
    wal_checksum(big_endian, f, 8, s);
    wal_checksum(big_endian, f + 24, page, s);
    put_be32(wal, off + 16, s[0]);
    put_be32(wal, off + 20, s[1]);
  }
}

/// Overwrites up to `n` bytes at `at` with bytes of the input.
void overwrite(std::string& s, size_t at, size_t n, input& in) {
  for (size_t i = 0; i < n && at + i < s.size(); ++i)
    s[at + i] = static_cast<char>(in.byte());
}

/// A length to cut `s` to: a multiple of `unit` past `base` (odd v) or any length (even v).
size_t cut_length(const std::string& s, uint32_t v, size_t base, size_t unit) {
  if (v & 1) {
    size_t units = s.size() > base ? (s.size() - base) / unit : 0;
    return std::min(s.size(), base + ((v >> 1) % (units + 1)) * unit);
  }
  return (v >> 1) % (s.size() + 1);
}

enum op : uint8_t {
  header_byte,  ///< one byte of the database header (first 100 bytes)
  header_u32,   ///< a big-endian 32-bit field of the header
  db_byte,      ///< one byte anywhere in the database file
  db_run,       ///< up to 16 bytes anywhere in the database file
  db_u32,       ///< a big-endian 32-bit value anywhere (page numbers, cell pointers)
  db_copy_page, ///< a page over another one, or appended
  db_truncate,  ///< the database file cut, at a page boundary or anywhere
  wal_header,   ///< one byte of the WAL header (first 32 bytes)
  frame_u32,    ///< one of the six 32-bit fields of a frame header
  frame_byte,   ///< one byte of a frame (header or page)
  frame_run,    ///< up to 16 bytes of a frame's page
  wal_copy,     ///< a frame over another one, or appended
  wal_truncate, ///< the -wal cut, at a frame boundary or anywhere
  wal_reseal,   ///< checksums (and salts) made valid again: reseal_wal
  drop_file,    ///< the database file or the -wal absent, or the database file empty
  op_count,
};

/// Applies the next mutation the input describes (one op byte, then its operands).
void mutate(image& im, input& in) {
  auto frames = [&] { return im.wal.size() < 32 ? 0 : (im.wal.size() - 32) / frame; };
  switch (static_cast<op>(in.byte() % op_count)) {
  case header_byte: overwrite(im.db, in.byte() % 100, 1, in); break;
  case header_u32: {
    size_t at = in.byte() % 97;
    put_be32(im.db, at, in.u32());
    break;
  }
  case db_byte:
    if (!im.db.empty())
      overwrite(im.db, in.u24() % im.db.size(), 1, in);
    break;
  case db_run:
    if (!im.db.empty()) {
      size_t at = in.u24() % im.db.size();
      overwrite(im.db, at, 1 + in.byte() % max_run, in);
    }
    break;
  case db_u32:
    if (im.db.size() >= 4) {
      size_t at = in.u24() % (im.db.size() - 3);
      put_be32(im.db, at, in.u32());
    }
    break;
  case db_copy_page: {
    size_t pages = im.db.size() / page;
    size_t from = in.byte(), to = in.byte();
    if (pages == 0)
      break;
    auto bytes = im.db.substr(from % pages * page, page);
    to %= pages + 1;
    if (to == pages && im.db.size() + page <= the_fixture().checkpointed.db.size() * 2)
      im.db += bytes;
    else if (to < pages)
      im.db.replace(to * page, page, bytes);
    break;
  }
  case db_truncate: im.db.resize(cut_length(im.db, in.u24(), 0, page)); break;
  case wal_header:
    if (im.wal.size() >= 32)
      overwrite(im.wal, in.byte() % 32, 1, in);
    break;
  case frame_u32: {
    size_t f = in.byte(), field = in.byte() % 6;
    uint32_t v = in.u32();
    if (frames() > 0)
      put_be32(im.wal, 32 + f % frames() * frame + field * 4, v);
    break;
  }
  case frame_byte: {
    size_t f = in.byte(), at = in.u16() % frame;
    if (frames() > 0)
      overwrite(im.wal, 32 + f % frames() * frame + at, 1, in);
    break;
  }
  case frame_run: {
    size_t f = in.byte(), at = in.u16() % page, n = 1 + in.byte() % max_run;
    if (frames() > 0)
      overwrite(im.wal, 32 + f % frames() * frame + 24 + at, n, in);
    break;
  }
  case wal_copy: {
    size_t from = in.byte(), to = in.byte();
    size_t n = frames();
    if (n == 0)
      break;
    auto bytes = im.wal.substr(32 + from % n * frame, frame);
    to %= n + 1;
    if (to == n && n < max_wal_frames) {
      im.wal.resize(32 + n * frame); // a partial frame at the end goes
      im.wal += bytes;
    } else if (to < n) {
      im.wal.replace(32 + to * frame, frame, bytes);
    }
    break;
  }
  case wal_truncate: im.wal.resize(cut_length(im.wal, in.u24(), 32, frame)); break;
  case wal_reseal: reseal_wal(im.wal, in.byte() & 1); break;
  case drop_file:
    switch (in.byte() % 3) {
    case 0: im.has_db = false; break;
    case 1: im.has_wal = false; break;
    default: im.db.clear(); break;
    }
    break;
  case op_count: break;
  }
}

/// Creates `p` (it must not exist) holding `bytes`.
void write_file(const fs::path& p, const std::string& bytes) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FUZZ_CHECK(fd >= 0, "create " + p.string() + ": " + std::strerror(errno));
  FUZZ_CHECK(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()),
             "write " + p.string());
  ::close(fd);
}

/// Puts `im` in place of the entity's files (new files: nothing of the last run survives).
void place(const fixture& fx, const image& im) {
  std::error_code ec;
  fs::remove_all(fx.data, ec);
  fs::create_directories(fx.db_path.parent_path());
  if (im.has_db)
    write_file(fx.db_path, im.db);
  if (im.has_wal)
    write_file(fx.db_path.string() + "-wal", im.wal);
}

/// Whether SQLite's own integrity check passes on the placed files (read-only, through factum's
/// VFS). On a damaged b-tree page SQLite may decode a cell from bytes past what the file gave it,
/// which differ from run to run (docs/reliability.md, "Runs and findings"): two reads of such a
/// file can disagree on a bad seq, a count or even on whether the file opens, so the store's
/// answers and inspect's are compared only for files that pass.
bool sqlite_intact(const fs::path& db) {
  sqlite3* h = nullptr;
  std::string uri = "file:" + db.string() + "?mode=ro"; // the scratch path has no '?', '#', '%'
  bool ok = false;
  if (sqlite3_open_v2(uri.c_str(), &h, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                      entity_store::default_vfs()) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "PRAGMA integrity_check(1)", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      auto* text = sqlite3_column_text(st, 0);
      ok = text != nullptr && std::strcmp(reinterpret_cast<const char*>(text), "ok") == 0;
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return ok;
}

// -- (a): the store ------------------------------------------------------------------------------

/// What reading the files through entity_store showed (for the comparison with inspect).
struct store_view {
  status open = status::ok(); ///< open_file's error, or ok
  entity_key key;
  status verify = status::ok(); ///< verify()'s error, or ok (then `report` is its result)
  verify_report report;
};

/// The options entity_reader opens its copies with (tools/inspect/src/entity_reader.cpp).
store_options read_only_options() {
  store_options o;
  o.read_only = true;
  o.create_if_missing = false;
  o.cache_kib = 1024;
  return o;
}

/// An error with a code and a message; not INTERNAL (a bug of factum itself), except for two
/// SQLite results that the store reports as INTERNAL (its map_rc has no other code for them)
/// and that a damaged record causes: a length field that claims more than SQLite allocates
/// (SQLITE_NOMEM, "out of memory") or holds (SQLITE_TOOBIG, "string or blob too big");
/// docs/reliability.md, "Runs and findings".
void check_error(const status& st, const char* what) {
  auto ends_with = [&](int rc) {
    return st.message().ends_with(std::string(": ") + sqlite3_errstr(rc));
  };
  bool sqlite_limit =
    st.code() == errc::internal && (ends_with(SQLITE_NOMEM) || ends_with(SQLITE_TOOBIG));
  FUZZ_CHECK(!st.is_ok() && !st.message().empty() && (st.code() != errc::internal || sqlite_limit),
             std::string(what) + ": " + st.to_string());
}

/// A verify report says the same thing in each of its fields.
void check_report(const verify_report& r) {
  FUZZ_CHECK(r.ok == r.problems.empty(), "ok " + std::to_string(r.ok) + " with " +
                                           std::to_string(r.problems.size()) + " problems");
  FUZZ_CHECK(r.facts_checked >= 0, std::to_string(r.facts_checked));
  if (r.ok)
    FUZZ_CHECK(r.problem.empty() && r.first_bad_seq == 0, r.problem);
  else
    FUZZ_CHECK(!r.problem.empty() && r.problem == r.problems.front(), r.problem);
}

/// `facts` (all of them, oldest first) form the chain verify() passed: seqs 1..n, linked,
/// each hash recomputed; the chain head that the open loaded is its last fact.
void check_chain(entity_store& s, const std::vector<fact>& facts, const verify_report& r) {
  FUZZ_CHECK(static_cast<int64_t>(facts.size()) == r.facts_checked,
             "verify ok over " + std::to_string(r.facts_checked) + " facts, query shows " +
               std::to_string(facts.size()));
  std::string prev = genesis;
  for (size_t i = 0; i < facts.size(); ++i) {
    const auto& f = facts[i];
    FUZZ_CHECK(f.seq == static_cast<int64_t>(i) + 1, "verify ok, query shows seq " +
                                                       std::to_string(f.seq) + " at " +
                                                       std::to_string(i + 1));
    FUZZ_CHECK(f.prev_hash == prev, "verify ok, broken link at seq " + std::to_string(f.seq));
    FUZZ_CHECK(compute_hash(f) == f.hash, "verify ok, bad hash at seq " + std::to_string(f.seq));
    prev = f.hash;
  }
  FUZZ_CHECK(s.last_seq() == static_cast<int64_t>(facts.size()) && s.head_hash() == prev,
             "verify ok over " + std::to_string(facts.size()) + " facts, chain head seq " +
               std::to_string(s.last_seq()));
}

/// `f`, found by a query or get(), is the fact of the verified chain with its seq.
void check_in_chain(const fact& f, const std::vector<fact>& chain, const char* how) {
  bool in = f.seq >= 1 && f.seq <= static_cast<int64_t>(chain.size()) &&
            chain[f.seq - 1].hash == f.hash && chain[f.seq - 1].fact_id == f.fact_id &&
            chain[f.seq - 1].data == f.data;
  FUZZ_CHECK(in, std::string(how) + " shows seq " + std::to_string(f.seq) +
                   ", not the fact of the verified chain");
}

/// Reads the placed files through entity_store (see the file comment). The facts of a chain
/// that verify() passed are compared with what the queries and get() show: a chain that passed
/// was read exactly as written (every field, the seq too, is under its hash), also from a file
/// that SQLite finds damaged elsewhere (an index, another table), so no read of it can differ.
store_view check_store(const fixture& fx) {
  store_view v;
  auto opened = entity_store::open_file(fx.db_path, read_only_options());
  if (!opened) {
    v.open = opened.error();
    check_error(v.open, "open_file");
    return v;
  }
  auto& s = **opened;
  v.key = s.key();
  FUZZ_CHECK(s.read_only() && s.path() == fx.db_path, s.path().string());
  auto rep = s.verify();
  if (rep) {
    v.report = *rep;
    check_report(v.report);
  } else {
    v.verify = rep.error();
    check_error(v.verify, "verify");
  }
  bool chain_ok = rep && rep->ok;
  fact_filter all;
  all.limit = 10000;
  auto facts = s.query(all);
  if (!facts)
    check_error(facts.error(), "query");
  else if (chain_ok)
    check_chain(s, *facts, v.report);
  const std::vector<fact> none;
  const auto& chain = facts && chain_ok ? *facts : none;
  fact_filter newest;
  newest.limit = 2;
  newest.newest_first = true;
  if (auto r = s.query(newest); !r)
    check_error(r.error(), "query newest first");
  else if (!chain.empty())
    FUZZ_CHECK(!r->empty() && r->front().seq == static_cast<int64_t>(chain.size()),
               "newest first does not start at the chain's last fact");
  // Through the indexes: a damaged index may find other rows, but never a fact that is not
  // one of the table's.
  fact_filter by_type;
  by_type.type = "invocation";
  by_type.tool_id = "vendor";
  by_type.since_ms = 1'700'000'001'000;
  if (auto r = s.query(by_type); !r)
    check_error(r.error(), "query by type");
  else if (chain_ok && facts)
    for (auto& f : *r)
      check_in_chain(f, chain, "a query by type");
  for (int64_t seq : {int64_t{1}, int64_t{5}}) {
    auto g = s.get(seq);
    if (!g)
      check_error(g.error(), "get");
    else if (chain_ok && facts)
      check_in_chain(*g, chain, "get(seq)");
  }
  if (!chain.empty())
    if (auto g = s.get(chain.back().fact_id); !g)
      check_error(g.error(), "get(fact_id)");
  if (auto r = s.list_alarms(); !r)
    check_error(r.error(), "list_alarms");
  if (auto r = s.next_alarm(); !r)
    check_error(r.error(), "next_alarm");
  if (auto r = s.list_keys(100); !r)
    check_error(r.error(), "list_keys");
  if (auto r = s.get_key("k-1"); !r && r.error().code() != errc::not_found)
    check_error(r.error(), "get_key");
  if (auto r = s.info(); !r)
    check_error(r.error(), "info");
  return v;
}

// -- (b): factum inspect verify ----------------------------------------------------------------

/// What inspect's JSON line for `text` says (its writer replaces bytes that are not UTF-8).
nlohmann::json as_written(const std::string& text) {
  return nlohmann::json::parse(
    nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

/// What one run of `factum inspect verify` said.
struct inspect_run {
  int rc = 0;
  std::string out, err;
  std::vector<nlohmann::json> lines; ///< with JSON output: one per row, each checked
  std::string said() const {
    return "rc " + std::to_string(rc) + ", out:\n" + out + "err:\n" + err;
  }
};

/// Runs `factum inspect verify` on the data directory (or on the entity's key). Its exit code is
/// one of docs/inspect.md's for a local command (0 to 6); every JSON line is an object whose
/// `problem` is null exactly when its `ok` is true, and exit 0 means every row is ok.
inspect_run run_inspect(const fixture& fx, bool single, bool json) {
  std::ostringstream out, err;
  tools::run_ctx ctx(out, err);
  ctx.json = json;
  ctx.clock = [] { return int64_t{1'800'000'000'000}; };
  tools::common_options c;
  c.data = fx.data.string();
  c.json = json;
  inspect_run r;
  r.rc = tools::run_verify(ctx, c, single ? fx.key.to_string() : "");
  r.out = out.str();
  r.err = err.str();
  FUZZ_CHECK(r.rc >= tools::exit_ok && r.rc <= tools::exit_corrupt, r.said());
  std::istringstream text(r.out);
  for (std::string line; json && std::getline(text, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    FUZZ_CHECK(j.is_object() && j.contains("ok") && j["ok"].is_boolean() &&
                 j["problem"].is_null() == j["ok"].get<bool>(),
               line);
    FUZZ_CHECK(r.rc != tools::exit_ok || j["ok"].get<bool>(), r.said());
    r.lines.push_back(std::move(j));
  }
  return r;
}

/// Compares what inspect said with what the store showed: one row per file it could name,
/// with the store's verdict and counts, and the exit code of docs/inspect.md.
void compare_inspect(const fixture& fx, const image& im, const store_view& v, bool single,
                     bool json, const inspect_run& r) {
  bool orphan_wal = !im.has_db && im.has_wal && !im.wal.empty();
  bool read = v.open.is_ok();
  bool ok = read && v.verify.is_ok() && v.report.ok;
  bool other_key = read && !(v.key == fx.key);
  int rows = 1, want_rc = ok ? tools::exit_ok : tools::exit_verify_failed;
  if (!im.has_db) {
    rows = orphan_wal ? 1 : 0;
    want_rc = !single ? (orphan_wal ? tools::exit_verify_failed : tools::exit_ok)
                      : (orphan_wal ? tools::exit_corrupt : tools::exit_no_entity);
  } else if (!read && v.open.code() == errc::not_found) { // an unclaimed file: no entity
    rows = 0;
    want_rc = single ? tools::exit_no_entity : tools::exit_ok;
  } else if (single && (!read || other_key)) {
    want_rc = tools::exit_code_for(read ? errc::corruption : v.open.code());
  } else if (single && read && !v.verify.is_ok()) {
    want_rc = tools::exit_code_for(v.verify.code());
  }
  FUZZ_CHECK(r.rc == want_rc, "expected rc " + std::to_string(want_rc) + ", " + r.said());
  if (!json)
    return;
  FUZZ_CHECK(static_cast<int>(r.lines.size()) == rows, r.said());
  if (rows == 0)
    return;
  auto& row = r.lines.front();
  FUZZ_CHECK(row["ok"] == ok, r.said());
  bool named = read && (!single || !other_key);
  FUZZ_CHECK(named ? row["entity"] == as_written(v.key.to_string()) : row["entity"].is_null(),
             r.said());
  if (named && v.verify.is_ok()) {
    FUZZ_CHECK(row["facts_checked"] == v.report.facts_checked, r.said());
    FUZZ_CHECK(v.report.first_bad_seq ? row["first_bad_seq"] == v.report.first_bad_seq
                                      : row["first_bad_seq"].is_null(),
               r.said());
  }
}

} // namespace

/// One input: a config byte (bit 0: the seed with a -wal; bit 1: inspect the entity's key, not
/// everything; bit 2: JSON lines, not a table), then up to max_mutations mutations.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& fx = the_fixture();
  input in(data, size);
  uint8_t config = in.byte();
  image im = config & 1 ? fx.with_wal : fx.checkpointed;
  for (size_t n = 0; n < max_mutations && !in.done(); ++n)
    mutate(im, in);
  place(fx, im);
  // Without a database file nothing is read from a b-tree: the answers are the same each time.
  bool intact = !im.has_db || sqlite_intact(fx.db_path);
  auto v = check_store(fx);
  bool single = (config & 2) != 0, json = (config & 4) != 0;
  auto r = run_inspect(fx, single, json);
  if (intact)
    compare_inspect(fx, im, v, single, json, r);
  return 0;
}
