// factum/storage/entity_store.hpp: one entity's SQLite database. Not thread-safe: one owner at
// a time (the entity's actor, or a storage thread it hands the store to while it waits); never
// two threads at once.
//
// No public header includes <sqlite3.h>: this one, alarm_index.hpp and tenant_index.hpp only
// declare SQLite's types. The files that include it are in storage/src (store_sql.hpp, for the
// store's files; alarm_index.cpp; tenant_index.cpp; entity_image.cpp, which builds the template
// files; wal_vfs.cpp and ofd_file.cpp, factum's VFS), bench/store_bench.cpp (its plain SQLite
// workloads) and four tests: tests/storage/store_test.cpp, tests/storage/ofd_lock_test.cpp,
// tests/inspect/support.hpp and tests/reliability/faults_test.cpp (SQLite's result codes for
// the fault seam, raw SQL and SQLite's own locks on files behind the store's back).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/error/status.hpp"
#include "factum/storage/durability.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/fact_ids.hpp"
#include "factum/storage/records.hpp"
#include "factum/version.hpp"

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_session;

namespace factum {

class spare_pool;

namespace detail {
class wal_archiver;
/// What SQLite's WAL hook tells the store after each commit (entity_store.cpp).
struct wal_counts {
  int frames = 0;               ///< frames not yet checkpointed (wal_frames())
  int64_t mx = 0;               ///< frames in the WAL, the last commit's included
  bool committed = false;       ///< the hook ran since the archive last shipped
  bool auto_checkpoint = false; ///< checkpoint at 1,000 frames, as SQLite's own hook does
};
} // namespace detail

/// Options for opening an entity store. Every default is the production default.
struct store_options {
  /// Root of all entity files (entities/ lives below it). Required.
  std::filesystem::path data_dir;
  /// Commit durability. Default: full.
  durability mode = durability::full;
  /// Page cache per connection, in KiB (SQLite cache_size = -N). Default 256: thousands of
  /// entities stay open at once, so the default 2 MiB of SQLite would be too much.
  int cache_kib = 256;
  /// How long a write waits for a lock held by another connection, ms. Default 5000.
  int busy_timeout_ms = 5000;
  /// Open read-only (SQLite mode=ro): never creates, migrates or writes. Default false.
  bool read_only = false;
  /// With read_only: open with SQLite immutable=1 (no locks, no -wal/-shm created). Only for a
  /// file that no process writes and whose -wal is empty or absent (refused otherwise: SQLite
  /// would not read it), e.g. a copy. Default false.
  bool immutable = false;
  /// Create the file (and its directories) when missing. Ignored when read_only. Default true.
  bool create_if_missing = true;
  /// Highest schema version to migrate to; 0 means the current one. Tests use it to build
  /// files of an older schema.
  int target_schema_version = 0;
  /// Deferred sync (durability full only): commit() writes the WAL without fsync and sync()
  /// (callable from another thread) makes every earlier commit durable, so that a caller can
  /// run the next transaction while the previous one is being synced (pipelined group
  /// commit). Automatic checkpoints are off; call checkpoint() when wal_frames() grows.
  /// Default false: commit() itself is durable.
  bool defer_sync = false;
  /// SQLite's automatic checkpoint: inside the commit that takes the WAL past 1,000 frames, on
  /// the committing thread, with its syncs (durability normal syncs only there). false: the
  /// owner checkpoints (checkpoint(), checkpoint_concurrently()) when wal_frames() grows, so
  /// that no commit ever waits on the disk. defer_sync implies false. Default true.
  bool auto_checkpoint = true;
  /// A close leaves the -wal file as it is, frames and all, when it is at most this many KiB
  /// (SQLite's checkpoint at close skipped): the frames are as durable as the commits that
  /// wrote them, the next open reads them, and a later close or checkpoint folds them into the
  /// database. Such a close costs no sync (a checkpoint costs two) and no database write. A
  /// larger -wal is checkpointed and truncated to 0 bytes at the close. 0: every close
  /// checkpoints. Default 256 (~60 frames of 4 KiB: at most that much disk per closed entity).
  int wal_kept_on_close_kib = 256;
  /// A -wal file that a commit makes longer (once it is past a quarter of this) is grown ahead
  /// with zeros to the next multiple of this many KiB, in that commit: the commits after it
  /// overwrite blocks the file has, and their syncs write no inode or allocation (on ext4 here
  /// that halves what a small commit's fdatasync costs). A connection that grew its -wal cuts
  /// the zeros off again when its close keeps the file. 0: a -wal grows by its frames only.
  /// 0..65536; default 256.
  int wal_grow_kib = 256;
  /// Page size, in bytes, of a file this open creates (a power of two from 512 to 65536); a
  /// file keeps the size it was made with, which SQLite reads from its header. Smaller pages
  /// make small commits cheaper (a one-fact commit writes 7 pages: with 1 KiB pages its WAL
  /// frames are 7 KiB instead of 28 KiB) and large ones dearer (more pages per fact, more
  /// b-tree levels). A spare is used only when its pool makes this size. Default 4096.
  int page_size = 4096;
  /// Caps the file size (PRAGMA max_page_count); 0 = no cap. For disk-full tests.
  int64_t max_page_count = 0;
  /// Capture each committed transaction's changes for the replicated log (take_captured()):
  /// every write transaction of this store also stamps the entity's next replicated commit
  /// number into meta. Refused (CONFLICT) on a file that has facts but no replicated commit:
  /// its history is not in any log. Not with read_only. Default false.
  bool capture_changes = false;
  /// Fault injection (tests only); empty in production.
  fault_hook fault;
  /// Entity files made ahead of need (spare_pool.hpp) for this data_dir: a creation renames one
  /// into place and claims it (one small WAL transaction) instead of writing and fdatasyncing a
  /// new file. Empty (the default): every creation writes its own file. The runtime starts one
  /// pool per data directory (runtime_config::spare_files).
  std::shared_ptr<spare_pool> spares;
  /// Cluster mode: the open claims the entity under this epoch (> 0, the revision of the node's
  /// grant of the entity's shard) for owner_node, as claim_owner() does, once the file is
  /// migrated and before the open writes anything of its own: a file claimed under a newer
  /// epoch fails the open with not_owner and keeps the idempotency keys pending in it (they
  /// belong to its live owner; an open without a claim releases them: docs/storage-format.md
  /// section 3, rule 5, and section 15). 0 (the default): the open claims nothing, and the store
  /// checks nothing until claim_owner() (single node). Not with read_only.
  int64_t owner_epoch = 0;
  /// The node claiming with owner_epoch: 1 to 255 bytes; required with it.
  std::string owner_node;
  /// Continuous archive (point-in-time recovery): the root directory of the archives. Each
  /// commit's WAL bytes are copied into the entity's archive (wal_archive.hpp) right after the
  /// commit, and made durable with the commit's sync. Empty (the default): no archive. Not
  /// with read_only.
  std::filesystem::path archive_dir;
  /// SQLite VFS for every connection the store opens. Empty (the default): factum's own,
  /// entity_store::default_vfs(), which passes everything to SQLite's "unix" VFS except that a
  /// commit's WAL writes reach the kernel as one write. Tests name a wrapper of it here.
  std::string vfs;
};

/// Whether `page_size` is one an entity file may have (store_options::page_size): a power of
/// two from 512 to 65536, as SQLite allows.
inline bool valid_page_size(int page_size) noexcept {
  return page_size >= 512 && page_size <= 65536 && (page_size & (page_size - 1)) == 0;
}

/// ok when valid_page_size(page_size), else invalid_argument naming the size: the one check of
/// the store options, the templates of new files and the runtime's entity types.
inline status check_page_size(int page_size) {
  if (valid_page_size(page_size))
    return status::ok();
  return {errc::invalid_argument,
          "page size " + std::to_string(page_size) + " is not a power of two from 512 to 65536"};
}

/// The schema version this build writes (PRAGMA user_version): the entity file format of
/// factum/version.hpp.
inline constexpr int current_schema_version = entity_file_format;

// -- begin_key's records (the others: records.hpp) ----------------------------------------------

/// What begin_key found.
enum class key_outcome {
  fresh,     ///< unknown (or expired): now pending in the open transaction; run the call
  in_flight, ///< pending in this activation: answer 409
  completed, ///< completed with the same fingerprint: replay `response`
  failed,    ///< failed terminally with the same fingerprint: replay the stored error
  mismatch,  ///< known with a different fingerprint: answer 422
};

struct key_begin_result {
  key_outcome outcome = key_outcome::fresh;
  idempotency_record record; ///< the stored record (for completed/failed/in_flight/mismatch)
};

// -- replication --------------------------------------------------------------------------------

/// One committed transaction of an entity, as its replicated log carries it
/// (store_options::capture_changes; docs/storage-format.md, "The replicated log").
struct captured_commit {
  int64_t number = 0;    ///< the entity's replicated commit number: 1, 2, ... without a gap
  std::string changeset; ///< the transaction's row changes: an SQLite session changeset
  std::string id;        ///< random, 16 hex digits: tells two commits of one number apart
};

/// What a replica of an entity starts from before its first commit: the meta rows of the
/// owner's file (key, value), by key, as its capture began.
struct replica_genesis {
  std::vector<std::pair<std::string, std::string>> meta;
  int page_size = 0; ///< of the owner's file; 0: store_options::page_size
};

/// An entity's whole file at one replicated commit: what lets its log drop the records before
/// that commit (docs/storage-format.md, "The replicated log").
struct replica_image {
  int64_t number = 0; ///< the last replicated commit the file holds
  std::string id;     ///< that commit's id
  std::string bytes;  ///< the database, as one file (no -wal)
};

// -- the store ----------------------------------------------------------------------------------

/// One entity's database: facts, idempotency keys, alarms, dead letters, breakers, configs.
///
/// Writes join the open batch transaction, opening one when none is open; nothing is durable
/// until commit(). Inside a batch, begin_turn()/end_turn() bracket one turn with a savepoint so
/// that a failing turn rolls back its own writes and keeps the others (write coalescing).
class entity_store {
 public:
  // -- lifecycle --

