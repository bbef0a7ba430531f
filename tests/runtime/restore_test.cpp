// restore_test.cpp: point-in-time recovery and forks on a running runtime (runtime.hpp,
// "point-in-time recovery and forks") with a continuous archive: a rollback to a bookmark ends
// the facts at the bookmark plus its own lifecycle fact, forgets the keys completed and the
// alarms set after it, keeps the chain valid, and the archive goes on; calls while the entity is
// held answer 503 ENTITY_RESTORING; a fork's target holds the source's state at the bookmark
// (or now) under its own key, with its provenance as its first fact, and the source is
// unchanged; refusals. Test thread; replies arrive on CAF workers.
#include <doctest/doctest.h>

#include "factum/runtime/runtime.hpp"
#include "runtime_core.hpp"
#include "support/runtime_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace factum;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

namespace restore_test {

namespace {

std::unique_ptr<runtime> start(const fs::path& dir, bool archive = true,
                               int wal_kept_on_close_kib = 256,
                               std::map<std::string, tenant_quota> quotas = {}) {
  runtime_config c;
  c.tenant_quotas = std::move(quotas);
  c.wal_kept_on_close_kib = wal_kept_on_close_kib;
  c.data_dir = dir / "data";
  if (archive)
    c.archive_dir = dir / "archive";
  c.storage_threads = 2;
  test::add_test_types(c.types);
  return test::start_ok(std::move(c));
}

using test::facts_of;

/// The options of a call with Idempotency-Key `idem` (none when empty), fingerprinted by its
/// method and arguments' text.
call_options keyed(const std::string& method, const json& args, const std::string& idem) {
  call_options o;
  o.idempotency_key = idem;
  if (!idem.empty())
    o.fingerprint = method + args.dump();
  return o;
}

call_reply call(runtime& rt, const entity_key& k, const std::string& method, json args = {},
                const std::string& idem = {}) {
  return rt.call_sync(k, method, args.is_null() ? "{}" : args.dump(), keyed(method, args, idem));
}

/// test::call_ok, keyed as call() keys it.
json ok(runtime& rt, const entity_key& k, const std::string& method, json args = {},
        const std::string& idem = {}) {
  return test::call_ok(rt, k, method, args, keyed(method, args, idem));
}

std::vector<std::string> alarm_names(runtime& rt, const entity_key& k) {
  std::vector<std::string> out;
  auto j = ok(rt, k, "@alarms");
  for (auto& a : j.is_array() ? j : j["alarms"])
    if (auto n = a["name"].get<std::string>(); n.front() != '@') // the runtime's own
      out.push_back(n);
  return out;
}

/// Waits (bounded) until the wall clock is past `t`: a bookmark by time names commits shipped at
/// or before it, so the next commit must be shipped in a later millisecond.
void past(int64_t t) {
  for (int i = 0; i < 1'000'000 && now_ms() <= t; ++i)
    std::this_thread::yield();
  REQUIRE(now_ms() > t);
}

} // namespace

TEST_CASE("rollback: facts end at the bookmark plus the rollback fact, later keys and alarms go") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key k{"acme", "counter", "c1"};
  for (int i = 0; i < 3; ++i)
    ok(*rt, k, "add", {{"by", 1}}, "k" + std::to_string(i));
  ok(*rt, k, "remind", {{"name", "early"}});
  auto before = facts_of(*rt, k);
  REQUIRE(before.size() == 3);
  int64_t mark = now_ms();
  past(mark);
  for (int i = 3; i < 5; ++i)
    ok(*rt, k, "add", {{"by", 10}}, "k" + std::to_string(i));
  ok(*rt, k, "remind", {{"name", "late"}});
  REQUIRE(facts_of(*rt, k).size() == 5);

  auto bm = rt->bookmark(k, {mark, std::nullopt});
  REQUIRE_MESSAGE(bm.is_ok(), bm.error().to_string());
  CHECK(bm->seq == 3);
  auto by_seq = rt->bookmark(k, {std::nullopt, int64_t{3}});
  REQUIRE(by_seq.is_ok());
  CHECK(by_seq->seq == 3);

  auto r = rt->rollback_entity(k, *bm, "bad deploy");
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK(r->from_seq == 5);
  CHECK(r->to.seq == 3);
  CHECK(r->fact_seq == 4);

