// proc_usage.cpp: the CPU seconds and peak RSS of another process (`factum bench
// --server-pid`), read from /proc/PID/stat and /proc/PID/status (Linux). Runs on the caller's
// thread (http_target::usage, before and after the measured phase).
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "target.hpp"

namespace factum::tools::loadgen {

server_usage proc_usage(int64_t server_pid) {
  server_usage u;
  if (server_pid <= 0)
    return u;
  auto pid = std::to_string(server_pid);
  std::ifstream st("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(st, line))
    return u;
  // Fields after the command name "(...)": state is field 3; utime 14, stime 15.
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return u;
  std::istringstream in(line.substr(close + 2));
  std::string f;
  double ticks = double(sysconf(_SC_CLK_TCK));
  long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && in >> f; ++field) {
    if (field == 14)
      utime = std::stol(f);
    if (field == 15)
      stime = std::stol(f);
  }
  u.cpu_s = double(utime + stime) / ticks;
  std::ifstream status("/proc/" + pid + "/status");
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      u.peak_rss_kib = std::atol(line.c_str() + 6);
  u.known = true;
  return u;
}

} // namespace factum::tools::loadgen
