// runtime.cpp: the runtime facade (start/stop/call), the activation registry, call routing
// (reply sinks and the router thread), the alarm index's writes and quarantine records (the
// alarm scheduler is in alarm_scheduler.cpp).
//
// Threads: runtime members are called from any thread; the registry is guarded by its mutex;
// a call is enqueued by its caller straight into the entity actor's mailbox and answered from
// that actor's CAF worker; the router thread answers deadlines and re-routes calls whose actor
// ended first; the scheduler runs on CAF (detached, on its own thread, because it reads the
// alarm index with blocking SQLite calls); storage work runs on the storage pool.
#include "factum/runtime/runtime.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "factum/storage/fs_probe.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "runtime_core.hpp"

namespace factum {

using detail::runtime_core;

std::string new_trace_id() {
  // Time-ordered (storage's time_ordered_id): every fact carries its call's trace id and each
  // entity indexes it (facts_by_trace); random ids would dirty one random index page per fact
  // (a 4 KiB WAL frame each at commit). The 80 random bits on the right satisfy W3C Trace
  // Context level 2 (at least the rightmost 7 bytes random).
  return time_ordered_id("", 20);
}

std::string call_fingerprint(std::string_view method, std::string_view args_json) {
  std::string buf;
  buf.reserve(method.size() + args_json.size() + 1);
  buf.append(method).push_back('\n');
  buf.append(args_json);
  return sha256_hex(buf);
}

namespace detail {

// -- registry -----------------------------------------------------------------------------------

caf::actor runtime_core::lookup_or_spawn(const entity_key& key, const std::string& key_str) {
  std::lock_guard<std::mutex> g(reg.mu);
  auto it = reg.map.find(key_str);
  if (it != reg.map.end()) {
    reg.lru.splice(reg.lru.begin(), reg.lru, it->second.lru);
    return it->second.actor;
  }
  if (reg.stopping || reg.held.count(key_str))
    return {};
  reg.lru.push_front(key_str);
  auto& e = reg.map[key_str];
  e.lru = reg.lru.begin();
  e.actor = spawn_entity(this, key, key_str);
  return e.actor;
}

bool runtime_core::acquire_slot(const std::string& key_str, const caf::actor& self) {
  std::vector<caf::actor> victims;
  {
    std::lock_guard<std::mutex> g(reg.mu);
    auto it = reg.map.find(key_str);
    if (reg.slots_used < reg.cap) {
      ++reg.slots_used;
      if (it != reg.map.end())
        it->second.has_slot = true;
      return true;
    }
    reg.waiters.emplace_back(key_str, self);
    // Ask least recently used slot holders to hibernate: one per waiter.
    victims = reg.ask_victims_locked();
  }
  for (auto& v : victims)
    caf::anon_send(v, atoms::hibernate::value);
  return false;
}

void runtime_core::release_slot(const std::string& key_str) {
  caf::actor next;
  std::vector<caf::actor> victims;
  {
    std::lock_guard<std::mutex> g(reg.mu);
    auto it = reg.map.find(key_str);
    if (it != reg.map.end()) {
      it->second.has_slot = false;
      if (it->second.asked_to_hibernate && reg.asked > 0)
        --reg.asked;
      it->second.asked_to_hibernate = false;
    }
    // The slot passes to the first waiter that is still the live activation of its key (a
    // waiter that ended meanwhile, e.g. at stop, must not take a slot with it).
    while (!reg.waiters.empty() && !next) {
      auto [k, a] = std::move(reg.waiters.front());
      reg.waiters.pop_front();
      auto jt = reg.map.find(k);
      if (jt == reg.map.end() || jt->second.actor != a)
        continue;
      jt->second.has_slot = true;
      next = std::move(a);
    }
    if (!next)
      --reg.slots_used;
    // Waiters left beyond the holders already asked: ask more (a holder granted a slot just now
    // may be one of them, once it is the least recently used).
    victims = reg.ask_victims_locked();
  }
  for (auto& v : victims)
    caf::anon_send(v, atoms::hibernate::value);
  if (next)
    caf::anon_send(next, atoms::slot::value);
}

void runtime_core::unregister(const std::string& key_str, const caf::actor& self) {
  std::lock_guard<std::mutex> g(reg.mu);
  auto it = reg.map.find(key_str);
  if (it != reg.map.end() && it->second.actor == self) {
    reg.lru.erase(it->second.lru);
    reg.map.erase(it);
    reg.changed.notify_all();
  }
}

// -- routing ------------------------------------------------------------------------------------

reply_sink::reply_sink(runtime_core* rt, entity_key key, std::string key_str, call_request req,
                       std::chrono::milliseconds timeout, std::function<void(call_reply)> done)
    : rt_(rt), key_(std::move(key)), key_str_(std::move(key_str)), req_(std::move(req)),
      timeout_(timeout), deadline_(call_router_thread::clock::now() + timeout),
      done_(std::move(done)) {}

reply_sink::~reply_sink() {
  rt_->router.remove(*this); // first: the router thread may be looking at the entry
  auto st = state_.load(std::memory_order_acquire);
  if (st == answered_)
    return;
  if (st == taken) { // the actor took the call and ended without answering it
    if (finish(problems::unavailable.reply("the entity ended before answering; retry with the same "
                                           "idempotency key")))
      rt_->stats.call_errors.inc();
    return;
  }
  // No actor took the call: its message was dropped by an actor that had ended. Route it
  // again on the router thread (this destructor may run inside CAF's cleanup of that actor,
  // or under the registry lock, where routing must not happen).
  auto again = std::make_shared<reply_sink>(rt_, std::move(key_), std::move(key_str_),
                                            std::move(req_), timeout_, std::move(done_));
  again->deadline_ = deadline_;
  again->attempts_ = attempts_;
  rt_->router.add(again);
  rt_->router.reroute(std::move(again));
}

call_request reply_sink::take() {
  int expect = pending;
  state_.compare_exchange_strong(expect, taken, std::memory_order_acq_rel);
  return std::move(req_);
}

bool reply_sink::finish(call_reply r) {
  int s = state_.load(std::memory_order_acquire);
  while (s != answered_) {
    if (state_.compare_exchange_weak(s, answered_, std::memory_order_acq_rel)) {
      auto done = std::move(done_);
      done(std::move(r));
      return true;
    }
  }
  return false;
}

void reply_sink::deliver(call_reply r) {
  rt_->router.remove(*this);
  finish(std::move(r));
}

void reply_sink::expire() {
  if (finish(problems::call_timeout.reply("no reply within " + std::to_string(timeout_.count()) +
                                          " ms; retry with the same idempotency key")))
    rt_->stats.call_errors.inc();
}

void call_router_thread::start(runtime_core* rt) {
  rt_ = rt;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void call_router_thread::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  std::vector<std::shared_ptr<reply_sink>> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [t, p] : deadlines_)
      p->queued_ = false;
    deadlines_.clear();
    left.swap(reroutes_);
  }
  // Calls handed back after the thread ended: the registry is stopping, so dispatch answers
  // them UNAVAILABLE at once.
  for (auto& sk : left)
    rt_->dispatch(std::move(sk));
}

