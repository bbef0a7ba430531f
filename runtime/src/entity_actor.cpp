// entity_actor.cpp: the actor of one entity, and the context its handlers see.
//
// Threads: everything here runs on the entity's actor (one CAF worker at a time), except the
// jobs posted to the storage pool (open, slow-path commit, checkpoint on the actor's
// connection, close), which own the store while they run; the actor does not touch the store
// while such a job is in flight (`committing`, phases). Two kinds of job run beside the actor
// instead: sync() on the sync pool (the WAL's own descriptor; up to max_syncs_in_flight of one
// entity at once) and checkpoint_concurrently() on the storage pool (a connection of its own).
//
// A call's path: (atoms::call) -> queue -> pump() -> run_turn() [savepoint, key, handler] ->
// finish_turn() [complete key, release savepoint, reply into the batch] -> flush (a message to
// self, behind everything already queued: write coalescing) -> commit on the actor, without
// fsync -> sync() on a sync thread -> on_synced() releases every reply that sync covers (the
// output gate). A batch that moved alarms commits and syncs on a storage thread instead, and
// on_committed() delivers its replies.
#include <cmath>
#include <optional>
#include <random>
#include <tuple>
#include <unordered_set>

#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"
#include "runtime_core.hpp"
#include "tool_call.hpp"

namespace factum::detail {

namespace {

using nlohmann::json;

enum class turn_kind { call, activate, alarm };

/// Where a call's answer goes: its caller's reply sink (runtime_core.hpp). Empty for turns
/// nobody waits on (activation, alarms).
struct reply_to {
  std::shared_ptr<reply_sink> sink;
  void deliver(call_reply r) {
    if (sink)
      sink->deliver(std::move(r));
  }
};

struct queued {
  turn_kind kind = turn_kind::call;
  call_request req;
  reply_to rp; ///< empty for turns nobody waits on
};

/// What storage jobs and the actor share: the store itself, and results of jobs.
struct entity_core {
  std::unique_ptr<entity_store> store;
  std::optional<int64_t> next_alarm;
  int64_t released_on_open = 0;
};

class entity_context;

struct turn_state {
  queued item;
  call_info info;
  bool suspended = false;
  bool woken = false;
  std::coroutine_handle<> handle;
  uint64_t token = 0;
  alarm_record alarm;         // alarm turns
  std::string dead_letter_id; // a turn that retries a dead letter
  std::vector<std::string> alarms_set;
  int64_t started_ms = 0;
  bool key_on_disk = false; ///< a pending row was written (the turn awaited something)
};

enum class phase { waiting_slot, opening, ready, closing };

struct entity_state {
  static inline const char* name = "factum.entity";
  runtime_core* rt = nullptr;
  entity_key key;
  std::string key_str;
  std::shared_ptr<entity_core> core = std::make_shared<entity_core>();
  const entity_type* type = nullptr;
  std::unique_ptr<entity> instance;
  std::unique_ptr<entity_context> ctx;
  phase ph = phase::waiting_slot;
  std::deque<queued> queue;
  std::vector<std::pair<reply_to, call_reply>> batch;
  std::vector<std::pair<reply_to, call_reply>> in_commit;
  uint64_t batch_turns = 0, commit_facts = 0, commit_turns = 0;
  int64_t committed_seq = 0; ///< last seq known durable
  int64_t commit_seq = 0;    ///< last seq of the commit in flight
  /// Replies of committed batches waiting for their WAL sync, with the batch generation.
  std::deque<std::tuple<uint64_t, reply_to, call_reply>> awaiting_sync;
  uint64_t commit_gen = 0; ///< generation of the last commit
  uint64_t synced_gen = 0; ///< every commit up to this generation is durable
  int syncs_in_flight = 0; ///< WAL syncs running on sync threads (they overlap)
  /// The generation the latest sync asked for covers, or a commit that was durable when it
  /// returned (slow path, durability normal): never below synced_gen.
  uint64_t sync_asked_gen = 0;
  bool checkpointing = false; ///< a storage thread is checkpointing the WAL
  int ckpt_rounds = 0;        ///< concurrent checkpoints in this cycle (maybe_checkpoint)
  int ckpt_done = 0;          ///< WAL frames in the database after the last of them
  bool busy = false;
  bool committing = false;
  bool flush_scheduled = false;
  bool alarms_dirty = false;
  bool idle_fired = false;
  bool idle_armed = false;                         ///< an atoms::idle check is on its way
  std::chrono::steady_clock::time_point last_call; ///< arrival of the last call
  bool evict_requested = false;
  bool stopping = false;
  bool purge_alarm_known = false;
  std::optional<turn_state> turn;
  uint64_t next_token = 1;
  uint64_t alarm_gen = 0;
  std::unordered_map<uint64_t, std::function<void(bool)>> timers;
  /// Idempotency keys of calls accepted and not yet answered: a second call with one of them
  /// gets 409 at once instead of queueing behind the first.
  std::unordered_set<std::string> keys_in_flight;
  /// Breakers and retry budgets of this activation (breakers are loaded from the store).
  std::map<std::string, resilience::circuit_breaker> breakers;
  std::map<std::string, resilience::retry_budget> budgets;
};

using self_ptr = caf::stateful_actor<entity_state>*;

void pump(self_ptr self);
void finish_turn(self_ptr self, std::exception_ptr err, std::optional<json> value);
void start_commit(self_ptr self);

// -- error mapping ------------------------------------------------------------------------------

call_error storage_error(const status& st) {
  switch (st.code()) {
  case errc::invalid_argument:
    return call_error(error_category::client, "INVALID_ARGUMENT", st.message(), 400);
  case errc::not_found: return call_error(error_category::client, "NOT_FOUND", st.message(), 404);
  case errc::conflict:
    return call_error(error_category::data_integrity, "CONFLICT", st.message(), 409);
  case errc::corruption:
  case errc::not_factum_file:
  case errc::newer_schema:
    return call_error(error_category::server, "ENTITY_STORAGE_CORRUPT", st.message(), 500);
  case errc::full: return call_error(error_category::transient, "STORAGE_FULL", st.message(), 503);
  case errc::read_only:
    return call_error(error_category::transient, "STORAGE_READ_ONLY", st.message(), 503);
  case errc::io_error:
  case errc::busy:
  case errc::unavailable:
    return call_error(error_category::transient, "STORAGE_UNAVAILABLE", st.message(), 503);
  default: return call_error(error_category::server, "INTERNAL", st.message(), 500);
  }
}

call_error to_call_error(std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const call_error& e) {
    return e;
  } catch (const json::exception& e) {
    return call_error(error_category::client, "INVALID_ARGUMENT", std::string("JSON: ") + e.what(),
                      400);
  } catch (const std::exception& e) {
    return call_error(error_category::server, "HANDLER_FAILED", e.what(), 500);
  } catch (...) {
    return call_error(error_category::server, "HANDLER_FAILED", "unknown exception", 500);
  }
}

call_reply reply_from_stored_failure(const std::string& body) {
  call_reply r;
  r.ok = false;
  r.body = body;
  auto p = json::parse(body, nullptr, false);
  if (p.is_object()) {
    r.code = p.value("code", "FAILED");
    r.category = p.value("category", "server");
    r.http_status = p.value("status", 500);
  }
  r.retryable = false;
  return r;
}

// -- the handler context ------------------------------------------------------------------------

class entity_context final : public context, public tool_host {
 public:
  explicit entity_context(self_ptr self) : self_(self) {}

