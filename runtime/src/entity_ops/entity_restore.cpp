// entity_restore.cpp: point-in-time recovery and forks on a running runtime (runtime.hpp,
// "point-in-time recovery and forks"): the bookmark for a time or a seq, an entity rolled back
// to an archived commit in place, and a new entity forked from another's state.
//
// Threads: the facade runs on the caller's thread (never a CAF worker: it waits); the file work
// on a storage thread (on_storage_thread), which checks the registry's `stopping` first. A
// rollback holds its entity in the registry from before its release until its file is in place.
#include <cerrno>
#include <cstring>

#include "entity_ops/entity_files.hpp"
#include "tenancy/tenant_quotas.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace detail {

namespace {

status need_archive(const runtime_core& c) {
  if (c.cfg.archive_dir.empty())
    return {errc::invalid_argument,
            "this server keeps no archive (set archive_dir in its configuration)"};
  if (c.cfg.ownership)
    return {errc::unavailable, "rollbacks and forks run on a server alone, not in a cluster"};
  return status::ok();
}

/// What a whole-file operation reads of an entity file (read-only): its chain head, next due
/// alarm and fact-id prefixes, the file checked to be `key`'s.
struct file_head {
  int64_t seq = 0;
  std::string hash;
  std::optional<int64_t> next_due;
  fact_id_history fact_ids;
};

result<file_head> head_of(const runtime_core& c, const entity_key& key, const fs::path& file) {
  auto o = move_opts(c, key);
  o.read_only = true;
  auto s = entity_store::open_file(file, o);
  if (!s)
    return s.error();
  if (!((*s)->key() == key))
    return status{errc::corruption, file.string() + " is entity " + (*s)->key().to_string() +
                                      "'s, not " + key.to_string() + "'s"};
  auto next = (*s)->next_alarm();
  if (!next)
    return next.error();
  file_head h{(*s)->last_seq(), (*s)->head_hash(), std::nullopt, (*s)->fact_ids()};
  if (next->has_value())
    h.next_due = (*next)->due_ms;
  return h;
}

/// Opens `file` (a temporary one, no archive), numbers the facts after its last one under a new
/// fact-id prefix (`replaced`: the fact ids of the file it replaces), appends `d` and commits;
/// closes with a checkpoint that empties its -wal. The fact's seq.
result<int64_t> append_closing(const runtime_core& c, const entity_key& key, const fs::path& file,
                               const fact_id_history& replaced, const fact_draft& d) {
  auto o = move_opts(c, key);
  o.defer_sync = false;
  o.wal_kept_on_close_kib = 0;
  auto s = entity_store::open_file(file, o);
  if (!s)
    return s.error();
  if (auto st = (*s)->renew_fact_id_prefix(replaced); !st)
    return st;
  auto f = (*s)->append(d);
  if (!f)
    return f.error();
  if (auto st = (*s)->commit(); !st)
    return st;
  return f->seq;
}

/// Folds `key`'s live WAL into its database file (an open and a close that checkpoints and
/// empties the -wal), so that removing the -wal loses nothing. Through the archive, which ships
/// what it has not yet.
status fold_wal(runtime_core& c, const entity_key& key) {
  auto o = move_opts(c, key);
  o.archive_dir = c.cfg.archive_dir;
  o.defer_sync = false;
  o.wal_kept_on_close_kib = 0;
  if (auto st = c.resync_if_suspect(o, key, key.to_string()); !st)
    return st;
  auto s = entity_store::open(o, key);
  return s ? status::ok() : s.error();
}

/// Puts the finished file `tmp` in place as `key`'s (index row, rename, alarm entry), as an
/// adopted file is.
status place(runtime_core& c, const entity_key& key, const fs::path& tmp) {
  auto head = head_of(c, key, tmp);
  if (!head)
    return head.error();
  std::error_code ec;
  auto bytes = static_cast<int64_t>(fs::file_size(tmp, ec));
  auto row = index_adopted(c, key, bytes);
  if (!row)
    return row.error();
  auto placed = put_in_place(tmp, key.file_path(c.cfg.entity_dir()));
  settle_adopted(c, key, *row, placed.is_ok());
  if (!placed)
    return placed;
  return c.sync_alarm_index(key, head->next_due, false);
}

result<runtime::rollback_report> rollback_file(runtime_core& c, const entity_key& key,
                                               const archive_point& to, const std::string& note) {
  auto path = key.file_path(c.cfg.entity_dir());
  std::error_code ec;
  if (!fs::exists(path, ec))
    return status{errc::not_found, "no entity " + key.to_string()};
  if (auto st = fold_wal(c, key); !st) // the archive ships every commit of the current file
    return st;
  auto from = head_of(c, key, path);
  if (!from)
    return from.error();
  temp_files tmp{temp_path(c.cfg.data_dir, "rollback")};
  if (auto st = materialize_archive_point(entity_archive_dir(c.cfg.archive_dir, key), to, tmp.db);
      !st)
    return st;
  fact_draft d;
  d.type = "lifecycle";
  d.subtype = "rolled_back";
  d.data = {{"bookmark", to.bookmark()},
            {"to_seq", to.seq},
            {"from_seq", from->seq},
            {"from_hash", from->hash}};
  if (!note.empty())
    d.data["note"] = note;
  auto seq = append_closing(c, key, tmp.db, from->fact_ids, d);
  if (!seq)
    return seq.error();
  if (auto st = place(c, key, tmp.db); !st)
    return st;
  runtime::rollback_report r;
  r.to = to;
  r.from_seq = from->seq;
  r.from_hash = from->hash;
  r.fact_seq = *seq;
  return r;
}

result<runtime::fork_report> fork_file(runtime_core& c, const entity_key& from,
                                       const entity_key& to, const std::optional<archive_point>& at,
                                       const std::string& note) {
  std::error_code ec;
  if (fs::exists(to.file_path(c.cfg.entity_dir()), ec))
    return status{errc::conflict, "entity " + to.to_string() + " exists"};
  if (!fs::exists(from.file_path(c.cfg.entity_dir()), ec))
    return status{errc::not_found, "no entity " + from.to_string()};
  // The new entity holds a place in its tenant's max_entities while it is built; once in
  // place its file is counted (settle_adopted) and the place given back.
  if (auto st = take_entity_place(c, to.tenant); !st)
    return status{st.code(), st.message() + ": entity " + to.to_string() + " is not forked"};
  struct place_hold {
    runtime_core& c;
    const std::string& tenant;
    ~place_hold() { give_entity_place(c, tenant); }
  } held{c, to.tenant};
  temp_files src{temp_path(c.cfg.data_dir, "fork-source")};
  if (at) {
    if (auto st =
          materialize_archive_point(entity_archive_dir(c.cfg.archive_dir, from), *at, src.db);
        !st)
      return st;
  } else {
    if (auto st = entity_store::copy_files(from.file_path(c.cfg.entity_dir()), src.db); !st)
      return st;
  }
  { // The copy, folded into one file and migrated to this build's schema by an open and close.
    auto o = move_opts(c, from);
    o.defer_sync = false;
    o.wal_kept_on_close_kib = 0;
    auto s = entity_store::open_file(src.db, o);
    if (!s)
      return s.error();
  }
  auto head = head_of(c, from, src.db);
  if (!head)
    return head.error();
  fact_draft d;
  d.type = "lifecycle";
  d.subtype = "forked";
  d.from_entity = from.to_string();
  d.data = {{"source", from.to_string()}, {"source_seq", head->seq}, {"source_hash", head->hash}};
  if (at)
    d.data["bookmark"] = at->bookmark();
  if (!note.empty())
    d.data["note"] = note;
  temp_files out{temp_path(c.cfg.data_dir, "fork")};
  if (auto st = entity_store::fork_file(src.db, to, out.db, d, move_opts(c, to)); !st)
    return st;
  if (fs::exists(to.file_path(c.cfg.entity_dir()), ec)) // made meanwhile by a call
    return status{errc::conflict, "entity " + to.to_string() + " exists"};
  if (auto st = place(c, to, out.db); !st)
    return st;
  runtime::fork_report r;
  r.source_seq = head->seq;
  r.source_hash = head->hash;
  r.at = at;
  r.fact_seq = 1;
  return r;
}

} // namespace

} // namespace detail

