// tenant_quotas.cpp: per-tenant quotas (see tenant_quotas.hpp): the accounts, the group-committed
// writes of the tenant index, the counting of creations and the measuring of entity files, the
// counting of files a shard move adopts or forgets, and each entity's fleet summary and last
// activity in the index (the fleet views, docs/http-api.md).
//
// Threads: start and stop on the thread that starts or stops the runtime; accounts and the
// index queue under tenant_directory::mu from any thread; open_creating, measure_closed and the
// moves' counts on storage threads (they may wait for an index write); index_fleet_summary and
// the other measures on an entity's actor (index_fleet_summary may wait for an index write).
#include "tenancy/tenant_quotas.hpp"

#include <filesystem>

#include "runtime_core.hpp"
#include "turn/call_errors.hpp"

namespace fs = std::filesystem;

namespace factum::detail {

namespace {

std::string bytes_text(int64_t b) {
  return std::to_string(b) + " bytes";
}

/// Writes one change to the index, group-committed with the changes other threads queue
/// meanwhile; `durable`: synced before it returns (durability full). The write's outcome.
status write_tenant_index(runtime_core& rt, tenant_index_change change, bool durable) {
  auto& t = rt.tenants;
  status outcome; // written by whoever applies the batch, before this returns
  std::unique_lock<std::mutex> g(t.mu);
  t.queued.push_back({std::move(change), &outcome});
  t.queued_durable |= durable;
  struct batch_t {
    std::vector<tenant_directory::queued_change> queued;
    bool sync = false;
  };
  t.writes.wait_applied(
    g, t.writes.ticket(),
    [&] {
      return batch_t{std::exchange(t.queued, {}), std::exchange(t.queued_durable, false)};
    },
    [&](const batch_t& b) {
      std::vector<tenant_index_change> changes;
      changes.reserve(b.queued.size());
      for (auto& q : b.queued)
        changes.push_back(q.change);
      auto st = t.index->apply(changes, b.sync); // one transaction; one sync when `sync`
      if (!st) {
        t.failures.inc();
        rt.log_event({{"level", "error"},
                      {"event", "tenant_index_write_failed"},
                      {"changes", changes.size()},
                      {"detail", st.to_string()}});
      }
      return st;
    },
    [&](const batch_t& b, const status& st) {
      for (auto& q : b.queued)
        *q.outcome = st;
      t.dirty |= !st.is_ok();
    });
  return outcome;
}

/// Runs `read` on the index (null once it is closed) between its writes: it is one connection,
/// used by one thread at a time.
template <class F> auto between_writes(runtime_core& rt, F read) {
  auto& t = rt.tenants;
  std::unique_lock<std::mutex> g(t.mu);
  return t.writes.exclusive(g, [&] { return read(t.index.get()); });
}

/// Counts a creation of `key` before its file is made: refused (false, `refusal` set) when the
/// tenant's max_entities has no room, else counted in memory and in the index (durably).
result<bool> reserve_entity(runtime_core& rt, const entity_key& key, tenant_account& acct,
                            std::optional<call_error>& refusal) {
  {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    auto n = acct.entities.load(std::memory_order_relaxed);
    if (acct.quota.max_entities && n >= *acct.quota.max_entities) {
      rt.tenants.refusals.inc(tenant_directory::entity_refusal);
      call_error e = problems::tenant_quota_exceeded.error(
        "tenant " + acct.name + " has " + std::to_string(n) + " entities of its " +
        "max_entities " + std::to_string(*acct.quota.max_entities) + ": entity " + key.to_string() +
        " is not created");
      e.details = {{"quota", "max_entities"},
                   {"tenant", acct.name},
                   {"used", n},
                   {"limit", *acct.quota.max_entities}};
      refusal = std::move(e);
      return false;
    }
    acct.entities.fetch_add(1, std::memory_order_relaxed);
  }
  auto st = write_tenant_index(rt, {tenant_index_change::kind::add, key, 0}, true);
  if (!st) {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    acct.entities.fetch_sub(1, std::memory_order_relaxed);
    return st;
  }
  return true;
}

/// A reserved creation did not make a file: uncounted in memory and in the index.
void release_entity(runtime_core& rt, const entity_key& key, tenant_account& acct) {
  {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    acct.entities.fetch_sub(1, std::memory_order_relaxed);
  }
  // A failed removal leaves a row without a file: counted until the next start rescans.
  (void)write_tenant_index(rt, {tenant_index_change::kind::remove, key, 0}, false);
}

/// A file claimed without a reservation (a spare left in place by a crash when the index was
/// Whether the tenant index has a row for `key` (UNAVAILABLE once it is closed).
result<bool> has_row(runtime_core& rt, const entity_key& key) {
  return between_writes(rt, [&](tenant_index* ix) {
    return ix ? ix->contains(key) : result<bool>(status{errc::unavailable, "index closed"});
  });
}

/// rebuilt since, so that no row names it): counted now, whatever the quota, since it exists.
void count_unreserved(runtime_core& rt, const entity_key& key, tenant_account& acct) {
  auto has = has_row(rt, key);
  if (!has || *has)
    return;
  {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    acct.entities.fetch_add(1, std::memory_order_relaxed);
  }
  (void)write_tenant_index(rt, {tenant_index_change::kind::add, key, 0}, true);
}

/// Both files of an open store: the database's bytes, then the total.
int64_t measure_both(tenant_meter& m, const entity_store& store) {
  std::error_code ec;
  auto db = fs::file_size(store.path(), ec);
  m.db = ec ? 0 : static_cast<int64_t>(db);
  return m.db + store.wal_file_bytes();
}

} // namespace

// -- start and stop -----------------------------------------------------------------------------

namespace {

status check_quotas(const std::map<std::string, tenant_quota>& quotas) {
  for (auto& [name, q] : quotas) {
    if (auto st = validate_key_part(name, "tenant"); !st)
      return {errc::invalid_argument, "runtime_config.tenant_quotas: " + st.message()};
    for (auto [what, v] :
         {std::pair{"max_entities", q.max_entities}, std::pair{"max_bytes", q.max_bytes}})
      if (v && *v < 0)
        return {errc::invalid_argument,
                "runtime_config.tenant_quotas." + name + "." + what + " must not be negative"};
  }
  return status::ok();
}

/// Opens the index, setting a damaged one aside (a start note). An index that is not complete
/// (new, deleted, or a rebuild that did not finish) is rebuilt; one that was not closed cleanly
/// has its rows checked against the files.
result<std::unique_ptr<tenant_index>> open_index(runtime_core& rt,
                                                 std::vector<std::string>& notes) {
  auto& dir = rt.cfg.data_dir;
  std::string why;
  auto ix = tenant_index::open(dir, rt.cfg.mode);
  result<bool> complete = ix ? (*ix)->flag("complete") : result<bool>(ix.error());
  if (!complete && complete.error().code() == errc::corruption) {
    // Closed before its files move: a last connection's close may remove a -wal by its name.
    ix = complete.error();
    auto aside = tenant_index::set_aside(dir);
    if (!aside)
      return aside.error();
    why = "was damaged (" + complete.error().message() + "); moved to " + aside->string() + " and";
    ix = tenant_index::open(dir, rt.cfg.mode);
    complete = ix ? (*ix)->flag("complete") : result<bool>(ix.error());
  }
  if (!ix)
    return ix.error();
  if (!complete)
    return complete.error();
  if (!*complete && !rt.cfg.entity_root.empty()) {
    // A shared entity root holds other processes' entities too: this one's index lists only
    // what it indexes (runtime::index_entities) or creates, from empty.
    if (auto st = (*ix)->set_flag("complete", true); !st)
      return st;
  } else if (!*complete) {
    auto rep = (*ix)->rebuild(rt.cfg.entity_dir());
    if (!rep)
      return rep.error();
    rt.tenants.rebuilds.inc();
    if (why.empty() && rep->entity_files > 0)
      why = "was missing or incomplete; it was";
    if (!why.empty())
      notes.push_back("the tenant index " + why + " rebuilt from " +
                      std::to_string(rep->entity_files) +
                      " entity files: " + std::to_string(rep->entities) + " entities, " +
                      std::to_string(rep->unreadable) + " files unreadable");
  } else if (auto clean = (*ix)->flag("clean"), summaries = (*ix)->flag("summaries");
             !clean || !*clean || !summaries || !*summaries) {
    // A summary written after its entity's commit may be lost with the process: those of the
    // files written since the index was last opened (2 s of slack for the clocks' steps) are
    // read again; all of them when some may be missing (an index made before the summaries).
    auto opened = (*ix)->number("opened_at");
    int64_t since = summaries && *summaries && opened && *opened > 0 ? *opened - 2000 : 0;
    auto rep = (*ix)->rescan(rt.cfg.entity_dir(), since);
    if (!rep)
      return rep.error();
    if (rep->removed > 0 || rep->resized > 0 || rep->unreadable > 0)
      notes.push_back("the tenant index was not closed cleanly; its " +
                      std::to_string(rep->entries) + " entities were checked against their " +
                      "files: " + std::to_string(rep->removed) + " without a file removed, " +
                      std::to_string(rep->resized) + " sizes corrected, " +
                      std::to_string(rep->unreadable) + " summaries unreadable");
  }
  // In use from now on: a stop that does not reach close_tenant_index() leaves it unclean, and
  // the next start reads again the summaries of the files written since now.
  if (auto st = (*ix)->set_number("opened_at", now_ms()); !st)
    return st;
  if (auto st = (*ix)->set_flag("clean", false); !st)
    return st;
  return ix;
}

} // namespace

status open_tenant_index(runtime_core& rt, std::vector<std::string>& notes) {
  if (auto st = check_quotas(rt.cfg.tenant_quotas); !st)
    return st;
  auto ix = open_index(rt, notes);
  if (!ix)
    return ix.error();
  auto totals = (*ix)->totals();
  if (!totals)
    return totals.error();
  (*ix)->set_fault(rt.cfg.tenant_index_fault);
  rt.tenants.index = std::move(ix.value());
  for (auto& [name, _] : rt.cfg.tenant_quotas)
    tenant_account_of(rt, name);
  for (auto& [name, t] : *totals) {
    auto* a = tenant_account_of(rt, name);
    a->entities.store(t.entities, std::memory_order_relaxed);
    a->bytes.store(t.bytes, std::memory_order_relaxed);
  }
  return status::ok();
}

void close_tenant_index(runtime_core& rt) {
  auto& t = rt.tenants;
  std::unique_lock<std::mutex> g(t.mu);
  t.writes.wait_idle(g); // a listing may still read it
  if (!t.index)
    return;
  if (!t.dirty)
    (void)t.index->set_flag("clean", true);
  t.index.reset();
}

// -- accounts -----------------------------------------------------------------------------------

tenant_account* tenant_account_of(runtime_core& rt, const std::string& tenant) {
  std::lock_guard<std::mutex> g(rt.tenants.mu);
  auto& a = rt.tenants.accounts[tenant];
  if (!a) {
    a = std::make_unique<tenant_account>();
    a->name = tenant;
    if (auto q = rt.cfg.tenant_quotas.find(tenant); q != rt.cfg.tenant_quotas.end())
      a->quota = q->second;
  }
  return a.get();
}

namespace {

tenant_usage snapshot(const tenant_account& a) {
  return {a.name, a.entities.load(std::memory_order_relaxed),
          a.bytes.load(std::memory_order_relaxed), a.quota};
}

} // namespace

tenant_usage tenant_usage_snapshot(runtime_core& rt, const std::string& tenant) {
  std::lock_guard<std::mutex> g(rt.tenants.mu);
  auto it = rt.tenants.accounts.find(tenant);
  if (it == rt.tenants.accounts.end()) {
    tenant_usage u;
    u.tenant = tenant;
    return u;
  }
  return snapshot(*it->second);
}

void register_tenant_metrics(runtime_core& rt) {
  struct gauge {
    const char* name;
    const char* help;
    std::optional<int64_t> (*value)(const tenant_usage&);
  };
  static const gauge gauges[] = {
    {"factum_tenant_entities", "Entity files of a tenant with a quota (creations under way too).",
     [](const tenant_usage& u) -> std::optional<int64_t> { return u.entities; }},
    {"factum_tenant_bytes", "Bytes of a tenant's entity files (.db and -wal), as last measured.",
     [](const tenant_usage& u) -> std::optional<int64_t> { return u.bytes; }},
    {"factum_tenant_max_entities", "A tenant's max_entities quota.",
     [](const tenant_usage& u) { return u.quota.max_entities; }},
    {"factum_tenant_max_bytes", "A tenant's max_bytes quota.",
     [](const tenant_usage& u) { return u.quota.max_bytes; }},
  };
  for (auto& g : gauges)
    rt.metric_registry.add(g.name, g.help, metrics::kind::gauge, {"tenant"},
                           [&rt, value = g.value](metrics::sample_writer& w) {
                             auto& t = rt.tenants;
                             std::lock_guard<std::mutex> lock(t.mu);
                             for (auto& [name, _] : rt.cfg.tenant_quotas)
                               if (auto it = t.accounts.find(name); it != t.accounts.end())
                                 if (auto v = value(snapshot(*it->second)))
                                   w.add({name}, static_cast<double>(*v));
                           });
}

result<std::vector<entity_listing>>
list_tenant_entities(runtime_core& rt, const std::string& tenant, const entity_list_query& q) {
  if (q.by_activity) {
    using act_t = result<std::vector<entity_activity>>;
    auto rows = between_writes(rt, [&](tenant_index* ix) -> act_t {
      if (!ix)
        return status{errc::unavailable, "the tenant index is closed: the runtime is stopping"};
      return ix->list_by_activity(tenant, q.type, q.before_ms, q.after_type, q.after_id, q.limit);
    });
    if (!rows)
      return rows.error();
    std::vector<entity_listing> out;
    for (auto& r : *rows)
      out.push_back({r.key.type, r.key.id, r.bytes, r.last_activity_ms});
    return out;
  }
  using rows_t = result<std::vector<std::pair<entity_key, int64_t>>>;
  auto rows = between_writes(rt, [&](tenant_index* ix) -> rows_t {
    if (!ix)
      return status{errc::unavailable, "the tenant index is closed: the runtime is stopping"};
    return ix->list(tenant, q.type, q.after_type, q.after_id, q.limit);
  });
  if (!rows)
    return rows.error();
  std::vector<entity_listing> out;
  out.reserve(rows->size());
  for (auto& [key, bytes] : *rows)
    out.push_back({key.type, key.id, bytes});
  return out;
}

void read_tenant_index(runtime_core& rt, const std::function<void(tenant_index*)>& read) {
  between_writes(rt, [&](tenant_index* ix) {
    read(ix); // reads and copies only: nothing in it throws or waits for the index
    return 0;
  });
}

// -- an entity ----------------------------------------------------------------------------------

result<std::unique_ptr<entity_store>> open_creating(runtime_core& rt, const store_options& opts,
                                                    const entity_key& key, tenant_meter& meter) {
  auto path = key.file_path(opts.data_dir);
  std::error_code ec;
  bool reserved = false;
  meter.refusal.reset();
  if (!fs::exists(path, ec)) {
    auto r = reserve_entity(rt, key, *meter.account, meter.refusal);
    if (!r)
      return r.error();
    if (!*r)
      return status{errc::unavailable, "tenant quota"}; // meter.refusal says which
    reserved = true;
  }
  auto s = entity_store::open(opts, key);
  if (!s) {
    // A file put in place stays counted (it takes its bytes); only no file at all is released.
    if (reserved && !fs::exists(path, ec))
      release_entity(rt, key, *meter.account);
    return s;
  }
  bool created = reserved;
  if (!reserved && (*s)->claimed_on_open()) {
    count_unreserved(rt, key, *meter.account);
    created = true;
  }
  if (created) { // the index has 0 bytes for it, and the tenant's sum nothing of it
    meter.counted = meter.indexed = 0;
    meter.set(measure_both(meter, **s));
  } else {
    measure_opened(meter, **s);
  }
  return s;
}

void measure_opened(tenant_meter& meter, const entity_store& store) {
  // The files of a closed entity are what its last close measured and wrote (a rescan after an
  // unclean stop saw to that): its share of the tenant's sum already.
  meter.counted = meter.indexed = measure_both(meter, store);
}

void measure_commit(tenant_meter& meter, const entity_store& store) {
  if (meter.watches_commits())
    meter.set(meter.db + store.wal_file_bytes());
}

void measure_checkpoint(tenant_meter& meter, const entity_store& store) {
  if (meter.account)
    meter.set(measure_both(meter, store));
}

void index_fleet_summary(runtime_core& rt, const entity_key& key, tenant_meter& meter,
                         entity_store& store) {
  int64_t now = now_ms();
  meter.active_ms = now;
  if (store.take_fleet_change()) {
    auto sum = store.fleet_summary();
    if (!sum) // the summary stays as it was; the next change or start corrects it
      return (void)(rt.tenants.failures.inc());
    sum->last_activity_ms = std::max(sum->last_activity_ms, now);
    tenant_index_change c{tenant_index_change::kind::summary, key, 0, std::move(sum.value())};
    if (write_tenant_index(rt, std::move(c), false))
      meter.activity_indexed_ms = now;
    return;
  }
  if (now - meter.activity_indexed_ms < activity_cadence_ms)
    return;
  meter.activity_indexed_ms = now; // not retried sooner on a failure: at the next cadence
  (void)write_tenant_index(rt, {tenant_index_change::kind::activity, key, now}, false);
}

void measure_closed(runtime_core& rt, const entity_key& key, tenant_meter& meter) {
  if (meter.active_ms > meter.activity_indexed_ms)
    (void)write_tenant_index(rt, {tenant_index_change::kind::activity, key, meter.active_ms},
                             false);
  if (!meter.account)
    return;
  auto bytes = entity_disk_bytes(key.file_path(rt.cfg.entity_dir()));
  meter.set(bytes);
  if (bytes == meter.indexed)
    return;
  // Not synced: a power cut may lose it, and the rescan after the unclean stop corrects it.
  if (write_tenant_index(rt, {tenant_index_change::kind::set_bytes, key, bytes}, false))
    meter.indexed = bytes;
}

std::optional<call_reply> refuse_write(runtime_core& rt, const tenant_meter& meter,
                                       const std::string& method) {
  if (!meter.watches_commits() || (!method.empty() && method[0] == '@'))
    return std::nullopt;
  auto& a = *meter.account;
  auto used = a.bytes.load(std::memory_order_relaxed);
  if (used < *a.quota.max_bytes)
    return std::nullopt;
  rt.tenants.refusals.inc(tenant_directory::bytes_refusal);
  call_error e = problems::tenant_storage_quota_exceeded.error(
    "tenant " + a.name + " uses " + bytes_text(used) + " of its max_bytes " +
    bytes_text(*a.quota.max_bytes) +
    ": writes are refused until its entity files take less; reads still work");
  e.details = {
    {"quota", "max_bytes"}, {"tenant", a.name}, {"used", used}, {"limit", *a.quota.max_bytes}};
  return call_reply::failure(e);
}

// -- moves --------------------------------------------------------------------------------------

result<adopted_row> index_adopted(runtime_core& rt, const entity_key& key, int64_t bytes) {
  adopted_row row;
  auto path = key.file_path(rt.cfg.entity_dir());
  std::error_code ec;
  row.had_file = fs::exists(path, ec);
  row.old_bytes = row.had_file ? entity_disk_bytes(path) : 0;
  row.bytes = bytes;
  auto has = has_row(rt, key);
  if (!has)
    return has.error();
  row.had_row = *has;
  // A new row is durable before the file is in place (the index never misses a file); bytes
  // are not (a rescan after an unclean stop corrects them).
  auto change = row.had_row ? tenant_index_change{tenant_index_change::kind::set_bytes, key, bytes}
                            : tenant_index_change{tenant_index_change::kind::add, key, bytes};
  if (auto st = write_tenant_index(rt, std::move(change), !row.had_row); !st)
    return st;
  return row;
}

status take_entity_place(runtime_core& rt, const std::string& tenant) {
  auto* acct = tenant_account_of(rt, tenant);
  std::lock_guard<std::mutex> g(rt.tenants.mu);
  auto n = acct->entities.load(std::memory_order_relaxed);
  if (acct->quota.max_entities && n >= *acct->quota.max_entities) {
    rt.tenants.refusals.inc(tenant_directory::entity_refusal);
    return {errc::quota_exceeded, "tenant " + tenant + " has " + std::to_string(n) +
                                    " entities of its max_entities " +
                                    std::to_string(*acct->quota.max_entities)};
  }
  acct->entities.fetch_add(1, std::memory_order_relaxed);
  return status::ok();
}

void give_entity_place(runtime_core& rt, const std::string& tenant) {
  auto* acct = tenant_account_of(rt, tenant);
  std::lock_guard<std::mutex> g(rt.tenants.mu);
  acct->entities.fetch_sub(1, std::memory_order_relaxed);
}

void settle_adopted(runtime_core& rt, const entity_key& key, const adopted_row& row, bool placed) {
  if (!placed) {
    // A failed write leaves the row as it is now: counted (or sized) until the next start rescans.
    if (row.had_row)
      (void)write_tenant_index(rt, {tenant_index_change::kind::set_bytes, key, row.old_bytes},
                               false);
    else
      (void)write_tenant_index(rt, {tenant_index_change::kind::remove, key, 0}, false);
    return;
  }
  // The account counts the files there are (a row without a file, which a forget that failed
  // half-way leaves, was uncounted with the file).
  auto* acct = tenant_account_of(rt, key.tenant);
  if (!row.had_file) {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    acct->entities.fetch_add(1, std::memory_order_relaxed);
  }
  acct->bytes.fetch_add(row.bytes - row.old_bytes, std::memory_order_relaxed);
}

status uncount_forgotten(runtime_core& rt, const entity_key& key, bool had_file,
                         int64_t removed_bytes) {
  if (had_file) {
    auto* acct = tenant_account_of(rt, key.tenant);
    {
      std::lock_guard<std::mutex> g(rt.tenants.mu);
      acct->entities.fetch_sub(1, std::memory_order_relaxed);
    }
    acct->bytes.fetch_sub(removed_bytes, std::memory_order_relaxed);
  } else {
    auto has = has_row(rt, key);
    if (!has)
      return has.error();
    if (!*has)
      return status::ok();
  }
  // Not synced: a row that a power cut brings back has no file, and the rescan after the
  // unclean stop removes it.
  return write_tenant_index(rt, {tenant_index_change::kind::remove, key, 0}, false);
}

result<bool> index_in_place(runtime_core& rt, const entity_key& key, int64_t bytes) {
  auto has = has_row(rt, key);
  if (!has)
    return has.error();
  if (*has)
    return false;
  if (auto st = write_tenant_index(rt, {tenant_index_change::kind::add, key, bytes}, true); !st)
    return st;
  auto* acct = tenant_account_of(rt, key.tenant);
  {
    std::lock_guard<std::mutex> g(rt.tenants.mu);
    acct->entities.fetch_add(1, std::memory_order_relaxed);
  }
  acct->bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

} // namespace factum::detail
