// log_format_test.cpp: the two forms of `factum serve`'s log lines (format_log_line): JSON lines
// pass through unchanged; the text form is one line per event (time, level, event, then
// key=value pairs, `detail` last), quoting what needs it. Pure formatting on the test thread.
#include <doctest/doctest.h>

#include "factum/tools/serve.hpp"

using namespace factum;
using namespace factum::tools;

TEST_CASE("log format: JSON lines are written as they are made") {
  const char* line =
    R"({"event":"start","level":"info","port":8080,"ts":"2026-12-08T01:44:57.388Z"})";
  CHECK(format_log_line(line, log_format::json) == line);
}

TEST_CASE("log format: text is time, level, event, then key=value pairs with detail last") {
  auto start = format_log_line(
    R"({"console":"http://127.0.0.1:8080/console","data_dir":"./data","dev":true,)"
    R"("durability":"full","event":"start","level":"info","listen":"127.0.0.1:8080",)"
    R"("outbox_sinks":[],"pid":14694,"port":8080,"tenants":["acme","globex"],"tools":[],)"
    R"("ts":"2026-12-08T01:44:57.388Z","types":["ledger","counter"],)"
    R"("url":"http://127.0.0.1:8080"})",
    log_format::text);
  CHECK(start == "2026-12-08T01:44:57.388Z info  start console=http://127.0.0.1:8080/console "
                 "data_dir=./data dev=true durability=full listen=127.0.0.1:8080 pid=14694 "
                 "port=8080 tenants=acme,globex types=ledger,counter url=http://127.0.0.1:8080");
  auto failed = format_log_line(
    R"({"code":"UNKNOWN_ENTITY_TYPE","detail":"no entity type Counter","duration_ms":0.05,)"
    R"("event":"request_failed","level":"warn","method":"POST","path":"/v1/entities/Counter/c1/add",)"
    R"("replayed":false,"route":"call","status":404,"tenant":null,"trace_id":"01a2",)"
    R"("ts":"2026-12-08T01:44:59.301Z"})",
    log_format::text);
  CHECK(failed == "2026-12-08T01:44:59.301Z warn  request_failed code=UNKNOWN_ENTITY_TYPE "
                  "duration_ms=0.05 method=POST path=/v1/entities/Counter/c1/add replayed=false "
                  "route=call status=404 trace_id=01a2 detail=\"no entity type Counter\"");
}

TEST_CASE("log format: text quotes what a bare word cannot hold, and stays one line") {
  // The runtime's lines carry their time as epoch milliseconds; a line without a level is info.
  auto runtime = format_log_line(
    R"({"ts":1705500000000,"event":"entity_quarantined","level":"error","entity":"acme/ledger/a1",)"
    R"("detail":"sync failed:\n EIO","action":"a \"quoted\" word"})",
    log_format::text);
  CHECK(runtime == "2024-01-17T14:00:00.000Z error entity_quarantined "
                   "action=\"a \\\"quoted\\\" word\" entity=acme/ledger/a1 "
                   "detail=\"sync failed:\\n EIO\"");
  auto moved = format_log_line(
    R"({"ts":"2026-01-01T00:00:00.000Z","event":"shard_move_started","shard":3,"to":"",)"
    R"("epoch":{"a":1},"names":["x y","z"],"note":"a=b"})",
    log_format::text);
  CHECK(moved == "2026-01-01T00:00:00.000Z info  shard_move_started epoch={\"a\":1} "
                 "names=[\"x y\",\"z\"] note=\"a=b\" shard=3 to=\"\"");
  // What is not a JSON object is written as it is.
  CHECK(format_log_line("factum: archive prune x: y", log_format::text) ==
        "factum: archive prune x: y");
}
