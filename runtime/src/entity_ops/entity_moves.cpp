// entity_moves.cpp: the runtime's side of cluster mode's shard moves (runtime.hpp, "cluster mode:
// shard moves"; docs/cluster.md, "Where shards live over time"): releasing the live activations
// of a shard, listing its entities from the tenant index, and moving one entity's file out
// (export: claimed under the move's epoch, copied, its WAL folded in), in (adopt: checked,
// counted, put in place, its alarm indexed) and away (forget); and, for shards on shared
// storage, indexing the files of a shard in place and dropping the rows of one served elsewhere.
//
// Threads: release_entities runs on the caller's thread (never a CAF worker: it waits). The
// others run on a storage thread (the blocking ones wait for it), because they read or write the
// tenant and alarm indexes, which stop() closes only once the storage threads have drained: each
// job first looks at the registry's `stopping` (set before that drain) and answers UNAVAILABLE
// when it is set. Each call's temporary files have names of their own under DATA/runtime/ and
// are removed before it returns.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <unordered_map>
#include <unordered_set>

#include "entity_ops/entity_files.hpp"
#include "factum/runtime/cluster_router.hpp"
#include "factum/storage/sha256.hpp"

namespace fs = std::filesystem;

namespace factum {

namespace detail {

namespace {

// -- listing -------------------------------------------------------------------------------------

/// Every entity the tenant index lists whose key `which` selects, with its indexed bytes.
result<std::vector<std::pair<entity_key, int64_t>>>
rows_where(runtime_core& c, const std::function<bool(const entity_key&)>& which) {
  // Every tenant with a row has an account (made at start from the index's totals, or before
  // its first creation or adoption).
  std::vector<std::string> tenants;
  {
    std::lock_guard<std::mutex> g(c.tenants.mu);
    for (auto& [name, _] : c.tenants.accounts)
      tenants.push_back(name);
  }
  std::sort(tenants.begin(), tenants.end());
  std::vector<std::pair<entity_key, int64_t>> out;
  for (auto& t : tenants) {
    entity_list_query q;
    q.limit = 10000;
    for (;;) {
      auto page = list_tenant_entities(c, t, q);
      if (!page)
        return page.error();
      for (auto& e : *page)
        if (entity_key k{t, e.type, e.id}; which(k))
          out.emplace_back(std::move(k), e.bytes);
      if (static_cast<int64_t>(page->size()) < q.limit)
        break;
      q.after_type = page->back().type;
      q.after_id = page->back().id;
    }
  }
  return out;
}

result<std::vector<entity_key>> keys_where(runtime_core& c,
                                           const std::function<bool(const entity_key&)>& which) {
  auto rows = rows_where(c, which);
  if (!rows)
    return rows.error();
  std::vector<entity_key> out;
  out.reserve(rows->size());
  for (auto& [k, _] : *rows)
    out.push_back(std::move(k));
  return out;
}

// -- export, adopt, forget -----------------------------------------------------------------------

result<std::string> export_file(runtime_core& c, const entity_key& key, int64_t epoch,
                                std::string_view node) {
  auto opts = move_opts(c, key);
  if (auto st = c.resync_if_suspect(opts, key, key.to_string()); !st)
    return st;
  // The claim writes to the file: its bytes are measured after it as a close measures them
  // (the tenant's account and the index row had them as of the entity's last close).
  tenant_meter meter;
  meter.account = tenant_account_of(c, key.tenant);
  meter.counted = meter.indexed = entity_disk_bytes(key.file_path(c.cfg.entity_dir()));
  status claimed;
  { // The claim, at the open (as claim_owner()): NOT_FOUND without a file, not_owner when newer.
    auto claiming = opts;
    claiming.owner_epoch = epoch;
    claiming.owner_node = std::string(node);
    auto s = entity_store::open(claiming, key);
    claimed = s ? status::ok() : s.error();
  }
  measure_closed(c, key, meter);
  if (!claimed)
    return claimed;
  temp_files tmp{temp_path(c.cfg.data_dir, "export")};
  if (auto st = entity_store::copy_files(key.file_path(c.cfg.entity_dir()), tmp.db); !st)
    return st;
  { // The copy's only connection closes with a checkpoint that empties its -wal.
    auto o = opts;
    o.defer_sync = false;
    o.wal_kept_on_close_kib = 0;
    auto s = entity_store::open_file(tmp.db, o);
    if (!s)
      return s.error();
  }
  std::error_code ec;
  auto wal_bytes = fs::file_size(with_suffix(tmp.db, "-wal"), ec);
  if (!ec && wal_bytes > 0)
    return status{errc::internal, "the copy of entity " + key.to_string() + " kept " +
                                    std::to_string(wal_bytes) +
                                    " bytes of WAL after its checkpoint"};
  return read_whole(tmp.db);
}

/// Checks a file brought in for `key` (read-only): an entity file, of `key`, whose newest owner
/// claim has `epoch`. Its next due alarm.
result<std::optional<int64_t>> check_adopted(const runtime_core& c, const entity_key& key,
                                             const fs::path& file, int64_t epoch) {
  auto o = move_opts(c, key);
  o.read_only = true;
  auto s = entity_store::open_file(file, o);
  if (!s) {
    auto code = s.error().code();
    bool foreign = code == errc::corruption || code == errc::not_factum_file ||
                   code == errc::not_found || code == errc::invalid_argument;
    return status{foreign ? errc::corruption : code,
                  "the file for entity " + key.to_string() +
                    " is not an entity file: " + s.error().message()};
  }
  auto& store = **s;
  if (!(store.key() == key))
    return status{errc::corruption, "the file for entity " + key.to_string() + " is entity " +
                                      store.key().to_string() + "'s"};
  auto owners = store.owners();
  if (!owners)
    return owners.error();
  if (owners->empty() || owners->back().epoch != epoch)
    return status{errc::invalid_argument,
                  "the file for entity " + key.to_string() + " was last claimed under " +
                    (owners->empty() ? std::string("no epoch")
                                     : "epoch " + std::to_string(owners->back().epoch)) +
                    ", not epoch " + std::to_string(epoch)};
  auto next = store.next_alarm();
  if (!next)
    return next.error();
  if (!next->has_value())
    return std::optional<int64_t>();
  return std::optional<int64_t>(next->value().due_ms);
}

/// A file `key` has here whose newest owner claim is newer than `epoch`: a later move (or this
/// node's own service) put it there, so an adopt of an older move must not replace it. CONFLICT
/// naming both, or ok (no file, or an older claim, or the same move's: its sender, restarted
/// mid-move, resumes under the move's epoch and sends the file again; epochs are etcd revisions,
/// so a claim under exactly `epoch` can only be that move's export).
status check_not_newer(const runtime_core& c, const entity_key& key, int64_t epoch) {
  auto path = key.file_path(c.cfg.entity_dir());
  std::error_code ec;
  if (!fs::exists(path, ec))
    return status::ok();
  auto o = move_opts(c, key);
  o.read_only = true;
  auto s = entity_store::open_file(path, o);
  if (!s)
    return status::ok(); // not readable as an entity file: the adopt replaces it
  auto owners = (*s)->owners();
  if (owners && !owners->empty() && owners->back().epoch > epoch)
    return status{errc::conflict, "entity " + key.to_string() + " has a file here claimed under " +
                                    "epoch " + std::to_string(owners->back().epoch) +
                                    ", newer than the move's " + std::to_string(epoch)};
  return status::ok();
}

status adopt_file(runtime_core& c, const entity_key& key, std::string_view bytes, int64_t epoch) {
  if (auto st = check_not_newer(c, key, epoch); !st)
    return st;
  temp_files tmp{temp_path(c.cfg.data_dir, "adopt")};
  if (auto st = write_new_synced(tmp.db, bytes); !st)
    return st;
  auto next = check_adopted(c, key, tmp.db, epoch);
  if (!next)
    return next.error();
  auto row = index_adopted(c, key, static_cast<int64_t>(bytes.size()));
  if (!row)
    return row.error();
  auto placed = put_in_place(tmp.db, key.file_path(c.cfg.entity_dir()));
  settle_adopted(c, key, *row, placed.is_ok());
  if (!placed)
    return placed;
  return c.sync_alarm_index(key, *next, false);
}

status forget_files(runtime_core& c, const entity_key& key) {
  auto path = key.file_path(c.cfg.entity_dir());
  std::error_code ec;
  bool had_file = fs::exists(path, ec);
  int64_t bytes = had_file ? entity_disk_bytes(path) : 0;
  if (auto r = remove_entity_files(path, true); !r)
    return r.error();
  if (auto st = uncount_forgotten(c, key, had_file, bytes); !st)
    return st;
  return c.sync_alarm_index(key, std::nullopt, false);
}

// -- shared storage ------------------------------------------------------------------------------

bool is_live(runtime_core& c, const std::string& key_str) {
  std::lock_guard<std::mutex> g(c.reg.mu);
  return c.reg.map.count(key_str) > 0;
}

/// What one entity file says for the indexes: whose it is and its next due alarm.
struct file_summary {
  entity_key key;
  std::optional<int64_t> next;
};

result<file_summary> read_summary(const runtime_core& c, const fs::path& file) {
  auto o = c.store_opts;
  o.spares.reset();
  o.create_if_missing = false;
  o.read_only = true;
  auto s = entity_store::open_file(file, o);
  if (!s)
    return s.error();
  file_summary out{(*s)->key(), std::nullopt};
  auto next = (*s)->next_alarm();
  if (!next)
    return next.error();
  if (next->has_value())
    out.next = next->value().due_ms;
  return out;
}

/// The keys (entity_key::to_string) of the alarm index's parked entries.
result<std::unordered_set<std::string>> parked_keys(runtime_core& c) {
  std::lock_guard<std::mutex> g(c.alarms.mu);
  auto p = c.alarms.index->parked();
  if (!p)
    return p.error();
  std::unordered_set<std::string> out;
  for (auto& e : *p)
    out.insert(e.entry.key.to_string());
  return out;
}

/// Ends the parking of `key`'s alarm entry: written again with its due time unchanged.
status unpark(runtime_core& c, const entity_key& key) {
  return c.with_index_writer([&](alarm_index& w) -> status {
    auto cur = w.due_of(key);
    if (!cur)
      return cur.error();
    return cur->has_value() ? w.apply({alarm_index_entry{key, cur->value()}}) : status::ok();
  });
}

result<runtime::index_report> index_files(runtime_core& c,
                                          const std::function<bool(std::string_view)>& which) {
  runtime::index_report rep;
  const auto& root = c.cfg.entity_dir();
  auto parked = parked_keys(c);
  if (!parked)
    return parked.error();
  for (auto& file : list_entity_files(root)) {
    if (!which(file.stem().string()))
      continue;
    auto sum = read_summary(c, file);
    if (!sum && sum.error().code() == errc::not_found)
      continue; // a spare renamed into place and never claimed: no entity yet
    if (!sum && sum.error().code() == errc::busy) {
      rep.busy.push_back(file.stem().string());
      continue;
    }
    if (!sum || !(sum->key.file_path(root) == file)) {
      ++rep.unreadable;
      c.log_event({{"level", "error"},
                   {"event", "entity_file_unreadable"},
                   {"file", file.string()},
                   {"detail", sum ? "it holds entity " + sum->key.to_string() +
                                      ", not the one "
                                      "its name says"
                                  : sum.error().message()}});
      continue;
    }
    // A live activation here needs no care: a row is added only where there is none, and the
    // alarm entry only ever moves earlier (a wake early finds nothing due and changes nothing).
    auto key_str = sum->key.to_string();
    if (auto added = index_in_place(c, sum->key, entity_disk_bytes(file)); !added)
      return added.error();
    if (parked->count(key_str))
      if (auto st = unpark(c, sum->key); !st)
        return st;
    if (sum->next)
      if (auto st = c.sync_alarm_index(sum->key, sum->next, true); !st)
        return st;
    ++rep.indexed;
  }
  return rep;
}

result<size_t> unindex_rows(runtime_core& c, const std::function<bool(const entity_key&)>& which) {
  auto rows = rows_where(c, which);
  if (!rows)
    return rows.error();
  size_t n = 0;
  for (auto& [key, bytes] : *rows) {
    if (is_live(c, key.to_string()))
      continue;
    if (auto st = uncount_forgotten(c, key, true, bytes); !st)
      return st;
    if (auto st = c.sync_alarm_index(key, std::nullopt, false); !st)
      return st;
    ++n;
  }
  return n;
}

} // namespace

size_t remove_move_temporaries(const fs::path& data_dir) {
  size_t removed = 0;
  std::error_code ec;
  for (auto& f : fs::directory_iterator(data_dir / "runtime", ec)) {
    auto name = f.path().filename().string();
    if (name.rfind("move-", 0) == 0 && fs::remove(f.path(), ec))
      ++removed;
  }
  return removed;
}

} // namespace detail

// -- facade --------------------------------------------------------------------------------------

const store_options& runtime::entity_store_options() const {
  return impl_->core->store_opts;
}

size_t runtime::release_entities(const std::function<bool(const entity_key&)>& which,
                                 std::chrono::milliseconds wait) {
  auto& c = *impl_->core;
  auto deadline = std::chrono::steady_clock::now() + wait;
  if (auto host = c.connection_holder()) // their WebSocket clients reconnect to the new owner
    host->release(which);
  std::vector<std::string> live, selected;
  {
    std::lock_guard<std::mutex> g(c.reg.mu);
    live.reserve(c.reg.map.size());
    for (auto& [k, _] : c.reg.map)
      live.push_back(k);
  }
  for (auto& k : live) // `which` runs unlocked: it may take its own locks
    if (auto key = entity_key::parse(k); key && which(*key))
      selected.push_back(std::move(k));
  return detail::release_keys(c, selected, deadline);
}

result<std::vector<entity_key>>
runtime::entities_where(const std::function<bool(const entity_key&)>& which) {
  auto& c = *impl_->core;
  using answer = result<std::vector<entity_key>>;
  return detail::on_storage_thread<answer>(c, [&]() -> answer {
    if (auto st = detail::check_idle(c); !st)
      return st;
    return detail::keys_where(c, which);
  });
}

result<std::string> runtime::export_entity(const entity_key& key, int64_t epoch,
                                           std::string_view node) {
  auto& c = *impl_->core;
  if (auto st = detail::check_key(key); !st)
    return st;
  if (epoch <= 0 || node.empty() || node.size() > 255)
    return status{errc::invalid_argument,
                  "an export claims under an epoch > 0 for a node of 1 to 255 bytes"};
  using answer = result<std::string>;
  return detail::on_storage_thread<answer>(c, [&]() -> answer {
    if (auto st = detail::check_idle(c, key.to_string()); !st)
      return st;
    return detail::export_file(c, key, epoch, node);
  });
}

void runtime::adopt_entity(const entity_key& key, std::string file_bytes, int64_t epoch,
                           std::function<void(status)> done) {
  if (auto st = detail::check_key(key); !st)
    return done(st);
  if (epoch <= 0)
    return done(status{errc::invalid_argument,
                       "adopt_entity needs the epoch (> 0) the file was exported under"});
  auto* c = impl_->core.get();
  c->pool.post([c, key, bytes = std::move(file_bytes), epoch, done = std::move(done)] {
    auto st = detail::check_idle(*c, key.to_string());
    done(st ? detail::adopt_file(*c, key, bytes, epoch) : st);
  });
}

status runtime::forget_entity(const entity_key& key) {
  auto& c = *impl_->core;
  if (auto st = detail::check_key(key); !st)
    return st;
  return detail::on_storage_thread<status>(c, [&] {
    auto st = detail::check_idle(c, key.to_string());
    return st ? detail::forget_files(c, key) : st;
  });
}

result<runtime::index_report>
runtime::index_entities(const std::function<bool(std::string_view digest)>& which) {
  auto& c = *impl_->core;
  using answer = result<index_report>;
  return detail::on_storage_thread<answer>(c, [&]() -> answer {
    if (auto st = detail::check_idle(c); !st)
      return st;
    return detail::index_files(c, which);
  });
}

result<size_t> runtime::unindex_entities(const std::function<bool(const entity_key&)>& which) {
  auto& c = *impl_->core;
  using answer = result<size_t>;
  return detail::on_storage_thread<answer>(c, [&]() -> answer {
    if (auto st = detail::check_idle(c); !st)
      return st;
    return detail::unindex_rows(c, which);
  });
}

std::string move_signature(std::string_view secret, const move_credentials& c) {
  std::string m = "PUT\n";
  for (auto part : {c.target, c.epoch, c.sha256}) {
    m.append(part);
    m.push_back('\n');
  }
  m.append(c.time_ms);
  return hmac_sha256_hex(secret, m);
}

} // namespace factum
