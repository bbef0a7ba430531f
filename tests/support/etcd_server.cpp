// etcd_server.cpp (tests): etcd members as child processes (etcd_server.hpp): free ports,
// fork/exec with the log redirected, readiness by real reads, stop/kill/restart. The test's
// thread only.
#include "etcd_server.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "factum/http/client.hpp"

namespace factum::test {

/// Distinct free loopback TCP ports: each bound to port 0 at once (so none repeats), then
/// released for etcd to bind. Another process may take one in between; start_all() retries.
std::vector<uint16_t> free_ports(size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("etcd_server: no free port: ") + std::strerror(errno));
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds)
    ::close(fd);
  return ports;
}

namespace {

std::filesystem::path make_temp_dir() {
  auto tmpl = (std::filesystem::temp_directory_path() / "factum-etcd-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error(std::string("etcd_server: mkdtemp: ") + std::strerror(errno));
  return tmpl;
}

std::string loopback_url(uint16_t port) {
  return "http://127.0.0.1:" + std::to_string(port);
}

} // namespace

// -- lifetime --

etcd_server::etcd_server(size_t members, std::chrono::milliseconds ready_within)
    : dir_(make_temp_dir()), ready_within_(ready_within) {
  if (members == 0)
    throw std::runtime_error("etcd_server: no members");
  for (size_t i = 0; i < members; ++i)
    members_.push_back(member{"m" + std::to_string(i)});
  for (int attempt = 0; attempt < 5; ++attempt)
    if (start_all())
      return;
  auto tail = log_tail(0);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  throw std::runtime_error("etcd_server: ports stayed in use over 5 attempts; log: " + tail);
}

etcd_server::~etcd_server() {
  // SIGKILL: the data goes with the directory, and a member left without a quorum takes the
  // whole 5 s bound of stop() to give up on SIGTERM.
  for (size_t i = 0; i < members_.size(); ++i)
    kill9(i);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool etcd_server::start_all() {
  auto ports = free_ports(2 * members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    members_[i].client_port = ports[2 * i];
    members_[i].peer_port = ports[2 * i + 1];
    std::error_code ec;
    std::filesystem::remove_all(dir_ / ("member-" + members_[i].name), ec);
  }
  for (auto& m : members_)
    spawn(m);
  auto deadline = std::chrono::steady_clock::now() + ready_within_;
  for (auto& m : members_) {
    auto why = wait_ready(m, deadline);
    if (why.empty())
      continue;
    for (size_t i = 0; i < members_.size(); ++i)
      kill9(i);
    if (why == "in use")
      return false;
    std::error_code ec;
    auto tail = log_tail(size_t(&m - members_.data()));
    std::filesystem::remove_all(dir_, ec);
    throw std::runtime_error("etcd_server: member " + m.name + " " + why + "; log: " + tail);
  }
  return true;
}

// -- one member --

std::string etcd_server::initial_cluster() const {
  std::string out;
  for (auto& m : members_) {
    if (!out.empty())
      out += ',';
    out += m.name + "=" + loopback_url(m.peer_port);
  }
  return out;
}

std::vector<std::string> etcd_server::argv(const member& m) const {
  const char* bin = std::getenv("FACTUM_ETCD");
  return {bin && *bin ? bin : "etcd",
          "--name",
          m.name,
          "--data-dir",
          (dir_ / ("member-" + m.name)).string(),
          "--listen-client-urls",
          loopback_url(m.client_port),
          "--advertise-client-urls",
          loopback_url(m.client_port),
          "--listen-peer-urls",
          loopback_url(m.peer_port),
          "--initial-advertise-peer-urls",
          loopback_url(m.peer_port),
          "--initial-cluster",
          initial_cluster(),
          "--initial-cluster-state",
          "new",
          "--initial-cluster-token",
          dir_.filename().string(), // unique: members of other tests' clusters never join
          "--heartbeat-interval",
          "10",
          "--election-timeout",
          "100",
          "--logger",
          "zap"};
}

void etcd_server::spawn(member& m) {
  auto args = argv(m);
  std::vector<char*> cargs;
  for (auto& a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  auto log = (dir_ / (m.name + ".log")).string();
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0)
    throw std::runtime_error("etcd_server: cannot open " + log + ": " + std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) { // the child: only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      _exit(127);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::close_range(3, ~0U, 0); // no test socket or file stays open in etcd
    ::execvp(cargs[0], cargs.data());
    static const char msg[] = "etcd_server: exec of etcd failed (install etcd-server)\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0)
    throw std::runtime_error(std::string("etcd_server: fork: ") + std::strerror(errno));
  m.pid = pid;
}

std::string etcd_server::wait_ready(member& m, std::chrono::steady_clock::time_point deadline) {
  http::client::sync_options o;
  o.timeout = std::chrono::milliseconds(500);
  http::client::sync_client client("127.0.0.1", m.client_port, o);
  size_t index = size_t(&m - members_.data());
  while (std::chrono::steady_clock::now() < deadline) {
    // A linearizable range of key "\0": answered only once the cluster has a leader.
    auto r = client.request("POST", "/v3/kv/range", {}, R"({"key":"AA=="})");
    if (r.status == 200 && r.body.find("\"header\"") != std::string::npos)
      return {};
    if (!running(index))
      return log_tail(index, 100'000).find("address already in use") != std::string::npos
               ? "in use"
               : "exited before it was ready";
    if (r.failed != http::client::failure::timeout) // refused, or no leader yet: poll again soon
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "was not ready within " + std::to_string(ready_within_.count()) + " ms";
}

// -- nemeses --

void etcd_server::stop(size_t member) {
  auto& m = members_.at(member);
  if (!running(member))
    return;
  ::kill(m.pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running(member))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill9(member);
}

void etcd_server::kill9(size_t member) {
  auto& m = members_.at(member);
  if (m.pid <= 0)
    return;
  ::kill(m.pid, SIGKILL);
  int st = 0;
  ::waitpid(m.pid, &st, 0);
  m.pid = -1;
}

void etcd_server::restart(size_t member) {
  stop(member);
  auto& m = members_.at(member);
  spawn(m);
  auto why = wait_ready(m, std::chrono::steady_clock::now() + ready_within_);
  if (!why.empty()) {
    kill9(member);
    throw std::runtime_error("etcd_server: restarted member " + m.name + " " +
                             (why == "in use" ? "found its ports taken" : why) +
                             "; log: " + log_tail(member));
  }
}

bool etcd_server::running(size_t member) {
  auto& m = members_.at(member);
  if (m.pid <= 0)
    return false;
  int st = 0;
  if (::waitpid(m.pid, &st, WNOHANG) == m.pid)
    m.pid = -1;
  return m.pid > 0;
}

// -- observers --

std::string etcd_server::url(size_t member) const {
  return loopback_url(members_.at(member).client_port);
}

std::vector<std::string> etcd_server::urls() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < members_.size(); ++i)
    out.push_back(url(i));
  return out;
}

std::string etcd_server::log_tail(size_t member, size_t bytes) const {
  std::ifstream in(dir_ / (members_.at(member).name + ".log"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

} // namespace factum::test
