// tool_call.cpp: the resilient tool call and the operator actions on dead letters and breakers
// (see tool_call.hpp). Runs on the entity's actor thread, inside a turn; every write joins the
// turn's transaction.
//
// GCC 12 miscompiles some temporaries inside co_await expressions (string literals, defaulted
// class arguments): every awaited operation here is first bound to a named variable.
#include "turn/tool_call.hpp"

#include "turn/journal.hpp"

#include "turn/call_errors.hpp"

#include "factum/resilience/money.hpp"
#include "factum/storage/record_json.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/utf8.hpp"

namespace factum::detail {

using nlohmann::json;
using namespace factum::resilience;

namespace {

bool nonzero(const std::string& amount) {
  auto d = decimal::parse(amount);
  return d && !d->is_zero();
}

struct locked_config {
  std::string id;
  int64_t version = 0;
  json body;
};

/// The config version in force for `tool` now (writing version 1 from the runtime's policy on
/// first use). A call keeps it for all of its attempts.
locked_config lock_config(tool_host& h, const std::string& tool) {
  locked_config c;
  c.id = "tool." + tool;
  // A dead letter's retry runs with the version its operation started with.
  auto retrying = h.retrying_dead_letter();
  std::optional<config_record> cur;
  if (!retrying.empty())
    if (auto dl = h.store().get_dead_letter(retrying); dl && dl->config_id == c.id)
      cur = h.ctx().config(c.id, dl->config_version);
  if (!cur)
    cur = h.ctx().config(c.id);
  if (!cur) {
    c.body = default_tool_config(h.config(), tool);
    c.version = h.ctx().put_config(c.id, c.body);
    return c;
  }
  c.version = cur->version;
  c.body = json::parse(cur->body, nullptr, false);
  if (!c.body.is_object())
    c.body = default_tool_config(h.config(), tool);
  return c;
}

const tool_policy& policy_of(const runtime_config& cfg, const std::string& tool) {
  static const tool_policy none;
  auto it = cfg.tool_policies.find(tool);
  return it == cfg.tool_policies.end() ? none : it->second;
}

retry_budget& budget_for(tool_host& h, const std::string& tool, const json& budget_json) {
  auto& m = h.budgets();
  auto it = m.find(tool);
  if (it != m.end())
    return it->second;
  retry_budget_config bc;
  if (budget_json.is_object())
    if (auto p = retry_budget_config::from_json(budget_json))
      bc = *p;
  return m.emplace(tool, retry_budget(bc)).first->second;
}

fact append_or_throw(tool_host& h, fact_draft d) {
  return h.ctx().append(std::move(d));
}

classification classify_reply(tool_host& h, const std::string& tool, const tool_reply& r,
                              bool idempotent) {
  if (r.http_status == 0)
    if (auto te = parse_transport_error(r.error_code))
      return h.classify().classify_transport(*te);
  return h.classify().classify(tool, r, idempotent);
}

std::string new_dead_letter_id(tool_host& h) {
  auto& rng = h.rng();
  static constexpr char hex[] = "0123456789abcdef";
  std::string id = "dl_";
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i)
    id.push_back(hex[(a >> (i * 4)) & 0xf]);
  for (int i = 0; i < 8; ++i)
    id.push_back(hex[(b >> (i * 4)) & 0xf]);
  return id;
}

} // namespace

std::string dead_letter_alarm(const std::string& id) {
  return "@dl:" + id;
}

json default_tool_config(const runtime_config& cfg, const std::string& tool) {
  const auto& p = policy_of(cfg, tool);
  retry_policy rp;
  if (p.retry.is_object())
    if (auto r = retry_policy::from_json(p.retry))
      rp = *r;
  breaker_config bc;
  if (p.breaker.is_object())
    if (auto b = breaker_config::from_json(p.breaker))
      bc = *b;
  retry_budget_config bu;
  if (p.budget.is_object())
    if (auto b = retry_budget_config::from_json(p.budget))
      bu = *b;
  json ops = json::object();
  for (auto& [op, rj] : p.operation_retry)
    if (auto r = retry_policy::from_json(rj))
      ops[op] = {{"retry", r->to_json()}};
  return {{"retry", rp.to_json()},
          {"operations", std::move(ops)},
          {"breaker", bc.to_json()},
          {"budget", bu.to_json()},
          {"price",
           {{"amount", p.price.empty() ? "0" : p.price},
            {"currency", p.currency},
            {"charge_on_failure", p.charge_on_failure},
            {"vendor", p.vendor.empty() ? "vendor_" + tool : p.vendor}}},
          {"idempotent", p.idempotent},
          {"retry_by_status", p.retry_by_status},
          {"max_inline_delay_ms", p.max_inline_delay_ms}};
}