  auto after = facts_of(*rt, k);
  REQUIRE(after.size() == 4);
  for (int i = 0; i < 3; ++i)
    CHECK(after[i]["hash"] == before[i]["hash"]); // the same facts, not copies
  CHECK(after[3]["type"] == "lifecycle");
  CHECK(after[3]["subtype"] == "rolled_back");
  CHECK(after[3]["prev_hash"] == before[2]["hash"]);
  auto data = after[3]["data"].is_string() ? json::parse(after[3]["data"].get<std::string>())
                                           : after[3]["data"];
  CHECK(data["bookmark"] == bm->bookmark());
  CHECK(data["from_seq"] == 5);
  CHECK(data["note"] == "bad deploy");
  CHECK(ok(*rt, k, "@verify")["ok"] == true);
  // Keys completed before the bookmark replay; keys completed after it run again.
  auto k1 = call(*rt, k, "add", {{"by", 1}}, "k1");
  CHECK(k1.ok);
  CHECK(k1.replayed);
  auto k3 = call(*rt, k, "add", {{"by", 10}}, "k3");
  CHECK(k3.ok);
  CHECK_FALSE(k3.replayed);
  CHECK(k3.json()["value"] == 13); // 3 from before the bookmark, then this one
  CHECK(alarm_names(*rt, k) == std::vector<std::string>{"early"});

  // The archive goes on past the rollback: the newest commit is a bookmark again.
  auto newest = rt->bookmark(k, {std::nullopt, int64_t{1'000'000}});
  REQUIRE(newest.is_ok());
  CHECK(newest->seq == 5);
  CHECK(newest->epoch > bm->epoch); // the rolled-back file is a new epoch's base
}

TEST_CASE("rollback: calls to a held entity answer 503 ENTITY_RESTORING, and refusals") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key k{"acme", "counter", "held"};
  ok(*rt, k, "add");
  auto& core = detail::runtime_testing::core(*rt);
  {
    std::lock_guard<std::mutex> g(core.reg.mu);
    core.reg.held.insert(k.to_string());
  }
  (void)rt->release_entities([&](const entity_key& e) { return e == k; }, 5s);
  auto r = call(*rt, k, "add");
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 503);
  CHECK(r.code == "ENTITY_RESTORING");
  auto bm = rt->bookmark(k, {std::nullopt, int64_t{1}});
  REQUIRE(bm.is_ok());
  CHECK(rt->rollback_entity(k, *bm, "").error().code() == errc::conflict); // held already
  {
    std::lock_guard<std::mutex> g(core.reg.mu);
    core.reg.held.erase(k.to_string());
  }
  CHECK(call(*rt, k, "add").ok);
  // A bookmark that is no commit of the archive, an entity without a file, an unknown type.
  auto wrong = *bm;
  wrong.end += 8;
  CHECK(rt->rollback_entity(k, wrong, "").error().code() == errc::not_found);
  CHECK(rt->rollback_entity({"acme", "counter", "none"}, *bm, "").error().code() ==
        errc::not_found);
  CHECK(rt->rollback_entity({"acme", "nosuchtype", "x"}, *bm, "").error().code() ==
        errc::not_found);
  CHECK(rt->bookmark(k, {int64_t{1}, std::nullopt}).error().code() == errc::not_found);
  CHECK(ok(*rt, k, "get")["value"] == 2); // nothing above changed the entity
}

TEST_CASE("rollback and bookmarks need an archive") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), false);
  entity_key k{"acme", "counter", "c"};
  ok(*rt, k, "add");
  CHECK(rt->bookmark(k, {std::nullopt, int64_t{1}}).error().code() == errc::invalid_argument);
  CHECK(rt->rollback_entity(k, {1, 1, 32, 1, 0}, "").error().code() == errc::invalid_argument);
  // A fork of the present needs none.
  auto f = rt->fork_entity(k, {"acme", "counter", "copy"}, std::nullopt, "");
  REQUIRE_MESSAGE(f.is_ok(), f.error().to_string());
  CHECK(ok(*rt, {"acme", "counter", "copy"}, "get")["value"] == 0); // facts are not copied
}

