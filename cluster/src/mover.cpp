// mover.cpp: planned shard moves of a cluster node (docs/cluster.md, "Moving shards"). The old
// home of a shard makes the move; the new home takes each file through its gateway
// (PUT /v1/cluster/moves/..., accept_move() here, runtime::adopt_entity). Threads: the mover
// thread (started by attach()) runs every move, one at a time; schedule_moves() runs on the
// polling thread; accept_move(), authentic() and file_received() on the gateway's threads.
//
// One move of shard k from this node (A) to node B, as moves/<k> (created by `factum cluster
// drain` or `join`; its create revision is the move's epoch E) asks:
// 1. A stops serving and committing k (route(): SHARD_UNAVAILABLE; claim_for and may_commit:
//    no), asks k's live activations to hibernate (a turn that had not committed is answered
//    503 and retried by its client), and deletes its owner key shards/<k>.
// 2. For each entity of k in A's tenant index: runtime::export_entity claims the file under E
//    (any writer with an older claim is fenced from then on) and answers its committed state;
//    A sends it to B, which checks the move in etcd, syncs the file, and adopts it.
// 3. One transaction: homes/<k> = B and moves/<k> marked handed over, if homes/<k> is still A
//    and moves/<k> is still E. From then on B acquires k (a newer epoch) and serves it.
// 4. A removes its copies (runtime::forget_entity) and deletes moves/<k>.
// A failure in steps 1-3 marks moves/<k> failed with the reason and A takes k again (a newer
// epoch than E, so its claims pass the move's); B, seeing the failure, removes the files it
// took from that move (discard_copies). A crash resumes the move at the next start: from step 1
// when it was not handed over, else step 4.
//
// Storage "shared" (one entity root for every node): step 2 is skipped (the new home claims each
// file under its newer epoch when it opens it), step 4 drops this node's index rows instead of
// removing files, and nothing is discarded after a failure. The mover thread also runs the
// indexing that follows the shards this node holds (run_indexing: index acquired shards'
// files, unindex shards served elsewhere, close the activations of shards lost), between moves.
#include <algorithm>

#include "factum/cluster/shard_map.hpp"
#include "factum/http/client.hpp"
#include "factum/storage/entity_store.hpp"
#include "factum/storage/sha256.hpp"
#include "node_impl.hpp"

