// crash_await_check.cpp: the checks at the end of the crash rounds for awaiting handlers
// (crash_await.hpp): every entity file opened read-only with the storage library, and the fake
// vendor's per-key counters. What the resilient tool call writes (runtime/src/turn/tool_call.cpp),
// per attempt: an `error` fact of the tool for a failed one; for a successful one a `cost`
// `tool_usage` fact with `failed` false (the tool has a price) and, after failed ones, an
// `outcome` `resolved_after_retry`; `error` facts `CIRCUIT_OPEN`, `max_retries_exceeded` and
// `budget` for the calls the breaker, the retry cap or the budget ended; `lifecycle` facts for
// breaker moves and dead letters. Each carries the call's idempotency key and trace id (a
// dead letter's retry runs with the dead letter's trace id). Runs on the main thread after
// every other thread has ended.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "crash_await.hpp"
#include "crash_support.hpp"

using nlohmann::json;

namespace factum::crash_await {

namespace {

/// What the log says about one entity's dead letters, by id.
struct dead_letter_seen {
  dead_letter_record record;
  int64_t created_seq = 0; ///< its dead_letter_created fact
  int resolved_facts = 0;
};

/// Sorts one fact of a call into the figures and the call's counts.
void count_fact(const fact& f, const json& d, call_record& c, figures& fig) {
  if (f.type == "cost" && f.subtype == "tool_usage" && d.value("failed", true) == false) {
    ++c.deliveries_recorded;
    ++fig.deliveries;
  } else if (f.type == "error" && f.tool_id == tool) {
    if (f.subtype == "max_retries_exceeded")
      ++fig.exhausted;
    else if (f.subtype == "budget")
      ++fig.budget;
    else if (d.value("error_code", "") == "CIRCUIT_OPEN")
      ++fig.fast_fails;
    else {
      ++c.failures_recorded;
      ++fig.attempt_errors;
    }
  } else if (f.type == "outcome" && f.subtype == "resolved_after_retry") {
    ++fig.resolved_after_retry;
  } else if (f.type == "lifecycle" && f.subtype == "circuit_breaker_state_changed") {
    ++fig.breaker_changes;
  } else if (f.type == "lifecycle" && f.subtype == "dead_letter_retry_failed") {
    ++fig.dead_letter_retry_failed;
  }
}

/// One entity's log against the calls: its dead letters first, then its facts in order.
class entity_check {
 public:
  entity_check(int e, std::map<std::string, call_record*>& by_key, figures& fig)
      : e_(e), name_(entity_id(e)), by_key_(by_key), fig_(fig) {}

  /// Every dead letter belongs to a call of this entity (one per key at most), carries the
  /// trace id of one of the key's requests and is resolved.
  void dead_letters(entity_store& store) {
    auto listed = store.list_dead_letters(std::nullopt, 100000);
    if (!listed)
      return fail("dead letters of " + name_ + ": " + listed.error().to_string());
    for (auto& d : *listed) {
      ++fig_.dead_letters;
      auto* c = call_of(d.idempotency_key);
      if (!c) {
        fail(name_ + ": dead letter " + d.id + " has an unknown key '" + d.idempotency_key + "'");
        continue;
      }
      if (!dl_of_key_.emplace(c->key, d.id).second)
        fail("key " + c->key + " has two dead letters: " + dl_of_key_[c->key] + " and " + d.id);
      if (d.status != dl_status::resolved)
        fail("dead letter " + d.id + " of key " + c->key + " is left " +
             std::string(to_string(d.status)));
      if (std::find(c->traces.begin(), c->traces.end(), d.trace_id) == c->traces.end())
        fail("dead letter " + d.id + " has trace id " + d.trace_id + ", which no request of key " +
             c->key + " sent");
      if (!c->dead_letter.empty() && c->dead_letter != d.id)
        fail("key " + c->key + " was told of dead letter " + c->dead_letter + ", the file has " +
             d.id);
      c->dead_letter = d.id;
      c->dead_letter_created_ms = d.created_at_ms;
      dls_[d.id].record = d;
    }
  }

  /// One fact, in seq order.
  void fact_seen(const fact& f) {
    ++fig_.facts;
    auto d = json::parse(f.data, nullptr, false);
    if (f.idempotency_key.empty()) {
      auto id = d.is_object() ? d.value("dead_letter_id", "") : std::string();
      if (f.type == "lifecycle" && f.subtype == "dead_letter_resolved" && dls_.count(id))
        ++dls_[id].resolved_facts;
      if (f.type == "lifecycle" && f.subtype == "dead_letter_retry")
        ++fig_.operator_retry_facts;
      return;
    }
    auto* c = call_of(f.idempotency_key);
    if (!c)
      return fail(name_ + " seq " + std::to_string(f.seq) + " has an unknown key '" +
                  f.idempotency_key + "'");
    if (f.type == "lifecycle" && f.subtype == "dead_letter_created") {
      auto id = d.value("dead_letter_id", "");
      if (!dls_.count(id) || dls_[id].record.idempotency_key != c->key)
        fail("key " + c->key + " seq " + std::to_string(f.seq) + " created dead letter " + id +
             ", which is not its own in the file");
      else
        dls_[id].created_seq = f.seq;
    }
    // Once its dead letter exists, only the dead letter's retries may run the call: every fact
    // of the key then carries the dead letter's trace id.
    if (auto o = dl_of_key_.find(c->key); o != dl_of_key_.end()) {
      auto& dl = dls_[o->second];
      if (dl.created_seq > 0 && f.seq > dl.created_seq && f.trace_id != dl.record.trace_id)
        fail("key " + c->key + " ran outside dead letter " + dl.record.id + " while it owned it: " +
             f.type + "/" + f.subtype + " at seq " + std::to_string(f.seq) + " has trace " +
             f.trace_id + ", the dead letter's is " + dl.record.trace_id);
    }
    count_fact(f, d, *c, fig_);
  }

