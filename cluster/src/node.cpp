// node.cpp: see factum/cluster/node.hpp (its state: node_impl.hpp; planned moves and the
// shared-storage indexing: mover.cpp). Takeovers of a down home's shards (storage "shared") are
// here: acquire_homes() on the polling thread, take_over_now() from route().
// Threads: the polling thread runs run(); route() runs
// on the gateway's I/O threads; claim_for/may_commit on storage threads and CAF workers. The
// cluster's state (`st_`) is under `mu_`; the per-shard epochs this node holds and the lease's
// deadline are atomics, read without the mutex at every commit. etcd is reached through two
// clients: the thread's, and `claim_` (under `claim_mu_`) for a first use of a shard in route().
#include "factum/cluster/node.hpp"

#include <algorithm>

#include "factum/cluster/shard_map.hpp"
#include "factum/entities/problems.hpp"
#include "node_impl.hpp"

namespace factum::cluster {

using detail::cluster_state;
using detail::shard_view;
using nlohmann::json;

result<int64_t> node::impl::take(uint32_t k, const shard_view& seen, std::string& taken_by) {
  std::lock_guard<std::mutex> cg(claim_mu);
  if (auto e = held[k].load(std::memory_order_acquire); e > 0)
    return e;
  if (seen.home.empty()) {
    auto h = claim->create_if_absent(key("homes", k), cfg.node_id);
    if (!h)
      return h.error();
    if (!h->succeeded && h->current && h->current->value != cfg.node_id) {
      taken_by = h->current->value;
      return status{errc::conflict, "placed on " + taken_by};
    }
  }
  auto l = lease_id.load();
  auto e = acquire(*claim, k, seen);
  if (!e)
    return e;
  if (lease_id.load() != l) // the lease was lost meanwhile: the new one acquires it again
    return status{errc::unavailable, "this node's lease changed while it took the shard"};
  record_held(k, *e, l);
  return e;
}

void node::impl::record_held(uint32_t k, int64_t epoch, int64_t l) {
  {
    std::lock_guard<std::mutex> g(mu);
    auto& cur = st.shards[k];
    cur.home = cfg.node_id;
    cur.owner = cfg.node_id;
    cur.epoch = epoch;
    cur.owner_lease = l;
  }
  if (replicated()) { // served once its copy caught up with the log (the replica thread)
    if (ready[k].load(std::memory_order_acquire) == epoch) { // caught up under this epoch
      held[k].store(epoch, std::memory_order_release);
      return;
    }
    std::lock_guard<std::mutex> g(replica_mu);
    to_prepare[k] = epoch;
    replica_cv.notify_all();
    return;
  }
  held[k].store(epoch, std::memory_order_release);
  if (shared())
    want_index(k);
}

result<int64_t> node::impl::take_over_now(uint32_t k, const shard_view& seen) {
  std::lock_guard<std::mutex> cg(claim_mu);
  if (auto e = held[k].load(std::memory_order_acquire); e > 0)
    return e;
  auto l = lease_id.load();
  auto e = take_over(*claim, k, seen);
  if (!e)
    return e;
  if (lease_id.load() != l)
    return status{errc::unavailable, "this node's lease changed while it took the shard over"};
  record_held(k, *e, l);
  return e;
}

std::string node::impl::address_of(const std::string& id) {
  {
    std::lock_guard<std::mutex> g(mu);
    if (auto it = st.nodes.find(id); it != st.nodes.end() && !it->second.empty())
      return it->second;
  }
  std::lock_guard<std::mutex> cg(claim_mu);
  auto now = steady::now();
  if (auto it = looked_up.find(id); it != looked_up.end() && now - it->second < period())
    return {};
  looked_up[id] = now;
  auto kv = claim->get(prefix + "nodes/" + id);
  if (!kv || !kv->has_value())
    return {};
  auto j = json::parse((*kv)->value, nullptr, false);
  if (!j.is_object() || !j.contains("address") || !j["address"].is_string())
    return {};
  auto address = j["address"].get<std::string>();
  std::lock_guard<std::mutex> g(mu);
  st.nodes[id] = address;
  poll_now = true; // the view is behind: read it all again soon
  cv.notify_all();
  return address;
}

// -- start and stop -----------------------------------------------------------------------------

namespace {

status check_config(const node_config& c) {
  auto part = [](const std::string& v, const char* what) -> status {
    if (v.empty() || v.size() > 64)
      return {errc::invalid_argument, std::string("cluster.") + what + " must be 1..64 characters"};
    for (char ch : v)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
        return {errc::invalid_argument,
                std::string("cluster.") + what + " may hold only letters, digits, '-', '_', '.'"};
    return status::ok();
  };
  if (auto st = part(c.name, "name"); !st)
    return st;
  if (auto st = part(c.node_id, "node_id"); !st)
    return st;
  if (c.etcd.empty())
    return {errc::invalid_argument, "cluster.etcd needs at least one http://host:port URL"};
  if (c.advertise.empty() || c.advertise.find(':') == std::string::npos)
    return {errc::invalid_argument, "cluster.advertise must be host:port"};
  if (c.shards < 1 || c.shards > 4096)
    return {errc::invalid_argument, "cluster.shards must be 1..4096"};
  if (c.min_nodes < 1 || c.min_nodes > 1024)
    return {errc::invalid_argument, "cluster.min_nodes must be 1..1024"};
  if (c.lease_ttl < std::chrono::milliseconds(1'000))
    return {errc::invalid_argument, "cluster.lease_ttl_ms must be at least 1000"};
  if (!c.secret.empty() && c.secret.size() < 16)
    return {errc::invalid_argument, "cluster.secret must be at least 16 characters"};
  if (c.storage != "local" && c.storage != "shared" && c.storage != "replicated")
    return {errc::invalid_argument,
            "cluster.storage must be \"local\", \"shared\" or \"replicated\""};
  if (c.storage == "replicated") {
    if (c.replication.servers.empty())
      return {errc::invalid_argument,
              "cluster.replication.servers: storage \"replicated\" needs the NATS servers of "
              "its log (nats://host:port)"};
    if (c.replication.replicas != 1 && c.replication.replicas != 3 && c.replication.replicas != 5)
      return {errc::invalid_argument, "cluster.replication.replicas must be 1, 3 or 5"};
    if (c.replication.ack_timeout < std::chrono::milliseconds(100))
      return {errc::invalid_argument, "cluster.replication.ack_timeout_ms must be at least 100"};
    if (c.data_dir.empty())
      return {errc::invalid_argument, "storage \"replicated\" needs the node's data directory"};
  }
  return status::ok();
}

} // namespace

result<std::shared_ptr<node>> node::start(node_config cfg) {
  if (auto st = check_config(cfg); !st)
    return st;
  auto p = std::make_unique<impl>(std::move(cfg));
  p->prefix = detail::prefix_of(p->cfg.name);
  etcd_options eo;
  eo.timeout = std::min(std::chrono::milliseconds(2'000), p->cfg.lease_ttl / 3);
  auto a = etcd_client::make(p->cfg.etcd, eo);
  if (!a)
    return a.error();
  auto b = etcd_client::make(p->cfg.etcd, eo);
  if (!b)
    return b.error();
  auto m = etcd_client::make(p->cfg.etcd, eo);
  if (!m)
    return m.error();
  p->etcd = std::move(*a);
  p->claim = std::move(*b);
  p->move_etcd = std::move(*m);
  // The cluster's shard count: the first node's, compare-and-swap created.
  json conf = {{"shards", p->cfg.shards}};
  auto c = p->etcd->create_if_absent(p->prefix + "config", conf.dump());
  if (!c)
    return c.error();
  if (!c->succeeded && c->current) {
    auto have = json::parse(c->current->value, nullptr, false);
    if (!have.is_object() || have.value("shards", 0u) != p->cfg.shards)
      return status{errc::conflict, "cluster " + p->cfg.name + " was created with config " +
                                      c->current->value + "; this node says " + conf.dump()};
  }
  if (p->replicated())
    if (auto st = p->connect_log(); !st)
      return st;
  if (auto st = p->wait_for_previous_incarnation(); !st)
    return st;
  if (auto st = p->grant_and_register(); !st)
    return st;
  if (auto st = p->poll(); !st)
    return st;
  p->acquire_homes();
  auto n = std::make_shared<node>(std::move(p));
  n->impl_->thread = std::thread([raw = n->impl_.get()] { raw->run(); });
  return n;
}

node::node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

node::~node() {
  stop();
}

void node::stop() {
  auto& p = *impl_;
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (p.stopping)
      return;
    p.stopping = true;
    waiters.swap(p.waiters);
  }
  p.cv.notify_all();
  if (p.thread.joinable())
    p.thread.join();
  detach();
  for (auto& w : waiters)
    w();
  p.deadline_ns.store(0);
  for (auto& h : p.held)
    h.store(0);
  if (p.lease != 0)
    (void)p.etcd->revoke(p.lease); // frees its keys at once; a failure leaves them to the TTL
  p.log({{"event", "node_stopped"}});
}

/// A node id that is still registered (the process before a kill -9 of this one, whose lease
/// has not run out yet, or another process misconfigured with the same id) must leave first.
status node::impl::wait_for_previous_incarnation() {
  auto until = steady::now() + cfg.lease_ttl + std::chrono::seconds(2);
  bool logged = false;
  for (;;) {
    auto kv = etcd->get(prefix + "nodes/" + cfg.node_id);
    if (!kv)
      return kv.error();
    if (!kv->has_value())
      return status::ok();
    if (!logged) {
      log({{"event", "waiting_for_previous_lease"},
           {"detail", "node id " + cfg.node_id + " is still registered; waiting for its lease"}});
      logged = true;
    }
    if (steady::now() > until)
      return {errc::conflict, "node id " + cfg.node_id + " is live elsewhere (" + (*kv)->value +
                                "); two nodes may not share an id"};
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // polling etcd, bounded above
  }
}

status node::impl::grant_and_register() {
  auto t0 = steady::now();
  auto l = etcd->grant(cfg.lease_ttl);
  if (!l)
    return l.error();
  json me = {{"address", cfg.advertise}};
  auto put = etcd->put(prefix + "nodes/" + cfg.node_id, me.dump(), *l);
  if (!put) {
    (void)etcd->revoke(*l);
    return put.error();
  }
  lease = *l;
  lease_id.store(*l);
  deadline_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      (t0 + cfg.lease_ttl * 4 / 5).time_since_epoch())
                      .count(),
                    std::memory_order_release);
  log({{"event", "lease_granted"}, {"lease", std::to_string(*l)}});
  return status::ok();
}

// -- the polling thread -------------------------------------------------------------------------

/// Renews the lease. The lease counts as live until four fifths of its TTL after the renewal
/// was sent (etcd's own expiry is a TTL after it received it). A lease etcd no longer knows is
/// lost: every shard this node held is dropped at once, and a new lease is granted.
status node::impl::renew() {
  auto t0 = steady::now();
  auto r = etcd->keepalive(lease);
  if (!r) {
    renewal_failures.inc();
    return r.error();
  }
  if (*r == 0) {
    leases_lost.inc();
    deadline_ns.store(0, std::memory_order_release);
    for (auto& h : held)
      h.store(0, std::memory_order_release);
    // Their files are for the nodes that take the shards over: closed after this period's
    // acquisitions (schedule_indexing), so that a shard taken back at once keeps its activations.
    release_after_poll = takes_over();
    log({{"level", "error"},
         {"event", "lease_lost"},
         {"detail", "etcd no longer knows lease " + std::to_string(lease) +
                      ": every shard of this node is dropped; granting a new lease"}});
    lease = 0;
    lease_id.store(0);
    return grant_and_register();
  }
  renewals.inc();
  renewal_duration.observe(steady::now() - t0);
  deadline_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      (t0 + cfg.lease_ttl * 4 / 5).time_since_epoch())
                      .count(),
                    std::memory_order_release);
  return status::ok();
}