circuit_breaker& breaker_for(tool_host& h, const std::string& tool, const json& breaker_json) {
  auto& m = h.breakers();
  auto it = m.find(tool);
  if (it != m.end())
    return it->second;
  // State survives hibernation and restart: it lives in the entity's breakers table. Trials
  // the stored state counts in flight are not: the cache is empty only between turns, so their
  // callers (a dead process's, or an ended turn's) will never report.
  auto stored = h.store().list_breakers();
  if (stored)
    for (auto& b : *stored)
      if (b.tool_id == tool) {
        auto j = json::parse(b.data, nullptr, false);
        if (auto cb = circuit_breaker::from_json(j)) {
          cb->forget_trials();
          h.breaker_seen(tool, cb->state());
          return m.emplace(tool, std::move(cb.value())).first->second;
        }
      }
  breaker_config bc;
  if (breaker_json.is_object())
    if (auto p = breaker_config::from_json(breaker_json))
      bc = *p;
  h.store().note_fleet_change(); // a new breaker row: the tenant index counts it closed
  return m.emplace(tool, circuit_breaker(tool, bc, h.ctx().now_ms())).first->second;
}

void record_breaker(tool_host& h, const std::string& tool,
                    const std::optional<breaker_transition>& t, const json& operator_fields) {
  auto& br = h.breakers().at(tool);
  if (t) { // only a move changes what the board knows (a load reports in breaker_for)
    h.breaker_seen(tool, br.state());
    h.store().note_fleet_change(); // and what the tenant index keeps of the entity
    h.stats().breaker_transitions.inc();
    if (auto* c = h.tool_stats(tool))
      c->entered[static_cast<size_t>(t->to)].fetch_add(1, std::memory_order_relaxed);
    fact_draft d;
    d.type = "lifecycle";
    d.subtype = "circuit_breaker_state_changed";
    d.tool_id = tool;
    d.data = t->fact_data();
    if (operator_fields.is_object())
      d.data.update(operator_fields);
    append_or_throw(h, std::move(d));
  }
  breaker_record rec{tool, std::string(to_string(br.state())), br.to_json().dump(),
                     h.ctx().now_ms()};
  if (auto st = h.store().put_breaker(rec); !st)
    throw storage_error(st);
}

namespace {

/// One logical tool call: its request with the key every attempt sends, the config version it
/// locked, and what the attempts so far left behind. Lives in the coroutine frame of
/// resilient_tool_call; the steps below are plain functions over it.
struct tool_call_plan {
  tool_request req;
  const tool_policy* pol = nullptr;
  locked_config cfg;
  retry_policy rp;
  retry_policy failed_rp; ///< decides after the last failed attempt (retry_policy_for)
  std::string amount, currency, vendor;
  bool charge_on_failure = false, idempotent = true, by_status = false;
  int64_t max_inline = 5000;
  json breaker_json; ///< the locked config's breaker settings (for a breaker made anew)
  retry_budget* budget = nullptr;
  /// The tool's counters on the runtime's tool board, looked up once (null: not configured).
  tool_counters* counters = nullptr;
  int64_t first_attempt = 0;
  /// An earlier request of this call may have been charged with nothing recorded: an earlier
  /// run of the step (whose success would have ended it), or an attempt of this run that got no
  /// answer. A replayed answer reports that charge (charged_for).
  bool unrecorded = false;
  bool cut_off = false;     ///< the call resumes a run of its step that was cut off
  bool replay_seen = false; ///< an answer was a replay (the cut-off run's charge is known)
  std::vector<std::string> error_fact_ids; ///< the failed attempts' error facts
  std::optional<int64_t> prev_delay;

