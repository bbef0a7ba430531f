// support.hpp: helpers of the reliability tests: a plain POSIX socket to 127.0.0.1 for what a
// well-behaved client never does (dripping bytes, half-closing, holding connections idle,
// streaming a huge body), a minimal response reader, and on-disk fact counts (every entity file
// opened read-only with the storage library). Used on the test's own threads.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "factum/storage/entity_store.hpp"

namespace factum::test {

/// One TCP connection to 127.0.0.1:port with bounded reads and writes.
class raw_socket {
 public:
  explicit raw_socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0)
      return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~raw_socket() { close(); }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;
  raw_socket(raw_socket&& o) noexcept : fd_(o.fd_), in_(std::move(o.in_)) { o.fd_ = -1; }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  /// Sends all of `bytes`; false when the peer closed or reset the connection.
  bool send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  /// Bounds every blocking send (SO_SNDTIMEO): a send that cannot progress then fails.
  void set_send_timeout(std::chrono::milliseconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  /// Half-closes: no more bytes from this side; the server may still answer.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  void close() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

  /// Waits up to `timeout` for readable data or end of stream; appends what arrives to the
  /// input. Returns the number of bytes read (0: end of stream or nothing in time).
  size_t read_some(std::chrono::milliseconds timeout, bool* eof = nullptr) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
      return 0;
    char buf[16384];
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      if (eof)
        *eof = true;
      return 0;
    }
    in_.append(buf, static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }

  /// Reads until one whole response (head and Content-Length body) is in, the peer closes, or
  /// `timeout` passes. Returns the status (0 when none arrived).
  int read_response(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto s = parsed_status(); s != 0)
        return s;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return 0;
      bool eof = false;
      read_some(left, &eof);
      if (eof)
        return parsed_status();
    }
  }

  /// Whether the server closed the connection (end of stream or reset) within `timeout`;
  /// bytes that arrive first are kept in input().
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0)
        continue;
      char buf[4096];
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0)
        return true;
      in_.append(buf, static_cast<size_t>(n));
    }
    return false;
  }

  const std::string& input() const { return in_; }

  /// The body of the first response in the input (after the blank line).
  std::string body() const {
    auto p = in_.find("\r\n\r\n");
    return p == std::string::npos ? std::string() : in_.substr(p + 4);
  }

  /// The value of header `name` (case-insensitive) in the first response, or "".
  std::string header(std::string name) const {
    auto end = in_.find("\r\n\r\n");
    std::string head = in_.substr(0, end);
    for (auto& c : head)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto p = head.find("\r\n" + name + ":");
    if (p == std::string::npos)
      return {};
    auto start = p + 3 + name.size();
    auto stop = head.find("\r\n", start);
    auto v = in_.substr(start, stop == std::string::npos ? std::string::npos : stop - start);
    while (!v.empty() && v.front() == ' ')
      v.erase(0, 1);
    return v;
  }

 private:
  int parsed_status() const {
    auto end = in_.find("\r\n\r\n");
    if (end == std::string::npos || in_.compare(0, 9, "HTTP/1.1 ") != 0)
      return 0;
    int status = std::atoi(in_.c_str() + 9);
    if (status == 100)
      return 100;
    auto cl = header("content-length");
    if (!cl.empty() && in_.size() < end + 4 + std::stoul(cl))
      return 0;
    return status;
  }

  int fd_ = -1;
  std::string in_;
};

/// Facts and files on disk: every entity file under `data_dir`, opened read-only.
struct disk_counts {
  size_t files = 0;
  int64_t facts = 0;
  bool operator==(const disk_counts&) const = default;
};

inline disk_counts count_on_disk(const std::filesystem::path& data_dir) {
  disk_counts c;
  for (auto& f : list_entity_files(data_dir)) {
    ++c.files;
    store_options o;
    o.data_dir = data_dir;
    o.read_only = true;
    auto s = entity_store::open_file(f, o);
    if (s)
      c.facts += (*s)->last_seq();
    else
      c.facts = -1000000; // unreadable: no count can match
  }
  return c;
}

/// Every regular file below `dir`, recursively (to show nothing was created outside it),
/// except the spare entity files a runtime makes ahead in `dir/spares` (and `dir/spares-<page
/// size>`) on its own schedule.
inline size_t files_below(const std::filesystem::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory() && it->path().parent_path() == dir &&
        it->path().filename().string().rfind("spares", 0) == 0)
      it.disable_recursion_pending();
    n += it->is_regular_file();
  }
  return n;
}

} // namespace factum::test