void call_router_thread::add(const std::shared_ptr<reply_sink>& sink) {
  bool wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    sink->entry_ = deadlines_.emplace(sink->deadline_, sink.get());
    sink->queued_ = true;
    // Calls share one timeout mostly, so a new deadline is nearly always later than the one
    // the thread sleeps until: no wake-up per call.
    wake = sink->deadline_ < wake_at_;
  }
  if (wake)
    cv_.notify_one();
}

void call_router_thread::remove(reply_sink& sink) {
  std::lock_guard<std::mutex> g(mu_);
  if (sink.queued_) {
    deadlines_.erase(sink.entry_);
    sink.queued_ = false;
  }
}

void call_router_thread::reroute(std::shared_ptr<reply_sink> sink) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!stop_) {
      reroutes_.push_back(std::move(sink));
      sink = nullptr;
    }
  }
  if (sink) // the thread is gone (runtime stopping): answer here, the registry refuses
    rt_->dispatch(std::move(sink));
  else
    cv_.notify_one();
}

void call_router_thread::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (!reroutes_.empty()) {
      auto batch = std::move(reroutes_);
      reroutes_.clear();
      lk.unlock();
      for (auto& sk : batch)
        rt_->dispatch(std::move(sk));
      batch.clear(); // sinks dropped here may hand calls back: do it unlocked
      lk.lock();
      continue;
    }
    auto now = clock::now();
    if (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      std::vector<std::shared_ptr<reply_sink>> due;
      while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
        auto* p = deadlines_.begin()->second;
        p->queued_ = false;
        if (auto sp = p->weak_from_this().lock()) // empty: its destructor waits for the lock
          due.push_back(std::move(sp));
        deadlines_.erase(deadlines_.begin());
      }
      lk.unlock();
      for (auto& sk : due)
        sk->expire();
      due.clear();
      lk.lock();
      continue;
    }
    // Sleeps until the earliest deadline; an answered call's deadline is removed, but the
    // thread keeps sleeping until the time it chose (one spare wake-up per timeout at most).
    wake_at_ = deadlines_.empty() ? clock::time_point::max() : deadlines_.begin()->first;
    if (deadlines_.empty())
      cv_.wait(lk);
    else
      cv_.wait_until(lk, wake_at_);
    wake_at_ = clock::time_point::min(); // awake: adds need not notify
  }
}