  /// The tool's breaker, looked up again at each use: the runner's cache may be emptied while
  /// the call awaits (a failed commit), so no reference to it is held across an await.
  circuit_breaker& breaker(tool_host& h) const { return breaker_for(h, req.tool, breaker_json); }

  fact_draft base_fact(std::string type, std::string subtype) const {
    fact_draft d;
    d.type = std::move(type);
    d.subtype = std::move(subtype);
    d.tool_id = req.tool;
    d.config_id = cfg.id;
    d.config_version = cfg.version;
    return d;
  }
};

} // namespace

std::string derived_tool_key(const entity_key& entity, const std::string& base,
                             const tool_request& req, int64_t step) {
  auto text = entity.to_string() + "\n" + base + "\n" + req.tool + "\n" + req.operation + "\n" +
              req.payload.dump();
  if (step > 1)
    text += "\n#" + std::to_string(step);
  return "fk_" + sha256_hex(text).substr(0, 40);
}

namespace {

/// The call's plan: the trace id and Idempotency-Key the transport sends (the key is the same
/// for every attempt of this logical call, and for a dead letter's retries, which re-run the
/// call with its key, so that a vendor can de-duplicate: docs/tools.md), the config version in
/// force, the breaker and the budget.
/// The retry policy JSON of `operation` in a tool's config: its own under "operations", else
/// the tool's.
json retry_json(const json& body, const std::string& operation) {
  if (auto ops = body.find("operations"); ops != body.end() && ops->is_object())
    if (auto o = ops->find(operation); o != ops->end() && o->is_object() && o->contains("retry"))
      return (*o)["retry"];
  return body.value("retry", json::object());
}

tool_call_plan plan_call(tool_host& h, tool_request req) {
  auto& ctx = h.ctx();
  if (req.trace_id.empty())
    req.trace_id = ctx.call().trace_id;
  if (req.idempotency_key.empty())
    req.idempotency_key = ctx.call().idempotency_key.empty()
                            ? "fk_" + new_trace_id()
                            : derived_tool_key(ctx.key(), ctx.call().idempotency_key, req, 0);
  tool_call_plan p;
  p.pol = &policy_of(h.config(), req.tool);
  p.cfg = lock_config(h, req.tool);
  if (auto r = retry_policy::from_json(retry_json(p.cfg.body, req.operation)))
    p.rp = *r;
  auto price = p.cfg.body.value("price", json::object());
  p.amount = price.value("amount", "0");
  p.currency = price.value("currency", "USD");
  p.charge_on_failure = price.value("charge_on_failure", false);
  p.vendor = price.value("vendor", "vendor_" + req.tool);
  p.idempotent = p.cfg.body.value("idempotent", true);
  p.by_status = p.cfg.body.value("retry_by_status", false);
  p.max_inline = p.cfg.body.value("max_inline_delay_ms", int64_t{5000});
  p.breaker_json = p.cfg.body.value("breaker", json::object());
  p.budget = &budget_for(h, req.tool, p.cfg.body.value("budget", json::object()));
  p.counters = h.tool_stats(req.tool);
  p.first_attempt = ctx.now_ms();
  p.budget->on_call(p.first_attempt);
  p.req = std::move(req);
  return p;
}

void append_cost(tool_host& h, const tool_call_plan& p, const std::string& charged, bool failed,
                 const std::string& error_fact_id) {
  auto d = p.base_fact("cost", "tool_usage");
  d.amount = charged;
  d.currency = p.currency;
  d.from_entity = h.ctx().key().tenant;
  d.to_entity = p.vendor;
  d.data = {{"operation", p.req.operation}, {"failed", failed}};
  if (!error_fact_id.empty())
    d.data["error_fact_id"] = error_fact_id;
  append_or_throw(h, std::move(d));
}

/// The breaker refused attempt `attempt`: its error fact, and the reply when there is no
/// fallback.
tool_reply refused_by_breaker(tool_host& h, const tool_call_plan& p, int attempt,
                              const breaker_decision& decision) {
  h.stats().breaker_fast_fails.inc();
  if (auto* c = p.counters)
    c->fast_fails.fetch_add(1, std::memory_order_relaxed);
  auto d = p.base_fact("error", "external");
  d.data = {{"error_code", "CIRCUIT_OPEN"},
            {"error_message", "the circuit breaker of " + p.req.tool + " is " +
                                std::string(to_string(decision.state))},
            {"category", "transient"},
            {"circuit_state", std::string(to_string(decision.state))},
            {"retry_attempt", attempt - 1},
            {"max_retries", p.rp.max_attempts - 1},
            {"cost_incurred", "0"},
            {"resolved", false}};
  append_or_throw(h, std::move(d));
  record_breaker(h, p.req.tool, std::nullopt);
  tool_reply r;
  r.ok = false;
  r.http_status = 503;
  r.error_code = "CIRCUIT_OPEN";
  r.error_message = "circuit breaker open for " + p.req.tool;
  r.category = error_category::transient;
  r.retry_after_ms = decision.retry_after_ms;
  r.attempts = attempt - 1;
  return r;
}

/// The degradation matrix turns the tool off at the tenant's level: an error fact, and the
/// reply when there is no fallback (nothing is sent; no breaker, budget or dead letter moves).
tool_reply refused_by_level(tool_host& h, const tool_call_plan& p, const degradation_refusal& no) {
  auto why = "the tool " + p.req.tool + " is turned off at degradation level " +
             std::to_string(no.level) + " (feature " + no.feature + ")";
  auto d = p.base_fact("error", "external");
  d.data = {{"error_code", "DEGRADED"},
            {"error_message", why},
            {"category", "transient"},
            {"degradation_level", no.level},
            {"feature", no.feature},
            {"cost_incurred", "0"},
            {"resolved", static_cast<bool>(p.pol->fallback)}};
  append_or_throw(h, std::move(d));
  tool_reply r;
  r.ok = false;
  r.http_status = 503;
  r.error_code = "DEGRADED";
  r.error_message = std::move(why);
  r.category = error_category::transient;
  r.retry_after_ms = h.degraded_retry_after().count() * 1000;
  return r;
}

/// What to record as the charge of an attempt (an exact decimal): the vendor's own figure, else
/// the configured price when it charges. A replayed answer's charge is the request's it replays:
/// recorded once when that request may have been charged with nothing recorded
/// (p.unrecorded), else nothing (another call's request with the same key).
std::string charged_for(tool_call_plan& p, const tool_reply& r) {
  if (r.replayed) {
    p.replay_seen = true;
    if (!std::exchange(p.unrecorded, false))
      return "0";
  }
  auto charged = !r.cost_amount.empty()          ? r.cost_amount
                 : (r.ok || p.charge_on_failure) ? p.amount
                                                 : std::string("0");
  if (r.http_status == 0 && !nonzero(charged)) // no answer: the vendor may have charged
    p.unrecorded = true;
  return charged;
}

/// The call resumes a step whose run was cut off while its request may have been at the vendor,
/// and no answer since was a replay that reports what that request was charged: an `unknown_cost`
/// fact for an operator to reconcile with the vendor (docs/tools.md, "Costs").
void note_unknown_cost(tool_host& h, const tool_call_plan& p) {
  auto d = p.base_fact("cost", "unknown_cost");
  d.data = {{"operation", p.req.operation},
            {"idempotency_key", p.req.idempotency_key},
            {"detail", "a run of this call was cut off (the process stopped) while its request "
                       "may have been at the vendor, and no answer since replayed it: what it "
                       "was charged is unknown; the vendor's records of this Idempotency-Key "
                       "say"}};
  append_or_throw(h, std::move(d));
}

/// A successful attempt: the breaker, the outcome that resolves earlier failures, the cost.
void attempt_succeeded(tool_host& h, tool_call_plan& p, int attempt, int64_t now,
                       const tool_reply& r) {
  record_breaker(h, p.req.tool, p.breaker(h).on_success(now));
  if (attempt > 1)
    if (auto* c = p.counters)
      c->retried_ok.fetch_add(1, std::memory_order_relaxed);
  if (!p.error_fact_ids.empty()) {
    auto d = p.base_fact("outcome", "resolved_after_retry");
    d.data = {
      {"operation", p.req.operation}, {"attempts", attempt}, {"resolves", p.error_fact_ids}};
    append_or_throw(h, std::move(d));
  }
  if (auto charged = charged_for(p, r); nonzero(charged))
    append_cost(h, p, charged, false, "");
}

/// The policy that decides the wait after a failed attempt: its HTTP status's own when the
/// tool retries by status and the status has one, else the tool's.
retry_policy retry_policy_for(const tool_call_plan& p, const tool_reply& r) {
  if (p.by_status && r.http_status > 0)
    if (auto sp = resilience::http_status_policy(r.http_status))
      return *sp;
  return p.rp;
}

/// A failed attempt: its classification, the policy that decides after it (p.failed_rp), its
/// error fact, cost and breaker move.
classification attempt_failed(tool_host& h, tool_call_plan& p, int attempt, int64_t now,
                              tool_reply& r) {
  h.stats().tool_failures.inc();
  auto cls = classify_reply(h, p.req.tool, r, p.idempotent);
  if (auto* c = p.counters)
    c->errors[static_cast<size_t>(cls.category)].fetch_add(1, std::memory_order_relaxed);
  r.category = cls.category;
  p.failed_rp = retry_policy_for(p, r);
  auto charged = charged_for(p, r);
  auto ed = p.base_fact("error", std::string(to_string(cls.category)));
  ed.data = {{"error_code", cls.code},
             {"error_message", r.error_message},
             {"category", std::string(to_string(cls.category))},
             {"http_status", r.http_status},
             {"retry_attempt", attempt},
             {"max_retries", p.failed_rp.max_attempts - 1},
             {"retryable", cls.retryable},
             {"cost_incurred", charged},
             {"currency", p.currency},
             {"resolved", false}};
  auto ef = append_or_throw(h, std::move(ed));
  p.error_fact_ids.push_back(ef.fact_id);
  if (nonzero(charged))
    append_cost(h, p, charged, true, ef.fact_id);
  record_breaker(h, p.req.tool, p.breaker(h).on_failure(now, cls.category));
  if (r.error_code.empty())
    r.error_code = cls.code;
  return cls;
}

/// The retry budget is spent: its error fact; the reply says so.
void budget_spent(tool_host& h, const tool_call_plan& p, int attempt, tool_reply& r) {
  if (auto* c = p.counters)
    c->budget_refused.fetch_add(1, std::memory_order_relaxed);
  auto d = p.base_fact("error", "budget");
  d.data = {{"error_code", "RETRY_BUDGET_EXHAUSTED"},
            {"error_message", "the retry budget of " + p.req.tool + " is spent"},
            {"category", "budget"},
            {"retry_attempt", attempt},
            {"resolved", false}};
  append_or_throw(h, std::move(d));
  r.error_code = "RETRY_BUDGET_EXHAUSTED";
}

/// The error fact of a call whose retries ran out; `resolved`: a fallback answers it.
void retries_exhausted(tool_host& h, const tool_call_plan& p, int attempt,
                       const classification& cls, const tool_reply& r, bool resolved) {
  auto d = p.base_fact("error", "max_retries_exceeded");
  d.data = {{"error_code", cls.code},
            {"error_message", r.error_message},
            {"category", std::string(to_string(cls.category))},
            {"retry_attempt", attempt},
            {"max_retries", p.failed_rp.max_attempts - 1},
            {"resolved", resolved}};
  append_or_throw(h, std::move(d));
}

/// The policy's fallback answers in place of the tool; `attempts` made before it.
task<tool_reply> answer_with_fallback(tool_host& h, const tool_call_plan& p, int attempts) {
  auto fb_op =
    async_op<tool_reply>(h.ctx(), [pol = p.pol, r = p.req](std::function<void(tool_reply)> done) {
      pol->fallback(r, std::move(done));
    });
  tool_reply fb = co_await fb_op;
  fb.attempts = attempts;
  if (fb.body.is_object())
    fb.body["fallback"] = true;
  co_return fb;
}

/// An attempt answered 401: the policy's refresh_auth runs, and an outcome fact says whether
/// new credentials are in place (the call then tries again).
task<bool> refresh_credentials(tool_host& h, const tool_call_plan& p, int attempt) {
  auto op = async_op<bool>(
    h.ctx(), [pol = p.pol](std::function<void(bool)> done) { pol->refresh_auth(std::move(done)); });
  bool ok = co_await op;
  auto d = p.base_fact("outcome", ok ? "auth_refreshed" : "auth_refresh_failed");
  d.data = {{"operation", p.req.operation}, {"after_attempt", attempt}};
  append_or_throw(h, std::move(d));
  co_return ok;
}

/// The dead letter of a call whose retries ran out (`delay` empty) or whose next wait is too
/// long to hold the entity: made, or updated when this run was one of its retries; its retry
/// alarm set when its reason retries automatically and its cap is not reached.
void dead_letter(tool_host& h, const tool_call_plan& p, int attempt, int64_t now,
                 const classification& cls, std::optional<int64_t> delay, tool_reply& r) {
  auto& ctx = h.ctx();
  if (!delay)
    retries_exhausted(h, p, attempt, cls, r, false);
  auto& rules = h.dl_rules();
  dead_letter_record dl;
  if (auto retrying = h.retrying_dead_letter(); !retrying.empty())
    if (auto old = h.store().get_dead_letter(retrying)) {
      dl = std::move(old.value());
      ++dl.auto_retries; // this run was one of its retries, and it failed
    }
  bool is_new = dl.id.empty();
  if (is_new) {
    dl.id = new_dead_letter_id(h);
    dl.operation = ctx.call().method;
    dl.payload = json{{"args", json::parse(ctx.call().args_json, nullptr, false)},
                      {"tool", p.req.tool},
                      {"tool_operation", p.req.operation},
                      {"tool_payload", p.req.payload},
                      {"fingerprint", ctx.call().fingerprint}}
                   .dump();
    dl.idempotency_key = ctx.call().idempotency_key;
    dl.config_id = p.cfg.id;
    dl.config_version = p.cfg.version;
    dl.first_attempt_ms = p.first_attempt;
    dl.created_at_ms = now;
    dl.trace_id = ctx.call().trace_id;
    dl.attempts = 0;
  }
  dl.error_code = cls.code;
  dl.error_message = r.error_message;
  dl.error_category = std::string(to_string(cls.category));
  dl.reason = std::string(to_string(cls.reason));
  dl.attempts += attempt;
  dl.last_attempt_ms = now;
  dl.updated_at_ms = now;
  dl.status = rules.initial_status(cls.reason);
  dl.next_retry_ms.reset();
  if (dl.status == dl_status::scheduled)
    dl.next_retry_ms = delay && is_new
                         ? std::optional<int64_t>(now + *delay)
                         : rules.next_retry_at(cls.reason, now, dl.auto_retries, r.retry_after_ms);
  if (dl.status == dl_status::scheduled && !dl.next_retry_ms)
    dl.status = dl_status::pending;
  dl.expires_at_ms = rules.expires_at(cls.reason, now);
  if (auto st = h.store().put_dead_letter(dl); !st)
    throw storage_error(st);
  h.dead_letter_written(dl);
  if (dl.next_retry_ms)
    h.set_internal_alarm(dead_letter_alarm(dl.id), *dl.next_retry_ms);
  if (is_new) {
    h.stats().dead_letters.inc();
    if (auto* c = p.counters)
      c->dead_letters.fetch_add(1, std::memory_order_relaxed);
  }
  auto life = p.base_fact("lifecycle", is_new ? "dead_letter_created" : "dead_letter_retry_failed");
  life.data = {{"dead_letter_id", dl.id},
               {"status", std::string(to_string(dl.status))},
               {"reason", dl.reason},
               {"attempts", dl.attempts},
               {"auto_retries", dl.auto_retries}};
  if (dl.next_retry_ms)
    life.data["next_retry_at"] = *dl.next_retry_ms;
  append_or_throw(h, std::move(life));
  r.dead_letter_id = dl.id;
}

/// The attempts of a call, with its policy, breaker, budget, fallback and dead letter.
task<tool_reply> run_attempts(tool_host& h, tool_call_plan& p) {
  auto& ctx = h.ctx();
  if (auto no = h.degraded(p.req.tool)) {
    auto refused = refused_by_level(h, p, *no);
    if (!p.pol->fallback)
      co_return refused;
    auto fb = answer_with_fallback(h, p, 0);
    co_return co_await fb;
  }
  bool refreshed = false; // the policy's refresh_auth ran (once per call)
  for (int attempt = 1;; ++attempt) {
    int64_t now = ctx.now_ms();
    auto decision = p.breaker(h).allow(now);
    if (decision.transition)
      record_breaker(h, p.req.tool, decision.transition);
    if (!decision.allowed) {
      auto refused = refused_by_breaker(h, p, attempt, decision);
      if (!p.pol->fallback)
        co_return refused;
      auto fb = answer_with_fallback(h, p, attempt - 1);
      co_return co_await fb;
    }
    auto op = ctx.call_tool_once(p.req);
    tool_reply r = co_await op;
    r.attempts = attempt;
    now = ctx.now_ms();
    if (r.ok) {
      attempt_succeeded(h, p, attempt, now, r);
      co_return r;
    }
    auto cls = attempt_failed(h, p, attempt, now, r);
    if (r.http_status == 401 && p.pol->refresh_auth && !refreshed) {
      refreshed = true;
      auto rf = refresh_credentials(h, p, attempt);
      if (co_await rf)
        continue; // the same call again at once: not a retry of the policy, nothing spent
    }
    if (!cls.retryable)
      co_return r;
    auto delay = p.failed_rp.next_delay(attempt, p.prev_delay, r.retry_after_ms, h.rng());
    if (delay && !p.budget->try_spend(now)) {
      budget_spent(h, p, attempt, r);
      co_return r;
    }
    if (!delay && p.pol->fallback && p.pol->fallback_after_retries) {
      // Exhausted, and the policy answers with its fallback then: the call has an answer, so
      // no dead letter; the facts say what happened.
      retries_exhausted(h, p, attempt, cls, r, true);
      auto used = p.base_fact("outcome", "fallback_used");
      used.data = {
        {"reason", "retries_exhausted"}, {"attempts", attempt}, {"error_code", cls.code}};
      append_or_throw(h, std::move(used));
      auto fb = answer_with_fallback(h, p, attempt);
      co_return co_await fb;
    }
    if (!delay || *delay > p.max_inline) {
      // Exhausted, or a wait too long to hold the entity: a dead letter (retried by an alarm
      // when its reason retries automatically).
      dead_letter(h, p, attempt, now, cls, delay, r);
      co_return r;
    }
    h.stats().tool_retries.inc();
    if (auto* c = p.counters)
      c->retries.fetch_add(1, std::memory_order_relaxed);
    p.prev_delay = delay;
    auto wait = ctx.sleep(std::chrono::milliseconds(*delay));
    co_await wait;
  }
}

} // namespace

