// money_test.cpp: exact decimal amounts: 0.1 + 0.2 == 0.3, normalisation, large and negative
// values, ordering, formatting, strict parsing and per-currency totals. Single-threaded.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "factum/resilience/money.hpp"

using namespace factum;
using namespace factum::resilience;

namespace {

decimal dec(std::string_view text) {
  auto r = decimal::parse(text);
  REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
  return r.value();
}

} // namespace

TEST_CASE("money: 0.1 + 0.2 is exactly 0.3") {
  auto sum = dec("0.1") + dec("0.2");
  CHECK(sum == dec("0.3"));
  CHECK(sum.to_string() == "0.3");
  CHECK_FALSE(sum == dec("0.30000000000000004"));
  decimal total;
  for (int i = 0; i < 1000; ++i)
    total += dec("0.001");
  CHECK(total.to_string() == "1");
  CHECK(total == decimal(1));
}

TEST_CASE("money: normalisation gives one representation per number") {
  CHECK(dec("1.50") == dec("1.5"));
  CHECK(dec("1.50").to_string() == "1.5");
  CHECK(dec("1.50").scale() == 1);
  CHECK(dec("007").to_string() == "7");
  CHECK(dec("000.000").to_string() == "0");
  CHECK(dec("-0.0").to_string() == "0");
  CHECK_FALSE(dec("-0.0").is_negative());
  CHECK(dec("-0.0") == decimal{});
  CHECK(dec("0.005").to_string() == "0.005");
  CHECK(dec("10").to_string() == "10");
  CHECK(dec("100.0100").to_string() == "100.01");
}

TEST_CASE("money: large values stay exact") {
  std::string nines(38, '9');
  auto big = dec(nines + ".99");
  auto sum = big + dec("0.01");
  CHECK(sum.to_string() == "1" + std::string(38, '0'));
  CHECK(sum - dec("0.01") == big);
  auto tiny = dec("0." + std::string(29, '0') + "1");
  CHECK((tiny + tiny).to_string() == "0." + std::string(29, '0') + "2");
  CHECK(decimal(std::numeric_limits<int64_t>::min()).to_string() == "-9223372036854775808");
  CHECK(decimal(std::numeric_limits<int64_t>::max()).to_string() == "9223372036854775807");
  CHECK((decimal(std::numeric_limits<int64_t>::max()) + decimal(1)).to_string() ==
        "9223372036854775808");
}

TEST_CASE("money: negative values") {
  CHECK((dec("-1.5") + dec("0.25")).to_string() == "-1.25");
  CHECK((dec("0.25") - dec("1.5")).to_string() == "-1.25");
  CHECK((dec("-0.005") + dec("0.005")).to_string() == "0");
  CHECK_FALSE((dec("-0.005") + dec("0.005")).is_negative());
  CHECK((dec("-2") + dec("-0.5")).to_string() == "-2.5");
  CHECK((-dec("3.1")).to_string() == "-3.1");
  CHECK((-decimal{}).to_string() == "0");
  CHECK((dec("1000") - dec("0.001")).to_string() == "999.999");
  CHECK((dec("0.001") - dec("1000")).to_string() == "-999.999");
}

TEST_CASE("money: ordering") {
  CHECK(dec("-2") < dec("-1.5"));
  CHECK(dec("-1.5") < dec("0"));
  CHECK(dec("0") < dec("0.005"));
  CHECK(dec("0.005") < dec("0.01"));
  CHECK(dec("0.01") < dec("10"));
  CHECK(dec("9.99") < dec("10"));
  CHECK(dec("-10") < dec("-9.99"));
  CHECK(dec("1.0") <= dec("1"));
  CHECK(dec("1.0") >= dec("1"));
  CHECK((dec("2.5") <=> dec("2.50")) == std::strong_ordering::equal);
}

TEST_CASE("money: formatting with a minimum of fraction digits") {
  CHECK(dec("0.3").to_string(2) == "0.30");
  CHECK(dec("5").to_string(2) == "5.00");
  CHECK(dec("0.005").to_string(2) == "0.005");
  CHECK(dec("-0.5").to_string(2) == "-0.50");
  CHECK(decimal{}.to_string(2) == "0.00");
  CHECK(dec("12.345").to_string(0) == "12.345");
  CHECK(dec("0.3").to_json() == nlohmann::json("0.3"));
}

TEST_CASE("money: strict parsing") {
  for (const char* bad : {"", "-", "1.", ".5", "1e3", "+1", " 1", "1 ", "1,5", "0x10", "--1",
                          "1.2.3", "NaN", "inf", "１"}) {
    CAPTURE(bad);
    auto r = decimal::parse(bad);
    CHECK_FALSE(r.is_ok());
    if (!r.is_ok())
      CHECK(r.error().code() == errc::invalid_argument);
  }
  CHECK_FALSE(decimal::parse(std::string(41, '1')).is_ok());
  CHECK(decimal::parse(std::string(40, '1')).is_ok());
  CHECK(decimal::parse("0000" + std::string(40, '1')).is_ok()); // leading zeros do not count
  CHECK_FALSE(decimal::parse("0." + std::string(31, '1')).is_ok());
  CHECK(decimal::parse("0." + std::string(30, '1') + "000").is_ok());

  CHECK(decimal::from_json("0.005")->to_string() == "0.005");
  CHECK(decimal::from_json(12)->to_string() == "12");
  CHECK(decimal::from_json(-3)->to_string() == "-3");
  CHECK(decimal::from_json(nlohmann::json(18446744073709551615ull))->to_string() ==
        "18446744073709551615");
  CHECK_FALSE(decimal::from_json(0.1).is_ok());
  CHECK_FALSE(decimal::from_json(nullptr).is_ok());
}

TEST_CASE("money: totals by currency") {
  money_totals t;
  t.add("USD", dec("0.005"));
  t.add("USD", dec("0.005"));
  t.add("USD", dec("0.1"));
  t.add("EUR", dec("2"));
  t.add("EUR", dec("-0.5"));
  CHECK(t.total("USD").to_string() == "0.11");
  CHECK(t.total("EUR").to_string() == "1.5");
  CHECK(t.total("GBP").is_zero());
  CHECK(t.to_json() == nlohmann::json{{"EUR", "1.5"}, {"USD", "0.11"}});
  CHECK(t.totals().size() == 2);
}
