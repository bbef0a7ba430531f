// outbox_unit_test.cpp: the outbox's plain classes, without a scheduler: the board's validation
// of runtime_config::outbox and the routes an entity takes; a sink's breaker, backoff and lag;
// what an HTTP sink's answer means (outbox_ack_of) and the request it sends; the store's cursors
// (storage format 9, migration of a version-8 file).
#include <doctest/doctest.h>

#include "factum/sinks/http_tool.hpp"
#include "factum/storage/entity_store.hpp"
#include "outbox/outbox_board.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using nlohmann::json;

namespace {

void never(const outbox_message&, std::function<void(outbox_ack)> done) {
  done(outbox_ack{});
}

outbox_config one_sink() {
  outbox_config c;
  c.sinks["bus"].deliver = never;
  c.routes.push_back({"bus", {"payment"}, {}, {}});
  return c;
}

std::string why(const outbox_config& c) {
  auto b = detail::outbox_board::make(c);
  return b ? "" : b.error().message();
}

outbox_cursor cursor(std::string sink, int64_t seq) {
  outbox_cursor c;
  c.sink = std::move(sink);
  c.seq = seq;
  return c;
}

outbox_ack ack_of(int status, std::string transport = {}) {
  tool_reply r;
  r.http_status = status;
  r.ok = status >= 200 && status < 300;
  r.error_code = std::move(transport);
  return outbox_ack_of(r);
}

} // namespace

TEST_CASE("outbox board: the configuration is checked and each refusal names its field") {
  CHECK(why(one_sink()).empty());
  auto c = one_sink();
  c.routes[0].sink = "nope";
  CHECK(why(c).find("outbox.routes[0].sink") == 0);
  c = one_sink();
  c.routes[0].fact_types.clear();
  CHECK(why(c).find("outbox.routes[0].fact_types") == 0);
  c = one_sink();
  c.routes[0].fact_types = {"Not A Type"};
  CHECK(why(c).find("outbox.routes[0].fact_types") == 0);
  c = one_sink();
  c.sinks["bad name"].deliver = never;
  CHECK(why(c).find("outbox.sinks.bad name") == 0);
  c = one_sink();
  c.sinks["quiet"] = outbox_sink{};
  CHECK(why(c).find("outbox.sinks.quiet: has no transport") == 0);
  c = one_sink();
  c.sinks["bus"].retry = json{{"max_attempts", 0}};
  CHECK(why(c).find("outbox.sinks.bus.retry") == 0);
  c = one_sink();
  c.sinks["bus"].breaker = json{{"cooldown_ms", -1}};
  CHECK(why(c).find("outbox.sinks.bus.breaker") == 0);
  c = one_sink();
  c.batch = 0;
  CHECK(why(c).find("outbox.batch") == 0);
}

TEST_CASE("outbox board: an entity takes the routes its tenant and type match (one target per "
          "sink with the union of their fact types)") {
  outbox_config c;
  c.sinks["a"].deliver = never;
  c.sinks["b"].deliver = never;
  c.routes.push_back({"b", {"payment"}, {"acme"}, {}});
  c.routes.push_back({"a", {"refund"}, {}, {"ledger"}});
  c.routes.push_back({"b", {"refund", "payment"}, {}, {"ledger"}});
  auto b = detail::outbox_board::make(c);
  REQUIRE(b.is_ok());
  auto t = (*b)->targets_for(entity_key{"acme", "ledger", "x"});
  REQUIRE(t.size() == 2);
  CHECK(t[0].sink->name() == "a");
  CHECK(t[0].types == std::vector<std::string>{"refund"});
  CHECK(t[1].sink->name() == "b");
  CHECK(t[1].types == std::vector<std::string>{"payment", "refund"});
  auto other = (*b)->targets_for(entity_key{"globex", "counter", "x"});
  CHECK(other.empty());
  auto acme_counter = (*b)->targets_for(entity_key{"acme", "counter", "x"});
  REQUIRE(acme_counter.size() == 1);
  CHECK(acme_counter[0].types == std::vector<std::string>{"payment"});
}