/// Reads nodes, homes and shards (three range reads) into st.
status node::impl::poll() {
  auto next = detail::read_state(*etcd, prefix, cfg.shards);
  if (!next) {
    polls_failed.inc();
    return next.error();
  }
  std::lock_guard<std::mutex> g(mu);
  if (next->revision < floors_revision) // a floor this node wrote after these reads
    next->floors = st.floors;
  // A shard route() acquired after these reads (its epoch is newer than what they saw) keeps
  // what route() wrote: the reads predate it.
  for (uint32_t k = 0; k < next->shards.size() && k < st.shards.size(); ++k)
    if (st.shards[k].owner == cfg.node_id && st.shards[k].epoch > next->revision)
      next->shards[k] = st.shards[k];
  st = std::move(*next);
  return status::ok();
}

/// Takes shard k for this node under its lease: the owner key's create revision is the epoch.
/// A key that names this node under another lease is a previous incarnation's (the data
/// directory's lock shows it is gone): deleted first.
result<int64_t> node::impl::acquire(etcd_client& c, uint32_t k, const shard_view& seen) {
  auto l = lease_id.load();
  if (l == 0)
    return status{errc::unavailable, "this node has no lease"};
  if (seen.owner == cfg.node_id && seen.owner_lease != l && seen.owner_mod_revision != 0)
    (void)c.delete_if_mod_revision(key("shards", k), seen.owner_mod_revision);
  // Only the shard's home may take it, as etcd says now (a hand-over may have moved it).
  using f = etcd_compare::field;
  auto r =
    c.transact({{key("homes", k), f::value, cfg.node_id, 0}, {key("shards", k), f::create, {}, 0}},
               {{key("shards", k), cfg.node_id, l}});
  if (!r)
    return r.error();
  if (!r->succeeded) {
    auto cur = c.get(key("shards", k));
    if (cur && cur->has_value() && (*cur)->value == cfg.node_id && (*cur)->lease == l)
      return (*cur)->create_revision; // taken by the other path meanwhile
    return status{errc::conflict, "shard " + std::to_string(k) + " is not this node's to take (" +
                                    (cur && cur->has_value() ? "held by " + (*cur)->value
                                                             : std::string("its home moved")) +
                                    ")"};
  }
  acquisitions.inc();
  return r->revision;
}

