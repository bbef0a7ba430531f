// as_of_test.cpp: `factum inspect` reading an entity as it was, from the continuous archive:
// `state`, `keys` and the other per-entity commands with --as-of / --as-of-seq, `bookmark` and
// `bookmarks`. A store with an archive commits two stages of keys, alarms, breakers and dead
// letters; each as-of read must show exactly the first stage's, the live file the second's, and
// the archive must stay as it was.
#include <doctest/doctest.h>

#include <set>

#include "factum/storage/wal_archive.hpp"
#include "inspect/support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::test::inspect;
using nlohmann::json;

namespace as_of_test {

namespace {

const entity_key key{"acme", "ledger", "a1"};

/// One commit: a completed key `k` and its fact, plus what `more` writes in the same turn.
template <class F> void commit(entity_store& s, const std::string& k, F more) {
  REQUIRE(s.begin_turn().is_ok());
  REQUIRE(s.begin_key(k, "fp", 0, now_ms()).is_ok());
  fact_draft d;
  d.type = "invocation";
  d.idempotency_key = k;
  d.data = {{"k", k}};
  REQUIRE(s.append(d).is_ok());
  REQUIRE(s.complete_key(k, R"({"k":")" + k + R"("})").is_ok());
  more(s);
  REQUIRE(s.end_turn(true).is_ok());
  REQUIRE(s.commit().is_ok());
}

dead_letter_record letter(const std::string& id, dl_status st) {
  dead_letter_record dl;
  dl.id = id;
  dl.operation = "deliver";
  dl.payload = "{}";
  dl.error_code = "HTTP_503";
  dl.error_category = "transient";
  dl.reason = "server_error";
  dl.attempts = 3;
  dl.status = st;
  dl.created_at_ms = dl.updated_at_ms = now_ms();
  return dl;
}

/// Waits until the wall clock is past `ms` (the archive stamps commits with it).
void clock_past(int64_t ms) {
  while (now_ms() <= ms) {
  }
}

/// The fixture: stage 1 (seq 1..3: keys s1-a..c, alarm "early", breaker crm CLOSED, dead letter
/// dl_1 pending), then stage 2 (seq 4..5: keys s2-a..b, "early" cancelled and "late" set, crm
/// OPEN, dl_1 resolved, dl_2 pending), the store closed in between so that the stages are in two
/// WAL generations. `stage1_ms`: a time between the two.
struct fixture {
  test::temp_dir tmp;
  fs::path data, archive;
  int64_t stage1_ms = 0;

  fixture() : data(tmp.path() / "data"), archive(tmp.path() / "archive") {
    auto s =
      entity_store::open(test::archive_opts(tmp.path(), false, durability::normal), key).value();
    commit(*s, "s1-a", [](entity_store& s) {
      REQUIRE(s.set_alarm({"early", now_ms() + 3'600'000, "{}", 0, now_ms()}).is_ok());
    });
    commit(*s, "s1-b", [](entity_store& s) {
      REQUIRE(s.put_breaker({"crm", "CLOSED", R"({"failures":0})", now_ms()}).is_ok());
    });
    commit(*s, "s1-c", [](entity_store& s) {
      REQUIRE(s.put_dead_letter(letter("dl_1", dl_status::pending)).is_ok());
    });
    stage1_ms = now_ms();
    clock_past(stage1_ms);
    s.reset();
    s = entity_store::open(test::archive_opts(tmp.path(), false, durability::normal), key).value();
    commit(*s, "s2-a", [](entity_store& s) {
      REQUIRE(s.cancel_alarm("early").is_ok());
      REQUIRE(s.set_alarm({"late", now_ms() + 7'200'000, "{}", 0, now_ms()}).is_ok());
      REQUIRE(s.put_breaker({"crm", "OPEN", R"({"failures":5})", now_ms()}).is_ok());
    });
    commit(*s, "s2-b", [](entity_store& s) {
      REQUIRE(s.put_dead_letter(letter("dl_1", dl_status::resolved)).is_ok());
      REQUIRE(s.put_dead_letter(letter("dl_2", dl_status::pending)).is_ok());
    });
  }
};

/// The JSON lines of a run, by their "record" member.
std::multimap<std::string, json> records(const std::string& out) {
  std::multimap<std::string, json> m;
  for (auto& l : lines(out)) {
    auto j = json::parse(l);
    m.emplace(j.value("record", ""), j);
  }
  return m;
}

std::set<std::string> values(const std::multimap<std::string, json>& m, const std::string& record,
                             const std::string& member) {
  std::set<std::string> out;
  auto [b, e] = m.equal_range(record);
  for (auto it = b; it != e; ++it)
    out.insert(it->second.at(member).get<std::string>() +
               (member == "id" ? ":" + it->second.at("status").get<std::string>() : ""));
  return out;
}

/// Every file under `dir` with its bytes.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().lexically_relative(dir).string()] = {std::istreambuf_iterator<char>(in), {}};
    }
  return out;
}

