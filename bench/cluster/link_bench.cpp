// link_bench.cpp: the node-to-node link on loopback, two processes (docs/cluster.md, "Why HTTP
// for the node-to-node link"): CAF 0.17's own remoting (BASP over caf::io's middleman) against
// a keep-alive HTTP/1.1 exchange through factum's HTTP client, with the same request (a keyed
// append's ~200-byte JSON body, the target and the headers a relayed call carries) and the same
// ~150-byte reply. The bench starts itself again as the server (`--serve caf|http`, a child
// process stopped by its pid) and measures, per link:
// - sequential, blocking caller: a scoped_actor's request(...).receive(...) / a sync_client;
// - K in flight, asynchronous caller (K = 1 and --inflight): an event-based actor keeping K
//   requests out / factum's pooled client (the relay's own, gateway/src/forwarder.cpp)
//   with K connections;
// each as p50/p99 per request, requests per second, and the CPU of both processes per request.
// Every figure is a median over --runs runs (each run starts fresh servers; the links alternate).
//
// Usage: link_bench [--quick] [--runs R] [--calls N] [--requests M] [--inflight K]
//                   [--warmup W] [--caf-policy sharing|stealing]
// Threads: the main thread drives everything; CAF replies arrive on CAF workers (handed to the
// main thread by a message), pool completions on the pool's I/O thread (under a mutex). In the
// server process: the Asio thread or CAF's threads serve, the main thread waits for SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "factum/http/client.hpp"

namespace client = factum::http::client;
using clock_type = std::chrono::steady_clock;

namespace {

// -- the exchange both links carry --

/// A keyed append's body, as a client sends it and a relaying node forwards it (207 bytes).
const std::string request_body =
  R"({"type":"invocation","subtype":"payment","amount":"12.50","currency":"USD","data":)"
  R"({"order":"o-2026-11-0042","customer":"c-000317","memo":"monthly renewal, plan pro, )"
  R"(seat 4 of 12","source":"billing-batch-7"}})";
/// The owner's answer (144 bytes).
const std::string reply_body =
  R"({"fact_id":"fct_5d3f0a8c61e2b947000000000042","seq":42,"trace_id":)"
  R"("a586367f454caddb7d0f724694dde3d3","timestamp":1795327451972,"replayed":false})";
const std::string target = "/v1/entities/ledger/acct-000317/append";
const std::string api_key = "dev-key-acme";
const std::string trace_id = "a586367f454caddb7d0f724694dde3d3";
constexpr int64_t epoch = 7;
constexpr auto call_timeout = std::chrono::seconds(5);
/// Longest wait for a whole measurement (every one is bounded by its count as well).
constexpr auto measurement_deadline = std::chrono::seconds(120);

std::string idem_key(int i) {
  return "pay-" + std::to_string(i);
}

// -- CAF configuration (both processes) --