task<tool_reply> resilient_tool_call(tool_host& h, tool_request req) {
  h.stats().tool_calls.inc();
  auto p = plan_call(h, std::move(req));
  auto rerun = h.reruns_step();
  p.cut_off = rerun == tool_host::step_rerun::after_cut_off;
  p.unrecorded = rerun != tool_host::step_rerun::no;
  auto run = run_attempts(h, p);
  tool_reply r = co_await run;
  if (p.cut_off && !p.replay_seen)
    note_unknown_cost(h, p);
  co_return r;
}

// -- operator actions ---------------------------------------------------------------------------

json list_dead_letters(tool_host& h, const json& args) {
  std::optional<dl_status> filter;
  if (args.contains("status")) {
    auto s = parse_dl_status(args.value("status", ""));
    if (!s)
      throw problems::invalid_query.error(s.error().message());
    filter = *s;
  }
  int64_t limit = args.value("limit", int64_t{100});
  if (limit < 1 || limit > 10000)
    throw problems::invalid_query.error("limit must be between 1 and 10000");
  auto r = h.store().list_dead_letters(filter, limit);
  if (!r)
    throw storage_error(r.error());
  json out = json::array();
  for (auto& d : *r)
    out.push_back(dead_letter_json(d));
  return out;
}

json operator_record(const json& args) {
  auto text = [&](const char* name, size_t max) -> std::optional<std::string> {
    auto it = args.find(name);
    if (it == args.end() || it->is_null())
      return std::nullopt;
    if (!it->is_string() || it->get_ref<const std::string&>().size() > max)
      throw problems::invalid_argument.error(std::string(name) + " must be a string of at most " +
                                             std::to_string(max) + " bytes");
    if (has_control_char(it->get_ref<const std::string&>()))
      throw problems::invalid_argument.error(std::string(name) +
                                             " must not contain control characters");
    return it->get<std::string>();
  };
  json out = {{"actor", text("actor", 128).value_or("operator")}};
  if (auto reason = text("reason", 512))
    out["reason"] = *reason;
  return out;
}

