// cli.cpp: see factum/cluster/cli.hpp. The main thread.
#include "factum/cluster/cli.hpp"

#include <cstdio>
#include <map>
#include <memory>

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
  return 0;
}

} // namespace

void add_cluster_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("cluster", "Look at a factum cluster in etcd (docs/cluster.md)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<status_options>();
  auto* st = cmd->add_subcommand("status", "Nodes, their state and shards, read from etcd");
  st->add_option("--etcd", o->etcd, "etcd client URL (http://host:port); repeat for several")
    ->required();
  st->add_option("--name", o->name, "the cluster's name (\"cluster.name\"; default factum)");
  st->add_flag("--json", o->json, "print the state as JSON (as GET /v1/cluster)");
  st->callback([o, exit_code] { *exit_code = print_status(*o); });
}

} // namespace factum::cluster
