// turn_runner.cpp: the turns of one entity (turn_runner.hpp). Runs on the entity's actor
// thread; every write joins the open batch through the turn's savepoint.
#include "turn/turn_runner.hpp"
#include "turn/call_errors.hpp"

#include <algorithm>

#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"
#include "turn/entity_context.hpp"
#include "turn/tool_call.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

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

/// Whether a dead letter in `s` still owns its call's idempotency key: a retry of it may yet
/// run the call, so a client's retry must not.
bool owns_key(dl_status s) {
  return s == dl_status::pending || s == dl_status::scheduled || s == dl_status::acknowledged;
}

constexpr std::string_view alarm_operation = "@alarm:";

} // namespace

// -- activation ---------------------------------------------------------------------------------

void turn_runner::attach(entity_store& store, entity& instance, entity_context& ctx) {
  store_ = &store;
  instance_ = &instance;
  ctx_ = &ctx;
  purge_alarm_known_ = false;
  dead_letter_keys_.reset();
  breakers_.clear();
  budgets_.clear();
  marks_ = {};
  outbox_.attach(env_.outbox, *env_.key, store);
}

void turn_runner::detach() {
  store_ = nullptr;
  instance_ = nullptr;
  ctx_ = nullptr;
  dead_letter_keys_.reset();
  breakers_.clear();
  budgets_.clear();
  outbox_.detach();
}

int64_t turn_runner::now() const {
  return ctx_->clock_ms();
}

// -- turns --------------------------------------------------------------------------------------

std::optional<call_reply> turn_runner::accept(const call_request& req, bool shared) {
  if (req.idempotency_key.empty() || shared || keys_in_flight_.insert(req.idempotency_key).second)
    return std::nullopt;
  env_.stats->key_conflicts.inc();
  return problems::idempotency_key_in_use.reply(
    "a call with this idempotency key is still in flight");
}

void turn_runner::answer(queued& item, call_reply r) {
  if (item.kind == turn_kind::call && !item.req.idempotency_key.empty())
    keys_in_flight_.erase(item.req.idempotency_key);
  host_.turn_answered(item, std::move(r));
}

std::optional<std::string> turn_runner::dead_letter_owning(const std::string& key) {
  if (!dead_letter_keys_) {
    dead_letter_keys_.emplace();
    for (auto s : {dl_status::pending, dl_status::scheduled, dl_status::acknowledged}) {
      auto l = value_or_throw(store().list_dead_letters(s, 100000));
      for (auto& d : l)
        if (!d.idempotency_key.empty())
          (*dead_letter_keys_)[d.idempotency_key] = d.id;
    }
  }
  auto it = dead_letter_keys_->find(key);
  if (it == dead_letter_keys_->end())
    return std::nullopt;
  // A hint: the turn that wrote it may have been rolled back since.
  auto dl = store().get_dead_letter(it->second);
  if (dl && owns_key(dl->status) && dl->idempotency_key == key)
    return dl->id;
  dead_letter_keys_->erase(it);
  return std::nullopt;
}

std::optional<call_reply> turn_runner::check_key(const call_request& req, int64_t now,
                                                 bool& resume) {
  auto& stats = *env_.stats;
  auto p = store().peek_key(req.idempotency_key, req.fingerprint, now);
  if (!p)
    return call_reply::failure(storage_error(p.error()));
  switch (p->outcome) {
  case key_outcome::fresh: break;
  case key_outcome::in_flight:
    // Pending on disk while no call with the key runs here (accept() refused those): its call
    // was interrupted at an await (a crash, a retryable failure), and this call resumes it,
    // unless a dead letter owns the key (its retry was the call interrupted: it resumes it).
    resume = true;
    break;
  case key_outcome::mismatch:
    stats.key_mismatches.inc();
    return problems::idempotency_key_mismatch.reply(
      "this idempotency key was used with a different request");
  case key_outcome::completed: {
    stats.replays.inc();
    auto r = call_reply::success(std::move(p->record.response));
    r.replayed = true;
    return r;
  }
  case key_outcome::failed: {
    stats.replays.inc();
    auto r = reply_from_stored_failure(p->record.response);
    r.replayed = true;
    return r;
  }
  }
  // Fresh or interrupted: unless a dead letter of an earlier attempt owns the key (its retry
  // runs the call).
  std::optional<std::string> owner;
  try {
    owner = dead_letter_owning(req.idempotency_key);
  } catch (const call_error& e) {
    return call_reply::failure(e);
  }
  if (!owner)
    return std::nullopt;
  stats.key_conflicts.inc();
  call_error e = problems::idempotency_key_in_use.error(
    "dead letter " + *owner +
    " holds this call: its retry runs it (see the entity's dead letters)");
  e.details["dead_letter_id"] = *owner;
  return call_reply::failure(e);
}

