// entity_commits.cpp: the entity actor's durability path: the commit of each batch of turns (on
// the actor without fsync, or whole on a storage thread when the batch moved alarms or
// durability is at-commit), the WAL syncs whose reports let the output gate release replies,
// the release of a suspended turn's await once what it wrote is durable, the entity's fleet
// summary written to the tenant index after a commit (index_fleet_summary), the checkpoints that
// keep the WAL short, and the quarantine of an activation whose WAL can no longer be trusted.
// The actor's messages, phases, queue and pump are entity_actor.cpp's; the state both share is
// entity_actor_state.hpp.
//
// Threads: every function here runs on the entity's actor, except the bodies of the jobs it
// posts. The slow-path commit and a checkpoint on the actor's connection run on the storage pool
// and own the store while they run (`committing`: the actor leaves it alone); sync() runs on the
// sync pool (the WAL's own descriptor) and checkpoint_concurrently() on the storage pool (a
// connection of its own), beside the actor. Each job answers with a message (atoms::committed,
// synced, checkpointed) that brings the actor back here.
#include <future>
#include <optional>

#include "actor/entity_actor_state.hpp"

namespace factum::detail {

// -- quarantine ---------------------------------------------------------------------------------

/// The gate is quarantined (a sync failed, or a commit failed in a way that leaves the WAL's
/// tail unknown): nothing more is answered from this activation's state. The batch not yet
/// committed is rolled back (its replies fail), and the entity closes without trusting its WAL
/// (entity_store::mark_unsynced()). Calls that have not run stay queued: the next activation,
/// which re-syncs the files before it reads them, runs them.
void handle_quarantine(self_ptr self) {
  auto& s = self->state;
  auto* why = s.gate.quarantined();
  if (!why)
    return;
  if (!s.quarantine_handled) {
    s.quarantine_handled = true;
    s.rt->stats.quarantines.inc();
    s.rt->log_quarantine(s.key_str, *why);
  }
  if (s.ph == phase::ready && !s.committing && !s.runner->busy() && s.core->store->in_batch())
    (void)s.core->store->rollback();
  s.gate.hold(s.batch); // fails them
  maybe_close(self);
}

// -- commit -------------------------------------------------------------------------------------

namespace {

/// Commits the store's batch if this node still owns the entity under the store's claim (the
/// lease is live and the shard not taken again: entity_ownership::may_commit); else rolls the
/// batch back and answers NOT_OWNER. The store's own check (inside the transaction) stays the
/// fence; this one stops a node that outlived its lease. The actor's or a storage thread.
status owned_commit(runtime_core& rt, entity_core& core) {
  auto& store = *core.store;
  if (rt.cfg.ownership && !rt.cfg.ownership->may_commit(core.claim)) {
    (void)store.rollback();
    return {errc::not_owner,
            "this node no longer owns the entity (its lease or its shard's epoch " +
              std::to_string(core.claim.epoch) + " is gone)"};
  }
  return store.commit();
}

void maybe_checkpoint(self_ptr self);

/// A commit failed and its batch was rolled back (by SQLite, or by us): its replies fail, and
/// what this activation remembers of the rolled-back writes goes. An I/O error may have left
/// the WAL's tail half-written: that quarantines.
void commit_failed(self_ptr self, output_gate<reply_to>::reply_batch& v, const status& st) {
  auto& s = self->state;
  if (st.code() == errc::io_error)
    s.gate.quarantine(st);
  if (st.code() == errc::not_owner && !s.fenced) {
    s.fenced = true;
    s.rt->stats.fenced_writes.inc();
  }
  auto r = call_reply::failure(storage_error(st));
  s.rt->stats.call_errors.inc(v.size());
  if (s.gate.quarantined())
    s.gate.hold(v); // fails them with the quarantine's answer
  else
    output_gate<reply_to>::fail(v, r);
  s.runner->commit_failed();
  if (auto* t = s.runner->current(); t && t->suspended)
    s.runner->lost_at_await(st);
}

/// The store's WAL sync, timed into the runtime's sync histogram (a sync thread or a storage
/// thread).
status timed_sync(runtime_core& rt, entity_store& store) {
  auto t0 = std::chrono::steady_clock::now();
  auto st = store.sync();
  rt.stats.syncs.observe(std::chrono::steady_clock::now() - t0);
  return st;
}

void request_sync(self_ptr self) {
  auto& s = self->state;
  auto target = s.gate.want_sync();
  if (!target)
    return; // at the cap (on_synced asks again), every commit covered, or quarantined
  auto core = s.core;
  auto me = caf::actor_cast<caf::actor>(self);
  s.rt->sync_pool.post([core, me, rt = s.rt, covers = *target] {
    auto r = core->tickets.run(covers, [&] { return timed_sync(*rt, *core->store); });
    caf::anon_send(me, atoms::synced::value, r.covers, r.ticket, r.started_by_end,
                   static_cast<int>(r.st.code()), r.st.message());
  });
}

/// A commit appended facts up to `seq`: when a fact stream follows facts, `v` (the commit's
/// replies) gets one more entry, which the output gate delivers with them once the commit is
/// durable, and which tells the holder of connections so (never for a commit that fails).
void notice_facts(entity_state& s, output_gate<reply_to>::reply_batch& v, int64_t seq) {
  auto holder = s.rt->connection_holder();
  if (!holder || !holder->follows_facts())
    return;
  reply_to to;
  to.local = [holder = std::move(holder), key = s.key, seq](call_reply r) {
    if (r.ok)
      holder->facts_durable(key, seq);
  };
  v.emplace_back(std::move(to), call_reply::success("null"));
}

/// Appends `commits` (taken from `core`'s store) to the replicated log under the activation's
/// claim, with the store's genesis when they begin the entity's log. An error (the genesis could
/// not be read) sends nothing and never runs `done`.
status send_captured(runtime_core& rt, entity_core& core, const entity_key& key,
                     std::vector<captured_commit> commits, replication::commit_sink::done_fn done) {
  std::optional<replica_genesis> genesis;
  if (!commits.empty() && commits.front().number == 1) {
    auto g = core.store->genesis();
    if (!g)
      return g.error();
    genesis = std::move(*g);
  }
  rt.cfg.replicator->append(key, core.claim.epoch, std::move(genesis), std::move(commits),
                            std::move(done));
  return status::ok();
}

void maybe_compact(self_ptr self);

/// Replicated runtime: sends the commits the store captured since the last call to the log.
/// The gate holds whatever they may reveal until the log holds them (on_replicated); a store
/// that lost a commit's changes quarantines the entity (the log would never see that commit).
void replicate_commits(self_ptr self) {
  auto& s = self->state;
  auto* sink = s.rt->cfg.replicator.get();
  if (!sink || !s.core->store)
    return;
  auto gen = s.gate.commit_gen();
  auto commits = s.core->store->take_captured();
  if (!commits) {
    s.gate.quarantine(commits.error());
    return;
  }
  if (commits->empty()) {
    s.gate.replicated(gen); // the commit changed no row: nothing to wait for
    return;
  }
  auto me = caf::actor_cast<caf::actor>(self);
  if (!std::exchange(s.log_debt_taken, true))
    s.log_debt += s.rt->take_log_debt(s.key_str);
  for (auto& c : *commits)
    s.log_debt += c.changeset.size();
  auto st = send_captured(*s.rt, *s.core, s.key, std::move(*commits), [me, gen](const status& st) {
    caf::anon_send(me, atoms::replicated::value, gen, static_cast<int>(st.code()), st.message());
  });
  if (!st)
    s.gate.quarantine(st);
  else
    maybe_compact(self);
}

/// Replicated runtime, right after a commit's records were sent: once the changes sent since
/// the entity's last image reach replicated_image_ratio times the file's size (and
/// replicated_image_min_bytes), an
/// image of the whole file follows them, and the log drops the entity's records before it.
/// Nothing waits for it: a log that does not take it fails the commits after it too.
void maybe_compact(self_ptr self) {
  auto& s = self->state;
  auto min = s.rt->cfg.replicated_image_min_bytes;
  auto& store = *s.core->store;
  if (min == 0 || s.log_debt < std::max(min, s.log_debt_due) || store.in_batch() || s.committing)
    return; // (committing: a storage thread may be using the store's connection)
  // The file's size is looked at again only once the changes reach what it was last time (it
  // only grows meanwhile): not one stat per commit.
  std::error_code ec;
  auto size = std::filesystem::file_size(store.path(), ec);
  auto due = static_cast<uint64_t>(s.rt->cfg.replicated_image_ratio * static_cast<double>(size));
  if (!ec && s.log_debt < due) {
    s.log_debt_due = due;
    return;
  }
  auto img = store.image();
  if (!img) {
    s.log_debt_due = s.log_debt + min; // tried again after as many changes more
    s.rt->log_event({{"level", "warn"},
                     {"event", "replication_image_failed"},
                     {"entity", s.key.to_string()},
                     {"detail", img.error().to_string()}});
    return;
  }
  s.log_debt = s.log_debt_due = 0;
  s.rt->cfg.replicator->compact(s.key, s.core->claim.epoch, std::move(*img), [](const status&) {});
}

/// Resumes the suspended turn if its await completed while a job held the store.
void resume_if_woken(self_ptr self) {
  auto& s = self->state;
  auto* t = s.runner->current();
  if (t && t->suspended && t->woken)
    s.runner->resume();
}

} // namespace

void start_commit(self_ptr self) {
  auto& s = self->state;
  auto& store = *s.core->store;
  if (s.gate.quarantined()) {
    if (store.in_batch())
      (void)store.rollback();
    s.gate.hold(s.batch);
    pump(self);
    return;
  }
  auto& marks = s.runner->marks();
  bool deferred = s.rt->store_opts.defer_sync && s.rt->cfg.mode == durability::full;
  if (!marks.alarms_moved && (deferred || s.rt->cfg.mode == durability::normal)) {
    // Fast path: the commit writes the WAL on this thread (no fsync); the fsync runs on a
    // sync thread while the next batch executes here (pipelined group commit).
    auto seq = store.last_seq();
    auto facts = static_cast<uint64_t>(seq - s.committed_seq);
    auto turns = std::exchange(marks.turns, 0);
    if (auto st = owned_commit(*s.rt, *s.core); !st) {
      commit_failed(self, s.batch, st);
      handle_quarantine(self);
      pump(self); // nothing comes back to resume this entity
      return;
    }
    s.committed_seq = seq;
    measure_commit(s.core->meter, store);
    index_fleet_summary(*s.rt, s.key, s.core->meter, store);
    s.rt->stats.commits.inc();
    s.rt->stats.facts.inc(facts);
    s.rt->stats.turns_committed.inc(turns);
    if (facts > 0)
      notice_facts(s, s.batch, seq);
    if (deferred) {
      s.gate.committed();
      replicate_commits(self);
      s.gate.hold(s.batch);
      request_sync(self);
    } else {
      s.gate.committed_durable();
      replicate_commits(self);
      s.gate.hold(s.batch);
      maybe_checkpoint(self); // with deferred sync: after the sync (on_synced)
    }
    // A sync in flight resumes the entity when it returns (on_synced pumps). Without one (an
    // inline commit in durability normal) nothing comes back: run what queued meanwhile and
    // let an entity asked to hibernate close now. Within a suspended turn pump does nothing.
    if (s.gate.in_flight() == 0)
      pump(self);
    return;
  }
  // Slow path (the batch moved alarms, or durability is at-commit): the whole commit runs on a
  // storage thread, the alarm index written before it.
  s.committing = true;
  s.in_commit = std::move(s.batch);
  s.batch.clear();
  s.commit_seq = store.last_seq();
  s.commit_facts = static_cast<uint64_t>(s.commit_seq - s.committed_seq);
  s.commit_turns = std::exchange(marks.turns, 0);
  bool alarms = std::exchange(marks.alarms_moved, false);
  auto core = s.core;
  auto rt = s.rt;
  auto key = s.key;
  auto me = caf::actor_cast<caf::actor>(self);
  rt->pool.post([core, rt, key, me, alarms] {
    std::optional<int64_t> next;
    status st;
    if (alarms) {
      auto n = core->store->next_alarm();
      if (n && n->has_value())
        next = n->value().due_ms;
      // The index may say earlier than the entity, never later: an alarm this commit moves
      // earlier must be in the index first, or the commit does not happen.
      st = rt->sync_alarm_index(key, next, true);
      if (!st)
        (void)core->store->rollback();
    }
    if (st)
      st = owned_commit(*rt, *core);
    sync_report rep;
    if (st) {
      rep = core->tickets.run(0, [&] { return timed_sync(*rt, *core->store); });
      if (rep.st && alarms)
        (void)rt->sync_alarm_index(key, next, false); // later or gone: the index stays early
    }
    caf::anon_send(me, atoms::committed::value, static_cast<int>(st.code()), st.message(), alarms,
                   rep.ticket, rep.started_by_end, static_cast<int>(rep.st.code()),
                   rep.st.message());
  });
}

/// The suspended turn's awaited operation starts once everything the turn wrote before the
/// await is durable: its writes are committed (unless a commit runs on a storage thread now:
/// on_committed and on_checkpointed come back here), then the start waits in the output gate
/// like a reply (nothing leaves the entity, an outgoing call included, before the writes it
/// may reveal are durable).
void release_await(self_ptr self) {
  auto& s = self->state;
  if (!s.await_start.local || s.committing)
    return;
  if (s.core->store && s.core->store->dirty()) {
    start_commit(self);
    if (s.committing)
      return;
  }
  s.gate.hold(s.batch); // nothing uncommitted: frames the turn sent leave with what is durable
  output_gate<reply_to>::reply_batch b;
  b.emplace_back(std::move(s.await_start), call_reply::success("null"));
  s.await_start = {};
  s.gate.hold(b);
}

void on_synced(self_ptr self, const sync_report& r) {
  auto& s = self->state;
  s.gate.synced(r);
  if (s.gate.quarantined()) {
    handle_quarantine(self);
    pump(self);
    return;
  }
  request_sync(self);
  maybe_checkpoint(self);
  pump(self);
}

/// A commit that ran whole on a storage thread (commit + WAL sync) is done.
void on_committed(self_ptr self, const status& commit, bool alarms, const sync_report& rep) {
  auto& s = self->state;
  s.committing = false;
  if (commit) {
    s.rt->stats.commits.inc();
    s.rt->stats.facts.inc(s.commit_facts);
    s.rt->stats.turns_committed.inc(s.commit_turns);
    s.committed_seq = s.commit_seq;
    if (s.core->store) {
      measure_commit(s.core->meter, *s.core->store);
      index_fleet_summary(*s.rt, s.key, s.core->meter, *s.core->store);
    }
    if (s.commit_facts > 0)
      notice_facts(s, s.in_commit, s.commit_seq);
    s.gate.committed_and_synced(rep); // a failed sync quarantines: the commit landed
    replicate_commits(self);
    s.gate.hold(s.in_commit);
  } else {
    // The batch was rolled back whole: its keys were never recorded, so retries run again.
    commit_failed(self, s.in_commit, status{commit.code(), "commit failed: " + commit.message()});
    alarms = true;
  }
  if (alarms && s.core->store)
    rearm_from_store(self);
  handle_quarantine(self);
  release_await(self);
  resume_if_woken(self);
  maybe_checkpoint(self);
  pump(self);
}

// -- the replicated log -------------------------------------------------------------------------

void on_replicated(self_ptr self, uint64_t gen, const status& st) {
  auto& s = self->state;
  if (st) {
    s.gate.replicated(gen);
  } else {
    s.gate.quarantine(status{errc::unavailable, "the replicated log did not take the entity's "
                                                "commits (" +
                                                  st.to_string() + ")"});
    handle_quarantine(self);
  }
  maybe_close(self);
  pump(self);
}

status check_with_log(runtime_core& rt, entity_core& core, const entity_key& key) {
  auto& store = *core.store;
  auto made = store.take_captured(); // by the open: a claim, keys released
  if (!made)
    return made.error();
  // What the file held when the open began, before the open's own commits.
  auto last = rt.cfg.replicator->last_of(key);
  if (!last)
    return last.error();
  if (last->number != store.opened_at_commit() ||
      (last->number > 0 && last->id != store.opened_at_commit_id()))
    return {errc::conflict, "entity " + key.to_string() + ": its file holds replicated commit " +
                              std::to_string(store.opened_at_commit()) + " but the log's last is " +
                              std::to_string(last->number) +
                              ": the file must be rebuilt from the log before it serves"};
  if (made->empty())
    return status::ok();
  auto done = std::make_shared<std::promise<status>>();
  auto got = done->get_future();
  if (auto st = send_captured(rt, core, key, std::move(*made),
                              [done](const status& st) { done->set_value(st); });
      !st)
    return st;
  return got.get(); // the sink answers every append, within its own timeout
}

// -- checkpoints --------------------------------------------------------------------------------

namespace {

/// A failed checkpoint: SQLITE_BUSY (expected now and then, tried again) apart from errors.
void count_checkpoint_error(runtime_core* rt, const status& st) {
  (st.code() == errc::busy ? rt->stats.checkpoints_busy : rt->stats.checkpoint_failures).inc();
}

/// Keeps the WAL short. Past the configured size, a storage thread copies it into the database
/// through a connection of its own while this actor goes on committing (up to three rounds,
/// while commits made meanwhile keep more than a quarter of the threshold out); then the rest,
/// now small, is copied on the actor's own connection while the actor holds off, which lets
/// the next commit restart the WAL. (A checkpoint only on the actor's connection held every
/// call for the whole copy: tens of ms for a hot entity. Only concurrent ones never let the
/// WAL restart under steady load: some commit always lands during the copy.)
void maybe_checkpoint(self_ptr self) {
  auto& s = self->state;
  // Not while a commit runs on a storage thread (it moves wal_frames()), nor in quarantine.
  if (s.checkpointing || s.committing || s.ph != phase::ready || !s.core->store ||
      s.gate.quarantined())
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
      rt->stats.checkpoints.inc();
      if (!r)
        count_checkpoint_error(rt, r.error());
      caf::anon_send(me, atoms::checkpointed::value, true, r ? r.value() : -1);
    });
    return;
  }
  if (s.runner->busy() || store.in_batch())
    return; // the next sync tries again
  s.checkpointing = s.committing = true;
  rt->pool.post([core, rt, me] {
    auto st = core->store->checkpoint();
    if (!st)
      count_checkpoint_error(rt, st);
    caf::anon_send(me, atoms::checkpointed::value, false, st ? 0 : -1);
  });
}

} // namespace

/// A checkpoint on a storage thread is done (`concurrent`: through its own connection, which
/// left `done` frames in the database; else on the actor's connection). -1: it failed, which
/// only leaves the WAL longer: the next sync starts over.
void on_checkpointed(self_ptr self, bool concurrent, int done) {
  auto& s = self->state;
  s.checkpointing = false;
  if (s.core->store)
    measure_checkpoint(s.core->meter, *s.core->store);
  if (concurrent && done >= 0) {
    s.ckpt_done = done;
    maybe_checkpoint(self); // another round or the rest
  } else {
    s.ckpt_rounds = 0;
  }
  if (!concurrent) {
    s.committing = false;
    release_await(self);
    resume_if_woken(self);
  }
  pump(self);
}

} // namespace factum::detail
