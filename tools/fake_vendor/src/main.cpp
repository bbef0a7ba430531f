// main.cpp: `factum-fake-vendor --listen HOST:PORT [--port-file F]`: runs the fake vendor
// (README.md beside this directory) until SIGTERM or SIGINT. Prints the bound port on stdout
// (one line) and, with --port-file, writes it to F (atomically, via a rename). Runs on the main
// thread; the stop signals are blocked in every thread and taken with sigwait.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <pthread.h>

#include "factum/fake_vendor/fake_vendor.hpp"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "factum-fake-vendor: %s\nusage: factum-fake-vendor [--listen HOST:PORT] "
               "[--port-file FILE]\n  (default --listen 127.0.0.1:0; control API: "
               "tools/fake_vendor/README.md)\n",
               why);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  std::string port_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--listen" || a == "--port-file") && i + 1 < argc)
      (a == "--listen" ? listen : port_file) = argv[++i];
    else if (a == "--help" || a == "-h")
      return usage("a fake HTTP vendor on loopback for tests"), 0;
    else
      return usage(("unknown or incomplete argument '" + a + "'").c_str());
  }
  factum::fake_vendor::vendor_options opts;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return usage("--listen must be HOST:PORT");
  opts.host = listen.substr(0, colon);
  if (opts.host.size() > 2 && opts.host.front() == '[' && opts.host.back() == ']')
    opts.host = opts.host.substr(1, opts.host.size() - 2);
  auto port_text = listen.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port_text) > 65535)
    return usage("--listen: bad port");
  opts.port = static_cast<uint16_t>(std::stoul(port_text));

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    factum::fake_vendor::vendor v(opts);
    if (!port_file.empty()) {
      auto tmp = port_file + ".tmp";
      {
        std::ofstream out(tmp, std::ios::trunc);
        out << v.port() << "\n";
        if (!out)
          return std::fprintf(stderr, "factum-fake-vendor: cannot write %s\n", tmp.c_str()), 1;
      }
      std::error_code ec;
      std::filesystem::rename(tmp, port_file, ec);
      if (ec)
        return std::fprintf(stderr, "factum-fake-vendor: cannot write %s: %s\n", port_file.c_str(),
                            ec.message().c_str()),
               1;
    }
    std::printf("%u\n", static_cast<unsigned>(v.port()));
    std::fflush(stdout);
    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0) {
    }
    v.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
