// child_process.hpp (tests): a child process known by its pid, for the tests that crash one and
// the crash drivers. Either forked to run a function, reporting to the parent on a pipe (and, when
// the function asks for it, reading the parent's words on a second pipe), or exec'ed with its
// stderr in a log file. The parent reads the reports, kills it (SIGKILL) or stops it (SIGTERM, then
// SIGKILL after a bound), and always reaps it: a child still running when its object goes is
// SIGKILLed and reaped. Header-only and without doctest (the crash drivers are plain programs): a
// failed pipe or fork is a false return. The thread that made the object only.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace factum::test {

class child_process {
 public:
  child_process() = default;
  ~child_process() { let_go(); }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  // -- starting --

  /// Forks a child that runs `body` and then exits with status 0 (a body that ends the child
  /// itself calls _exit; one that throws ends it with 125). `body` takes nothing; or `int report`,
  /// the write end of the pipe whose read end is reports(); or `int report, int words`, and also
  /// the read end of the pipe that tell() writes to. The child has only its own ends of the pipes.
  /// False when pipe() or fork() failed (no child then).
  template <class F> bool run(F body) {
    constexpr bool with_words = std::is_invocable_v<F&, int, int>;
    constexpr bool with_report = with_words || std::is_invocable_v<F&, int>;
    static_assert(with_report || std::is_invocable_v<F&>,
                  "the body takes (), (int report) or (int report, int words)");
    let_go();
    int report[2] = {-1, -1}, words[2] = {-1, -1};
    if ((with_report && ::pipe(report) != 0) || (with_words && ::pipe(words) != 0)) {
      for (int fd : {report[0], report[1], words[0], words[1]})
        close_fd(fd);
      return false;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      close_fd(report[0]);
      close_fd(words[1]);
      try {
        if constexpr (with_words)
          body(report[1], words[0]);
        else if constexpr (with_report)
          body(report[1]);
        else
          body();
      } catch (...) {
        _exit(125); // never back into the test runner's code in the child
      }
      _exit(0);
    }
    close_fd(report[1]);
    close_fd(words[0]);
    if (pid < 0) {
      close_fd(report[0]);
      close_fd(words[1]);
      return false;
    }
    pid_ = pid;
    reports_ = report[0];
    words_ = words[1];
    return true;
  }

  /// Starts argv[0] (a path) with the arguments after it, its stdout to /dev/null and its stderr
  /// to `log` (truncated). False when fork failed.
  bool spawn(const std::vector<std::string>& argv, const std::filesystem::path& log) {
    let_go();
    log_ = log;
    pid_t pid = ::fork();
    if (pid < 0)
      return false;
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 2);
        ::close(fd);
      }
      int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0)
        ::dup2(null, 1);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      _exit(127);
    }
    pid_ = pid;
    return true;
  }

  // -- the pipes of a child that run() started --

  /// The read end of the pipe the child reports on (-1 when it has none). It stays open after
  /// the child is killed, so that what it wrote before can still be read.
  int reports() const noexcept { return reports_; }

  /// Writes `c` to the pipe the child reads its words from; false when that failed (no such
  /// pipe, or the child is gone: a process that ignores SIGPIPE sees EPIPE).
  bool tell(char c = 'g') { return words_ >= 0 && ::write(words_, &c, 1) == 1; }

  /// Closes the parent's end of that pipe: the child reads the end of the file.
  void stop_telling() { close_fd(words_); }

  // -- its end --

  /// The child's pid; -1 before it started and once it was reaped.
  pid_t pid() const noexcept { return pid_; }

  /// Whether the child has exited (reaping it then); never blocks.
  bool exited() {
    int st = 0;
    if (pid_ > 0 && ::waitpid(pid_, &st, WNOHANG) == pid_)
      reaped(st);
    return pid_ <= 0;
  }

  /// Waits until the child exits and reaps it; false when there is no child to wait for.
  bool wait() {
    if (pid_ <= 0)
      return false;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_)
      return false;
    reaped(st);
    return true;
  }

  /// SIGKILL, and waits for it (no-op when it is not running).
  void kill_now() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    wait();
  }

  /// SIGTERM, and waits for it at most `limit` (then SIGKILL): "" when it exited with code 0,
  /// else what happened.
  std::string stop(std::chrono::seconds limit) {
    if (pid_ <= 0)
      return "not running";
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited())
        return exit_code() == 0 ? "" : "did not exit 0 after SIGTERM";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_now();
    return "did not stop within " + std::to_string(limit.count()) + " s after SIGTERM";
  }

  /// The wait status (as waitpid gives it: WIFEXITED, WTERMSIG...) once the child was reaped;
  /// -1 before (for which WIFEXITED and WIFSIGNALED are both false).
  int status() const noexcept { return status_; }

  /// The exit code once the child was reaped (128 + the signal for a killed child); -1 before.
  int exit_code() const noexcept {
    if (status_ == -1)
      return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

  /// The last `n` bytes of the log of a child that spawn() started.
  std::string log_tail(size_t n = 4000) const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    auto s = ss.str();
    return s.size() > n ? s.substr(s.size() - n) : s;
  }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }
  /// Before a new child and at the end: an earlier child still running is killed, its pipes
  /// closed.
  void let_go() {
    kill_now();
    close_fd(reports_);
    close_fd(words_);
    status_ = -1;
  }
  void reaped(int st) {
    pid_ = -1;
    status_ = st;
  }

  pid_t pid_ = -1;
  int status_ = -1;
  int reports_ = -1, words_ = -1;
  std::filesystem::path log_;
};

} // namespace factum::test
