// degradation_test.cpp: the degradation board (runtime/src/tenancy/degradation.hpp) driven with
// explicit signals and times, no runtime: each rule's level, a critical tool against another, the
// recovery delay, an operator's floor, the feature matrix and its method patterns. Test thread.
#include <doctest/doctest.h>

#include "tenancy/degradation.hpp"

using namespace factum;
using namespace factum::detail;

namespace degradation_test {

namespace {

degradation_config base_config() {
  degradation_config c;
  c.enabled = true;
  c.critical_tools = {"payments"};
  c.tenants = {"acme", "globex"};
  c.recover_after = std::chrono::milliseconds(1000);
  c.quarantine_hold = std::chrono::milliseconds(5000);
  c.features = {{"reports", 0, {"ledger.recent"}, {}},
                {"sms", 1, {}, {"sms"}},
                {"writes", 3, {"ledger.*", "counter.add"}, {}}};
  return c;
}

std::map<std::string, degradation_signals> open_tool(const std::string& tenant,
                                                     const std::string& tool) {
  std::map<std::string, degradation_signals> s;
  s[tenant].open_tools.insert(tool);
  return s;
}

} // namespace

TEST_CASE("degradation: an open breaker of a tool that is not critical is level 1, of a critical "
          "one 2, and only the tenant whose entity holds it moves") {
  degradation_board b(base_config());
  auto ch = b.evaluate(open_tool("acme", "sms"), false, 0);
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].tenant == "acme");
  CHECK(ch[0].from == 0);
  CHECK(ch[0].to == 1);
  CHECK(ch[0].reasons == std::vector<std::string>{"breaker_open:sms"});
  CHECK(b.level_of("globex") == 0);

  ch = b.evaluate(open_tool("acme", "payments"), false, 100);
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].to == 2);
  CHECK(b.status_of("acme").features_off == std::vector<std::string>{"reports", "sms"});
  CHECK(b.level_of("globex") == 0);
}

TEST_CASE("degradation: a level falls only after the rules said a lower one for recover_after, "
          "and a rise in between starts the wait again") {
  degradation_board b(base_config());
  b.evaluate(open_tool("acme", "payments"), false, 0);
  CHECK(b.level_of("acme") == 2);
  CHECK(b.evaluate({}, false, 500).empty()); // lower since 500
  CHECK(b.level_of("acme") == 2);
  b.evaluate(open_tool("acme", "payments"), false, 900); // up again: the wait restarts
  CHECK(b.evaluate({}, false, 1000).empty());
  CHECK(b.evaluate({}, false, 1999).empty());
  auto ch = b.evaluate({}, false, 2000);
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].from == 2);
  CHECK(ch[0].to == 0);
  CHECK(b.level_of("acme") == 0);
}

TEST_CASE("degradation: a quarantine keeps its tenant at 3 for quarantine_hold, a tenant over its "
          "byte quota is 3, and a low disk puts every tenant at 3, named or not") {
  degradation_board b(base_config());
  b.note_quarantine("acme", 0);
  b.evaluate({}, false, 10);
  CHECK(b.level_of("acme") == 3);
  CHECK(b.status_of("acme").reasons == std::vector<std::string>{"quarantine"});
  b.evaluate({}, false, 4999);
  CHECK(b.level_of("acme") == 3);
  b.evaluate({}, false, 5000); // the hold is over: lower from now
  b.evaluate({}, false, 6000);
  CHECK(b.level_of("acme") == 0);

  std::map<std::string, degradation_signals> quota;
  quota["globex"].over_quota = true;
  b.evaluate(quota, false, 7000);
  CHECK(b.level_of("globex") == 3);
  CHECK(b.level_of("acme") == 0);

  auto ch = b.evaluate({}, true, 8000);
  CHECK(b.level_of("acme") == 3);
  CHECK(b.level_of("initech") == 3); // never named: the disk is everyone's
  CHECK(b.status_of("initech").reasons == std::vector<std::string>{"disk_low"});
  CHECK(ch.size() == 1); // acme moved; globex was at 3 already
}

TEST_CASE("degradation: an operator's floor applies at once both ways, and the rules still win "
          "above it") {
  degradation_board b(base_config());
  auto ch = b.set_override("acme", 4, "incident 7", "api-key:abc");
  REQUIRE(ch);
  CHECK(ch->to == 4);
  CHECK(b.status_of("acme").override_actor == "api-key:abc");
  CHECK(b.status_of("acme").reasons == std::vector<std::string>{"operator"});
  CHECK(b.evaluate({}, false, 0).empty()); // the rules say 0: the floor holds
  CHECK(b.level_of("acme") == 4);
  b.set_override("acme", 1, "calmer", "api-key:abc");
  CHECK(b.level_of("acme") == 1);
  b.evaluate(open_tool("acme", "payments"), false, 10);
  CHECK(b.level_of("acme") == 2);
  ch = b.set_override("acme", std::nullopt, "", "api-key:abc");
  CHECK(!ch); // the rules' 2 is still the level
  CHECK(!b.status_of("acme").override_level);
}

TEST_CASE("degradation: the matrix refuses a method or tool whose feature's max_level is below the "
          "tenant's level, and nothing else") {
  degradation_board b(base_config());
  CHECK(!b.refuses_method("acme", "ledger", "recent")); // level 0
  b.evaluate(open_tool("acme", "sms"), false, 0);       // level 1
  auto no = b.refuses_method("acme", "ledger", "recent");
  REQUIRE(no);
  CHECK(no->feature == "reports");
  CHECK(no->level == 1);
  CHECK(!b.refuses_method("acme", "ledger", "append")); // writes run up to 3
  CHECK(!b.refuses_tool("acme", "sms"));                // sms runs at 1
  CHECK(!b.refuses_method("globex", "ledger", "recent"));
  b.set_override("acme", 2, "x", "y");
  CHECK(b.refuses_tool("acme", "sms")->feature == "sms");
  CHECK(!b.refuses_tool("acme", "payments")); // no feature covers it
  b.set_override("acme", 4, "x", "y");
  CHECK(b.refuses_method("acme", "ledger", "append")->feature == "writes");
  CHECK(b.refuses_method("acme", "counter", "add")->feature == "writes");
  CHECK(!b.refuses_method("acme", "counter", "get"));
}

TEST_CASE("degradation: method patterns cover \"*\", \"type.*\" and \"type.method\", with dots "
          "in type names") {
  CHECK(method_pattern_covers("*", "a", "b"));
  CHECK(method_pattern_covers("ledger.*", "ledger", "append"));
  CHECK(!method_pattern_covers("ledger.*", "ledgers", "append"));
  CHECK(method_pattern_covers("ledger.append", "ledger", "append"));
  CHECK(!method_pattern_covers("ledger.append", "ledger", "recent"));
  CHECK(method_pattern_covers("acme.orders.place", "acme.orders", "place"));
  CHECK(!method_pattern_covers("acme.orders.place", "acme", "orders.place"));
  CHECK(!method_pattern_covers("ledger", "ledger", "append"));
}

TEST_CASE("degradation: a board that is not enabled never moves") {
  auto c = base_config();
  c.enabled = false;
  degradation_board b(c);
  CHECK(b.evaluate(open_tool("acme", "payments"), true, 0).empty());
  CHECK(b.level_of("acme") == 0);
  CHECK(!b.refuses_method("acme", "ledger", "recent"));
}

} // namespace degradation_test