/// Acquires every shard whose home is this node and that nobody holds; with shared storage,
/// also takes over each shard whose home is down that rendezvous hashing gives this node.
void node::impl::acquire_homes() {
  std::vector<std::pair<uint32_t, shard_view>> todo, orphans;
  {
    std::lock_guard<std::mutex> g(mu);
    auto placeable = st.placeable();
    for (uint32_t k = 0; k < st.shards.size(); ++k) {
      auto& s = st.shards[k];
      bool mine = s.owner == cfg.node_id && s.owner_lease == lease;
      if (moving[k].load() != 0 || moving_out_locked(k))
        continue; // its files are leaving this node
      if (s.home == cfg.node_id && (!mine) && (s.owner.empty() || s.owner == cfg.node_id))
        todo.emplace_back(k, s);
      else if (orphaned_locked(k) && rendezvous_owner(k, placeable) == cfg.node_id)
        orphans.emplace_back(k, s);
    }
  }
  int got = 0, taken = 0;
  for (auto& [k, seen] : todo) {
    auto e = acquire(*etcd, k, seen);
    if (!e)
      continue; // the next period tries again
    ++got;
    record_held(k, *e, lease);
  }
  for (auto& [k, seen] : orphans) {
    auto e = take_over(*etcd, k, seen);
    if (!e)
      continue; // another node was first, or etcd failed: the next poll shows which
    ++taken;
    record_held(k, *e, lease);
  }
  if (got > 0)
    log({{"event", "shards_acquired"}, {"count", got}});
  if (taken > 0)
    log({{"event", "shards_taken_over"}, {"count", taken}});
}

