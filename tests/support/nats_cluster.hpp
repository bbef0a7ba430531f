// nats_cluster.hpp (tests): real nats-server processes with JetStream: one server, or three
// forming one cluster, each a child process on free loopback ports with its store and log in a
// fresh temporary directory; ready once JetStream takes a stream of the cluster's size (a meta
// leader and every peer known). The nemeses the replication tests need: kill -9, SIGSTOP and
// SIGCONT, restart on the same store and ports; and which server leads a stream. The test's
// thread only: the children die with the thread that started them (PR_SET_PDEATHSIG), and the
// destructor kills each by its pid.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/types.h>

namespace factum::test {

/// Servers started by the constructor (and waited for); killed, and their directory removed,
/// by the destructor. The binary is $FACTUM_NATS_SERVER, else Debian's /usr/sbin/nats-server,
/// else nats-server on the PATH. Server i is named "n<i>". Failures to start throw
/// std::runtime_error with the server's log tail.
class nats_cluster {
 public:
  /// Starts `servers` servers (1, or 3 as one cluster) and waits until JetStream creates (and
  /// deletes) a probe stream with `servers` replicas, at most `ready_within`.
  explicit nats_cluster(size_t servers = 1,
                        std::chrono::milliseconds ready_within = std::chrono::seconds(20));
  ~nats_cluster();
  nats_cluster(const nats_cluster&) = delete;
  nats_cluster& operator=(const nats_cluster&) = delete;

  /// A server's client URL, "nats://127.0.0.1:<port>".
  std::string url(size_t server = 0) const;
  /// Every server's client URL, in server order.
  std::vector<std::string> urls() const;
  size_t servers() const { return servers_.size(); }
  /// The server's name ("n<i>") as JetStream reports it (a stream's leader).
  std::string name(size_t server) const;
  pid_t pid(size_t server) const;

  /// SIGKILL; waits for it. No-op when it is not running.
  void kill9(size_t server);
  /// SIGSTOP / SIGCONT: the process stays, answers nothing while stopped (pause returns once
  /// it has stopped).
  void pause(size_t server);
  void resume(size_t server);
  /// Kills the server if it runs and starts it again on the same store and ports; waits until
  /// it accepts a connection (`ready_within`).
  void restart(size_t server);
  /// Whether the server's process is running (reaps it when it has exited).
  bool running(size_t server);

  /// The index of the server leading `stream` (its info's cluster leader), -1 when the stream
  /// has no leader now or could not be asked (within `wait`, polling).
  int stream_leader(const std::string& stream,
                    std::chrono::milliseconds wait = std::chrono::seconds(10)) const;

  /// How many of the stream's peers are current now: its leader and each replica its info
  /// reports current and online; 0 when there is no leader or no answer.
  int current_peers(const std::string& stream) const;

  const std::filesystem::path& dir() const { return dir_; }
  std::string log_tail(size_t server, size_t bytes = 3000) const;

 private:
  struct server {
    uint16_t port = 0;
    uint16_t cluster_port = 0;
    pid_t pid = -1;
    bool paused = false;
  };

  /// Free ports for every server, all started, then waited for; false (after killing them)
  /// when one could not bind its ports, so that the caller retries with other ports.
  bool start_all();
  void spawn(size_t i);
  std::vector<std::string> argv(size_t i) const;
  /// "" once a probe stream of the cluster's size was created, "in use" when a server exited
  /// unable to bind, else why not.
  std::string wait_ready(std::chrono::steady_clock::time_point deadline);
  /// Whether the server accepts TCP connections on its client port.
  bool accepts(size_t i) const;

  std::filesystem::path dir_;
  std::chrono::milliseconds ready_within_;
  std::vector<server> servers_;
};

} // namespace factum::test
