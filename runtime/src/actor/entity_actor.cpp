// entity_actor.cpp: the actor of one entity: a thin adapter between CAF messages and the plain
// classes that do the work: the turn runner (turns, keys, error facts: turn_runner.hpp), the
// context handlers see (entity_context.hpp) and the output gate (which replies may leave:
// output_gate.hpp). This file owns the actor's behaviour (its message handlers), the phases of an
// activation (open, ready, close), the queue and pump(), and the port the runner and the context
// call back through. The commit of each batch of turns, the WAL syncs and checkpoints and a
// quarantine are entity_commits.cpp's; the state both share is entity_actor_state.hpp.
//
// Threads: everything here runs on the entity's actor (one CAF worker at a time), except the
// jobs posted to the storage pool (open, slow-path commit, checkpoint on the actor's
// connection, close), which own the store while they run; the actor does not touch the store
// while such a job is in flight (`committing`, phases). Two kinds of job run beside the actor
// instead: sync() on the sync pool (the WAL's own descriptor; up to max_syncs_in_flight of one
// entity at once) and checkpoint_concurrently() on the storage pool (a connection of its own).
//
// A call's path: (atoms::call) -> queue -> pump() -> turn_runner::run() [savepoint, key,
// handler, key record, reply into the batch] -> flush (a message to self, behind everything
// already queued: write coalescing) -> start_commit(): commit on the actor, without fsync ->
// sync() on a sync thread -> on_synced(): the output gate releases every reply the sync covers.
// A batch that moved alarms commits and syncs on a storage thread instead (the alarm index
// written first), and on_committed() hands its replies to the gate.
#include <algorithm>
#include <optional>

#include "actor/entity_actor_state.hpp"

