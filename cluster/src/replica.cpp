// replica.cpp: storage "replicated" on a cluster node (docs/cluster.md, "Replication"). Every
// commit goes to its shard's log through the node's log_replicator (the runtime's commit sink);
// this file keeps the node's copies of the entity files in step with the logs, on a thread of
// its own (the replica thread, started by attach()):
// - a shard this node acquired is served only once it is ready: its writer opened under the
//   new epoch (whose marker fences the previous owner's later publishes) and this node's copy
//   caught up with the log up to that marker (prepare_shard);
// - a shard it follows (one of the R live nodes rendezvous hashing ranks first) is applied
//   every poll period (follow_shard), so that a takeover has little left to apply;
// - a shard it lost (a lease lapse, a move) has its writer closed and its files checked against
//   the log: an entity whose file holds a commit the log does not (one this node committed as
//   owner and never got acknowledged) is rebuilt from the log (verify_shard).
// Threads: the replica thread runs all of it; connect_log() runs in node::start.
#include <algorithm>
#include <cctype>
#include <set>
#include <thread>

#include "factum/cluster/shard_map.hpp"
#include "factum/replication/log_applier.hpp"
#include "factum/storage/entity_store.hpp"
#include "node_impl.hpp"

namespace factum::cluster {

namespace {

/// The cluster's name as a NATS token (letters, digits, '_').
std::string token_of(const std::string& name) {
  std::string out;
  for (char ch : name)
    out.push_back(std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
  return out;
}

} // namespace

status node::impl::connect_log() {
  replication::log_options o;
  o.servers = cfg.replication.servers;
  o.replicas = cfg.replication.replicas;
  o.ack_timeout = cfg.replication.ack_timeout;
  // A request to the log (an activation's check, a catch-up's read) waits no longer than a
  // commit does: while a stream elects its leader, calls fail 503 at once rather than wait.
  o.request_timeout = std::min(o.request_timeout, cfg.replication.ack_timeout);
  auto name = token_of(cfg.name);
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  o.stream_prefix = "FACTUM_LOG_" + upper;
  o.subject_prefix = "factum.log." + name;
  auto c = replication::log_connection::connect(o);
  if (!c)
    return status{c.error().code(), "cluster.replication: " + c.error().message()};
  auto shards = cfg.shards;
  log_sink = std::make_shared<replication::log_replicator>(
    *c, [shards](const entity_key& k) { return cluster::shard_of(k, shards); });
  log_sink->observe([this](std::chrono::nanoseconds d, bool ok) {
    if (ok)
      append_duration.observe(d);
    else
      append_failures.inc();
  });
  return status::ok();
}

std::filesystem::path node::impl::follow_state_file(uint32_t k) const {
  return std::filesystem::path(cfg.data_dir) / "runtime" / "replica" /
         ("shard-" + std::to_string(k) + ".json");
}

bool node::impl::follows_locked(uint32_t k) const {
  auto nodes = st.placeable();
  for (int i = 0; i < cfg.replication.replicas && !nodes.empty(); ++i) {
    auto first = rendezvous_owner(k, nodes);
    if (first == cfg.node_id)
      return true;
    nodes.erase(std::remove(nodes.begin(), nodes.end(), first), nodes.end());
  }
  return false;
}

status node::impl::prepare_shard(uint32_t k, int64_t epoch) {
  auto t0 = steady::now();
  // Activations of an earlier hold of the shard (this node lost it, then got it back) close
  // first: applying the log may put an image in place of a file one of them has open.
  auto which = [&](const entity_key& e) { return cluster::shard_of(e, cfg.shards) == k; };
  if (auto left = rt->release_entities(which, std::chrono::milliseconds(0)); left > 0)
    return {errc::busy, std::to_string(left) + " activations of shard " + std::to_string(k) +
                          " from before are still open here"};
  // The marker first: from it on nothing of an older owner lands in the log, so that the copy
  // caught up to the log's end below holds every acknowledged commit.
  if (auto st = log_sink->open_shard(k, epoch); !st)
    return st;
  auto before = applied[k].load();
  auto r = replication::apply_shard(log_sink->connection(), k, rt->entity_store_options(),
                                    follow_state_file(k));
  if (!r)
    return r.error();
  applied[k].store(r->applied);
  {
    std::lock_guard<std::mutex> g(mu);
    auto& s = st.shards[k];
    if (s.owner != cfg.node_id || s.epoch != epoch)
      return status{errc::conflict, "shard " + std::to_string(k) + " changed hands meanwhile"};
    ready[k].store(epoch, std::memory_order_release);
    if (s.owner_lease == lease_id.load() && moving[k].load() == 0)
      held[k].store(epoch, std::memory_order_release);
  }
  catch_ups.inc();
  want_index(k);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
  log({{"event", "shard_ready"},
       {"shard", k},
       {"epoch", epoch},
       {"applied", r->applied},
       {"caught_up", r->applied - std::min(before, r->applied)},
       {"ms", ms}});
  return status::ok();
}

status node::impl::follow_shard(uint32_t k) {
  auto last = log_sink->connection().last_seq(k);
  log_reachable.store(last || last.error().code() == errc::not_found);
  if (!last)
    return last.error().code() == errc::not_found ? status::ok() : last.error();
  log_last[k].store(*last);
  if (applied[k].load() >= *last)
    return status::ok();
  auto r = replication::apply_shard(log_sink->connection(), k, rt->entity_store_options(),
                                    follow_state_file(k));
  if (!r)
    return r.error();
  applied[k].store(r->applied);
  return status::ok();
}

status node::impl::verify_shard(uint32_t k) {
  auto which = [&](const entity_key& e) { return cluster::shard_of(e, cfg.shards) == k; };
  // Not waited for here (the mover thread closes the activations of lost shards, within
  // lost_release_wait): a shard still open is verified at a later round.
  if (auto left = rt->release_entities(which, std::chrono::milliseconds(0)); left > 0)
    return {errc::busy, std::to_string(left) + " activations of shard " + std::to_string(k) +
                          " are still open here"};
  auto list = rt->entities_where(which);
  if (!list)
    return list.error();
  auto opts = rt->entity_store_options();
  for (auto& e : *list) {
    auto ro = opts;
    ro.read_only = true;
    ro.create_if_missing = false;
    ro.capture_changes = false;
    ro.spares.reset();
    int64_t n = 0;
    std::string id;
    if (auto s = entity_store::open(ro, e); s) {
      n = (*s)->replicated_commit();
      id = (*s)->replicated_commit_id();
    }
    auto tip = log_sink->last_of(e);
    if (!tip)
      return tip.error();
    if (tip->number == n && tip->id == id)
      continue;
    entity_rebuilds.inc();
    log({{"level", "warn"},
         {"event", "entity_rebuilt"},
         {"entity", e.to_string()},
         {"detail", "its file held replicated commit " + std::to_string(n) + ", the log " +
                      std::to_string(tip->number)}});
    if (auto st = replication::rebuild_entity(log_sink->connection(), k, e, opts); !st)
      return st;
  }
  return follow_shard(k);
}

void node::impl::run_replica() {
  for (;;) {
    std::map<uint32_t, int64_t> prep;
    std::set<uint32_t> verify;
    {
      std::unique_lock<std::mutex> g(replica_mu);
      replica_cv.wait_for(g, period(), [&] { return replica_stop || !to_prepare.empty(); });
      if (replica_stop)
        return;
      prep.swap(to_prepare);
      verify.swap(to_verify);
    }
    // Shards lost since the last round: their writer goes and their files are checked.
    for (uint32_t k = 0; k < ready.size(); ++k)
      if (ready[k].load() != 0 && held[k].load() == 0 && !prep.count(k)) {
        ready[k].store(0);
        log_sink->close_shard(k);
        verify.insert(k);
      }
    auto requeue = [&](uint32_t k, int64_t e) {
      std::lock_guard<std::mutex> g(replica_mu);
      to_prepare.emplace(k, e);
    };
    for (auto& [k, e] : prep)
      if (ready[k].load() == e) {
        continue; // asked again (another path acquired it too): its copy is served already
      } else if (auto st = prepare_shard(k, e); st.code() == errc::busy) {
        // Activations from before still closing: asked again shortly, not counted a failure.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        requeue(k, e);
      } else if (!st) {
        apply_failures.inc();
        log({{"level", "warn"},
             {"event", "shard_not_ready"},
             {"shard", k},
             {"epoch", e},
             {"detail", st.to_string() + "; tried again at the next round"}});
        if (st.code() != errc::conflict)
          requeue(k, e);
      }
    // One lost shard after another, an acquisition first: a verification never holds up the
    // catch-up of a shard this node is to serve.
    for (auto it = verify.begin(); it != verify.end(); ++it) {
      {
        std::lock_guard<std::mutex> g(replica_mu);
        if (replica_stop || !to_prepare.empty()) {
          to_verify.insert(it, verify.end());
          break;
        }
      }
      auto k = *it;
      if (held[k].load() != 0 || ready[k].load() != 0)
        continue; // acquired again meanwhile: its activations check their files themselves
      if (auto st = verify_shard(k); !st) {
        if (st.code() != errc::busy) {
          apply_failures.inc();
          log({{"level", "warn"},
               {"event", "replica_verify_failed"},
               {"shard", k},
               {"detail", st.to_string() + "; tried again at the next round"}});
        }
        std::lock_guard<std::mutex> g(replica_mu);
        to_verify.insert(k);
      }
    }
    // A lost shard still to verify is not followed here: activations of it may still be open
    // on this node, and applying the log may put an image in place of a file one of them has
    // open (verify_shard follows it once they are closed).
    std::set<uint32_t> unverified;
    {
      std::lock_guard<std::mutex> g(replica_mu);
      unverified = to_verify;
    }
    std::vector<uint32_t> followed;
    {
      std::lock_guard<std::mutex> g(mu);
      for (uint32_t k = 0; k < st.shards.size(); ++k)
        if (held[k].load() == 0 && ready[k].load() == 0 && !st.shards[k].home.empty() &&
            st.shards[k].owner != cfg.node_id && follows_locked(k) && !unverified.count(k))
          followed.push_back(k);
    }
    for (auto k : followed) {
      {
        std::lock_guard<std::mutex> g(replica_mu);
        if (replica_stop || !to_prepare.empty())
          break; // an acquisition comes first
      }
      if (auto st = follow_shard(k); !st) {
        apply_failures.inc();
        log({{"level", "warn"},
             {"event", "replica_apply_failed"},
             {"shard", k},
             {"detail", st.to_string()}});
      }
    }
  }
}

} // namespace factum::cluster
