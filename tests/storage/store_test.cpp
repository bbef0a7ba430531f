// store_test.cpp: behaviour of entity_store on real files: facts and the hash chain, keys,
// alarms, dead letters, breakers, configs, turns, fact ids and schema migrations.
#include "storage/store_support.hpp"

namespace store_tests {

TEST_CASE("hashes: SHA-256 and HMAC-SHA256 give the published test vectors") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231, test cases 1 and 2.
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("entity keys: invalid parts are rejected and create no file") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  std::string nul("a\0b", 3);
  for (std::string bad : {std::string(".."), std::string("a/b"), std::string("a\\b"), nul,
                          std::string(""), std::string(129, 'x'), std::string(".hidden"),
                          std::string("caf\xc3\xa9"), std::string("a b"), std::string("%2e%2e")}) {
    CAPTURE(bad);
    CHECK_FALSE(entity_key::make("acme", "ledger", bad).is_ok());
    CHECK_FALSE(entity_key::make(bad, "ledger", "a1").is_ok());
    CHECK_FALSE(entity_key::make("acme", bad, "a1").is_ok());
    auto r = entity_store::open(o, entity_key{"acme", "ledger", bad});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
  }
  CHECK_FALSE(fs::exists(tmp.path() / "entities"));
  CHECK(entity_key::make("acme", "ledger", std::string(128, 'x')).is_ok());
  CHECK(entity_key::make("a", "b", "A-z.0:9_").is_ok());
}

TEST_CASE("entity keys: the path is a digest under the data directory") {
  auto k = key();
  auto p = k.file_path("/data");
  CHECK(p.parent_path().parent_path() == fs::path("/data/entities"));
  CHECK(p.filename() == k.digest() + ".db");
  CHECK(entity_key::parse("acme/ledger/a1").value() == k);
  CHECK_FALSE(entity_key::parse("acme/ledger").is_ok());
  CHECK_FALSE(entity_key::parse("acme/ledger/a/b").is_ok());
  CHECK_FALSE(entity_key::parse("acme/../a1").is_ok());
}

TEST_CASE("ids: time_ordered_id is the prefix, 12 hex digits of the millisecond, then random "
          "hex digits, and sorts by its millisecond") {
  auto before = now_ms();
  auto a = time_ordered_id("x_", 20);
  auto b = time_ordered_id("x_", 20);
  REQUIRE(a.size() == 2 + 12 + 20);
  CHECK(a.substr(0, 2) == "x_");
  CHECK(a.find_first_not_of("0123456789abcdef", 2) == std::string::npos);
  CHECK(std::stoll(a.substr(2, 12), nullptr, 16) >= before);
  CHECK(a.substr(14) != b.substr(14));
  CHECK(time_ordered_id("", 16).size() == 28);
  CHECK(time_ordered_id("", 3).size() == 15);
  std::string c;
  do // the next millisecond, at most ~1 ms of spinning
    c = time_ordered_id("x_", 20);
  while (c.substr(0, 14) <= b.substr(0, 14));
  CHECK(c > a);
  CHECK(c > b);
}

TEST_CASE("facts: appended with contiguous seq and a valid hash chain") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->last_seq() == 0);
  CHECK(s->head_hash() == genesis_hash);
  std::vector<fact> got;
  for (int i = 0; i < 10; ++i) {
    auto d = draft("invocation", {{"i", i}});
    auto f = s->append(d);
    REQUIRE(f.is_ok());
    got.push_back(*f);
  }
  REQUIRE(s->commit().is_ok());
  for (int i = 0; i < 10; ++i) {
    CHECK(got[i].seq == i + 1);
    CHECK(got[i].prev_hash == (i == 0 ? std::string(genesis_hash) : got[i - 1].hash));
    CHECK(got[i].hash == compute_hash(got[i]));
    CHECK(got[i].fact_id.rfind("fct_", 0) == 0);
  }
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK(v->ok);
  CHECK(v->facts_checked == 10);
  // Reopen: the head is restored from the file.
  auto head = s->head_hash();
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->last_seq() == 10);
  CHECK(s2->head_hash() == head);
}

