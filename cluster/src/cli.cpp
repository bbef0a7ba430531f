// cli.cpp: see factum/cluster/cli.hpp. The main thread.
#include "factum/cluster/cli.hpp"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "factum/cluster/shard_map.hpp"
#include "state.hpp"

namespace factum::cluster {

namespace {

struct status_options {
  std::vector<std::string> etcd;
  std::string name = "factum";
  bool json = false;
};

int print_status(const status_options& o) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "factum cluster status: %s\n", msg.c_str());
    return 1;
  };
  auto c = etcd_client::make(o.etcd);
  if (!c) {
    std::fprintf(stderr, "factum cluster status: %s\n", c.error().message().c_str());
    return 2;
  }
  auto prefix = detail::prefix_of(o.name);
  auto shards = detail::read_shard_count(**c, prefix);
  if (!shards)
    return fail(shards.error().to_string());
  if (*shards == 0)
    return fail("no cluster named '" + o.name + "' in etcd at " + (*c)->endpoint());
  auto st = detail::read_state(**c, prefix, *shards);
  if (!st)
    return fail(st.error().to_string());
  auto j = detail::describe(*st);
  j["cluster"] = o.name;
  j["shard_count"] = *shards;
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::map<std::string, int> homes, owned;
  for (auto& s : st->shards) {
    if (!s.home.empty())
      ++homes[s.home];
    if (!s.owner.empty())
      ++owned[s.owner];
  }
  std::printf("cluster %s: %u shards, etcd revision %lld\n", o.name.c_str(), *shards,
              static_cast<long long>(st->revision));
  std::printf("%-16s %-22s %-5s %6s %6s\n", "NODE", "ADDRESS", "STATE", "HOMES", "SERVES");
  for (auto& n : j["nodes"]) {
    auto id = n["id"].get<std::string>();
    std::printf("%-16s %-22s %-5s %6d %6d\n", id.c_str(), n.value("address", "-").c_str(),
                n["state"].get<std::string>().c_str(), homes[id], owned[id]);
  }
  int unused = 0, unserved = 0;
  for (auto& s : st->shards) {
    unused += s.home.empty() ? 1 : 0;
    unserved += !s.home.empty() && s.owner.empty() ? 1 : 0;
  }
  std::printf("shards never used: %d; used but served by nobody now: %d\n", unused, unserved);
  for (auto& [k, m] : st->moves)
    std::printf("shard %u: %s -> %s, %s\n", k, m.from.c_str(), m.to.c_str(),
                !m.failed.empty() ? ("failed: " + m.failed).c_str()
                : m.handed_over   ? "handed over, removing the old copies"
                                  : "moving");
  return 0;
}

// -- drain and join ------------------------------------------------------------------------------

struct move_options {
  std::vector<std::string> etcd;
  std::string name = "factum";
  std::string node;
  int timeout_s = 600;
};

/// A drain or a join: asks for moves in etcd and waits for them (the nodes make them).
class mover_cli {
 public:
  mover_cli(const move_options& o, const char* verb) : o_(o), verb_(verb) {}

  int fail(const std::string& msg) const {
    std::fprintf(stderr, "factum cluster %s: %s\n", verb_, msg.c_str());
    return 1;
  }

  /// Connects and reads the state; 0 or an exit code.
  int open() {
    auto c = etcd_client::make(o_.etcd);
    if (!c) {
      std::fprintf(stderr, "factum cluster %s: %s\n", verb_, c.error().message().c_str());
      return 2;
    }
    etcd_ = std::move(*c);
    prefix_ = detail::prefix_of(o_.name);
    auto shards = detail::read_shard_count(*etcd_, prefix_);
    if (!shards)
      return fail(shards.error().to_string());
    if (*shards == 0)
      return fail("no cluster named '" + o_.name + "' in etcd at " + etcd_->endpoint());
    shards_ = *shards;
    return read();
  }

  int read() {
    auto st = detail::read_state(*etcd_, prefix_, shards_);
    if (!st)
      return fail(st.error().to_string());
    st_ = std::move(*st);
    return 0;
  }