TEST_CASE("fork: the target is the source's state at the bookmark, the source is unchanged") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  entity_key src{"acme", "counter", "src"};
  for (int i = 0; i < 2; ++i)
    ok(*rt, src, "add", {{"by", 1}}, "k" + std::to_string(i));
  ok(*rt, src, "remind", {{"name", "early"}});
  auto at = rt->bookmark(src, {std::nullopt, int64_t{2}});
  REQUIRE(at.is_ok());
  auto at_facts = facts_of(*rt, src);
  ok(*rt, src, "add", {{"by", 1}}, "k2");
  ok(*rt, src, "remind", {{"name", "late"}});
  auto src_before = facts_of(*rt, src);

  entity_key dst{"beta", "counter", "dst"};
  auto f = rt->fork_entity(src, dst, *at, "to test");
  REQUIRE_MESSAGE(f.is_ok(), f.error().to_string());
  CHECK(f->source_seq == 2);
  CHECK(f->source_hash == at_facts[1]["hash"]);
  auto df = facts_of(*rt, dst);
  REQUIRE(df.size() == 1);
  CHECK(df[0]["seq"] == 1);
  CHECK(df[0]["subtype"] == "forked");
  CHECK(df[0]["tenant_id"] == "beta");
  auto data =
    df[0]["data"].is_string() ? json::parse(df[0]["data"].get<std::string>()) : df[0]["data"];
  CHECK(data["source"] == src.to_string());
  CHECK(data["source_seq"] == 2);
  CHECK(data["source_hash"] == at_facts[1]["hash"]);
  CHECK(data["bookmark"] == at->bookmark());
  CHECK(ok(*rt, dst, "@verify")["ok"] == true);
  // Its keys and alarms are the source's at the bookmark.
  auto k1 = call(*rt, dst, "add", {{"by", 1}}, "k1");
  CHECK(k1.replayed);
  auto k2 = call(*rt, dst, "add", {{"by", 1}}, "k2");
  CHECK(k2.ok);
  CHECK_FALSE(k2.replayed);
  CHECK(alarm_names(*rt, dst) == std::vector<std::string>{"early"}); // paused: listed
  // The source is as it was.
  CHECK(facts_of(*rt, src) == src_before);
  auto names = alarm_names(*rt, src);
  CHECK(names.size() == 2);

  // Now (no bookmark), while the source runs; refusals.
  entity_key now_copy{"acme", "counter", "now"};
  auto g = rt->fork_entity(src, now_copy, std::nullopt, "");
  REQUIRE_MESSAGE(g.is_ok(), g.error().to_string());
  CHECK(g->source_seq == 3);
  CHECK(call(*rt, now_copy, "add", {{"by", 1}}, "k2").replayed);
  CHECK(rt->fork_entity(src, now_copy, std::nullopt, "").error().code() == errc::conflict);
  CHECK(rt->fork_entity(src, src, std::nullopt, "").error().code() == errc::invalid_argument);
  CHECK(rt->fork_entity({"acme", "counter", "none"}, {"acme", "counter", "n2"}, std::nullopt, "")
          .error()
          .code() == errc::not_found);
  CHECK(rt->fork_entity(src, {"acme", "nosuchtype", "x"}, std::nullopt, "").error().code() ==
        errc::not_found);
  CHECK(rt->fork_entity(src, {"acme", "counter", "../x"}, std::nullopt, "").error().code() ==
        errc::invalid_argument);
}

TEST_CASE("fork: the source's alarms arrive paused, listed as such, and fire only once an "
          "operator resumes them (the fork must not send its source's e-mails again)") {
  test::temp_dir tmp;
  auto rt = start(tmp.path());
  auto& events = test::event_log::get();
  entity_key src{"acme", "alarmer", "s1"}, dst{"acme", "alarmer", "s1-debug"};
  ok(*rt, src, "arm", {{"name", "tick"}, {"delay_ms", 300}, {"tag", "fork-tick"}});
  REQUIRE(rt->fork_entity(src, dst, std::nullopt, "debug").is_ok());
  auto listed = ok(*rt, dst, "@alarms");
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["name"] == "tick");
  CHECK(listed[0]["paused"] == true);
  // The clock: a later alarm of the source, armed after the fork (so not copied), fires after
  // the tick's due time; the fork's tick, were it live, would have fired by then.
  ok(*rt, src, "arm", {{"name", "later"}, {"delay_ms", 900}, {"tag", "fork-later"}});
  REQUIRE(events.wait_for("alarm:fork-later", 1, 10s));
  CHECK(events.count("alarm:fork-tick") == 1); // the source's own
  auto fired = [&] {
    auto j = ok(*rt, dst, "@facts", {{"type", "alarm_fired"}, {"limit", 10}});
    return j.size();
  };
  CHECK(fired() == 0);
  // An operator resumes: the tick is due (past) and fires, once.
  auto r = ok(*rt, dst, "@resume_paused", {{"actor", "ops"}, {"reason", "replay the tick"}});
  CHECK(r["alarms"] == json::array({"tick"}));
  REQUIRE(events.wait_for("alarm:fork-tick", 2, 10s));
  CHECK(fired() == 1);
  auto life = ok(*rt, dst, "@facts", {{"type", "lifecycle"}, {"limit", 10}});
  bool noted = false;
  for (auto& f : life)
    if (f["subtype"] == "paused_resumed") {
      auto d = f["data"].is_string() ? json::parse(f["data"].get<std::string>()) : f["data"];
      noted = d["actor"] == "ops" && d["reason"] == "replay the tick" &&
              d["alarms"] == json::array({"tick"});
    }
  CHECK(noted);
  CHECK(ok(*rt, dst, "@resume_paused")["alarms"].empty()); // nothing left paused
}

