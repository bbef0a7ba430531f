// nats_cluster.cpp (tests): nats-server -js processes as child processes (nats_cluster.hpp):
// free ports, fork/exec with the log redirected, readiness by a real JetStream request,
// kill/stop/continue/restart, a stream's leader. The test's thread only.
#include "nats_cluster.hpp"

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

#include <nats/nats.h>

#include "etcd_server.hpp" // free_ports

namespace factum::test {

namespace {

std::filesystem::path make_nats_dir() {
  auto tmpl = (std::filesystem::temp_directory_path() / "factum-nats-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error(std::string("nats_cluster: mkdtemp: ") + std::strerror(errno));
  return tmpl;
}

std::string nats_binary() {
  if (const char* b = std::getenv("FACTUM_NATS_SERVER"); b && *b)
    return b;
  return std::filesystem::exists("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : "nats-server";
}

/// A JetStream context on one connection to `urls`, for the cluster's own requests.
struct js_client {
  natsOptions* o = nullptr;
  natsConnection* c = nullptr;
  jsCtx* js = nullptr;
  js_client(const std::vector<std::string>& urls, int64_t timeout_ms) {
    std::vector<const char*> u;
    for (auto& s : urls)
      u.push_back(s.c_str());
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
      s = natsOptions_SetServers(o, u.data(), static_cast<int>(u.size()));
    if (s == NATS_OK)
      s = natsOptions_SetTimeout(o, timeout_ms);
    if (s == NATS_OK)
      s = natsOptions_SetAllowReconnect(o, false);
    if (s == NATS_OK)
      s = natsConnection_Connect(&c, o);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = timeout_ms;
    if (s == NATS_OK)
      s = natsConnection_JetStream(&js, c, &jo);
  }
  ~js_client() {
    if (js)
      jsCtx_Destroy(js);
    if (c)
      natsConnection_Destroy(c);
    if (o)
      natsOptions_Destroy(o);
  }
  bool ok() const { return js != nullptr; }
};

} // namespace

// -- lifetime --

nats_cluster::nats_cluster(size_t servers, std::chrono::milliseconds ready_within)
    : dir_(make_nats_dir()), ready_within_(ready_within) {
  if (servers == 0)
    throw std::runtime_error("nats_cluster: no servers");
  servers_.resize(servers);
  for (int attempt = 0; attempt < 5; ++attempt)
    if (start_all())
      return;
  auto tail = log_tail(0);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  throw std::runtime_error("nats_cluster: ports stayed in use over 5 attempts; log: " + tail);
}

nats_cluster::~nats_cluster() {
  for (size_t i = 0; i < servers_.size(); ++i)
    kill9(i);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool nats_cluster::start_all() {
  auto ports = free_ports(2 * servers_.size());
  for (size_t i = 0; i < servers_.size(); ++i) {
    servers_[i].port = ports[2 * i];
    servers_[i].cluster_port = ports[2 * i + 1];
    std::error_code ec;
    std::filesystem::remove_all(dir_ / name(i), ec);
  }
  for (size_t i = 0; i < servers_.size(); ++i)
    spawn(i);
  auto why = wait_ready(std::chrono::steady_clock::now() + ready_within_);
  if (why.empty())
    return true;
  for (size_t i = 0; i < servers_.size(); ++i)
    kill9(i);
  if (why == "in use")
    return false;
  std::string tails;
  for (size_t i = 0; i < servers_.size(); ++i)
    tails += "\n--- " + name(i) + ":\n" + log_tail(i, 1500);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  throw std::runtime_error("nats_cluster: " + why + tails);
}

// -- one server --

std::vector<std::string> nats_cluster::argv(size_t i) const {
  auto& s = servers_[i];
  std::vector<std::string> a{nats_binary(), "-js",       "-sd", (dir_ / name(i)).string(),
                             "-a",          "127.0.0.1", "-p",  std::to_string(s.port),
                             "-n",          name(i)};
  if (servers_.size() > 1) {
    std::string routes;
    for (size_t j = 0; j < servers_.size(); ++j) {
      if (j == i)
        continue;
      if (!routes.empty())
        routes += ',';
      routes += "nats://127.0.0.1:" + std::to_string(servers_[j].cluster_port);
    }
    a.insert(a.end(), {"--cluster_name", "c_" + dir_.filename().string().substr(12), "--cluster",
                       "nats://127.0.0.1:" + std::to_string(s.cluster_port), "--routes", routes});
  }
  return a;
}

void nats_cluster::spawn(size_t i) {
  auto args = argv(i);
  std::vector<char*> cargs;
  for (auto& a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  auto log = (dir_ / (name(i) + ".log")).string();
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0)
    throw std::runtime_error("nats_cluster: cannot open " + log + ": " + std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) { // the child: only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      _exit(127);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::close_range(3, ~0U, 0);
    ::execvp(cargs[0], cargs.data());
    static const char msg[] = "nats_cluster: exec of nats-server failed (install nats-server)\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0)
    throw std::runtime_error(std::string("nats_cluster: fork: ") + std::strerror(errno));
  servers_[i].pid = pid;
  servers_[i].paused = false;
}

bool nats_cluster::accepts(size_t i) const {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(servers_[i].port);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

std::string nats_cluster::wait_ready(std::chrono::steady_clock::time_point deadline) {
  // Every server takes connections; then a stream of the cluster's size can be made: JetStream
  // has a meta leader that knows every peer.
  for (size_t i = 0; i < servers_.size(); ++i) {
    while (!accepts(i)) {
      if (!running(i))
        return log_tail(i, 100'000).find("address already in use") != std::string::npos
                 ? "in use"
                 : name(i) + " exited before it was ready";
      if (std::chrono::steady_clock::now() >= deadline)
        return name(i) + " took no connection within " + std::to_string(ready_within_.count()) +
               " ms";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string last = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    js_client c(urls(), 1000);
    if (c.ok()) {
      jsStreamConfig sc;
      jsStreamConfig_Init(&sc);
      sc.Name = "FACTUM_READY_PROBE";
      const char* subjects[] = {"factum.ready.probe"};
      sc.Subjects = subjects;
      sc.SubjectsLen = 1;
      sc.Storage = js_MemoryStorage;
      sc.Replicas = static_cast<int64_t>(servers_.size());
      jsStreamInfo* si = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      natsStatus s = js_AddStream(&si, c.js, &sc, nullptr, &jerr);
      jsStreamInfo_Destroy(si);
      if (s == NATS_OK || jerr == 10058 /* exists */) {
        if (js_DeleteStream(c.js, "FACTUM_READY_PROBE", nullptr, &jerr) == NATS_OK)
          return {};
      }
      last =
        std::string(natsStatus_GetText(s)) + " (JetStream error " + std::to_string(int(jerr)) + ")";
    }
    for (size_t i = 0; i < servers_.size(); ++i)
      if (!running(i))
        return name(i) + " exited before JetStream was ready";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "JetStream was not ready within " + std::to_string(ready_within_.count()) + " ms: " + last;
}

// -- nemeses --

void nats_cluster::kill9(size_t i) {
  auto& s = servers_.at(i);
  if (s.pid <= 0)
    return;
  ::kill(s.pid, SIGKILL);
  ::waitpid(s.pid, nullptr, 0);
  s.pid = -1;
  s.paused = false;
}

void nats_cluster::pause(size_t i) {
  auto& s = servers_.at(i);
  if (s.pid <= 0 || s.paused || ::kill(s.pid, SIGSTOP) != 0)
    return;
  // kill() only queues the signal: wait until every thread of the server has stopped.
  int st = 0;
  while (::waitpid(s.pid, &st, WUNTRACED) == s.pid && !WIFSTOPPED(st)) {
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      s.pid = -1;
      return;
    }
  }
  s.paused = true;
}

void nats_cluster::resume(size_t i) {
  auto& s = servers_.at(i);
  if (s.pid > 0 && ::kill(s.pid, SIGCONT) == 0)
    s.paused = false;
}

void nats_cluster::restart(size_t i) {
  kill9(i);
  spawn(i);
  auto deadline = std::chrono::steady_clock::now() + ready_within_;
  while (!accepts(i)) {
    if (!running(i) || std::chrono::steady_clock::now() >= deadline) {
      kill9(i);
      throw std::runtime_error("nats_cluster: restarted " + name(i) +
                               " took no connection; log: " + log_tail(i));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool nats_cluster::running(size_t i) {
  auto& s = servers_.at(i);
  if (s.pid <= 0)
    return false;
  if (::waitpid(s.pid, nullptr, WNOHANG) == s.pid)
    s.pid = -1;
  return s.pid > 0;
}

int nats_cluster::stream_leader(const std::string& stream, std::chrono::milliseconds wait) const {
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::vector<std::string> up;
    for (size_t i = 0; i < servers_.size(); ++i)
      if (servers_[i].pid > 0 && !servers_[i].paused)
        up.push_back(url(i));
    js_client c(up, 1000);
    if (c.ok()) {
      jsStreamInfo* si = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      if (js_GetStreamInfo(&si, c.js, stream.c_str(), nullptr, &jerr) == NATS_OK) {
        std::string leader = si->Cluster && si->Cluster->Leader ? si->Cluster->Leader : "";
        jsStreamInfo_Destroy(si);
        for (size_t i = 0; i < servers_.size(); ++i)
          if (!leader.empty() && leader == name(i))
            return static_cast<int>(i);
        if (servers_.size() == 1 && leader.empty())
          return 0;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int nats_cluster::current_peers(const std::string& stream) const {
  std::vector<std::string> up;
  for (size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i].pid > 0 && !servers_[i].paused)
      up.push_back(url(i));
  js_client c(up, 1000);
  if (!c.ok())
    return 0;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (js_GetStreamInfo(&si, c.js, stream.c_str(), nullptr, &jerr) != NATS_OK)
    return 0;
  int n = 0;
  if (si->Cluster && si->Cluster->Leader && *si->Cluster->Leader) {
    n = 1;
    for (int i = 0; i < si->Cluster->ReplicasLen; ++i) {
      auto* p = si->Cluster->Replicas[i];
      n += p && p->Current && !p->Offline ? 1 : 0;
    }
  } else if (servers_.size() == 1) {
    n = 1;
  }
  jsStreamInfo_Destroy(si);
  return n;
}

// -- observers --

std::string nats_cluster::url(size_t i) const {
  return "nats://127.0.0.1:" + std::to_string(servers_.at(i).port);
}

std::vector<std::string> nats_cluster::urls() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < servers_.size(); ++i)
    out.push_back(url(i));
  return out;
}

std::string nats_cluster::name(size_t i) const {
  return "n" + std::to_string(i);
}

pid_t nats_cluster::pid(size_t i) const {
  return servers_.at(i).pid;
}

std::string nats_cluster::log_tail(size_t i, size_t bytes) const {
  std::ifstream in(dir_ / (name(i) + ".log"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

} // namespace factum::test