  // -- tool_host --
  context& ctx() override { return *this; }
  entity_store& store() override { return *self_->state.core->store; }
  const runtime_config& config() override { return self_->state.rt->cfg; }
  counters& stats() override { return self_->state.rt->stats; }
  std::mt19937_64& rng() override {
    // Made at first use (only tool retries draw from it): a std::random_device and 2.5 KiB of
    // generator state per activation cost more than most activations do otherwise.
    if (!rng_)
      rng_ = std::make_unique<std::mt19937_64>(next_seed());
    return *rng_;
  }
  std::map<std::string, resilience::circuit_breaker>& breakers() override {
    return self_->state.breakers;
  }
  std::map<std::string, resilience::retry_budget>& budgets() override {
    return self_->state.budgets;
  }
  const resilience::classifier& classify() override { return self_->state.rt->classifier; }
  const resilience::dead_letter_rules& dl_rules() override { return self_->state.rt->dl_rules; }
  std::string retrying_dead_letter() override {
    return self_->state.turn ? self_->state.turn->dead_letter_id : std::string();
  }
  void set_internal_alarm(const std::string& name, int64_t due_ms) override {
    set_alarm_internal(name, due_ms, "{}", 0);
  }
  void cancel_internal_alarm(const std::string& name) override { cancel_alarm(name); }

  task<tool_reply> call_tool(tool_request req) override {
    auto inner = resilient_tool_call(*this, std::move(req));
    tool_reply r = co_await inner;
    // The attempts' error, cost and dead-letter records stay even if the handler fails later.
    (void)store().end_turn(true);
    (void)store().begin_turn();
    co_return r;
  }

  const entity_key& key() const override { return self_->state.key; }
  const call_info& call() const override {
    static const call_info none;
    return self_->state.turn ? self_->state.turn->info : none;
  }
  int64_t now_ms() const override { return self_->state.rt->now(); }

  fact append(fact_draft d) override {
    if (d.trace_id.empty())
      d.trace_id = call().trace_id;
    if (d.idempotency_key.empty())
      d.idempotency_key = call().idempotency_key;
    auto r = store().append(d);
    if (!r)
      throw storage_error(r.error());
    return std::move(r.value());
  }

  std::vector<fact> query(const fact_filter& f) override {
    auto r = store().query(f);
    if (!r)
      throw storage_error(r.error());
    return std::move(r.value());
  }

  json sql(std::string_view q, const json& params) override {
    auto r = store().tenant_sql(q, params, true);
    if (!r)
      throw storage_error(r.error());
    return std::move(r.value());
  }

  json sql_write(std::string_view q, const json& params) override {
    auto r = store().tenant_sql(q, params, false);
    if (!r)
      throw storage_error(r.error());
    return std::move(r.value());
  }

  void set_alarm(std::string name, int64_t due_ms, json payload) override {
    if (name.empty() || name[0] == '@')
      throw client_error("INVALID_ALARM", "alarm names must be non-empty and not start with '@'");
    set_alarm_internal(std::move(name), due_ms, payload.dump(), 0);
  }

  void set_alarm_internal(std::string name, int64_t due_ms, std::string payload, int64_t attempts) {
    auto& s = self_->state;
    alarm_record a{name, due_ms, std::move(payload), attempts, now_ms()};
    if (auto st = store().set_alarm(a); !st)
      throw storage_error(st);
    s.alarms_dirty = true;
    if (s.turn)
      s.turn->alarms_set.push_back(std::move(name));
  }

  void cancel_alarm(std::string_view name) override {
    if (auto st = store().cancel_alarm(name); !st)
      throw storage_error(st);
    self_->state.alarms_dirty = true;
  }

  std::vector<alarm_record> alarms() override {
    auto r = store().list_alarms();
    if (!r)
      throw storage_error(r.error());
    return std::move(r.value());
  }

  std::optional<config_record> config(std::string_view id, int64_t version) override {
    auto r = store().get_config(id, version);
    if (!r) {
      if (r.error().code() == errc::not_found)
        return std::nullopt;
      throw storage_error(r.error());
    }
    return std::move(r.value());
  }

  int64_t put_config(std::string_view id, const json& body) override {
    auto r = store().put_config(id, body.dump());
    if (!r)
      throw storage_error(r.error());
    return *r;
  }

  std::function<void()> suspend_turn(std::coroutine_handle<> h) override {
    auto& s = self_->state;
    auto& t = *s.turn;
    t.suspended = true;
    t.woken = false;
    t.handle = h;
    t.token = s.next_token++;
    // An await is a commit point: keep the turn's writes so far and let the batch go out. The
    // key becomes a pending row, released on reopen if this activation dies while waiting.
    if (!t.info.idempotency_key.empty() && !t.key_on_disk) {
      auto b = store().begin_key(t.info.idempotency_key, t.item.req.fingerprint,
                                 static_cast<int64_t>(s.rt->cfg.key_ttl.count()), now_ms());
      t.key_on_disk = b.is_ok();
    }
    (void)store().end_turn(true);
    if (store().dirty() && !s.committing)
      start_commit(self_);
    auto me = caf::actor_cast<caf::actor>(self_);
    return [me, token = t.token] { caf::anon_send(me, atoms::resume::value, token); };
  }

 protected:
  void start_entity_call(const std::string& type, const std::string& id, std::string method,
                         std::string args_json, call_options opts,
                         std::function<void(call_reply)> done) override {
    auto& s = self_->state;
    auto k = entity_key::make(s.key.tenant, type, id);
    if (!k) {
      done(call_reply::failure(error_category::client, "INVALID_ENTITY_KEY", k.error().message(),
                               400));
      return;
    }
    call_request req{std::move(method), std::move(args_json), std::move(opts.idempotency_key),
                     opts.trace_id.empty() ? call().trace_id : std::move(opts.trace_id),
                     std::move(opts.fingerprint)};
    if (!req.idempotency_key.empty() && req.fingerprint.empty())
      req.fingerprint = call_fingerprint(req.method, req.args);
    s.rt->route(*k, std::move(req), opts.timeout, std::move(done));
  }

  void start_tool_call(const tool_request& req, std::function<void(tool_reply)> done) override {
    auto& tools = self_->state.rt->cfg.tools;
    auto it = tools.find(req.tool);
    if (it == tools.end()) {
      tool_reply r;
      r.error_code = "UNKNOWN_TOOL";
      r.error_message = "no tool named " + req.tool;
      r.category = error_category::client;
      done(std::move(r));
      return;
    }
    it->second(req, std::move(done));
  }

