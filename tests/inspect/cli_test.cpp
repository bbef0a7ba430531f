// cli_test.cpp: `factum inspect` run in-process on a data directory filled with fixed
// timestamps: golden tables for every filter and listing, JSON lines, show, economics, the
// read-only guarantee (bytes, mtime, no file added) and every error exit code.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "factum/storage/sha256.hpp"
#include "factum/storage/spare_pool.hpp"
#include "support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;

namespace {

struct fixture {
  test::temp_dir tmp;
  std::string data;
  fixture() : data(tmp.path().string()) { fill_fixture(tmp.path()); }
  /// `inspect <cmd> --data DIR <args...> --table`.
  cli_result table(const std::string& cmd, std::vector<std::string> args) const {
    std::vector<std::string> a{"inspect", cmd, "--data", data, "--table"};
    a.insert(a.end(), args.begin(), args.end());
    return run_cli(a);
  }
  cli_result json(const std::string& cmd, std::vector<std::string> args) const {
    std::vector<std::string> a{"inspect", cmd, "--data", data};
    a.insert(a.end(), args.begin(), args.end());
    return run_cli(a);
  }
};

/// The SEQ column of a facts table.
std::vector<int64_t> seqs(const std::string& table_text) {
  std::vector<int64_t> out;
  auto ls = lines(table_text);
  for (size_t i = 1; i < ls.size(); ++i)
    out.push_back(std::stoll(ls[i]));
  return out;
}

std::vector<int64_t> json_seqs(const std::string& text) {
  std::vector<int64_t> out;
  for (auto& l : lines(text))
    out.push_back(nlohmann::json::parse(l).at("seq").get<int64_t>());
  return out;
}

using seq_list = std::vector<int64_t>;

} // namespace

TEST_CASE("facts: the default table lists every fact oldest first") {
  fixture f;
  auto r = f.table("facts", {"acme/ledger/a1"});
  CHECK(r.code == 0);
  CHECK(r.err == "");
  CHECK(r.out == golden("facts_all.txt"));
}

TEST_CASE("facts: each filter selects the right facts") {
  fixture f;
  auto sel = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "acme/ledger/a1");
    auto r = f.table("facts", args);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    return seqs(r.out);
  };
  CHECK(sel({"--type", "error"}) == seq_list{4, 9});
  CHECK(sel({"--type", "cost", "--subtype", "tool_usage"}) == seq_list{5, 8, 10});
  CHECK(sel({"--subtype", "sms"}) == seq_list{12});
  CHECK(sel({"--since", "2024-01-17T14:00:05Z"}) == seq_list{6, 7, 8, 9, 10, 11, 12});
  CHECK(sel({"--until", "2024-01-17T14:00:02.000Z"}) == seq_list{1, 2});
  CHECK(sel({"--since", std::to_string(t0 + 3000), "--until", std::to_string(t0 + 5000)}) ==
        seq_list{4, 5});
  CHECK(sel({"--since", "2024-01-17T15:00:03+01:00", "--until", "2024-01-17T14:00:04.500Z"}) ==
        seq_list{4, 5});
  CHECK(sel({"--since", "57s"}) == seq_list{4, 5, 6, 7, 8, 9, 10, 11, 12}); // now = t0 + 60 s
  CHECK(sel({"--after-seq", "10"}) == seq_list{11, 12});
  CHECK(sel({"--before-seq", "3"}) == seq_list{1, 2});
  CHECK(sel({"--trace", "t2"}) == seq_list{3, 4, 5});
  CHECK(sel({"--tool", "crm"}) == seq_list{1, 2, 9, 10});
  CHECK(sel({"--key", "k3"}) == seq_list{6, 7});
  CHECK(sel({"--limit", "3"}) == seq_list{1, 2, 3});
  CHECK(sel({"--newest", "--limit", "3"}) == seq_list{12, 11, 10});
  CHECK(sel({"--newest", "--type", "cost"}) == seq_list{12, 10, 8, 5});
  CHECK(sel({"--tool", "telephony", "--type", "cost", "--after-seq", "5"}) == seq_list{8, 12});
  CHECK(sel({"--type", "nothing"}).empty());
}