void turn_runner::run(queued item) {
  int64_t now = this->now();
  bool resume = false;
  if (item.kind == turn_kind::call && !item.req.idempotency_key.empty())
    if (auto r = check_key(item.req, now, resume)) {
      answer(item, std::move(*r));
      return;
    }
  turn_.emplace();
  auto& t = *turn_;
  t.resumed = t.key_on_disk = resume;
  t.item = std::move(item);
  t.info.method = t.item.req.method;
  t.info.idempotency_key = t.item.req.idempotency_key;
  t.info.trace_id = t.item.req.trace_id;
  t.info.args_json = t.item.req.args;
  t.info.fingerprint = t.item.req.fingerprint;
  if (auto st = store().begin_turn(); !st) {
    auto it = std::move(t.item);
    turn_.reset();
    answer(it, call_reply::failure(storage_error(st)));
    return;
  }
  try {
    switch (t.item.kind) {
    case turn_kind::activate:
      t.info.method = "@activate";
      start_task(instance_->on_activate(*ctx_),
                 [this](std::exception_ptr e) { finish(e, json(nullptr)); });
      return;
    case turn_kind::alarm: run_alarm(now); return;
    case turn_kind::call: run_call(); return;
    }
  } catch (...) {
    finish(std::current_exception(), std::nullopt);
  }
}

void turn_runner::run_call() {
  auto& t = *turn_;
  auto& r = t.item.req;
  if (!r.idempotency_key.empty()) {
    // The key is recorded finished in the turn's own savepoint; a duplicate meanwhile is
    // refused from keys_in_flight_. Keys expire: the purge alarm must be armed.
    auto ttl = static_cast<int64_t>(env_.cfg->key_ttl.count());
    if (ttl > 0 && !purge_alarm_known_) {
      purge_alarm_known_ = true;
      if (store().get_alarm(purge_alarm).error().code() == errc::not_found)
        ctx_->set_alarm_internal(
          purge_alarm, now() + std::max<int64_t>(ttl, env_.cfg->key_purge_interval.count()), "{}",
          0);
    }
  }
  json args = r.args.empty() ? json::object() : json::parse(r.args);
  if (is_connection_turn(r.method)) {
    run_connection_turn(r.method, args);
    return;
  }
  if (!r.method.empty() && r.method[0] == '@') {
    finish(nullptr, run_internal(r.method, args));
    return;
  }
  auto* m = env_.type->find(r.method);
  if (!m)
    throw problems::method_not_found.error("entity type " + env_.key->type + " has no method " +
                                           r.method);
  if (!r.idempotency_key.empty())
    start_journal(journal_key_of_call(r.idempotency_key), t.resumed);
  start_task(m->fn(*instance_, *ctx_, std::move(args)),
             [this](std::exception_ptr e, std::optional<json> v) { finish(e, std::move(v)); });
}

void turn_runner::run_alarm(int64_t now) {
  auto& t = *turn_;
  t.info.method = "@alarm";
  auto due = value_or_throw(store().next_alarm());
  if (!due || due->due_ms > now) {
    finish(nullptr, json(nullptr)); // nothing due (a duplicate wake)
    return;
  }
  t.alarm = *due;
  t.info.trace_id = new_trace_id();
  auto& stats = *env_.stats;
  stats.alarm_lag.observe(std::chrono::milliseconds(std::max<int64_t>(0, now - t.alarm.due_ms)));
  if (t.alarm.name.rfind("@dl:", 0) == 0) {
    run_dead_letter_retry();
    return;
  }
  if (t.alarm.name == purge_alarm) {
    run_purge(now);
    return;
  }
  if (is_schedule_alarm(t.alarm.name)) {
    run_schedule(now);
    return;
  }
  if (t.alarm.name == outbox_alarm) {
    start_task(outbox_.run(*ctx_, store()),
               [this](std::exception_ptr e) { finish(e, json(nullptr)); });
    return;
  }
  start_journal(alarm_run_journal(store(), t.alarm.name), true);
  start_task(instance_->on_alarm(*ctx_, t.alarm),
             [this](std::exception_ptr e) { finish(e, json(nullptr)); });
}