void check_stage1(const std::multimap<std::string, json>& m) {
  CHECK(values(m, "key", "key") == std::set<std::string>{"s1-a", "s1-b", "s1-c"});
  CHECK(values(m, "alarm", "name") == std::set<std::string>{"early"});
  REQUIRE(m.count("breaker") == 1);
  CHECK(m.find("breaker")->second.at("state") == "CLOSED");
  CHECK(values(m, "dead_letter", "id") == std::set<std::string>{"dl_1:pending"});
}

} // namespace

TEST_CASE("as of: state shows the keys, alarms, breakers and dead letters of the archived commit "
          "a seq, a bookmark or a time names, and the live file the latest") {
  fixture f;
  auto before = tree(f.archive);
  auto by_seq = run_cli({"inspect", "state", "acme/ledger/a1", "--archive", f.archive.string(),
                         "--as-of-seq", "3", "--json"});
  REQUIRE_MESSAGE(by_seq.code == 0, by_seq.err);
  auto m = records(by_seq.out);
  REQUIRE(m.count("entity") == 1);
  auto head = m.find("entity")->second;
  CHECK(head.at("last_seq") == 3);
  CHECK(head.at("as_of").at("seq") == 3);
  check_stage1(m);

  auto bookmark = head.at("as_of").at("bookmark").get<std::string>();
  auto by_bookmark = run_cli(
    {"inspect", "state", "acme/ledger/a1", "--archive", f.archive.string(), "--as-of", bookmark});
  REQUIRE_MESSAGE(by_bookmark.code == 0, by_bookmark.err);
  CHECK(by_bookmark.out == by_seq.out);

  auto by_time = run_cli({"inspect", "state", "acme/ledger/a1", "--archive", f.archive.string(),
                          "--as-of", std::to_string(f.stage1_ms)});
  REQUIRE_MESSAGE(by_time.code == 0, by_time.err);
  CHECK(by_time.out == by_seq.out);

  auto now = run_cli({"inspect", "state", "acme/ledger/a1", "--data", f.data.string()});
  REQUIRE_MESSAGE(now.code == 0, now.err);
  auto n = records(now.out);
  CHECK(n.find("entity")->second.at("last_seq") == 5);
  CHECK(n.find("entity")->second.at("as_of").is_null());
  CHECK(values(n, "key", "key") == std::set<std::string>{"s1-a", "s1-b", "s1-c", "s2-a", "s2-b"});
  CHECK(values(n, "alarm", "name") == std::set<std::string>{"late"});
  CHECK(n.find("breaker")->second.at("state") == "OPEN");
  CHECK(values(n, "dead_letter", "id") == std::set<std::string>{"dl_1:resolved", "dl_2:pending"});

  // The table names the bookmark and each section.
  auto table = run_cli({"inspect", "state", "acme/ledger/a1", "--archive", f.archive.string(),
                        "--as-of-seq", "3", "--table"});
  REQUIRE(table.code == 0);
  for (const char* s : {"as of     bookmark ", "idempotency keys", "alarms", "circuit breakers",
                        "dead letters", "s1-c", "early", "dl_1"})
    CHECK_MESSAGE(table.out.find(s) != std::string::npos, s);
  CHECK(table.out.find("s2-a") == std::string::npos);
  CHECK(tree(f.archive) == before); // reading the archive changed nothing in it
}

TEST_CASE("as of: keys, alarms, breakers, dead letters and journal read the archived commit too") {
  fixture f;
  auto as_of = [&](const char* cmd) {
    auto r = run_cli({"inspect", cmd, "acme/ledger/a1", "--archive", f.archive.string(),
                      "--as-of-seq", "3", "--json"});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    return lines(r.out);
  };
  CHECK(as_of("keys").size() == 3);
  auto alarms = as_of("alarms");
  REQUIRE(alarms.size() == 1);
  CHECK(json::parse(alarms[0]).at("name") == "early");
  auto breakers = as_of("breakers");
  REQUIRE(breakers.size() == 1);
  CHECK(json::parse(breakers[0]).at("state") == "CLOSED");
  auto dls = as_of("dead-letters");
  REQUIRE(dls.size() == 1);
  CHECK(json::parse(dls[0]).at("status") == "pending");
  CHECK(as_of("journal").empty());
  CHECK(as_of("owners").empty());
}