TEST_CASE("facts: canonical serialization equals sorted-key JSON without the hash") {
  fact f;
  f.seq = 3;
  f.fact_id = "fct_x";
  f.type = "cost";
  f.subtype = "tool_usage";
  f.timestamp_ms = 1705500000000;
  f.tenant_id = "acme";
  f.entity_type = "asset";
  f.entity_id = "a1";
  f.tool_id = "telephony";
  f.config_version = 3;
  f.config_id = "retry";
  f.amount = "0.005";
  f.currency = "USD";
  f.trace_id = "t\"1\n\x01";
  f.data = nlohmann::json{{"z", 1}, {"a", {{"b", "c"}}}}.dump();
  f.prev_hash = std::string(genesis_hash);
  f.hash = compute_hash(f);
  auto j = nlohmann::json::parse(to_json_text(f));
  CHECK(j.contains("hash"));
  j.erase("hash");
  CHECK(j.dump() == canonical_serialization(f));
  CHECK(compute_hash(f) == sha256_hex(canonical_serialization(f)));
  CHECK(j["amount"] == "0.005");
}

TEST_CASE("facts: validation refuses bad fields and writes nothing") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  auto bad = [&](fact_draft d) {
    auto r = s->append(d);
    CHECK_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::invalid_argument);
  };
  bad(draft(""));
  bad(draft("Bad Type"));
  bad(draft("ok", nlohmann::json::array()));
  auto d = draft("cost");
  d.amount = "0.1e3";
  d.currency = "USD";
  bad(d);
  d.amount = "1.50";
  d.currency = "usd";
  bad(d);
  d.currency = "USD";
  d.trace_id = "\xff\xfe";
  bad(d);
  auto d2 = draft("ok", {{"s", std::string("\xc3\x28")}});
  bad(d2);
  CHECK(s->last_seq() == 0);
  d.trace_id.clear();
  CHECK(s->append(d).is_ok());
  CHECK(s->commit().is_ok());
}

TEST_CASE("facts: queries filter by every field, with limit and order") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  for (int i = 1; i <= 30; ++i) {
    auto d = draft(i % 3 == 0 ? "error" : "invocation");
    d.subtype = i % 2 ? "odd" : "even";
    d.timestamp_ms = 1000 * i;
    d.trace_id = "tr" + std::to_string(i % 5);
    d.tool_id = i % 4 == 0 ? "crm" : "";
    d.idempotency_key = "k" + std::to_string(i);
    REQUIRE(s->append(d).is_ok());
  }
  REQUIRE(s->commit().is_ok());
  auto count = [&](fact_filter f) {
    f.limit = 1000;
    auto r = s->query(f);
    REQUIRE(r.is_ok());
    return r->size();
  };
  fact_filter f;
  CHECK(count(f) == 30);
  f.type = "error";
  CHECK(count(f) == 10);
  f.subtype = "odd";
  CHECK(count(f) == 5);
  f = {};
  f.since_ms = 5000;
  f.until_ms = 10000;
  CHECK(count(f) == 5);
  f = {};
  f.after_seq = 25;
  CHECK(count(f) == 5);
  f.before_seq = 28;
  CHECK(count(f) == 2);
  f = {};
  f.trace_id = "tr0";
  CHECK(count(f) == 6);
  f = {};
  f.tool_id = "crm";
  CHECK(count(f) == 7);
  f = {};
  f.idempotency_key = "k17";
  CHECK(count(f) == 1);
  f = {};
  f.limit = 3;
  f.newest_first = true;
  auto r = s->query(f);
  REQUIRE(r.is_ok());
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].seq == 30);
  CHECK((*r)[2].seq == 28);
  f.limit = 0;
  CHECK_FALSE(s->query(f).is_ok());
  f.limit = 10;
  f.after_seq = -1;
  CHECK_FALSE(s->query(f).is_ok());
  f.after_seq.reset();
  f.type = "x' OR 1=1 --";
  CHECK_FALSE(s->query(f).is_ok());
  auto one = s->get(7);
  REQUIRE(one.is_ok());
  auto by_id = s->get(one->fact_id);
  REQUIRE(by_id.is_ok());
  CHECK(by_id->seq == 7);
  CHECK(s->get(99).error().code() == errc::not_found);
}