namespace factum::cluster {

using detail::move_view;
using nlohmann::json;

namespace {

/// How long a move waits for the shard's activations to hibernate before it fences them.
constexpr std::chrono::milliseconds release_wait{30'000};
/// How long the closing of the activations of shards a node lost may hold up its mover thread.
constexpr std::chrono::milliseconds lost_release_wait{5'000};
/// Deadline of one file's transfer to the new home.
constexpr std::chrono::milliseconds send_timeout{60'000};
/// How far a move request's time may be from the receiving node's clock (a replay window).
constexpr int64_t max_clock_skew_ms = 300'000;

} // namespace

// -- attach and detach --------------------------------------------------------------------------

void node::attach(runtime& rt) {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> g(p.move_mu);
    if (p.rt)
      return;
    p.rt = &rt;
    p.move_stop = false;
  }
  p.mover = std::thread([raw = impl_.get()] { raw->run_mover(); });
  if (p.replicated()) {
    {
      std::lock_guard<std::mutex> g(p.replica_mu);
      p.replica_stop = false;
    }
    p.replica_thread = std::thread([raw = impl_.get()] { raw->run_replica(); });
  }
  std::lock_guard<std::mutex> g(p.mu);
  p.poll_now = true; // schedule a move left by a previous run without waiting a period
  p.cv.notify_all();
}

void node::detach() {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> g(p.move_mu);
    if (!p.rt)
      return;
    p.move_stop = true;
  }
  p.move_cv.notify_all();
  if (p.mover.joinable())
    p.mover.join();
  {
    std::lock_guard<std::mutex> g(p.replica_mu);
    p.replica_stop = true;
  }
  p.replica_cv.notify_all();
  if (p.replica_thread.joinable())
    p.replica_thread.join();
  std::lock_guard<std::mutex> g(p.move_mu);
  p.rt = nullptr;
  p.move_queue.clear();
  p.queued.clear();
  p.to_index.clear();
  p.to_unindex.clear();
  std::fill(p.index_state.begin(), p.index_state.end(), int8_t{-1});
}

// -- scheduling (polling thread) and the mover thread -------------------------------------------

void node::impl::schedule_moves() {
  std::vector<std::pair<uint32_t, move_view>> mine;
  {
    std::lock_guard<std::mutex> g(mu);
    for (auto& [k, m] : st.moves)
      if ((m.from == cfg.node_id && m.failed.empty()) ||
          (m.to == cfg.node_id && !m.failed.empty() && st.shards[k].home != cfg.node_id &&
           !takes_over()))
        mine.emplace_back(k, m); // a move out, or the copies a failed move in left here
  }
  if (mine.empty())
    return;
  std::lock_guard<std::mutex> g(move_mu);
  if (!rt || move_stop)
    return;
  for (auto& [k, m] : mine)
    if (!given_up.count({k, m.epoch}) && queued.insert(k).second)
      move_queue.emplace_back(k, std::move(m));
  move_cv.notify_all();
}

void node::impl::run_mover() {
  for (;;) {
    std::unique_lock<std::mutex> g(move_mu);
    move_cv.wait(g, [&] {
      return move_stop || !move_queue.empty() || !to_index.empty() || !to_unindex.empty() ||
             release_lost;
    });
    if (move_stop)
      return;
    if (move_queue.empty()) {
      g.unlock();
      run_indexing();
      continue;
    }
    auto [k, m] = move_queue.front();
    move_queue.pop_front();
    g.unlock();
    try {
      if (m.from == cfg.node_id)
        move_out(k, m);
      else
        discard_copies(k, m);
    } catch (const std::exception& e) { // a bug: logged, the move left to the next poll
      moving[k].store(0, std::memory_order_release);
      log({{"level", "error"}, {"event", "shard_move_error"}, {"shard", k}, {"detail", e.what()}});
    }
    g.lock();
    queued.erase(k);
  }
}

void node::impl::move_out(uint32_t k, const move_view& m) {
  auto stopping_now = [&] {
    std::lock_guard<std::mutex> g(move_mu);
    return move_stop;
  };
  if (!m.handed_over) {
    moving[k].store(m.epoch, std::memory_order_release);
    held[k].store(0, std::memory_order_release); // from now on nothing of k commits here
    log({{"event", "shard_move_started"}, {"shard", k}, {"to", m.to}, {"epoch", m.epoch}});
    std::vector<entity_key> keys;
    auto t0 = steady::now();
    auto st = hand_over(k, m, keys);
    if (!st) {
      moving[k].store(0, std::memory_order_release);
      if (stopping_now())
        return; // resumed by the next attach(), here or after a restart
      moves_failed.inc();
      auto failed = m;
      failed.failed = st.to_string();
      // Marked failed only while it is the same move (not handed over meanwhile) and the home is
      // still this node; otherwise the next poll shows what happened, and the move goes on.
      using f = etcd_compare::field;
      auto marked = move_etcd->transact({{key("moves", k), f::mod, {}, m.mod_revision},
                                         {key("homes", k), f::value, cfg.node_id, 0}},
                                        {{key("moves", k), detail::move_value(failed)}});
      if (!marked || !marked->succeeded) {
        log(
          {{"level", "warn"},
           {"event", "shard_move_interrupted"},
           {"shard", k},
           {"detail", st.to_string() + "; the move could not be marked failed (" +
                        (marked ? std::string("it changed in etcd") : marked.error().to_string()) +
                        "): the next poll resumes or ends it"}});
        std::lock_guard<std::mutex> g(mu);
        poll_now = true;
        cv.notify_all();
        return;
      }
      log({{"level", "error"},
           {"event", "shard_move_failed"},
           {"shard", k},
           {"to", m.to},
           {"detail", st.to_string() + "; the shard is served here again"}});
      {
        std::lock_guard<std::mutex> g(move_mu);
        given_up.emplace(k, m.epoch); // a poll that read the move before it failed skips it
      }
      std::lock_guard<std::mutex> g(mu);
      if (auto it = this->st.moves.find(k);
          it != this->st.moves.end() && it->second.epoch == m.epoch)
        it->second.failed = failed.failed;
      poll_now = true;
      cv.notify_all();
      return;
    }
    moves_done.inc();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
    log({{"event", "shard_handed_over"},
         {"shard", k},
         {"to", m.to},
         {"files", keys.size()},
         {"ms", ms}});
  }
  if (auto st = finish_move(k, m); !st)
    log({{"level", "warn"},
         {"event", "shard_move_cleanup_failed"},
         {"shard", k},
         {"detail", st.to_string() + "; tried again at the next poll"}});
  moving[k].store(0, std::memory_order_release);
}

// -- the steps of a move (mover thread) ---------------------------------------------------------

status node::impl::hand_over(uint32_t k, const move_view& m, std::vector<entity_key>& keys) {
  std::string address;
  {
    std::lock_guard<std::mutex> g(mu);
    if (st.shards[k].home != cfg.node_id)
      return {errc::conflict, "shard " + std::to_string(k) + "'s home is " +
                                (st.shards[k].home.empty() ? "nobody" : st.shards[k].home) +
                                ", not this node"};
    if (auto it = st.nodes.find(m.to); it != st.nodes.end())
      address = it->second;
  }
  if (m.to == cfg.node_id)
    return {errc::invalid_argument, "a move from a node to itself"};
  if (cfg.secret.empty() && !takes_over())
    return {errc::conflict,
            "this node has no cluster.secret: it cannot send files to another node"};
  if (address.empty())
    return {errc::unavailable, "node " + m.to + " is not live"};
  auto which = [&](const entity_key& e) { return cluster::shard_of(e, cfg.shards) == k; };
  if (auto left = rt->release_entities(which, release_wait); left > 0)
    log({{"level", "warn"},
         {"event", "shard_move_fencing"},
         {"shard", k},
         {"detail", std::to_string(left) + " activations did not hibernate in time; the move's "
                                           "claim fences their writes"}});
  // Give up the owner key so that the new home can take it once it is the home (it is not
  // before step 3, so nobody takes it meanwhile).
  if (auto cur = move_etcd->get(key("shards", k)); !cur)
    return cur.error();
  else if (cur->has_value() && (*cur)->value == cfg.node_id)
    if (auto d = move_etcd->delete_if_mod_revision(key("shards", k), (*cur)->mod_revision); !d)
      return d.error();
  // Shared: the files stay where they are, and the new home claims each under a newer epoch.
  // Replicated: the new home catches its copy up with the log before it serves the shard.
  if (takes_over())
    return hand_over_home(k, m);
  auto list = rt->entities_where(which);
  if (!list)
    return list.error();
  auto url = http::client::parse_url("http://" + address);
  if (!url)
    return {errc::invalid_argument,
            "node " + m.to + "'s address " + address + ": " + url.error().message()};
  http::client::sync_options so;
  so.timeout = send_timeout;
  http::client::sync_client client(url->host, url->port, so);
  for (auto& e : *list) {
    {
      std::lock_guard<std::mutex> g(move_mu);
      if (move_stop)
        return {errc::unavailable, "the node is stopping"};
    }
    auto bytes = rt->export_entity(e, m.epoch, cfg.node_id);
    if (!bytes && bytes.error().code() == errc::busy) { // activated before the shard was moving
      rt->release_entities([&](const entity_key& x) { return x == e; }, release_wait);
      bytes = rt->export_entity(e, m.epoch, cfg.node_id);
    }
    if (!bytes && bytes.error().code() == errc::not_found)
      continue; // a creation that did not happen: the index may list it, nothing to move
    if (!bytes)
      return {bytes.error().code(), e.to_string() + ": " + bytes.error().message()};
    if (auto st = send_file(client, k, m, e, *bytes); !st)
      return st;
    move_files.inc(impl::files_sent);
    keys.push_back(e);
  }
  return hand_over_home(k, m);
}

status node::impl::hand_over_home(uint32_t k, const move_view& m) {
  auto handed = m;
  handed.handed_over = true;
  using f = etcd_compare::field;
  auto t =
    move_etcd->transact({{key("homes", k), f::value, cfg.node_id, 0},
                         {key("moves", k), f::create, {}, m.epoch},
                         {key("shards", k), f::create, {}, 0}},
                        {{key("homes", k), m.to}, {key("moves", k), detail::move_value(handed)}});
  if (!t || !t->succeeded) {
    // An answer lost after etcd applied the transaction (a timeout, then a retry on another
    // member) looks like a failure: read what etcd holds before calling it one.
    auto h = move_etcd->get(key("homes", k));
    auto mv = move_etcd->get(key("moves", k));
    auto v = mv && mv->has_value() ? detail::read_move(**mv) : std::nullopt;
    bool applied =
      h && h->has_value() && (*h)->value == m.to && v && v->epoch == m.epoch && v->handed_over;
    if (!applied && !t)
      return t.error();
    if (!applied)
      return {errc::conflict, "moves/" + std::to_string(k) + ", homes/" + std::to_string(k) +
                                " or shards/" + std::to_string(k) +
                                " changed in etcd during the move"};
  }
  std::lock_guard<std::mutex> g(mu);
  st.shards[k].home = m.to;
  st.shards[k].owner.clear();
  st.moves[k] = handed;
  return status::ok();
}

status node::impl::send_file(http::client::sync_client& client, uint32_t k, const move_view& m,
                             const entity_key& e, const std::string& bytes) {
  auto target = "/v1/cluster/moves/" + std::to_string(k) + "/" +
                http::client::percent_encode(e.tenant) + "/" +
                http::client::percent_encode(e.type) + "/" + http::client::percent_encode(e.id);
  auto epoch = std::to_string(m.epoch);
  auto sha = sha256_hex(bytes);
  auto time_ms = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  auto signature = move_signature(cfg.secret, {target, epoch, sha, time_ms, {}});
  http::client::header_list headers = {{"Content-Type", "application/octet-stream"},
                                       {"X-Factum-Move-Epoch", epoch},
                                       {"X-Factum-Content-Sha256", sha},
                                       {"X-Factum-Move-Time", time_ms},
                                       {"X-Factum-Move-Signature", signature}};
  auto r = client.request("PUT", target, headers, bytes);
  if (r.status == 204)
    return status::ok();
  if (r.status == 0)
    return {errc::unavailable, "sending " + e.to_string() + " to node " + m.to + ": " + r.error};
  return {errc::conflict, "node " + m.to + " refused " + e.to_string() + " (" +
                            std::to_string(r.status) + "): " + r.body};
}

status node::impl::finish_move(uint32_t k, const move_view& m) {
  auto which = [&](const entity_key& e) { return cluster::shard_of(e, cfg.shards) == k; };
  size_t removed = 0;
  // Shared: the files are the new home's now; replicated: this node's copy stays a follower's.
  // Only this node's index rows of them go.
  if (takes_over()) {
    auto n = rt->unindex_entities(which);
    if (!n)
      return n.error();
    std::lock_guard<std::mutex> g(move_mu);
    index_state[k] = 0;
  } else {
    auto list = rt->entities_where(which);
    if (!list)
      return list.error();
    for (auto& e : *list) {
      auto st = rt->forget_entity(e);
      if (!st && st.code() == errc::busy) { // a stray activation (an alarm refused since)
        rt->release_entities([&](const entity_key& x) { return x == e; }, release_wait);
        st = rt->forget_entity(e);
      }
      if (!st)
        return {st.code(), e.to_string() + ": " + st.message()};
    }
    removed = list->size();
  }
  auto t = move_etcd->transact({{key("moves", k), etcd_compare::field::create, {}, m.epoch}},
                               {{key("moves", k), std::nullopt}});
  if (!t)
    return t.error();
  log({{"event", "shard_move_done"}, {"shard", k}, {"to", m.to}, {"removed", removed}});
  std::lock_guard<std::mutex> g(mu);
  if (auto it = st.moves.find(k); it != st.moves.end() && it->second.epoch == m.epoch)
    st.moves.erase(it);
  return status::ok();
}

/// The target's side of a failed move (mover thread): the files it adopted from that move are
/// copies of a shard served elsewhere. Each whose newest owner claim is the move's own (nothing
/// served them here since) is removed, so that they are neither listed nor woken here.
void node::impl::discard_copies(uint32_t k, const move_view& m) {
  if (held[k].load(std::memory_order_acquire) != 0)
    return;
  {
    std::lock_guard<std::mutex> g(mu);
    discarding.insert(k); // accept_move refuses shard k's files from now on
  }
  struct done_discarding {
    impl& p;
    uint32_t k;
    ~done_discarding() {
      std::lock_guard<std::mutex> g(p.mu);
      p.discarding.erase(k);
    }
  } guard{*this, k};
  // Still that failed move? A move of k tried again since (a new epoch) may be sending files.
  auto mv = move_etcd->get(key("moves", k));
  if (!mv)
    return; // tried again at the next poll
  auto now = mv->has_value() ? detail::read_move(**mv) : std::nullopt;
  if (!now || now->epoch != m.epoch || now->failed.empty()) {
    std::lock_guard<std::mutex> g(move_mu);
    given_up.emplace(k, m.epoch);
    return;
  }
  auto which = [&](const entity_key& e) { return cluster::shard_of(e, cfg.shards) == k; };
  auto list = rt->entities_where(which);
  if (!list)
    return; // tried again at the next poll
  size_t removed = 0;
  for (auto& e : *list) {
    store_options so;
    so.read_only = true;
    auto s = entity_store::open_file(e.file_path(rt->config().entity_dir()), so);
    if (!s)
      continue;
    auto owners = (*s)->owners();
    s->reset();
    if (!owners || owners->empty() || owners->back().epoch != m.epoch)
      continue;
    if (auto st = rt->forget_entity(e); !st)
      return log({{"level", "warn"},
                  {"event", "shard_move_copies_kept"},
                  {"shard", k},
                  {"detail", e.to_string() + ": " + st.to_string() + "; tried again later"}});
    ++removed;
  }
  {
    std::lock_guard<std::mutex> g(move_mu);
    given_up.emplace(k, m.epoch);
  }
  log(
    {{"event", "shard_move_copies_removed"}, {"shard", k}, {"from", m.from}, {"removed", removed}});
}

// -- shared storage: indexes that follow the shards held ----------------------------------------

void node::impl::want_index(uint32_t k) {
  std::lock_guard<std::mutex> g(move_mu);
  to_unindex.erase(k);
  to_index.insert(k);
  index_state[k] = -1;
  move_cv.notify_all();
}

void node::impl::schedule_indexing() {
  std::vector<uint32_t> index, unindex;
  {
    std::lock_guard<std::mutex> g(mu);
    for (uint32_t k = 0; k < st.shards.size(); ++k) {
      auto& s = st.shards[k];
      if (held[k].load(std::memory_order_acquire) != 0)
        index.push_back(k);
      else if (!s.owner.empty() && s.owner != cfg.node_id)
        unindex.push_back(k);
    }
  }
  std::lock_guard<std::mutex> g(move_mu);
  bool any = std::exchange(release_after_poll, false);
  release_lost |= any;
  for (auto k : index)
    if (index_state[k] != 1 && to_index.insert(k).second)
      any = true;
  for (auto k : unindex)
    if (index_state[k] != 0 && !to_index.count(k) && to_unindex.insert(k).second)
      any = true;
  if (any)
    move_cv.notify_all();
}

void node::impl::run_indexing() {
  std::set<uint32_t> in, out;
  bool release = false;
  {
    std::lock_guard<std::mutex> g(move_mu);
    if (!rt || move_stop)
      return;
    in.swap(to_index);
    out.swap(to_unindex);
    release = std::exchange(release_lost, false);
  }
  auto held_now = [&](uint32_t k) { return held[k].load(std::memory_order_acquire) != 0; };
  if (release) { // their new owners cannot open the files while this process has them open
    auto left = rt->release_entities(
      [&](const entity_key& e) {
        auto k = cluster::shard_of(e, cfg.shards);
        return (!held_now(k) || !lease_live()) && moving[k].load(std::memory_order_acquire) == 0;
      },
      lost_release_wait);
    if (left > 0)
      log({{"level", "warn"},
           {"event", "lost_shards_busy"},
           {"left", left},
           {"detail", "activations of shards this node no longer holds did not close in time; "
                      "their new owners cannot open those files until they do"}});
  }
  if (!out.empty()) {
    auto n = rt->unindex_entities([&](const entity_key& e) {
      auto k = cluster::shard_of(e, cfg.shards);
      return out.count(k) && !held_now(k);
    });
    std::lock_guard<std::mutex> g(move_mu);
    for (auto k : out)
      if (n && !to_index.count(k))
        index_state[k] = 0;
    if (!n)
      log(
        {{"level", "warn"}, {"event", "shard_unindex_failed"}, {"detail", n.error().to_string()}});
  }
  if (in.empty())
    return;
  auto t0 = steady::now();
  // Not only shards held now: acquire_homes() asks before publish_held() sets `held`. A shard
  // lost meanwhile is unindexed after the next poll.
  auto rep = rt->index_entities(
    [&](std::string_view digest) { return in.count(shard_of_digest(digest, cfg.shards)) > 0; });
  std::set<uint32_t> busy;
  if (rep)
    for (auto& d : rep->busy)
      busy.insert(shard_of_digest(d, cfg.shards));
  {
    std::lock_guard<std::mutex> g(move_mu);
    for (auto k : in)
      if (!to_index.count(k))                            // not acquired again meanwhile
        index_state[k] = rep && !busy.count(k) ? 1 : -1; // -1: the next poll tries again
  }
  if (!rep)
    return log({{"level", "warn"},
                {"event", "shard_index_failed"},
                {"detail", rep.error().to_string() + "; tried again at the next poll"}});
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
  json line = {
    {"event", "shards_indexed"}, {"shards", in.size()}, {"files", rep->indexed}, {"ms", ms}};
  if (!rep->busy.empty()) {
    line["level"] = "warn";
    line["busy"] = rep->busy.size();
    line["detail"] = "files open in another process (a node that lost the shards and has not "
                     "closed them yet): indexed at a later poll";
  }
  if (rep->unreadable > 0)
    line["unreadable"] = rep->unreadable;
  log(std::move(line));
}

// -- the new home's side (gateway threads) ------------------------------------------------------

bool node::authentic(const move_credentials& c) const {
  auto& secret = impl_->cfg.secret;
  if (secret.empty() || c.time_ms.empty() || c.time_ms.size() > 15 ||
      !std::all_of(c.time_ms.begin(), c.time_ms.end(),
                   [](char ch) { return ch >= '0' && ch <= '9'; }))
    return false;
  auto sent = std::stoll(std::string(c.time_ms));
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  if (sent < now - max_clock_skew_ms || sent > now + max_clock_skew_ms)
    return false; // an old request replayed, or a clock far off
  auto want = move_signature(secret, c);
  if (c.signature.size() != want.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(want[i] ^ c.signature[i]);
  return diff == 0;
}

status node::accept_move(uint32_t shard, int64_t epoch, const entity_key& key) {
  auto& p = *impl_;
  if (p.takes_over())
    return {errc::conflict,
            "this node's storage is " + p.cfg.storage + ": no file moves between nodes"};
  if (shard >= p.cfg.shards || cluster::shard_of(key, p.cfg.shards) != shard)
    return {errc::invalid_argument, key.to_string() + " is not in shard " + std::to_string(shard)};
  if (p.held[shard].load(std::memory_order_acquire) != 0)
    return {errc::conflict, "this node serves shard " + std::to_string(shard) + " already"};
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (p.discarding.count(shard))
      return {errc::conflict, "this node is removing the copies a failed move of shard " +
                                std::to_string(shard) + " left; try the move again"};
    if (auto it = p.accepted.find(shard); it != p.accepted.end() && it->second == epoch)
      return status::ok();
  }
  std::lock_guard<std::mutex> cg(p.claim_mu);
  auto mv = p.claim->get(p.key("moves", shard));
  if (!mv)
    return mv.error();
  auto view = mv->has_value() ? detail::read_move(**mv) : std::nullopt;
  if (!view || view->epoch != epoch || view->to != p.cfg.node_id || !view->failed.empty() ||
      view->handed_over)
    return {errc::conflict, "etcd has no move of shard " + std::to_string(shard) +
                              " to this node under epoch " + std::to_string(epoch)};
  auto home = p.claim->get(p.key("homes", shard));
  if (!home)
    return home.error();
  if (home->has_value() && (*home)->value == p.cfg.node_id)
    return {errc::conflict, "this node is shard " + std::to_string(shard) + "'s home already"};
  std::lock_guard<std::mutex> g(p.mu);
  p.accepted[shard] = epoch;
  return status::ok();
}

void node::file_received() {
  impl_->move_files.inc(impl::files_received);
}

} // namespace factum::cluster
