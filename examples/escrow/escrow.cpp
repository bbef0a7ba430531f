// escrow.cpp: examples/escrow's `escrow` entity and its state machine. The state is
// the fold of the escrow's `escrow.*` facts (factum/examples/escrow.hpp): activation replays
// them, and `rebuild` replays them again on demand. Invalid transitions and unauthorized actors
// are terminal client/authorization errors (stored under the idempotency key, never retried);
// release and refund are a saga (state change, then the `payout` tool; a failed payout is
// compensated by a fact that restores the previous state); payment events arrive through an
// inbox processed by alarms, so a poison event is retried by the runtime and ends as a dead
// letter. Runs on its entity's actor thread.
#include "factum/examples/escrow.hpp"

#include "factum/examples/examples.hpp"
#include "factum/resilience/money.hpp"

namespace factum::examples {

namespace escrow {

using nlohmann::json;

json state::to_json() const {
  json j = {{"status", status.empty() ? json(nullptr) : json(status)},
            {"applied", applied},
            {"last_seq", last_seq},
            {"compensations", compensations}};
  if (!status.empty()) {
    j["buyer"] = buyer;
    j["seller"] = seller;
    j["arbiter"] = arbiter;
    j["amount"] = amount;
    j["currency"] = currency;
  }
  if (!payout_ref.empty())
    j["payout_ref"] = payout_ref;
  return j;
}

std::string_view next_status(std::string_view from, std::string_view command) {
  if (command == "open")
    return from.empty() ? await_funds : "";
  if (command == "fund")
    return from == await_funds ? funded : "";
  if (command == "deliver")
    return from == funded ? delivered : "";
  if (command == "dispute")
    return from == funded || from == delivered ? disputed : "";
  if (command == "release")
    return from == delivered || from == disputed ? released : "";
  if (command == "refund")
    return from == disputed ? refunded : "";
  return "";
}

bool actor_allowed(const state& s, std::string_view command, std::string_view actor) {
  if (command == "open")
    return true;
  if (command == "fund")
    return actor == s.buyer || actor == "payment_provider";
  if (command == "deliver")
    return actor == s.seller;
  if (command == "dispute")
    return actor == s.buyer || actor == s.seller;
  if (command == "release")
    return s.status == disputed ? actor == s.arbiter : actor == s.buyer || actor == s.arbiter;
  if (command == "refund")
    return actor == s.arbiter;
  return false;
}

void apply(state& s, const fact& f) {
  if (f.type.rfind("escrow.", 0) != 0)
    return;
  auto d = json::parse(f.data, nullptr, false);
  if (!d.is_object())
    return;
  auto kind = std::string_view(f.type).substr(7);
  bool changed = true;
  if (kind == "opened") {
    s.status = await_funds;
    s.buyer = d.value("buyer", "");
    s.seller = d.value("seller", "");
    s.arbiter = d.value("arbiter", "");
    s.amount = d.value("amount", "");
    s.currency = d.value("currency", "");
  } else if (kind == "funded") {
    s.status = funded;
  } else if (kind == "delivered") {
    s.status = delivered;
  } else if (kind == "disputed") {
    s.status = disputed;
  } else if (kind == "released") {
    s.status = released;
  } else if (kind == "refunded") {
    s.status = refunded;
  } else if (kind == "payout_completed") {
    s.payout_ref = d.value("transfer_id", "");
  } else if (kind == "payout_compensated") {
    s.status = d.value("back_to", s.status);
    ++s.compensations;
  } else {
    changed = false; // escrow.event_received and friends: no state change
  }
  if (changed) {
    ++s.applied;
    s.last_seq = f.seq;
  }
}

state replay(const std::vector<fact>& facts) {
  state s;
  for (auto& f : facts)
    apply(s, f);
  return s;
}

} // namespace escrow

namespace {

using nlohmann::json;
using resilience::decimal;
namespace es = escrow;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-' || c == '@';
}

std::string name_arg(const json& args, const char* member) {
  auto it = args.find(member);
  if (it == args.end() || !it->is_string())
    throw client_error("INVALID_ARGUMENT", std::string("'") + member + "' (a string) is required");
  auto s = it->get<std::string>();
  bool ok = !s.empty() && s.size() <= 64;
  for (char c : s)
    ok = ok && name_char(c);
  if (!ok)
    throw client_error("INVALID_ARGUMENT", std::string("'") + member +
                                             "' must be 1 to 64 characters of [A-Za-z0-9._:@-]");
  return s;
}

decimal amount_arg(const json& args, const char* member) {
  auto it = args.find(member);
  if (it == args.end() || !it->is_string())
    throw client_error("INVALID_ARGUMENT",
                       std::string("'") + member + "' must be a decimal string like \"250.00\"");
  auto d = decimal::parse(it->get<std::string>());
  if (!d || d->is_negative() || d->is_zero())
    throw client_error("INVALID_ARGUMENT",
                       std::string("'") + member + "' must be a positive decimal string");
  return *d;
}

/// The escrow entity. `state_` mirrors the fold of the committed facts; a turn that fails in a
/// way that may have left it ahead of the log (a storage failure) marks it stale, and the next
/// turn replays the log again.
class escrow_entity final : public entity {
 public:
  task<void> on_activate(context& ctx) override {
    state_ = es::replay(all_facts(ctx));
    ctx.sql_write("CREATE TABLE IF NOT EXISTS u_events(event_id TEXT PRIMARY KEY, type TEXT NOT "
                  "NULL, received_at INTEGER NOT NULL)");
    co_return;
  }