TEST_CASE("facts: UPDATE and DELETE are refused even through raw SQL") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->append(draft("outcome")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  std::string err;
  CHECK(raw_exec_factum(file, "UPDATE facts SET data='{\"x\":1}' WHERE seq=1", &err) != SQLITE_OK);
  CHECK(err.find("immutable") != std::string::npos);
  CHECK(raw_exec_factum(file, "DELETE FROM facts WHERE seq=2", &err) != SQLITE_OK);
  CHECK(raw_exec_factum(file, "UPDATE configs SET body='{}'") ==
        SQLITE_OK); // no rows: nothing to stop
  auto s = open_ok(opts_for(tmp.path()), key());
  REQUIRE(s->put_config("retry", R"({"max":3})").is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  CHECK(raw_exec_factum(file, "UPDATE configs SET body='{}'") != SQLITE_OK);
  CHECK(raw_exec_factum(file, "DELETE FROM configs") != SQLITE_OK);
}

TEST_CASE("verify: a fact inserted behind the store's back breaks the chain at its seq") {
  // Since schema v3 no INSERT trigger guards the chain (the store computes it on append);
  // a raw INSERT that skips a seq or forges prev_hash is found by verify().
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->append(draft("outcome")).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  REQUIRE(raw_exec_factum(file, "INSERT INTO facts(seq, fact_id, type, ts, data, prev_hash, hash) "
                                "VALUES (3, 'fct_forged', 'a', 1, '{}', 'p', 'h')") == SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()), key());
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 3);
  CHECK(v->problem.find("prev_hash of seq 3") != std::string::npos);
  // The store's own appends continue the chain from the last row on disk; verify still reports
  // the forged fact, and only it.
  REQUIRE(s->append(draft("invocation")).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->last_seq() == 4);
  CHECK(s->verify()->first_bad_seq == 3);
}

TEST_CASE("schema: queries by type and subtype are served by indexes, in seq order, no sort") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    file = s->path();
  }
  auto plan = [&](const char* where) {
    std::string out;
    for (auto& row : raw_rows(file, std::string("EXPLAIN QUERY PLAN SELECT * FROM facts WHERE ") +
                                      where + " ORDER BY seq ASC LIMIT 100"))
      out += row[3] + "; ";
    return out;
  };
  auto by_type = plan("type = 'x' AND seq > 10");
  CHECK(by_type.find("facts_by_type") != std::string::npos);
  CHECK(by_type.find("TEMP B-TREE") == std::string::npos);
  auto by_subtype = plan("type = 'x' AND subtype = 'y'");
  CHECK(by_subtype.find("facts_by_subtype") != std::string::npos);
  CHECK(by_subtype.find("TEMP B-TREE") == std::string::npos);
}

TEST_CASE("verify: detects a fact edited behind the store's back, naming its seq") {
  test::temp_dir tmp;
  fs::path file;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    for (int i = 0; i < 5; ++i)
      REQUIRE(s->append(draft("invocation", {{"n", i}})).is_ok());
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  REQUIRE(raw_exec_factum(file, "DROP TRIGGER facts_no_update") == SQLITE_OK);
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    auto v = s->verify();
    REQUIRE(v.is_ok());
    CHECK_FALSE(v->ok);
    CHECK(v->problem.find("facts_no_update") != std::string::npos);
    CHECK(v->first_bad_seq == 0);
  }
  // With the trigger still missing, an edited row is found too.
  REQUIRE(raw_exec_factum(file, "UPDATE facts SET data='{\"n\":77}' WHERE seq=2") == SQLITE_OK);
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    auto v = s->verify();
    REQUIRE(v.is_ok());
    CHECK(v->first_bad_seq == 2);
    CHECK(v->problems.size() == 2);
  }
  REQUIRE(raw_exec_factum(file, "UPDATE facts SET data='{\"n\":99}' WHERE seq=3") == SQLITE_OK);
  REQUIRE(raw_exec_factum(file,
                          "CREATE TRIGGER facts_no_update BEFORE UPDATE ON facts BEGIN SELECT "
                          "RAISE(ABORT, 'facts are immutable: UPDATE refused'); END") == SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()), key());
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 2); // seq 2 was edited while the trigger was gone
  CHECK(v->problem.find("altered") != std::string::npos);
}