void runtime_core::dispatch(std::shared_ptr<reply_sink> sink) {
  if (++sink->attempts_ <= 16) {
    auto target = lookup_or_spawn(sink->key_, sink->key_str_);
    if (target) {
      if (auto* hook = before_dispatch_send.load(std::memory_order_acquire))
        (*hook)(sink->key_str_);
      caf::anon_send(target, atoms::call::value, std::move(sink));
      // CAF 0.17 remembers the actor system in a thread-local after a spawn, and the
      // system's destructor waits for every such thread: a caller thread (HTTP, tests) must
      // not keep it, or stop() hangs until that thread exits. Spawns set it again each time.
      caf::logger::set_current_actor_system(nullptr);
      return;
    }
  }
  // Answered here without running (answered: its destructor does not route it again).
  router.remove(*sink);
  bool held = false;
  {
    std::lock_guard<std::mutex> g(reg.mu);
    held = !reg.stopping && reg.held.count(sink->key_str_) > 0;
  }
  if (held) {
    if (sink->finish(
          problems::entity_restoring.reply("the entity is being rolled back to a bookmark; retry "
                                           "once it is done")))
      stats.call_errors.inc();
    return;
  }
  if (sink->finish(problems::unavailable.reply(sink->attempts_ > 16
                                                 ? "entity unavailable: it kept "
                                                   "ending before taking the call"
                                                 : "the runtime is stopping")))
    stats.call_errors.inc();
}

void runtime_core::route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
                         std::function<void(call_reply)> done) {
  stats.calls.inc();
  if (!cfg.types.find(key.type)) {
    stats.call_errors.inc();
    done(problems::unknown_entity_type.reply(cfg.types.unknown_type_detail(key.type)));
    return;
  }
  if (!req.method.empty() && req.method[0] != '@')
    if (auto no = degradation.refuses_method(key.tenant, key.type, req.method)) {
      stats.call_errors.inc();
      done(degraded_reply(*no, degradation.config().retry_after,
                          key.type + "." + req.method + " is turned off"));
      return;
    }
  auto sink = std::make_shared<reply_sink>(this, key, key.to_string(), std::move(req), timeout,
                                           std::move(done));
  router.add(sink);
  dispatch(std::move(sink));
}

// -- alarm index --------------------------------------------------------------------------------

status runtime_core::sync_alarm_index(const entity_key& key, std::optional<int64_t> next,
                                      bool before_commit) {
  auto& a = alarms;
  auto k = key.to_string();
  std::unique_lock<std::mutex> g(a.mu);
  // What the index says, or will say once the changes queued and being applied are.
  int64_t have = -1; // -1: no entry
  if (auto q = a.queued.find(k); q != a.queued.end()) {
    have = q->second.entry.due_ms;
  } else if (auto f = a.applying.find(k); f != a.applying.end()) {
    have = f->second.entry.due_ms;
  } else {
    auto cur = a.index->due_of(key);
    if (!cur)
      return cur.error();
    have = cur->has_value() ? cur->value() : -1;
  }
  int64_t want = next ? *next : -1;
  bool earlier = want >= 0 && (have < 0 || want < have);
  // Before the entity commits, only an earlier due time is written (the index may say earlier
  // than the entity, never later); after it, any change.
  if (before_commit ? !earlier : want == have)
    return status::ok();
  status outcome; // written by whoever applies the batch, before this returns
  auto& c = a.queued[k];
  c.entry = alarm_index_entry{key, want};
  c.waiters.push_back(&outcome);
  a.writes.wait_applied(
    g, a.writes.ticket(),
    [&] { // `applying` stays readable (above) while the batch is written
      a.applying = std::exchange(a.queued, {});
      std::vector<alarm_index_entry> batch;
      batch.reserve(a.applying.size());
      for (auto& [_, e] : a.applying)
        batch.push_back(e.entry);
      return batch;
    },
    [&](const std::vector<alarm_index_entry>& batch) {
      auto st = a.writer->apply(batch); // one transaction, one sync (durability full)
      if (st) {
        stats.alarm_index_changes.inc(batch.size());
        stats.alarm_index_writes.inc();
      } else {
        stats.alarm_index_failures.inc();
        log_event({{"level", "error"},
                   {"event", "alarm_index_write_failed"},
                   {"changes", batch.size()},
                   {"detail", st.to_string()}});
      }
      return st;
    },
    [&](const std::vector<alarm_index_entry>&, const status& st) {
      for (auto& [_, e] : a.applying)
        for (auto* w : e.waiters)
          *w = st;
      a.applying.clear();
    });
  g.unlock();
  if (outcome && earlier && scheduler)
    caf::anon_send(scheduler, atoms::kick::value);
  return outcome;
}

