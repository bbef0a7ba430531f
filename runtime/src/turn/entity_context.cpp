// entity_context.cpp: the handler's context and the tool host (entity_context.hpp), and the
// journaling of what a handler does in a journaled turn (journal.hpp): each operation of the
// context records its result while the turn is live and returns the recorded one while it
// replays. Runs on the entity's actor thread, inside a turn.
#include "turn/entity_context.hpp"
#include "turn/call_errors.hpp"

#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// A seed per generator: a per-thread splitmix64 sequence, itself seeded once per thread.
uint64_t next_seed() {
  thread_local uint64_t state =
    (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint64_t>(now_ms());
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

} // namespace

// -- tool_host ----------------------------------------------------------------------------------

std::mt19937_64& entity_context::rng() {
  // Made at first use (only tool retries draw from it): a std::random_device and 2.5 KiB of
  // generator state per activation cost more than most activations do otherwise.
  if (!rng_)
    rng_ = std::make_unique<std::mt19937_64>(next_seed());
  return *rng_;
}

std::string entity_context::retrying_dead_letter() {
  auto* t = runner_.current();
  return t ? t->dead_letter_id : std::string();
}

// -- the journal ---------------------------------------------------------------------------------

turn_journal* entity_context::journal() const {
  auto& j = runner_.journal();
  return j.recording() ? &j : nullptr;
}

std::optional<json> entity_context::begin_step(turn_journal& j, std::string_view kind,
                                               const std::string& what,
                                               const std::string& fingerprint, int64_t& step,
                                               int64_t& started_ms) {
  auto s = j.begin_step(kind, what, fingerprint, clock_ms());
  step = s.step;
  step_rerun_ = s.row.runs <= 1 ? step_rerun::no
                : s.cut_off     ? step_rerun::after_cut_off
                                : step_rerun::after_end;
  if (s.result) {
    env_.stats->journal_steps_replayed.inc();
    return s.result;
  }
  started_ms = s.row.started_at_ms;
  try {
    // (A journal begun afresh has no rows to replace: a key's journal goes with the key, or
    // when the dead letter that owned the key is discarded.)
    if (s.row.runs > 1) // a step run again: the steps after it go (journal.hpp)
      throw_if(store().purge_journal(j.key(), s.step));
    throw_if(store().put_journal_step(s.row));
  } catch (...) {
    j.end_step();
    throw;
  }
  env_.stats->journal_steps.inc();
  return std::nullopt;
}

void entity_context::end_step(turn_journal& j, int64_t step, const std::optional<json>& result) {
  j.end_step();
  if (result)
    throw_if(store().finish_journal_step(j.key(), step, json_text(*result), clock_ms()));
  else // it ran to an end: what its attempts cost is recorded with this
    throw_if(store().end_journal_step(j.key(), step, clock_ms()));
  // The step's record (and what the step wrote: a tool's error and cost facts) stays even if
  // the handler fails later.
  throw_if(store().end_turn(true));
  throw_if(store().begin_turn());
}

std::string entity_context::step_key(const char* prefix, const turn_journal& j,
                                     int64_t step) const {
  return prefix + sha256_hex(env_.key->to_string() + "\n" + j.key() + "\n" + std::to_string(step))
                    .substr(0, 40);
}

// -- context: asynchronous operations -------------------------------------------------------------

task<tool_reply> entity_context::call_tool(tool_request req) {
  auto* j = journal();
  int64_t step = 0, started = 0;
  if (j) {
    auto fp = sha256_hex(req.payload.dump() + "\n" + req.idempotency_key);
    if (auto r = begin_step(*j, "tool", req.tool + "/" + req.operation, fp, step, started))
      co_return tool_reply_from_journal(*r);
    // The key the vendor sees: the one every run of this step sends (docs/tools.md).
    if (req.idempotency_key.empty())
      req.idempotency_key = derived_tool_key(
        *env_.key, call().idempotency_key.empty() ? j->key() : call().idempotency_key, req, step);
  }
  tool_reply r;
  try {
    rerun_ = j ? step_rerun_ : step_rerun::no; // read by the call before its first await
    auto inner = resilient_tool_call(*this, std::move(req));
    r = co_await inner;
  } catch (...) {
    if (j)
      j->end_step();
    throw;
  }
  if (j) {
    // A call that failed retryably, or ended as a dead letter, is not done: a retry of the turn
    // (or the dead letter's) runs it again.
    std::optional<json> done;
    if (r.ok || (r.dead_letter_id.empty() && !retryable(r.category)))
      done = journal_result(r);
    end_step(*j, step, done);
  } else {
    // The attempts' error, cost and dead-letter records stay even if the handler fails later.
    (void)store().end_turn(true);
    (void)store().begin_turn();
  }
  co_return r;
}

task<tool_reply> entity_context::call_tool_once(tool_request req) {
  auto* j = journal();
  int64_t step = 0, started = 0;
  if (j) {
    auto fp = sha256_hex(req.payload.dump() + "\n" + req.idempotency_key);
    if (auto r = begin_step(*j, "tool", req.tool + "/" + req.operation, fp, step, started))
      co_return tool_reply_from_journal(*r);
    if (req.idempotency_key.empty())
      req.idempotency_key = step_key("fk_", *j, step);
  }
  tool_reply r;
  try {
    auto op = async_op<tool_reply>(
      *this, [this, req = std::move(req)](std::function<void(tool_reply)> done) {
        start_tool_call(req, std::move(done));
      });
    r = co_await op;
  } catch (...) {
    if (j)
      j->end_step();
    throw;
  }
  if (j)
    end_step(*j, step,
             r.ok || !retryable(r.category) ? std::optional<json>(journal_result(r))
                                            : std::nullopt);
  co_return r;
}

task<call_reply> entity_context::call(const std::string& type, const std::string& id,
                                      std::string method, json args, call_options opts) {
  auto* j = journal();
  int64_t step = 0, started = 0;
  if (j) {
    auto fp = sha256_hex(args.dump() + "\n" + opts.idempotency_key);
    if (auto r = begin_step(*j, "call", type + "/" + id + "/" + method, fp, step, started))
      co_return call_reply_from_journal(*r);
    // The callee de-duplicates a run of this step again by this key.
    if (opts.idempotency_key.empty())
      opts.idempotency_key = step_key("jc_", *j, step);
  }
  call_reply r;
  try {
    auto op = async_op<call_reply>(
      *this, [this, type, id, method = std::move(method), args = args.dump(),
              opts = std::move(opts)](std::function<void(call_reply)> done) mutable {
        start_entity_call(type, id, std::move(method), std::move(args), std::move(opts),
                          std::move(done));
      });
    r = co_await op;
  } catch (...) {
    if (j)
      j->end_step();
    throw;
  }
  if (j) // a retryable failure is not done: a retry of the turn calls again
    end_step(*j, step,
             r.ok || !r.retryable ? std::optional<json>(journal_result(r)) : std::nullopt);
  co_return r;
}

task<bool> entity_context::sleep(std::chrono::milliseconds d) {
  auto* j = journal();
  int64_t step = 0, started = 0;
  auto wait = d;
  if (j) {
    auto what = std::to_string(d.count()) + "ms";
    if (auto r = begin_step(*j, "sleep", what, what, step, started))
      co_return true;
    // A replay that reaches a sleep in flight waits only for what was left of it.
    wait = std::chrono::milliseconds(std::max<int64_t>(0, started + d.count() - clock_ms()));
  }
  bool r = false;
  try {
    auto op = async_op<bool>(*this, [this, wait](std::function<void(bool)> done) {
      port_.start_timer(wait, std::move(done));
    });
    r = co_await op;
  } catch (...) {
    if (j)
      j->end_step();
    throw;
  }
  if (j)
    end_step(*j, step, json(r));
  co_return r;
}

// -- context: identity, clock, random ----------------------------------------------------------

const call_info& entity_context::call() const {
  static const call_info none;
  auto* t = runner_.current();
  return t ? t->info : none;
}

int64_t entity_context::now_ms() const {
  auto t = clock_ms();
  if (auto* j = journal()) {
    if (auto r = j->replay("now", ""))
      return r->get<int64_t>();
    j->record("now", "", t);
  }
  return t;
}

uint64_t entity_context::random() {
  auto* j = journal();
  if (j)
    if (auto r = j->replay("random", ""))
      return r->get<uint64_t>();
  auto v = rng()();
  if (j)
    j->record("random", "", v);
  return v;
}

// -- context: facts, tables, alarms, configs ---------------------------------------------------

namespace {

std::string fact_what(const fact_draft& d) {
  return d.subtype.empty() ? d.type : d.type + "/" + d.subtype;
}

/// A SQL text as an entry names it: its first 120 bytes.
std::string sql_what(std::string_view q) {
  return std::string(q.substr(0, 120));
}

/// An alarm as ctx.alarms() records it in a journal's entry (not the form of record_json.hpp:
/// a replay reads these entries back).
json alarm_entry(const alarm_record& a) {
  return {{"name", a.name},
          {"due_ms", a.due_ms},
          {"payload", a.payload},
          {"attempts", a.attempts},
          {"created_at_ms", a.created_at_ms}};
}

} // namespace

fact entity_context::append(fact_draft d) {
  auto* j = journal();
  if (j && j->replaying())
    if (auto r = j->replay("append", fact_what(d))) {
      // The fact the first run appended; a draft whose data differ is a divergence too (the
      // first run's data may have come from outside the context: a clock, a random device).
      auto f = value_or_throw(store().get(r->get<int64_t>()));
      if (json::parse(f.data, nullptr, false) != d.data)
        throw journal_mismatch("the handler appended " + fact_what(d) +
                               " with other data than "
                               "fact " +
                               std::to_string(f.seq) + " its first run appended");
      return f;
    }
  if (d.trace_id.empty())
    d.trace_id = call().trace_id;
  if (d.idempotency_key.empty())
    d.idempotency_key = call().idempotency_key;
  auto f = value_or_throw(store().append(d));
  if (j)
    j->record("append", fact_what(d), f.seq);
  return f;
}

std::vector<fact> entity_context::query(const fact_filter& f) {
  auto* j = journal();
  if (j)
    if (auto r = j->replay("query", "facts")) {
      // Facts never change: the ones the first run read, by seq.
      std::vector<fact> out;
      for (auto& seq : *r)
        out.push_back(value_or_throw(store().get(seq.get<int64_t>())));
      return out;
    }
  auto out = value_or_throw(store().query(f));
  if (j) {
    json seqs = json::array();
    for (auto& fa : out)
      seqs.push_back(fa.seq);
    j->record("query", "facts", std::move(seqs));
  }
  return out;
}

json entity_context::sql(std::string_view q, const json& params) {
  return journaled_sql(q, params, true);
}

json entity_context::sql_write(std::string_view q, const json& params) {
  return journaled_sql(q, params, false);
}

json entity_context::journaled_sql(std::string_view q, const json& params, bool read_only) {
  auto* j = journal();
  std::string_view kind = read_only ? "sql" : "sql_write";
  if (j)
    if (auto r = j->replay(kind, sql_what(q)))
      return *r;
  auto out = value_or_throw(store().tenant_sql(q, params, read_only));
  if (j)
    j->record(kind, sql_what(q), out);
  return out;
}

void entity_context::set_alarm(std::string name, int64_t due_ms, json payload) {
  if (name.empty() || name[0] == '@')
    throw problems::invalid_alarm.error("alarm names must be non-empty and not start with '@'");
  auto* j = journal();
  // The alarm's own run sets it again: the new occurrence waits for the run's end (turn::rearm),
  // and is taken again when a retry of the run replays this.
  auto* own = j && is_alarm_journal(j->key(), name) ? runner_.current() : nullptr;
  bool replayed = j && j->replay("set_alarm", name);
  if (own) {
    own->rearm = alarm_record{name, due_ms, payload.dump(), 0, clock_ms()};
  } else if (!replayed) {
    // A new occurrence set by another turn: the journal of a run of the alarm that was
    // interrupted is not its own.
    for (auto& k : alarm_journals(store(), name))
      throw_if(store().purge_journal(k));
    set_alarm_internal(name, due_ms, payload.dump(), 0);
  }
  if (j && !replayed)
    j->record("set_alarm", name, nullptr);
}

void entity_context::set_alarm_internal(std::string name, int64_t due_ms, std::string payload,
                                        int64_t attempts) {
  alarm_record a{name, due_ms, std::move(payload), attempts, clock_ms()};
  throw_if(store().set_alarm(a));
  runner_.marks().alarms_moved = true;
  if (auto* t = runner_.current())
    t->alarms_set.push_back(std::move(name));
}

void entity_context::cancel_alarm(std::string_view name) {
  auto* j = journal();
  if (auto* t = runner_.current(); t && t->rearm && t->rearm->name == name)
    t->rearm.reset(); // its own run cancels the occurrence it set
  if (j && j->replay("cancel_alarm", name))
    return;
  throw_if(store().cancel_alarm(name));
  runner_.marks().alarms_moved = true;
  if (j)
    j->record("cancel_alarm", name, nullptr);
}

std::vector<alarm_record> entity_context::alarms() {
  auto* j = journal();
  if (j)
    if (auto r = j->replay("alarms", "")) {
      std::vector<alarm_record> out;
      for (auto& a : *r)
        out.push_back(alarm_record{a.value("name", ""), a.value("due_ms", int64_t{0}),
                                   a.value("payload", "{}"), a.value("attempts", int64_t{0}),
                                   a.value("created_at_ms", int64_t{0})});
      return out;
    }
  auto out = value_or_throw(store().list_alarms());
  if (j) {
    json all = json::array();
    for (auto& a : out)
      all.push_back(alarm_entry(a));
    j->record("alarms", "", std::move(all));
  }
  return out;
}

std::optional<config_record> entity_context::config(std::string_view id, int64_t version) {
  auto* j = journal();
  if (j)
    if (auto r = j->replay("config", id)) {
      if (r->is_null())
        return std::nullopt;
      return config_record{r->value("config_id", ""), r->value("version", int64_t{0}),
                           r->value("body", "{}"), r->value("created_at_ms", int64_t{0})};
    }
  std::optional<config_record> out;
  auto r = store().get_config(id, version);
  if (r)
    out = std::move(r.value());
  else if (r.error().code() != errc::not_found)
    throw storage_error(r.error());
  if (j)
    j->record("config", id,
              out ? json{{"config_id", out->config_id},
                         {"version", out->version},
                         {"body", out->body},
                         {"created_at_ms", out->created_at_ms}}
                  : json(nullptr));
  return out;
}

int64_t entity_context::put_config(std::string_view id, const json& body) {
  auto* j = journal();
  if (j)
    if (auto r = j->replay("put_config", id))
      return r->get<int64_t>();
  auto v = value_or_throw(store().put_config(id, body.dump()));
  if (j)
    j->record("put_config", id, v);
  return v;
}

void entity_context::suspend_turn(std::coroutine_handle<> h,
                                  std::function<void(bool, std::function<void()>)> start) {
  auto token = port_.next_token();
  runner_.suspend(h, token);
  port_.hold_await(token, std::move(start));
}

void entity_context::start_entity_call(const std::string& type, const std::string& id,
                                       std::string method, std::string args_json, call_options opts,
                                       std::function<void(call_reply)> done) {
  auto k = entity_key::make(env_.key->tenant, type, id);
  if (!k) {
    done(problems::invalid_entity_key.reply(k.error().message()));
    return;
  }
  call_request req{std::move(method), std::move(args_json), std::move(opts.idempotency_key),
                   opts.trace_id.empty() ? call().trace_id : std::move(opts.trace_id),
                   std::move(opts.fingerprint)};
  if (!req.idempotency_key.empty() && req.fingerprint.empty())
    req.fingerprint = call_fingerprint(req.method, req.args);
  port_.route(*k, std::move(req), opts.timeout, std::move(done));
}

void entity_context::start_tool_call(const tool_request& req,
                                     std::function<void(tool_reply)> done) {
  auto& tools = env_.cfg->tools;
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

} // namespace factum::detail