TEST_CASE("turns: a failed turn rolls back its own writes and keeps the others") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->append(draft("a")).is_ok());
  REQUIRE(s->begin_key("k1", "fp", 0, 1).is_ok());
  REQUIRE(s->complete_key("k1", "{}").is_ok());
  REQUIRE(s->end_turn(true).is_ok());
  auto head = s->head_hash();
  REQUIRE(s->begin_turn().is_ok());
  REQUIRE(s->append(draft("b")).is_ok());
  REQUIRE(s->append(draft("c")).is_ok());
  REQUIRE(s->begin_key("k2", "fp", 0, 1).is_ok());
  REQUIRE(s->end_turn(false).is_ok());
  CHECK(s->last_seq() == 1);
  CHECK(s->head_hash() == head);
  REQUIRE(s->begin_turn().is_ok());
  auto d = s->append(draft("d"));
  REQUIRE(d.is_ok());
  CHECK(d->seq == 2);
  CHECK(d->prev_hash == head);
  REQUIRE(s->end_turn(true).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->last_seq() == 2);
  CHECK(s2->get_key("k1").is_ok());
  CHECK(s2->get_key("k2").error().code() == errc::not_found);
  CHECK(s2->verify()->ok);
}

TEST_CASE("batches: rollback restores the chain head and nothing is durable before commit") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    REQUIRE(s->append(draft("a")).is_ok());
    REQUIRE(s->commit().is_ok());
    REQUIRE(s->append(draft("b")).is_ok());
    REQUIRE(s->rollback().is_ok());
    CHECK(s->last_seq() == 1);
    REQUIRE(s->append(draft("c")).is_ok());
    // destroyed with an open batch: rolled back
  }
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->last_seq() == 1);
  CHECK(s->get(1)->type == "a");
}

TEST_CASE("idempotency keys: fresh, in flight, completed, failed, mismatch, release, expiry") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  auto b = s->begin_key("k", "fp1", 1000, 100);
  REQUIRE(b.is_ok());
  CHECK(b->outcome == key_outcome::fresh);
  CHECK(s->begin_key("k", "fp1", 1000, 101)->outcome == key_outcome::in_flight);
  CHECK(s->begin_key("k", "fp2", 1000, 101)->outcome == key_outcome::mismatch);
  REQUIRE(s->complete_key("k", R"({"seq":1})").is_ok());
  auto r = s->begin_key("k", "fp1", 1000, 102);
  CHECK(r->outcome == key_outcome::completed);
  CHECK(r->record.response == R"({"seq":1})");
  CHECK(s->begin_key("k", "fp2", 1000, 102)->outcome == key_outcome::mismatch);
  CHECK(s->complete_key("k", "{}").code() == errc::conflict);
  // terminal failure is stored
  REQUIRE(s->begin_key("f", "fp", 0, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->fail_key("f", R"({"code":"BAD"})").is_ok());
  auto f = s->begin_key("f", "fp", 0, 1'000'000'000);
  CHECK(f->outcome == key_outcome::failed);
  CHECK(f->record.response == R"({"code":"BAD"})");
  CHECK_FALSE(f->record.expires_at_ms.has_value());
  // retryable failure releases
  REQUIRE(s->begin_key("r", "fp", 1000, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->release_key("r").is_ok());
  CHECK(s->begin_key("r", "fp", 1000, 100)->outcome == key_outcome::fresh);
  REQUIRE(s->complete_key("r", "{}").is_ok());
  // expiry: k expires at 1100
  CHECK(s->begin_key("k", "fp1", 1000, 1100)->outcome == key_outcome::fresh);
  REQUIRE(s->complete_key("k", "{}").is_ok());
  CHECK(s->next_key_expiry()->value() == 1100); // r expires at 1100 as well
  auto purged = s->purge_expired_keys(5000);
  REQUIRE(purged.is_ok());
  CHECK(*purged == 2);
  CHECK(s->get_key("f").is_ok()); // ttl 0: kept
  REQUIRE(s->commit().is_ok());
  CHECK(s->list_keys(10)->size() == 1);
}

TEST_CASE("idempotency keys: keys left pending by a dead activation are released on open") {
  test::temp_dir tmp;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    REQUIRE(s->begin_key("p1", "fp", 0, 1)->outcome == key_outcome::fresh);
    REQUIRE(s->begin_key("done", "fp", 0, 1)->outcome == key_outcome::fresh);
    REQUIRE(s->complete_key("done", "{}").is_ok());
    REQUIRE(s->commit().is_ok()); // p1 committed as pending (a turn waiting on a tool)
  }
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->released_on_open() == 1);
  CHECK(s->get_key("p1").error().code() == errc::not_found);
  CHECK(s->begin_key("p1", "fp", 0, 2)->outcome == key_outcome::fresh);
  CHECK(s->begin_key("done", "fp", 0, 2)->outcome == key_outcome::completed);
}