  void start_timer(std::chrono::milliseconds d, std::function<void(bool)> done) override {
    auto& s = self_->state;
    auto tok = s.next_token++;
    s.timers.emplace(tok, std::move(done));
    self_->delayed_send(self_, d, atoms::tick::value, tok);
  }

 private:
  /// A seed per generator: a per-thread splitmix64 sequence, itself seeded once per thread.
  static uint64_t next_seed() {
    thread_local uint64_t state = (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                  static_cast<uint64_t>(factum::now_ms());
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  self_ptr self_;
  std::unique_ptr<std::mt19937_64> rng_; // 2.5 KiB when made
};

// -- replies ------------------------------------------------------------------------------------

void add_reply(self_ptr self, queued& item, call_reply r) {
  auto& s = self->state;
  if (item.kind == turn_kind::call && !item.req.idempotency_key.empty())
    s.keys_in_flight.erase(item.req.idempotency_key);
  if (!r.ok)
    s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
  if (item.rp.sink)
    s.batch.emplace_back(std::move(item.rp), std::move(r));
}

void deliver(std::vector<std::pair<reply_to, call_reply>>& v) {
  for (auto& [rp, r] : v)
    rp.deliver(std::move(r));
  v.clear();
}

// -- timers -------------------------------------------------------------------------------------

/// Sends (xs...) to this actor after `d` by way of the runtime's timer actor, anonymously and
/// naming this actor by key and actor id only (spawn_timer): a pending timer keeps nothing of
/// an ended activation.
template <class Duration, class... Ts> void send_later(self_ptr self, Duration d, Ts&&... xs) {
  caf::delayed_anon_send(self->state.rt->timers, d, atoms::fire::value, self->state.key_str,
                         static_cast<uint64_t>(self->id()),
                         caf::make_message(std::forward<Ts>(xs)...));
}

// -- alarms -------------------------------------------------------------------------------------

void arm_alarm_timer(self_ptr self, std::optional<int64_t> next) {
  auto& s = self->state;
  ++s.alarm_gen;
  if (!next)
    return;
  auto delay = std::max<int64_t>(0, *next - s.rt->now());
  send_later(self, std::chrono::milliseconds(delay), atoms::alarm::value, s.alarm_gen);
}

void rearm_from_store(self_ptr self) {
  auto& s = self->state;
  auto n = s.core->store->next_alarm();
  if (n && n->has_value())
    arm_alarm_timer(self, n->value().due_ms);
  else
    arm_alarm_timer(self, std::nullopt);
}

constexpr const char* purge_alarm = "@purge_keys";

// -- turns --------------------------------------------------------------------------------------

void end_turn_without_writes(self_ptr self, queued& item, call_reply r) {
  add_reply(self, item, std::move(r));
}

/// Runs the internal read-only operations that operators reach through the HTTP API.
json run_internal(self_ptr self, const std::string& method, const json& args) {
  auto& store = *self->state.core->store;
  if (method == "@facts") {
    auto f = fact_filter::from_json(args);
    if (!f)
      throw storage_error(f.error());
    auto r = store.query(*f);
    if (!r)
      throw storage_error(r.error());
    json out = json::array();
    for (auto& fa : *r)
      out.push_back(to_json(fa));
    return out;
  }
  if (method == "@verify") {
    auto r = store.verify();
    if (!r)
      throw storage_error(r.error());
    return {{"ok", r->ok},
            {"facts_checked", r->facts_checked},
            {"first_bad_seq", r->first_bad_seq},
            {"problem", r->problem}};
  }
  if (method == "@alarms") {
    auto r = store.list_alarms();
    if (!r)
      throw storage_error(r.error());
    json out = json::array();
    for (auto& a : *r)
      out.push_back({{"name", a.name},
                     {"due_ms", a.due_ms},
                     {"attempts", a.attempts},
                     {"payload", json::parse(a.payload, nullptr, false)}});
    return out;
  }
  auto& host = *self->state.ctx;
  if (method == "@dead_letters")
    return list_dead_letters(host, args);
  if (method == "@dead_letter")
    return act_on_dead_letter(host, args);
  if (method == "@breakers")
    return list_breakers(host);
  if (method == "@breaker")
    return act_on_breaker(host, args);
  throw not_found_error("METHOD_NOT_FOUND", "no internal method " + method);
}

void run_turn(self_ptr self, queued item) {
  auto& s = self->state;
  auto& store = *s.core->store;
  auto& req = item.req;
  int64_t now = s.rt->now();

  if (item.kind == turn_kind::call && !req.idempotency_key.empty()) {
    auto p = store.peek_key(req.idempotency_key, req.fingerprint, now);
    if (!p) {
      end_turn_without_writes(self, item, call_reply::failure(storage_error(p.error())));
      return;
    }
    switch (p->outcome) {
    case key_outcome::fresh: break;
    case key_outcome::in_flight:
      s.rt->stats.key_conflicts.fetch_add(1, std::memory_order_relaxed);
      end_turn_without_writes(
        self, item,
        call_reply::failure(error_category::data_integrity, "IDEMPOTENCY_KEY_IN_USE",
                            "a call with this idempotency key is still in flight", 409));
      return;
    case key_outcome::mismatch:
      s.rt->stats.key_mismatches.fetch_add(1, std::memory_order_relaxed);
      end_turn_without_writes(
        self, item,
        call_reply::failure(error_category::client, "IDEMPOTENCY_KEY_MISMATCH",
                            "this idempotency key was used with a different request", 422));
      return;
    case key_outcome::completed: {
      s.rt->stats.replays.fetch_add(1, std::memory_order_relaxed);
      auto r = call_reply::success(std::move(p->record.response));
      r.replayed = true;
      end_turn_without_writes(self, item, std::move(r));
      return;
    }
    case key_outcome::failed: {
      s.rt->stats.replays.fetch_add(1, std::memory_order_relaxed);
      auto r = reply_from_stored_failure(p->record.response);
      r.replayed = true;
      end_turn_without_writes(self, item, std::move(r));
      return;
    }
    }
  }

  s.busy = true;
  s.turn.emplace();
  auto& t = *s.turn;
  t.item = std::move(item);
  t.started_ms = now;
  t.info.method = t.item.req.method;
  t.info.idempotency_key = t.item.req.idempotency_key;
  t.info.trace_id = t.item.req.trace_id;
  t.info.args_json = t.item.req.args;
  t.info.fingerprint = t.item.req.fingerprint;
  if (auto st = store.begin_turn(); !st) {
    auto it = std::move(t.item);
    s.turn.reset();
    s.busy = false;
    end_turn_without_writes(self, it, call_reply::failure(storage_error(st)));
    return;
  }
  auto done = [self](std::exception_ptr e, std::optional<json> v) {
    finish_turn(self, e, std::move(v));
  };
  auto done_void = [self](std::exception_ptr e) { finish_turn(self, e, json(nullptr)); };

  try {
    switch (t.item.kind) {
    case turn_kind::activate:
      t.info.method = "@activate";
      start_task(s.instance->on_activate(*s.ctx), done_void);
      return;
    case turn_kind::alarm: {
      t.info.method = "@alarm";
      auto due = store.next_alarm();
      if (!due)
        throw storage_error(due.error());
      if (!due->has_value() || due->value().due_ms > now) {
        finish_turn(self, nullptr, json(nullptr)); // nothing due (a duplicate wake)
        return;
      }
      t.alarm = due->value();
      t.info.trace_id = new_trace_id();
      auto lag = static_cast<uint64_t>(std::max<int64_t>(0, now - t.alarm.due_ms));
      s.rt->stats.alarm_lag_ms_sum.fetch_add(lag, std::memory_order_relaxed);
      auto prev = s.rt->stats.alarm_lag_ms_max.load(std::memory_order_relaxed);
      while (lag > prev && !s.rt->stats.alarm_lag_ms_max.compare_exchange_weak(prev, lag)) {
      }
      if (t.alarm.name.rfind("@dl:", 0) == 0) {
        auto dl = store.get_dead_letter(t.alarm.name.substr(4));
        if (!dl || dl->status != dl_status::scheduled) {
          finish_turn(self, nullptr, json(nullptr)); // resolved or discarded meanwhile
          return;
        }
        t.dead_letter_id = dl->id;
        auto payload = json::parse(dl->payload, nullptr, false);
        const method_def* m = s.type->find(dl->operation);
        if (!m || !payload.is_object())
          throw not_found_error("METHOD_NOT_FOUND",
                                "dead letter " + dl->id + " names no method of " + s.key.type);
        // Re-run the original call with its idempotency key (its config version stays
        // locked in the dead letter and in the tool's config rows).
        t.info.method = dl->operation;
        t.info.idempotency_key = dl->idempotency_key;
        t.info.trace_id = dl->trace_id.empty() ? new_trace_id() : dl->trace_id;
        auto args = payload.value("args", json::object());
        t.info.args_json = args.dump();
        // The fingerprint the client's key was taken with (older dead letters have none:
        // the runtime's own form then).
        t.item.req.fingerprint = payload.value("fingerprint", std::string());
        if (t.item.req.fingerprint.empty())
          t.item.req.fingerprint = call_fingerprint(t.info.method, t.info.args_json);
        t.info.fingerprint = t.item.req.fingerprint;
        start_task(m->fn(*s.instance, *s.ctx, std::move(args)), done);
        return;
      }
      if (t.alarm.name == purge_alarm) {
        auto n = store.purge_expired_keys(now);
        if (!n)
          throw storage_error(n.error());
        // Dead letters whose retention ended (final or acknowledged ones only) go too.
        auto d = store.purge_dead_letters(now);
        if (!d)
          throw storage_error(d.error());
        auto next = store.next_key_expiry();
        if (next && next->has_value()) {
          auto when = std::max(next->value(),
                               now + static_cast<int64_t>(s.rt->cfg.key_purge_interval.count()));
          s.ctx->set_alarm_internal(purge_alarm, when, "{}", 0);
        }
        finish_turn(self, nullptr, json(nullptr));
        return;
      }
      start_task(s.instance->on_alarm(*s.ctx, t.alarm), done_void);
      return;
    }
    case turn_kind::call: {
      auto& r = t.item.req;
      if (!r.idempotency_key.empty()) {
        // No pending row yet: the key is recorded finished in the turn's own transaction; a
        // duplicate meanwhile is refused from keys_in_flight.
        auto ttl = static_cast<int64_t>(s.rt->cfg.key_ttl.count());
        if (ttl > 0 && !s.purge_alarm_known) {
          s.purge_alarm_known = true;
          if (store.get_alarm(purge_alarm).error().code() == errc::not_found)
            s.ctx->set_alarm_internal(
              purge_alarm, now + std::max<int64_t>(ttl, s.rt->cfg.key_purge_interval.count()), "{}",
              0);
        }
      }
      json args = r.args.empty() ? json::object() : json::parse(r.args);
      if (!r.method.empty() && r.method[0] == '@') {
        finish_turn(self, nullptr, run_internal(self, r.method, args));
        return;
      }
      auto* m = s.type->find(r.method);
      if (!m)
        throw not_found_error("METHOD_NOT_FOUND",
                              "entity type " + s.key.type + " has no method " + r.method);
      start_task(m->fn(*s.instance, *s.ctx, std::move(args)), done);
      return;
    }
    }
  } catch (...) {
    finish_turn(self, std::current_exception(), std::nullopt);
  }
}

void append_error_fact(self_ptr self, const call_error& ce, const std::string& subtype_override,
                       json extra) {
  auto& s = self->state;
  auto& t = *s.turn;
  fact_draft d;
  d.type = "error";
  d.subtype = subtype_override.empty() ? std::string(to_string(ce.category())) : subtype_override;
  d.trace_id = t.info.trace_id;
  d.idempotency_key = t.info.idempotency_key;
  d.data = {{"error_code", ce.code()},
            {"error_message", ce.what()},
            {"category", std::string(to_string(ce.category()))},
            {"method", t.info.method},
            {"retryable", ce.retryable()},
            {"resolved", false}};
  for (auto& [k, v] : extra.items())
    d.data[k] = v;
  auto r = s.core->store->append(d);
  if (!r)
    throw storage_error(r.error());
}

void finish_turn(self_ptr self, std::exception_ptr err, std::optional<json> value) {
  auto& s = self->state;
  auto& t = *s.turn;
  auto& store = *s.core->store;
  call_reply reply;
  if (!err) {
    try {
      switch (t.item.kind) {
      case turn_kind::call: {
        auto body = value ? json_text(*value) : std::string("null");
        if (!t.info.idempotency_key.empty()) {
          auto st = t.key_on_disk
                      ? store.complete_key(t.info.idempotency_key, body)
                      : store.record_key(
                          t.info.idempotency_key, key_status::completed, t.item.req.fingerprint,
                          body, static_cast<int64_t>(s.rt->cfg.key_ttl.count()), s.rt->now());
          if (!st)
            throw storage_error(st);
        }
        reply = call_reply::success(std::move(body));
        break;
      }
      case turn_kind::alarm:
        if (!t.dead_letter_id.empty()) {
          auto dl = store.get_dead_letter(t.dead_letter_id);
          if (!dl)
            throw storage_error(dl.error());
          auto body = value ? json_text(*value) : std::string("null");
          if (!t.info.idempotency_key.empty())
            if (auto st = store.record_key(
                  t.info.idempotency_key, key_status::completed, t.item.req.fingerprint, body,
                  static_cast<int64_t>(s.rt->cfg.key_ttl.count()), s.rt->now());
                !st)
              throw storage_error(st);
          auto from = dl->status;
          dl->status = dl_status::resolved;
          dl->updated_at_ms = s.rt->now();
          dl->next_retry_ms.reset();
          if (auto st = store.put_dead_letter(*dl); !st)
            throw storage_error(st);
          fact_draft life;
          life.type = "lifecycle";
          life.subtype = "dead_letter_resolved";
          life.trace_id = t.info.trace_id;
          life.data = {{"dead_letter_id", dl->id},
                       {"previous_status", std::string(to_string(from))},
                       {"new_status", "resolved"},
                       {"result", json::parse(body, nullptr, false)}};
          if (!store.append(life))
            throw storage_error(status{errc::io_error, "append lifecycle fact"});
        }
        if (!t.alarm.name.empty()) {
          s.rt->stats.alarms_fired.fetch_add(1, std::memory_order_relaxed);
          bool reset =
            std::find(t.alarms_set.begin(), t.alarms_set.end(), t.alarm.name) != t.alarms_set.end();
          if (!reset) {
            if (auto st = store.cancel_alarm(t.alarm.name); !st)
              throw storage_error(st);
            s.alarms_dirty = true;
          }
        }
        break;
      case turn_kind::activate: break;
      }
      if (auto st = store.end_turn(true); !st)
        throw storage_error(st);
      ++s.batch_turns;
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (err) {
    auto ce = to_call_error(err);
    reply = call_reply::failure(ce);
    (void)store.end_turn(false); // the turn's own writes go; earlier turns stay
    try {
      if (auto st = store.begin_turn(); !st)
        throw storage_error(st);
      json extra = json::object();
      std::string subtype;
      if (t.item.kind == turn_kind::alarm && !t.dead_letter_id.empty()) {
        append_error_fact(self, ce, "", json{{"dead_letter_id", t.dead_letter_id}});
        auto dl = store.get_dead_letter(t.dead_letter_id);
        if (dl && dl->updated_at_ms < t.started_ms) { // the tool did not reschedule it
          dl->status = dl_status::pending;
          dl->updated_at_ms = s.rt->now();
          dl->next_retry_ms.reset();
          dl->error_code = ce.code();
          dl->error_message = ce.what();
          if (auto st = store.put_dead_letter(*dl); !st)
            throw storage_error(st);
        }
        bool reset =
          std::find(t.alarms_set.begin(), t.alarms_set.end(), t.alarm.name) != t.alarms_set.end();
        if (!reset)
          (void)store.cancel_alarm(t.alarm.name);
        s.alarms_dirty = true;
      } else if (t.item.kind == turn_kind::alarm && !t.alarm.name.empty()) {
        int64_t attempts = t.alarm.attempts + 1;
        extra = {{"alarm", t.alarm.name}, {"attempt", attempts}};
        append_error_fact(self, ce, "alarm_failed", extra);
        fact_draft life;
        life.type = "lifecycle";
        life.trace_id = t.info.trace_id;
        if (attempts > s.rt->cfg.alarm_max_retries) {
          s.rt->stats.alarms_dead_lettered.fetch_add(1, std::memory_order_relaxed);
          int64_t now = s.rt->now();
          dead_letter_record dl;
          dl.id = "dl_" + sha256_hex(s.key_str + t.alarm.name + std::to_string(now)).substr(0, 24);
          dl.operation = "@alarm:" + t.alarm.name;
          dl.payload = t.alarm.payload;
          dl.error_code = ce.code();
          dl.error_message = ce.what();
          dl.error_category = std::string(to_string(ce.category()));
          dl.reason = "alarm_retries_exhausted";
          dl.attempts = attempts;
          dl.first_attempt_ms = t.alarm.due_ms;
          dl.last_attempt_ms = now;
          dl.trace_id = t.info.trace_id;
          if (auto st = store.put_dead_letter(dl); !st)
            throw storage_error(st);
          if (auto st = store.cancel_alarm(t.alarm.name); !st)
            throw storage_error(st);
          life.subtype = "alarm_dead_lettered";
          life.data = {{"alarm", t.alarm.name}, {"attempts", attempts}, {"dead_letter_id", dl.id}};
          fact_draft e2;
          e2.type = "error";
          e2.subtype = "max_retries_exceeded";
          e2.trace_id = t.info.trace_id;
          e2.data = {{"error_code", ce.code()},
                     {"error_message", ce.what()},
                     {"category", std::string(to_string(ce.category()))},
                     {"retry_attempt", attempts},
                     {"max_retries", s.rt->cfg.alarm_max_retries},
                     {"dead_letter_id", dl.id}};
          if (!store.append(e2))
            throw storage_error(status{errc::io_error, "append max_retries_exceeded"});
        } else {
          s.rt->stats.alarm_retries.fetch_add(1, std::memory_order_relaxed);
          auto delay = static_cast<int64_t>(s.rt->cfg.alarm_retry_base.count()) *
                       (int64_t{1} << std::min<int64_t>(attempts - 1, 30));
          int64_t due = s.rt->now() + delay;
          s.ctx->set_alarm_internal(t.alarm.name, due, t.alarm.payload, attempts);
          life.subtype = "alarm_retry_scheduled";
          life.data = {
            {"alarm", t.alarm.name}, {"attempt", attempts}, {"retry_at", due}, {"delay_ms", delay}};
        }
        s.alarms_dirty = true;
        if (!store.append(life))
          throw storage_error(status{errc::io_error, "append lifecycle fact"});
      } else {
        append_error_fact(self, ce, "", extra);
      }
      if (t.item.kind == turn_kind::call && !t.info.idempotency_key.empty()) {
        // The key may have been committed as pending at an await: release it, and store the
        // failure when it is terminal so that a retry replays it.
        if (t.key_on_disk)
          if (auto st = store.release_key(t.info.idempotency_key); !st)
            throw storage_error(st);
        if (!ce.retryable())
          if (auto st = store.record_key(
                t.info.idempotency_key, key_status::failed, t.item.req.fingerprint, reply.body,
                static_cast<int64_t>(s.rt->cfg.key_ttl.count()), s.rt->now());
              !st)
            throw storage_error(st);
      }
      if (auto st = store.end_turn(true); !st)
        throw storage_error(st);
      ++s.batch_turns;
    } catch (...) {
      (void)store.end_turn(false);
      // The failure could not even be recorded: the store is failing. Answer with that.
      reply = call_reply::failure(to_call_error(std::current_exception()));
    }
  }
  auto item = std::move(t.item);
  s.turn.reset();
  s.busy = false;
  add_reply(self, item, std::move(reply));
}

// -- commit (output gate) -----------------------------------------------------------------------

void request_sync(self_ptr self);
void maybe_checkpoint(self_ptr self);

/// Moves `v` behind the last commit's sync: nothing leaves before what it may reveal is durable.
void hold_until_synced(self_ptr self, std::vector<std::pair<reply_to, call_reply>>& v) {
  auto& s = self->state;
  if (s.synced_gen >= s.commit_gen) {
    deliver(v);
    return;
  }
  for (auto& [rp, r] : v)
    s.awaiting_sync.emplace_back(s.commit_gen, std::move(rp), std::move(r));
  v.clear();
}

void start_commit(self_ptr self) {
  auto& s = self->state;
  auto& store = *s.core->store;
  bool deferred = s.rt->store_opts.defer_sync && s.rt->cfg.mode == durability::full;
  if (!s.alarms_dirty && (deferred || s.rt->cfg.mode == durability::normal)) {
    // Fast path: the commit writes the WAL on this thread (no fsync); the fsync runs on a
    // storage thread while the next batch executes here (pipelined group commit).
    auto seq = store.last_seq();
    auto facts = static_cast<uint64_t>(seq - s.committed_seq);
    auto turns = std::exchange(s.batch_turns, 0);
    auto st = store.commit();
    if (!st) {
      auto ce = storage_error(st);
      for (auto& [rp, r] : s.batch) {
        s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
        rp.deliver(call_reply::failure(ce));
      }
      s.batch.clear();
      pump(self); // nothing comes back to resume this entity (see below)
      return;
    }
    s.committed_seq = seq;
    ++s.commit_gen;
    s.rt->stats.commits.fetch_add(1, std::memory_order_relaxed);
    s.rt->stats.facts.fetch_add(facts, std::memory_order_relaxed);
    s.rt->stats.turns_committed.fetch_add(turns, std::memory_order_relaxed);
    if (deferred) {
      hold_until_synced(self, s.batch);
      request_sync(self);
    } else {
      s.sync_asked_gen = s.synced_gen = s.commit_gen;
      deliver(s.batch);
      maybe_checkpoint(self); // with deferred sync: after the sync (on_synced)
    }
    // A sync in flight resumes the entity when it returns (on_synced pumps). Without one (an
    // inline commit in durability normal) nothing comes back: run what queued meanwhile and
    // let an entity asked to hibernate close now. Within a suspended turn pump does nothing.
    if (s.syncs_in_flight == 0)
      pump(self);
    return;
  }
  // Slow path (the batch moved alarms, or durability is at-commit): the whole commit runs on a
  // storage thread, with the alarm index written before it.
  s.committing = true;
  s.in_commit = std::move(s.batch);
  s.batch.clear();
  s.commit_seq = store.last_seq();
  s.commit_facts = static_cast<uint64_t>(s.commit_seq - s.committed_seq);
  s.commit_turns = std::exchange(s.batch_turns, 0);
  bool alarms = std::exchange(s.alarms_dirty, false);
  auto core = s.core;
  auto rt = s.rt;
  auto key = s.key;
  auto me = caf::actor_cast<caf::actor>(self);
  rt->pool.post([core, rt, key, me, alarms] {
    std::optional<int64_t> next;
    if (alarms) {
      auto n = core->store->next_alarm();
      if (n && n->has_value())
        next = n->value().due_ms;
      rt->sync_alarm_index(key, next, true);
    }
    auto st = core->store->commit();
    if (st)
      st = core->store->sync(); // deferred mode: this commit must be durable before replies
    if (st && alarms)
      rt->sync_alarm_index(key, next, false);
    caf::anon_send(me, atoms::committed::value, static_cast<int>(st.code()), st.message(), alarms);
  });
}

/// WAL syncs of one entity that may run at once. A commit made while a sync runs starts
/// another (up to this many) instead of waiting for that one to return: each covers every
/// commit made before it began, and the kernel merges the cache flushes of overlapping ones.
/// One at a time, the calls of a commit made just after a sync began waited for it and then
/// for their own (docs/performance.md, Runtime, "Session 17").
constexpr int max_syncs_in_flight = 4;

void request_sync(self_ptr self) {
  auto& s = self->state;
  if (s.syncs_in_flight >= max_syncs_in_flight || s.sync_asked_gen >= s.commit_gen)
    return; // at the cap (on_synced asks again), or every commit is covered already
  ++s.syncs_in_flight;
  s.sync_asked_gen = s.commit_gen;
  auto target = s.commit_gen;
  auto core = s.core;
  auto me = caf::actor_cast<caf::actor>(self);
  s.rt->sync_pool.post([core, me, target] {
    auto st = core->store->sync();
    caf::anon_send(me, atoms::synced::value, target, static_cast<int>(st.code()), st.message());
  });
}

void pump(self_ptr self);

void release_synced(self_ptr self);

/// Keeps the WAL short. Past the configured size, a storage thread copies it into the database
/// through a connection of its own while this actor goes on committing (up to three rounds,
/// while commits made meanwhile keep more than a quarter of the threshold out); then the rest,
/// now small, is copied on the actor's own connection while the actor holds off, which lets
/// the next commit restart the WAL. (A checkpoint only on the actor's connection held every
/// call for the whole copy: tens of ms for a hot entity. Only concurrent ones never let the
/// WAL restart under steady load: some commit always lands during the copy.)
/// A failed checkpoint: SQLITE_BUSY (expected now and then, tried again) apart from errors.
void count_checkpoint_error(runtime_core* rt, const status& st) {
  (st.code() == errc::busy ? rt->stats.checkpoints_busy : rt->stats.checkpoint_failures)
    .fetch_add(1, std::memory_order_relaxed);
}

void maybe_checkpoint(self_ptr self) {
  auto& s = self->state;
  // Not while a commit runs on a storage thread: it moves wal_frames().
  if (s.checkpointing || s.committing || s.ph != phase::ready || !s.core->store)
    return;
  auto& store = *s.core->store;
  int threshold = s.rt->cfg.wal_checkpoint_frames;
  if (s.ckpt_rounds == 0 && store.wal_frames() <= threshold)
    return; // the common case, once per commit or sync
  if (s.ckpt_rounds > 0 && store.wal_frames() < s.ckpt_done) {
    s.ckpt_rounds = 0; // all of it was copied and a commit has restarted the WAL since
    return;
  }
  auto core = s.core;
  auto rt = s.rt;
  auto me = caf::actor_cast<caf::actor>(self);
  bool another =
    s.ckpt_rounds == 0 || (s.ckpt_rounds < 3 && store.wal_frames() - s.ckpt_done > threshold / 4);
  if (another) {
    s.checkpointing = true;
    ++s.ckpt_rounds;
    rt->pool.post([core, rt, me] {
      auto r = core->store->checkpoint_concurrently();
      rt->stats.checkpoints.fetch_add(1, std::memory_order_relaxed);
      if (!r)
        count_checkpoint_error(rt, r.error());
      caf::anon_send(me, atoms::checkpointed::value, true, r ? r.value() : -1);
    });
    return;
  }
  if (s.busy || store.in_batch())
    return; // the next sync tries again
  s.checkpointing = s.committing = true;
  rt->pool.post([core, rt, me] {
    auto st = core->store->checkpoint();
    if (!st)
      count_checkpoint_error(rt, st);
    caf::anon_send(me, atoms::checkpointed::value, false, st ? 0 : -1);
  });
}

void on_synced(self_ptr self, uint64_t gen, int code, const std::string& msg) {
  auto& s = self->state;
  --s.syncs_in_flight;
  if (code != 0) {
    // Committed but not known durable: say so. A retry with the same key replays the result.
    auto ce = storage_error(status{static_cast<errc>(code), msg});
    while (!s.awaiting_sync.empty() && std::get<0>(s.awaiting_sync.front()) <= gen) {
      s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
      std::get<1>(s.awaiting_sync.front()).deliver(call_reply::failure(ce));
      s.awaiting_sync.pop_front();
    }
  }
  s.synced_gen = std::max(s.synced_gen, gen);
  release_synced(self);
  request_sync(self);
  maybe_checkpoint(self);
  pump(self);
}

void maybe_close(self_ptr self);

void pump(self_ptr self) {
  auto& s = self->state;
  if (s.ph != phase::ready)
    return;
  while (!s.busy && !s.committing && !s.queue.empty()) {
    auto item = std::move(s.queue.front());
    s.queue.pop_front();
    run_turn(self, std::move(item));
  }
  if (s.busy || s.committing)
    return;
  auto& store = *s.core->store;
  if (store.dirty()) {
    if (!s.flush_scheduled) {
      s.flush_scheduled = true;
      self->send(self, atoms::flush::value);
    }
    return;
  }
  if (store.in_batch())
    (void)store.commit(); // read-only batch: nothing to fsync
  hold_until_synced(self, s.batch);
  maybe_close(self);
}

void release_synced(self_ptr self) {
  auto& s = self->state;
  while (!s.awaiting_sync.empty() && std::get<0>(s.awaiting_sync.front()) <= s.synced_gen) {
    auto& [g, rp, r] = s.awaiting_sync.front();
    rp.deliver(std::move(r));
    s.awaiting_sync.pop_front();
  }
}

/// A commit that ran whole on a storage thread (commit + WAL sync) is done.
void on_committed(self_ptr self, int code, const std::string& msg, bool alarms) {
  auto& s = self->state;
  s.committing = false;
  if (code == 0) {
    s.rt->stats.commits.fetch_add(1, std::memory_order_relaxed);
    s.rt->stats.facts.fetch_add(s.commit_facts, std::memory_order_relaxed);
    s.rt->stats.turns_committed.fetch_add(s.commit_turns, std::memory_order_relaxed);
    s.committed_seq = s.commit_seq;
    // Its sync covered every earlier commit of this file too.
    s.sync_asked_gen = s.synced_gen = ++s.commit_gen;
    release_synced(self);
    deliver(s.in_commit);
  } else {
    // The batch was rolled back whole: its keys are released, so retries run again.
    auto ce = storage_error(status{static_cast<errc>(code), "commit failed: " + msg});
    for (auto& [rp, r] : s.in_commit) {
      s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
      rp.deliver(call_reply::failure(ce));
    }
    s.in_commit.clear();
    alarms = true;
  }
  if (alarms)
    rearm_from_store(self);
  if (s.turn && s.turn->suspended && s.turn->woken) {
    s.turn->suspended = false;
    (void)s.core->store->begin_turn();
    s.turn->handle.resume();
  }
  maybe_checkpoint(self);
  pump(self);
}

/// A checkpoint on a storage thread is done (`concurrent`: through its own connection, which
/// left `done` frames in the database; else on the actor's connection). -1: it failed, which
/// only leaves the WAL longer: the next sync starts over.
void on_checkpointed(self_ptr self, bool concurrent, int done) {
  auto& s = self->state;
  s.checkpointing = false;
  if (concurrent && done >= 0) {
    s.ckpt_done = done;
    maybe_checkpoint(self); // another round or the rest
  } else {
    s.ckpt_rounds = 0;
  }
  if (!concurrent) {
    s.committing = false;
    if (s.turn && s.turn->suspended && s.turn->woken) {
      s.turn->suspended = false;
      (void)s.core->store->begin_turn();
      s.turn->handle.resume();
    }
  }
  pump(self);
}

// -- activation and hibernation -----------------------------------------------------------------

/// Idle timeout: one self-message per idle period, which looks at the last call's arrival and
/// either marks the entity idle or comes back when the period would end. (CAF's `after` in
/// the behavior re-armed a timer on the clock thread at every message, three per call.)
void arm_idle_check(self_ptr self, std::chrono::steady_clock::duration d) {
  auto& s = self->state;
  if (s.idle_armed)
    return;
  s.idle_armed = true;
  send_later(self, d, atoms::idle::value);
}

void on_idle_check(self_ptr self) {
  auto& s = self->state;
  s.idle_armed = false;
  if (s.ph != phase::ready)
    return; // armed again when it is (on_opened)
  auto now = std::chrono::steady_clock::now();
  if (s.busy) // a turn still waits on something: idle counts from now
    s.last_call = now;
  auto idle = now - s.last_call;
  auto timeout =
    std::chrono::duration_cast<std::chrono::steady_clock::duration>(s.rt->cfg.idle_timeout);
  if (idle < timeout) {
    arm_idle_check(self, timeout - idle);
    return;
  }
  s.idle_fired = true;
  maybe_close(self);
}

void start_open(self_ptr self) {
  auto& s = self->state;
  s.ph = phase::opening;
  auto core = s.core;
  auto rt = s.rt;
  auto key = s.key;
  auto me = caf::actor_cast<caf::actor>(self);
  const store_options* opts = &rt->store_opts_for(s.type);
  rt->pool.post([core, rt, key, me, opts] {
    auto r = entity_store::open(*opts, key);
    status st;
    if (r) {
      core->store = std::move(r.value());
      core->released_on_open = core->store->released_on_open();
      auto n = core->store->next_alarm();
      core->next_alarm.reset();
      if (n && n->has_value())
        core->next_alarm = n->value().due_ms;
      rt->sync_alarm_index(key, core->next_alarm, false);
    } else {
      st = r.error();
    }
    caf::anon_send(me, atoms::opened::value, static_cast<int>(st.code()), st.message());
  });
}

void on_opened(self_ptr self, int code, const std::string& msg) {
  auto& s = self->state;
  if (code != 0) {
    auto ce = storage_error(status{static_cast<errc>(code), msg});
    for (auto& q : s.queue)
      if (q.rp.sink) {
        s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
        q.rp.deliver(call_reply::failure(ce));
      }
    s.queue.clear();
    s.keys_in_flight.clear();
    s.rt->release_slot(s.key_str);
    s.rt->unregister(s.key_str, caf::actor_cast<caf::actor>(self));
    self->quit();
    return;
  }
  s.ph = phase::ready;
  s.last_call = std::chrono::steady_clock::now();
  arm_idle_check(self, s.rt->cfg.idle_timeout);
  auto active = s.rt->stats.active.fetch_add(1, std::memory_order_relaxed) + 1;
  auto peak = s.rt->stats.peak_active.load(std::memory_order_relaxed);
  while (active > peak && !s.rt->stats.peak_active.compare_exchange_weak(peak, active)) {
  }
  s.rt->stats.activations.fetch_add(1, std::memory_order_relaxed);
  s.rt->stats.keys_released_on_open.fetch_add(static_cast<uint64_t>(s.core->released_on_open),
                                              std::memory_order_relaxed);
  s.purge_alarm_known = false;
  s.committed_seq = s.core->store->last_seq();
  s.instance = s.type->factory();
  queued act;
  act.kind = turn_kind::activate;
  s.queue.push_front(std::move(act));
  arm_alarm_timer(self, s.core->next_alarm);
  pump(self);
}

void maybe_close(self_ptr self) {
  auto& s = self->state;
  bool wanted = s.stopping || s.evict_requested || s.idle_fired;
  if (!wanted || s.ph != phase::ready || s.busy || s.committing || s.checkpointing ||
      s.flush_scheduled || s.syncs_in_flight > 0 || !s.awaiting_sync.empty() || !s.queue.empty() ||
      !s.batch.empty() || s.core->store->in_batch())
    return;
  s.ph = phase::closing;
  s.instance.reset();
  ++s.alarm_gen; // local alarm timers are void; the scheduler wakes the entity
  s.rt->stats.hibernations.fetch_add(1, std::memory_order_relaxed);
  s.rt->stats.active.fetch_sub(1, std::memory_order_relaxed);
  auto core = s.core;
  auto me = caf::actor_cast<caf::actor>(self);
  s.rt->pool.post([core, me] {
    core->store.reset(); // closes the file (checkpoints the WAL)
    caf::anon_send(me, atoms::closed::value);
  });
}

void on_closed(self_ptr self) {
  auto& s = self->state;
  s.rt->release_slot(s.key_str);
  s.idle_fired = false;
  s.evict_requested = false;
  if (!s.queue.empty()) { // calls arrived while closing: open again
    s.ph = phase::waiting_slot;
    if (s.rt->acquire_slot(s.key_str, caf::actor_cast<caf::actor>(self)))
      start_open(self);
    return;
  }
  s.rt->unregister(s.key_str, caf::actor_cast<caf::actor>(self));
  self->quit();
}

caf::behavior entity_actor(self_ptr self, runtime_core* rt, entity_key key, std::string key_str,
                           const entity_type* type) {
  auto& s = self->state;
  s.rt = rt;
  s.key = std::move(key);
  s.key_str = std::move(key_str);
  s.type = type;
  s.ctx = std::make_unique<entity_context>(self);
  if (rt->acquire_slot(s.key_str, caf::actor_cast<caf::actor>(self)))
    start_open(self);
  return {
    [=](atoms::call, std::shared_ptr<reply_sink>& sink) {
      auto& s = self->state;
      reply_to rp{sink};
      auto req = sink->take();
      s.idle_fired = false;
      s.last_call = std::chrono::steady_clock::now();
      if (req.method == "@wake") { // the alarm scheduler: check alarms, answer at once
        rp.deliver(call_reply::success("null"));
        queued q;
        q.kind = turn_kind::alarm;
        s.queue.push_back(std::move(q));
      } else {
        if (!req.idempotency_key.empty() && !s.keys_in_flight.insert(req.idempotency_key).second) {
          s.rt->stats.key_conflicts.fetch_add(1, std::memory_order_relaxed);
          s.rt->stats.call_errors.fetch_add(1, std::memory_order_relaxed);
          rp.deliver(call_reply::failure(error_category::data_integrity, "IDEMPOTENCY_KEY_IN_USE",
                                         "a call with this idempotency key is still in flight",
                                         409));
          return;
        }
        queued q;
        q.req = std::move(req);
        q.rp = std::move(rp);
        s.queue.push_back(std::move(q));
      }
      pump(self);
    },
    [=](atoms::flush) {
      auto& s = self->state;
      s.flush_scheduled = false;
      if (s.ph != phase::ready || s.committing)
        return;
      if (s.core->store->dirty())
        start_commit(self);
      else
        pump(self);
    },
    [=](atoms::committed, int code, const std::string& msg, bool alarms) {
      on_committed(self, code, msg, alarms);
    },
    [=](atoms::opened, int code, const std::string& msg) { on_opened(self, code, msg); },
    [=](atoms::synced, uint64_t gen, int code, const std::string& msg) {
      on_synced(self, gen, code, msg);
    },
    [=](atoms::checkpointed, bool concurrent, int done) {
      on_checkpointed(self, concurrent, done);
    },
    [=](atoms::closed) { on_closed(self); },
    [=](atoms::slot) {
      if (self->state.ph == phase::waiting_slot)
        start_open(self);
    },
    [=](atoms::resume, uint64_t token) {
      auto& s = self->state;
      if (!s.turn || !s.turn->suspended || s.turn->token != token)
        return;
      s.turn->woken = true;
      if (s.committing)
        return; // resumed by on_committed
      s.turn->suspended = false;
      (void)s.core->store->begin_turn();
      s.turn->handle.resume();
      pump(self);
    },
    [=](atoms::tick, uint64_t token) {
      auto& s = self->state;
      auto it = s.timers.find(token);
      if (it == s.timers.end())
        return;
      auto fn = std::move(it->second);
      s.timers.erase(it);
      fn(true);
    },
    [=](atoms::alarm, uint64_t gen) {
      auto& s = self->state;
      if (gen != s.alarm_gen || s.ph != phase::ready)
        return;
      queued q;
      q.kind = turn_kind::alarm;
      s.queue.push_back(std::move(q));
      pump(self);
    },
    [=](atoms::hibernate) {
      self->state.evict_requested = true;
      maybe_close(self);
    },
    [=](atoms::stop) {
      self->state.stopping = true;
      if (self->state.ph == phase::waiting_slot && self->state.queue.empty()) {
        self->state.rt->unregister(self->state.key_str, caf::actor_cast<caf::actor>(self));
        self->quit();
        return;
      }
      maybe_close(self);
    },
    [=](atoms::idle) { on_idle_check(self); },
  };
}

} // namespace

caf::actor spawn_entity(runtime_core* rt, const entity_key& key, const std::string& key_str) {
  const entity_type* type = rt->cfg.types.find(key.type);
  return rt->sys->spawn<caf::lazy_init>(entity_actor, rt, key, key_str, type);
}

caf::actor spawn_timer(runtime_core* rt) {
  return rt->sys->spawn([rt]() -> caf::behavior {
    return {
      [rt](atoms::fire, const std::string& key_str, uint64_t id, caf::message& msg) {
        caf::actor target;
        {
          std::lock_guard<std::mutex> g(rt->reg.mu);
          auto it = rt->reg.map.find(key_str);
          if (it != rt->reg.map.end() && it->second.actor && it->second.actor->id() == id)
            target = it->second.actor;
        }
        if (target) // else that activation ended (a later one has its own timers)
          caf::anon_send(target, std::move(msg));
      },
    };
  });
}

} // namespace factum::detail