result<int64_t> node::impl::take_over(etcd_client& c, uint32_t k, const shard_view& seen) {
  auto l = lease_id.load();
  if (l == 0)
    return status{errc::unavailable, "this node has no lease"};
  using f = etcd_compare::field;
  auto r = c.transact(
    {{key("homes", k), f::mod, {}, seen.home_mod_revision}, {key("shards", k), f::create, {}, 0}},
    {{key("homes", k), cfg.node_id},
     {key("shards", k), cfg.node_id, l},
     {key("moves", k), std::nullopt}});
  if (!r)
    return r.error();
  if (!r->succeeded)
    return status{errc::conflict, "shard " + std::to_string(k) +
                                    " changed in etcd: another node took it first, or its home "
                                    "is back"};
  acquisitions.inc();
  takeovers.inc();
  log(
    {{"level", "warn"},
     {"event", "shard_taken_over"},
     {"shard", k},
     {"from", seen.home},
     {"epoch", r->revision},
     {"detail", "its home " + seen.home + " has no lease; its files are fenced by the new epoch"}});
  return r->revision;
}

/// Sets `held` from st: the epochs of the shards this node holds under its current lease.
void node::impl::publish_held() {
  std::lock_guard<std::mutex> g(mu);
  auto l = lease_id.load();
  for (uint32_t k = 0; k < st.shards.size(); ++k) {
    auto& s = st.shards[k];
    int64_t e = (s.owner == cfg.node_id && s.home == cfg.node_id && s.owner_lease == l && l != 0)
                  ? s.epoch
                  : 0;
    if (moving[k].load() != 0 || moving_out_locked(k))
      e = 0;
    if (replicated() && e != 0 && ready[k].load(std::memory_order_acquire) != e)
      e = 0; // acquired, not caught up with its log yet
    if (held[k].exchange(e, std::memory_order_acq_rel) != 0 && e == 0 && takes_over()) {
      std::lock_guard<std::mutex> mg(move_mu); // order: mu, then move_mu
      release_lost = true;
    }
  }
}

