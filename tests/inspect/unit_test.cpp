// unit_test.cpp: the pure parts of `factum inspect`: the exact decimal adder, time formatting
// and parsing, percentages, cell helpers and the entity reader's choice between a private copy
// and reading in place.
#include <doctest/doctest.h>

#include "decimal.hpp"
#include "entity_reader.hpp"
#include "output.hpp"
#include "support.hpp"
#include "support/temp_dir.hpp"

using namespace factum;
using namespace factum::tools;

namespace {

std::string sum(std::initializer_list<const char*> terms) {
  exact_decimal d;
  for (auto* t : terms) {
    auto v = exact_decimal::parse(t);
    REQUIRE_MESSAGE(v.is_ok(), t);
    d += *v;
  }
  return d.to_string();
}

} // namespace

TEST_CASE("decimal: exact sums over strings") {
  CHECK(sum({}) == "0");
  CHECK(sum({"0.10", "0.005"}) == "0.105");
  CHECK(sum({"1.50", "2"}) == "3.50");
  CHECK(sum({"0.1", "0.2"}) == "0.3");
  CHECK(sum({"-1.5", "1.25"}) == "-0.25");
  CHECK(sum({"1.25", "-1.25"}) == "0.00");
  CHECK(sum({"-0.0"}) == "0.0");
  CHECK(sum({"-2", "-3.5"}) == "-5.5");
  CHECK(sum({"007.50"}) == "7.50");
  CHECK(sum({"99999999999999999999.99", "0.01"}) == "100000000000000000000.00");
  CHECK(sum({"0.0001", "0.0001", "-0.0003"}) == "-0.0001");
  auto zero = exact_decimal::parse("0");
  CHECK(zero->to_string(2) == "0.00");
  CHECK(exact_decimal::parse("-1.5")->to_string(3) == "-1.500");
  CHECK(exact_decimal::parse("1.2345")->to_string(2) == "1.2345");
  exact_decimal tenth;
  auto t = exact_decimal::parse("0.1");
  for (int i = 0; i < 1000; ++i)
    tenth += *t;
  CHECK(tenth.to_string() == "100.0");
  for (auto* bad : {"", "-", ".5", "1.", "1e3", "--1", "+1", "1.2.3", "0x10", " 1", "1,5"}) {
    CAPTURE(bad);
    CHECK_FALSE(exact_decimal::parse(bad).is_ok());
  }
}

