// support.hpp: shared helpers of the inspect tests: running `factum inspect` in-process with
// captured output and a fixed clock, golden files, a data directory filled with fixed
// timestamps (stores in durability normal), and a snapshot of a directory's files. Raw SQL on a
// file behind the store's back is raw_exec (support/raw_sql.hpp: a plain connection). Test
// thread only.
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "factum/storage/entity_store.hpp"
#include "factum/tools/inspect.hpp"
#include "support/raw_sql.hpp"
#include "support/store_helpers.hpp"

namespace factum::test::inspect {

namespace fs = std::filesystem;
using test::open_ok;
using test::opts_for;
using test::raw_exec;

/// 2024-01-17T14:00:00.000Z: the fixture's first fact.
inline constexpr int64_t t0 = 1705500000000;
/// The clock the CLI sees in tests: one minute after t0.
inline constexpr int64_t test_now = t0 + 60'000;

struct cli_result {
  int code = 0;
  std::string out;
  std::string err;
};

/// Runs `factum <args...>` through add_inspect_command with captured streams, stdout "not a
/// terminal" unless `tty`, and the test clock; parse errors end like main() ends them.
inline cli_result run_cli(const std::vector<std::string>& args, tools::inspect_io io = {},
                          bool tty = false) {
  std::ostringstream out, err;
  CLI::App app{"factum"};
  app.require_subcommand(1);
  int exit_code = 0;
  io.out = &out;
  io.err = &err;
  io.out_is_tty = tty;
  if (!io.clock)
    io.clock = [] { return test_now; };
  tools::add_inspect_command(app, &exit_code, std::move(io));
  std::vector<const char*> argv{"factum"};
  for (auto& a : args)
    argv.push_back(a.c_str());
  cli_result r;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    r.code = exit_code;
  } catch (const CLI::ParseError& e) {
    r.code = app.exit(e, out, err) == 0 ? 0 : 2;
  }
  r.out = out.str();
  r.err = err.str();
  return r;
}

