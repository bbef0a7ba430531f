// node_impl.hpp (private): the state of a cluster node (factum/cluster/node.hpp), shared by
// node.cpp (lease, polling, ownership, routing) and mover.cpp (planned shard moves). Each member
// says which lock or thread guards it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "factum/cluster/etcd_client.hpp"
#include "factum/cluster/node.hpp"
#include "factum/http/client.hpp"
#include "factum/metrics/metrics.hpp"
#include "factum/replication/log_replicator.hpp"
#include "factum/storage/fact.hpp"
#include "state.hpp"

namespace factum::cluster {

using steady = std::chrono::steady_clock;

/// Upper bounds (seconds) of the buckets of the lease renewal and log append histograms.
inline constexpr std::array<double, 10> renewal_bounds = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                          0.05,  0.1,    0.25,  0.5,  1};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
    .count();
}

inline std::string iso_now() {
  auto t = std::chrono::system_clock::now().time_since_epoch();
  return format_utc_ms(std::chrono::duration_cast<std::chrono::milliseconds>(t).count());
}

struct node::impl {
  using json = nlohmann::json;
  using cluster_state = detail::cluster_state;
  using shard_view = detail::shard_view;
  using move_view = detail::move_view;

  node_config cfg;
  std::string prefix;                 ///< /factum/<name>/
  std::unique_ptr<etcd_client> etcd;  ///< the polling thread's
  std::unique_ptr<etcd_client> claim; ///< route()'s and accept_move()'s, under claim_mu
  std::mutex claim_mu;

  int64_t lease = 0; ///< the polling thread's (and start's); 0: none
  std::atomic<int64_t> lease_id{0};
  std::atomic<int64_t> deadline_ns{0};    ///< the lease is live until then (steady clock)
  std::vector<std::atomic<int64_t>> held; ///< per shard: this node's epoch, 0 when not held
  /// Per shard: the epoch of the move this node is making of it (0: none). While set, the
  /// shard's activations are refused and its requests answered SHARD_UNAVAILABLE here.
  std::vector<std::atomic<int64_t>> moving;

  mutable std::mutex mu; ///< guards st, floors_revision, waiters, stopping, poll_now, accepted
  cluster_state st;
  int64_t floors_revision = 0;                ///< etcd's revision of this node's last floor write
  std::vector<std::function<void()>> waiters; ///< refresh() callbacks for the next poll
  bool stopping = false;
  bool poll_now = false;
  std::condition_variable cv;
  std::thread thread;
  std::map<uint32_t, int64_t> accepted; ///< moves to this node checked in etcd: shard -> epoch
  std::set<uint32_t> discarding; ///< shards whose failed move's copies are being removed here

  // -- metrics (any thread): each registered once here; the gauges in register_gauges() --
  factum::metrics::registry metric_registry;
  using counter = factum::metrics::counter;
  counter renewals{metric_registry, "factum_cluster_lease_renewals_total",
                   "Lease keep-alives etcd answered."};
  counter renewal_failures{metric_registry, "factum_cluster_lease_renewal_failures_total",
                           "Lease keep-alives etcd did not answer."};
  /// The answered keep-alives.
  factum::metrics::histogram renewal_duration{
    metric_registry, "factum_cluster_lease_renewal_duration_seconds",
    "Time of the lease keep-alives etcd answered.", renewal_bounds};
  counter leases_lost{
    metric_registry, "factum_cluster_leases_lost_total",
    "Times etcd no longer knew this node's lease (it had stopped renewing, e.g. paused)."};
  counter acquisitions{metric_registry, "factum_cluster_shard_acquisitions_total",
                       "Shards this node acquired (each under a new epoch)."};
  counter polls_failed{metric_registry, "factum_cluster_polls_failed_total",
                       "Reads of the cluster's state that etcd did not answer."};
  counter moves_done{metric_registry, "factum_cluster_shard_moves_total",
                     "Shards this node handed over to another node (planned moves)."};
  counter moves_failed{metric_registry, "factum_cluster_shard_moves_failed_total",
                       "Planned moves of this node's shards given up (the shard stayed here)."};
  /// Storage "shared": shards taken over from a node that was down (no lease).
  counter takeovers{
    metric_registry, "factum_cluster_shard_takeovers_total",
    "Shards this node took over from a node whose lease had run out (shared storage)."};
  /// Entity files sent by moves out, adopted from moves in.
  enum move_direction : size_t { files_sent, files_received };
  factum::metrics::counter_by_label move_files{
    metric_registry,
    "factum_cluster_move_files_total",
    "Entity files of planned shard moves, sent and received by this node.",
    "direction",
    {"sent", "received"}};
  /// Registers the gauges read from the node's state at each scrape: the lease, the shards
  /// owned, moving and unindexed, the live nodes.
  void register_gauges();

