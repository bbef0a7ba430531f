// outbox_relay.cpp: the outbox of one activation (outbox_relay.hpp): arming the `@outbox` alarm
// in the commit of the facts it is for, and the alarm's turn that relays them to each sink, in
// seq order, advancing the sink's cursor only after the sink acknowledged. Runs on the entity's
// actor thread, inside a turn; a sink's `done` runs on the sink's thread and only wakes the turn.
#include "outbox_relay.hpp"

#include <algorithm>

#include "factum/storage/sha256.hpp"
#include "turn/call_errors.hpp"
#include "turn/entity_context.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

std::string error_text(const outbox_ack& ack) {
  return ack.error_code + (ack.error_message.empty() ? "" : ": " + ack.error_message);
}

} // namespace

// -- activation ---------------------------------------------------------------------------------

void outbox_relay::attach(outbox_board* board, const entity_key& key, entity_store& store) {
  board_ = board;
  key_str_ = key.to_string();
  targets_ = board ? board->targets_for(key) : std::vector<outbox_target>{};
  seen_seq_ = store.last_seq(); // what came before was armed by the activation that wrote it
  armed_known_ = false;
}

void outbox_relay::detach() {
  targets_.clear();
  armed_known_ = false;
}

// -- arming -------------------------------------------------------------------------------------

void outbox_relay::after_writes(entity_context& ctx, entity_store& store) {
  if (targets_.empty())
    return;
  auto last = store.last_seq();
  if (last < seen_seq_) // a rollback took facts back
    seen_seq_ = last;
  if (last == seen_seq_)
    return;
  bool any = false;
  for (auto& t : targets_)
    for (auto& type : t.types) {
      auto [count, oldest] = value_or_throw(store.count_facts_after(type, seen_seq_));
      if (count > 0) {
        t.sink->add_lag(key_str_, count, oldest);
        any = true;
      }
    }
  if (any && !armed_known_) {
    auto cur = store.get_alarm(outbox_alarm);
    if (!cur && cur.error().code() != errc::not_found)
      throw storage_error(cur.error());
    if (!cur) // when set, it is due or backing off, and a backoff is not cut short
      ctx.set_alarm_internal(outbox_alarm, ctx.clock_ms(), "{}", 0);
    armed_known_ = true;
  }
  seen_seq_ = last; // only now: a failure above looks again at the next turn's end
}

// -- the relay ----------------------------------------------------------------------------------

