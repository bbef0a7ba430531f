// store_bench.cpp: the benchmark of the per-entity store against its bars (docs/performance.md,
// "Where the bars stand"), in the manner of leveldb's db_bench: named workloads chosen with
// --benchmarks=a,b,c, each run --runs times, one line per workload with the median (and min/max)
// over runs. Owns nothing but its own data directory; single-threaded (everything runs on the main
// thread, as one entity's store is driven by one owner at a time), but for the fsync*_xN workloads,
// which sync N files from N threads of their own.
//
// Why not Google Benchmark (libbenchmark-dev is installed): its model is "repeat a small function
// until the timing is stable", with the iteration count chosen by the library. These workloads
// are instead fixed amounts of durable work (N facts, N commits, N file creations) whose cost is
// dominated by fsync and by file-system state, and whose figures are compared with each other
// (store against its raw SQLite twin) and against bars. Named workloads with an explicit --num,
// fresh files per run and medians over runs, as db_bench does, fit that better.
//
// The raw twin workloads include <sqlite3.h> and link SQLite::SQLite3 directly: they are the
// "what would plain SQLite do with the same rows" reference that makes the store's own overhead
// visible. Nothing else in factum outside storage/ talks to SQLite.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <sqlite3.h>

#include "factum/storage/entity_store.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/spare_pool.hpp"
#include "fsync_probe.hpp"

namespace fs = std::filesystem;
using factum::durability;
using factum::entity_key;
using factum::entity_store;
using factum::fact_draft;
using factum::spare_pool;
using factum::status;
using factum::store_options;

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// -- options --------------------------------------------------------------------------------

/// Command-line options (db_bench style: --name=value; "--name value" is accepted too).
struct bench_options {
  std::vector<std::string> benchmarks; ///< empty: every workload, in table order
  int64_t num = 0;                     ///< 0: each workload's own default
  int runs = 5;
  fs::path data;           ///< empty: a fresh temp dir, removed at exit
  bool keep_files = false; ///< create/reopen runs leave their entity files (no deletion churn)
  int spares = 32;         ///< spare files kept ready for creations (the runtime's default)
};

// -- results --------------------------------------------------------------------------------

/// What one run of a workload measured.
struct run_result {
  double seconds = 0;         ///< wall time of the timed part
  int64_t items = 0;          ///< facts, rows, queries or creates (the primary unit)
  int64_t txns = 0;           ///< commits (or queries): the secondary unit; 0 = none
  std::vector<double> lat_us; ///< latency of each transaction / query / create
};

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double median(std::vector<double> v) {
  return percentile(std::move(v), 0.5);
}

/// Summary of one workload over its runs.
struct summary {
  std::string name;
  double rate_med = 0, rate_min = 0, rate_max = 0; ///< items/s
  double txn_rate_med = 0;                         ///< txns/s
  double p50_us = 0, p99_us = 0;                   ///< medians over runs of per-run p50/p99
  int64_t items_per_run = 0;
  std::vector<double> rates; ///< items/s of each run (round order)
};

// -- workload context -------------------------------------------------------------------------

/// Everything a workload needs: where to put files, how much to do, and a unique tag so that
/// runs never reopen each other's entities (also when --data points at an old directory).
struct context {
  fs::path root;
  std::string tag;
  int run = 0;
  int64_t num = 0;
  bool keep_files = false;
  int spares = 32;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "store_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(const status& st, const char* what) {
  if (!st)
    die(std::string(what) + ": " + st.to_string());
}

void remove_entity_files(const fs::path& db) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    auto p = db;
    p += suffix;
    fs::remove(p, ec);
  }
}

/// A fact's data object of about 100 bytes (compact JSON), varied by `i`.
nlohmann::json fact_data(int64_t i) {
  char req[32], acct[32];
  std::snprintf(req, sizeof req, "req-%010" PRId64, i);
  std::snprintf(acct, sizeof acct, "acct-%06" PRId64, i % 1000000);
  return nlohmann::json{{"method", "append"}, {"request_id", req}, {"account", acct},
                        {"amount", "12.50"},  {"attempt", 1},      {"note", "bench"}};
}

/// `n` drafts of type "invocation" (the append workloads' facts).
std::vector<fact_draft> make_drafts(int64_t n, const std::string& type = "invocation") {
  std::vector<fact_draft> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)].type = type;
    out[static_cast<size_t>(i)].data = fact_data(i);
  }
  return out;
}

store_options store_opts(const fs::path& dir, durability mode) {
  store_options o;
  o.data_dir = dir;
  o.mode = mode;
  return o;
}