void runtime_core::wake_failed(const alarm_index_entry& e, std::string reason) {
  std::lock_guard<std::mutex> g(alarms.mu);
  alarms.failed_wakes.push_back({e, std::move(reason)});
}

// -- the replicated log's compaction ------------------------------------------------------------

void runtime_core::keep_log_debt(const std::string& key_str, uint64_t bytes) {
  if (bytes == 0)
    return;
  std::lock_guard<std::mutex> g(log_debts_mu);
  if (log_debts.size() >= 1'000'000) { // drop the half of the debts that are smallest
    std::vector<uint64_t> all;
    all.reserve(log_debts.size());
    for (auto& [k, v] : log_debts)
      all.push_back(v);
    std::nth_element(all.begin(), all.begin() + all.size() / 2, all.end());
    auto median = all[all.size() / 2];
    for (auto i = log_debts.begin(); i != log_debts.end();)
      i = i->second <= median ? log_debts.erase(i) : std::next(i);
  }
  log_debts[key_str] += bytes;
}

uint64_t runtime_core::take_log_debt(const std::string& key_str) {
  std::lock_guard<std::mutex> g(log_debts_mu);
  auto it = log_debts.find(key_str);
  if (it == log_debts.end())
    return 0;
  auto v = it->second;
  log_debts.erase(it);
  return v;
}

// -- quarantined entities -----------------------------------------------------------------------

void runtime_core::remember_suspect(const std::string& key_str) {
  std::lock_guard<std::mutex> g(suspects_mu);
  suspects.insert(key_str);
}

status runtime_core::resync_if_suspect(const store_options& opts, const entity_key& key,
                                       const std::string& key_str) {
  {
    std::lock_guard<std::mutex> g(suspects_mu);
    if (!suspects.count(key_str))
      return status::ok();
  }
  auto st = entity_store::resync(opts, key);
  if (st) {
    stats.resyncs.inc();
    std::lock_guard<std::mutex> g(suspects_mu);
    suspects.erase(key_str);
  }
  return st;
}

void runtime_core::log_quarantine(const std::string& key_str, const status& why) {
  degradation.note_quarantine(key_str.substr(0, key_str.find('/')), now());
  degradation_watcher.kick();
  log_event({{"level", "error"},
             {"event", "entity_quarantined"},
             {"entity", key_str},
             {"detail", why.to_string()},
             {"action", "unanswered calls failed 503; the entity closes and re-syncs its files "
                        "at its next activation"}});
}

void runtime_core::log_event(nlohmann::json fields) {
  nlohmann::json line = {{"ts", now_ms()}};
  for (auto& [k, v] : fields.items())
    line[k] = std::move(v);
  auto text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (cfg.log) {
    cfg.log(text);
    return;
  }
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
}

} // namespace detail

// -- facade -------------------------------------------------------------------------------------

runtime::impl::~impl() {
  core.reset();
  if (lock_fd >= 0)
    ::close(lock_fd);
}

