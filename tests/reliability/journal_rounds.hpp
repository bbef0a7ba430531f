// journal_rounds.hpp: what the crash rounds for journaled handlers share between their driver
// (journal_rounds_driver.cpp: the rounds, the load, the settling) and their checks
// (journal_rounds_check.cpp: the files on disk and the vendor's counters): the options, one
// record per logical call, the figures and the names every part must agree on. Records and
// figures are guarded by the driver's mutex while client threads run; the checks run on the
// main thread after every other thread has ended.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "crash_support.hpp"
#include "support/three_steps.hpp"

namespace factum::journal_rounds {

using test::fail;
using test::failure_count;

// -- options --

/// The flags both crash drivers take (crash_support.hpp; --factum is the server with the
/// `three_steps` type, reliability_journal_serve), with these defaults, and --vendor.
struct options : test::driver_options {
  options() {
    rounds = 16;
    connections = 16;
    entities = 12;
  }
  std::string vendor; ///< the `factum-fake-vendor` binary (--vendor, required)
};

// -- one logical call: a client key, retried with the same body until it is answered 2xx --

struct call_record {
  std::string key; ///< the client's Idempotency-Key
  int entity = 0;
  bool sent = false;            ///< a request with the key left (the server may have run it)
  bool acked = false;           ///< answered 2xx
  nlohmann::json answer;        ///< the first 2xx answer's body
  int64_t kills_while_open = 0; ///< kills after its first request and before its first 2xx
  int64_t not_before_ms = 0;    ///< a retryable failure waits before the next retry
};

/// Stable addresses: client threads keep indexes, the list grows.
using call_list = std::deque<call_record>;

// -- figures --

struct figures {
  int64_t kills = 0;
  int64_t calls = 0;                     ///< logical calls (unique client keys)
  int64_t requests = 0;                  ///< HTTP requests (first sends and retries)
  int64_t unanswered = 0;                ///< requests a kill left without a response
  int64_t acked = 0;                     ///< 2xx answers
  int64_t replayed = 0;                  ///< of them marked Idempotent-Replayed
  int64_t replay_checks = 0;             ///< answered keys sent again to see their answer replayed
  int64_t retryable = 0;                 ///< retryable failures (409 in flight, 503, ...)
  std::map<std::string, int64_t> codes;  ///< retryable failures by status and code
  int64_t vendor_in_flight_at_kills = 0; ///< vendor calls in progress just before the kills
  // From the files on disk.
  int64_t facts = 0;
  int64_t steps = 0;       ///< journal rows
  int64_t reruns = 0;      ///< sum over steps of runs - 1
  int64_t steps_rerun = 0; ///< steps with runs > 1
  int64_t keys_rerun = 0;  ///< keys with a step run more than once
  int64_t max_runs = 0;
  // From the vendor's counters.
  int64_t vendor_calls = 0;
  int64_t vendor_replayed = 0; ///< calls the vendor answered from its de-duplication
  int64_t unreached = 0;       ///< runs recorded that the vendor never saw (runs - calls)
};

// -- names --

constexpr const char* api_key = "journal-rounds-key";
constexpr const char* tenant = "acme";
constexpr const char* type = "three_steps";

std::string entity_id(int e);
entity_key entity_of(int e);
/// The vendor key of step `step` of `c` (three_steps.hpp).
std::string vendor_key(const call_record& c, int step);
/// What a 2xx answer of `c` must hold: its key, and per step the vendor's echo of the step's
/// payload and Idempotency-Key. "" or what is wrong.
std::string answer_problem(const call_record& c, const nlohmann::json& answer);

// -- the checks at the end (journal_rounds_check.cpp) --

/// Opens every entity read-only: chains, facts a..d of each key once and in order, agreeing
/// with its answer; its stored answer; its journal: three completed tool steps, reruns no more
/// than the kills it lived through. Fills `runs`: each step's runs by its vendor key.
void check_on_disk(const std::filesystem::path& data, const call_list& calls, const options& o,
                   figures& fig, std::map<std::string, int64_t>& runs);
/// Against GET /_vendor/keys: every step reached the vendor, at most as many times as its
/// journal row says it was run (`runs` per call and step, filled by check_on_disk), and no key
/// no step derives.
void check_vendor(const nlohmann::json& keys, const call_list& calls,
                  const std::map<std::string, int64_t>& runs, figures& fig);

} // namespace factum::journal_rounds