std::unique_ptr<entity_store> open_store(const store_options& o, const std::string& id) {
  auto r = entity_store::open(o, entity_key{"bench", "ledger", id});
  if (!r)
    die("open " + id + ": " + r.error().to_string());
  return std::move(r.value());
}

std::string entity_id(const context& c, std::string_view workload) {
  return std::string(workload) + "-" + c.tag + "-r" + std::to_string(c.run);
}

// -- workloads --------------------------------------------------------------------------------

/// Appends c.num facts, `per_txn` per transaction (begin, N x append, commit), into a fresh
/// entity. Latency: one transaction, from its first append to the return of its commit. `owned`:
/// the store holds an owner claim (cluster mode), so every transaction also checks the file's
/// owner epoch.
run_result append_workload(const context& c, std::string_view name, int64_t per_txn,
                           durability mode, bool owned = false) {
  auto dir = c.root / "append";
  auto store = open_store(store_opts(dir, mode), entity_id(c, name));
  if (owned)
    check(store->claim_owner(1, "bench"), "claim");
  auto drafts = make_drafts(per_txn);
  int64_t txns = (c.num + per_txn - 1) / per_txn;
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(txns));
  auto t0 = clock_type::now();
  for (int64_t t = 0; t < txns; ++t) {
    auto t1 = clock_type::now();
    check(store->begin_batch(), "begin");
    for (auto& d : drafts)
      if (auto f = store->append(d); !f)
        die("append: " + f.error().to_string());
    check(store->commit(), "commit");
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = txns * per_txn;
  r.txns = txns;
  auto path = store->path();
  store.reset();
  remove_entity_files(path);
  return r;
}

/// c.num empty write transactions (begin_batch() + rollback()) on an entity holding one fact,
/// by a store holding an owner claim (`owned`) or not: the price of the owner check of cluster
/// mode, which reads the file's owner epoch right after the BEGIN. Latency: one transaction.
run_result txn_workload(const context& c, std::string_view name, bool owned) {
  auto store = open_store(store_opts(c.root / "txn", durability::normal), entity_id(c, name));
  if (owned)
    check(store->claim_owner(1, "bench"), "claim");
  check(store->append(make_drafts(1)[0]).error(), "append");
  check(store->commit(), "commit");
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(c.num));
  auto t0 = clock_type::now();
  for (int64_t i = 0; i < c.num; ++i) {
    auto t1 = clock_type::now();
    check(store->begin_batch(), "begin");
    check(store->rollback(), "rollback");
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = c.num;
  auto path = store->path();
  store.reset();
  remove_entity_files(path);
  return r;
}

/// One call with an Idempotency-Key, one call per commit (no coalescing: the worst case).
/// idem_*: the two-step path first specified for keyed calls, a turn (savepoint) holding
/// begin_key(fresh key, written pending) + one fact + complete_key, then the commit. idem_fast_*:
/// the runtime's current path for a call that never waits (entity_actor.cpp): peek_key (a read),
/// then a turn holding one fact + record_key (one INSERT of the finished key), then the commit.
/// Latency: one call.
run_result idem_workload(const context& c, std::string_view name, durability mode, bool fast) {
  auto dir = c.root / "idem";
  auto store = open_store(store_opts(dir, mode), entity_id(c, name));
  auto draft = make_drafts(1).front();
  const std::string fingerprint(64, 'f');
  constexpr int64_t ttl_ms = 24 * 3600 * 1000;
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(c.num));
  auto t0 = clock_type::now();
  for (int64_t i = 0; i < c.num; ++i) {
    auto t1 = clock_type::now();
    std::string key = "idem-" + std::to_string(i);
    int64_t now = factum::now_ms();
    if (fast) {
      auto k = store->peek_key(key, fingerprint, now);
      if (!k || k->outcome != factum::key_outcome::fresh)
        die("peek_key: not fresh");
    }
    check(store->begin_turn(), "begin_turn");
    if (!fast) {
      auto k = store->begin_key(key, fingerprint, ttl_ms, now);
      if (!k || k->outcome != factum::key_outcome::fresh)
        die("begin_key: not fresh");
    }
    draft.idempotency_key = key;
    auto f = store->append(draft);
    if (!f)
      die("append: " + f.error().to_string());
    std::string response =
      "{\"seq\":" + std::to_string(f->seq) + ",\"fact_id\":\"" + f->fact_id + "\"}";
    if (fast)
      check(
        store->record_key(key, factum::key_status::completed, fingerprint, response, ttl_ms, now),
        "record_key");
    else
      check(store->complete_key(key, response), "complete_key");
    check(store->end_turn(true), "end_turn");
    check(store->commit(), "commit");
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = c.num;
  r.txns = c.num;
  auto path = store->path();
  store.reset();
  remove_entity_files(path);
  return r;
}