void turn_runner::run_dead_letter_retry() {
  auto& t = *turn_;
  auto dl = store().get_dead_letter(t.alarm.name.substr(4));
  if (!dl || dl->status != dl_status::scheduled) {
    finish(nullptr, json(nullptr)); // resolved or discarded meanwhile
    return;
  }
  t.dead_letter_id = dl->id;
  t.info.trace_id = dl->trace_id.empty() ? new_trace_id() : dl->trace_id;
  auto payload = json::parse(dl->payload, nullptr, false);
  if (dl->operation.rfind(outbox_operation, 0) == 0) { // a fact an outbox sink refused
    t.info.method = dl->operation;
    start_task(outbox_.redeliver(*ctx_, store(), *dl),
               [this](std::exception_ptr e) { finish(e, json(nullptr)); });
    return;
  }
  if (dl->operation.rfind(alarm_operation, 0) == 0) {
    // An alarm whose retries ran out: its handler runs again with the alarm as it was.
    auto& a = t.retried_alarm;
    a.name = dl->operation.substr(alarm_operation.size());
    a.due_ms = dl->first_attempt_ms;
    a.payload = dl->payload;
    a.attempts = dl->attempts;
    if (is_schedule_alarm(a.name))
      a = fire_of_dead_letter(a);
    t.info.method = "@alarm";
    start_journal(a.schedule ? schedule_journal_key(a.name, a.due_ms)
                             : alarm_run_journal(store(), a.name),
                  true);
    start_task(instance_->on_alarm(*ctx_, a),
               [this](std::exception_ptr e) { finish(e, json(nullptr)); });
    return;
  }
  const method_def* m = env_.type->find(dl->operation);
  if (!m || !payload.is_object())
    throw problems::method_not_found.error("dead letter " + dl->id + " names no method of " +
                                           env_.key->type);
  // The original call again, with its idempotency key (its config version stays locked in the
  // dead letter and in the tool's config rows).
  t.info.method = dl->operation;
  t.info.idempotency_key = dl->idempotency_key;
  auto args = payload.value("args", json::object());
  t.info.args_json = args.dump();
  // The fingerprint the client's key was taken with (older dead letters have none: the
  // runtime's own form then).
  t.item.req.fingerprint = payload.value("fingerprint", std::string());
  if (t.item.req.fingerprint.empty())
    t.item.req.fingerprint = call_fingerprint(t.info.method, t.info.args_json);
  t.info.fingerprint = t.item.req.fingerprint;
  start_journal(dead_letter_journal(store(), *dl), true);
  start_task(m->fn(*instance_, *ctx_, std::move(args)),
             [this](std::exception_ptr e, std::optional<json> v) { finish(e, std::move(v)); });
}

void turn_runner::start_journal(std::string key, bool recorded) {
  if (!env_.cfg->journal)
    return;
  std::vector<journal_step> steps;
  if (recorded)
    steps = value_or_throw(store().journal(key));
  if (turn_->resumed)
    env_.stats->journal_resumes.inc();
  journal_.start(std::move(key), std::move(steps));
}

void turn_runner::run_purge(int64_t now) {
  value_or_throw(store().purge_expired_keys(now));
  // Dead letters whose retention ended (final or acknowledged ones only) go too.
  value_or_throw(store().purge_dead_letters(now));
  std::optional<int64_t> next;
  if (auto k = store().next_key_expiry(); k && k->has_value())
    next = std::max(k->value(), now + static_cast<int64_t>(env_.cfg->key_purge_interval.count()));
  if (auto d = store().next_dead_letter_expiry(); d && d->has_value())
    next = next ? std::min(*next, d->value()) : d->value();
  if (next)
    ctx_->set_alarm_internal(purge_alarm, std::max(*next, now + 1), "{}", 0);
  finish(nullptr, json(nullptr));
}