/// The runtime's actor-system settings (start_actors in runtime/src/runtime.cpp), plus the
/// middleman with its defaults: what a node would run were BASP its link. `policy` is the
/// runtime's "sharing" unless --caf-policy says otherwise (CAF's default is "stealing").
void configure(caf::actor_system_config& cfg, const std::string& policy) {
  size_t workers = std::max(2u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", workers);
  cfg.set("scheduler.policy", policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.load<caf::io::middleman>();
}

// -- the server process (--serve) --

/// Blocks SIGTERM and SIGINT in this thread and every thread it starts (sigwait takes them).
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

/// Tells the parent the port (one line on stdout), then waits for SIGTERM.
void announce_and_wait(uint16_t port, const sigset_t& set) {
  std::printf("%u\n", static_cast<unsigned>(port));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
}

/// The owner's side of BASP: one published actor answering the relayed call.
int serve_caf(const sigset_t& set, const std::string& policy) {
  caf::actor_system_config cfg;
  configure(cfg, policy);
  caf::actor_system sys{cfg};
  auto owner = sys.spawn([]() -> caf::behavior {
    return {[](const std::string& tgt, const std::string& key, const std::string& idem,
               const std::string& trace, int64_t ep, const std::string& body) -> std::string {
      // What the HTTP server checks too: a request for an entity, with a body.
      if (tgt.empty() || key.empty() || idem.empty() || trace.empty() || ep < 0 || body.empty())
        return "{}";
      return reply_body;
    }};
  });
  auto port = sys.middleman().publish(owner, 0, "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "link_bench server: publish: %s\n", sys.render(port.error()).c_str());
    return 1;
  }
  announce_and_wait(*port, set);
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  return 0;
}

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

/// One keep-alive connection of the minimal HTTP server: read a request, answer it, again.
class http_session : public std::enable_shared_from_this<http_session> {
 public:
  explicit http_session(tcp::socket s) : stream_(std::move(s)) {}

  void read() {
    req_ = {};
    bhttp::async_read(stream_, buf_, req_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (!ec)
                          self->answer();
                      });
  }

 private:
  void answer() {
    bool ok = req_.method() == bhttp::verb::post && !req_.body().empty() &&
              !req_["Idempotency-Key"].empty() && !req_["X-Factum-Forwarded"].empty();
    res_ = {};
    res_.version(11);
    res_.result(ok ? bhttp::status::ok : bhttp::status::bad_request);
    res_.set(bhttp::field::server, "factum");
    res_.set(bhttp::field::content_type, "application/json");
    res_.set("X-Trace-Id", req_["X-Trace-Id"]);
    res_.keep_alive(req_.keep_alive());
    res_.body() = ok ? reply_body : "{}";
    res_.prepare_payload();
    bhttp::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec && self->res_.keep_alive())
        self->read();
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  bhttp::request<bhttp::string_body> req_;
  bhttp::response<bhttp::string_body> res_;
};

void accept_loop(tcp::acceptor& acc) {
  acc.async_accept([&acc](beast::error_code ec, tcp::socket s) {
    if (ec)
      return;
    s.set_option(tcp::no_delay(true), ec); // as factum's server and client do
    std::make_shared<http_session>(std::move(s))->read();
    accept_loop(acc);
  });
}

/// The owner's side of HTTP: a minimal Beast server on one I/O thread (factum's default
/// `http_threads`), answering every POST with the reply.
int serve_http(const sigset_t& set) {
  net::io_context ioc;
  tcp::acceptor acc(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  accept_loop(acc);
  std::thread io([&ioc] { ioc.run(); });
  announce_and_wait(acc.local_endpoint().port(), set);
  ioc.stop();
  io.join();
  return 0;
}

// -- the client process: servers and CPU --

/// A server child: this program again with `--serve KIND`; stopped by its pid.
class server_process {
 public:
  server_process(const std::string& exe, const std::string& kind, const std::string& policy) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
    pid_ = fork();
    if (pid_ < 0)
      throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM); // never outlive the bench
      dup2(fds[1], STDOUT_FILENO);
      execl(exe.c_str(), exe.c_str(), "--serve", kind.c_str(), "--caf-policy", policy.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    std::string line;
    pollfd p{fds[0], POLLIN, 0};
    auto until = clock_type::now() + std::chrono::seconds(10);
    while (line.find('\n') == std::string::npos && clock_type::now() < until) {
      if (poll(&p, 1, 100) <= 0)
        continue;
      char buf[32];
      auto n = read(fds[0], buf, sizeof buf);
      if (n <= 0)
        break;
      line.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    port_ = static_cast<uint16_t>(std::atoi(line.c_str()));
    if (port_ == 0) {
      stop();
      throw std::runtime_error(kind + " server did not start");
    }
  }
  ~server_process() { stop(); }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  uint16_t port() const { return port_; }

  /// CPU time the server's threads have run so far, in microseconds (the sum of their
  /// schedstat run times: nanoseconds, where /proc/PID/stat counts 10 ms ticks).
  double cpu_us() const {
    double ns = 0;
    auto dir = "/proc/" + std::to_string(pid_) + "/task";
    for (auto& t : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(t.path() / "schedstat");
      double run = 0;
      if (in >> run)
        ns += run;
    }
    return ns / 1e3;
  }

  /// SIGTERM, then SIGKILL if it has not exited within 10 s; reaps it.
  void stop() {
    if (pid_ <= 0)
      return;
    kill(pid_, SIGTERM);
    auto until = clock_type::now() + std::chrono::seconds(10);
    int st = 0;
    while (waitpid(pid_, &st, WNOHANG) == 0) {
      if (clock_type::now() > until) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

double self_cpu_us() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& t) { return double(t.tv_sec) * 1e6 + double(t.tv_usec); };
  return us(ru.ru_utime) + us(ru.ru_stime);
}

double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// -- one measurement --

/// What one measurement gives.
struct figures {
  double p50 = 0, p99 = 0; ///< microseconds per request
  double rate = 0;         ///< requests per second
  double cpu = 0;          ///< microseconds of CPU per request, client and server together
};

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * double(v.size())))];
}

