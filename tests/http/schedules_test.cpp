// schedules_test.cpp: GET /v1/entities/{type}/{id}/alarms over HTTP: an entity's alarms, a
// schedule's alarm with its schedule (spec, policy, next and last fire); an invalid spec set
// through a method call answers 400 INVALID_SCHEDULE. Runs on the test thread.
#include <doctest/doctest.h>

#include <map>

#include "http/fixture.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

/// Sets a schedule (or an alarm) from its call's body.
class planner final : public entity {
 public:
  json plan(context& ctx, json a) {
    if (a.contains("alarm_in_ms"))
      ctx.set_alarm("remind", ctx.now_ms() + a["alarm_in_ms"].get<int64_t>());
    else
      ctx.set_schedule(a.value("name", "report"), a.at("spec"), a.value("payload", json::object()));
    return {{"ok", true}};
  }
};

void add_planner(runtime_config& rc, http_server_config&) {
  rc.types.add(type_builder<planner>("planner").method("plan", &planner::plan).build());
}

} // namespace

TEST_CASE("schedules over HTTP: GET .../alarms lists a schedule's alarm with its schedule") {
  gateway_fixture f(add_planner);
  http_client c(f.port());
  auto auth = header_list{{"X-API-Key", acme_key}};
  json spec = {{"cron", "0 9 * * MON-FRI"},
               {"time_zone", "Europe/Berlin"},
               {"missed", "fire_all"},
               {"max_catch_up", 3},
               {"jitter_ms", 30000}};
  auto set = c.request("POST", "/v1/entities/planner/p1/plan", json_headers(acme_key, "p-1"),
                       json{{"spec", spec}, {"payload", {{"report", "weekday"}}}}.dump());
  REQUIRE_MESSAGE(set.status == 200, set.body);
  REQUIRE(c.request("POST", "/v1/entities/planner/p1/plan", json_headers(acme_key, "p-2"),
                    json{{"alarm_in_ms", 3'600'000}}.dump())
            .status == 200);
  auto list = c.request("GET", "/v1/entities/planner/p1/alarms", auth);
  REQUIRE_MESSAGE(list.status == 200, list.body);
  MESSAGE("GET alarms: " << list.body);
  std::map<std::string, json> by_name; // also the runtime's @purge_keys (the calls had keys)
  for (auto& a : list.json())
    by_name[a["name"].get<std::string>()] = a;
  auto sched = by_name["@schedule:report"];
  auto plain = by_name["remind"];
  REQUIRE(sched.is_object());
  REQUIRE(plain.is_object());
  CHECK_FALSE(plain.contains("schedule"));
  auto s = sched["schedule"];
  CHECK(s["name"] == "report");
  CHECK(s["missed"] == "fire_all");
  CHECK(s["spec"]["cron"] == "0 9 * * MON-FRI");
  CHECK(s["spec"]["time_zone"] == "Europe/Berlin");
  CHECK(s["spec"]["max_catch_up"] == 3);
  CHECK(s["spec"]["grace_ms"] == 60000); // the defaults filled in
  CHECK(s["payload"] == json{{"report", "weekday"}});
  CHECK(s["last_at"].is_null());
  auto next = s["next_at"].get<int64_t>();
  CHECK(next > now_ms());
  CHECK(next % 60'000 == 0); // a whole minute
  auto due = sched["due_ms"].get<int64_t>();
  CHECK(due >= next);
  CHECK(due <= next + 30'000); // within its jitter
  // A query is refused, and so is another tenant (it never wrote planner/p1).
  CHECK(c.request("GET", "/v1/entities/planner/p1/alarms?x=1", auth).status == 400);
  CHECK(c.request("GET", "/v1/entities/planner/p1/alarms", {{"X-API-Key", globex_key}}).code() ==
        "ENTITY_NOT_FOUND");
}

TEST_CASE(
  "schedules over HTTP: an invalid spec answers 400 INVALID_SCHEDULE saying what is wrong") {
  gateway_fixture f(add_planner);
  http_client c(f.port());
  auto bad = c.request("POST", "/v1/entities/planner/p2/plan", json_headers(acme_key, "b-1"),
                       json{{"spec", {{"cron", "0 25 * * *"}}}}.dump());
  MESSAGE("POST plan: " << bad.body);
  CHECK(bad.status == 400);
  CHECK(bad.code() == "INVALID_SCHEDULE");
  CHECK(bad.json()["detail"] == "cron hour field '25': values must be 0 to 23");
}