  /// Opens (and creates, migrates) the store of `key` under options.data_dir. An open releases
  /// every key left pending by an activation that is gone (one that claims the entity,
  /// store_options::owner_epoch, only once its claim holds).
  static result<std::unique_ptr<entity_store>> open(const store_options& opts,
                                                    const entity_key& key);

  /// Opens an existing entity file by path (the inspection tool). The key is read from the file.
  static result<std::unique_ptr<entity_store>> open_file(const std::filesystem::path& file,
                                                         const store_options& opts);

  /// Copies the entity file `file` and its -wal (when there is one) to `to` and `to`-wal, as
  /// one committed state, also while a process of factum has the entity open and commits,
  /// checkpoints or restarts its WAL; the copy then opens with open_file (read_only). Holds a
  /// read lock on the file's copy byte meanwhile, which makes checkpoints wait their turn
  /// (they skip, never block: docs/storage-format.md section 2); nothing of the file changes.
  /// IO_ERROR when a file cannot be read or written, BUSY when the WAL restarted during each of
  /// 100 copies.
  static status copy_files(const std::filesystem::path& file, const std::filesystem::path& to);
  /// Brings a copy that copy_files made at `to` (and closed since) up to the committed state of
  /// `file` now, copying the database file again only when it must: while `file`'s -wal is the
  /// generation the copy's holds, only what follows the copy's last whole commit is copied
  /// (commits since; a tail the copy caught half-written), whatever checkpoints ran meanwhile.
  /// After a WAL restart, with no WAL, or without a copy, it makes a whole copy (copy_files).
  /// True when it made a whole copy. Errors as copy_files.
  static result<bool> refresh_copy(const std::filesystem::path& file,
                                   const std::filesystem::path& to);