void node::impl::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait_for(g, period(), [&] { return stopping || poll_now; });
      if (stopping)
        return;
      poll_now = false;
    }
    auto st = lease == 0 ? grant_and_register() : renew();
    if (st && (st = poll()))
      acquire_homes();
    publish_held();
    if (st)
      schedule_moves();
    if (st && takes_over())
      schedule_indexing();
    bool live = lease_live();
    if (takes_over() && was_live && !live) { // cut off from etcd: another node may take over soon
      std::lock_guard<std::mutex> g(move_mu);
      release_lost = true;
      move_cv.notify_all();
    }
    was_live = live;
    if (!st)
      log({{"level", "warn"}, {"event", "etcd_unreachable"}, {"detail", st.message()}});
    std::vector<std::function<void()>> run_now;
    {
      std::lock_guard<std::mutex> g(mu);
      run_now.swap(waiters);
    }
    for (auto& w : run_now)
      w();
  }
}

// -- entity_ownership ---------------------------------------------------------------------------

uint32_t node::shard_of(const entity_key& key) const {
  return cluster::shard_of(key, impl_->cfg.shards);
}

std::shared_ptr<replication::commit_sink> node::replicator() const {
  return impl_->log_sink;
}

result<owner_claim> node::claim_for(const entity_key& key) const {
  auto& p = *impl_;
  if (!p.lease_live())
    return status{errc::unavailable, "this node has no live lease in etcd"};
  auto k = shard_of(key);
  if (p.moving[k].load(std::memory_order_acquire) != 0)
    return status{errc::not_owner, "shard " + std::to_string(k) + " is moving to another node"};
  auto e = p.held[k].load(std::memory_order_acquire);
  if (e == 0)
    return status{errc::not_owner, "shard " + std::to_string(k) + " is not this node's"};
  return owner_claim{e, k};
}