TEST_CASE("alarms: set, replace, cancel, list, next") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  REQUIRE(s->set_alarm({"b", 200, R"({"x":1})", 0, 0}).is_ok());
  REQUIRE(s->set_alarm({"a", 300, "{}", 0, 0}).is_ok());
  CHECK(s->next_alarm()->value().name == "b");
  REQUIRE(s->set_alarm({"b", 400, "{}", 2, 0}).is_ok());
  CHECK(s->next_alarm()->value().name == "a");
  CHECK(s->get_alarm("b")->attempts == 2);
  CHECK(s->list_alarms()->size() == 2);
  REQUIRE(s->cancel_alarm("a").is_ok());
  REQUIRE(s->cancel_alarm("nope").is_ok());
  CHECK(s->list_alarms()->size() == 1);
  CHECK_FALSE(s->set_alarm({"", 1, "{}", 0, 0}).is_ok());
  CHECK_FALSE(s->set_alarm({"x", 1, "not json", 0, 0}).is_ok());
  REQUIRE(s->commit().is_ok());
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  CHECK(s2->next_alarm()->value().due_ms == 400);
}

TEST_CASE("query: a byte cap ends a page early (never before its first fact) and says that more "
          "is left, like a full limit does") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  std::string big(3000, 'x');
  for (int i = 0; i < 10; ++i)
    REQUIRE(s->append(draft("blob", {{"i", i}, {"pad", big}})).is_ok());
  REQUIRE(s->commit().is_ok());
  fact_filter f;
  f.limit = 100;
  f.max_bytes = 10'000; // about three of these facts
  bool more = false;
  auto page = s->query(f, &more);
  REQUIRE(page.is_ok());
  CHECK(page->size() == 3);
  CHECK(more);
  // Walking on from the last seq reads every fact once.
  std::vector<int64_t> seen;
  for (auto& x : *page)
    seen.push_back(x.seq);
  while (more) {
    f.after_seq = seen.back();
    page = s->query(f, &more);
    REQUIRE(page.is_ok());
    REQUIRE_FALSE(page->empty());
    for (auto& x : *page)
      seen.push_back(x.seq);
  }
  REQUIRE(seen.size() == 10);
  for (size_t i = 0; i < seen.size(); ++i)
    CHECK(seen[i] == static_cast<int64_t>(i + 1));
  // A cap below one fact still returns one.
  f.after_seq.reset();
  f.max_bytes = 1;
  CHECK(s->query(f, &more)->size() == 1);
  CHECK(more);
  // The limit says more too, and nothing more when the limit is exactly reached by the end.
  f.max_bytes = 0;
  f.limit = 4;
  CHECK(s->query(f, &more)->size() == 4);
  CHECK(more);
  f.after_seq = 6;
  CHECK(s->query(f, &more)->size() == 4);
  CHECK_FALSE(more);
}