  /// Asks for the move of shard k from `from` to `to` (a failed earlier move is replaced).
  status ask(uint32_t k, const std::string& from, const std::string& to) {
    auto key = prefix_ + "moves/" + std::to_string(k);
    if (auto it = st_.moves.find(k); it != st_.moves.end()) {
      if (it->second.failed.empty()) {
        asked_.insert(k); // under way: the node finishes it
        return status::ok();
      }
      if (auto d = etcd_->delete_if_mod_revision(key, it->second.mod_revision); !d)
        return d.error();
    }
    detail::move_view m;
    m.from = from;
    m.to = to;
    auto r = etcd_->create_if_absent(key, detail::move_value(m));
    if (!r)
      return r.error();
    asked_.insert(k);
    return status::ok();
  }

  /// Waits until every shard in `asked_` has moved and is served again (its move key is gone and
  /// its new home holds it: the old home ends a move at the hand-over, and the new home acquires
  /// the shard at its next poll, or at once when a request for the shard reaches it), a move
  /// failed, or the timeout passed. 0 when all moved.
  int wait() {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o_.timeout_s);
    size_t shown = SIZE_MAX, shown_unserved = 0;
    for (;;) {
      if (auto st = detail::read_state(*etcd_, prefix_, shards_); !st) {
        if (std::chrono::steady_clock::now() > until)
          return fail(st.error().to_string());
        std::this_thread::sleep_for(std::chrono::milliseconds(250)); // etcd back soon, or not
        continue;
      } else {
        st_ = std::move(*st);
      }
      if (!draining_.empty()) // a shard placed on the node after the moves were asked for
        for (uint32_t k = 0; k < st_.shards.size(); ++k)
          if (st_.shards[k].home == draining_ && !st_.moves.count(k) && !st_.placeable().empty())
            if (auto st = ask(k, draining_, rendezvous_owner(k, st_.placeable())); !st)
              return fail(st.to_string());
      size_t left = 0, unserved = 0;
      std::vector<std::string> failed;
      for (auto k : asked_) {
        auto& s = st_.shards[k];
        if (auto it = st_.moves.find(k); it != st_.moves.end()) {
          ++left;
          if (!it->second.failed.empty())
            failed.push_back("shard " + std::to_string(k) + ": " + it->second.failed);
        } else if (s.owner.empty() || s.owner != s.home) {
          ++left; // handed over; its new home has not acquired it yet
          ++unserved;
        }
      }
      if ((left != shown || unserved != shown_unserved) && unserved > 0)
        std::printf("%zu of %zu shard moves left (%zu handed over, not yet served by their new "
                    "home)\n",
                    left, asked_.size(), unserved);
      else if (left != shown)
        std::printf("%zu of %zu shard moves left\n", left, asked_.size());
      std::fflush(stdout);
      shown = left;
      shown_unserved = unserved;
      if (!failed.empty()) {
        for (auto& f : failed)
          std::fprintf(stderr, "factum cluster %s: move failed: %s\n", verb_, f.c_str());
        return fail("run it again to retry the failed moves");
      }
      if (left == 0)
        return 0;
      if (std::chrono::steady_clock::now() > until)
        return fail(std::to_string(left) + " moves still under way after " +
                    std::to_string(o_.timeout_s) + " s (" + std::to_string(unserved) +
                    " of them handed over and not yet served by their new home); they go on "
                    "(see factum cluster status)");
      std::this_thread::sleep_for(std::chrono::milliseconds(250)); // polling etcd, bounded above
    }
  }

  const move_options& o_;
  const char* verb_;
  std::unique_ptr<etcd_client> etcd_;
  std::string prefix_;
  uint32_t shards_ = 0;
  detail::cluster_state st_;
  std::set<uint32_t> asked_;
  std::string draining_; ///< drain: the node whose newly placed shards are moved too
};