bool node::may_commit(const owner_claim& c) const {
  auto& p = *impl_;
  return c.epoch > 0 && c.shard < p.held.size() && p.lease_live() &&
         p.held[c.shard].load(std::memory_order_acquire) == c.epoch;
}

const std::string& node::node_id() const {
  return impl_->cfg.node_id;
}

// -- cluster_router -----------------------------------------------------------------------------

shard_route node::route(const entity_key& key, bool forwarded) {
  auto& p = *impl_;
  shard_route r;
  r.shard = shard_of(key);
  auto k = r.shard;
  auto unavailable = [&](const problem_kind& kind, std::string detail) {
    r.to = shard_route::where::unavailable;
    r.code = std::string(kind.code);
    r.detail = std::move(detail);
    return r;
  };
  if (!p.lease_live())
    return unavailable(problems::cluster_unavailable,
                       "this node has no live lease in etcd (etcd unreachable or without quorum)");
  auto not_taken = [&](const status& why) { // acquiring or taking over the shard failed
    if (why.code() == errc::unavailable)
      return unavailable(problems::cluster_unavailable, why.message());
    unavailable(forwarded ? problems::not_owner : problems::shard_unavailable, why.message());
    r.settling = !forwarded && why.code() == errc::conflict; // another node has it: read again
    return r;
  };
  auto moving = [&] { // this node's gateway (a client's request), or the relaying node, waits
    unavailable(forwarded ? problems::not_owner : problems::shard_unavailable,
                "shard " + std::to_string(k) + " is moving to another node; retry in a moment");
    r.settling = !forwarded;
    return r;
  };
  if (p.moving[k].load(std::memory_order_acquire) != 0)
    return moving();
  if (auto e = p.held[k].load(std::memory_order_acquire); e > 0) {
    r.epoch = e;
    return r; // local
  }
  shard_view s;
  std::vector<std::string> placeable;
  bool orphaned = false;
  {
    std::lock_guard<std::mutex> g(p.mu);
    s = p.st.shards[k];
    if (auto it = p.st.moves.find(k); p.moving_out_locked(k) && !it->second.handed_over)
      return moving();
    orphaned = p.orphaned_locked(k);
    if (s.home.empty() || orphaned)
      placeable = p.st.placeable(); // a shard's first request, or its home is down (shared)
  }
  auto to_node = [&](const std::string& id, int64_t epoch) {
    if (forwarded) { // the relaying node's view or this one's is behind: read etcd again now
      p.poll_soon();
      return unavailable(problems::not_owner, "shard " + std::to_string(k) + " is not this node's");
    }
    auto address = p.address_of(id);
    if (address.empty())
      return unavailable(problems::shard_unavailable, "shard " + std::to_string(k) +
                                                        " lives on node " + id +
                                                        ", which is down; retry when it is back");
    r.to = shard_route::where::forward;
    r.address = address;
    r.epoch = epoch;
    return r;
  };
  if (!s.owner.empty() && s.owner != p.cfg.node_id)
    return to_node(s.owner, s.epoch);
  if (orphaned) { // shared storage: the heir takes the shard over now
    auto heir = rendezvous_owner(k, placeable);
    if (heir != p.cfg.node_id)
      return to_node(heir, 0);
    auto e = p.take_over_now(k, s);
    if (!e)
      return not_taken(e.error());
    r.epoch = *e;
    return r;
  }
  std::string home = s.home;
  if (home.empty() && placeable.size() < p.cfg.min_nodes)
    return unavailable(problems::shard_unavailable,
                       "shard " + std::to_string(k) +
                         " is not placed yet: " + std::to_string(placeable.size()) + " of the " +
                         std::to_string(p.cfg.min_nodes) +
                         " live nodes the cluster waits for (cluster.min_nodes) are up");
  if (home.empty()) {
    home = rendezvous_owner(k, placeable);
    if (home.empty())
      home = p.cfg.node_id;
  }
  if (home != p.cfg.node_id)
    return to_node(home, 0);
  // This node's shard (or the one it is to take first): acquire it now.
  std::string taken_by;
  auto e = p.take(k, s, taken_by);
  if (!taken_by.empty())
    return to_node(taken_by, 0); // another node placed it first
  if (!e)
    return not_taken(e.error());
  r.epoch = *e;
  return r;
}