/// The store that query_type reads: 100k facts of 5 types, built once per process (untimed).
struct query_fixture {
  std::unique_ptr<entity_store> store;
  static constexpr int64_t facts = 100000;
  static constexpr const char* types[] = {"invocation", "outcome", "error", "cost", "lifecycle"};
};

query_fixture g_query;

query_fixture& query_store(const context& c) {
  auto& fx = g_query;
  if (fx.store)
    return fx;
  auto o = store_opts(c.root / "query", durability::normal);
  fx.store = open_store(o, "query-" + c.tag);
  std::vector<fact_draft> batch;
  for (int64_t i = 0; i < query_fixture::facts; ++i) {
    fact_draft d;
    d.type = query_fixture::types[i % 5];
    d.data = fact_data(i);
    batch.push_back(std::move(d));
    if (batch.size() == 1000 || i + 1 == query_fixture::facts) {
      check(fx.store->begin_batch(), "begin");
      for (auto& b : batch)
        if (auto f = fx.store->append(b); !f)
          die("append: " + f.error().to_string());
      check(fx.store->commit(), "commit");
      batch.clear();
    }
  }
  return fx;
}

/// c.num queries "type = T, limit 100" (the HTTP API's ?type=T), cycling over the 5 types.
run_result query_workload(const context& c) {
  auto& fx = query_store(c);
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(c.num));
  int64_t rows = 0;
  auto t0 = clock_type::now();
  for (int64_t i = 0; i < c.num; ++i) {
    auto t1 = clock_type::now();
    factum::fact_filter f;
    f.type = query_fixture::types[i % 5];
    f.limit = 100;
    auto got = fx.store->query(f);
    if (!got)
      die("query: " + got.error().to_string());
    rows += static_cast<int64_t>(got->size());
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = rows;
  r.txns = c.num;
  return r;
}

/// Times c.num rounds of entity_store::open + close of `<prefix><i>`, checking that each store
/// holds `expect_seq` facts, then closes `crowd` (when given) and removes `dir` (the data
/// directory of `o`) unless --keep_files.
run_result timed_opens(const context& c, const fs::path& dir, const store_options& o,
                       const std::string& prefix, int64_t expect_seq,
                       std::vector<std::unique_ptr<entity_store>>* crowd = nullptr,
                       const char* name = nullptr) {
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(c.num));
  auto t0 = clock_type::now();
  for (int64_t i = 0; i < c.num; ++i) {
    auto t1 = clock_type::now();
    auto s = open_store(o, prefix + std::to_string(i));
    if (s->last_seq() != expect_seq)
      die("open " + prefix + std::to_string(i) + ": unexpected last seq");
    s.reset();
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = c.num;
  if (crowd)
    crowd->clear(); // closed before their files go
  if (o.spares) {   // stopped before its directory goes; did it keep up with the creations?
    o.spares->stop();
    auto ps = o.spares->get_stats();
    std::fprintf(stderr,
                 "store_bench: %s run %d: %" PRId64 " creations from a spare, %" PRId64
                 " without (pool of %d empty)\n",
                 name ? name : "", c.run, ps.taken, ps.missed, o.spares->target());
  }
  if (!c.keep_files) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return r;
}

/// c.num entity creations: entity_store::open on a new key (build the file aside, rename it
/// into place, fsync the directory in full) and then close it. Each run uses a fresh data
/// directory, so a run pays the shard directories it creates, as a fresh server would.
/// With --spares > 0 the creations take spare files from a pool (as the runtime does), full
/// before the timing starts; its maker thread refills it while the loop runs.
run_result create_workload(const context& c, std::string_view name, durability mode) {
  auto dir = c.root / (std::string(name) + "-" + std::to_string(c.run));
  auto o = store_opts(dir, mode);
  if (c.spares > 0) {
    auto pool = spare_pool::start(dir, c.spares);
    if (!pool)
      die("spare pool: " + pool.error().to_string());
    o.spares = *pool;
    if (o.spares->wait_ready(c.spares, std::chrono::seconds(30)) < c.spares)
      die("spare pool: not filled in 30 s");
  }
  std::string label(name);
  return timed_opens(c, dir, o, entity_id(c, name) + "-", 0, nullptr, label.c_str());
}