/// Times `body` (which returns one latency per request) and the CPU both processes spent.
figures measure(const server_process& srv, const std::function<std::vector<double>()>& body) {
  double c0 = self_cpu_us(), s0 = srv.cpu_us();
  auto t0 = clock_type::now();
  auto us = body();
  auto t1 = clock_type::now();
  double c1 = self_cpu_us(), s1 = srv.cpu_us();
  figures f;
  f.p50 = percentile(us, 50);
  f.p99 = percentile(us, 99);
  f.rate = double(us.size()) / std::chrono::duration<double>(t1 - t0).count();
  f.cpu = (c1 - c0 + s1 - s0) / double(us.size());
  return f;
}

// -- CAF client --

/// K requests kept in flight by one event-based actor. `report` hears (ok_atom, "") when all
/// are answered (then `us` is complete and the actor done with it), or (ok_atom, why) at the
/// first failure, after which no request is sent (those out end within call_timeout).
struct caf_flight {
  caf::actor server;
  caf::actor report;
  int first = 0; ///< index of the first request (its idempotency key)
  int total = 0;
  int sent = 0, answered = 0;
  bool failed = false;
  std::vector<double> us;
};

void caf_send_next(caf::event_based_actor* self, const std::shared_ptr<caf_flight>& f);

void caf_on_answer(caf::event_based_actor* self, const std::shared_ptr<caf_flight>& f,
                   const std::string& failure) {
  ++f->answered;
  if (f->failed)
    return;
  if (!failure.empty()) {
    f->failed = true;
    self->send(f->report, caf::ok_atom_v, failure);
  } else if (f->answered == f->total) {
    self->send(f->report, caf::ok_atom_v, std::string());
  } else if (f->sent < f->total) {
    caf_send_next(self, f);
  }
}

void caf_send_next(caf::event_based_actor* self, const std::shared_ptr<caf_flight>& f) {
  int i = f->first + f->sent++;
  auto t0 = clock_type::now();
  self
    ->request(f->server, call_timeout, target, api_key, idem_key(i), trace_id, epoch, request_body)
    .then(
      [self, f, t0](const std::string& r) {
        f->us.push_back(micros(clock_type::now() - t0));
        caf_on_answer(self, f, r == reply_body ? std::string() : "wrong reply");
      },
      [self, f](caf::error& e) { caf_on_answer(self, f, self->system().render(e)); });
}

class caf_link {
 public:
  caf_link(uint16_t port, const std::string& policy) : sys_(configured(cfg_, policy)), self_(sys_) {
    auto a = sys_.middleman().remote_actor("127.0.0.1", port);
    if (!a)
      throw std::runtime_error("remote_actor: " + sys_.render(a.error()));
    server_ = *a;
  }

