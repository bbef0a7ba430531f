// journal.cpp: the journal of the running turn (journal.hpp). Runs on the entity's actor
// thread. An entry is the JSON array [kind, what, result]; a step's row keeps the entries done
// since the step before as a JSON array of them (docs/storage-format.md section 16).
#include "turn/journal.hpp"
#include "turn/call_errors.hpp"

namespace factum::detail {

using nlohmann::json;

call_error journal_mismatch(const std::string& message) {
  return problems::journal_mismatch.error(
    "the handler's replay diverged from its journal: " + message +
    ". A journaled handler must do the same steps in the same order when it "
    "runs again (docs/architecture.md, \"Durable execution\")");
}

std::string journal_key_of_call(std::string_view k) {
  return "key:" + std::string(k);
}

// -- the journal of an alarm's run --

namespace {

std::string alarm_journal_prefix(std::string_view name) {
  return "alarm:" + std::string(name);
}

} // namespace

std::string alarm_journal_key(std::string_view name, std::string_view run_id) {
  return alarm_journal_prefix(name) + "#" + std::string(run_id);
}

bool is_alarm_journal(std::string_view key, std::string_view name) {
  auto prefix = alarm_journal_prefix(name);
  if (key.substr(0, prefix.size()) != prefix)
    return false;
  return key.size() == prefix.size() ||
         (key.size() == prefix.size() + 1 + alarm_run_id_size && key[prefix.size()] == '#');
}

std::vector<std::string> alarm_journals(entity_store& store, std::string_view name) {
  // The prefix alone also takes the journals of longer names ("tick" and "tick2").
  auto keys = value_or_throw(store.journal_keys(alarm_journal_prefix(name), 10000));
  std::erase_if(keys, [&](const std::string& k) { return !is_alarm_journal(k, name); });
  return keys;
}

std::string alarm_run_journal(entity_store& store, std::string_view name) {
  auto keys = alarm_journals(store, name);
  if (!keys.empty())
    return keys.front();
  auto id = time_ordered_id("", static_cast<int>(alarm_run_id_size) - 12);
  return alarm_journal_key(name, id);
}

json journal_result(const tool_reply& r) {
  json j = {{"ok", r.ok},
            {"http_status", r.http_status},
            {"body", r.body},
            {"category", to_string(r.category)},
            {"attempts", r.attempts}};
  if (!r.error_code.empty())
    j["error_code"] = r.error_code;
  if (!r.error_message.empty())
    j["error_message"] = r.error_message;
  if (r.retry_after_ms)
    j["retry_after_ms"] = *r.retry_after_ms;
  if (!r.cost_amount.empty())
    j["cost_amount"] = r.cost_amount;
  if (!r.dead_letter_id.empty())
    j["dead_letter_id"] = r.dead_letter_id;
  return j;
}

tool_reply tool_reply_from_journal(const json& j) {
  tool_reply r;
  if (!j.is_object())
    return r;
  r.ok = j.value("ok", false);
  r.http_status = j.value("http_status", 0);
  r.body = j.value("body", json());
  r.error_code = j.value("error_code", "");
  r.error_message = j.value("error_message", "");
  r.category = parse_error_category(j.value("category", "")).value_or(error_category::external);
  if (j.contains("retry_after_ms"))
    r.retry_after_ms = j.value("retry_after_ms", int64_t{0});
  r.cost_amount = j.value("cost_amount", "");
  r.attempts = j.value("attempts", 0);
  r.dead_letter_id = j.value("dead_letter_id", "");
  return r;
}

json journal_result(const call_reply& r) {
  json j = {{"ok", r.ok}, {"body", r.body}, {"http_status", r.http_status}};
  if (!r.ok)
    j.update({{"code", r.code}, {"category", r.category}, {"retryable", r.retryable}});
  if (r.retry_after_ms)
    j["retry_after_ms"] = r.retry_after_ms;
  return j;
}

call_reply call_reply_from_journal(const json& j) {
  call_reply r;
  if (!j.is_object())
    return r;
  r.ok = j.value("ok", false);
  r.body = j.value("body", "");
  r.http_status = j.value("http_status", 200);
  r.code = j.value("code", "");
  r.category = j.value("category", "");
  r.retryable = j.value("retryable", false);
  r.retry_after_ms = j.value("retry_after_ms", int64_t{0});
  return r;
}

void turn_journal::start(std::string key, std::vector<journal_step> recorded) {
  stop();
  active_ = true;
  key_ = std::move(key);
  recorded_ = std::move(recorded);
  if (!recorded_.empty())
    next_step_ = recorded_.front().step;
}

void turn_journal::stop() {
  active_ = in_step_ = false;
  key_.clear();
  recorded_.clear();
  next_recorded_ = next_entry_ = 0;
  entries_ = nullptr;
  next_step_ = 1;
  live_.clear();
}

const json& turn_journal::recorded_entries() {
  if (entries_.is_null()) {
    entries_ = json::parse(recorded_[next_recorded_].entries, nullptr, false);
    if (!entries_.is_array())
      entries_ = json::array();
  }
  return entries_;
}

void turn_journal::mismatch(const std::string& did, const std::string& recorded) const {
  throw journal_mismatch("the handler " + did + " where the journal of " + key_ + " has " +
                         recorded);
}

std::optional<json> turn_journal::replay(std::string_view kind, std::string_view what) {
  if (!replaying())
    return std::nullopt;
  auto& rec = recorded_[next_recorded_];
  const auto& entries = recorded_entries();
  std::string did = "did " + std::string(kind) + " '" + std::string(what) + "'";
  if (next_entry_ >= entries.size())
    mismatch(did, "step " + std::to_string(rec.step) + " (" + rec.kind + " " + rec.what + ")");
  const auto& e = entries[next_entry_];
  bool same = e.is_array() && e.size() == 3 && e[0] == kind && e[1] == what;
  if (!same)
    mismatch(did, "entry " + e.dump() + " before step " + std::to_string(rec.step));
  ++next_entry_;
  return e[2];
}

void turn_journal::record(std::string_view kind, std::string_view what, json result) {
  live_.push_back(live_entry{kind, std::string(what), std::move(result)});
}

turn_journal::step_start turn_journal::begin_step(std::string_view kind, std::string_view what,
                                                  std::string_view fingerprint, int64_t now_ms) {
  step_start out;
  if (replaying()) {
    auto& rec = recorded_[next_recorded_];
    std::string did = "awaited " + std::string(kind) + " " + std::string(what);
    if (next_entry_ < recorded_entries().size())
      mismatch(did, "entry " + recorded_entries()[next_entry_].dump());
    if (rec.kind != kind || rec.what != what)
      mismatch(did, "step " + std::to_string(rec.step) + " (" + rec.kind + " " + rec.what + ")");
    if (rec.fingerprint != fingerprint)
      mismatch(did + " with another request",
               "step " + std::to_string(rec.step) + " with fingerprint " + rec.fingerprint);
    ++next_recorded_;
    next_entry_ = 0;
    entries_ = nullptr;
    next_step_ = rec.step + 1;
    out.step = rec.step;
    if (rec.result) {
      out.result = json::parse(*rec.result, nullptr, false);
      if (!out.result->is_discarded())
        return out;
      out.result.reset(); // unreadable: the step runs again
    }
    // In flight when the turn was interrupted, or it ended in a dead letter: it runs again, and
    // the turn is live from there on. What the first run did after it (a reaction to a result
    // the journal never recorded, such as a compensation) is not replayed.
    recorded_.resize(next_recorded_);
    out.cut_off = !rec.finished_at_ms;
    out.row = rec;
    out.row.runs += 1;
    out.row.result.reset();
    out.row.finished_at_ms.reset();
    if (out.row.kind != "sleep") // a sleep keeps its first start: it ends at start + duration
      out.row.started_at_ms = now_ms;
    in_step_ = true;
    return out;
  }
  out.step = next_step_++;
  out.row.key = key_;
  out.row.step = out.step;
  out.row.kind = std::string(kind);
  out.row.what = std::string(what);
  out.row.fingerprint = std::string(fingerprint);
  json entries = json::array();
  for (auto& e : live_)
    entries.push_back(json::array({e.kind, std::move(e.what), std::move(e.result)}));
  out.row.entries = entries.dump();
  out.row.runs = 1;
  out.row.started_at_ms = now_ms;
  live_.clear();
  in_step_ = true;
  return out;
}

} // namespace factum::detail