// -- facade --------------------------------------------------------------------------------------

result<archive_point> runtime::bookmark(const entity_key& key, const bookmark_query& q) {
  auto& c = *impl_->core;
  if (auto st = detail::check_key(key); !st)
    return st;
  if (auto st = detail::need_archive(c); !st)
    return st;
  return find_bookmark(entity_archive_dir(c.cfg.archive_dir, key), q);
}

result<runtime::prune_report> runtime::prune_archives(int64_t keep_after_ms) {
  auto& c = *impl_->core;
  if (c.cfg.archive_dir.empty())
    return status{errc::invalid_argument,
                  "this server keeps no archive (set archive_dir in its configuration)"};
  auto t = detail::archive_pruner::prune_all(c.cfg.archive_dir, keep_after_ms);
  return prune_report{t.archives, t.epochs_removed, t.generations_folded, t.bytes_freed,
                      t.failures};
}

result<runtime::rollback_report> runtime::rollback_entity(const entity_key& key,
                                                          const archive_point& to, std::string note,
                                                          std::chrono::milliseconds wait) {
  auto& c = *impl_->core;
  if (auto st = detail::check_key(key); !st)
    return st;
  if (auto st = detail::need_archive(c); !st)
    return st;
  if (!c.cfg.types.find(key.type))
    return status{errc::not_found, c.cfg.types.unknown_type_detail(key.type)};
  auto key_str = key.to_string();
  if (!detail::hold_entity(c, key_str))
    return status{errc::conflict, "entity " + key_str + " is being rolled back already"};
  auto host = c.connection_holder();
  using answer = result<rollback_report>;
  auto r = [&]() -> answer {
    detail::entity_hold hold{c, key_str};
    if (host) // its WebSocket clients reconnect (its fact streams are told once it is done)
      host->release([&](const entity_key& k) { return k == key; });
    if (detail::release_keys(c, {key_str}, std::chrono::steady_clock::now() + wait) > 0)
      return status{errc::busy, "entity " + key_str + " did not hibernate in time; try again"};
    return detail::on_storage_thread<answer>(c, [&]() -> answer {
      if (auto st = detail::check_idle(c, key_str); !st)
        return st;
      return detail::rollback_file(c, key, to, note);
    });
  }();
  // Released: the streams' reads of the new file are served.
  if (r && host)
    host->history_rewritten(key, to.seq);
  return r;
}