std::map<std::string, std::string> node::degradation_floors() const {
  auto& p = *impl_;
  std::lock_guard<std::mutex> g(p.mu);
  return p.st.floors;
}

status node::set_degradation_floor(const std::string& tenant, const std::string& value) const {
  auto& p = *impl_;
  // A removed floor is an empty value (not a deleted key): its revision orders it after a poll
  // that read the floor before.
  result<int64_t> rev = status{errc::unavailable, "not written"};
  {
    std::lock_guard<std::mutex> cg(p.claim_mu);
    rev = p.claim->put(p.prefix + "floors/" + tenant, value);
  }
  if (!rev)
    return rev.error();
  std::lock_guard<std::mutex> g(p.mu); // this node sees it before its next poll
  p.st.floors[tenant] = value;
  p.floors_revision = std::max(p.floors_revision, *rev);
  return status::ok();
}

void node::impl::poll_soon() {
  auto now = now_ns();
  auto last = poll_soon_ns.load(std::memory_order_relaxed);
  if (now - last < std::chrono::nanoseconds(poll_soon_spacing).count() ||
      !poll_soon_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
    return;
  std::lock_guard<std::mutex> g(mu);
  poll_now = true;
  cv.notify_all();
}

void node::refresh(uint32_t, std::function<void()> then) {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (!p.stopping) {
      p.waiters.push_back(std::move(then));
      p.poll_now = true;
      p.cv.notify_all();
      return;
    }
  }
  then();
}

std::vector<std::string> node::peers(std::vector<std::string>& down) const {
  auto& p = *impl_;
  std::lock_guard<std::mutex> g(p.mu);
  std::vector<std::string> out;
  for (auto& [id, address] : p.st.nodes)
    if (id != p.cfg.node_id && !address.empty())
      out.push_back(address);
  std::set<std::string> homes;
  for (auto& s : p.st.shards)
    if (!s.home.empty() && s.home != p.cfg.node_id && !p.st.nodes.count(s.home))
      homes.insert(s.home);
  down.assign(homes.begin(), homes.end());
  return out;
}

std::string node::describe() const {
  auto& p = *impl_;
  std::lock_guard<std::mutex> g(p.mu);
  json out = {{"cluster", p.cfg.name},
              {"node", p.cfg.node_id},
              {"storage", p.cfg.storage},
              {"shard_count", p.cfg.shards},
              {"lease_live", p.lease_live()}};
  out.update(detail::describe(p.st));
  if (p.replicated()) {
    // Per shard: whether this node serves it from a copy caught up with the log, and how far
    // its copy applied the log (a follower's lag is the log's last sequence less this).
    json shards = json::array();
    for (uint32_t k = 0; k < p.cfg.shards; ++k)
      shards.push_back(
        {{"shard", k}, {"ready", p.ready[k].load() != 0}, {"applied_seq", p.applied[k].load()}});
    out["replica"] = {{"replicas", p.cfg.replication.replicas}, {"shards", std::move(shards)}};
  }
  return out.dump();
}

bool node::healthy(std::string& why) const {
  if (impl_->lease_live())
    return true;
  why = "this node has no live lease in etcd: it serves no shard until it has one";
  return false;
}