std::string dead_letter_journal(entity_store& store, const dead_letter_record& dl) {
  static constexpr std::string_view alarm_op = "@alarm:";
  if (dl.operation.rfind(alarm_op, 0) == 0)
    return alarm_run_journal(store, dl.operation.substr(alarm_op.size()));
  return dl.idempotency_key.empty() ? "dl:" + dl.id : journal_key_of_call(dl.idempotency_key);
}

json act_on_dead_letter(tool_host& h, const json& args) {
  auto id = args.value("id", "");
  auto action = parse_dl_action(args.value("action", ""));
  if (!action)
    throw problems::invalid_action.error("action must be retry, discard or acknowledge");
  auto who = operator_record(args);
  auto r = h.store().get_dead_letter(id);
  if (!r) {
    if (r.error().code() == errc::not_found)
      throw problems::dead_letter_not_found.error("no dead letter " + id.substr(0, 128));
    throw storage_error(r.error());
  }
  auto dl = std::move(r.value());
  auto next = apply_action(dl.status, *action);
  if (!next)
    throw problems::invalid_dead_letter_transition.error(next.error().message());
  auto from = dl.status;
  int64_t now = h.ctx().now_ms();
  dl.status = *next;
  dl.updated_at_ms = now;
  if (*action == dl_action::retry) {
    dl.next_retry_ms = now;
    dl.auto_retries = 0; // an operator's retry starts the automatic ones over
    h.set_internal_alarm(dead_letter_alarm(dl.id), now);
  } else {
    dl.next_retry_ms.reset();
    h.cancel_internal_alarm(dead_letter_alarm(dl.id));
  }
  if (auto st = h.store().put_dead_letter(dl); !st)
    throw storage_error(st);
  h.dead_letter_written(dl);
  if (dl.status == dl_status::discarded) // nothing will replay its call's journal now
    if (auto st = h.store().purge_journal(dead_letter_journal(h.store(), dl)); !st)
      throw storage_error(st);
  fact_draft d;
  d.type = "lifecycle";
  d.subtype = "dead_letter_" + std::string(to_string(*action));
  d.data = {{"dead_letter_id", dl.id},
            {"previous_status", std::string(to_string(from))},
            {"new_status", std::string(to_string(dl.status))}};
  d.data.update(who);
  h.ctx().append(std::move(d));
  return dead_letter_json(dl);
}