/// c.num activations of existing entities: entity_store::open of a file that holds `commits`
/// facts, one per commit (read the schema and rebuild the wal-index from the WAL the last close
/// kept, migrate nothing, load the chain head, release pending keys) and close (the WAL kept as
/// it is while small, the -shm emptied): what a hibernated entity costs the runtime to wake and
/// put back to sleep. The files are created untimed first, all in one data directory.
/// Creates c.num entities `<prefix><i>` holding `commits` facts each, one per commit (untimed).
void make_entities(const context& c, const store_options& o, const std::string& prefix,
                   int commits = 1) {
  auto drafts = make_drafts(1);
  for (int64_t i = 0; i < c.num; ++i) {
    auto s = open_store(o, prefix + std::to_string(i));
    for (int k = 0; k < commits; ++k) {
      check(s->append_many(drafts).error(), "append");
      check(s->commit(), "commit");
    }
  }
}

run_result reopen_workload(const context& c, std::string_view name, durability mode,
                           int commits = 1) {
  auto dir = c.root / (std::string(name) + "-" + std::to_string(c.run));
  auto o = store_opts(dir, mode);
  std::string prefix = entity_id(c, name) + "-";
  make_entities(c, o, prefix, commits);
  o.create_if_missing = false;
  return timed_opens(c, dir, o, prefix, commits);
}

/// reopen_full with `crowd_size` other entities held open meanwhile, as a runtime holds its
/// active set. SQLite's unix VFS keeps one process-wide list of open database files and walks it
/// twice per open under its global mutex (findReusableFd, findInodeInfo), so through it an open
/// costs more the more databases are open; factum's VFS locks database files itself (ofd_file)
/// and this should match reopen_full.
run_result reopen_crowded_workload(const context& c, std::string_view name, int crowd_size) {
  auto dir = c.root / (std::string(name) + "-" + std::to_string(c.run));
  auto o = store_opts(dir, durability::full);
  std::string prefix = entity_id(c, name) + "-";
  make_entities(c, o, prefix);
  std::vector<std::unique_ptr<entity_store>> crowd;
  crowd.reserve(static_cast<size_t>(crowd_size));
  for (int i = 0; i < crowd_size; ++i)
    crowd.push_back(open_store(o, prefix + "crowd-" + std::to_string(i)));
  o.create_if_missing = false;
  return timed_opens(c, dir, o, prefix, 1, &crowd);
}

// -- the raw SQLite twin --------------------------------------------------------------------

void sql_ok(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    die(std::string("raw ") + what + ": " + sqlite3_errmsg(db));
}

/// Which table the raw SQLite workloads write.
enum class raw_target {
  /// The twin the store's bars compare with: a plain table with the columns of `facts` (no
  /// UNIQUE, no index, no trigger) in a file of its own; everything but WAL and synchronous is
  /// SQLite's default.
  twin,
  /// Diagnostic: the store's own file (created by entity_store::open, so with every index and
  /// trigger of the real schema) and the store's connection PRAGMAs, written by plain SQLite
  /// with chained (not computed) hashes. append<N> minus this is the store's C++ cost; this
  /// minus the twin is the cost of the schema.
  schema,
};