TEST_CASE("as of: bookmark names the commit at a seq or a time, bookmarks lists every commit") {
  fixture f;
  auto arch = f.archive.string();
  auto by_seq = run_cli({"inspect", "bookmark", "acme/ledger/a1", "--archive", arch, "--seq", "4"});
  REQUIRE_MESSAGE(by_seq.code == 0, by_seq.err);
  auto b = json::parse(by_seq.out);
  CHECK(b.at("seq") == 4);
  auto by_time = run_cli({"inspect", "bookmark", "acme/ledger/a1", "--archive", arch, "--at",
                          std::to_string(f.stage1_ms)});
  REQUIRE_MESSAGE(by_time.code == 0, by_time.err);
  CHECK(json::parse(by_time.out).at("seq") == 3);

  auto all = run_cli({"inspect", "bookmarks", "acme/ledger/a1", "--archive", arch, "--limit", "0"});
  REQUIRE_MESSAGE(all.code == 0, all.err);
  auto pts = archive_points(entity_archive_dir(f.archive, key)).value();
  auto rows = lines(all.out);
  REQUIRE(rows.size() == pts.size());
  std::vector<int64_t> seqs;
  for (auto& r : rows) {
    auto j = json::parse(r);
    CHECK(j.at("restorable") == true);
    seqs.push_back(j.at("seq"));
  }
  CHECK(seqs.back() == 5);
  CHECK(std::is_sorted(seqs.begin(), seqs.end()));
  CHECK(std::find(seqs.begin(), seqs.end(), 3) != seqs.end());
  auto newest = run_cli(
    {"inspect", "bookmarks", "acme/ledger/a1", "--archive", arch, "--newest", "--limit", "1"});
  REQUIRE(lines(newest.out).size() == 1);
  CHECK(json::parse(newest.out).at("seq") == 5);
  auto later = run_cli({"inspect", "bookmarks", "acme/ledger/a1", "--archive", arch, "--since",
                        std::to_string(f.stage1_ms + 1)});
  for (auto& r : lines(later.out))
    CHECK(json::parse(r).at("seq").get<int64_t>() >= 4);
}

TEST_CASE("as of: a pruned commit, a bookmark of another history, a missing archive and bad "
          "arguments are refused with their exit codes") {
  fixture f;
  auto arch = f.archive.string();
  auto run = [&](std::vector<std::string> extra, const char* cmd = "state") {
    std::vector<std::string> args{"inspect", cmd, "acme/ledger/a1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  struct refusal {
    std::vector<std::string> args;
    int code;
    const char* says;
  };
  for (auto& r : std::vector<refusal>{
         {{"--as-of-seq", "3"}, 2, "need --archive"},
         {{"--archive", arch}, 2, "--archive is read with --as-of"},
         {{"--archive", arch, "--as-of-seq", "3", "--data", f.data.string()}, 2, "not --data"},
         {{"--archive", arch, "--as-of-seq", "3", "--as-of", "2h"}, 2, "exclude each other"},
         {{"--archive", arch, "--as-of", "yesterday-ish"}, 2, "--as-of takes a time"},
         {{"--archive", arch, "--as-of-seq", "x1"}, 2, "--as-of-seq"},
         {{"--archive", arch, "--as-of", "9.1.32.1"}, 3, "is no commit"},
         {{"--archive", (f.tmp.path() / "nowhere").string(), "--as-of-seq", "3"}, 3, "no archive"},
         {{"--archive", f.data.string(), "--as-of-seq", "3"}, 3, "holds nothing of"},
         {{"--archive", arch, "--as-of", "1000"}, 3, "begins after"},
       }) {
    auto res = run(r.args);
    CHECK_MESSAGE(res.code == r.code, res.err);
    CHECK_MESSAGE(res.err.find(r.says) != std::string::npos, res.err);
    CHECK(res.out.empty());
  }
  CHECK(run({"--archive", arch, "--seq", "1", "--at", "2h"}, "bookmark").code == 2);
  CHECK(run({"--archive", arch}, "bookmark").code == 2);
  CHECK(run({"--seq", "1"}, "bookmark").code == 2);
  CHECK(run({}, "bookmarks").code == 2);
  CHECK(run({"--archive", arch, "--since", "nonsense"}, "bookmarks").code == 2);

  // Pruned: keep only what rebuilds the commits from now on (the newest).
  auto pruned = prune_archive(entity_archive_dir(f.archive, key), now_ms() + 1);
  REQUIRE(pruned.is_ok());
  auto res = run({"--archive", arch, "--as-of-seq", "3"});
  CHECK(res.code == 3);
  CHECK_MESSAGE(res.err.find("pruned") != std::string::npos, res.err);
  auto newest = run({"--archive", arch, "--as-of-seq", "5", "--json"});
  REQUIRE_MESSAGE(newest.code == 0, newest.err);
  CHECK(records(newest.out).find("entity")->second.at("last_seq") == 5);
}

} // namespace as_of_test
