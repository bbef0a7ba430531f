// cutting_proxy.hpp: an HTTP/1.1 proxy on 127.0.0.1 that stands between a relaying node and an
// entity's owner. It passes each request on to the owner (a new connection each) and the owner's
// answer back on the kept-alive connection, but for the requests the test names (1-based, in
// the order they arrive) it closes the connection once the owner has answered: what a relaying
// node sees of an owner that committed a call and died before its reply left. One thread polls
// the listening socket and every connection; the test thread reads the count.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "factum/http/client.hpp"

namespace factum::test {

class cutting_proxy {
 public:
  cutting_proxy(uint16_t owner_port, std::set<int> cut)
      : owner_port_(owner_port), cut_(std::move(cut)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_, 16) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("cutting_proxy: ") + std::strerror(errno));
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~cutting_proxy() {
    stop_ = true;
    thread_.join();
    for (auto& c : conns_)
      ::close(c.fd);
    ::close(listen_);
  }
  cutting_proxy(const cutting_proxy&) = delete;
  cutting_proxy& operator=(const cutting_proxy&) = delete;

  uint16_t port() const { return port_; }
  /// Requests received so far (each passed on to the owner).
  int requests() const { return requests_.load(); }

 private:
  struct conn {
    int fd;
    std::string in;
  };

  void loop() {
    // Bounded: the test's calls take seconds at most; the destructor ends it sooner.
    auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      std::vector<pollfd> p{{listen_, POLLIN, 0}};
      for (auto& c : conns_)
        p.push_back({c.fd, POLLIN, 0});
      if (::poll(p.data(), p.size(), 50) <= 0)
        continue;
      if (p[0].revents & POLLIN)
        if (int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC); fd >= 0)
          conns_.push_back({fd, {}});
      std::vector<int> gone;
      for (size_t i = 1; i < p.size(); ++i)
        if (p[i].revents & (POLLIN | POLLHUP | POLLERR))
          if (!serve(conns_[i - 1]))
            gone.push_back(conns_[i - 1].fd);
      for (int fd : gone) {
        ::close(fd);
        std::erase_if(conns_, [fd](const conn& c) { return c.fd == fd; });
      }
    }
  }

  /// Reads what arrived; passes on a whole request. False: the connection is to go.
  bool serve(conn& c) {
    char buf[8192];
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n <= 0)
      return false;
    c.in.append(buf, static_cast<size_t>(n));
    auto head_end = c.in.find("\r\n\r\n");
    if (head_end == std::string::npos)
      return true;
    auto head = c.in.substr(0, head_end);
    size_t length = 0;
    http::client::header_list headers;
    std::string method, target;
    size_t pos = head.find("\r\n");
    {
      auto line = head.substr(0, pos);
      auto sp = line.find(' ');
      method = line.substr(0, sp);
      target = line.substr(sp + 1, line.rfind(' ') - sp - 1);
    }
    while (pos != std::string::npos && pos < head.size()) {
      auto next = head.find("\r\n", pos + 2);
      auto line =
        head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      pos = next;
      auto colon = line.find(':');
      if (colon == std::string::npos)
        continue;
      auto name = line.substr(0, colon), value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ')
        value.erase(0, 1);
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "content-length")
        length = std::stoul(value);
      else if (lower != "host" && lower != "connection")
        headers.emplace_back(name, value);
    }
    if (c.in.size() < head_end + 4 + length)
      return true;
    auto body = c.in.substr(head_end + 4, length);
    c.in.erase(0, head_end + 4 + length);
    int nth = ++requests_;
    http::client::sync_client owner("127.0.0.1", owner_port_);
    auto r = owner.request(method, target, headers, body);
    if (cut_.count(nth) || r.status == 0)
      return false; // the owner acted on it; its answer never leaves
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " X\r\n";
    for (auto& [k, v] : r.headers)
      if (k != "content-length" && k != "connection" && k != "transfer-encoding")
        out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
    for (size_t done = 0; done < out.size();) {
      ssize_t w = ::send(c.fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (w <= 0)
        return false;
      done += static_cast<size_t>(w);
    }
    return true;
  }

  uint16_t owner_port_;
  std::set<int> cut_;
  int listen_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::vector<conn> conns_; // the proxy's thread only
  std::thread thread_;
};

} // namespace factum::test