/// The same rows as append<N>_<mode> written by plain SQLite: one prepared INSERT, the same row
/// content (the same data text, the same 32-character fact ids, 64-character hashes that are not
/// computed: a counter, so that each row links to the one before it).
run_result raw_workload(const context& c, std::string_view name, int64_t per_txn, durability mode,
                        raw_target target) {
  fs::path path;
  std::string setup = "PRAGMA journal_mode=WAL;";
  if (target == raw_target::twin) {
    auto dir = c.root / "twin";
    fs::create_directories(dir);
    path = dir / (entity_id(c, name) + ".db");
  } else {
    path = open_store(store_opts(c.root / "raw", mode), entity_id(c, name))->path();
    store_options defaults;
    setup += "PRAGMA cache_size=-" + std::to_string(defaults.cache_kib) +
             ";PRAGMA temp_store=MEMORY;PRAGMA mmap_size=0;";
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK)
    die("raw open: " + std::string(db ? sqlite3_errmsg(db) : "out of memory"));
  setup += mode == durability::full ? "PRAGMA synchronous=FULL;" : "PRAGMA synchronous=NORMAL;";
  if (target == raw_target::twin)
    setup += "CREATE TABLE facts(seq INTEGER PRIMARY KEY, fact_id TEXT NOT NULL, "
             "type TEXT NOT NULL, subtype TEXT, ts INTEGER NOT NULL, tool_id TEXT, "
             "config_id TEXT, config_version INTEGER, trace_id TEXT, idempotency_key TEXT, "
             "amount TEXT, currency TEXT, from_entity TEXT, to_entity TEXT, "
             "data TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);";
  sql_ok(db, sqlite3_exec(db, setup.c_str(), nullptr, nullptr, nullptr), "setup");
  sqlite3_stmt* ins = nullptr;
  sql_ok(db,
         sqlite3_prepare_v2(db,
                            "INSERT INTO facts(seq, fact_id, type, subtype, ts, tool_id, "
                            "config_id, config_version, trace_id, idempotency_key, amount, "
                            "currency, from_entity, to_entity, data, prev_hash, hash) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &ins, nullptr),
         "prepare");
  // The same data text as the store writes (nlohmann dump of the same drafts).
  std::vector<std::string> data;
  for (auto& d : make_drafts(per_txn))
    data.push_back(d.data.dump());
  const std::string type = "invocation";
  char hash[2][72];
  std::snprintf(hash[0], sizeof hash[0], "%064d", 0); // the genesis hash
  char fact_id[40]; // as the store makes them (schema 4): a per-file prefix + seq in hex
  const uint64_t id_prefix = std::random_device{}() * uint64_t{0x9e3779b97f4a7c15};
  int64_t txns = (c.num + per_txn - 1) / per_txn;
  int64_t seq = 0;
  run_result r;
  r.lat_us.reserve(static_cast<size_t>(txns));
  auto t0 = clock_type::now();
  for (int64_t t = 0; t < txns; ++t) {
    auto t1 = clock_type::now();
    sql_ok(db, sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), "begin");
    int64_t ts = factum::now_ms();
    for (auto& d : data) {
      ++seq;
      std::snprintf(fact_id, sizeof fact_id, "fct_%016" PRIx64 "%012" PRIx64, id_prefix,
                    static_cast<uint64_t>(seq));
      char* prev = hash[(seq - 1) & 1];
      char* cur = hash[seq & 1];
      std::snprintf(cur, sizeof hash[0], "%064" PRIx64, static_cast<uint64_t>(seq));
      sqlite3_bind_int64(ins, 1, seq);
      sqlite3_bind_text(ins, 2, fact_id, 32, SQLITE_STATIC);
      sqlite3_bind_text(ins, 3, type.data(), static_cast<int>(type.size()), SQLITE_STATIC);
      sqlite3_bind_int64(ins, 5, ts);
      sqlite3_bind_text(ins, 15, d.data(), static_cast<int>(d.size()), SQLITE_STATIC);
      sqlite3_bind_text(ins, 16, prev, 64, SQLITE_STATIC);
      sqlite3_bind_text(ins, 17, cur, 64, SQLITE_STATIC);
      sql_ok(db, sqlite3_step(ins), "insert");
      sqlite3_reset(ins);
    }
    sql_ok(db, sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), "commit");
    r.lat_us.push_back(us_since(t1));
  }
  r.seconds = us_since(t0) / 1e6;
  r.items = txns * per_txn;
  r.txns = txns;
  sqlite3_finalize(ins);
  sqlite3_close(db);
  remove_entity_files(path);
  return r;
}

/// The disk's price of durability (fsync_probe.hpp): `threads` threads, each overwriting its own
/// file with `kib` KiB and fdatasyncing it, c.num syncs in all. The ceilings the runtime's and the
/// HTTP bars meet on a machine (docs/performance.md, "Where the bars stand"): `fsync28k` is one
/// commit of one fact (7 WAL frames of 4 KiB + 24-byte headers), `fsync28k_x64` 64 callers each
/// waiting for such a commit of its own entity, `fsync4k_x64` the same with the smallest commit a
/// page-based WAL can make.
run_result fsync_workload(const context& c, int kib, int threads) {
  auto p = factum::bench::fsync_probe(c.root, c.tag, kib, threads, c.num);
  if (!p.error.empty())
    die(p.error);
  run_result r;
  r.seconds = p.seconds;
  r.items = static_cast<int64_t>(p.lat_us.size());
  r.lat_us = std::move(p.lat_us);
  return r;
}

// -- the workload table -----------------------------------------------------------------------

struct workload {
  std::string name;
  const char* unit;     ///< primary unit (per second)
  const char* txn_unit; ///< secondary unit, or nullptr
  int64_t default_num;  ///< items per run (rounded up to whole transactions)
  std::function<run_result(const context&)> run;
};

