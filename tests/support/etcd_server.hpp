// etcd_server.hpp (tests): a real etcd for cluster tests: one member, or three forming one
// cluster, each a child process on free loopback ports with its data and log in a fresh
// temporary directory, and the nemeses the tests need (stop, kill -9, restart on the same data
// and ports). The test's thread only: the children die with the thread that started them
// (PR_SET_PDEATHSIG), so a crashed test leaves no etcd behind.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/types.h>

namespace factum::test {

/// `n` distinct free loopback TCP ports: each bound to port 0 at once (so none repeats), then
/// released for a child process to bind. Another process may take one in between. Throws
/// std::runtime_error when none can be bound.
std::vector<uint16_t> free_ports(size_t n);

/// etcd members started by the constructor (and waited for); killed, and their directory
/// removed, by the destructor. One member is ready in ~0.1 s; three take ~2 s (each new member
/// first asks its peers, for up to a second each, whether the cluster already exists). The binary
/// is $FACTUM_ETCD, else `etcd` on the PATH (Debian's etcd-server). Every member runs with
/// --heartbeat-interval 10 --election-timeout 100, so the smallest lease TTL etcd grants is 1 s.
/// Failures to start throw std::runtime_error with the member's log tail.
class etcd_server {
 public:
  /// Starts `members` members (1 or 3 are the sizes in use; any >= 1 works) as one cluster
  /// and waits until each answers a linearizable read, i.e. the cluster has a leader (at most
  /// `ready_within`).
  explicit etcd_server(size_t members = 1,
                       std::chrono::milliseconds ready_within = std::chrono::seconds(10));
  ~etcd_server();
  etcd_server(const etcd_server&) = delete;
  etcd_server& operator=(const etcd_server&) = delete;

  /// A member's client URL, "http://127.0.0.1:<port>".
  std::string url(size_t member = 0) const;
  /// Every member's client URL, in member order.
  std::vector<std::string> urls() const;
  size_t members() const { return members_.size(); }

  /// SIGTERM, then SIGKILL when the member has not exited within 5 s; waits for it. No-op when
  /// it is not running. (A member without a quorum does not exit on SIGTERM: it takes the 5 s.)
  void stop(size_t member = 0);
  /// SIGKILL; waits for it. No-op when it is not running.
  void kill9(size_t member = 0);
  /// Stops the member if it runs, starts it again on the same data directory and ports, and
  /// waits until it answers a linearizable read (which needs a quorum of the cluster up).
  void restart(size_t member = 0);
  /// Whether the member's process is running (reaps it when it has exited).
  bool running(size_t member = 0);

  /// The temporary directory: member-<name>/ data directories and <name>.log files.
  const std::filesystem::path& dir() const { return dir_; }
  /// The last `bytes` of a member's log.
  std::string log_tail(size_t member = 0, size_t bytes = 3000) const;

 private:
  struct member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    pid_t pid = -1;
  };

  /// Picks free ports for every member, starts them all and waits; false (after stopping them)
  /// when one could not bind its ports, so that the caller retries with other ports.
  bool start_all();
  void spawn(member& m);
  /// "" when the member answered, "in use" when it exited unable to bind, else why not.
  std::string wait_ready(member& m, std::chrono::steady_clock::time_point deadline);
  std::vector<std::string> argv(const member& m) const;
  std::string initial_cluster() const;

  std::filesystem::path dir_;
  std::chrono::milliseconds ready_within_;
  std::vector<member> members_;
};

} // namespace factum::test