  /// {"buyer","seller","arbiter","amount","currency"} -> the state (AWAIT_FUNDS).
  json open(context& ctx, json args) {
    fresh(ctx);
    require_object(args);
    auto buyer = name_arg(args, "buyer");
    auto seller = name_arg(args, "seller");
    auto arbiter = name_arg(args, "arbiter");
    auto amount = amount_arg(args, "amount");
    auto currency = args.value("currency", std::string("USD"));
    if (currency.size() != 3 ||
        !std::all_of(currency.begin(), currency.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
      throw client_error("INVALID_ARGUMENT", "'currency' must be 3 upper-case letters");
    if (buyer == seller || arbiter == buyer || arbiter == seller)
      throw client_error("INVALID_ARGUMENT", "buyer, seller and arbiter must be distinct");
    check_transition("open", "");
    record("escrow.opened",
           {{"buyer", buyer},
            {"seller", seller},
            {"arbiter", arbiter},
            {"amount", amount.to_string(2)},
            {"currency", currency}},
           ctx);
    return state_.to_json();
  }

  /// {"actor", "amount"} -> FUNDED (the buyer pays the exact amount in).
  json fund(context& ctx, json args) {
    fresh(ctx);
    require_object(args);
    auto actor = name_arg(args, "actor");
    auto amount = amount_arg(args, "amount");
    check_command("fund", actor);
    if (amount != decimal::parse(state_.amount).value())
      throw call_error(error_category::client, "AMOUNT_MISMATCH",
                       "the escrow holds exactly " + state_.amount + " " + state_.currency, 422);
    record("escrow.funded", {{"actor", actor}, {"amount", state_.amount}}, ctx);
    return state_.to_json();
  }

  /// {"actor", "tracking"?} -> DELIVERED (the seller says the goods arrived).
  json deliver(context& ctx, json args) {
    fresh(ctx);
    require_object(args);
    auto actor = name_arg(args, "actor");
    check_command("deliver", actor);
    json d = {{"actor", actor}};
    if (args.contains("tracking") && args["tracking"].is_string())
      d["tracking"] = args["tracking"].get<std::string>().substr(0, 128);
    record("escrow.delivered", std::move(d), ctx);
    return state_.to_json();
  }

  /// {"actor", "reason"?} -> DISPUTED.
  json dispute(context& ctx, json args) {
    fresh(ctx);
    require_object(args);
    auto actor = name_arg(args, "actor");
    check_command("dispute", actor);
    json d = {{"actor", actor}};
    if (args.contains("reason") && args["reason"].is_string())
      d["reason"] = args["reason"].get<std::string>().substr(0, 256);
    record("escrow.disputed", std::move(d), ctx);
    return state_.to_json();
  }

  /// {"actor"} -> RELEASED: pays the seller through the `payout` tool (a saga).
  task<json> release(context& ctx, json args) {
    auto t = settle(ctx, std::move(args), "release");
    json r = co_await t;
    co_return r;
  }

  /// {"actor"} -> REFUNDED: pays the buyer back through the `payout` tool (a saga).
  task<json> refund(context& ctx, json args) {
    auto t = settle(ctx, std::move(args), "refund");
    json r = co_await t;
    co_return r;
  }

  /// {"event_id", "type": "PaymentSucceeded", "payload": {...}}: a payment provider's event
  /// (delivered by its webhook). De-duplicated by event_id, then queued: an alarm processes it,
  /// so a poison event is retried by the runtime and finally becomes a dead letter, without
  /// blocking the escrow's commands.
  json ingest(context& ctx, json args) {
    fresh(ctx);
    require_object(args);
    auto event_id = name_arg(args, "event_id");
    if (event_id.find('@') != std::string::npos)
      throw client_error("INVALID_ARGUMENT", "'event_id' must not contain '@'");
    auto type = args.value("type", std::string());
    if (type != "PaymentSucceeded")
      throw client_error("UNKNOWN_EVENT_TYPE", "only PaymentSucceeded events are handled");
    auto seen =
      ctx.sql("SELECT event_id FROM u_events WHERE event_id = ?", json::array({event_id}));
    if (!seen.empty())
      return {{"event_id", event_id}, {"duplicate", true}};
    ctx.sql_write("INSERT INTO u_events(event_id, type, received_at) VALUES (?, ?, ?)",
                  json::array({event_id, type, ctx.now_ms()}));
    json event = {{"event_id", event_id},
                  {"type", type},
                  {"payload", args.contains("payload") ? args["payload"] : json(nullptr)}};
    record("escrow.event_received", {{"event_id", event_id}, {"type", type}}, ctx);
    ctx.set_alarm("event:" + event_id, ctx.now_ms(), event);
    return {{"event_id", event_id}, {"accepted", true}};
  }

  /// Processes one queued event. Throwing here makes the runtime retry the alarm with backoff
  /// and, once its retries are spent, turn it into a dead letter (the poison path).
  task<void> on_alarm(context& ctx, const alarm_record& a) override {
    fresh(ctx);
    if (a.name.rfind("event:", 0) != 0)
      co_return;
    auto event = json::parse(a.payload, nullptr, false);
    auto payload = event.is_object() ? event.value("payload", json()) : json();
    auto event_id = event.is_object() ? event.value("event_id", "") : std::string();
    if (!payload.is_object() || !payload.contains("amount") || !payload["amount"].is_string() ||
        !decimal::parse(payload["amount"].get<std::string>()))
      throw client_error("MALFORMED_EVENT",
                         "event " + event_id + " has no decimal 'amount' in its payload");
    auto amount = decimal::parse(payload["amount"].get<std::string>()).value();
    if (state_.status != es::await_funds) {
      record("escrow.event_ignored",
             {{"event_id", event_id}, {"reason", "escrow is " + state_.status}}, ctx);
      co_return;
    }
    if (amount != decimal::parse(state_.amount).value())
      throw call_error(error_category::client, "AMOUNT_MISMATCH",
                       "event " + event_id + " pays " + amount.to_string() + ", the escrow holds " +
                         state_.amount,
                       422);
    record("escrow.funded",
           {{"actor", "payment_provider"}, {"amount", state_.amount}, {"event_id", event_id}}, ctx);
  }

  /// {} -> the state (shared: it runs beside a command waiting at its payout, so it reads the
  /// facts committed so far when the state in memory may be ahead of them, and changes nothing).
  json get(context& ctx, json) { return (stale_ ? es::replay(all_facts(ctx)) : state_).to_json(); }

  /// {} -> the state replayed from the facts now, and whether it equals the one in memory.
  json rebuild(context& ctx, json) {
    fresh(ctx);
    settled();
    auto replayed = es::replay(all_facts(ctx));
    return {{"state", replayed.to_json()}, {"matches_memory", replayed == state_}};
  }

 private:
  static void require_object(const json& args) {
    if (!args.is_object())
      throw client_error("INVALID_ARGUMENT", "the body must be a JSON object");
  }

  /// Replays the log when a failed turn may have left state_ ahead of it.
  void fresh(context& ctx) {
    if (stale_)
      state_ = es::replay(all_facts(ctx));
    stale_ = true; // until the turn reaches a consistent end (see settled())
  }
  void settled() { stale_ = false; }

  void check_transition(std::string_view command, std::string_view actor) {
    if (es::next_status(state_.status, command).empty()) {
      if (state_.status.empty())
        throw not_found_error("ESCROW_NOT_FOUND", "this escrow was never opened");
      throw call_error(error_category::client, "INVALID_TRANSITION",
                       std::string(command) + " is not allowed in state " + state_.status, 422);
    }
    if (!actor.empty() && !es::actor_allowed(state_, command, actor))
      throw call_error(error_category::authorization, "ACTOR_NOT_ALLOWED",
                       std::string(actor) + " may not " + std::string(command) + " this escrow",
                       403);
  }
  void check_command(std::string_view command, const std::string& actor) {
    check_transition(command, actor);
  }

  /// Appends an escrow fact and folds it into state_.
  void record(std::string type, json data, context& ctx) {
    fact_draft d;
    d.type = std::move(type);
    d.data = std::move(data);
    auto f = ctx.append(std::move(d));
    es::apply(state_, f);
    settled();
  }

  /// The release/refund saga, journaled (every command is keyed: docs/architecture.md,
  /// "Durable execution"): the state changes first (a fact), then the payout tool runs with its
  /// retries. If it fails for good, a compensating fact restores the previous state and the
  /// failure is answered keeping both facts (call_error::keep_writes), with the dead letter the
  /// runtime made. A crash at any point resumes from the journal when the client retries: the
  /// facts are not written twice, and a payout that completed is not asked again. An operator's
  /// retry of the dead letter replays up to the payout and runs it again; the first run's
  /// compensation stays in the log, so the move is recorded again before the payout's result.
  task<json> settle(context& ctx, json args, std::string command) {
    // The saga decides on the log as read through ctx: a replay reads what its first run read,
    // not the state this object rebuilt at activation (which holds the first run's own move).
    state_ = es::replay(all_facts(ctx));
    stale_ = true;
    require_object(args);
    auto actor = name_arg(args, "actor");
    check_command(command, actor);
    auto from = state_.status;
    bool is_release = command == "release";
    auto to = is_release ? state_.seller : state_.buyer;
    json move = {{"actor", actor},
                 {"from", from},
                 {"to", to},
                 {"amount", state_.amount},
                 {"currency", state_.currency}};
    auto move_type = is_release ? "escrow.released" : "escrow.refunded";
    record(move_type, move, ctx);
    auto target = state_.status;
    // One key per escrow and kind: a retried release (from its dead letter) asks the provider
    // for the same transfer, so it can never pay twice.
    auto transfer_key = "payout-" + ctx.key().tenant + "-" + ctx.key().id + "-" + command;
    tool_request req;
    req.tool = "payout";
    req.operation = "transfer";
    req.payload = {{"escrow_id", ctx.key().id},
                   {"kind", command},
                   {"to", to},
                   {"amount", state_.amount},
                   {"currency", state_.currency},
                   {"idempotency_key", transfer_key}};
    req.idempotency_key = transfer_key; // the provider de-duplicates transfers by it
    stale_ = true;
    auto op = ctx.call_tool(std::move(req));
    tool_reply r = co_await op;
    // The log as it is now: an earlier run of this command (the one a dead letter's retry runs
    // again) may have compensated since the move above.
    state_ = es::replay(all_facts(ctx));
    if (r.ok) {
      if (state_.status != target)
        record(move_type, move, ctx);
      std::string transfer_id = transfer_key;
      if (r.body.is_object())
        for (const char* k : {"transfer_id", "id"})
          if (r.body.contains(k) && r.body[k].is_string()) {
            transfer_id = r.body[k].get<std::string>();
            break;
          }
      record("escrow.payout_completed",
             {{"kind", command}, {"transfer_id", transfer_id}, {"attempts", r.attempts}}, ctx);
      json out = state_.to_json();
      out["payout_attempts"] = r.attempts;
      co_return out;
    }
    json comp = {
      {"kind", command}, {"back_to", from}, {"error_code", r.error_code}, {"attempts", r.attempts}};
    if (!r.dead_letter_id.empty())
      comp["dead_letter_id"] = r.dead_letter_id;
    record("escrow.payout_compensated", std::move(comp), ctx);
    call_error e(r.category, "PAYOUT_FAILED",
                 "the payout failed (" + r.error_code + "); the escrow is back in " + from,
                 r.error_code == "CIRCUIT_OPEN" ? 503 : 0);
    e.keep_writes = true; // the move and its compensation stay in the log
    e.details["compensated"] = true;
    e.details["escrow_status"] = from;
    e.details["payout_error"] = r.error_code;
    e.details["attempts"] = r.attempts;
    if (!r.dead_letter_id.empty())
      e.details["dead_letter_id"] = r.dead_letter_id;
    throw e;
  }

  es::state state_;
  bool stale_ = false;
};

} // namespace

void add_escrow_type(entity_registry& registry) {
  method_options keyed{.requires_idempotency_key = true};
  registry.add(type_builder<escrow_entity>("escrow")
                 .method("open", &escrow_entity::open, keyed)
                 .method("fund", &escrow_entity::fund, keyed)
                 .method("deliver", &escrow_entity::deliver, keyed)
                 .method("dispute", &escrow_entity::dispute, keyed)
                 .method("release", &escrow_entity::release, keyed)
                 .method("refund", &escrow_entity::refund, keyed)
                 .method("ingest", &escrow_entity::ingest, keyed)
                 .method("state", &escrow_entity::get, {.shared = true})
                 .method("rebuild", &escrow_entity::rebuild)
                 .build());
}

} // namespace factum::examples