TEST_CASE("outbox sink: failures open its one breaker which then holds deliveries back (refusals "
          "do not count as failures)") {
  outbox_config c = one_sink();
  c.sinks["bus"].breaker =
    json{{"count_window", {{"size", 3}, {"min_calls", 3}, {"failure_threshold", 3}}},
         {"cooldown_ms", 10'000}};
  auto b = detail::outbox_board::make(c);
  REQUIRE(b.is_ok());
  auto* s = (*b)->targets_for(entity_key{"acme", "ledger", "x"})[0].sink;
  outbox_ack refused;
  refused.result = outbox_ack::outcome::refused;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(s->allow(1'000).allowed);
    s->record(refused, 1'000);
  }
  CHECK(s->allow(1'000).allowed);
  outbox_ack failed; // retry
  for (int i = 0; i < 3; ++i)
    s->record(failed, 1'000);
  auto d = s->allow(2'000);
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after_ms == 9'000);
  auto st = s->snapshot(2'000);
  CHECK(st.refused == 3);
  CHECK(st.retried == 3);
  CHECK(st.fast_fails == 1);
  CHECK(st.breaker == resilience::breaker_state::open);
  CHECK(s->allow(11'000).allowed); // the cooldown passed: a trial
}

TEST_CASE("outbox sink: the backoff follows its retry policy and stays at the ceiling past "
          "max_attempts (delivery never gives up) and honours Retry-After") {
  outbox_config c = one_sink();
  c.sinks["bus"].retry =
    json{{"base_delay_ms", 100}, {"max_delay_ms", 1'000}, {"max_attempts", 2}, {"jitter", "none"}};
  auto b = detail::outbox_board::make(c);
  REQUIRE(b.is_ok());
  auto* s = (*b)->targets_for(entity_key{"acme", "ledger", "x"})[0].sink;
  CHECK(s->backoff_ms(1, std::nullopt) == 100);
  CHECK(s->backoff_ms(2, std::nullopt) == 200);
  CHECK(s->backoff_ms(3, std::nullopt) == 400);
  CHECK(s->backoff_ms(50, std::nullopt) == 1'000);
  CHECK(s->backoff_ms(1, int64_t{7'000}) == 7'000);
}

TEST_CASE("outbox sink: the lag is the sum over entities and its age that of the oldest fact") {
  auto b = detail::outbox_board::make(one_sink());
  REQUIRE(b.is_ok());
  auto* s = (*b)->targets_for(entity_key{"acme", "ledger", "x"})[0].sink;
  s->add_lag("e1", 2, 1'000);
  s->add_lag("e1", 1, 1'500);
  s->add_lag("e2", 4, 800);
  auto st = s->snapshot(2'000);
  CHECK(st.lag == 7);
  CHECK(st.oldest_age_ms == 1'200);
  s->set_lag("e2", 0, 0); // caught up
  st = s->snapshot(2'000);
  CHECK(st.lag == 3);
  CHECK(st.oldest_age_ms == 1'000);
  s->set_lag("e1", 0, 0);
  st = s->snapshot(2'000);
  CHECK(st.lag == 0);
  CHECK(st.oldest_age_ms == 0);
}

TEST_CASE("outbox HTTP sink: 2xx acknowledges (408 429 5xx and no answer retry) and other 4xx "
          "refuse for good") {
  using o = outbox_ack::outcome;
  CHECK(ack_of(200).result == o::acknowledged);
  CHECK(ack_of(204).result == o::acknowledged);
  for (int s : {408, 429, 500, 502, 503, 504})
    CHECK(ack_of(s).result == o::retry);
  for (int s : {400, 401, 403, 404, 409, 413, 422})
    CHECK(ack_of(s).result == o::refused);
  auto t = ack_of(0, "timeout");
  CHECK(t.result == o::retry);
  CHECK(t.error_code == "timeout");
  CHECK(ack_of(503).error_code == "HTTP_503");
  tool_reply r;
  r.http_status = 429;
  r.retry_after_ms = 2'000;
  CHECK(outbox_ack_of(r).retry_after_ms == 2'000);
}

TEST_CASE("outbox HTTP sink: the fact is the body and its fact_id the Idempotency-Key") {
  tool_request seen;
  auto fn = http_outbox_sink("audit", [&](const tool_request& req, auto done) {
    seen = req;
    tool_reply r;
    r.ok = true;
    r.http_status = 201;
    done(r);
  });
  outbox_message m{"audit",   entity_key{"acme", "ledger", "x"},
                   7,         "fct_7",
                   "payment", R"({"fact_id":"fct_7","seq":7,"trace_id":"t1","type":"payment"})"};
  std::optional<outbox_ack> got;
  fn(m, [&](outbox_ack a) { got = a; });
  REQUIRE(got);
  CHECK(got->result == outbox_ack::outcome::acknowledged);
  CHECK(seen.tool == "audit");
  CHECK(seen.operation.empty());
  CHECK(seen.idempotency_key == "fct_7");
  CHECK(seen.trace_id == "t1");
  CHECK(seen.payload["seq"] == 7);
}

TEST_CASE("outbox store: cursors are put and replaced and listed (facts after a cursor counted "
          "by type) and a version-8 file gets the table by migration 9") {
  test::temp_dir tmp;
  store_options o;
  o.data_dir = tmp.path();
  entity_key key{"acme", "ledger", "ob"};
  {
    auto v8 = o;
    v8.target_schema_version = 8; // the last version without outbox_cursors
    auto s = entity_store::open(v8, key);
    REQUIRE(s.is_ok());
    CHECK((*s)->schema_version() == 8);
    CHECK((*s)->put_outbox_cursor(cursor("bus", 1)).code() == errc::invalid_argument);
    CHECK((*s)->get_outbox_cursor("bus")->seq == 0);
    for (auto type : {"payment", "other", "payment"}) {
      fact_draft d;
      d.type = type;
      d.timestamp_ms = 1'000 + (*s)->last_seq();
      REQUIRE((*s)->append(d).is_ok());
    }
    REQUIRE((*s)->commit().is_ok());
  }
  auto s = entity_store::open(o, key);
  REQUIRE(s.is_ok());
  auto& st = **s;
  CHECK(st.schema_version() == current_schema_version);
  CHECK(st.get_outbox_cursor("bus")->seq == 0); // none yet
  auto n = st.count_facts_after("payment", 0);
  REQUIRE(n.is_ok());
  CHECK(n->first == 2);
  CHECK(n->second == 1'000);
  CHECK(st.count_facts_after("payment", 1)->first == 1);
  CHECK(st.count_facts_after("payment", 1)->second == 1'002);
  CHECK(st.count_facts_after("payment", 3)->first == 0);
  outbox_cursor c{"bus", 1, 2, 5'000, "HTTP_503: down", 4'000};
  REQUIRE(st.put_outbox_cursor(c).is_ok());
  REQUIRE(st.put_outbox_cursor(cursor("audit", 3)).is_ok());
  c.seq = 3;
  c.attempts = 0;
  c.last_error.clear();
  REQUIRE(st.put_outbox_cursor(c).is_ok()); // replaces
  REQUIRE(st.commit().is_ok());
  auto all = st.list_outbox_cursors();
  REQUIRE(all.is_ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].sink == "audit");
  CHECK((*all)[1].sink == "bus");
  CHECK((*all)[1].seq == 3);
  CHECK((*all)[1].attempts == 0);
  CHECK((*all)[1].next_ms == 5'000);
  CHECK((*all)[1].last_error.empty());
  CHECK(st.put_outbox_cursor(cursor("", 1)).code() == errc::invalid_argument);
  CHECK(st.verify()->ok);
}
