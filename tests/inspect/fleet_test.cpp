// fleet_test.cpp: the fleet views of `factum inspect` on a data directory (fill_fixture's):
// `recent` (most recently active first), `fleet-dead-letters` (across entities, by state and
// reason) and `fleet-breakers` (per tool, and the breakers not closed), their usage errors, and
// that they write nothing. Test thread only.
#include <doctest/doctest.h>

#include "support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;
using nlohmann::json;

namespace {

std::vector<json> json_lines(const cli_result& r) {
  std::vector<json> out;
  for (auto& l : lines(r.out))
    out.push_back(json::parse(l));
  return out;
}

} // namespace

TEST_CASE("fleet views: recent, fleet-dead-letters and fleet-breakers read every entity of the "
          "scope and write nothing") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto before = snapshot_dir(tmp.path());
  auto dir = tmp.path().string();

  auto recent = run_cli({"inspect", "recent", "--data", dir});
  REQUIRE_MESSAGE(recent.code == 0, recent.err);
  auto rows = json_lines(recent);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["id"] == "a1");
  CHECK(rows[0]["last_activity"] == t0 + 11000);
  CHECK(rows[1]["id"] == "w1");
  CHECK(rows[2]["tenant"] == "globex");
  auto one = json_lines(run_cli({"inspect", "recent", "--data", dir, "acme", "--limit", "1"}));
  REQUIRE(one.size() == 1);
  CHECK(one[0]["id"] == "a1");

  auto dls = json_lines(run_cli({"inspect", "fleet-dead-letters", "--data", dir}));
  REQUIRE(dls.size() == 2);
  CHECK(dls[0]["id"] == "dl_1");
  CHECK(dls[0]["tenant"] == "acme");
  CHECK(dls[0]["entity_type"] == "ledger");
  CHECK(dls[0]["entity_id"] == "a1");
  CHECK(dls[1]["id"] == "dl_2");
  auto pending =
    json_lines(run_cli({"inspect", "fleet-dead-letters", "--data", dir, "--state", "pending"}));
  REQUIRE(pending.size() == 1);
  CHECK(pending[0]["id"] == "dl_2");
  auto by_reason = json_lines(
    run_cli({"inspect", "fleet-dead-letters", "--data", dir, "--reason", "server_error"}));
  REQUIRE(by_reason.size() == 1);
  CHECK(by_reason[0]["id"] == "dl_1");
  CHECK(run_cli({"inspect", "fleet-dead-letters", "--data", dir, "globex"}).out.empty());
  auto table = run_cli({"inspect", "fleet-dead-letters", "--data", dir, "--table"});
  CHECK(table.out.find("acme/ledger/a1  dl_2") != std::string::npos);

  auto br = json_lines(run_cli({"inspect", "fleet-breakers", "--data", dir}));
  REQUIRE(br.size() == 3);
  CHECK(br[0] == json{{"kind", "tool"}, {"tool", "crm"}, {"entities", {{"CLOSED", 1}}}});
  CHECK(br[1] == json{{"kind", "tool"}, {"tool", "telephony"}, {"entities", {{"OPEN", 1}}}});
  CHECK(br[2]["kind"] == "breaker");
  CHECK(br[2]["id"] == "a1");
  CHECK(br[2]["state"] == "OPEN");
  CHECK(json_lines(run_cli({"inspect", "fleet-breakers", "--data", dir, "--tool", "crm"})).size() ==
        1);
  auto brt = run_cli({"inspect", "fleet-breakers", "--data", dir, "--table"});
  CHECK(brt.out.find("telephony       0     1") != std::string::npos);

  CHECK(snapshot_dir(tmp.path()) == before);
}

TEST_CASE("fleet views: usage errors exit 2") {
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  auto dir = tmp.path().string();
  CHECK(run_cli({"inspect", "fleet-dead-letters", "--data", dir, "--state", "bogus"}).code == 2);
  CHECK(run_cli({"inspect", "fleet-dead-letters", "--data", dir, "--limit", "0"}).code == 2);
  CHECK(run_cli({"inspect", "recent", "--data", dir, "--limit", "0"}).code == 2);
  CHECK(run_cli({"inspect", "recent"}).code == 2); // neither --data nor --server
  CHECK(run_cli({"inspect", "fleet-breakers", "--data", dir, "a/b/c/d"}).code == 2);
  auto both = run_cli({"inspect", "fleet-breakers", "--data", dir, "--server", "http://127.0.0.1:1",
                       "--api-key", "k"});
  CHECK(both.code == 2);
  auto scoped = run_cli(
    {"inspect", "fleet-dead-letters", "acme", "--server", "http://127.0.0.1:1", "--api-key", "k"});
  CHECK(scoped.code == 2);
  CHECK(scoped.err.find("give no scope") != std::string::npos);
}