  /// Builds at `out` (which must not exist) a new entity file of `key` that starts from the
  /// state of the entity file `source` (closed, with no -wal, at this build's schema version):
  /// its idempotency keys but the pending ones (calls in flight at the source), alarms,
  /// schedules, dead letters, breakers, configs and the tenant's own tables; not its facts,
  /// owner claims, journal or outbox cursors. The new log's first fact is `first` (where the
  /// file came from). Closed, checkpointed and fdatasynced; its directory is the caller's to
  /// sync. CONFLICT when `out` exists; an error leaves no file at `out`.
  static status fork_file(const std::filesystem::path& source, const entity_key& key,
                          const std::filesystem::path& out, const fact_draft& first,
                          const store_options& opts);

  /// Rolls back an uncommitted batch and closes the file.
  ~entity_store();

  /// Name of factum's SQLite VFS (registered on first use; see store_options::vfs).
  static const char* default_vfs();

  entity_store(const entity_store&) = delete;
  entity_store& operator=(const entity_store&) = delete;

  const entity_key& key() const noexcept { return key_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  int schema_version() const noexcept { return schema_version_; }
  bool read_only() const noexcept { return opts_.read_only; }

  /// Keys that open() found pending and released (left by a dead activation).
  int64_t released_on_open() const noexcept { return released_on_open_; }
  /// Whether this open claimed an unclaimed file (a spare put in place by this open or by an
  /// earlier one that crashed before claiming it; spare_pool.hpp).
  bool claimed_on_open() const noexcept { return claimed_; }

  // -- replication (store_changes.cpp) --

  /// capture_changes: the transactions committed since the last call, oldest first. An error
  /// when a committed transaction's changes could not be read (the store must not go on: its
  /// file holds a commit its log will never see).
  result<std::vector<captured_commit>> take_captured();
  /// The number of the last replicated commit in this file (0: none). Read at the open of a
  /// store that captures or is read-only; kept by commits and applies.
  int64_t replicated_commit() const noexcept { return repl_commit_; }
  /// The id of that commit (captured_commit::id; empty: none).
  const std::string& replicated_commit_id() const noexcept { return repl_id_; }
  /// Reads the file's last replicated commit again (replicated_commit() and its id follow): a
  /// replica's, whose open does not read it.
  status read_replicated_commit() { return load_commit_mark(); }
  /// The last replicated commit the file held when this open began (before a claim or a
  /// release of keys the open committed), and its id.
  int64_t opened_at_commit() const noexcept { return open_commit_; }
  const std::string& opened_at_commit_id() const noexcept { return open_commit_id_; }
  /// The meta rows a replica of this entity is built from (replica_genesis).
  result<replica_genesis> genesis();
  /// Builds the file of a replica of `key` under opts.data_dir from `g`: the file a new entity
  /// starts with, with `g`'s meta rows (CORRUPTION when they cannot be: another schema or a
  /// foreign history). CONFLICT when the entity has a file there. Synced, file and directory,
  /// unless `sync` is false (a bulk rebuild that syncs the whole file system once at its end).
  static status create_replica(const store_options& opts, const entity_key& key,
                               const replica_genesis& g, bool sync = true);
  /// Applies `c` to this replica, in one transaction synced per the store's durability: ok
  /// and nothing done when it is applied already (c.number <= replicated_commit()); CONFLICT
  /// when commits are missing before it (a gap, or out of order); CORRUPTION when the replica
  /// diverged: it holds another commit of c's number, or a row c changes is not as the owner's
  /// was (the meta row of the commit before c among them), or c does not carry its number.
  /// The store's cached chain head follows; reopen the store before serving from it.
  status apply_captured(const captured_commit& c);
  /// The whole database as it stands after its last commit, with the replicated commit it
  /// holds last. INTERNAL inside a batch (its writes are not committed). Copies every page: as
  /// much memory as the file's size, for the call.
  result<replica_image> image();
  /// Puts `img` in place as the file of `key` under opts.data_dir, replacing any (its -wal and
  /// -shm removed first): CORRUPTION when the bytes are not a database of `key` whose last
  /// replicated commit is img.number with img.id. Synced, file and directory, unless `sync` is
  /// false (a bulk apply that syncs the whole file system once). The entity must not be open.
  static status install_image(const store_options& opts, const entity_key& key,
                              const replica_image& img, bool sync = true);

  // -- transactions --

  /// True while a batch transaction is open.
  bool in_batch() const noexcept { return in_batch_; }
  /// True when the open batch holds writes not yet committed.
  bool dirty() const noexcept { return dirty_; }
  /// Opens the batch transaction explicitly (writes open it on demand).
  status begin_batch();
  /// Commits the open batch (the fsync of durability `full` happens here). A failed commit
  /// rolls the whole batch back, including the in-memory chain head.
  status commit();
  /// Rolls back the open batch.
  status rollback();
  /// With defer_sync: fdatasyncs the WAL so that every commit() that returned before this call
  /// began is durable. Thread-safe against the owner using the store at the same time (it
  /// touches only its own descriptor) and against other sync() calls, which overlap (each
  /// waits for its own fdatasync only). Without defer_sync: nothing to do.
  status sync();
  /// A sync of this store failed (or a commit failed with an I/O error): its WAL may hold
  /// writes that are not on disk, and that a later fdatasync would not write again. Marks the
  /// file (a `-unsynced` file beside it) and makes the close keep the WAL as it is, without a
  /// checkpoint; the next open() re-syncs the files (resync()) before it reads anything, so
  /// that what it then serves is durable. An error: the marker could not be made (the caller
  /// must then call resync() itself before the next open).
  status mark_unsynced();
  /// Writes every byte of the entity's -wal again and fdatasyncs it, fdatasyncs the database
  /// file and fsyncs their directory, then removes the mark of mark_unsynced(). No connection
  /// may have the file open. Ok when the entity has no file.
  static status resync(const store_options& opts, const entity_key& key);
  /// Whether this open re-synced the files first (mark_unsynced() of an earlier store).
  bool resynced_on_open() const noexcept { return resynced_; }
  /// Frames in the WAL after the last commit (0 after a checkpoint that reset it).
  int wal_frames() const noexcept { return wal_.frames; }
  /// Bytes of the -wal file on disk now, grown-ahead zeros included (one stat; 0 when there is
  /// none).
  int64_t wal_file_bytes() const { return std::max<int64_t>(wal_bytes(), 0); }
  /// Copies the WAL into the database file (PASSIVE) so the WAL can restart from its beginning.
  status checkpoint();
  /// Like checkpoint(), through a short-lived connection of its own, so that the owner keeps
  /// reading and writing meanwhile. Thread-safe against the owner: it touches only the file,
  /// whose locks SQLite holds. The WAL is synced before its frames are copied and the database
  /// after, also with defer_sync. Returns how many of the WAL's frames are now in the database.
  /// The WAL restarts at the owner's next write only if that is all of them, which commits
  /// made meanwhile prevent: a checkpoint() on the owner's connection then copies the rest.
  /// A store opened read-only: an error. SQLITE_BUSY (errc::busy) is SQLite's answer when the
  /// wal-index header is being updated at that instant (a PASSIVE checkpoint never waits):
  /// try again later.
  result<int> checkpoint_concurrently() const;
  /// Starts a turn: a savepoint in the batch (opening the batch when needed). Turns do not nest.
  status begin_turn();
  /// Ends the turn: keep (RELEASE) or undo (ROLLBACK TO) its writes.
  status end_turn(bool keep);
  bool in_turn() const noexcept { return in_turn_; }

  // -- ownership (cluster mode; docs/storage-format.md section 15) --

  /// Claims the entity for `node` (1 to 255 bytes) under `epoch` (> 0), in one BEGIN IMMEDIATE
  /// transaction of its own, made as durable as a commit of this store before this returns (with
  /// deferred sync: synced here): reads the file's owner epoch; newer than `epoch` -> not_owner
  /// (naming both epochs and the node holding the file's); equal -> ok and no new row when
  /// `node` is the node that claimed it (a re-activation), else not_owner; older -> appends
  /// (epoch, node, last seq + 1, now) to the owner history. Then the store holds `epoch` as its
  /// claim (owner_epoch()), which every later write transaction checks, is no longer fenced(),
  /// and has its chain head read again from the file (another owner may have appended since
  /// this store last wrote). A failure leaves the store's claim and chain head as they were;
  /// inside a batch: internal; a store opened read-only: read_only; a file older than schema
  /// version 6 (opened with target_schema_version): invalid_argument; another connection holding
  /// the write lock past busy_timeout_ms: busy. With deferred sync a failed sync may leave the
  /// row committed but not durable: the caller handles it as any failed sync (mark_unsynced()).
  status claim_owner(int64_t epoch, std::string_view node);
  /// The epoch this store claimed (claim_owner(), or store_options::owner_epoch at the open); 0
  /// when none: then no write transaction checks anything.
  int64_t owner_epoch() const noexcept { return owner_epoch_; }
  /// A write transaction of this store found the file claimed under another epoch (another node
  /// owns the entity now): every later write fails with not_owner without touching the file,
  /// until a claim_owner() succeeds. Reads go on.
  bool fenced() const noexcept { return fenced_; }
  /// Write transactions refused with not_owner since the open (the first, found in the file,
  /// and each later one refused without looking).
  int64_t fenced_writes() const noexcept { return fenced_writes_; }
  /// The file's owner history, oldest (lowest epoch) first; empty when it was never claimed or
  /// has no history (a file older than schema version 6 opened read-only).
  result<std::vector<owner_record>> owners();

  // -- facts --

  /// Appends one fact to the open batch; returns it with seq, fact_id, prev_hash and hash.
  result<fact> append(const fact_draft& draft);
  /// Appends several facts in order (one batch).
  result<std::vector<fact>> append_many(const std::vector<fact_draft>& drafts);
  /// Facts matching `filter`, in seq order (or newest first). With `more`, says whether
  /// matching facts were left out because the page was full (its limit, or its max_bytes).
  result<std::vector<fact>> query(const fact_filter& filter, bool* more = nullptr);
  /// One fact by seq or by fact_id; NOT_FOUND when absent.
  result<fact> get(int64_t seq);
  result<fact> get(std::string_view fact_id);
  /// Seq of the newest fact (0 when empty) and its hash (genesis when empty).
  int64_t last_seq() const noexcept { return last_seq_; }
  const std::string& head_hash() const noexcept { return head_hash_; }
  /// The prefixes the file's fact ids are numbered under (empty in a file kept at a schema
  /// version before 4).
  const fact_id_history& fact_ids() const noexcept { return fact_ids_; }
  /// A rollback's rebuilt file (before anything is appended to it): the facts after
  /// last_seq() get ids under a new prefix, so that no id of a fact rolled away is ever given
  /// again. `known`: the fact_ids() of the file the rollback replaces. One commit; not inside
  /// a batch.
  status renew_fact_id_prefix(const fact_id_history& known);
  /// Walks the chain: contiguous seq, prev_hash links, recomputed hashes, immutability
  /// triggers present, schema version.
  result<verify_report> verify();

  // -- idempotency keys --

  /// Looks `key` up; when unknown or expired, inserts it as pending (in the open batch).
  /// ttl_ms == 0 keeps the key until purged.
  result<key_begin_result> begin_key(std::string_view key, std::string_view fingerprint,
                                     int64_t ttl_ms, int64_t now);
  /// Classifies `key` like begin_key but writes nothing: fresh means "begin_key would insert".
  result<key_begin_result> peek_key(std::string_view key, std::string_view fingerprint,
                                    int64_t now);
  /// Stores a finished key (completed or failed) in one statement, replacing a pending row:
  /// the fast path of a call that never waited, so never needed a pending row on disk.
  status record_key(std::string_view key, key_status status, std::string_view fingerprint,
                    std::string_view response, int64_t ttl_ms, int64_t now);
  /// Marks a pending key completed with its response, in the open batch.
  status complete_key(std::string_view key, std::string_view response);
  /// Marks a pending key failed (terminal) with its stored error response.
  status fail_key(std::string_view key, std::string_view response);
  /// Removes a pending key (a retryable failure): a retry runs the call again.
  status release_key(std::string_view key);
  /// Deletes keys whose expiry is at or before `now`, with their journals; returns how many.
  /// A pending key with a journal (a call interrupted at an await, which a retry resumes) expires
  /// too: nothing else releases it.
  result<int64_t> purge_expired_keys(int64_t now);
  /// One key, NOT_FOUND when absent.
  result<idempotency_record> get_key(std::string_view key);
  /// Keys, newest first.
  result<std::vector<idempotency_record>> list_keys(int64_t limit);
  /// A page of keys in key order (bytewise): at most `limit` (>= 1) after the key `after`
  /// (empty: from the first); `more` says whether keys follow the page.
  result<std::vector<idempotency_record>> list_keys_after(std::string_view after, int64_t limit,
                                                          bool& more);
  /// The earliest expiry among stored keys, if any.
  result<std::optional<int64_t>> next_key_expiry();

  // -- the journal of durable execution (schema version 7) --

  /// Writes step `s` (replacing a row of the same key and step): its start, or its start again.
  status put_journal_step(const journal_step& s);
  /// Completes step `step` of `key` with `result` (JSON text) at `at_ms`.
  status finish_journal_step(std::string_view key, int64_t step, std::string_view result,
                             int64_t at_ms);
  /// Step `step` of `key` ended without a result at `at_ms` (it failed retryably or in a dead
  /// letter, and runs again): a row without a result and without an end was cut off instead.
  status end_journal_step(std::string_view key, int64_t step, int64_t at_ms);
  /// Every step of `key`, in step order (empty when none, or in a file older than version 7).
  result<std::vector<journal_step>> journal(std::string_view key);
  /// The journals in the file, newest first.
  result<std::vector<journal_summary>> list_journals(int64_t limit);
  /// The keys of the journals whose key starts with `prefix` (at most `limit`, in key order).
  result<std::vector<std::string>> journal_keys(std::string_view prefix, int64_t limit);
  /// Deletes the journal of `key`: its steps after `after_step` (0: all of them).
  status purge_journal(std::string_view key, int64_t after_step = 0);

  // -- alarms --

  /// Sets or replaces the alarm `name`.
  status set_alarm(const alarm_record& alarm);
  /// Cancels `name`; ok when absent.
  status cancel_alarm(std::string_view name);
  result<std::vector<alarm_record>> list_alarms();
  /// The alarm due first, if any.
  result<std::optional<alarm_record>> next_alarm();
  result<alarm_record> get_alarm(std::string_view name);

  // -- schedules (from schema version 8; the runtime keeps their alarms in step) --

  /// Sets or replaces the schedule `name`.
  status put_schedule(const schedule_record& s);
  /// Deletes `name`; ok when absent.
  status delete_schedule(std::string_view name);
  /// One schedule, NOT_FOUND when absent.
  result<schedule_record> get_schedule(std::string_view name);
  /// Every schedule, by name.
  result<std::vector<schedule_record>> list_schedules();

  // -- paused alarms and schedules (from schema version 10: a fork's, store_fork.cpp) --

  /// The alarms and schedules waiting paused, by due time / name (they never fire).
  result<std::vector<alarm_record>> list_paused_alarms();
  result<std::vector<schedule_record>> list_paused_schedules();
  /// Takes every paused alarm and schedule out of the paused tables (in the open batch): what
  /// was paused, for the caller to set again (the runtime, keeping its timers in step).
  result<paused_state> resume_paused();

  // -- outbox cursors (from schema version 9; store_outbox.cpp) --

  /// Sets or replaces the cursor of `c.sink`.
  status put_outbox_cursor(const outbox_cursor& c);
  /// The cursor of `sink`; one at seq 0 when the entity has none (nothing relayed yet).
  result<outbox_cursor> get_outbox_cursor(std::string_view sink);
  /// Every cursor, by sink.
  result<std::vector<outbox_cursor>> list_outbox_cursors();
  /// Facts of `type` after `after_seq`: how many, and the timestamp of the first (0 if none).
  result<std::pair<int64_t, int64_t>> count_facts_after(std::string_view type, int64_t after_seq);

  // -- dead letters --

  /// Inserts or replaces a dead letter by id (its moves are recorded as facts by the caller).
  status put_dead_letter(const dead_letter_record& dl);
  result<dead_letter_record> get_dead_letter(std::string_view id);
  /// Dead letters, oldest first; `status` filters when given.
  result<std::vector<dead_letter_record>> list_dead_letters(std::optional<dl_status> status,
                                                            int64_t limit);
  /// Deletes resolved/discarded/acknowledged dead letters whose retention ended.
  result<int64_t> purge_dead_letters(int64_t now);
  /// The earliest expiry among dead letters that purge_dead_letters() may delete, if any.
  result<std::optional<int64_t>> next_dead_letter_expiry();
  /// Dead letters by status and reason, breakers' states and the last fact's time: what the
  /// tenant index keeps of the entity (three small reads).
  result<entity_fleet_summary> fleet_summary();
  /// Whether a dead letter was written or purged, or note_fleet_change() called, since the
  /// last call (a rollback does not clear it): the runtime then writes the entity's fleet
  /// summary to the tenant index again. Clears it.
  bool take_fleet_change() noexcept { return std::exchange(fleet_changed_, false); }
  /// The fleet summary changes with what this turn writes (a breaker made or moved: breaker
  /// rows are written at every attempt, so put_breaker does not say so by itself).
  void note_fleet_change() noexcept { fleet_changed_ = true; }

  // -- circuit breakers --

  status put_breaker(const breaker_record& b);
  result<std::vector<breaker_record>> list_breakers();

  // -- versioned configs --

  /// Stores a new version of `config_id` (1 for the first); returns the version.
  result<int64_t> put_config(std::string_view config_id, std::string_view body_json);
  /// Version `version` of `config_id`, or the latest when version == 0.
  result<config_record> get_config(std::string_view config_id, int64_t version = 0);
  result<std::vector<config_record>> list_configs();

  // -- the tenant's own tables --

  /// Runs tenant SQL on tables whose names start with "u_" (created by the tenant). Anything
  /// that touches a system table, attaches a file or changes a pragma is refused. Bound
  /// parameters are JSON scalars. Returns the rows as a JSON array of objects.
  result<nlohmann::json> tenant_sql(std::string_view sql, const nlohmann::json& params,
                                    bool read_only);

  // -- summary --

  result<entity_info> info();

 private:
  entity_store(store_options opts, entity_key key, std::filesystem::path path);

  struct stmt_cache;
  struct chain_mark {
    int64_t seq;
    std::string hash;
  };

  status open_db();
  /// The continuous archive (store_options::archive_dir): attached at the end of an open,
  /// shipped to after each commit that wrote frames (wal_archiver.hpp).
  status attach_archive();
  void ship_to_archive();
  /// resync() of the file at `path`.
  static status resync_files(const std::filesystem::path& path, const fault_hook& fault);
  /// The name of mark_unsynced()'s marker beside the database file.
  static constexpr const char* unsynced_suffix = "-unsynced";
  /// The -wal file beside the database, and its size in bytes (-1 when there is none).
  std::filesystem::path wal_path() const;
  int64_t wal_bytes() const;
  /// opts_.vfs, or default_vfs() when empty.
  const char* vfs_name() const;
  /// Deferred sync is in effect: asked for, and durability full (store_options::defer_sync).
  bool deferred_sync() const noexcept { return opts_.defer_sync && opts_.mode == durability::full; }
  status configure();
  /// The PRAGMA synchronous statement configure() runs for this store.
  const char* synchronous_pragma() const noexcept;
  status migrate();
  /// The steps of migrate() (store_schema.cpp): an open's error for a SQLite code (CORRUPTION
  /// for a file that is no database), the file's user_version, its tables (and whether `meta`
  /// is one), the migrations from `version` to `target` in one write transaction, and the keys
  /// left pending by an activation that is gone.
  status open_error(int rc, const char* what);
  result<int> read_schema_version();
  result<int> count_tables(bool& has_meta);
  status write_migrations(int version, int target);
  result<int64_t> count_pending_keys();
  /// Writes this store's key into the meta rows of an unclaimed file (a spare renamed into
  /// place, spare_pool.hpp) in one WAL transaction without a sync, and sets `owner` to the key
  /// the file names afterwards. Called from migrate() outside its read transaction; a file
  /// claimed meanwhile by another connection is left as it is (`owner` is then its key).
  status claim(entity_key& owner);
  status load_head();
  /// Takes the fact id prefix and the legacy boundary as read from meta (empty: absent), and
  /// checks the prefix (schema version 4; older versions: every id is old-style).
  status use_fact_id_meta(const std::string& prefix, const std::string& legacy_until,
                          const std::string& history);
  /// A SQL text fixed at compile time: a string literal, or literals joined into a `static
  /// constexpr` array (sql_concat in store_sql.hpp). Its prepared statement is cached by the
  /// text's address (it names that one text for the life of the process), so a lookup compares
  /// pointers instead of hashing the text (the per-call statements of a turn: the key's lookup
  /// and record, the fact's insert, the savepoint). consteval: an array whose address is not a
  /// constant expression, such as a text built at run time, does not compile here
  /// (prepare_text takes those).
  struct sql_literal {
    template <std::size_t N> consteval sql_literal(const char (&s)[N]) noexcept : text(s) {}
    template <std::size_t N>
    consteval sql_literal(const std::array<char, N>& s) noexcept : text(s.data()) {}
    const char* text;
  };
  status exec(const char* sql);
  status exec_cached(sql_literal sql);
  sqlite3_stmt* prepare(sql_literal sql);
  /// A SQL text built at run time (fact queries with optional filters): cached by its text.
  sqlite3_stmt* prepare_text(const std::string& sql);
  status step_done(sqlite3_stmt* st, const char* what);
  /// Prepares `sql` (cached), binds `args` to ?1, ?2, ... (detail::bind_args in store_sql.hpp,
  /// which defines these templates) and steps it once through step_done(); reset on return.
  template <class... A> status step_bound(sql_literal sql, const char* what, const A&... args);
  /// A write of one statement: step_bound() in the open batch, opening one when none is open.
  template <class... A> status write_bound(sql_literal sql, const char* what, const A&... args);
  /// A read of at most one row: steps `sql` (cached, `args` bound as by step_bound()) once;
  /// true after `row(statement)` read the row, false when there is none.
  template <class Row, class... A>
  result<bool> read_row(sql_literal sql, const char* what, Row&& row, const A&... args);
  /// A read of every row: `row(statement)` reads each row of `sql` in turn.
  template <class Row, class... A>
  status read_rows(sql_literal sql, const char* what, Row&& row, const A&... args);
  /// The owner check of a write transaction (store_owners.cpp): run by begin_batch() right after
  /// BEGIN IMMEDIATE when the store holds a claim; not_owner (and fenced_) when the file's
  /// owner epoch is no longer the claim. The caller rolls the transaction back on an error.
  status check_owner();
  /// not_owner for a write of a fenced store, counted, without touching the file.
  status refuse_fenced();
  /// claim_owner(); with `release_pending` (an open's claim, store_options::owner_epoch) it also
  /// releases the keys left pending in the file, in the claim's transaction once it holds.
  status take_ownership(int64_t epoch, std::string_view node, bool release_pending);
  /// verify()'s checks of the owner history, for a log whose last fact is `last_seq`: epochs
  /// strictly increasing, first seqs from 1 and never decreasing, none past `last_seq` + 1.
  /// Sets `owner_epoch` to the newest epoch (0 without history).
  result<std::vector<std::string>> owner_history_problems(int64_t last_seq, int64_t& owner_epoch);
  /// The newest row of the owner history (epoch 0 when there is none), in the open transaction.
  result<owner_record> current_owner();
  /// Marks a pending key `to` (completed or failed) with its response: complete_key, fail_key.
  status settle_key(std::string_view key, key_status to, std::string_view response);
  status fail(int rc, std::string_view what);
  status ensure_batch();
  status check_writable() const;
  int fault_check(const char* sql);

  store_options opts_;
  entity_key key_;
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<stmt_cache> stmts_;
  int schema_version_ = 0;
  int64_t last_seq_ = 0;
  std::string head_hash_;
  /// The prefixes of the fact ids (fact_ids.hpp): every fact id appended here is the current
  /// one + 12 hex digits of its seq (schema version 4; empty in a file kept at an older version).
  fact_id_history fact_ids_;
  /// The last seq whose fact id is old-style (random; found through the UNIQUE index that
  /// files from before version 4 keep): 0 in a file created at version 4.
  int64_t legacy_ids_until_ = 0;
  chain_mark batch_mark_;
  chain_mark turn_mark_;
  bool in_batch_ = false;
  bool in_turn_ = false;
  bool dirty_ = false;
  bool fleet_changed_ = false; // take_fleet_change()
  int64_t released_on_open_ = 0;
  bool claimed_ = false;  // this open claimed an unclaimed file
  bool unsynced_ = false; // mark_unsynced(): the close keeps the WAL unchecked
  bool resynced_ = false; // this open re-synced the files first
  uint64_t op_index_ = 0;
  detail::wal_counts wal_;
  std::unique_ptr<detail::wal_archiver> archive_; // store_options::archive_dir
  int64_t owner_epoch_ = 0;     // the claim (claim_owner); 0: none, nothing is checked
  std::string owner_node_;      // the node of the claim
  bool fenced_ = false;         // a write found the file's owner epoch past the claim
  bool claim_unsynced_ = false; // a claim committed, its sync failed: the next claim syncs
  int64_t fenced_writes_ = 0;
  struct sync_state;
  std::unique_ptr<sync_state> sync_;
  // capture_changes (store_changes.cpp): the session recording the open transaction's rows
  sqlite3_session* session_ = nullptr;
  std::vector<captured_commit> captured_; // committed, not yet taken
  std::optional<status> capture_error_;   // a commit's changes were lost: take_captured fails
  int64_t repl_commit_ = 0;               // meta replicated_commit of the file: its number
  std::string repl_id_;                   // ... and its id
  std::string stamped_id_;                // the id the open transaction stamped
  int64_t open_commit_ = 0;               // repl_commit_ when the capture started
  std::string open_commit_id_;
  int64_t stamped_ = 0; // the number the open transaction stamped, or 0
  status load_commit_mark();
  status start_capture();
  status stamp_capture();
  void collect_capture(bool committed);
  void end_capture() noexcept;
};

/// Creates `data_dir` (and its parents), `data_dir/entities` and `data_dir/runtime` where missing,
/// and, in durability full, fsyncs each directory whose entries changed (the data directory
/// itself always), so that no entity acknowledged later can lose its path to a power cut through
/// a parent that was never synced. IO_ERROR (READ_ONLY, FULL) naming the directory. Any thread.
status prepare_data_dir(const std::filesystem::path& data_dir, durability mode);

/// Every entity database file under data_dir (entities/<shard>/<digest>.db), in path order.
std::vector<std::filesystem::path> list_entity_files(const std::filesystem::path& data_dir);

/// Every non-empty write-ahead log under data_dir (entities/<shard>/<digest>.db-wal) with no
/// database file beside it, in path order. Only a .db deleted by hand leaves one; it may hold
/// that entity's last commits, and entity_store::open refuses to create the entity over it.
std::vector<std::filesystem::path> list_orphan_wals(const std::filesystem::path& data_dir);

/// The -wal beside the entity file `db_file` when it is an orphan: not empty, and `db_file`
/// absent. The -wal is looked at before the .db: a .db is always in place before its -wal, so
/// a creator of the same key that is putting its file in place is never taken for an orphan.
std::optional<std::filesystem::path> orphan_wal(const std::filesystem::path& db_file);

/// A new time-ordered id: `prefix`, 12 hex digits of now_ms(), then `random_hex` random
/// lowercase hex digits. An id of a later millisecond sorts after every id of an earlier one, so
/// an index of such ids grows at its end instead of taking a random page per insert. Any thread.
std::string time_ordered_id(std::string_view prefix, int random_hex);

} // namespace factum