TEST_CASE("dead letters, breakers and configs round-trip") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  dead_letter_record d;
  d.id = "dl_1";
  d.operation = "deliver";
  d.payload = R"({"a":1})";
  d.error_code = "HTTP_503";
  d.error_message = "unavailable";
  d.error_category = "transient";
  d.reason = "server_error";
  d.attempts = 5;
  d.first_attempt_ms = 1;
  d.last_attempt_ms = 2;
  REQUIRE(s->put_dead_letter(d).is_ok());
  d.id = "dl_2";
  d.status = dl_status::scheduled;
  d.next_retry_ms = 99;
  REQUIRE(s->put_dead_letter(d).is_ok());
  CHECK(s->list_dead_letters(std::nullopt, 10)->size() == 2);
  CHECK(s->list_dead_letters(dl_status::scheduled, 10)->size() == 1);
  d.status = dl_status::resolved;
  d.expires_at_ms = 50;
  REQUIRE(s->put_dead_letter(d).is_ok());
  CHECK(s->get_dead_letter("dl_2")->status == dl_status::resolved);
  CHECK(*s->purge_dead_letters(100) == 1);
  CHECK(s->get_dead_letter("dl_2").error().code() == errc::not_found);

  REQUIRE(s->put_breaker({"crm", "OPEN", R"({"failures":5})", 0}).is_ok());
  CHECK_FALSE(s->put_breaker({"crm", "WEIRD", "{}", 0}).is_ok());
  CHECK(s->list_breakers()->at(0).state == "OPEN");

  CHECK(*s->put_config("retry", R"({"max":3})") == 1);
  CHECK(*s->put_config("retry", R"({"max":5})") == 2);
  CHECK(*s->put_config("other", "{}") == 1);
  CHECK(s->get_config("retry")->version == 2);
  CHECK(s->get_config("retry", 1)->body == R"({"max":3})");
  CHECK(s->get_config("retry", 9).error().code() == errc::not_found);
  CHECK(s->list_configs()->size() == 3);
  REQUIRE(s->commit().is_ok());
}

TEST_CASE("schema: migration 5 gives a version-4 file's dead letters an auto_retries count of 0, "
          "which a read-only open of the old file reads too") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 4;
  fs::path file;
  {
    auto s = open_ok(o, key());
    file = s->path();
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  REQUIRE(raw_exec_factum(file,
                          "INSERT INTO dead_letters(id, operation, payload, error_code, "
                          "error_message, error_category, reason, attempts, first_attempt_at, "
                          "last_attempt_at, status, created_at, updated_at) VALUES ('dl_old', "
                          "'deliver', '{}', 'HTTP_503', 'down', 'transient', 'server_error', 5, 1, "
                          "2, 'scheduled', 1, 2)") == SQLITE_OK);
  {
    auto ro = opts_for(tmp.path());
    ro.read_only = true;
    auto s = open_ok(ro, key());
    CHECK(s->schema_version() == 4);
    auto d = s->get_dead_letter("dl_old");
    REQUIRE(d.is_ok());
    CHECK(d->auto_retries == 0);
    CHECK(s->list_dead_letters(dl_status::scheduled, 10)->size() == 1);
  }
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    CHECK(s->schema_version() == current_schema_version);
    auto d = s->get_dead_letter("dl_old");
    REQUIRE(d.is_ok());
    CHECK(d->auto_retries == 0);
    CHECK(d->attempts == 5);
    d->auto_retries = 2;
    REQUIRE(s->put_dead_letter(*d).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  // The migrated column holds what was written: read back from the file, not the handle.
  auto ro = opts_for(tmp.path());
  ro.read_only = true;
  auto s = open_ok(ro, key());
  CHECK(s->schema_version() == current_schema_version);
  auto d = s->get_dead_letter("dl_old");
  REQUIRE(d.is_ok());
  CHECK(d->auto_retries == 2);
  CHECK(d->attempts == 5);
}

TEST_CASE("schema: a version-1 file migrates to the current version and keeps its facts") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  {
    auto s = open_ok(o, key());
    CHECK(s->schema_version() == 1);
    REQUIRE(s->append(draft("invocation")).is_ok());
    REQUIRE(s->commit().is_ok());
    CHECK_FALSE(s->put_config("x", "{}").is_ok()); // no configs table in v1
  }
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->schema_version() == current_schema_version);
  CHECK(s->last_seq() == 1);
  CHECK(s->verify()->ok);
  CHECK(s->put_config("x", "{}").is_ok());
  REQUIRE(s->append(draft("outcome")).is_ok());
  REQUIRE(s->commit().is_ok());
  CHECK(s->verify()->ok);
  // v3: no INSERT trigger on facts, the type indexes rebuilt.
  auto file = s->path();
  s.reset();
  std::string names;
  for (auto& row : raw_rows(file, "SELECT name FROM sqlite_master WHERE name IN ('facts_chain', "
                                  "'facts_by_type', 'facts_by_subtype') ORDER BY name"))
    names += row[0] + " ";
  CHECK(names == "facts_by_subtype facts_by_type ");
}