result<runtime::fork_report> runtime::fork_entity(const entity_key& from, const entity_key& to,
                                                  std::optional<archive_point> at,
                                                  std::string note) {
  auto& c = *impl_->core;
  for (const auto& k : {from, to})
    if (auto st = detail::check_key(k); !st)
      return st;
  if (at) {
    if (auto st = detail::need_archive(c); !st)
      return st;
  } else if (c.cfg.ownership) {
    return status{errc::unavailable, "forks run on a server alone, not in a cluster"};
  }
  if (from == to)
    return status{errc::invalid_argument, "an entity cannot be forked onto itself"};
  for (const auto& k : {from, to})
    if (!c.cfg.types.find(k.type))
      return status{errc::not_found, c.cfg.types.unknown_type_detail(k.type)};
  auto to_str = to.to_string();
  if (!detail::hold_entity(c, to_str))
    return status{errc::conflict, "entity " + to_str + " is being written by another fork"};
  detail::entity_hold hold{c, to_str};
  if (auto st = detail::check_idle(c, to_str); !st)
    return st.code() == errc::busy ? status{errc::conflict, "entity " + to_str + " exists"} : st;
  using answer = result<fork_report>;
  return detail::on_storage_thread<answer>(c, [&]() -> answer {
    if (auto st = detail::check_idle(c); !st)
      return st;
    return detail::fork_file(c, from, to, at, note);
  });
}

} // namespace factum