TEST_CASE("facts: a filtered golden table with amounts and an error type") {
  fixture f;
  auto r = f.table("facts", {"acme/ledger/a1", "--trace", "t2"});
  CHECK(r.code == 0);
  CHECK(r.out == golden("facts_trace_t2.txt"));
}

TEST_CASE("facts: JSON lines are the fact's JSON view with a valid hash") {
  fixture f;
  auto r = f.json("facts", {"acme/ledger/a1", "--type", "cost"});
  REQUIRE(r.code == 0);
  auto ls = lines(r.out);
  REQUIRE(ls.size() == 4);
  auto j = nlohmann::json::parse(ls[0]);
  CHECK(j["seq"] == 5);
  CHECK(j["type"] == "cost");
  CHECK(j["subtype"] == "tool_usage");
  CHECK(j["timestamp"] == t0 + 4000);
  CHECK(j["tenant_id"] == "acme");
  CHECK(j["entity_type"] == "ledger");
  CHECK(j["entity_id"] == "a1");
  CHECK(j["tool_id"] == "telephony");
  CHECK(j["amount"] == "0.005");
  CHECK(j["currency"] == "USD");
  CHECK(j["data"] == nlohmann::json{{"failed", true}});
  CHECK(j["fact_id"].get<std::string>().rfind("fct_", 0) == 0);
  // The line is exactly the store's JSON view, whose hash covers it.
  CHECK(j["hash"].get<std::string>().size() == 64);
  auto no_hash = j;
  no_hash.erase("hash");
  CHECK(sha256_hex(no_hash.dump()) == j["hash"]);
  // Not a terminal means JSON lines; --json forces them, --table forces a table.
  CHECK(json_seqs(f.json("facts", {"acme/ledger/a1", "--type", "error"}).out) == seq_list{4, 9});
  auto forced =
    run_cli({"inspect", "facts", "--data", f.data, "acme/ledger/a1", "--json", "--type", "error"},
            {}, true);
  CHECK(json_seqs(forced.out) == seq_list{4, 9});
  auto tty = run_cli(
    {"inspect", "facts", "--data", f.data, "acme/ledger/a1", "--type", "error", "--no-color"}, {},
    true);
  CHECK(tty.out.rfind("SEQ", 0) == 0);
}

TEST_CASE("facts: a terminal gets colour unless --no-color") {
  fixture f;
  auto tty =
    run_cli({"inspect", "facts", "--data", f.data, "acme/ledger/a1", "--type", "error"}, {}, true);
  const char* no_color = std::getenv("NO_COLOR");
  if (!no_color || !*no_color) {
    CHECK(tty.out.find("\x1b[1mSEQ\x1b[0m") != std::string::npos);
    CHECK(tty.out.find("\x1b[31merror\x1b[0m") != std::string::npos);
  }
  auto plain = run_cli(
    {"inspect", "facts", "--data", f.data, "acme/ledger/a1", "--type", "error", "--no-color"}, {},
    true);
  CHECK(plain.out.find('\x1b') == std::string::npos);
}

TEST_CASE("facts: --local prints local times with their offset") {
  fixture f;
  auto r = f.table("facts", {"acme/ledger/a1", "--limit", "1", "--local"});
  REQUIRE(r.code == 0);
  auto row = lines(r.out).at(1);
  // 2024-01-17T..:..:00.000+HH:MM (or -HH:MM): the UTC "Z" is gone.
  CHECK(row.find(".000Z") == std::string::npos);
  CHECK((row.find(".000+") != std::string::npos || row.find(".000-") != std::string::npos));
}