namespace factum::detail {

void reply_to::deliver(call_reply r) {
  if (sink)
    sink->deliver(std::move(r));
  else if (local)
    std::exchange(local, nullptr)(std::move(r));
}

namespace {

using nlohmann::json;

// -- timers -------------------------------------------------------------------------------------

/// Sends (xs...) to this actor after `d` by way of the runtime's timer actor, anonymously and
/// naming this actor by key and actor id only (spawn_timer): a pending timer keeps nothing of
/// an ended activation.
template <class Duration, class... Ts> void send_later(self_ptr self, Duration d, Ts&&... xs) {
  caf::delayed_anon_send(self->state.rt->timers, d, atoms::fire::value, self->state.key_str,
                         static_cast<uint64_t>(self->id()),
                         caf::make_message(std::forward<Ts>(xs)...));
}

} // namespace

// -- the port (turn_host, context_port) ---------------------------------------------------------

void actor_port::turn_answered(queued& item, call_reply r) {
  auto& s = self_->state;
  if (!r.ok) {
    s.rt->stats.call_errors.inc();
    if (!s.fenced && s.core->store->fenced()) { // the store's fence refused the turn's writes
      s.fenced = true;
      s.rt->stats.fenced_writes.inc();
    }
  }
  if (r.ok)
    gate_frames();
  else
    (void)s.ctx->take_frames(); // a failed turn sends nothing (its writes are gone)
  if (item.rp.sink)
    s.batch.emplace_back(std::move(item.rp), std::move(r));
}

void actor_port::gate_frames() {
  auto& s = self_->state;
  auto frames = s.ctx->take_frames();
  if (frames.empty())
    return;
  reply_to to;
  to.local = [holder = s.rt->connection_holder(), key = s.key,
              frames = std::move(frames)](call_reply r) mutable {
    if (r.ok && holder)
      holder->deliver(key, std::move(frames));
  };
  s.batch.emplace_back(std::move(to), call_reply::success("null"));
}

std::shared_ptr<connection_host> actor_port::connections() {
  return self_->state.rt->connection_holder();
}

void actor_port::hold_await(uint64_t token,
                            std::function<void(bool, std::function<void()>)> start) {
  auto me = caf::actor_cast<caf::actor>(self_);
  std::function<void()> wake = [me, token] { caf::anon_send(me, atoms::resume::value, token); };
  auto self = self_;
  // Delivered on this actor by the output gate, with the answer a reply would get: ok once the
  // commit is durable, a failure when it failed or the entity is quarantined.
  self_->state.await_start.local = [self, start = std::move(start),
                                    wake = std::move(wake)](call_reply r) mutable {
    auto* t = self->state.runner->current();
    start(r.ok && t && !t->lost_at_await, std::move(wake));
  };
  gate_frames(); // what the turn sent before the await leaves with the await's commit
  release_await(self_);
}

uint64_t actor_port::next_token() {
  return self_->state.next_token++;
}

void actor_port::route(const entity_key& key, call_request req, std::chrono::milliseconds timeout,
                       std::function<void(call_reply)> done) {
  self_->state.rt->route(key, std::move(req), timeout, std::move(done));
}

void actor_port::start_timer(std::chrono::milliseconds d, std::function<void(bool)> done) {
  auto& s = self_->state;
  auto tok = s.next_token++;
  s.timers.emplace(tok, std::move(done));
  self_->delayed_send(self_, d, atoms::tick::value, tok);
}

// -- alarms -------------------------------------------------------------------------------------

namespace {

void arm_alarm_timer(self_ptr self, std::optional<int64_t> next) {
  auto& s = self->state;
  ++s.alarm_gen;
  if (!next)
    return;
  auto delay = std::max<int64_t>(0, *next - s.rt->now());
  send_later(self, std::chrono::milliseconds(delay), atoms::alarm::value, s.alarm_gen);
}

} // namespace

void rearm_from_store(self_ptr self) {
  auto& s = self->state;
  auto n = s.core->store->next_alarm();
  if (n && n->has_value())
    arm_alarm_timer(self, n->value().due_ms);
  else
    arm_alarm_timer(self, std::nullopt);
}

// -- cluster ownership --------------------------------------------------------------------------

namespace {

/// The claim this node may open `key` under (epoch 0: a node alone), or NOT_OWNER. Any thread.
result<owner_claim> owner_claim_for(runtime_core& rt, const entity_key& key) {
  if (!rt.cfg.ownership)
    return owner_claim{};
  auto c = rt.cfg.ownership->claim_for(key);
  if (!c) {
    rt.stats.activations_refused_not_owner.inc();
    return status{errc::not_owner, c.error().message()};
  }
  return c;
}

// -- turns --------------------------------------------------------------------------------------

/// Runs shared call `item` now and hands its answer to the gate: with the open batch's commit
/// when the batch holds writes (the answer may reveal them), else as soon as the last commit is
/// durable. A failure of its method returns the internal call that records its error fact.
std::optional<queued> run_shared_call(self_ptr self, queued& item) {
  auto& s = self->state;
  if (item.rp.sink && item.rp.sink->answered()) {
    s.rt->stats.calls_dropped.inc();
    return std::nullopt;
  }
  bool ran = false;
  auto r = s.runner->run_shared(item.req, ran);
  std::optional<queued> rec;
  if (!r.ok) {
    s.rt->stats.call_errors.inc();
    if (ran) {
      rec.emplace();
      rec->req = turn_runner::shared_failure_record(item.req, r);
    }
  }
  if (s.core->store->dirty()) {
    s.batch.emplace_back(std::move(item.rp), std::move(r));
  } else {
    output_gate<reply_to>::reply_batch b;
    b.emplace_back(std::move(item.rp), std::move(r));
    s.gate.hold(b);
  }
  return rec;
}

/// Runs the shared (read-only) calls in the queue now, ahead of exclusive calls queued before
/// them: they read the store as it stands (also while an exclusive turn waits at an await),
/// and their answers leave once what they may reveal is durable: with the open batch's commit
/// when it holds writes, else as soon as the last commit is durable. Not while a storage
/// thread holds the store.
void run_shared_calls(self_ptr self) {
  auto& s = self->state;
  auto& runner = *s.runner;
  if (s.committing || s.shared_queued == 0) // committing: also a checkpoint on its connection
    return;
  // Never before the activation's turn has run: on_activate builds what the entity reads.
  if (auto* t = runner.current(); t && t->item.kind == turn_kind::activate)
    return;
  for (auto it = s.queue.begin(); it != s.queue.end();) {
    if (it->kind == turn_kind::activate)
      return;
    if (!it->shared) {
      ++it;
      continue;
    }
    auto item = std::move(*it);
    it = s.queue.erase(it);
    --s.shared_queued;
    if (auto rec = run_shared_call(self, item)) // its error fact, by an exclusive turn of its own
      it = std::next(s.queue.insert(it, std::move(*rec)));
  }
}

} // namespace

void pump(self_ptr self) {
  auto& s = self->state;
  if (s.ph != phase::ready)
    return;
  if (s.gate.quarantined()) {
    handle_quarantine(self);
    return;
  }
  if (s.fenced && !s.runner->busy() && !s.committing) {
    if (s.core->store->in_batch())
      (void)s.core->store->rollback(); // a read-only batch; any write of it was refused
    s.gate.hold(s.batch);
    maybe_close(self);
    return;
  }
  auto& runner = *s.runner;
  run_shared_calls(self);
  while (!runner.busy() && !s.committing && !s.queue.empty()) {
    auto item = std::move(s.queue.front());
    s.queue.pop_front();
    s.shared_queued -= item.shared;
    if (item.kind == turn_kind::alarm && item.rp.sink) {
      // The alarm scheduler's wake: the entity is open, so its alarms will be looked at.
      item.rp.deliver(call_reply::success("null"));
      item.rp = {};
    }
    if (item.rp.sink && item.rp.sink->answered()) {
      // Its caller was answered CALL_TIMEOUT while it waited: it never runs (a retry does).
      s.rt->stats.calls_dropped.inc();
      runner.drop(item);
      continue;
    }
    if (item.shared) {
      if (auto rec = run_shared_call(self, item))
        s.queue.push_front(std::move(*rec));
      continue;
    }
    runner.run(std::move(item));
  }
  if (runner.busy() || s.committing)
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
  s.gate.hold(s.batch);
  maybe_close(self);
}

// -- activation and hibernation -----------------------------------------------------------------

namespace {

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
  if (s.runner->busy()) // a turn still waits on something: idle counts from now
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

/// Opens the entity's file only if it exists (NOT_FOUND otherwise).
result<std::unique_ptr<entity_store>> open_existing(const store_options& opts,
                                                    const entity_key& key) {
  auto o = opts;
  o.create_if_missing = false;
  return entity_store::open(o, key);
}

/// Whether a queued turn may create the entity's file: a call of a method that may
/// (may_create_entity); the alarm scheduler's wakes never do.
bool creates_file(const queued& q) {
  return q.kind == turn_kind::call && may_create_entity(q.req.method);
}

/// Opens the entity's file on a storage thread: creating it when `create` (counted against its
/// tenant's max_entities first: tenant_quotas.hpp), else only if it exists; its bytes measured.
result<std::unique_ptr<entity_store>> open_store(runtime_core* rt, const store_options& opts,
                                                 const entity_key& key, bool create,
                                                 tenant_meter& meter) {
  if (create)
    return open_creating(*rt, opts, key, meter);
  auto r = open_existing(opts, key);
  if (r)
    measure_opened(meter, **r);
  return r;
}

/// Opens (or creates) the activation's store into `core` on a storage thread, indexes its next
/// alarm and, replicated, checks the file against the log (`stale`: it is not the log's, and
/// must be rebuilt from it). On an error the store stays closed.
status open_activation(runtime_core& rt, entity_core& core, const store_options& opts,
                       const entity_key& key, bool create, bool& stale) {
  stale = false;
  auto r = open_store(&rt, opts, key, create, core.meter);
  if (!r) {
    if (r.error().code() == errc::not_owner)
      rt.stats.activations_refused_not_owner.inc();
    return r.error();
  }
  core.store = std::move(r.value());
  core.released_on_open = core.store->released_on_open();
  if (core.store->resynced_on_open())
    rt.stats.resyncs.inc();
  auto n = core.store->next_alarm();
  core.next_alarm.reset();
  if (n && n->has_value())
    core.next_alarm = n->value().due_ms;
  // The index must not be later than the file: an open that cannot correct it fails.
  auto st = rt.sync_alarm_index(key, core.next_alarm, false);
  if (st && rt.cfg.replicator) {
    st = check_with_log(rt, core, key);
    stale = st.code() == errc::conflict;
  }
  if (!st)
    core.store.reset();
  return st;
}

void start_open(self_ptr self) {
  auto& s = self->state;
  s.ph = phase::opening;
  auto core = s.core;
  auto rt = s.rt;
  auto key = s.key;
  auto key_str = s.key_str;
  auto me = caf::actor_cast<caf::actor>(self);
  const store_options* opts = &rt->store_opts_for(s.type);
  bool create = std::any_of(s.queue.begin(), s.queue.end(), creates_file);
  rt->pool.post([core, rt, key, key_str, me, opts, create] {
    // Cluster mode: only the shard's owner opens (or creates) the file, and claims it.
    auto claim = owner_claim_for(*rt, key);
    status st = claim ? rt->resync_if_suspect(*opts, key, key_str) : claim.error();
    if (st) {
      core->claim = *claim;
      store_options claiming;
      if (claim->epoch > 0) { // the open claims the file (a newer owner's file refuses: NOT_OWNER)
        claiming = *opts;
        claiming.owner_epoch = claim->epoch;
        claiming.owner_node = rt->cfg.ownership->node_id();
      }
      // Replicated: a file that is not the log's is rebuilt from the log, then opened again.
      bool stale = false;
      for (int attempt = 0;; ++attempt) {
        st = open_activation(*rt, *core, claim->epoch > 0 ? claiming : *opts, key, create, stale);
        if (!stale || attempt > 0)
          break;
        rt->log_event({{"level", "warn"},
                       {"event", "entity_rebuilding"},
                       {"entity", key_str},
                       {"detail", st.message()}});
        if (auto rb = rt->cfg.replicator->rebuild(key, *opts); !rb) {
          st = {errc::unavailable, st.message() + "; the rebuild failed: " + rb.to_string()};
          break;
        }
      }
      if (stale)
        st = {errc::unavailable, st.message()};
    }
    caf::anon_send(me, atoms::opened::value, static_cast<int>(st.code()), st.message());
  });
}

void on_opened(self_ptr self, int code, const std::string& msg) {
  auto& s = self->state;
  if (code != 0) {
    // A creation the tenant's quota refused: its writes get the refusal, its reads 404.
    auto refusal = std::exchange(s.core->meter.refusal, std::nullopt);
    bool absent = refusal || static_cast<errc>(code) == errc::not_found;
    auto ce = absent ? problems::entity_not_found.error("no entity " + s.key_str +
                                                        ": nothing was ever written to it")
                     : storage_error(status{static_cast<errc>(code), msg});
    std::deque<queued> writes; // arrived while an open that does not create ran
    for (auto& q : s.queue) {
      if (absent && creates_file(q) && !refusal) {
        writes.push_back(std::move(q));
        continue;
      }
      if (q.rp.sink) {
        s.rt->stats.call_errors.inc();
        q.rp.deliver(call_reply::failure(refusal && creates_file(q) ? *refusal : ce));
      }
      if (q.kind == turn_kind::call)
        s.runner->drop(q);
    }
    s.queue = std::move(writes);
    s.shared_queued = static_cast<size_t>(
      std::count_if(s.queue.begin(), s.queue.end(), [](const queued& q) { return q.shared; }));
    if (!s.queue.empty()) {
      start_open(self); // with a file to create this time
      return;
    }
    s.rt->release_slot(s.key_str);
    s.rt->unregister(s.key_str, caf::actor_cast<caf::actor>(self));
    self->quit();
    return;
  }
  s.ph = phase::ready;
  s.last_call = std::chrono::steady_clock::now();
  arm_idle_check(self, s.rt->cfg.idle_timeout);
  auto& stats = s.rt->stats;
  stats.peak_active.raise_to(stats.active.add(1));
  stats.activations.inc();
  stats.keys_released_on_open.inc(static_cast<uint64_t>(s.core->released_on_open));
  s.committed_seq = s.core->store->last_seq();
  s.gate.replicate(s.rt->cfg.replicator != nullptr);
  s.instance = s.type->factory();
  s.ctx->attach(s.core->store.get());
  s.runner->attach(*s.core->store, *s.instance, *s.ctx);
  queued act;
  act.kind = turn_kind::activate;
  s.queue.push_front(std::move(act));
  arm_alarm_timer(self, s.core->next_alarm);
  pump(self);
}

} // namespace

void maybe_close(self_ptr self) {
  auto& s = self->state;
  bool quarantined = s.gate.quarantined() != nullptr;
  bool leaving = quarantined || s.fenced; // calls still queued wait for the next activation
  bool wanted = s.stopping || s.evict_requested || s.idle_fired || leaving;
  if (!wanted || s.ph != phase::ready || s.runner->busy() || s.committing || s.checkpointing ||
      s.flush_scheduled || s.gate.in_flight() > 0 || s.gate.held() > 0 ||
      (!leaving && s.gate.log_pending()) ||
      (!leaving && (!s.queue.empty() || s.core->store->in_batch())) || !s.batch.empty())
    return;
  s.ph = phase::closing;
  s.runner->detach();
  s.ctx->attach(nullptr);
  s.instance.reset();
  ++s.alarm_gen; // local alarm timers are void; the scheduler wakes the entity
  s.rt->stats.hibernations.inc();
  auto core = s.core;
  auto rt = s.rt;
  auto key = s.key;
  auto key_str = s.key_str;
  auto me = caf::actor_cast<caf::actor>(self);
  s.rt->pool.post([core, rt, key, key_str, me, quarantined] {
    // A quarantined store keeps its WAL as it is, unchecked, and marks the file so that the
    // next open re-syncs it before anything is read (remembered here too if the mark fails).
    if (quarantined)
      if (auto st = core->store->mark_unsynced(); !st)
        rt->remember_suspect(key_str);
    core->store.reset(); // closes the file (checkpoints the WAL unless quarantined)
    // Counted active until its file is closed: the gauge says how many entity files are open.
    rt->stats.active.add(-1);
    measure_closed(*rt, key, core->meter);
    caf::anon_send(me, atoms::closed::value);
  });
}

namespace {

void on_closed(self_ptr self) {
  auto& s = self->state;
  s.rt->release_slot(s.key_str);
  s.idle_fired = false;
  s.evict_requested = false;
  s.fenced = false;
  if (s.gate.quarantined()) { // the next activation starts with a gate of its own
    s.gate = output_gate<reply_to>{};
    s.core->tickets.reset();
    s.quarantine_handled = false;
  }
  if (!s.queue.empty()) { // calls arrived while closing (or waited out a quarantine): open again
    s.ph = phase::waiting_slot;
    if (s.rt->acquire_slot(s.key_str, caf::actor_cast<caf::actor>(self)))
      start_open(self);
    return;
  }
  s.rt->keep_log_debt(s.key_str, std::exchange(s.log_debt, 0)); // for its next activation
  s.rt->unregister(s.key_str, caf::actor_cast<caf::actor>(self));
  self->quit();
}

// -- messages -----------------------------------------------------------------------------------

void on_call(self_ptr self, std::shared_ptr<reply_sink>& sink) {
  auto& s = self->state;
  reply_to rp{sink, nullptr};
  auto req = sink->take();
  s.idle_fired = false;
  s.last_call = std::chrono::steady_clock::now();
  if (req.method == "@wake") { // the alarm scheduler: answered when the entity is open
    queued q;
    q.kind = turn_kind::alarm;
    q.rp = std::move(rp);
    s.queue.push_back(std::move(q));
    pump(self);
    return;
  }
  if (auto refused = refuse_write(*s.rt, s.core->meter, req.method)) {
    s.rt->stats.call_errors.inc();
    rp.deliver(std::move(*refused));
    return;
  }
  if (s.queue.size() >= s.rt->cfg.max_queued_calls) {
    s.rt->stats.call_errors.inc();
    s.rt->stats.calls_overloaded.inc();
    call_error e = problems::entity_overloaded.error("entity " + s.key_str + " has " +
                                                     std::to_string(s.queue.size()) +
                                                     " calls waiting; retry later");
    auto r = call_reply::failure(e);
    r.retry_after_ms = 1000;
    rp.deliver(std::move(r));
    return;
  }
  bool shared = s.runner->is_shared(req);
  if (auto refused = s.runner->accept(req, shared)) {
    s.rt->stats.call_errors.inc();
    rp.deliver(std::move(*refused));
    return;
  }
  queued q;
  q.req = std::move(req);
  q.rp = std::move(rp);
  q.shared = shared;
  s.shared_queued += shared;
  s.queue.push_back(std::move(q));
  pump(self);
}

void on_resume(self_ptr self, uint64_t token) {
  auto& s = self->state;
  auto* t = s.runner->current();
  if (!t || !t->suspended || t->token != token)
    return;
  t->woken = true;
  if (s.committing)
    return; // resumed by on_committed or on_checkpointed
  s.runner->resume();
  pump(self);
}

caf::behavior entity_actor(self_ptr self, runtime_core* rt, entity_key key, std::string key_str,
                           const entity_type* type) {
  auto& s = self->state;
  s.rt = rt;
  s.key = std::move(key);
  s.key_str = std::move(key_str);
  s.type = type;
  s.core->meter.account = tenant_account_of(*rt, s.key.tenant);
  s.port = std::make_unique<actor_port>(self);
  s.runner = std::make_unique<turn_runner>(
    turn_runner::env{&rt->cfg, &rt->stats, type, &s.key, rt->outbox.get()}, *s.port);
  s.ctx = std::make_unique<entity_context>(
    context_env{&rt->cfg, &rt->stats, &rt->classifier, &rt->dl_rules, &s.key,
                type && type->websocket.has_value(), &rt->tools, &s.key_str, &rt->degradation},
    *s.runner, *s.port);
  if (rt->acquire_slot(s.key_str, caf::actor_cast<caf::actor>(self)))
    start_open(self);
  return {
    [=](atoms::call, std::shared_ptr<reply_sink>& sink) { on_call(self, sink); },
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
    [=](atoms::committed, int code, const std::string& msg, bool alarms, uint64_t ticket,
        uint64_t started_by_end, int sync_code, const std::string& sync_msg) {
      on_committed(
        self, status{static_cast<errc>(code), msg}, alarms,
        sync_report{0, ticket, started_by_end, status{static_cast<errc>(sync_code), sync_msg}});
    },
    [=](atoms::opened, int code, const std::string& msg) { on_opened(self, code, msg); },
    [=](atoms::synced, uint64_t covers, uint64_t ticket, uint64_t started_by_end, int code,
        const std::string& msg) {
      on_synced(self,
                sync_report{covers, ticket, started_by_end, status{static_cast<errc>(code), msg}});
    },
    [=](atoms::checkpointed, bool concurrent, int done) {
      on_checkpointed(self, concurrent, done);
    },
    [=](atoms::replicated, uint64_t gen, int code, const std::string& msg) {
      on_replicated(self, gen, status{static_cast<errc>(code), msg});
    },
    [=](atoms::closed) { on_closed(self); },
    [=](atoms::slot) {
      if (self->state.ph == phase::waiting_slot)
        start_open(self);
    },
    [=](atoms::resume, uint64_t token) { on_resume(self, token); },
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

namespace {

/// The timer actor's behaviour: forwards a fired timer's message to the activation that set
/// it, if that activation is still the live one.
caf::behavior timer_actor(caf::event_based_actor*, runtime_core* rt) {
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
}

} // namespace

caf::actor spawn_timer(runtime_core* rt) {
  // `rt` is a spawn argument, not a capture: for a function that takes no argument but its self
  // pointer, CAF 0.17 keeps a null argument tuple and binds a reference to it (undefined; UBSan
  // stops the actor there).
  return rt->sys->spawn(timer_actor, rt);
}

} // namespace factum::detail