  /// `n` requests one at a time from a blocking scoped_actor.
  std::vector<double> sequential(int first, int n) {
    std::vector<double> us;
    for (int i = first; i < first + n; ++i) {
      auto t0 = clock_type::now();
      std::string err;
      self_
        ->request(server_, call_timeout, target, api_key, idem_key(i), trace_id, epoch,
                  request_body)
        .receive(
          [&](const std::string& r) {
            if (r != reply_body)
              err = "wrong reply";
          },
          [&](caf::error& e) { err = sys_.render(e); });
      if (!err.empty())
        throw std::runtime_error("caf request: " + err);
      us.push_back(micros(clock_type::now() - t0));
    }
    return us;
  }

  /// `n` requests, `k` at a time, from one event-based actor.
  std::vector<double> in_flight(int first, int n, int k) {
    auto f = std::make_shared<caf_flight>();
    f->server = server_;
    f->report = caf::actor_cast<caf::actor>(self_);
    f->first = first;
    f->total = n;
    f->us.reserve(static_cast<size_t>(n));
    sys_.spawn([f, k](caf::event_based_actor* self) {
      for (int j = 0; j < k && f->sent < f->total; ++j)
        caf_send_next(self, f);
    });
    std::optional<std::string> failure;
    self_->receive([&](caf::ok_atom, std::string& why) { failure = std::move(why); },
                   caf::after(measurement_deadline) >> [] {});
    if (!failure)
      throw std::runtime_error("caf in flight: no end within the deadline");
    if (!failure->empty())
      throw std::runtime_error("caf in flight: " + *failure);
    return std::move(f->us);
  }

 private:
  static caf::actor_system_config& configured(caf::actor_system_config& cfg,
                                              const std::string& policy) {
    configure(cfg, policy);
    return cfg;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  caf::scoped_actor self_;
  caf::actor server_;
};

// -- HTTP client --

client::header_list sync_headers(int i) {
  // What forwarder::send sets: Content-Type, X-API-Key, Idempotency-Key, X-Trace-Id and the
  // epoch in X-Factum-Forwarded (the Host header is the client's own).
  return {{"Content-Type", "application/json"},
          {"X-API-Key", api_key},
          {"Idempotency-Key", idem_key(i)},
          {"X-Trace-Id", trace_id},
          {"X-Factum-Forwarded", std::to_string(epoch)}};
}

class http_link {
 public:
  http_link(uint16_t port, const std::string&) : port_(port) {
    client::sync_options o;
    o.timeout = call_timeout;
    sync_ = std::make_unique<client::sync_client>("127.0.0.1", port, o);
  }

  /// `n` requests one at a time through a sync_client (one keep-alive connection).
  std::vector<double> sequential(int first, int n) {
    std::vector<double> us;
    for (int i = first; i < first + n; ++i) {
      auto t0 = clock_type::now();
      auto r = sync_->request("POST", target, sync_headers(i), request_body);
      if (r.status != 200 || r.body != reply_body)
        throw std::runtime_error("http request: status " + std::to_string(r.status) + " " +
                                 r.error);
      us.push_back(micros(clock_type::now() - t0));
    }
    return us;
  }