TEST_CASE("times: ISO 8601 in UTC with milliseconds, and parsing of every accepted form") {
  using test::inspect::t0;
  CHECK(format_time(t0, false) == "2024-01-17T14:00:00.000Z");
  CHECK(format_time(t0 + 1, false) == "2024-01-17T14:00:00.001Z");
  CHECK(format_time(0, false) == "1970-01-01T00:00:00.000Z");
  CHECK(format_time(-1, false) == "1969-12-31T23:59:59.999Z");
  CHECK(format_time(951782400000, false) == "2000-02-29T00:00:00.000Z");
  auto p = [](const char* s, bool local = false) {
    auto r = parse_time_arg(s, t0, local);
    REQUIRE_MESSAGE(r.is_ok(), s);
    return *r;
  };
  CHECK(p("1705500000000") == t0);
  CHECK(p("2024-01-17T14:00:00Z") == t0);
  CHECK(p("2024-01-17T14:00:00.000Z") == t0);
  CHECK(p("2024-01-17T14:00:00.25Z") == t0 + 250);
  CHECK(p("2024-01-17T14:00:00.123456789Z") == t0 + 123);
  CHECK(p("2024-01-17T14:00") == t0);
  CHECK(p("2024-01-17 14:00:00") == t0);
  CHECK(p("2024-01-17T15:30:00+01:30") == t0);
  CHECK(p("2024-01-17T09:00:00-0500") == t0);
  CHECK(p("2024-01-17") == 1705449600000);
  CHECK(p("2000-02-29") == 951782400000);
  CHECK(p("90s") == t0 - 90'000);
  CHECK(p("15m") == t0 - 900'000);
  CHECK(p("2h") == t0 - 7'200'000);
  CHECK(p("7d") == t0 - 7 * 86'400'000LL);
  CHECK(p("1w") == t0 - 7 * 86'400'000LL);
  CHECK(p("500ms") == t0 - 500);
  for (auto* bad :
       {"", "yesterday", "2024-13-01", "2023-02-29", "2024-01-32", "2024-1-1", "2024-01-17T24:00",
        "2024-01-17T14:60", "2024-01-17T14:00:00.Z", "2024-01-17T14:00:00+25:00", "2024-01-17Tx",
        "10y", "-5", "1.5h", "2024-01-17T14:00:00Zjunk"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_time_arg(bad, t0, false).is_ok());
  }
  // Local time round-trips through its own offset.
  auto local = format_time(t0, true);
  CHECK(local.find('Z') == std::string::npos);
  CHECK(p(local.c_str()) == t0);
}

TEST_CASE("cells: percentages, sizes, ellipsis, widths") {
  CHECK(percent(1, 3) == "33.3%");
  CHECK(percent(2, 3) == "66.7%");
  CHECK(percent(1, 8) == "12.5%");
  CHECK(percent(0, 5) == "0.0%");
  CHECK(percent(5, 5) == "100.0%");
  CHECK(percent(1, 0) == "-");
  CHECK(human_bytes(812) == "812 B");
  CHECK(human_bytes(24576) == "24.0 KiB");
  CHECK(human_bytes(3 * 1024 * 1024 + 200 * 1024) == "3.2 MiB");
  CHECK(ellipsize("abcdef", 6) == "abcdef");
  CHECK(ellipsize("abcdefg", 6) == "abc...");
  CHECK(ellipsize("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 4) == "\xc3\xa9...");
  CHECK(display_width("\xc3\xa9t\xc3\xa9") == 3);
  CHECK(exit_code_for(errc::not_found) == 3);
  CHECK(exit_code_for(errc::not_factum_file) == 4);
  CHECK(exit_code_for(errc::newer_schema) == 5);
  CHECK(exit_code_for(errc::corruption) == 6);
  CHECK(exit_code_for(errc::unavailable) == 7);
  CHECK(exit_code_for(errc::invalid_argument) == 2);
}

TEST_CASE("entity reader: a closed file and a live one are read through a copy, and a refresh "
          "sees a commit made since, copying the whole file again only after a WAL restart") {
  using namespace factum::test::inspect;
  test::temp_dir tmp;
  fill_fixture(tmp.path());
  entity_key k{"acme", "ledger", "a1"};
  {
    auto r = entity_reader::open(tmp.path(), k);
    REQUIRE(r.is_ok());
    CHECK((*r)->snapshot());
    CHECK((*r)->path() == k.file_path(tmp.path()));
    CHECK((*r)->store().last_seq() == 12);
    CHECK((*r)->file_bytes() > 0);
  }
  auto writer = open_ok(opts_for(tmp.path(), durability::normal), k);
  auto r = entity_reader::open(tmp.path(), k);
  REQUIRE(r.is_ok());
  CHECK((*r)->snapshot());
  CHECK_FALSE((*r)->store().get(13).is_ok());
  REQUIRE(writer->append(draft("late", "", t0, "", "", "")).is_ok());
  REQUIRE(writer->commit().is_ok());
  REQUIRE((*r)->refresh().is_ok());
  auto q = (*r)->store().get(13);
  CHECK(q.is_ok());
  CHECK((*r)->whole_copies() == 1); // the refresh copied the new commit's frames only
  // Commits that overwrite older frames inside the WAL's size (after a checkpoint let the WAL
  // restart) are seen too: the next frame's salts say so, whatever the size and mtime say.
  // The restart takes one whole copy; the commits after it, their frames only.
  REQUIRE(writer->checkpoint().is_ok());
  for (int64_t seq = 14; seq <= 16; ++seq) {
    CAPTURE(seq);
    REQUIRE(writer->append(draft("later", "", t0, "", "", "")).is_ok());
    REQUIRE(writer->commit().is_ok());
    REQUIRE((*r)->refresh().is_ok());
    CHECK((*r)->store().get(seq).is_ok());
    CHECK((*r)->whole_copies() == 2);
  }
  REQUIRE((*r)->refresh().is_ok()); // nothing changed: nothing copied
  CHECK((*r)->whole_copies() == 2);
  CHECK((*r)->store().last_seq() == 16);
  // A file at another key's path is refused.
  auto moved = entity_key{"acme", "ledger", "zz"}.file_path(tmp.path());
  fs::create_directories(moved.parent_path());
  fs::copy_file(entity_key{"globex", "ledger", "g1"}.file_path(tmp.path()), moved);
  auto wrong = entity_reader::open(tmp.path(), entity_key{"acme", "ledger", "zz"});
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.error().code() == errc::corruption);
}

TEST_CASE("times: an age too large for 64-bit milliseconds is refused, not overflowed") {
  // Found by tests/fuzz/fact_filter_fuzz: 999999999999w overflowed int64 (UB) in parse_time_arg.
  using test::inspect::t0;
  for (auto* big : {"999999999999w", "999999999999d", "106751991168d"}) {
    CAPTURE(big);
    CHECK_FALSE(parse_time_arg(big, t0, false).is_ok());
  }
  auto r = parse_time_arg("106751991167d", t0, false); // the largest age in days that fits
  REQUIRE(r.is_ok());
  CHECK(*r == t0 - 106751991167LL * 86'400'000LL);
}