/// The expected output stored in tests/inspect/golden/<name>.
inline std::string golden(const std::string& name) {
  std::ifstream in(fs::path(FACTUM_INSPECT_GOLDEN_DIR) / name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Lines of `text` (without the final empty one).
inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

inline fact_draft draft(std::string type, std::string subtype, int64_t ts, std::string tool,
                        std::string trace, std::string key,
                        nlohmann::json data = nlohmann::json::object()) {
  fact_draft d;
  d.type = std::move(type);
  d.subtype = std::move(subtype);
  d.timestamp_ms = ts;
  d.tool_id = std::move(tool);
  d.trace_id = std::move(trace);
  d.idempotency_key = std::move(key);
  d.data = std::move(data);
  return d;
}

inline fact_draft cost(std::string subtype, int64_t ts, std::string tool, std::string amount,
                       std::string currency, nlohmann::json data = nlohmann::json::object()) {
  auto d = draft("cost", std::move(subtype), ts, std::move(tool), "", "", std::move(data));
  d.amount = std::move(amount);
  d.currency = std::move(currency);
  return d;
}

/// acme/ledger/a1 with 12 facts one second apart from t0, keys, alarms, breakers and dead
/// letters; acme/webhook/w1 with 2 facts; globex/ledger/g1 with 1. Every store is closed on
/// return (no -wal/-shm left).
inline void fill_fixture(const fs::path& dir) {
  {
    auto s = open_ok(opts_for(dir, durability::normal), entity_key{"acme", "ledger", "a1"});
    using nlohmann::json;
    std::vector<fact_draft> d{
      draft("invocation", "call", t0, "crm", "t1", "k1", {{"method", "lookup"}}),
      draft("outcome", "call", t0 + 1000, "crm", "t1", "k1", {{"ok", true}}),
      draft("invocation", "call", t0 + 2000, "telephony", "t2", "k2", {{"method", "dial"}}),
      draft("error", "external", t0 + 3000, "telephony", "t2", "k2",
            {{"category", "transient"}, {"error_code", "HTTP_503"}}),
      cost("tool_usage", t0 + 4000, "telephony", "0.005", "USD", {{"failed", true}}),
      draft("invocation", "call", t0 + 5000, "telephony", "t3", "k3", {{"method", "dial"}}),
      draft("outcome", "call", t0 + 6000, "telephony", "t3", "k3", {{"ok", true}}),
      cost("tool_usage", t0 + 7000, "telephony", "0.010", "USD"),
      draft("error", "client", t0 + 8000, "crm", "t4", "", {{"error_type", "client"}}),
      cost("tool_usage", t0 + 9000, "crm", "1.25", "EUR", {{"failed", false}}),
      draft("lifecycle", "breaker", t0 + 10000, "telephony", "", "",
            {{"from", "CLOSED"}, {"to", "OPEN"}}),
      cost("sms", t0 + 11000, "telephony", "0.0001", "USD", {{"failed", false}}),
    };
    d[4].trace_id = "t2";
    REQUIRE(s->append_many(d).is_ok());
    REQUIRE(s->begin_key("k1", "fp1", 3'600'000, t0).is_ok());
    REQUIRE(s->complete_key("k1", R"({"seq":2})").is_ok());
    REQUIRE(s->begin_key("k2", "fp2", 30'000, t0 + 2000).is_ok());
    REQUIRE(s->fail_key("k2", R"({"code":"HTTP_503"})").is_ok());
    REQUIRE(s->begin_key("k3", "fp3", 0, t0 + 5000).is_ok());
    REQUIRE(s->complete_key("k3", R"({"seq":7})").is_ok());
    journal_step j1{"key:k1",
                    1,
                    "tool",
                    "sms/send",
                    "fp-s1",
                    R"([["append","order",1]])",
                    R"({"ok":true,"http_status":200})",
                    1,
                    t0 + 100,
                    t0 + 200};
    journal_step j2{"key:k1",     2, "sleep",  "500ms",     "500ms", "[]",
                    std::nullopt, 2, t0 + 300, std::nullopt};
    REQUIRE(s->put_journal_step(j1).is_ok());
    REQUIRE(s->put_journal_step(j2).is_ok());
    REQUIRE(s->set_alarm({"expire-keys", t0 + 30'000, "{}", 0, t0}).is_ok());
    REQUIRE(s->set_alarm({"retry-dl", t0 + 120'000, R"({"dl":"dl_1"})", 2, t0 + 1000}).is_ok());
    REQUIRE(s->put_breaker({"telephony", "OPEN", R"({"failures":5})", t0 + 10000}).is_ok());
    REQUIRE(s->put_breaker({"crm", "CLOSED", R"({"failures":0})", t0 + 9000}).is_ok());
    dead_letter_record dl;
    dl.id = "dl_1";
    dl.operation = "deliver";
    dl.payload = R"({"to":"+100"})";
    dl.error_code = "HTTP_503";
    dl.error_message = "service unavailable";
    dl.error_category = "transient";
    dl.reason = "server_error";
    dl.attempts = 5;
    dl.first_attempt_ms = t0 + 2000;
    dl.last_attempt_ms = t0 + 3000;
    dl.trace_id = "t2";
    dl.status = dl_status::scheduled;
    dl.next_retry_ms = t0 + 120'000;
    dl.created_at_ms = t0 + 3000;
    dl.updated_at_ms = t0 + 3000;
    REQUIRE(s->put_dead_letter(dl).is_ok());
    dl.id = "dl_2";
    dl.operation = "notify";
    dl.error_code = "HTTP_400";
    dl.error_message = "bad request";
    dl.error_category = "client";
    dl.reason = "validation";
    dl.attempts = 1;
    dl.status = dl_status::pending;
    dl.next_retry_ms.reset();
    dl.trace_id.clear();
    dl.created_at_ms = t0 + 8000;
    REQUIRE(s->put_dead_letter(dl).is_ok());
    REQUIRE(s->commit().is_ok());
  }
  {
    auto s = open_ok(opts_for(dir, durability::normal), entity_key{"acme", "webhook", "w1"});
    REQUIRE(s->append(draft("invocation", "deliver", t0 + 500, "hook", "", "")).is_ok());
    REQUIRE(
      s->append(cost("delivery", t0 + 600, "hook", "0.0002", "USD", {{"failed", true}})).is_ok());
    REQUIRE(
      s->append(draft("error", "external", t0 + 700, "hook", "", "", {{"error_type", "transient"}}))
        .is_ok());
    REQUIRE(s->commit().is_ok());
  }
  {
    auto s = open_ok(opts_for(dir, durability::normal), entity_key{"globex", "ledger", "g1"});
    REQUIRE(s->append(draft("invocation", "", t0 + 100, "", "", "")).is_ok());
    REQUIRE(s->commit().is_ok());
  }
}

/// Every regular file under `dir` with its size and mtime (ns), and its bytes when `content`.
struct file_snapshot {
  std::map<std::string, std::pair<int64_t, std::string>> files; // path -> (mtime ns, bytes)
  friend bool operator==(const file_snapshot&, const file_snapshot&) = default;
};

inline file_snapshot snapshot_dir(const fs::path& dir) {
  file_snapshot s;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file())
      continue;
    struct stat st {};
    ::stat(e.path().c_str(), &st);
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    s.files[e.path().string()] = {static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                                    st.st_mtim.tv_nsec,
                                  std::move(bytes)};
  }
  return s;
}

} // namespace factum::test::inspect