TEST_CASE("show: one fact in full by seq and by fact_id") {
  fixture f;
  auto r = f.table("show", {"acme/ledger/a1", "4"});
  REQUIRE(r.code == 0);
  auto ls = lines(r.out);
  // fact_id, prev_hash and hash are random or derived: compare the other lines.
  std::string fixed;
  std::string fact_id;
  for (auto& l : ls) {
    if (l.rfind("fact_id:", 0) == 0)
      fact_id = l.substr(l.find_last_of(' ') + 1);
    if (l.rfind("fact_id:", 0) == 0 || l.rfind("prev_hash:", 0) == 0 || l.rfind("hash:", 0) == 0)
      continue;
    fixed += l + "\n";
  }
  CHECK(fixed == golden("show_seq4.txt"));
  auto by_id = f.json("show", {"acme/ledger/a1", fact_id});
  REQUIRE(by_id.code == 0);
  CHECK(nlohmann::json::parse(by_id.out)["seq"] == 4);
  auto missing = f.table("show", {"acme/ledger/a1", "99"});
  CHECK(missing.code == 3);
  CHECK(missing.err == "factum inspect: no fact with seq 99 in acme/ledger/a1\n");
}

TEST_CASE("keys, alarms, breakers, dead letters: golden tables") {
  fixture f;
  auto keys = f.table("keys", {"acme/ledger/a1"});
  CHECK(keys.code == 0);
  CHECK(keys.out == golden("keys.txt"));
  auto failed = f.json("keys", {"acme/ledger/a1", "--status", "failed"});
  REQUIRE(lines(failed.out).size() == 1);
  auto k = nlohmann::json::parse(failed.out);
  CHECK(k["key"] == "k2");
  CHECK(k["expired"] == true);
  CHECK(k["expires_at"] == t0 + 32'000);
  CHECK(k["response"] == nlohmann::json{{"code", "HTTP_503"}});
  // The HTTP API's form of a key (factum/storage/record_json.hpp), plus what only the file shows.
  CHECK(k["state"] == "failed");
  CHECK(k["status"] == 500); // the stored problem names no status
  CHECK(k["code"] == "HTTP_503");
  CHECK(k["fingerprint"] == "fp2");

  auto alarms = f.table("alarms", {"acme/ledger/a1"});
  CHECK(alarms.code == 0);
  CHECK(alarms.out == golden("alarms.txt"));
  auto alarm_lines = lines(f.json("alarms", {"acme/ledger/a1"}).out);
  REQUIRE(alarm_lines.size() == 2);
  auto retry_dl = nlohmann::json::parse(alarm_lines[1]);
  CHECK(retry_dl["name"] == "retry-dl");
  CHECK(retry_dl["due_ms"] == t0 + 120'000);
  CHECK(retry_dl["created_at"] == t0 + 1000);
  CHECK(retry_dl["overdue"] == false);

  auto journals = f.table("journal", {"acme/ledger/a1"});
  CHECK(journals.code == 0);
  CHECK(journals.out == golden("journals.txt"));
  auto journal = f.table("journal", {"acme/ledger/a1", "--key", "k1"});
  CHECK(journal.code == 0);
  CHECK(journal.out == golden("journal.txt"));
  auto steps = f.json("journal", {"acme/ledger/a1", "--journal", "key:k1"});
  REQUIRE(lines(steps.out).size() == 2);
  auto s1 = nlohmann::json::parse(lines(steps.out)[0]);
  CHECK(s1["journal"] == "key:k1");
  CHECK(s1["state"] == "completed");
  CHECK(s1["finished_at_ms"] == t0 + 200);
  CHECK(s1["entries"] == nlohmann::json::parse(R"([["append","order",1]])"));
  CHECK(s1["result"]["ok"] == true);
  auto s2 = nlohmann::json::parse(lines(steps.out)[1]);
  CHECK(s2["state"] == "in flight");
  CHECK(s2["runs"] == 2);
  CHECK(s2["result"].is_null());
  CHECK(s2.contains("finished_at_ms"));
  CHECK(s2["finished_at_ms"].is_null());
  auto none = f.table("journal", {"acme/ledger/a1", "--key", "nope"});
  CHECK(none.code == 3);
  CHECK(none.err == "factum inspect: no journal key:nope in acme/ledger/a1\n");
  auto both = f.table("journal", {"acme/ledger/a1", "--key", "k1", "--journal", "key:k1"});
  CHECK(both.code == 2);

  auto breakers = f.table("breakers", {"acme/ledger/a1"});
  CHECK(breakers.code == 0);
  CHECK(breakers.out == golden("breakers.txt"));
  auto breaker_lines = lines(f.json("breakers", {"acme/ledger/a1"}).out);
  REQUIRE(breaker_lines.size() == 2);
  CHECK(nlohmann::json::parse(breaker_lines[1]) == nlohmann::json{{"tool", "telephony"},
                                                                  {"state", "OPEN"},
                                                                  {"updated_at", t0 + 10'000},
                                                                  {"data", {{"failures", 5}}}});

  auto dls = f.table("dead-letters", {"acme/ledger/a1"});
  CHECK(dls.code == 0);
  CHECK(dls.out == golden("dead_letters.txt"));
  auto scheduled = f.json("dead-letters", {"acme/ledger/a1", "--status", "scheduled"});
  REQUIRE(lines(scheduled.out).size() == 1);
  auto d = nlohmann::json::parse(scheduled.out);
  CHECK(d["id"] == "dl_1");
  CHECK(d["next_retry_at"] == t0 + 120'000);
  CHECK(d["payload"] == nlohmann::json{{"to", "+100"}});
  CHECK(d["auto_retries"] == 0);
  for (const char* none : {"idempotency_key", "config_id", "config_version", "expires_at"}) {
    CAPTURE(none);
    CHECK(d.contains(none));
    CHECK(d[none].is_null());
  }
  CHECK(f.table("dead-letters", {"acme/ledger/a1", "--status", "weird"}).code == 2);
}

TEST_CASE("entities: tenants, types and ids with counts and last activity") {
  fixture f;
  auto r = f.json("entities", {});
  REQUIRE(r.code == 0);
  auto ls = lines(r.out);
  REQUIRE(ls.size() == 3);
  std::vector<std::string> got;
  for (auto& l : ls) {
    auto j = nlohmann::json::parse(l);
    got.push_back(j["tenant"].get<std::string>() + "/" + j["type"].get<std::string>() + "/" +
                  j["id"].get<std::string>() + " " + std::to_string(j["facts"].get<int>()) + " " +
                  std::to_string(j["last_fact_at"].get<int64_t>() - t0));
    CHECK(j["bytes"].get<int64_t>() > 0);
    CHECK(j["schema_version"] == current_schema_version);
    auto key = entity_key{j["tenant"], j["type"], j["id"]};
    CHECK(j["path"] == key.file_path(f.tmp.path()).string());
  }
  CHECK(got == std::vector<std::string>{"acme/ledger/a1 12 11000", "acme/webhook/w1 3 700",
                                        "globex/ledger/g1 1 100"});
  auto acme = f.table("entities", {"acme"});
  auto al = lines(acme.out);
  REQUIRE(al.size() == 4);
  // The SIZE column is as wide as its largest figure (database and -wal bytes).
  CHECK(al[0].rfind("TENANT  TYPE     ID  FACTS  ", 0) == 0);
  CHECK(al[0].find("  SIZE  LAST_ACTIVITY             SCHEMA") != std::string::npos);
  CHECK(al[1].rfind("acme    ledger   a1     12", 0) == 0);
  CHECK(al[1].find("2024-01-17T14:00:11.000Z") != std::string::npos);
  CHECK(al[3].rfind("2 entities, 1 tenant, 2 types, 15 facts, ", 0) == 0);
  CHECK(lines(f.json("entities", {"acme/webhook"}).out).size() == 1);
  CHECK(lines(f.json("entities", {"nobody"}).out).empty());
  CHECK(f.json("entities", {"bad tenant"}).code == 2);
}

TEST_CASE("a directory without entities says so on stderr, whatever lists them, and exits 0") {
  test::temp_dir tmp;
  std::string dir = tmp.path().string();
  // JSON lines stay empty (no line is a valid empty list); the note goes to stderr, table or not.
  for (auto* cmd : {"entities", "recent", "verify", "fleet-dead-letters", "fleet-breakers"}) {
    for (bool table : {false, true}) {
      CAPTURE(cmd);
      CAPTURE(table);
      std::vector<std::string> args{"inspect", cmd, "--data", dir};
      if (table)
        args.push_back("--table");
      auto r = run_cli(args);
      CHECK(r.code == 0);
      CHECK(r.err == "factum inspect: no entities under " + dir + "\n");
      if (!table)
        CHECK(r.out == "");
    }
  }
  // A scope that takes none of the entities present names the scope.
  fixture f;
  auto nobody = f.json("entities", {"nobody"});
  CHECK(nobody.code == 0);
  CHECK(nobody.out == "");
  CHECK(nobody.err == "factum inspect: no entities of nobody under " + f.data + "\n");
  auto type = f.table("verify", {"acme/nosuch"});
  CHECK(type.code == 0);
  CHECK(type.err == "factum inspect: no entities of acme/nosuch under " + f.data + "\n");
  // Entities found: no note.
  CHECK(f.json("entities", {}).err == "");
  CHECK(f.table("verify", {}).err == "");
}

TEST_CASE("facts: the table shows an error fact's code in full, before the rest of its data") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path(), durability::normal), entity_key{"acme", "ledger", "e1"});
    // As the runtime writes a failed tool attempt: the code's key sorts after several others.
    REQUIRE(s->append(draft("error", "transient", t0, "payments", "t9", "",
                            {{"category", "transient"},
                             {"cost_incurred", "0"},
                             {"currency", "USD"},
                             {"error_code", "PAYMENT_PROVIDER_UNAVAILABLE"},
                             {"error_message", "the provider answered 503"},
                             {"http_status", 503}}))
              .is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto r =
    run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/e1", "--table"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  auto ls = lines(r.out);
  REQUIRE(ls.size() == 2);
  CAPTURE(ls[1]);
  // The cell is still cut at 60 characters, after the code.
  auto cell = ls[1].substr(ls[1].find('{'));
  CHECK(cell == R"({"error_code":"PAYMENT_PROVIDER_UNAVAILABLE","category":"...)");
  // The JSON lines keep the data as it is.
  auto j = run_cli({"inspect", "facts", "--data", tmp.path().string(), "acme/ledger/e1"});
  REQUIRE(j.code == 0);
  CHECK(nlohmann::json::parse(j.out)["data"]["error_code"] == "PAYMENT_PROVIDER_UNAVAILABLE");
}

TEST_CASE("entities: an unclaimed spare at a key's path (a crash mid-creation) is no entity and "
          "no error") {
  fixture f;
  auto before = f.json("entities", {});
  REQUIRE(before.code == 0);
  { // a spare renamed to a key's path and never claimed, as a kill between the two leaves it
    auto pool = spare_pool::start(f.tmp.path(), 1);
    REQUIRE(pool.is_ok());
    REQUIRE((*pool)->wait_ready(1, std::chrono::seconds(30)) == 1);
    auto spare = (*pool)->take();
    (*pool)->stop();
    REQUIRE(spare.has_value());
    auto to = entity_key{"acme", "ledger", "pending"}.file_path(f.tmp.path());
    std::filesystem::create_directories(to.parent_path());
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::rename(std::filesystem::path(*spare) += suffix,
                              std::filesystem::path(to) += suffix);
  }
  auto after = f.json("entities", {});
  CHECK(after.code == 0);
  CHECK(after.err.empty());
  CHECK(after.out == before.out);
  CHECK(f.json("verify", {}).code == 0);
  auto one = f.json("facts", {"acme/ledger/pending"});
  CHECK(one.code == 3); // not found, as a key with no file
  CHECK(one.err.find("unclaimed") != std::string::npos);
}

TEST_CASE("verify: a -wal whose database file was deleted by hand is reported, for its key and "
          "in a sweep of everything") {
  fixture f;
  REQUIRE(f.json("verify", {}).code == 0);
  auto wal = entity_key{"acme", "ledger", "gone"}.file_path(f.tmp.path());
  wal += "-wal";
  std::filesystem::create_directories(wal.parent_path());
  { std::ofstream(wal, std::ios::binary) << std::string(4096, 'w'); }
  auto all = f.json("verify", {});
  CHECK(all.code == 1);
  CHECK(all.err.find("write-ahead log without its database file") != std::string::npos);
  bool reported = false;
  for (auto& l : lines(all.out)) {
    auto j = nlohmann::json::parse(l);
    if (j["path"] == wal.string()) {
      reported = true;
      CHECK(j["ok"] == false);
      CHECK(j["entity"].is_null());
    }
  }
  CHECK(reported);
  auto one = f.json("verify", {"acme/ledger/gone"});
  CHECK(one.code == 6); // corrupt, not "no such entity"
  CHECK(one.err.find("write-ahead log without its database file") != std::string::npos);
  // A tenant's sweep cannot name the key of a lone -wal (its name is a digest): not reported.
  CHECK(f.json("verify", {"acme"}).code == 0);
  // An empty -wal is no WAL.
  std::filesystem::resize_file(wal, 0);
  CHECK(f.json("verify", {}).code == 0);
  CHECK(f.json("verify", {"acme/ledger/gone"}).code == 3);
}

TEST_CASE("economics: exact costs by tool, currency and subtype, and error rates") {
  fixture f;
  auto r = f.table("economics", {});
  CHECK(r.code == 0);
  CHECK(r.err == "");
  CHECK(r.out == golden("economics.txt"));
  auto one = f.json("economics", {"acme/ledger/a1", "--since", "2024-01-17T14:00:05Z"});
  REQUIRE(one.code == 0);
  std::vector<nlohmann::json> js;
  for (auto& l : lines(one.out))
    js.push_back(nlohmann::json::parse(l));
  REQUIRE(!js.empty());
  CHECK(js.back()["kind"] == "summary");
  CHECK(js.back()["outcomes"] == 1);
  CHECK(js.back()["errors"] == 1);
  CHECK(js.back()["since"] == t0 + 5000);
  nlohmann::json usd;
  for (auto& j : js)
    if (j["kind"] == "cost_total" && j["currency"] == "USD")
      usd = j;
  CHECK(usd["total"] == "0.0101");
  CHECK(usd["failed"] == "0.0000");
  CHECK(usd["succeeded"] == "0.0101");
}

TEST_CASE("economics: money sums stay exact over many small amounts") {
  test::temp_dir tmp;
  {
    auto s =
      open_ok(opts_for(tmp.path(), durability::normal), entity_key{"acme", "ledger", "many"});
    std::vector<fact_draft> d;
    for (int i = 0; i < 1000; ++i) // 0.1 is not exact in binary floating point
      d.push_back(cost("tool_usage", t0 + i, "crm", "0.1", "USD", {{"failed", i % 10 == 0}}));
    d.push_back(cost("refund", t0 + 2000, "crm", "-0.3", "USD"));
    REQUIRE(s->append_many(d).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  auto r = run_cli({"inspect", "economics", "--data", tmp.path().string()});
  REQUIRE(r.code == 0);
  std::map<std::string, nlohmann::json> by_subtype;
  for (auto& l : lines(r.out)) {
    auto j = nlohmann::json::parse(l);
    if (j["kind"] == "cost")
      by_subtype[j["subtype"]] = j;
    if (j["kind"] == "cost_total")
      CHECK(j["total"] == "99.7");
  }
  CHECK(by_subtype["tool_usage"]["total"] == "100.0");
  CHECK(by_subtype["tool_usage"]["failed"] == "10.0");
  CHECK(by_subtype["tool_usage"]["succeeded"] == "90.0");
  CHECK(by_subtype["tool_usage"]["failed_facts"] == 100);
  CHECK(by_subtype["refund"]["total"] == "-0.3");
}

TEST_CASE("read-only: inspecting closed files changes no byte, no mtime, and adds no file") {
  fixture f;
  test::temp_dir private_tmp; // the copies go here; it must be empty again afterwards
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  ::setenv("TMPDIR", private_tmp.path().c_str(), 1);
  auto before = snapshot_dir(f.tmp.path());
  // Three closed entities: each database with the emptied -shm a clean close keeps, and its
  // -wal, kept by the close with its frames (small: no checkpoint), which the copies must take.
  REQUIRE(before.files.size() == 9);
  int empty_shm = 0, kept_wal = 0;
  for (auto& [path, v] : before.files) {
    if (path.ends_with("-shm"))
      empty_shm += v.second.empty() ? 1 : 0;
    if (path.ends_with("-wal"))
      kept_wal += !v.second.empty() && v.second.size() <= 256 * 1024 ? 1 : 0;
  }
  CHECK(empty_shm == 3);
  CHECK(kept_wal == 3);
  std::vector<std::vector<std::string>> runs{
    {"entities"},
    {"facts", "acme/ledger/a1"},
    {"facts", "acme/ledger/a1", "--newest", "--type", "cost"},
    {"tail", "acme/ledger/a1", "--timeout", "0.05", "--interval", "10"},
    {"facts", "acme/ledger/a1", "--follow", "--timeout", "0.05", "--interval", "10"},
    {"show", "acme/ledger/a1", "3"},
    {"keys", "acme/ledger/a1"},
    {"alarms", "acme/ledger/a1"},
    {"journal", "acme/ledger/a1", "--key", "k1"},
    {"owners", "acme/ledger/a1"},
    {"breakers", "acme/ledger/a1"},
    {"dead-letters", "acme/ledger/a1"},
    {"economics"},
    {"verify"},
    {"verify", "acme/ledger/a1"},
  };
  for (auto& args : runs) {
    std::vector<std::string> a{"inspect", args[0], "--data", f.data};
    a.insert(a.end(), args.begin() + 1, args.end());
    auto r = run_cli(a);
    CAPTURE(args[0]);
    CHECK(r.code == 0);
  }
  auto after = snapshot_dir(f.tmp.path());
  CHECK(after.files.size() == before.files.size());
  for (auto& [path, v] : before.files) {
    CAPTURE(path);
    REQUIRE(after.files.count(path) == 1);
    CHECK(after.files[path].first == v.first);   // mtime
    CHECK(after.files[path].second == v.second); // bytes
  }
  CHECK(fs::is_empty(private_tmp.path())); // every private copy was removed
  if (old_tmp)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
}

TEST_CASE("read-only: a file a server holds open is read through a copy that has its commits") {
  fixture f;
  entity_key k{"acme", "ledger", "a1"};
  auto writer = open_ok(opts_for(f.tmp.path(), durability::normal), k); // like a running server
  REQUIRE(writer->append(draft("outcome", "late", t0 + 20'000, "", "", "")).is_ok());
  REQUIRE(writer->commit().is_ok());
  REQUIRE(writer->append(draft("outcome", "uncommitted", t0 + 21'000, "", "", "")).is_ok());
  auto file = k.file_path(f.tmp.path());
  CHECK(fs::exists(file.string() + "-wal"));
  CHECK(fs::exists(file.string() + "-shm"));
  auto r = f.json("facts", {"acme/ledger/a1", "--after-seq", "11"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(json_seqs(r.out) == seq_list{12, 13}); // 14 is not committed
  REQUIRE(writer->rollback().is_ok());
  // The reader did not block the writer.
  REQUIRE(writer->append(draft("outcome", "after", t0 + 22'000, "", "", "")).is_ok());
  CHECK(writer->commit().is_ok());
}

TEST_CASE("errors: each failure has its exit code and a prefixed message on stderr") {
  fixture f;
  auto fp = [&](const char* id) { return entity_key{"acme", "ledger", id}.file_path(f.data); };
  // 3: no such entity, no data directory, no such fact
  auto missing = f.table("facts", {"acme/ledger/nope"});
  CHECK(missing.code == 3);
  CHECK(missing.out == "");
  CHECK(missing.err.rfind("factum inspect: no entity acme/ledger/nope in ", 0) == 0);
  CHECK(run_cli({"inspect", "entities", "--data", f.data + "/absent"}).code == 3);
  CHECK(run_cli({"inspect", "verify", "--data", f.data, "acme/ledger/nope"}).code == 3);
  // 4: a SQLite file that factum did not write
  fs::create_directories(fp("foreign").parent_path());
  REQUIRE(raw_exec(fp("foreign"), "CREATE TABLE t(x)") == SQLITE_OK);
  auto foreign = f.table("facts", {"acme/ledger/foreign"});
  CHECK(foreign.code == 4);
  CHECK(foreign.err.find("not a factum entity") != std::string::npos);
  CHECK(foreign.err.find("factum-inspect-") == std::string::npos); // names the real file
  CHECK(foreign.err.find(fp("foreign").string()) != std::string::npos);
  // 5: a newer schema
  REQUIRE(raw_exec(fp("a1"), "PRAGMA user_version=99") == SQLITE_OK);
  auto newer = f.table("keys", {"acme/ledger/a1"});
  CHECK(newer.code == 5);
  CHECK(newer.err.find("schema version 99") != std::string::npos);
  // 6: garbage
  fs::create_directories(fp("junk").parent_path());
  std::ofstream(fp("junk")) << std::string(8192, 'Z');
  auto junk = f.table("alarms", {"acme/ledger/junk"});
  CHECK(junk.code == 6);
  CHECK(junk.err.rfind("factum inspect: ", 0) == 0);
  auto verify_junk = f.table("verify", {"acme/ledger/junk"});
  CHECK(verify_junk.code == 6);
  CHECK(verify_junk.out.find("UNREADABLE") != std::string::npos);
  CHECK(f.table("verify", {"acme/ledger/foreign"}).code == 4);
  CHECK(f.table("verify", {"acme/ledger/a1"}).code == 5);
  // Listing and verifying everything report the unreadable files.
  auto all = f.json("entities", {});
  CHECK(all.code != 0);
  CHECK(lines(all.out).size() == 2); // w1 and g1 are still listed
  CHECK(lines(all.err).size() == 3);
  auto verify_all = f.table("verify", {});
  CHECK(verify_all.code == 1);
  CHECK(verify_all.out.find("UNREADABLE") != std::string::npos);
  // 2: usage
  CHECK(f.table("facts", {"acme/ledger"}).code == 2);
  CHECK(f.table("facts", {"acme/ledger/../x"}).code == 2);
  CHECK(f.table("facts", {"acme/ledger/w1", "--since", "yesterday"}).code == 2);
  CHECK(f.table("facts", {"acme/ledger/w1", "--after-seq", "-1"}).code == 2);
  CHECK(f.table("facts", {"acme/ledger/w1", "--type", "Bad Type"}).code == 2);
  CHECK(f.table("facts", {"acme/ledger/w1", "--json"}).code == 2);  // --json with --table
  CHECK(run_cli({"inspect", "facts", "acme/ledger/w1"}).code == 2); // no --data
  auto server_keys = run_cli(
    {"inspect", "keys", "--data", f.data, "acme/ledger/w1", "--server", "http://127.0.0.1:1"});
  CHECK(server_keys.code == 2); // keys has no --server option
  auto bogus = f.table("facts", {"acme/webhook/w1", "--bogus"});
  CHECK(bogus.code == 2);
  CHECK(bogus.err.rfind("factum inspect: ", 0) == 0);
  auto none = run_cli({"inspect"});
  CHECK(none.code == 2);
  // --help on every subcommand
  for (auto* sub : {"entities", "facts", "tail", "show", "keys", "alarms", "owners", "breakers",
                    "dead-letters", "economics", "verify"}) {
    auto h = run_cli({"inspect", sub, "--help"});
    CAPTURE(sub);
    CHECK(h.code == 0);
    CHECK(h.out.find("Usage:") != std::string::npos);
  }
}
