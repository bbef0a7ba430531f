// factum/cluster/cli.hpp: `factum cluster status`: the cluster's members and shards as etcd
// holds them, read directly from etcd (no node needs to be up); `factum cluster drain NODE` and
// `join NODE`: planned shard moves asked for in etcd (the nodes make them) and waited for. The
// main thread.
#pragma once

#include <CLI/CLI.hpp>

namespace factum::cluster {

/// Adds `cluster status --etcd URL [--name NAME] [--json]` and `cluster drain|join NODE --etcd
/// URL [--name NAME] [--timeout S]` to `app`; writes the exit code to *exit_code when one runs
/// (0; 1 etcd unreachable, no such cluster, a move failed or timed out; 2 bad arguments).
void add_cluster_command(CLI::App& app, int* exit_code);

} // namespace factum::cluster