void turn_runner::arm_purge(int64_t due_ms) {
  auto cur = store().get_alarm(purge_alarm);
  if (cur && cur->due_ms <= due_ms)
    return;
  ctx_->set_alarm_internal(purge_alarm, due_ms, "{}", 0);
}

void turn_runner::dead_letter_written(const dead_letter_record& dl) {
  if (turn_ && dl.id == turn_->dead_letter_id)
    turn_->dead_letter_rewritten = true;
  if (dead_letter_keys_ && !dl.idempotency_key.empty()) {
    if (owns_key(dl.status))
      (*dead_letter_keys_)[dl.idempotency_key] = dl.id;
    else
      dead_letter_keys_->erase(dl.idempotency_key);
  }
  // Retention runs for final and acknowledged ones: the purge must come then, whether or not a
  // keyed call ever armed it.
  bool retention_runs = dl.status == dl_status::resolved || dl.status == dl_status::discarded ||
                        dl.status == dl_status::acknowledged;
  if (retention_runs && dl.expires_at_ms)
    arm_purge(*dl.expires_at_ms);
}

json turn_runner::run_internal(const std::string& method, const json& args) {
  if (is_read(method))
    return read_internal(method, args, turn_->cursor);
  if (method == "@dead_letter")
    return act_on_dead_letter(*ctx_, args);
  if (method == "@breaker")
    return act_on_breaker(*ctx_, args);
  if (method == "@resume_paused")
    return resume_paused(args);
  if (method == "@degradation") { // the degradation watcher's record (degradation_watch.cpp)
    fact_draft d;
    d.type = "lifecycle";
    d.subtype = args.value("subtype", "degradation_level_changed");
    d.data = args.value("data", json::object());
    auto f = ctx_->append(std::move(d));
    return {{"seq", f.seq}, {"fact_id", f.fact_id}};
  }
  if (method == "@shared_failed") { // a shared call's failure, recorded as an error fact
    call_error ce(parse_error_category(args.value("category", "")).value_or(error_category::server),
                  args.value("code", "FAILED"), args.value("message", ""));
    auto& t = *turn_;
    t.info.method = args.value("method", "");
    t.info.trace_id = args.value("trace_id", t.info.trace_id);
    append_error_fact(ce, "",
                      json{{"shared", true}, {"retryable", args.value("retryable", false)}});
    return nullptr;
  }
  throw problems::method_not_found.error("no internal method " + method);
}

// -- awaits -------------------------------------------------------------------------------------

void turn_runner::suspend(std::coroutine_handle<> h, uint64_t token) {
  auto& t = *turn_;
  t.suspended = true;
  t.woken = false;
  t.handle = h;
  t.token = token;
  // An await is a commit point: the turn's writes so far stay, and its key becomes a pending
  // row, released on reopen if this activation dies while waiting.
  if (!t.info.idempotency_key.empty() && !t.key_on_disk && !t.lost_at_await) {
    auto b = store().begin_key(t.info.idempotency_key, t.item.req.fingerprint,
                               static_cast<int64_t>(env_.cfg->key_ttl.count()), now());
    t.key_on_disk = b.is_ok();
  }
  // The facts committed at the await arm the outbox with them (a failure here is tried again
  // at the turn's end).
  try {
    outbox_.after_writes(*ctx_, store());
  } catch (const call_error&) {
  }
  (void)store().end_turn(true);
}

void turn_runner::lost_at_await(const status& st) {
  if (!turn_)
    return;
  turn_->key_on_disk = false; // the pending row went with the commit
  if (!turn_->lost_at_await)
    turn_->lost_at_await = st;
}

void turn_runner::resume() {
  auto& t = *turn_;
  t.suspended = false;
  (void)store().begin_turn();
  t.handle.resume();
}

void turn_runner::commit_failed() {
  purge_alarm_known_ = false;
  outbox_.commit_failed();
  dead_letter_keys_.reset();
  breakers_.clear(); // reloaded from the store, which no longer has what the batch wrote
}