  // -- planned moves (mover.cpp): the mover thread, started by attach() --
  std::mutex move_mu; ///< guards rt, move_queue, queued, move_stop
  std::condition_variable move_cv;
  runtime* rt = nullptr;
  std::deque<std::pair<uint32_t, move_view>> move_queue;
  std::set<uint32_t> queued; ///< shards in move_queue or being moved
  /// (shard, epoch) of moves not to schedule again: failed here, or their copies discarded.
  std::set<std::pair<uint32_t, int64_t>> given_up;
  std::unique_ptr<etcd_client> move_etcd; ///< the mover thread's
  bool move_stop = false;
  std::thread mover;

  // -- shared storage (mover.cpp): this node's indexes follow the shards it holds --
  std::set<uint32_t> to_index;     ///< under move_mu: acquired shards whose files to index here
  std::set<uint32_t> to_unindex;   ///< under move_mu: shards others serve, whose rows to drop
  bool release_lost = false;       ///< under move_mu: close the activations of unheld shards
  bool release_after_poll = false; ///< the polling thread's: release_lost once `held` is set
  bool was_live = false;           ///< the polling thread's: the lease was live at its last look
  /// Under move_mu, per shard: 1 indexed here since its acquisition, 0 unindexed, -1 not known
  /// (at start, or an index pass that found files another process had open).
  std::vector<int8_t> index_state;

  // -- replicated storage (replica.cpp): the replica thread, started by attach() --
  std::shared_ptr<replication::log_replicator> log_sink; ///< null unless replicated
  /// Per shard: the epoch under which this node's copy caught up with the log and its writer
  /// is open (0: not ready). A shard is published held only once ready under its epoch.
  std::vector<std::atomic<int64_t>> ready;
  std::mutex replica_mu; ///< guards the members below
  std::condition_variable replica_cv;
  std::map<uint32_t, int64_t> to_prepare; ///< shards acquired: catch up, then serve
  std::set<uint32_t> to_verify;           ///< shards lost: check this node's files against the log
  bool replica_stop = true;
  std::thread replica_thread;
  /// Per shard: how far this node's copy applied the log, as last saved (GET /v1/cluster).
  std::vector<std::atomic<uint64_t>> applied;
  /// Per shard: the log's last sequence at this node's last look (follow_shard), 0: none.
  std::vector<std::atomic<uint64_t>> log_last;
  /// Whether the log answered this node's last request of the replica thread.
  std::atomic<bool> log_reachable{true};
  counter catch_ups{metric_registry, "factum_replication_catch_ups_total",
                    "Shards this node caught up with their log before serving them."};
  counter entity_rebuilds{metric_registry, "factum_replication_entity_rebuilds_total",
                          "Entity files this node rebuilt from their shard's log (diverged)."};
  counter apply_failures{metric_registry, "factum_replication_apply_failures_total",
                         "Applications of a shard's log to this node's copy that failed."};
  /// Each commit from its append to the log's acknowledgement (a quorum of its replicas).
  factum::metrics::histogram append_duration{
    metric_registry, "factum_replication_append_duration_seconds",
    "Time from a commit's append to its shard's log to the log's acknowledgement.", renewal_bounds};
  counter append_failures{metric_registry, "factum_replication_append_failures_total",
                          "Commits the log refused or did not acknowledge in time (their calls "
                          "failed 503)."};

  bool replicated() const { return cfg.storage == "replicated"; }
  /// Storage in which a down owner's shards are taken over and moves copy no file.
  bool takes_over() const { return shared() || replicated(); }
  /// Connects to the NATS servers of the log and makes log_sink (node::start).
  status connect_log();
  /// The replica thread: prepares acquired shards, follows the others, verifies lost ones.
  void run_replica();
  /// Catches shard k up with its log and opens its writer under `epoch`; ready then.
  status prepare_shard(uint32_t k, int64_t epoch);
  /// Applies shard k's log to this node's copy (a follower's round).
  status follow_shard(uint32_t k);
  /// Rebuilds every entity file of shard k here that is not the log's.
  status verify_shard(uint32_t k);
  /// Whether this node keeps a copy of shard k (one of its R rendezvous-first live nodes).
  bool follows_locked(uint32_t k) const;
  std::filesystem::path follow_state_file(uint32_t k) const;

  explicit impl(node_config c)
      : cfg(std::move(c)), held(cfg.shards), moving(cfg.shards), index_state(cfg.shards, -1),
        ready(cfg.shards), applied(cfg.shards), log_last(cfg.shards) {
    register_gauges();
  }

