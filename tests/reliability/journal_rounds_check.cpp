// journal_rounds_check.cpp: the checks at the end of the crash rounds for journaled handlers
// (journal_rounds.hpp): every entity file opened read-only with the storage library (facts,
// stored answers, the journal of each key), and the fake vendor's per-key counters. What
// `three_steps.run` leaves (tests/support/three_steps.hpp): facts a, b, c, d of its key, and a
// journal "key:" + its key of three tool steps. Runs on the main thread after every other
// thread has ended.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "crash_support.hpp"
#include "journal_rounds.hpp"

using nlohmann::json;

namespace factum::journal_rounds {

namespace {

/// The facts of one key, by subtype.
using facts_of_key = std::map<std::string, std::vector<fact>>;

/// Facts a..d each once, in that order, agreeing with the answer: a holds the clock and random
/// number the answer carries, b..d the tool replies it carries.
void check_facts(const call_record& c, const facts_of_key& facts) {
  int64_t last_seq = 0;
  for (int i = 0; i < 4; ++i) {
    auto sub = test::three_steps_subtype(i);
    auto it = facts.find(sub);
    size_t n = it == facts.end() ? 0 : it->second.size();
    if (n != 1) {
      fail("key " + c.key + " has " + std::to_string(n) + " facts " + sub);
      continue;
    }
    auto& f = it->second.front();
    if (f.seq < last_seq)
      fail("key " + c.key + ": fact " + sub + " comes before the one appended before it");
    last_seq = f.seq;
    auto d = json::parse(f.data, nullptr, false);
    if (i == 0) {
      if (d.value("now", json()) != c.answer["now"] ||
          d.value("random", json()) != c.answer["random"])
        fail("key " + c.key + " answered now " + c.answer["now"].dump() + ", random " +
             c.answer["random"].dump() + "; its fact a holds " + f.data);
    } else if (d.value("reply", json()) != c.answer["steps"][static_cast<size_t>(i - 1)]) {
      fail("key " + c.key + ": fact " + sub + " holds " + f.data + ", the answer's step " +
           std::to_string(i) + " is " + c.answer["steps"][static_cast<size_t>(i - 1)].dump());
    }
  }
}

/// The key's journal: three tool steps, each completed, run again no more often in all than
/// the kills the call lived through (each kill cuts at most the one step in flight).
void check_journal(entity_store& store, const call_record& c, figures& fig,
                   std::map<std::string, int64_t>& runs) {
  auto steps = store.journal("key:" + c.key);
  if (!steps)
    return fail("journal of key " + c.key + ": " + steps.error().to_string());
  if (steps->size() != 3)
    return fail("key " + c.key + " has " + std::to_string(steps->size()) + " journal steps");
  int64_t reruns = 0;
  for (size_t i = 0; i < steps->size(); ++i) {
    auto& s = (*steps)[i];
    ++fig.steps;
    int step = static_cast<int>(i) + 1;
    auto what = std::string(test::three_steps_tool) + "/" + test::three_steps_operation;
    if (s.step != step || s.kind != "tool" || s.what != what || !s.result || !s.finished_at_ms)
      fail("key " + c.key + ": journal step " + std::to_string(step) + " is " +
           std::to_string(s.step) + " " + s.kind + " " + s.what +
           (s.result ? "" : ", not completed"));
    else if (json::parse(*s.result, nullptr, false).value("body", json()) != c.answer["steps"][i])
      fail("key " + c.key + ": journal step " + std::to_string(step) + " recorded " + *s.result +
           ", the answer's is " + c.answer["steps"][i].dump());
    if (s.runs < 1)
      fail("key " + c.key + ": journal step " + std::to_string(step) + " has runs " +
           std::to_string(s.runs));
    reruns += s.runs - 1;
    fig.steps_rerun += s.runs > 1;
    fig.max_runs = std::max(fig.max_runs, s.runs);
    runs[vendor_key(c, step)] = s.runs;
  }
  fig.reruns += reruns;
  fig.keys_rerun += reruns > 0;
  if (reruns > c.kills_while_open)
    fail("key " + c.key + ": its steps were run again " + std::to_string(reruns) +
         " times, it lived through " + std::to_string(c.kills_while_open) + " kills");
}

/// Its stored answer is the one its client got.
void check_key(entity_store& store, const call_record& c) {
  auto k = store.get_key(c.key);
  if (!k)
    return fail("key " + c.key + " (answered) is not stored: " + k.error().to_string());
  if (k->status != key_status::completed || json::parse(k->response, nullptr, false) != c.answer)
    fail("key " + c.key + " is stored " + std::string(to_string(k->status)) + " " + k->response +
         ", its client got " + c.answer.dump());
}

} // namespace

void check_on_disk(const std::filesystem::path& data, const call_list& calls, const options& o,
                   figures& fig, std::map<std::string, int64_t>& runs) {
  for (int e = 0; e < o.entities; ++e) {
    auto s = test::open_read_only(data, entity_of(e));
    if (!s) {
      fail("cannot open " + entity_id(e) + ": " + s.error().to_string());
      continue;
    }
    auto& store = **s;
    auto v = store.verify();
    if (!v || !v->ok)
      fail("hash chain of " + entity_id(e) + " does not verify");
    std::map<std::string, facts_of_key> by_key;
    auto err = test::for_each_fact(store, [&](const fact& f) {
      ++fig.facts;
      if (f.type == test::three_steps_fact)
        by_key[f.idempotency_key][f.subtype].push_back(f);
    });
    if (!err.empty())
      fail("facts of " + entity_id(e) + ": " + err);
    std::set<std::string> known;
    for (auto& c : calls) {
      if (c.entity != e)
        continue;
      known.insert(c.key);
      check_facts(c, by_key[c.key]);
      check_journal(store, c, fig, runs);
      check_key(store, c);
    }
    for (auto& [k, _] : by_key)
      if (!known.count(k))
        fail(entity_id(e) + " has facts of an unknown key '" + k + "'");
  }
}

void check_vendor(const json& keys, const call_list& calls,
                  const std::map<std::string, int64_t>& runs, figures& fig) {
  if (!keys.is_object())
    return fail("no per-key counts from the vendor");
  std::set<std::string> derived;
  for (auto& c : calls)
    for (int step = 1; step <= 3; ++step) {
      auto vk = vendor_key(c, step);
      derived.insert(vk);
      auto it = keys.find(vk);
      json k = it == keys.end() ? json::object() : *it;
      int64_t seen = k.value("calls", int64_t{0});
      int64_t delivered = k.value("delivered", int64_t{0});
      int64_t replayed = k.value("replayed", int64_t{0});
      fig.vendor_calls += seen;
      fig.vendor_replayed += replayed;
      auto r = runs.find(vk);
      int64_t ran = r == runs.end() ? 0 : r->second;
      auto name = "key " + c.key + " step " + std::to_string(step) + " (" + vk + ")";
      if (delivered != 1 || delivered + replayed != seen)
        fail(name + ": the vendor delivered it " + std::to_string(delivered) + " times (" +
             k.dump() + ")");
      // Every run of a step is one vendor call at most: its row is durable before the call
      // leaves, so the vendor never sees more calls than the row's runs. A kill between the
      // row's commit and the call's departure leaves a run the vendor never saw.
      if (seen > ran)
        fail(name + ": the vendor saw " + std::to_string(seen) + " calls, its journal row " +
             std::to_string(ran) + " runs");
      fig.unreached += std::max<int64_t>(0, ran - seen);
    }
  for (auto& [k, _] : keys.items())
    if (!derived.count(k))
      fail("the vendor saw Idempotency-Key " + k + ", which no step derives");
}

} // namespace factum::journal_rounds
