// store_owners.cpp: the owner epochs of cluster mode (see entity_store.hpp, "ownership"):
// claiming an entity file for a node under an epoch, the check that every write transaction of
// a store holding a claim runs, and the reads of the owner history (listing, verify). Owned by
// the store's owner thread, like every member of entity_store. The format is specified in
// docs/storage-format.md section 15.
#include <string>
#include <string_view>
#include <vector>

#include "factum/storage/entity_store.hpp"
#include "store/schema.hpp"
#include "store/store_sql.hpp"

namespace factum {

using detail::col_text;

namespace {

owner_record read_owner(sqlite3_stmt* row) {
  return {sqlite3_column_int64(row, 0), col_text(row, 1), sqlite3_column_int64(row, 2),
          sqlite3_column_int64(row, 3)};
}

std::string holder(const owner_record& o) {
  return std::to_string(o.epoch) + " (node " + o.node + ")";
}

} // namespace

// -- claims -------------------------------------------------------------------------------------

status entity_store::claim_owner(int64_t epoch, std::string_view node) {
  return take_ownership(epoch, node, false);
}

status entity_store::take_ownership(int64_t epoch, std::string_view node, bool release_pending) {
  if (epoch <= 0)
    return {errc::invalid_argument, "owner epoch must be > 0, got " + std::to_string(epoch)};
  if (node.empty() || node.size() > 255)
    return {errc::invalid_argument, "owner node must be 1 to 255 bytes"};
  if (auto st = check_writable(); !st)
    return st;
  if (in_batch_)
    return {errc::internal, "claim_owner inside a batch: a claim commits on its own"};
  if (schema_version_ < schema::owners_version)
    return {errc::invalid_argument, path_.string() + " has schema version " +
                                      std::to_string(schema_version_) +
                                      ", which keeps no owner history (version " +
                                      std::to_string(schema::owners_version) + " does)"};
  if (auto st = exec_cached("BEGIN IMMEDIATE"); !st)
    return st;
  chain_mark before{last_seq_, head_hash_};
  auto undo = [&](status st) {
    if (!sqlite3_get_autocommit(db_)) // a failed COMMIT may have rolled back already
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    last_seq_ = before.seq;
    head_hash_ = before.hash;
    return st;
  };
  auto now = current_owner();
  if (!now)
    return undo(now.error());
  if (now->epoch > epoch || (now->epoch == epoch && now->node != node))
    return undo({errc::not_owner, "entity " + key_.to_string() + " is owned under epoch " +
                                    holder(*now) + "; the claim under epoch " +
                                    std::to_string(epoch) + " by node " + std::string(node) +
                                    " is refused: another node owns the entity now"});
  // The chain head as the file has it: another owner may have appended since this store last
  // wrote (a store that was fenced and claims again).
  if (auto st = load_head(); !st)
    return undo(st);
  bool raise = now->epoch < epoch;
  if (raise)
    if (auto st = step_bound("INSERT INTO owners(epoch, node, first_seq, claimed_ms) "
                             "VALUES (?, ?, ?, ?)",
                             "claim owner", epoch, node, last_seq_ + 1, now_ms());
        !st)
      return undo(st);
  int64_t released = 0;
  if (release_pending) {
    auto st = schema_version_ >= schema::journal_version
                ? step_bound(schema::release_unjournaled_sql, "release pending keys")
                : step_bound(schema::release_pending_sql, "release pending keys");
    if (!st)
      return undo(st);
    released = sqlite3_changes(db_);
  }
  if (auto st = stamp_capture(); !st) {
    collect_capture(false);
    return undo(st);
  }
  if (auto st = exec_cached("COMMIT"); !st) {
    collect_capture(false);
    return undo(st);
  }
  collect_capture(true);
  // Durable before the owner serves: a deferred-sync commit does not sync by itself (sync() is
  // a no-op otherwise; durability full synced in the COMMIT). A claim whose sync failed left
  // its row committed: a later claim of the same epoch (no new row) syncs it first.
  if (raise || released > 0 || claim_unsynced_) {
    claim_unsynced_ = true;
    if (auto st = sync(); !st)
      return st;
    claim_unsynced_ = false;
  }
  owner_epoch_ = epoch;
  owner_node_ = std::string(node);
  fenced_ = false;
  released_on_open_ += released;
  return status::ok();
}

// -- the check of a write transaction -----------------------------------------------------------

status entity_store::check_owner() {
  // On every write transaction of a claimed store: one cached statement, no bindings to clear
  // (about 0.17 us; docs/storage-format.md section 15 has the measurements).
  auto st = prepare("SELECT epoch FROM owners ORDER BY epoch DESC LIMIT 1");
  if (!st)
    return fail(sqlite3_errcode(db_), "prepare the owner check");
  int rc = sqlite3_step(st);
  int64_t epoch = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_reset(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return fail(rc, "check the owner epoch");
  if (epoch == owner_epoch_)
    return status::ok();
  fenced_ = true;
  ++fenced_writes_;
  auto now = current_owner();
  std::string file_owner = now ? holder(*now) : std::to_string(epoch);
  std::string why = epoch > owner_epoch_
                      ? ": another node owns the entity now"
                      : ": the owner history went back behind the store's back (a restored file?)";
  return {errc::not_owner, "entity " + key_.to_string() + ": the file's owner epoch is " +
                             file_owner + ", this store claimed " + std::to_string(owner_epoch_) +
                             why + "; the write is refused"};
}

status entity_store::refuse_fenced() {
  ++fenced_writes_;
  return {errc::not_owner, "entity " + key_.to_string() + ": a write of this store found the " +
                             "file claimed under an epoch other than its claim " +
                             std::to_string(owner_epoch_) + " (node " + owner_node_ +
                             "): another node owns the entity now; the write is refused"};
}

// -- reads --------------------------------------------------------------------------------------

result<owner_record> entity_store::current_owner() {
  owner_record o;
  auto found =
    read_row("SELECT epoch, node, first_seq, claimed_ms FROM owners ORDER BY epoch DESC LIMIT 1",
             "read the owner epoch", [&](sqlite3_stmt* row) { o = read_owner(row); });
  if (!found)
    return found.error();
  return o;
}

result<std::vector<owner_record>> entity_store::owners() {
  std::vector<owner_record> out;
  if (schema_version_ < schema::owners_version)
    return out;
  auto st = read_rows("SELECT epoch, node, first_seq, claimed_ms FROM owners ORDER BY epoch",
                      "list owners", [&](sqlite3_stmt* row) { out.push_back(read_owner(row)); });
  if (!st)
    return st;
  return out;
}

result<std::vector<std::string>> entity_store::owner_history_problems(int64_t last_seq,
                                                                      int64_t& owner_epoch) {
  std::vector<std::string> problems;
  owner_epoch = 0;
  if (schema_version_ < schema::owners_version)
    return problems;
  auto rows = owners(); // in epoch order, which is rowid order: epoch is the rowid
  if (!rows)
    return rows.error();
  const owner_record* prev = nullptr;
  for (auto& o : *rows) {
    auto at = "owners: epoch " + std::to_string(o.epoch);
    if (o.epoch <= 0 || (prev && o.epoch <= prev->epoch))
      problems.push_back(at + " does not follow the epochs before it");
    if (o.node.empty())
      problems.push_back(at + " names no node");
    if (o.first_seq < 1)
      problems.push_back(at + " starts at seq " + std::to_string(o.first_seq));
    else if (prev && o.first_seq < prev->first_seq)
      problems.push_back(at + " starts at seq " + std::to_string(o.first_seq) + ", before epoch " +
                         std::to_string(prev->epoch) + " (seq " + std::to_string(prev->first_seq) +
                         ")");
    if (o.first_seq > last_seq + 1)
      problems.push_back(at + " starts at seq " + std::to_string(o.first_seq) +
                         ", past the last fact (" + std::to_string(last_seq) +
                         "): facts are missing");
    prev = &o;
  }
  if (prev)
    owner_epoch = prev->epoch;
  return problems;
}

} // namespace factum