  /// `n` requests, `k` at a time, through a pool of `k` connections as the relay's forwarder
  /// sets it up (completions on the pool's I/O thread submit the next request).
  std::vector<double> in_flight(int first, int n, int k) {
    // Declared before the I/O thread: it outlives every completion.
    struct state {
      std::mutex mu;
      std::condition_variable cv;
      int sent = 0, answered = 0;
      std::string error; ///< the first failure; none is sent after it
      std::vector<double> us;
    } st;
    st.us.reserve(static_cast<size_t>(n));
    client::io_thread io;
    client::pool_options o;
    o.connect_timeout = std::chrono::milliseconds(1'000);
    o.request_timeout = call_timeout;
    o.max_connections = static_cast<size_t>(k);
    o.resend_on_stale = true;
    o.headers = {{"X-API-Key", api_key}, {"X-Factum-Forwarded", std::to_string(epoch)}};
    auto u = client::parse_url("http://127.0.0.1:" + std::to_string(port_));
    auto pool = io.make_pool(*u, o);
    std::function<void()> send_next = [&] {
      int i = first + st.sent++;
      client::request r;
      r.method = client::verb::post;
      r.target = target;
      r.body = request_body;
      r.idempotency_key = idem_key(i);
      r.trace_id = trace_id;
      auto t0 = clock_type::now();
      pool.submit(std::move(r), [&, t0](client::response& resp) {
        std::lock_guard<std::mutex> g(st.mu);
        st.us.push_back(micros(clock_type::now() - t0));
        ++st.answered;
        if (!st.error.empty())
          return; // failed already: send no more
        if (resp.status != 200 || resp.body != reply_body) {
          st.error = "status " + std::to_string(resp.status) + " " + resp.error;
          st.cv.notify_all();
        } else if (st.answered == n) {
          st.cv.notify_all();
        } else if (st.sent < n) {
          send_next();
        }
      });
    };
    {
      std::unique_lock<std::mutex> g(st.mu);
      for (int j = 0; j < k && st.sent < n; ++j)
        send_next();
      if (!st.cv.wait_for(g, measurement_deadline,
                          [&] { return st.answered == n || !st.error.empty(); }))
        throw std::runtime_error("http in flight: no end within the deadline");
      if (!st.error.empty())
        throw std::runtime_error("http in flight: " + st.error); // io's destructor stops it
    }
    io.stop();
    return std::move(st.us);
  }

 private:
  uint16_t port_;
  std::unique_ptr<client::sync_client> sync_;
};

// -- runs and the table --

struct options {
  int runs = 3;
  int warmup = 500;
  int calls = 10'000;    ///< sequential round trips per run
  int requests = 30'000; ///< in-flight requests per run (each K)
  int inflight = 16;
  std::string policy = "sharing"; ///< CAF's scheduler policy, both processes
};

/// The shapes measured, in table order.
std::vector<std::string> shapes(const options& o) {
  return {"sequential, blocking caller", "1 in flight, async caller",
          std::to_string(o.inflight) + " in flight, async caller"};
}

/// One run of every shape against a fresh server of `kind`.
template <class Link>
std::vector<figures> run_link(const std::string& exe, const std::string& kind, const options& o) {
  server_process srv(exe, kind, o.policy);
  std::vector<figures> out;
  int next = 0; // every request has its own idempotency key
  auto take = [&next](int n) {
    int first = next;
    next += n;
    return first;
  };
  {
    Link link(srv.port(), o.policy);
    link.sequential(take(o.warmup), o.warmup);
    out.push_back(measure(srv, [&] { return link.sequential(take(o.calls), o.calls); }));
    for (int k : {1, o.inflight}) {
      link.in_flight(take(o.warmup), o.warmup, k);
      out.push_back(measure(srv, [&] { return link.in_flight(take(o.requests), o.requests, k); }));
    }
  } // the client side closes first
  srv.stop();
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void print_table(const options& o, const std::vector<std::vector<figures>>& caf_runs,
                 const std::vector<std::vector<figures>>& http_runs) {
  auto names = shapes(o);
  std::printf("\n%-30s %-5s %8s %8s %9s %19s %8s\n", "shape", "link", "p50 us", "p99 us", "req/s",
              "[min .. max]", "cpu us");
  std::vector<figures> med[2]; // per link, per shape
  for (size_t s = 0; s < names.size(); ++s) {
    for (int l = 0; l < 2; ++l) {
      auto& runs = l == 0 ? caf_runs : http_runs;
      auto col = [&](double figures::*m) {
        std::vector<double> v;
        for (auto& r : runs)
          v.push_back(r[s].*m);
        return v;
      };
      auto r = col(&figures::rate);
      med[l].push_back({median(col(&figures::p50)), median(col(&figures::p99)), median(r),
                        median(col(&figures::cpu))});
      auto& m = med[l].back();
      std::printf("%-30s %-5s %8.0f %8.0f %9.0f %8.0f .. %7.0f %8.0f\n", names[s].c_str(),
                  l == 0 ? "basp" : "http", m.p50, m.p99, m.rate,
                  *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()),
                  m.cpu);
    }
  }
  std::printf("\nbasp against http (medians):\n");
  for (size_t s = 0; s < names.size(); ++s) {
    auto &c = med[0][s], &h = med[1][s];
    std::printf("  %-30s p50 %+.0f us, req/s x%.2f, cpu/req %+.0f us\n", names[s].c_str(),
                c.p50 - h.p50, h.rate > 0 ? c.rate / h.rate : 0.0, c.cpu - h.cpu);
  }
}

int run_client(const options& o) {
  char buf[4096];
  auto n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) {
    std::fprintf(stderr, "link_bench: cannot find its own executable\n");
    return 1;
  }
  std::string exe(buf, static_cast<size_t>(n));
  {
    caf::actor_system_config cfg;
    configure(cfg, o.policy);
    std::printf("link_bench: CAF %d.%d.%d BASP (caf::io middleman; scheduler: %s, %zu "
                "workers; middleman.workers %zu) against HTTP/1.1 keep-alive (Beast server, 1 "
                "I/O thread; factum's HTTP client)\n",
                CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION, o.policy.c_str(),
                caf::get_or(cfg, "scheduler.max-threads", size_t{0}),
                caf::get_or(cfg, "middleman.workers", caf::defaults::middleman::workers));
  }
  std::printf("loopback, two processes; request %zu bytes of JSON, reply %zu bytes; %d runs "
              "(medians); per run: %d sequential calls, %d requests per in-flight shape, %d "
              "warm-up before each\n",
              request_body.size(), reply_body.size(), o.runs, o.calls, o.requests, o.warmup);
  std::fflush(stdout);
  std::vector<std::vector<figures>> caf_runs, http_runs;
  try {
    for (int r = 0; r < o.runs; ++r) {
      // Alternate which link goes first, so drift in the machine falls on both.
      for (int l = 0; l < 2; ++l) {
        bool caf_now = (l == 0) == (r % 2 == 0);
        if (caf_now)
          caf_runs.push_back(run_link<caf_link>(exe, "caf", o));
        else
          http_runs.push_back(run_link<http_link>(exe, "http", o));
      }
      std::printf("run %d of %d done\n", r + 1, o.runs);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "link_bench: %s\n", e.what());
    return 1;
  }
  print_table(o, caf_runs, http_runs);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"link_bench: CAF BASP against HTTP keep-alive for the node-to-node link"};
  options o;
  bool quick = false;
  std::string serve;
  app.add_flag("--quick", quick, "small counts (a few seconds in all)");
  app.add_option("--runs", o.runs, "runs (each on fresh servers); medians are printed")
    ->check(CLI::Range(1, 99));
  app.add_option("--calls", o.calls, "sequential round trips per run")
    ->check(CLI::Range(1, 10'000'000));
  app.add_option("--requests", o.requests, "requests per in-flight shape per run")
    ->check(CLI::Range(1, 10'000'000));
  app.add_option("--warmup", o.warmup, "untimed requests before each shape")
    ->check(CLI::Range(0, 1'000'000));
  app.add_option("--inflight", o.inflight, "requests in flight in the last shape")
    ->check(CLI::Range(1, 1'024));
  app
    .add_option("--caf-policy", o.policy,
                "CAF's scheduler policy in both processes (the runtime's: sharing)")
    ->check(CLI::IsMember({"sharing", "stealing"}));
  app.add_option("--serve", serve, "internal: run as the server of a link")
    ->check(CLI::IsMember({"caf", "http"}))
    ->group("");
  CLI11_PARSE(app, argc, argv);
  if (!serve.empty()) {
    auto set = block_stop_signals(); // before any thread starts
    return serve == "caf" ? serve_caf(set, o.policy) : serve_http(set);
  }
  if (quick) {
    o.warmup = std::min(o.warmup, 50);
    o.calls = std::min(o.calls, 300);
    o.requests = std::min(o.requests, 2'000);
  }
  return run_client(o);
}