// -- ending a turn ------------------------------------------------------------------------------

void turn_runner::finish(std::exception_ptr err, std::optional<json> value) {
  auto& t = *turn_;
  // A commit at an await failed: that is the turn's failure, whatever the handler made of the
  // await that could not start.
  if (t.lost_at_await)
    err = std::make_exception_ptr(storage_error(*t.lost_at_await));
  call_reply reply;
  if (!err) {
    try {
      reply = finish_ok(value);
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (err)
    reply = finish_failed(to_call_error(err));
  journal_.stop();
  auto item = std::move(t.item);
  turn_.reset();
  answer(item, std::move(reply));
}

call_reply turn_runner::finish_ok(const std::optional<json>& value) {
  auto& t = *turn_;
  auto& store = this->store();
  outbox_.after_writes(*ctx_, store); // in the commit of the facts it relays
  auto body = value ? json_text(*value) : std::string("null");
  auto ttl = static_cast<int64_t>(env_.cfg->key_ttl.count());
  if (t.item.kind == turn_kind::call && !t.info.idempotency_key.empty())
    throw_if(t.key_on_disk ? store.complete_key(t.info.idempotency_key, body)
                           : store.record_key(t.info.idempotency_key, key_status::completed,
                                              t.item.req.fingerprint, body, ttl, now()));
  if (t.item.kind == turn_kind::alarm && !t.dead_letter_id.empty()) {
    auto dl = value_or_throw(store.get_dead_letter(t.dead_letter_id));
    // The dead letter owns its key: the retry that succeeded records it for the client.
    if (!t.info.idempotency_key.empty())
      throw_if(store.record_key(t.info.idempotency_key, key_status::completed,
                                t.item.req.fingerprint, body, ttl, now()));
    auto from = dl.status;
    dl.status = dl_status::resolved;
    dl.updated_at_ms = now();
    dl.next_retry_ms.reset();
    throw_if(store.put_dead_letter(dl));
    dead_letter_written(dl);
    if (!t.alarm.name.empty() && journal_.active() && journal_.key().rfind("key:", 0) != 0)
      throw_if(store.purge_journal(journal_.key())); // an alarm's or an unkeyed call's
    fact_draft life;
    life.type = "lifecycle";
    life.subtype = "dead_letter_resolved";
    life.trace_id = t.info.trace_id;
    life.data = {{"dead_letter_id", dl.id},
                 {"previous_status", std::string(to_string(from))},
                 {"new_status", "resolved"},
                 {"result", json::parse(body, nullptr, false)}};
    value_or_throw(store.append(life));
  }
  if (t.item.kind == turn_kind::alarm && !t.alarm.name.empty()) {
    env_.stats->alarms_fired.inc();
    if (t.rearm) // the occurrence the run set, in the commit that ends the run
      ctx_->set_alarm_internal(t.rearm->name, t.rearm->due_ms, t.rearm->payload, 0);
    bool reset =
      std::find(t.alarms_set.begin(), t.alarms_set.end(), t.alarm.name) != t.alarms_set.end();
    if (!reset) {
      throw_if(store.cancel_alarm(t.alarm.name));
      marks_.alarms_moved = true;
    }
    // This occurrence of the alarm is done: its journal goes.
    if (t.dead_letter_id.empty() && journal_.active())
      throw_if(store.purge_journal(journal_.key()));
  }
  throw_if(store.end_turn(true));
  ++marks_.turns;
  if (t.item.kind != turn_kind::call)
    return call_reply::success("null");
  auto reply = call_reply::success(std::move(body));
  reply.cursor = std::move(t.cursor);
  return reply;
}

call_reply turn_runner::finish_failed(const call_error& ce) {
  auto& t = *turn_;
  auto& store = this->store();
  auto reply = call_reply::failure(ce);
  // The turn's own writes go (unless the handler asked to keep them); earlier turns stay.
  (void)store.end_turn(ce.keep_writes && !t.lost_at_await);
  breakers_.clear(); // an operator's or a tool's change of this turn went with them
  try {
    throw_if(store.begin_turn());
    if (t.item.kind == turn_kind::alarm && !t.dead_letter_id.empty())
      dead_letter_retry_failed(ce);
    else if (t.item.kind == turn_kind::alarm && t.alarm.name == outbox_alarm)
      outbox_failed(ce);
    else if (t.item.kind == turn_kind::alarm && !t.alarm.name.empty())
      is_schedule_alarm(t.alarm.name) ? schedule_failed(ce) : alarm_failed(ce);
    else
      append_error_fact(ce, "", json::object());
    bool keyed_call = t.item.kind == turn_kind::call && !t.info.idempotency_key.empty();
    bool mismatch = ce.code() == problems::journal_mismatch.code;
    if (mismatch)
      env_.stats->journal_mismatches.inc();
    if (keyed_call && mismatch) {
      // Not a failure to store (a fixed handler may yet run the call): a dead letter owns it.
      journal_mismatch_dead_letter(ce);
      call_error owned = ce;
      owned.details["dead_letter_id"] = t.dead_letter_id;
      reply = call_reply::failure(owned);
      if (t.key_on_disk)
        throw_if(store.release_key(t.info.idempotency_key));
    } else {
      // The key may have been committed as pending at an await. A retryable failure keeps it
      // pending with its journal: a retry resumes the call. Else it is released; a dead
      // letter's retry gives it back to the dead letter, which still owns it (check_key names
      // it), and the dead letter's next retry replays the journal.
      // A failure that kept its writes ended the call (a compensated saga): nothing resumes
      // it, and its journal goes unless a dead letter's retry is to replay it.
      bool owned = keyed_call && dead_letter_owning(t.info.idempotency_key);
      bool keep = keyed_call && t.key_on_disk && ce.retryable() && journal_.active() && !owned &&
                  !ce.keep_writes;
      if (t.key_on_disk && !t.info.idempotency_key.empty() && !keep)
        throw_if(store.release_key(t.info.idempotency_key));
      if (keyed_call && ce.keep_writes && !owned && journal_.active())
        throw_if(store.purge_journal(journal_.key()));
      // Store the failure when it is terminal so that a retry replays it.
      if (keyed_call && !ce.retryable())
        throw_if(store.record_key(t.info.idempotency_key, key_status::failed,
                                  t.item.req.fingerprint, reply.body,
                                  static_cast<int64_t>(env_.cfg->key_ttl.count()), now()));
    }
    outbox_.after_writes(*ctx_, store);
    throw_if(store.end_turn(true));
    ++marks_.turns;
  } catch (...) {
    (void)store.end_turn(false);
    // The failure could not even be recorded: the store is failing. Answer with that.
    reply = call_reply::failure(to_call_error(std::current_exception()));
  }
  return reply;
}

void turn_runner::journal_mismatch_dead_letter(const call_error& ce) {
  auto& t = *turn_;
  int64_t now = this->now();
  dead_letter_record dl;
  dl.id = "dl_" + sha256_hex(env_.key->to_string() + "\n" + t.info.idempotency_key + "\n" +
                             std::to_string(now))
                    .substr(0, 24);
  dl.operation = t.info.method;
  dl.payload = json{{"args", json::parse(t.info.args_json, nullptr, false)},
                    {"fingerprint", t.info.fingerprint}}
                 .dump();
  dl.idempotency_key = t.info.idempotency_key;
  dl.error_code = ce.code();
  dl.error_message = ce.what();
  dl.error_category = std::string(to_string(ce.category()));
  dl.reason = "journal_mismatch";
  dl.attempts = 1;
  dl.first_attempt_ms = dl.last_attempt_ms = dl.created_at_ms = dl.updated_at_ms = now;
  dl.trace_id = t.info.trace_id;
  dl.status = dl_status::pending;
  throw_if(store().put_dead_letter(dl));
  dead_letter_written(dl);
  env_.stats->dead_letters.inc();
  t.dead_letter_id = dl.id;
  fact_draft life;
  life.type = "lifecycle";
  life.subtype = "dead_letter_created";
  life.trace_id = t.info.trace_id;
  life.idempotency_key = t.info.idempotency_key;
  life.data = {{"dead_letter_id", dl.id},
               {"status", "pending"},
               {"reason", dl.reason},
               {"attempts", dl.attempts},
               {"journal", journal_.key()}};
  value_or_throw(store().append(life));
}

void turn_runner::dead_letter_retry_failed(const call_error& ce) {
  auto& t = *turn_;
  auto& store = this->store();
  append_error_fact(ce, "", json{{"dead_letter_id", t.dead_letter_id}});
  auto dl = store.get_dead_letter(t.dead_letter_id);
  if (dl && !t.dead_letter_rewritten) { // the tool did not reschedule it
    dl->status = dl_status::pending;
    dl->updated_at_ms = now();
    dl->next_retry_ms.reset();
    dl->error_code = ce.code();
    dl->error_message = ce.what();
    throw_if(store.put_dead_letter(*dl));
    dead_letter_written(*dl);
  }
  bool reset =
    std::find(t.alarms_set.begin(), t.alarms_set.end(), t.alarm.name) != t.alarms_set.end();
  if (!reset)
    throw_if(store.cancel_alarm(t.alarm.name));
  marks_.alarms_moved = true;
}

void turn_runner::alarm_failed(const call_error& ce) {
  auto& t = *turn_;
  auto& store = this->store();
  auto& cfg = *env_.cfg;
  int64_t attempts = t.alarm.attempts + 1;
  append_error_fact(ce, "alarm_failed", {{"alarm", t.alarm.name}, {"attempt", attempts}});
  fact_draft life;
  life.type = "lifecycle";
  life.trace_id = t.info.trace_id;
  if (attempts > cfg.alarm_max_retries) {
    env_.stats->alarms_dead_lettered.inc();
    int64_t now = this->now();
    dead_letter_record dl;
    dl.id =
      "dl_" + sha256_hex(env_.key->to_string() + t.alarm.name + std::to_string(now)).substr(0, 24);
    dl.operation = std::string(alarm_operation) + t.alarm.name;
    dl.payload = t.alarm.payload;
    dl.error_code = ce.code();
    dl.error_message = ce.what();
    dl.error_category = std::string(to_string(ce.category()));
    dl.reason = "alarm_retries_exhausted";
    dl.attempts = attempts;
    dl.first_attempt_ms = t.alarm.due_ms;
    dl.last_attempt_ms = now;
    dl.created_at_ms = now;
    dl.updated_at_ms = now;
    dl.trace_id = t.info.trace_id;
    throw_if(store.put_dead_letter(dl));
    dead_letter_written(dl);
    throw_if(store.cancel_alarm(t.alarm.name));
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
               {"max_retries", cfg.alarm_max_retries},
               {"dead_letter_id", dl.id}};
    value_or_throw(store.append(e2));
  } else {
    env_.stats->alarm_retries.inc();
    auto delay = static_cast<int64_t>(cfg.alarm_retry_base.count()) *
                 (int64_t{1} << std::min<int64_t>(attempts - 1, 30));
    int64_t due = now() + delay;
    ctx_->set_alarm_internal(t.alarm.name, due, t.alarm.payload, attempts);
    life.subtype = "alarm_retry_scheduled";
    life.data = {
      {"alarm", t.alarm.name}, {"attempt", attempts}, {"retry_at", due}, {"delay_ms", delay}};
  }
  marks_.alarms_moved = true;
  value_or_throw(store.append(life));
}

void turn_runner::outbox_failed(const call_error& ce) {
  auto& t = *turn_;
  int64_t attempts = t.alarm.attempts + 1;
  append_error_fact(ce, "alarm_failed", {{"alarm", t.alarm.name}, {"attempt", attempts}});
  auto delay = std::min<int64_t>(static_cast<int64_t>(env_.cfg->alarm_retry_base.count()) *
                                   (int64_t{1} << std::min<int64_t>(attempts - 1, 30)),
                                 60'000);
  ctx_->set_alarm_internal(t.alarm.name, now() + delay, t.alarm.payload, attempts);
  env_.stats->alarm_retries.inc();
}

void turn_runner::append_error_fact(const call_error& ce, const std::string& subtype,
                                    const json& extra) {
  auto& t = *turn_;
  fact_draft d;
  d.type = "error";
  d.subtype = subtype.empty() ? std::string(to_string(ce.category())) : subtype;
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
  value_or_throw(store().append(d));
}

} // namespace factum::detail