std::vector<workload> all_workloads() {
  std::vector<workload> w;
  for (auto [name, kib, threads, def] :
       {std::tuple{"fsync4k", 4, 1, 2000}, std::tuple{"fsync28k", 28, 1, 2000},
        std::tuple{"fsync28k_x8", 28, 8, 8000}, std::tuple{"fsync28k_x64", 28, 64, 12800},
        std::tuple{"fsync4k_x64", 4, 64, 12800}})
    w.push_back({name, "fsyncs", nullptr, def, [kib = kib, threads = threads](const context& c) {
                   return fsync_workload(c, kib, threads);
                 }});
  for (auto [mode, suffix] :
       {std::pair{durability::full, "_full"}, std::pair{durability::normal, "_normal"}}) {
    for (int64_t n : {1, 100, 1000}) {
      auto name = "append" + std::to_string(n) + suffix;
      int64_t def = n == 1 ? (mode == durability::full ? 3000 : 20000) : 200 * n;
      def = std::min<int64_t>(def, 200000);
      w.push_back({name, "facts", "commits", def, [name, n, mode = mode](const context& c) {
                     return append_workload(c, name, n, mode);
                   }});
    }
  }
  for (auto [mode, name] : {std::pair{durability::full, "append1_owned_full"},
                            std::pair{durability::normal, "append1_owned_normal"}}) {
    int64_t def = mode == durability::full ? 3000 : 20000;
    w.push_back(
      {name, "facts", "commits", def, [name = std::string(name), mode = mode](const context& c) {
         return append_workload(c, name, 1, mode, true);
       }});
  }
  for (auto [owned, name] : {std::pair{false, "txn_plain"}, std::pair{true, "txn_owned"}})
    w.push_back(
      {name, "txns", nullptr, 200000, [name = std::string(name), owned = owned](const context& c) {
         return txn_workload(c, name, owned);
       }});
  for (auto [mode, name, fast] : {std::tuple{durability::full, "idem_full", false},
                                  std::tuple{durability::normal, "idem_normal", false},
                                  std::tuple{durability::full, "idem_fast_full", true},
                                  std::tuple{durability::normal, "idem_fast_normal", true}})
    w.push_back({name, "calls", "commits", mode == durability::full ? 3000 : 10000,
                 [name = std::string(name), mode = mode, fast = fast](const context& c) {
                   return idem_workload(c, name, mode, fast);
                 }});
  w.push_back(
    {"query_type", "facts", "queries", 2000, [](const context& c) { return query_workload(c); }});
  for (auto [mode, name] :
       {std::pair{durability::full, "create_full"}, std::pair{durability::normal, "create_normal"}})
    w.push_back(
      {name, "creates", nullptr, 500, [name = std::string(name), mode = mode](const context& c) {
         return create_workload(c, name, mode);
       }});
  for (auto [mode, name] :
       {std::pair{durability::full, "reopen_full"}, std::pair{durability::normal, "reopen_normal"}})
    w.push_back(
      {name, "opens", nullptr, 500, [name = std::string(name), mode = mode](const context& c) {
         return reopen_workload(c, name, mode);
       }});
  // An entity that made 10 commits before it hibernated: its kept WAL (~30 frames) is read back
  // into a new wal-index at the open.
  w.push_back({"reopen_wal10_full", "opens", nullptr, 500, [](const context& c) {
                 return reopen_workload(c, "reopen_wal10_full", durability::full, 10);
               }});
  w.push_back({"reopen_crowded_full", "opens", nullptr, 500, [](const context& c) {
                 return reopen_crowded_workload(c, "reopen_crowded_full", 2000);
               }});
  for (auto [n, mode, name] : {std::tuple{int64_t{1000}, durability::full, "raw_twin1000_full"},
                               std::tuple{int64_t{1000}, durability::normal, "raw_twin1000_normal"},
                               std::tuple{int64_t{1}, durability::full, "raw_twin1_full"}}) {
    int64_t def = n == 1 ? 3000 : 200000;
    w.push_back({name, "rows", "commits", def,
                 [name = std::string(name), n = n, mode = mode](const context& c) {
                   return raw_workload(c, name, n, mode, raw_target::twin);
                 }});
  }
  for (auto [mode, name] : {std::pair{durability::full, "raw_schema1000_full"},
                            std::pair{durability::normal, "raw_schema1000_normal"}})
    w.push_back(
      {name, "rows", "commits", 200000, [name = std::string(name), mode = mode](const context& c) {
         return raw_workload(c, name, 1000, mode, raw_target::schema);
       }});
  return w;
}

// -- driver -----------------------------------------------------------------------------------