TEST_CASE("facts: ids are the file's prefix and the seq in hex, found without an index") {
  test::temp_dir tmp;
  auto s = open_ok(opts_for(tmp.path()), key());
  std::vector<fact> got;
  for (int i = 0; i < 20; ++i)
    got.push_back(s->append(draft("invocation", {{"i", i}})).value());
  REQUIRE(s->commit().is_ok());
  auto prefix = meta_value(s->path(), "fact_id_prefix");
  REQUIRE(prefix.size() == 20);
  CHECK(prefix.rfind("fct_", 0) == 0);
  for (auto& f : got) {
    CHECK(f.fact_id == prefix + hex12(f.seq));
    auto by_id = s->get(f.fact_id);
    REQUIRE(by_id.is_ok());
    CHECK(by_id->seq == f.seq);
    CHECK(by_id->hash == f.hash);
  }
  // Well-formed ids that name no fact here, and malformed ones, are NOT_FOUND.
  auto other = open_ok(opts_for(tmp.path()), key("b1"));
  auto foreign = other->append(draft("invocation")).value();
  REQUIRE(other->commit().is_ok());
  CHECK(foreign.fact_id.substr(0, 20) != prefix); // a prefix per file
  for (std::string id :
       {prefix + hex12(21), prefix + hex12(0), foreign.fact_id, prefix + "00000000000g",
        prefix + "0000000000001", std::string("fct_"), std::string(""), got[3].fact_id + "0"})
    CHECK_MESSAGE(s->get(id).error().code() == errc::not_found, id);
  // No index on fact_id in a new file; the ids survive a reopen and continue.
  for (auto& line : schema_lines(s->path()))
    CHECK_MESSAGE((line.find("index") != 0 || line.find("fact_id") == std::string::npos), line);
  s.reset();
  auto s2 = open_ok(opts_for(tmp.path()), key());
  auto next = s2->append(draft("outcome")).value();
  REQUIRE(s2->commit().is_ok());
  CHECK(next.fact_id == prefix + hex12(21));
  CHECK(s2->get(got[0].fact_id)->seq == 1);
  CHECK(s2->verify()->ok);
}

TEST_CASE(
  "schema: a version-4 file without a well-formed fact_id_prefix is refused, not appended to") {
  test::temp_dir tmp;
  fs::path file = open_ok(opts_for(tmp.path()), key())->path();
  for (auto sql : {"UPDATE meta SET value='fct_short' WHERE key='fact_id_prefix'",
                   "DELETE FROM meta WHERE key='fact_id_prefix'"}) {
    REQUIRE(raw_exec_factum(file, sql) == SQLITE_OK);
    auto r = entity_store::open(opts_for(tmp.path()), key());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == errc::corruption);
    CHECK(r.error().message().find("fact_id_prefix") != std::string::npos);
  }
  CHECK(raw_rows(file, "SELECT COUNT(*) FROM facts")[0][0] == "0");
}

