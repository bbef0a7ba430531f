// log_applier.hpp: applies a shard's log, message by message in sequence order, to the entity
// files of a node that is not serving the shard: a follower keeping its copy warm, a node
// catching up before it serves a shard it acquired, a node rebuilding an empty or damaged disk
// (docs/cluster.md, "Replication"). The rules:
// - an epoch marker whose epoch is not older than the current one starts a new writer's era;
// - a record is applied only when it was written by the current era's writer (a record of a
//   superseded writer that still landed after a marker was never acknowledged: skipped);
// - an entity's first record carries its genesis: its replica file is built from it;
// - an image head replaces the entity's file with the image its parts hold (the log keeps none
//   of the entity's records before it); image parts are read through the head, by sequence; a
//   head whose parts are gone was replaced by a later image, which comes later in the log: the
//   entity's records are skipped until it does (awaiting_image());
// - an entity whose file cannot take a record (a gap, another history, a row that is not the
//   owner's, a record without its genesis) is diverged: its later records are skipped and the
//   caller rebuilds it from the whole log (rebuild_entity).
// Files are written without syncs as records arrive and synced all at once by finish() (one
// syncfs of their file system), before the caller records how far it applied. A plain class, one
// thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "factum/replication/shard_log.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::replication {

struct commit_record;

/// How far a node applied one shard's log, and under which writer.
struct follow_state {
  uint64_t applied = 0; ///< every message up to this sequence was taken
  int64_t epoch = 0;    ///< the era in force after it: its marker's epoch ...
  std::string writer;   ///< ... and writer id
};

/// Reads `file` (JSON: applied, epoch, writer); a missing file is the state of nothing applied.
result<follow_state> load_follow_state(const std::filesystem::path& file);
/// Writes `s` to `file` whole (a new file renamed over it, both synced).
status save_follow_state(const std::filesystem::path& file, const follow_state& s);

class log_applier {
 public:
  /// Applies to the entity files under opts.data_dir (durability, page size and the rest as
  /// `opts` says; its syncs are deferred to finish()). `only`: when set, the one entity taken.
  /// `parts` reads a message of the log by sequence (log_connection::get): an image head's
  /// parts. Without it, an entity whose image comes is diverged.
  using part_reader = std::function<result<std::optional<log_message>>(uint64_t seq)>;
  log_applier(store_options opts, follow_state start, std::optional<entity_key> only = {},
              part_reader parts = {});
  ~log_applier();

  /// Takes the next message of the log. An error stops the caller (a file could not be written
  /// or synced); a diverged entity is no error (diverged()).
  status take(const log_message& m);
  /// Syncs every file written since the last finish() and closes them.
  status finish();

  const follow_state& state() const noexcept { return state_; }
  /// Entities found diverged (their later records were skipped).
  const std::set<std::string>& diverged() const noexcept { return diverged_; }
  /// Entities whose image head came with its parts gone (a later image replaced it while this
  /// copy read): their later records are skipped until a later head comes.
  const std::set<std::string>& awaiting_image() const noexcept { return awaiting_; }
  /// Commits applied, records skipped (superseded writers, entities not taken), so far.
  uint64_t applied_commits() const noexcept { return applied_; }
  uint64_t skipped_records() const noexcept { return skipped_; }
  /// Entities written to so far.
  size_t entities_touched() const noexcept { return touched_.size(); }
  /// Images installed so far.
  uint64_t images_installed() const noexcept { return images_; }

 private:
  status take_image(const commit_record& r);
  entity_store* store_for(const entity_key& key, const std::optional<replica_genesis>& genesis,
                          status& error);
  status close_some();

  store_options opts_;
  follow_state state_;
  std::optional<entity_key> only_;
  std::map<std::string, std::unique_ptr<entity_store>> open_;
  std::set<std::string> touched_;
  std::set<std::string> diverged_;
  std::set<std::string> awaiting_;
  part_reader parts_;
  uint64_t applied_ = 0, skipped_ = 0, images_ = 0;
  bool created_ = false; ///< a file was created since the last finish()
};

/// Applies shard `k`'s log from state.applied + 1 to its last sequence now to the files under
/// opts.data_dir, and persists the state to `state_file` once the files are synced. The
/// entities found diverged, or still awaiting an image at the end, are rebuilt whole
/// (rebuild_entity). A copy however far behind
/// catches up: the only messages the log drops are an entity's records before its latest
/// image head, which holds them, and image parts.
result<follow_state> apply_shard(log_connection& c, uint32_t k, const store_options& opts,
                                 const std::filesystem::path& state_file);

/// Removes `key`'s files under opts.data_dir and builds them again from shard `k`'s whole log.
/// No file when the log has no commit of it. A read that an image replaced meanwhile (its
/// head's parts gone) is read again, a few times at most (UNAVAILABLE after them).
status rebuild_entity(log_connection& c, uint32_t k, const entity_key& key,
                      const store_options& opts);

} // namespace factum::replication
