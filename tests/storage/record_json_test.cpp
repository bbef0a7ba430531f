// record_json_test.cpp: the one JSON form of each record (factum/storage/record_json.hpp) that
// the HTTP API answers and `factum inspect` prints: every member always there, null where the
// store keeps NULL (or where it does not apply), and the stored view the API's form plus the
// members only a reader of the file sees. The test thread only.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "factum/storage/record_json.hpp"

namespace record_json_test {

using namespace factum;

namespace {
using nlohmann::json;

std::set<std::string> members(const json& j) {
  std::set<std::string> out;
  for (auto& [k, v] : j.items())
    out.insert(k);
  return out;
}

/// Every member of `api` is in `stored` with the same value, and `stored` has `extra` besides.
void check_stored_extends(const json& api, const json& stored, std::set<std::string> extra) {
  for (auto& [k, v] : api.items()) {
    CAPTURE(k);
    REQUIRE(stored.contains(k));
    CHECK(stored[k] == v);
  }
  auto more = members(stored);
  for (auto& k : members(api))
    more.erase(k);
  CHECK(more == extra);
}

dead_letter_record bare_dead_letter() {
  dead_letter_record d;
  d.id = "dl_1";
  d.operation = "deliver";
  d.payload = R"({"order":1})";
  d.error_code = "HTTP_503";
  d.error_message = "unavailable";
  d.error_category = "transient";
  d.reason = "server_error";
  d.attempts = 2;
  d.first_attempt_ms = 1000;
  d.last_attempt_ms = 2000;
  d.status = dl_status::pending;
  d.created_at_ms = 2000;
  d.updated_at_ms = 2000;
  return d;
}

} // namespace

TEST_CASE("record JSON: a key has every member, null where it has no value") {
  idempotency_record pending{"k1", key_status::pending, "fp", "", 1000, std::nullopt};
  auto j = key_json(pending);
  CHECK(members(j) == std::set<std::string>{"key", "state", "created_at", "expires_at", "status",
                                            "code", "response_bytes"});
  CHECK(j["state"] == "pending");
  CHECK(j["expires_at"].is_null());
  CHECK(j["status"].is_null());
  CHECK(j["code"].is_null());
  CHECK(j["response_bytes"] == 0);

  idempotency_record done{"k2", key_status::completed, "fp2", R"({"seq":2})", 1000, 5000};
  auto d = key_json(done);
  CHECK(d["status"] == 200);
  CHECK(d["code"].is_null());
  CHECK(d["expires_at"] == 5000);
  check_stored_extends(d, key_json(done, record_view::stored), {"fingerprint", "response"});
  CHECK(key_json(done, record_view::stored)["response"] == json{{"seq", 2}});
  CHECK(key_json(pending, record_view::stored)["response"].is_null());

  idempotency_record failed{"k3", key_status::failed, "fp3", R"({"code":"HTTP_422","status":422})",
                            1000, std::nullopt};
  auto f = key_json(failed);
  CHECK(f["status"] == 422);
  CHECK(f["code"] == "HTTP_422");
}

TEST_CASE("record JSON: alarms, schedules, breakers and owners") {
  alarm_record a{"remind", 5000, R"({"n":1})", 2, 1000};
  auto aj = alarm_json(a);
  CHECK(aj == json{{"name", "remind"}, {"due_ms", 5000}, {"attempts", 2}, {"payload", {{"n", 1}}}});
  check_stored_extends(aj, alarm_json(a, record_view::stored), {"created_at"});

  schedule_record s{
    "tick", R"({"every_ms":60000,"missed":"skip"})", "{}", 60000, std::nullopt, 1000, 2000};
  auto sj = schedule_json(s);
  CHECK(members(sj) ==
        std::set<std::string>{"name", "spec", "missed", "next_at", "last_at", "payload"});
  CHECK(sj["missed"] == "skip");
  CHECK(sj["last_at"].is_null());
  check_stored_extends(sj, schedule_json(s, record_view::stored), {"created_at", "updated_at"});
  s.last_ms = 0;
  CHECK(schedule_json(s)["last_at"] == 0);

  breaker_record b{"vendor", "OPEN", R"({"failures":5})", 3000};
  auto bj = breaker_json(b);
  CHECK(bj == json{{"tool", "vendor"}, {"state", "OPEN"}, {"updated_at", 3000}});
  check_stored_extends(bj, breaker_json(b, record_view::stored), {"data"});
  CHECK(breaker_json(b, record_view::stored)["data"] == json{{"failures", 5}});

  CHECK(owner_json(owner_record{7, "n1", 4, 9000}) ==
        json{{"epoch", 7}, {"node", "n1"}, {"first_seq", 4}, {"claimed_at", 9000}});
}

TEST_CASE("record JSON: a dead letter's columns that may be NULL are null, never left out") {
  auto bare = dead_letter_json(bare_dead_letter());
  CHECK(members(bare) ==
        std::set<std::string>{
          "id",        "status",         "operation",    "payload",          "idempotency_key",
          "config_id", "config_version", "error_code",   "error_message",    "error_category",
          "reason",    "attempts",       "auto_retries", "first_attempt_at", "last_attempt_at",
          "trace_id",  "next_retry_at",  "expires_at",   "created_at",       "updated_at"});
  for (const char* k : {"idempotency_key", "config_id", "config_version", "trace_id",
                        "next_retry_at", "expires_at"}) {
    CAPTURE(k);
    CHECK(bare[k].is_null());
  }
  CHECK(bare["payload"] == json{{"order", 1}});
  CHECK(bare["status"] == "pending");

  auto full = bare_dead_letter();
  full.idempotency_key = "d-1";
  full.config_id = "tool.vendor";
  full.config_version = 3;
  full.trace_id = "t1";
  full.next_retry_ms = 7000;
  full.expires_at_ms = 9000;
  full.auto_retries = 1;
  auto fj = dead_letter_json(full);
  CHECK(members(fj) == members(bare));
  CHECK(fj["idempotency_key"] == "d-1");
  CHECK(fj["config_version"] == 3);
  CHECK(fj["next_retry_at"] == 7000);
  CHECK(fj["auto_retries"] == 1);
}

TEST_CASE("record JSON: a journal step in flight has a null result and end") {
  journal_step in_flight{"key:k1",     2, "sleep", "500ms",     "fp", "[]",
                         std::nullopt, 2, 300,     std::nullopt};
  auto j = journal_step_json(in_flight);
  CHECK(j["journal"] == "key:k1");
  CHECK(j["state"] == "in flight");
  CHECK(j["result"].is_null());
  CHECK(j.contains("finished_at_ms"));
  CHECK(j["finished_at_ms"].is_null());
  CHECK(j["entries"] == json::array());
  journal_step done{"key:k1",         1, "tool", "sms/send", "fp", R"([["append","o",1]])",
                    R"({"ok":true})", 1, 100,    200};
  auto d = journal_step_json(done);
  CHECK(members(d) == members(j));
  CHECK(d["state"] == "completed");
  CHECK(d["finished_at_ms"] == 200);
  CHECK(d["result"] == json{{"ok", true}});
  CHECK(journal_summary_json(journal_summary{"key:k1", 2, 1, 300}) ==
        json{{"journal", "key:k1"}, {"steps", 2}, {"completed", 1}, {"last_started_ms", 300}});
}

TEST_CASE("record JSON: stored text that is not JSON is a string, empty text null") {
  CHECK(json_or_string(R"({"a":1})") == json{{"a", 1}});
  CHECK(json_or_string("not json") == "not json");
  CHECK(json_or_string("").is_null());
}

} // namespace record_json_test