std::vector<fact> outbox_relay::pending(entity_store& store, const std::vector<std::string>& types,
                                        int64_t after_seq, int64_t limit) {
  std::vector<fact> out;
  for (auto& type : types) {
    fact_filter f;
    f.type = type;
    f.after_seq = after_seq;
    f.limit = limit;
    auto got = value_or_throw(store.query(f));
    out.insert(out.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  }
  std::sort(out.begin(), out.end(), [](const fact& a, const fact& b) { return a.seq < b.seq; });
  if (out.size() > static_cast<size_t>(limit))
    out.resize(static_cast<size_t>(limit));
  return out;
}

int64_t outbox_relay::measure(entity_store& store, const outbox_target& t, int64_t cursor) {
  int64_t count = 0, oldest = 0;
  for (auto& type : t.types) {
    auto [n, ts] = value_or_throw(store.count_facts_after(type, cursor));
    if (n > 0)
      oldest = count == 0 ? ts : std::min(oldest, ts);
    count += n;
  }
  t.sink->set_lag(key_str_, count, oldest);
  return count;
}

void outbox_relay::dead_letter(entity_context& ctx, entity_store& store, const outbox_target& t,
                               const fact& f, const outbox_ack& ack, int64_t now) {
  dead_letter_record dl;
  // One per entity, sink and fact: a relay run again after a crash writes the same one.
  dl.id = "dl_" + sha256_hex(key_str_ + "\n" + t.sink->name() + "\n" + f.fact_id).substr(0, 24);
  dl.operation = std::string(outbox_operation) + t.sink->name();
  dl.payload = json{{"sink", t.sink->name()}, {"seq", f.seq}, {"fact_id", f.fact_id}}.dump();
  dl.error_code = ack.error_code.empty() ? "OUTBOX_REFUSED" : ack.error_code;
  dl.error_message = ack.error_message;
  dl.error_category = "client";
  dl.reason = "outbox_refused";
  dl.attempts = 1;
  dl.first_attempt_ms = dl.last_attempt_ms = dl.created_at_ms = dl.updated_at_ms = now;
  dl.trace_id = f.trace_id.empty() ? new_trace_id() : f.trace_id;
  dl.status = dl_status::pending;
  throw_if(store.put_dead_letter(dl));
  ctx.dead_letter_written(dl);
  ctx.stats().dead_letters.inc();
  fact_draft life;
  life.type = "lifecycle";
  life.subtype = "dead_letter_created";
  life.trace_id = dl.trace_id;
  life.data = {{"dead_letter_id", dl.id}, {"status", "pending"},        {"reason", dl.reason},
               {"attempts", 1},           {"sink", t.sink->name()},     {"seq", f.seq},
               {"fact_id", f.fact_id},    {"error_code", dl.error_code}};
  value_or_throw(store.append(life));
}

task<outbox_ack> outbox_relay::deliver(entity_context& ctx, outbox_sink_state& sink,
                                       const fact& f) {
  outbox_message m{sink.name(), ctx.key(), f.seq, f.fact_id, f.type, to_json_text(f)};
  // Starts once every commit before it is durable (the output gate). A named operation, not a
  // temporary in the co_await expression (as entity_context's awaits, for GCC 12).
  auto op =
    async_op<outbox_ack>(ctx, [fn = sink.deliver(), m = std::move(m)](
                                std::function<void(outbox_ack)> done) { fn(m, std::move(done)); });
  outbox_ack ack;
  bool lost = false;
  try {
    ack = co_await op;
  } catch (...) {
    lost = true;
  }
  if (lost) { // the commit before it failed: the delivery never started
    sink.forget_trial();
    throw problems::storage_unavailable.error("the commit before an outbox delivery failed");
  }
  sink.record(ack, ctx.clock_ms());
  co_return ack;
}

task<void> outbox_relay::redeliver(entity_context& ctx, entity_store& store,
                                   dead_letter_record dl) {
  auto p = json::parse(dl.payload, nullptr, false);
  auto name = p.is_object() ? p.value("sink", std::string()) : std::string();
  auto* sink = board_ ? board_->find(name) : nullptr;
  if (!sink)
    throw call_error(error_category::client, "OUTBOX_SINK_NOT_CONFIGURED",
                     "dead letter " + dl.id + ": no outbox sink named '" + name + "'", 404);
  auto f = value_or_throw(store.get(p.value("seq", int64_t{0})));
  auto d = sink->allow(ctx.clock_ms());
  if (!d.allowed)
    throw resilience::circuit_open_error("outbox:" + name, d);
  auto delivery = deliver(ctx, *sink, f);
  auto ack = co_await delivery;
  if (ack.result != outbox_ack::outcome::acknowledged) {
    bool refused = ack.result == outbox_ack::outcome::refused;
    throw call_error(refused ? error_category::client : error_category::transient,
                     ack.error_code.empty() ? "OUTBOX_NOT_ACKNOWLEDGED" : ack.error_code,
                     ack.error_message, refused ? 422 : 503);
  }
  co_return;
}

task<void> outbox_relay::run(entity_context& ctx, entity_store& store) {
  std::optional<int64_t> next_due;
  auto due_at = [&](int64_t t) { next_due = next_due ? std::min(*next_due, t) : t; };
  auto targets = targets_; // the relay's own copy: a turn's writes may re-enter after_writes
  for (auto& t : targets) {
    int64_t now = ctx.clock_ms();
    auto cur = value_or_throw(store.get_outbox_cursor(t.sink->name()));
    if (cur.next_ms > now) { // backing off
      due_at(cur.next_ms);
      continue;
    }
    auto facts = pending(store, t.types, cur.seq, board_->batch());
    bool moved = false, stopped = false;
    for (auto& f : facts) {
      auto d = t.sink->allow(now);
      if (!d.allowed) { // again when the cooldown ends, or within the retry policy's ceiling
        due_at(now + std::clamp<int64_t>(d.retry_after_ms, 1'000, t.sink->max_delay_ms()));
        stopped = true;
        break;
      }
      auto delivery = deliver(ctx, *t.sink, f);
      auto ack = co_await delivery;
      now = ctx.clock_ms();
      if (ack.result == outbox_ack::outcome::retry) {
        ++cur.attempts;
        cur.next_ms = now + t.sink->backoff_ms(cur.attempts, ack.retry_after_ms);
        cur.last_error = error_text(ack);
        due_at(cur.next_ms);
        moved = stopped = true;
        break;
      }
      if (ack.result == outbox_ack::outcome::refused)
        dead_letter(ctx, store, t, f, ack, now);
      cur.seq = f.seq;
      cur.attempts = 0;
      cur.next_ms = 0;
      cur.last_error.clear();
      moved = true;
    }
    if (moved) {
      cur.updated_at_ms = now;
      throw_if(store.put_outbox_cursor(cur));
    }
    // More to relay (a full batch, or facts this turn appended): the next batch runs in the
    // next turn, after the calls queued meanwhile.
    if (measure(store, t, cur.seq) > 0 && !stopped)
      due_at(now);
  }
  seen_seq_ = store.last_seq(); // measured above
  armed_known_ = next_due.has_value();
  if (next_due) // else the alarm's turn ends it
    ctx.set_alarm_internal(outbox_alarm, *next_due, "{}", 0);
  co_return;
}

} // namespace factum::detail