json list_breakers(tool_host& h) {
  auto r = h.store().list_breakers();
  if (!r)
    throw storage_error(r.error());
  json out = json::array();
  int64_t now = factum::now_ms(); // not the context's: a read runs beside any turn
  for (auto& b : *r) {
    json j = breaker_json(b); // the record, and below the counts of its window
    auto cb = circuit_breaker::from_json(json::parse(b.data, nullptr, false));
    if (cb) {
      auto c = cb->window_counters(now);
      j["failure_count"] = c.failure_count;
      j["success_count"] = c.success_count;
      j["request_count"] = c.request_count;
    }
    out.push_back(std::move(j));
  }
  return out;
}

json act_on_breaker(tool_host& h, const json& args) {
  auto tool = args.value("tool", "");
  auto action = args.value("action", "");
  if (tool.empty() || tool.size() > 128)
    throw problems::invalid_argument.error("tool must be 1 to 128 characters");
  if (action != "force-open" && action != "reset" && action != "disable")
    throw problems::invalid_action.error("action must be force-open, reset or disable");
  auto who = operator_record(args);
  auto cfg = default_tool_config(h.config(), tool);
  auto& br = breaker_for(h, tool, cfg["breaker"]);
  int64_t now = h.ctx().now_ms();
  std::optional<breaker_transition> t;
  if (action == "force-open")
    t = br.force_open(now, "forced_open_by_operator");
  else if (action == "reset")
    t = br.reset(now, "reset_by_operator");
  else
    t = br.disable(now, "disabled_by_operator");
  record_breaker(h, tool, t, who);
  return {{"tool", tool}, {"state", std::string(to_string(br.state()))}};
}

} // namespace factum::detail