runtime::runtime(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

runtime_core& detail::runtime_testing::core(runtime& rt) {
  return *rt.impl_->core;
}

runtime::~runtime() {
  stop(); // then impl's destructor releases the data directory
}

namespace {

/// RLIMIT_NOFILE, its soft limit raised to the hard one first; capped at 1,000,000; 0 when it
/// cannot be read.
size_t descriptor_limit() {
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  if (rl.rlim_cur < rl.rlim_max) { // raise the soft limit to the hard one
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1'000'000 ? 1'000'000
                                                                 : static_cast<size_t>(rl.rlim_cur);
}

/// The descriptor budget: three quarters of the limit for entity files, a quarter for sockets.
size_t default_max_active(size_t per_entity) {
  auto n = descriptor_limit();
  if (n == 0)
    return 1000;
  return std::max<size_t>(16, (n - n / 4) / per_entity);
}

} // namespace

namespace {

/// The settings start() refuses before it touches the data directory.
status check_start_config(const runtime_config& config) {
  if (config.data_dir.empty())
    return status{errc::invalid_argument, "runtime_config.data_dir is required"};
  if (config.archive_retention.count() < 0 || config.archive_prune_interval.count() < 1000)
    return status{errc::invalid_argument, "runtime_config.archive_retention must be >= 0 and "
                                          "archive_prune_interval at least 1 s"};
  if (config.archive_retention.count() > 0 && config.archive_dir.empty())
    return status{errc::invalid_argument, "runtime_config.archive_retention needs an archive_dir"};
  if (!config.archive_dir.empty()) {
    std::error_code ec;
    auto archive = std::filesystem::weakly_canonical(config.archive_dir, ec);
    for (const auto& dir : {config.data_dir, config.entity_dir()}) {
      auto d = std::filesystem::weakly_canonical(dir, ec);
      auto rel = archive.lexically_relative(d);
      if (archive == d || (!rel.empty() && *rel.begin() != ".."))
        return status{errc::invalid_argument,
                      "runtime_config.archive_dir must be outside the data directory and the "
                      "entity root (" +
                        dir.string() + ")"};
    }
  }
  if (config.wal_checkpoint_frames < 1)
    return status{errc::invalid_argument,
                  "runtime_config.wal_checkpoint_frames must be at least 1"};
  if (config.wal_grow_kib < 0 || config.wal_grow_kib > 65536)
    return status{errc::invalid_argument, "runtime_config.wal_grow_kib must be 0..65536"};
  if (config.spare_files < 0 || config.spare_files > 1024)
    return status{errc::invalid_argument, "runtime_config.spare_files must be 0..1024"};
  return {};
}

/// A separate entity root: made where missing (durably), and on data_dir's file system when
/// spare files are renamed from one to the other.
status prepare_entity_root(const runtime_config& config) {
  if (auto st = prepare_data_dir(config.entity_root, config.mode); !st)
    return st;
  struct stat a {
  }, b{};
  if (config.spare_files > 0 && ::stat(config.data_dir.c_str(), &a) == 0 &&
      ::stat(config.entity_root.c_str(), &b) == 0 && a.st_dev != b.st_dev)
    return status{errc::invalid_argument,
                  "runtime_config.entity_root " + config.entity_root.string() +
                    " is on another file system than data_dir " + config.data_dir.string() +
                    ": spare files cannot be renamed into it (set spare_files to 0, or put both "
                    "on one file system)"};
  return {};
}

/// One process per data directory: the single-activation guarantee depends on it. Holds
/// DATA/runtime/LOCK in `lock_fd` (closed by impl's destructor, also when the start fails).
status lock_data_dir(const std::filesystem::path& data_dir, int& lock_fd) {
  auto lock_path = data_dir / "runtime" / "LOCK";
  lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    int e = errno;
    return status{e == EROFS ? errc::read_only : errc::io_error,
                  "cannot open " + lock_path.string() + ": " + std::strerror(e)};
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return status{errc::busy,
                  "data directory " + data_dir.string() + " is in use by another factum process"};
  return {};
}

/// Every open entity holds descriptors: a cap above what the limit allows would turn into
/// failed activations (EMFILE) under load, so it is lowered, and the start says so.
size_t active_cap(size_t asked, size_t per_entity, std::vector<std::string>& notes) {
  auto budget = default_max_active(per_entity);
  auto max_active = asked ? asked : budget;
  if (max_active <= budget)
    return max_active;
  auto limit = descriptor_limit();
  notes.push_back("max_active_entities " + std::to_string(max_active) + " lowered to " +
                  std::to_string(budget) + ": each open entity uses " + std::to_string(per_entity) +
                  " file descriptors, and " +
                  (limit ? "three quarters of the " + std::to_string(limit) +
                             " this process may open (RLIMIT_NOFILE) are for entities"
                         : std::string("the limit of open files (RLIMIT_NOFILE) cannot be read")) +
                  "; raise the limit (ulimit -n, or LimitNOFILE in a systemd unit) to allow more");
  return budget;
}

/// The entity stores' options, with spare pools, for the default page size and for each page
/// size a type asks for.
status configure_storage(detail::runtime_core& c) {
  c.store_opts.data_dir = c.cfg.entity_dir();
  c.store_opts.mode = c.cfg.mode;
  c.store_opts.cache_kib = c.cfg.cache_kib;
  c.store_opts.wal_kept_on_close_kib = c.cfg.wal_kept_on_close_kib;
  c.store_opts.wal_grow_kib = c.cfg.wal_grow_kib;
  c.store_opts.archive_dir = c.cfg.archive_dir;
  c.store_opts.fault = c.cfg.storage_fault;
  c.store_opts.capture_changes = c.cfg.replicator != nullptr;
  if (c.cfg.spare_files > 0) {
    auto spares = spare_pool::start(c.cfg.data_dir, c.cfg.spare_files, 4096, c.cfg.entity_dir());
    if (!spares)
      return spares.error();
    c.store_opts.spares = std::move(spares.value());
  }
  c.store_opts.defer_sync = true;       // pipelined group commit (entity_commits.cpp, start_commit)
  c.store_opts.auto_checkpoint = false; // checkpoints on storage threads (maybe_checkpoint)
  for (auto& name : c.cfg.types.names()) {
    int page = c.cfg.types.find(name)->page_size;
    if (auto st = check_page_size(page); !st)
      return status{st.code(), "entity type " + name + ": " + st.message()};
    if (page == c.store_opts.page_size || c.store_opts_by_page.count(page))
      continue;
    auto o = c.store_opts;
    o.page_size = page;
    o.spares.reset();
    if (c.cfg.spare_files > 0) {
      auto spares = spare_pool::start(c.cfg.data_dir, c.cfg.spare_files, page, c.cfg.entity_dir());
      if (!spares)
        return spares.error();
      o.spares = std::move(spares.value());
    }
    c.store_opts_by_page.emplace(page, std::move(o));
  }
  return {};
}

/// The failure classifier: the default table with each tool policy's `classify` overrides.
status build_classifier(detail::runtime_core& c) {
  nlohmann::json tools = nlohmann::json::object();
  for (auto& [name, pol] : c.cfg.tool_policies)
    if (!pol.classify.is_null())
      tools[name] = pol.classify;
  if (tools.empty())
    return {};
  auto cl = resilience::classifier::from_json({{"tools", std::move(tools)}});
  if (!cl)
    return status{errc::invalid_argument, "runtime_config.tool_policies: " + cl.error().message()};
  c.classifier = std::move(cl.value());
  return {};
}

/// The alarm index's reader and writer connections. A damaged index is derived data (the
/// entity files hold the alarms): the file is kept aside for a post-mortem and a fresh one is
/// refilled from the entity files before any entity can run.
status open_alarm_index(detail::runtime_core& c, std::vector<std::string>& notes) {
  auto ix = alarm_index::open(c.cfg.data_dir, c.cfg.mode);
  if (!ix && ix.error().code() == errc::corruption) {
    auto damage = ix.error().message();
    auto aside = alarm_index::set_aside(c.cfg.data_dir);
    if (!aside)
      return aside.error();
    ix = alarm_index::open(c.cfg.data_dir, c.cfg.mode);
    if (!ix)
      return ix.error();
    auto rep = (*ix)->rebuild(c.cfg.entity_dir());
    if (!rep)
      return rep.error();
    c.stats.alarm_index_rebuilds.inc();
    notes.push_back("the alarm index was damaged (" + damage + "); moved to " + aside->string() +
                    " and rebuilt from " + std::to_string(rep->entity_files) +
                    " entity files: " + std::to_string(rep->entries) + " entities with alarms, " +
                    std::to_string(rep->unreadable) + " files unreadable");
  }
  if (!ix)
    return ix.error();
  c.alarms.index = std::move(ix.value());
  auto writer = alarm_index::open(c.cfg.data_dir, c.cfg.mode); // a second connection
  if (!writer)
    return writer.error();
  c.alarms.writer = std::move(writer.value());
  c.alarms.writer->set_fault(c.cfg.alarm_index_fault);
  return {};
}

/// The actor system, then the timer actor (the scheduler may wake entities at once, and they
/// arm timers), the router and the alarm scheduler.
void start_actors(detail::runtime_core& c) {
  c.sys_cfg = std::make_unique<caf::actor_system_config>();
  size_t workers = c.cfg.scheduler_threads ? c.cfg.scheduler_threads
                                           : std::max(2u, std::thread::hardware_concurrency());
  c.sys_cfg->set("scheduler.max-threads", workers);
  // The work-stealing policy parks idle workers in sleeps of up to 10 ms, and every call
  // crosses threads (caller, actor, storage thread): wake-ups must be immediate. The sharing
  // policy blocks idle workers on a condition variable instead.
  c.sys_cfg->set("scheduler.policy", caf::atom("sharing"));
  c.sys_cfg->set("logger.verbosity", caf::atom("quiet"));
  c.sys = std::make_unique<caf::actor_system>(*c.sys_cfg);
  c.timers = detail::spawn_timer(&c);
  c.router.start(&c);
  c.scheduler = detail::spawn_alarm_scheduler(&c);
}

/// The families whose values live outside the runtime's counters, registered once at start: the
/// spare pools' (storage's own counts), each tenant's degradation level, each quota tenant's usage
/// (tenant_quotas.cpp). The counters are in counters.hpp, the tools' in tool_board.cpp, the
/// outbox's in outbox_board.cpp (registered once the board is made, or not).
void register_metrics(detail::runtime_core& c) {
  using metrics::kind;
  auto spares = [&c](auto spare_pool::stats::*field) {
    return [&c, field](metrics::sample_writer& w) {
      int64_t n = 0;
      for (auto* pool : c.spare_pools())
        n += pool->get_stats().*field;
      w.add(static_cast<double>(n));
    };
  };
  c.metric_registry.add("factum_spare_files_taken_total",
                        "New entities whose file was a spare made ahead.", kind::counter, {},
                        spares(&spare_pool::stats::taken));
  c.metric_registry.add("factum_spare_files_missed_total",
                        "New entities that found no spare ready and made their own file.",
                        kind::counter, {}, spares(&spare_pool::stats::missed));
  c.metric_registry.add("factum_spare_files_ready", "Spare entity files ready now.", kind::gauge,
                        {}, spares(&spare_pool::stats::ready));
  c.metric_registry.add("factum_spare_file_errors_total",
                        "Batches of spare files the maker failed to make (it retries each second).",
                        kind::counter, {}, spares(&spare_pool::stats::errors));
  c.metric_registry.add(
    "factum_degradation_level",
    "A tenant's degradation level: 0 full, 1 reduced, 2 limited, 3 minimal, 4 "
    "emergency (configured tenants, and any a rule named; none when levels are not "
    "enabled).",
    kind::gauge, {"tenant"}, [&c](metrics::sample_writer& w) {
      if (c.degradation.enabled())
        for (auto& d : c.degradation.all())
          w.add({d.tenant}, d.level);
    });
  detail::register_tenant_metrics(c);
}

} // namespace

result<std::unique_ptr<runtime>> runtime::start(runtime_config config) {
  if (auto st = check_start_config(config); !st)
    return st;
  // The data directory's own entries (entities/, runtime/) are durable before anything is
  // acknowledged: an entity's first sync makes only its shard directory's entries durable.
  if (auto st = prepare_data_dir(config.data_dir, config.mode); !st)
    return st;
  if (!config.entity_root.empty())
    if (auto st = prepare_entity_root(config); !st)
      return st;
  auto p = std::make_unique<impl>();
  if (auto st = lock_data_dir(config.data_dir, p->lock_fd); !st)
    return st;
  if (auto n = detail::remove_move_temporaries(config.data_dir); n > 0)
    p->start_notes.push_back("removed " + std::to_string(n) +
                             " temporary files of a shard move that a stop cut short");
  auto max_active =
    active_cap(config.max_active_entities, detail::descriptors_per_entity(config), p->start_notes);
  // A file system that makes activations slow is worth a line at start (it is not an error).
  if (auto w = file_system_warning(config.entity_dir()))
    p->start_notes.push_back(std::move(*w));
  p->core = std::make_unique<runtime_core>(std::move(config));
  auto& c = *p->core;
  c.reg.cap = max_active;
  if (auto st = configure_storage(c); !st)
    return st;
  if (!c.cfg.dead_letter_rules.is_null()) {
    auto rules = resilience::dead_letter_rules::from_json(c.cfg.dead_letter_rules);
    if (!rules)
      return rules.error();
    c.dl_rules = std::move(rules.value());
  }
  if (auto st = build_classifier(c); !st)
    return st;
  if (!c.cfg.outbox.sinks.empty() || !c.cfg.outbox.routes.empty()) {
    auto board = detail::outbox_board::make(c.cfg.outbox);
    if (!board)
      return board.error();
    c.outbox = std::move(board.value());
  }
  detail::register_outbox_metrics(c.metric_registry, c.outbox.get(), [&c] { return c.now(); });
  register_metrics(c);
  if (auto st = open_alarm_index(c, p->start_notes); !st)
    return st;
  if (auto st = detail::open_tenant_index(c, p->start_notes); !st)
    return st;
  if (c.degradation.enabled())
    detail::add_runtime_entity_type(c.cfg.types);
  start_actors(c);
  c.degradation_watcher.start(&c);
  c.pruner.start(c.cfg.archive_dir, c.cfg.archive_retention, c.cfg.archive_prune_interval);
  return std::unique_ptr<runtime>(new runtime(std::move(p)));
}

void runtime::stop() {
  std::lock_guard<std::mutex> once(impl_->stop_mu);
  if (impl_->stopped.exchange(true))
    return;
  auto& c = *impl_->core;
  c.degradation_watcher.stop(); // it routes calls: first, while entities still run
  c.pruner.stop();
  std::vector<caf::actor> actors;
  {
    std::lock_guard<std::mutex> g(c.reg.mu);
    c.reg.stopping = true;
    for (auto& [_, e] : c.reg.map)
      actors.push_back(e.actor);
  }
  for (auto& a : actors)
    caf::anon_send(a, atoms::stop::value);
  {
    std::unique_lock<std::mutex> g(c.reg.mu);
    c.reg.changed.wait_for(g, std::chrono::seconds(60), [&] { return c.reg.map.empty(); });
  }
  caf::anon_send_exit(c.scheduler, caf::exit_reason::user_shutdown);
  c.scheduler = nullptr;
  // The handle stays (an actor that outlived the wait above may still read it); messages to
  // the exited timer actor are dropped.
  caf::anon_send_exit(c.timers, caf::exit_reason::user_shutdown);
  c.sys.reset();   // waits for every actor
  c.router.stop(); // after the actors: calls their ends hand back are answered UNAVAILABLE
  c.pool.stop();
  c.sync_pool.stop();
  for (auto* spares : c.spare_pools())
    spares->stop(); // the ready spares stay on disk for the next start
  // Every entity has closed: the tenant index is clean.
  detail::close_tenant_index(c);
  std::lock_guard<std::mutex> g(c.alarms.mu);
  c.alarms.index.reset();
  c.alarms.writer.reset();
}

bool runtime::stopping() const {
  return impl_->stopped.load();
}

const std::vector<std::string>& runtime::start_notes() const {
  return impl_->start_notes;
}

void runtime::call(const entity_key& key, std::string method, std::string args_json,
                   call_options opts, std::function<void(call_reply)> done) {
  auto& c = *impl_->core;
  if (impl_->stopped.load()) {
    done(problems::unavailable.reply("the runtime is stopped"));
    return;
  }
  if (auto st = validate_key_part(key.tenant, "tenant"); !st) {
    done(problems::invalid_entity_key.reply(st.message()));
    return;
  }
  if (auto st = validate_key_part(key.type, "entity type"); !st) {
    done(problems::invalid_entity_key.reply(st.message()));
    return;
  }
  if (auto st = validate_key_part(key.id, "entity id"); !st) {
    done(problems::invalid_entity_key.reply(st.message()));
    return;
  }
  call_request req;
  req.method = std::move(method);
  req.args = std::move(args_json);
  req.idempotency_key = std::move(opts.idempotency_key);
  req.trace_id = opts.trace_id.empty() ? new_trace_id() : std::move(opts.trace_id);
  if (!req.idempotency_key.empty())
    req.fingerprint = opts.fingerprint.empty() ? call_fingerprint(req.method, req.args)
                                               : std::move(opts.fingerprint);
  c.route(key, std::move(req), opts.timeout, std::move(done));
}

call_reply runtime::call_sync(const entity_key& key, std::string method, std::string args_json,
                              call_options opts) {
  auto p = std::make_shared<std::promise<call_reply>>();
  auto f = p->get_future();
  call(key, std::move(method), std::move(args_json), std::move(opts),
       [p](call_reply r) { p->set_value(std::move(r)); });
  return f.get();
}

const metrics::registry& runtime::metrics() const {
  return impl_->core->metric_registry;
}

void runtime::attach_connections(std::shared_ptr<connection_host> host) {
  auto& core = *impl_->core;
  std::lock_guard<std::mutex> g(core.connections_mu);
  core.connections = std::move(host);
}

runtime::descriptor_budget runtime::descriptors() const {
  descriptor_budget b;
  b.limit = descriptor_limit();
  b.max_active_entities = impl_->core->reg.cap;
  b.per_entity = detail::descriptors_per_entity(impl_->core->cfg);
  // What the cap on open entities leaves (per_entity each: a quarter of the limit with the
  // default cap, more with a lower max_active_entities), less a few for the listener, the tools'
  // connections, the indexes and the spare files.
  b.reserved = 64;
  if (b.limit == 0)
    return b;
  auto entities = b.per_entity * b.max_active_entities;
  b.connections = b.limit > entities + b.reserved + 32 ? b.limit - entities - b.reserved : 32;
  return b;
}

size_t runtime::connection_budget() const {
  return descriptors().connections;
}

tenant_usage runtime::tenant_usage_of(const std::string& tenant) const {
  return detail::tenant_usage_snapshot(*impl_->core, tenant);
}

void runtime::list_entities(const std::string& tenant, entity_list_query q,
                            std::function<void(result<std::vector<entity_listing>>)> done) const {
  if (q.limit < 1 || q.limit > 10000)
    return done(status{errc::invalid_argument, "limit must be between 1 and 10000"});
  auto* core = impl_->core.get();
  core->pool.post([core, tenant, q = std::move(q), done = std::move(done)] {
    done(detail::list_tenant_entities(*core, tenant, q));
  });
}

void runtime::read_tenant_index(std::function<void(tenant_index*)> read,
                                std::function<void()> then) const {
  auto* core = impl_->core.get();
  core->pool.post([core, read = std::move(read), then = std::move(then)] {
    detail::read_tenant_index(*core, read);
    then();
  });
}

const runtime_config& runtime::config() const {
  return impl_->core->cfg;
}

} // namespace factum