int drain(const move_options& o) {
  mover_cli m(o, "drain");
  if (int rc = m.open())
    return rc;
  bool live = m.st_.nodes.count(o.node) > 0;
  size_t homes = 0;
  for (auto& s : m.st_.shards)
    homes += s.home == o.node ? 1 : 0;
  if (!live && homes > 0)
    return m.fail("node " + o.node + " is down and its data directory holds " +
                  std::to_string(homes) + " shards: start it, then drain it");
  if (!live)
    return m.fail("node " + o.node + " is not live and is no shard's home: nothing to drain");
  if (auto r = m.etcd_->put(m.prefix_ + "draining/" + o.node, "{}"); !r)
    return m.fail(r.error().to_string());
  if (int rc = m.read())
    return rc;
  auto targets = m.st_.placeable();
  if (homes > 0 && targets.empty())
    return m.fail("no other live node to move " + o.node + "'s shards to");
  for (uint32_t k = 0; k < m.st_.shards.size(); ++k)
    if (m.st_.shards[k].home == o.node)
      if (auto st = m.ask(k, o.node, rendezvous_owner(k, targets)); !st)
        return m.fail(st.to_string());
  std::printf("node %s is draining: no shard is placed on it; moving %zu shards\n", o.node.c_str(),
              m.asked_.size());
  m.draining_ = o.node;
  if (int rc = m.wait())
    return rc;
  std::printf("node %s holds no shard: it may be stopped\n", o.node.c_str());
  return 0;
}

int join(const move_options& o) {
  mover_cli m(o, "join");
  if (int rc = m.open())
    return rc;
  if (!m.st_.nodes.count(o.node))
    return m.fail("node " + o.node + " is not live: start it with this cluster's config first");
  if (auto st = m.etcd_->delete_key(m.prefix_ + "draining/" + o.node); !st)
    return m.fail(st.to_string());
  if (int rc = m.read())
    return rc;
  auto targets = m.st_.placeable();
  size_t skipped = 0;
  for (uint32_t k = 0; k < m.st_.shards.size(); ++k) {
    auto& home = m.st_.shards[k].home;
    if (home.empty() || home == o.node || rendezvous_owner(k, targets) != o.node)
      continue;
    if (!m.st_.nodes.count(home)) {
      ++skipped; // its files are on a node that is down
      continue;
    }
    if (auto st = m.ask(k, home, o.node); !st)
      return m.fail(st.to_string());
  }
  std::printf("moving %zu shards to node %s", m.asked_.size(), o.node.c_str());
  if (skipped)
    std::printf(" (%zu more stay: their homes are down)", skipped);
  std::printf("\n");
  return m.wait();
}

} // namespace

void add_cluster_command(CLI::App& app, int* exit_code) {
  auto* cmd =
    app.add_subcommand("cluster", "Look at and operate a factum cluster in etcd (docs/cluster.md)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<status_options>();
  auto* st = cmd->add_subcommand("status", "Nodes, their state and shards, read from etcd");
  st->add_option("--etcd", o->etcd, "The etcd client URL (http://host:port); repeat for several")
    ->required();
  st->add_option("--name", o->name, "The cluster's name (\"cluster.name\"; default factum)");
  st->add_flag("--json", o->json, "Print the state as JSON (as GET /v1/cluster)");
  st->callback([o, exit_code] { *exit_code = print_status(*o); });

  auto add_move = [&](const char* name, const char* what, int (*run)(const move_options&)) {
    auto mo = std::make_shared<move_options>();
    auto* sub = cmd->add_subcommand(name, what);
    sub->add_option("node", mo->node, "The node's id (\"cluster.node_id\")")->required();
    sub
      ->add_option("--etcd", mo->etcd, "The etcd client URL (http://host:port); repeat for several")
      ->required();
    sub->add_option("--name", mo->name, "The cluster's name (\"cluster.name\"; default factum)");
    sub->add_option("--timeout", mo->timeout_s, "Seconds to wait for the moves (default 600)")
      ->check(CLI::Range(1, 86'400));
    sub->callback([mo, exit_code, run] { *exit_code = run(*mo); });
  };
  add_move("drain",
           "Move every shard of a node to the other live nodes and place no new shard on it",
           drain);
  add_move("join",
           "Move to a live node the shards rendezvous hashing gives it, and place shards on it "
           "again after a drain",
           join);
}

} // namespace factum::cluster