const factum::metrics::registry* node::metrics() const {
  return &impl_->metric_registry;
}

void node::impl::register_gauges() {
  using factum::metrics::kind;
  auto gauge = [this](std::string name, std::string help, std::function<double()> value) {
    metric_registry.add(
      std::move(name), std::move(help), kind::gauge, {},
      [value = std::move(value)](factum::metrics::sample_writer& w) { w.add(value()); });
  };
  gauge("factum_cluster_lease_live", "1 while this node holds a live lease in etcd.",
        [this] { return lease_live() ? 1.0 : 0.0; });
  gauge("factum_cluster_shards_owned", "Shards this node serves now.", [this] {
    double n = 0;
    for (auto& h : held)
      n += h.load() > 0 ? 1 : 0;
    return n;
  });
  gauge("factum_cluster_shards_moving", "Shards this node is moving out now.", [this] {
    double n = 0;
    for (auto& m : moving)
      n += m.load() != 0 ? 1 : 0;
    return n;
  });
  gauge("factum_cluster_shards_unindexed",
        "Shards this node serves whose entity files its listing and alarm indexes do not hold "
        "yet (shared storage: indexing, or files another process still has open).",
        [this] {
          double n = 0;
          if (takes_over()) {
            std::lock_guard<std::mutex> g(move_mu);
            for (uint32_t k = 0; k < held.size(); ++k)
              n += held[k].load() > 0 && index_state[k] != 1 ? 1 : 0;
          }
          return n;
        });
  metric_registry.add("factum_replication_images_total",
                      "Storage replicated: images of entity files this node appended to their "
                      "shard's log (each lets the log drop the entity's records before it).",
                      kind::counter, {}, [this](factum::metrics::sample_writer& w) {
                        w.add(log_sink ? static_cast<double>(log_sink->images_appended()) : 0.0);
                      });
  metric_registry.add("factum_replication_image_bytes_total",
                      "Storage replicated: bytes of the images this node appended to the log.",
                      kind::counter, {}, [this](factum::metrics::sample_writer& w) {
                        w.add(log_sink ? static_cast<double>(log_sink->image_bytes_appended())
                                       : 0.0);
                      });
  gauge("factum_replication_log_reachable",
        "0 when the replicated log (NATS JetStream) did not answer this node's last request "
        "(storage replicated); 1 otherwise.",
        [this] { return log_reachable.load() ? 1.0 : 0.0; });
  gauge("factum_replication_replicas_missing",
        "Storage replicated: how many fewer live, undrained nodes there are than the replicas "
        "each shard should have copies on.",
        [this] {
          if (!replicated())
            return 0.0;
          std::lock_guard<std::mutex> g(mu);
          auto live = static_cast<int>(st.placeable().size());
          return static_cast<double>(std::max(0, cfg.replication.replicas - live));
        });
  gauge("factum_replication_follower_lag_messages",
        "Storage replicated: log messages this node's copies of the shards it follows have not "
        "applied yet, as of its last look at each log.",
        [this] {
          double n = 0;
          for (uint32_t k = 0; k < applied.size(); ++k)
            if (held[k].load() == 0 && log_last[k].load() > applied[k].load())
              n += static_cast<double>(log_last[k].load() - applied[k].load());
          return n;
        });
  gauge("factum_replication_shards_waiting",
        "Storage replicated: shards this node acquired that it does not serve yet (its copy "
        "catching up with the log).",
        [this] {
          double n = 0;
          if (replicated()) {
            std::lock_guard<std::mutex> g(mu);
            for (uint32_t k = 0; k < st.shards.size(); ++k)
              n += st.shards[k].owner == cfg.node_id && held[k].load() == 0 ? 1 : 0;
          }
          return n;
        });
  gauge("factum_cluster_nodes_live", "Nodes registered in etcd with a live lease.", [this] {
    std::lock_guard<std::mutex> g(mu);
    return static_cast<double>(st.nodes.size());
  });
}

} // namespace factum::cluster