  /// After the last fact: each dead letter was created, and resolved once.
  void finish() {
    for (auto& [id, dl] : dls_) {
      if (dl.created_seq == 0)
        fail("dead letter " + id + " has no dead_letter_created fact");
      if (dl.record.status == dl_status::resolved && dl.resolved_facts != 1)
        fail("dead letter " + id + " has " + std::to_string(dl.resolved_facts) +
             " dead_letter_resolved facts");
    }
  }

 private:
  call_record* call_of(const std::string& key) {
    auto it = by_key_.find(key);
    return it == by_key_.end() || it->second->entity != e_ ? nullptr : it->second;
  }

  int e_;
  std::string name_;
  std::map<std::string, call_record*>& by_key_;
  figures& fig_;
  std::map<std::string, dead_letter_seen> dls_;
  std::map<std::string, std::string> dl_of_key_; // call key -> dead letter id
};

/// One entity: its chain, its dead letters and its facts.
void check_entity(entity_store& store, int e, std::map<std::string, call_record*>& by_key,
                  figures& fig) {
  auto v = store.verify();
  if (!v || !v->ok)
    fail("hash chain of " + entity_id(e) + " does not verify" +
         (v ? " (first bad seq " + std::to_string(v->first_bad_seq) + ")" : ""));
  entity_check check(e, by_key, fig);
  check.dead_letters(store);
  auto err = test::for_each_fact(store, [&](const fact& f) { check.fact_seen(f); });
  if (!err.empty())
    fail("facts of " + entity_id(e) + ": " + err);
  check.finish();
}

/// The stored answer of every settled key of entity `e` is the one its client got.
void check_keys(entity_store& store, int e, const call_list& calls) {
  for (auto& c : calls) {
    if (c.entity != e || (c.state != call_state::acked && c.state != call_state::terminal))
      continue;
    auto k = store.get_key(c.key);
    if (!k) {
      fail("key " + c.key + " (answered) is not stored: " + k.error().to_string());
      continue;
    }
    auto want = c.state == call_state::acked ? key_status::completed : key_status::failed;
    if (k->status != want ||
        json::parse(k->response, nullptr, false) != json::parse(c.answer, nullptr, false))
      fail("key " + c.key + " is stored " + std::string(to_string(k->status)) + " " + k->response +
           ", its client got " + c.answer);
  }
}

} // namespace

void check_on_disk(const std::filesystem::path& data, call_list& calls, const options& o,
                   figures& fig) {
  std::map<std::string, call_record*> by_key;
  for (auto& c : calls)
    by_key[c.key] = &c;
  for (int e = 0; e < o.entities; ++e) {
    auto s = test::open_read_only(data, {tenant, "webhook", entity_id(e)});
    if (!s) {
      fail("cannot open " + entity_id(e) + ": " + s.error().to_string());
      continue;
    }
    check_entity(**s, e, by_key, fig);
    check_keys(**s, e, calls);
  }
  // One delivery recorded per acknowledged call, none for a terminal failure.
  for (auto& c : calls) {
    int64_t want = c.state == call_state::acked ? 1 : 0;
    if (c.deliveries_recorded != want)
      fail("key " + c.key + (want ? " (acknowledged)" : " (not delivered)") + " has " +
           std::to_string(c.deliveries_recorded) + " deliveries in the log");
  }
}

void check_vendor(const json& keys, call_list& calls, figures& fig) {
  if (!keys.is_object())
    return fail("no per-key counts from the vendor");
  std::set<std::string> derived;
  for (auto& c : calls) {
    derived.insert(c.vendor_key);
    auto it = keys.find(c.vendor_key);
    json k = it == keys.end() ? json::object() : *it;
    int64_t calls_seen = k.value("calls", int64_t{0});
    int64_t delivered = k.value("delivered", int64_t{0});
    int64_t replayed = k.value("replayed", int64_t{0});
    fig.vendor_calls += calls_seen;
    fig.vendor_delivered += delivered;
    fig.vendor_replayed += replayed;
    fig.vendor_failed += k.value("failed", int64_t{0});
    fig.vendor_no_answer += k.value("no_answer", int64_t{0});
    fig.keys_replayed += replayed > 0;
    ++fig.vendor_calls_per_key[calls_seen];
    if (c.state == call_state::acked && delivered < 1)
      fail("key " + c.key + " was acknowledged, but the vendor never delivered " + c.vendor_key +
           " (" + k.dump() + ")");
    if (c.state != call_state::acked && delivered + replayed > 0)
      fail("key " + c.key + " was not acknowledged, but the vendor delivered it");
    // The log may lack attempts (their record died with a killed process), never have more
    // than the vendor saw (docs/reliability.md, "Handlers that await").
    int64_t recorded = c.deliveries_recorded + c.failures_recorded;
    fig.unrecorded += std::max<int64_t>(0, calls_seen - recorded);
    fig.recorded_unseen += std::max<int64_t>(0, recorded - calls_seen);
    if (recorded > calls_seen)
      fail("key " + c.key + " has " + std::to_string(recorded) +
           " vendor attempts in the log, the vendor saw " + std::to_string(calls_seen) + " (" +
           k.dump() + ")");
  }
  for (auto& [k, _] : keys.items())
    if (!derived.count(k))
      fail("the vendor saw Idempotency-Key " + k + ", which no call derives");
}

} // namespace factum::crash_await
