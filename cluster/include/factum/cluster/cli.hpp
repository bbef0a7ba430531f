// factum/cluster/cli.hpp: `factum cluster status`: the cluster's members and shards as etcd
// holds them, read directly from etcd (no node needs to be up). The main thread.
#pragma once

#include <CLI/CLI.hpp>

namespace factum::cluster {

/// Adds `cluster status --etcd URL [--name NAME] [--json]` to `app`; writes its exit code to
/// *exit_code when it runs (0, 1 etcd unreachable or no such cluster, 2 bad arguments).
void add_cluster_command(CLI::App& app, int* exit_code);

} // namespace factum::cluster