/// The options from the command line (CLI11); --help prints them and every workload's default
/// --num. Exits 0 after --help, 2 with CLI11's message on anything refused (an unknown flag or
/// workload, a count that is not a whole number in range).
bench_options parse_args(int argc, char** argv) {
  bench_options o;
  std::vector<std::string> names;
  std::string listing = "Workloads (default --num, unit), run in this order by default:\n";
  for (auto& w : all_workloads()) {
    names.push_back(w.name);
    char line[128];
    std::snprintf(line, sizeof line, "  %-22s %8" PRId64 " %s\n", w.name.c_str(), w.default_num,
                  w.unit);
    listing += line;
  }
  CLI::App app{"The benchmark of the per-entity store: named workloads, medians over runs, the "
               "store's bars and the disk's ceilings.",
               "store_bench"};
  app.footer(listing);
  app
    .add_option("--benchmarks", o.benchmarks,
                "comma-separated workloads (default: all, in the order below)")
    ->delimiter(',')
    ->check(CLI::IsMember(names));
  app.add_option("--num", o.num, "items per run for every chosen workload (default: per workload)")
    ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}));
  app.add_option("--runs", o.runs, "runs per workload; the median and min/max are reported")
    ->capture_default_str()
    ->check(CLI::Range(1, 1'000'000));
  app.add_option("--data", o.data,
                 "directory for the files (default: a fresh temp dir, removed "
                 "after)");
  int keep = 0;
  app
    .add_option("--keep_files", keep,
                "1: create and reopen runs keep their entity files, and a temp dir is not "
                "removed (a server never deletes entity files; on ext4 without a journal, "
                "deleted inodes slow every later creation for minutes)")
    ->check(CLI::Range(0, 1));
  app
    .add_option("--spares", o.spares,
                "spare entity files kept ready for create_* (0: every creation writes and "
                "syncs its own file)")
    ->capture_default_str()
    ->check(CLI::Range(0, 1'000'000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  o.keep_files = keep != 0;
  return o;
}

run_result run_once(const workload& w, const context& base, int run) {
  context c = base;
  c.run = run;
  if (c.num == 0)
    c.num = w.default_num;
  return w.run(c);
}

summary summarize(const workload& w, const std::vector<run_result>& runs) {
  summary s;
  s.name = w.name;
  std::vector<double> txn_rates, p50s, p99s;
  for (auto& res : runs) {
    s.items_per_run = res.items;
    double secs = std::max(res.seconds, 1e-9);
    s.rates.push_back(static_cast<double>(res.items) / secs);
    txn_rates.push_back(static_cast<double>(res.txns) / secs);
    p50s.push_back(percentile(res.lat_us, 0.50));
    p99s.push_back(percentile(res.lat_us, 0.99));
  }
  s.rate_med = median(s.rates);
  s.rate_min = *std::min_element(s.rates.begin(), s.rates.end());
  s.rate_max = *std::max_element(s.rates.begin(), s.rates.end());
  s.txn_rate_med = median(txn_rates);
  s.p50_us = median(p50s);
  s.p99_us = median(p99s);
  return s;
}

void print_line(const workload& w, const summary& s) {
  std::printf("%-21s: %10.3f micros/op %11.0f %s/s [%.0f .. %.0f]", s.name.c_str(),
              1e6 / s.rate_med, s.rate_med, w.unit, s.rate_min, s.rate_max);
  if (w.txn_unit)
    std::printf("  %9.0f %s/s", s.txn_rate_med, w.txn_unit);
  std::printf("  p50 %.1f us  p99 %.1f us\n", s.p50_us, s.p99_us);
  std::fflush(stdout);
}

void print_bars(const std::map<std::string, summary>& done) {
  bool header = false;
  auto head = [&] {
    if (!header)
      std::printf("the store's bars and the disk's ceilings:\n");
    header = true;
  };
  for (const char* mode : {"full", "normal"}) {
    auto a = done.find(std::string("append1000_") + mode);
    auto t = done.find(std::string("raw_twin1000_") + mode);
    if (a == done.end() || t == done.end())
      continue;
    head();
    std::vector<double> ratios; // one per round: the two runs were made side by side
    for (size_t i = 0; i < a->second.rates.size(); ++i)
      ratios.push_back(a->second.rates[i] / t->second.rates[i]);
    double ratio = median(ratios);
    std::printf("  append1000_%-6s %9.0f facts/s vs raw_twin1000_%-6s %9.0f rows/s: ratio %.2f "
                "[%.2f .. %.2f] (bar >= 0.50) %s\n",
                mode, a->second.rate_med, mode, t->second.rate_med, ratio,
                *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()), ratio >= 0.5 ? "PASS" : "MISS");
  }
  for (const char* mode : {"full", "normal"}) {
    auto a = done.find(std::string("append1000_") + mode);
    auto t = done.find(std::string("raw_twin1000_") + mode);
    auto r = done.find(std::string("raw_schema1000_") + mode);
    if (a == done.end() || t == done.end() || r == done.end())
      continue;
    head();
    std::vector<double> ua, ut, ur; // us per fact of each round
    for (size_t i = 0; i < a->second.rates.size(); ++i) {
      ua.push_back(1e6 / a->second.rates[i]);
      ut.push_back(1e6 / t->second.rates[i]);
      ur.push_back(1e6 / r->second.rates[i]);
    }
    std::vector<double> schema_cost, code_cost;
    for (size_t i = 0; i < ua.size(); ++i) {
      schema_cost.push_back(ur[i] - ut[i]);
      code_cost.push_back(ua[i] - ur[i]);
    }
    std::printf("  breakdown %-6s us/fact: twin %.2f + schema (indexes, triggers, PRAGMAs) %.2f "
                "+ store code (hash, JSON, checks) %.2f = %.2f\n",
                mode, median(ut), median(schema_cost), median(code_cost), median(ua));
  }
  // What the disk allows, whatever the software: one fdatasync per commit of one fact.
  if (auto f = done.find("fsync28k_x64"); f != done.end()) {
    head();
    std::printf("  ceiling of append over 1,000 entities (64 callers, one fact and one sync per "
                "commit): %.0f syncs/s (fsync28k_x64; the runtime's bar: 20000 facts/s)\n",
                f->second.rate_med);
  }
  if (auto f = done.find("fsync28k"); f != done.end()) {
    head();
    std::printf("  floor of one durable append on one connection: p50 %.0f us of fdatasync "
                "(fsync28k), before any network or CPU\n",
                f->second.p50_us);
  }
  for (const char* name : {"create_full", "create_normal"}) {
    auto c = done.find(name);
    if (c == done.end())
      continue;
    head();
    std::printf("  %-14s median %.1f us per create (bar <= 1000 us) %s\n", name, c->second.p50_us,
                c->second.p50_us <= 1000 ? "PASS" : "MISS");
  }
}

} // namespace

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  auto table = all_workloads();
  std::vector<const workload*> chosen;
  if (opts.benchmarks.empty()) {
    for (auto& w : table)
      chosen.push_back(&w);
  } else {
    for (auto& name : opts.benchmarks) {
      // parse_args checked every name against the table.
      chosen.push_back(&*std::find_if(table.begin(), table.end(),
                                      [&](const workload& w) { return w.name == name; }));
    }
  }

  bool temp = opts.data.empty();
  fs::path root = opts.data;
  if (temp) {
    std::string tmpl = (fs::temp_directory_path() / "factum-bench-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      die("mkdtemp: " + std::string(std::strerror(errno)));
    root = tmpl;
  } else {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec)
      die("cannot create " + root.string() + ": " + ec.message());
  }
  context base;
  base.root = root;
  base.tag = std::to_string(::getpid()) + "-" + std::to_string(factum::now_ms());
  base.num = opts.num;
  base.keep_files = opts.keep_files;
  base.spares = opts.spares;

  std::printf("store_bench: SQLite %s, %d run%s per workload (median [min .. max]), data %s%s\n",
              sqlite3_libversion(), opts.runs, opts.runs == 1 ? "" : "s", root.c_str(),
              temp ? " (temporary)" : "");
  std::printf("latency: p50/p99 of one transaction (commit included), query or create; medians "
              "over runs\n");
  std::fflush(stdout);
  // Rounds: round r runs every chosen workload once, so that a change of load on a shared
  // machine hits all workloads alike and the ratios of the bars compare runs made side by side.
  std::vector<std::vector<run_result>> results(chosen.size());
  for (int r = 0; r < opts.runs; ++r) {
    for (size_t i = 0; i < chosen.size(); ++i)
      results[i].push_back(run_once(*chosen[i], base, r));
    if (opts.runs > 1) {
      std::fprintf(stderr, "store_bench: round %d/%d done\n", r + 1, opts.runs);
      std::fflush(stderr);
    }
  }
  std::map<std::string, summary> done;
  for (size_t i = 0; i < chosen.size(); ++i) {
    auto s = summarize(*chosen[i], results[i]);
    print_line(*chosen[i], s);
    done[chosen[i]->name] = s;
  }
  print_bars(done);
  g_query.store.reset();
  if (temp && !opts.keep_files) {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  return 0;
}