TEST_CASE("verify: a fact id that is not derived from its seq is reported at its seq") {
  // Without a UNIQUE index, two facts could share an id if a writer bypassed the store: the
  // hash covers the id, so the forger must also rehash the fact; verify still finds it.
  test::temp_dir tmp;
  fs::path file;
  fact last;
  std::string first_id;
  {
    auto s = open_ok(opts_for(tmp.path()), key());
    first_id = s->append(draft("invocation")).value().fact_id;
    REQUIRE(s->append(draft("invocation")).is_ok());
    last = s->append(draft("outcome")).value();
    REQUIRE(s->commit().is_ok());
    file = s->path();
  }
  fact forged = last;
  forged.fact_id = first_id;
  forged.hash = compute_hash(forged);
  REQUIRE(raw_exec_factum(file, "DROP TRIGGER facts_no_update; UPDATE facts SET fact_id='" +
                                  first_id + "', hash='" + forged.hash + "' WHERE seq=3") ==
          SQLITE_OK);
  auto s = open_ok(opts_for(tmp.path()), key());
  auto v = s->verify();
  REQUIRE(v.is_ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 3);
  bool named = false;
  for (auto& p : v->problems)
    named |= p.find("fact_id of seq 3") != std::string::npos;
  CHECK(named);
}

TEST_CASE("schema: a version-3 file migrates to 4 and on: old ids keep their index, new ids are "
          "derived") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 3;
  std::vector<std::string> old_ids;
  {
    auto s = open_ok(o, key());
    for (int i = 0; i < 3; ++i)
      old_ids.push_back(s->append(draft("invocation")).value().fact_id);
    REQUIRE(s->commit().is_ok());
  }
  auto s = open_ok(opts_for(tmp.path()), key());
  CHECK(s->schema_version() == current_schema_version);
  auto prefix = meta_value(s->path(), "fact_id_prefix");
  REQUIRE(prefix.size() == 20);
  CHECK(meta_value(s->path(), "fact_id_legacy_until") == "3");
  auto f4 = s->append(draft("outcome")).value();
  REQUIRE(s->commit().is_ok());
  CHECK(f4.fact_id == prefix + hex12(4));
  for (size_t i = 0; i < old_ids.size(); ++i) {
    CHECK(old_ids[i].substr(0, 20) != prefix);
    auto f = s->get(old_ids[i]);
    REQUIRE(f.is_ok());
    CHECK(f->seq == static_cast<int64_t>(i) + 1);
  }
  CHECK(s->get(f4.fact_id)->seq == 4);
  CHECK(s->verify()->ok);
  // The UNIQUE index of the old ids stays: a duplicate is still refused by SQLite.
  auto file = s->path();
  s.reset();
  CHECK(raw_exec_factum(file, "INSERT INTO facts(seq, fact_id, type, ts, data, prev_hash, hash) "
                              "VALUES (5, '" +
                                old_ids[0] + "', 'a', 1, '{}', 'p', 'h')") != SQLITE_OK);
}

TEST_CASE("schema: a new file has the schema of a migrated one, but no UNIQUE on fact_id") {
  test::temp_dir tmp;
  auto o = opts_for(tmp.path());
  o.target_schema_version = 1;
  fs::path migrated, fresh;
  migrated = open_ok(o, key("old"))->path();
  migrated = open_ok(opts_for(tmp.path()), key("old"))->path(); // 1 -> 4
  fresh = open_ok(opts_for(tmp.path()), key("new"))->path();
  auto a = schema_lines(migrated, "sqlite_autoindex_facts_1");
  auto b = schema_lines(fresh);
  for (auto& line : a) { // the one difference
    auto at = line.find("fact_id TEXT NOT NULL UNIQUE");
    if (at != std::string::npos)
      line.replace(at, 28, "fact_id TEXT NOT NULL");
  }
  CHECK(a == b);
  CHECK(a.size() == 30);                                // 13 tables, 10 indexes, 7 triggers
  CHECK(schema_lines(migrated).size() == a.size() + 1); // the UNIQUE index of old ids
}

} // namespace store_tests