  void log(json line) const {
    json out = {{"ts", iso_now()}, {"component", "cluster"}, {"node", cfg.node_id}};
    out.update(line);
    auto s = out.dump(-1, ' ', false, json::error_handler_t::replace);
    if (cfg.log)
      return cfg.log(s);
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), stderr);
  }

  std::chrono::milliseconds period() const {
    return std::max(std::chrono::milliseconds(100), cfg.lease_ttl / 5);
  }
  bool shared() const { return cfg.storage == "shared"; }
  bool lease_live() const { return now_ns() < deadline_ns.load(std::memory_order_acquire); }
  std::string key(std::string_view what, uint32_t k) const {
    return prefix + std::string(what) + "/" + std::to_string(k);
  }
  /// Whether this node has a move of shard k out that is not over (under way, or handed over
  /// and its copies not yet removed): it must not acquire k meanwhile. Call with `mu` held.
  bool moving_out_locked(uint32_t k) const {
    auto it = st.moves.find(k);
    return it != st.moves.end() && it->second.from == cfg.node_id && it->second.failed.empty();
  }

  /// Storage "shared": nobody holds shard k and its home is down (not live), and no move of k
  /// by a live node is under way: the live node rendezvous hashing picks may take it over.
  /// Call with `mu` held.
  bool orphaned_locked(uint32_t k) const {
    if (!takes_over() || k >= st.shards.size())
      return false;
    auto& s = st.shards[k];
    if (s.home.empty() || !s.owner.empty() || st.nodes.count(s.home))
      return false;
    auto it = st.moves.find(k);
    return it == st.moves.end() || !it->second.failed.empty() || !st.nodes.count(it->second.from);
  }

  status grant_and_register();
  status wait_for_previous_incarnation();
  status renew();
  status poll();
  void acquire_homes();
  result<int64_t> acquire(etcd_client& c, uint32_t k, const shard_view& seen);
  void publish_held();
  void run();

  /// Storage "shared": takes shard k over from its home, which is down (no lease, so it holds
  /// no owner key): homes/<k> and shards/<k> for this node in one transaction, if homes/<k> is
  /// still what `seen` read and nobody holds k; a move of k the down home was making is
  /// dropped. The new epoch.
  result<int64_t> take_over(etcd_client& c, uint32_t k, const shard_view& seen);
  /// Shard k is this node's under `epoch` and lease `l` (after acquire() or take_over()): the
  /// state says so, `held` publishes it, and (shared storage) its files are to be indexed.
  void record_held(uint32_t k, int64_t epoch, int64_t l);
  /// take_over() from route() (a request for a shard whose home is down), under claim_mu.
  result<int64_t> take_over_now(uint32_t k, const shard_view& seen);
  /// Storage "shared", any thread: k was acquired here; its files are to be indexed.
  void want_index(uint32_t k);

  /// Places shard k on this node if it was never used (homes/<k>; `taken_by` names the node
  /// that placed it first otherwise) and acquires it: its epoch. Under claim_mu.
  result<int64_t> take(uint32_t k, const shard_view& seen, std::string& taken_by);

  /// A relayed request named this node for a shard it does not hold (route()): its view may be
  /// behind etcd's (a shard handed over to it, not acquired until its next poll). Wakes the
  /// polling thread now, at most once per poll_soon_spacing; any thread, never blocks on etcd.
  void poll_soon();
  static constexpr std::chrono::milliseconds poll_soon_spacing{20};
  std::atomic<int64_t> poll_soon_ns{0}; ///< steady clock of the last poll_soon() that woke it

  /// The address of node `id`: from the last poll's `nodes`, else (a node that registered
  /// since, or one that is down) read from etcd, at most once per poll period and node.
  std::string address_of(const std::string& id);
  std::map<std::string, steady::time_point> looked_up; ///< under claim_mu

  // -- planned moves (mover.cpp) --

  /// After a poll (polling thread): queues this node's moves out that are not queued yet.
  void schedule_moves();
  /// The mover thread: runs queued moves one at a time until move_stop.
  void run_mover();
  /// Moves shard k out as `m` says, or gives the move up (moves/<k> marked failed).
  void move_out(uint32_t k, const move_view& m);
  /// The steps of move_out; an error gives the move up.
  status hand_over(uint32_t k, const move_view& m, std::vector<entity_key>& keys);
  /// Step 3 of a move: homes/<k> = the target and the move marked handed over, in etcd.
  status hand_over_home(uint32_t k, const move_view& m);
  /// Removes this node's copies of shard k's entities after the hand-over, and the move's key.
  status finish_move(uint32_t k, const move_view& m);
  /// Removes the files a failed move to this node left here (their newest claim is the move's).
  void discard_copies(uint32_t k, const move_view& m);
  /// Storage "shared", after a poll (polling thread): queues the indexing the shards' owners
  /// ask for (indexed where held and not yet, unindexed where another node serves them).
  void schedule_indexing();
  /// Storage "shared", the mover thread: runs what schedule_indexing() and want_index() queued.
  void run_indexing();
  /// Sends one exported entity file to the move's target.
  status send_file(http::client::sync_client& client, uint32_t k, const move_view& m,
                   const entity_key& key, const std::string& bytes);
};

} // namespace factum::cluster