TEST_CASE("fork: a tenant at its max_entities gets no fork (QUOTA_EXCEEDED, nothing made), and "
          "a fork it has room for counts as one of its entities") {
  test::temp_dir tmp;
  tenant_quota two;
  two.max_entities = 2;
  auto rt = start(tmp.path(), true, 256, {{"beta", two}});
  entity_key src{"acme", "counter", "src"};
  ok(*rt, src, "add", {{"by", 1}}, "k0");
  ok(*rt, {"beta", "counter", "b1"}, "add", {{"by", 1}}, "k0");
  auto f = rt->fork_entity(src, {"beta", "counter", "f1"}, std::nullopt, "");
  REQUIRE_MESSAGE(f.is_ok(), f.error().to_string());
  CHECK(rt->tenant_usage_of("beta").entities == 2);
  auto refused = rt->fork_entity(src, {"beta", "counter", "f2"}, std::nullopt, "");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.error().code() == errc::quota_exceeded);
  CHECK_MESSAGE(refused.error().message().find("max_entities 2") != std::string::npos,
                refused.error().message());
  CHECK(rt->tenant_usage_of("beta").entities == 2);
  CHECK_FALSE(fs::exists(entity_key{"beta", "counter", "f2"}.file_path(tmp.path() / "data")));
  // A call that would create a third entity is refused as well: the fork took the room.
  CHECK(call(*rt, {"beta", "counter", "b2"}, "add", {{"by", 1}}, "k0").http_status == 429);
}

TEST_CASE("prune_archives keeps the window and the newest commit, and the entity goes on") {
  test::temp_dir tmp;
  auto rt = start(tmp.path(), true, 0); // every close checkpoints: the next commit a new WAL
  entity_key k{"acme", "counter", "pruned"};
  for (int i = 0; i < 3; ++i)
    ok(*rt, k, "add", {{"by", 1}}, "k" + std::to_string(i));
  (void)rt->release_entities([&](const entity_key& e) { return e == k; }, 5s); // a new WAL
  ok(*rt, k, "add", {{"by", 1}}, "k3");
  auto first = rt->bookmark(k, {std::nullopt, int64_t{1}});
  REQUIRE(first.is_ok());
  auto r = rt->prune_archives(now_ms() + 1); // nothing is in the window: only the newest stays
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  CHECK(r->archives >= 1);
  CHECK(r->failures == 0);
  CHECK(rt->bookmark(k, {std::nullopt, int64_t{1}}).error().code() == errc::not_found);
  auto newest = rt->bookmark(k, {std::nullopt, int64_t{100}});
  REQUIRE(newest.is_ok());
  CHECK(newest->seq == 4);
  ok(*rt, k, "add", {{"by", 1}}, "k4");
  auto back = rt->rollback_entity(k, *newest, "after a prune");
  REQUIRE_MESSAGE(back.is_ok(), back.error().to_string());
  CHECK(ok(*rt, k, "get")["value"] == 4);
  CHECK(ok(*rt, k, "@verify")["ok"] == true);
  auto plain = start(tmp.path() / "plain", false);
  CHECK(plain->prune_archives(0).error().code() == errc::invalid_argument);
}

} // namespace restore_test
