// json_text_test.cpp: factum's compact JSON writer (storage/src/fact/json_text.cpp) against
// nlohmann::json::dump(), which defines the text a fact's data is hashed and stored as. Any
// difference would change the hash of new facts; so every value here must give the same bytes,
// or the same exception, as dump().
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "factum/storage/json_text.hpp"

using namespace factum;
using nlohmann::json;

namespace {

/// dump()'s text, or "throws <id>" when it throws a type_error.
std::string expect(const json& j) {
  try {
    return j.dump();
  } catch (const json::type_error& e) {
    return "throws " + std::to_string(e.id);
  }
}

std::string actual(const json& j) {
  try {
    return json_text(j);
  } catch (const json::type_error& e) {
    return "throws " + std::to_string(e.id);
  }
}

/// Bytes that take every branch of the writer: plain ASCII, each escape, other control bytes,
/// DEL, multi-byte UTF-8, and bytes that make invalid UTF-8.
const std::string pieces[] = {"a",
                              "Z",
                              "0",
                              " ",
                              "~",
                              "\"",
                              "\\",
                              "/",
                              "\b",
                              "\f",
                              "\n",
                              "\r",
                              "\t",
                              std::string(1, '\0'),
                              "\x01",
                              "\x1f",
                              "\x7f",
                              "\xc3\xa9",
                              "\xe2\x82\xac",
                              "\xf0\x9f\x98\x80",
                              "\xff",
                              "\xc3",
                              "\xed\xa0\x80",
                              "\xc0\xaf",
                              "abcdefgh"};

std::string random_string(std::mt19937_64& rng, bool valid_only) {
  std::string s;
  size_t len = rng() % 24;
  for (size_t i = 0; i < len; ++i) {
    // mostly plain letters, so that the 8-byte fast path runs between the special bytes
    if (rng() % 3)
      s.push_back(static_cast<char>('a' + rng() % 26));
    else {
      const auto& p = pieces[rng() % std::size(pieces)];
      if (valid_only && static_cast<unsigned char>(p[0]) >= 0x80 &&
          (p == "\xff" || p == "\xc3" || p == "\xed\xa0\x80" || p == "\xc0\xaf"))
        continue;
      s += p;
    }
  }
  return s;
}

json random_value(std::mt19937_64& rng, int depth, bool valid_only) {
  switch (rng() % (depth > 3 ? 6 : 8)) {
  case 0: return nullptr;
  case 1: return rng() % 2 == 0;
  case 2: return static_cast<int64_t>(rng()); // any int64, negative ones included
  case 3: return static_cast<uint64_t>(rng()) | (uint64_t{1} << 63);
  case 4: {
    double d = std::ldexp(static_cast<double>(rng() % 1000000) - 500000.0,
                          static_cast<int>(rng() % 80) - 40);
    return d;
  }
  case 5: return random_string(rng, valid_only);
  case 6: {
    json o = json::object();
    for (size_t n = rng() % 5; n > 0; --n)
      o[random_string(rng, valid_only)] = random_value(rng, depth + 1, valid_only);
    return o;
  }
  default: {
    json a = json::array();
    for (size_t n = rng() % 5; n > 0; --n)
      a.push_back(random_value(rng, depth + 1, valid_only));
    return a;
  }
  }
}

} // namespace

TEST_CASE("json text: hand-picked values give dump()'s bytes") {
  const json values[] = {
    nullptr,
    true,
    false,
    0,
    -1,
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<uint64_t>::max(),
    0.0,
    -0.0,
    1.5,
    0.1,
    1e300,
    std::numeric_limits<double>::quiet_NaN(),
    std::numeric_limits<double>::infinity(),
    "",
    "plain",
    "exactly8",
    "sixteen bytes ok",
    "quote \" in the middle of a longer string",
    "backslash \\ and / slash",
    std::string("nul \0 byte", 10),
    "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0e\x0f\x10\x1e\x1f\x7f",
    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
    "ascii first, then \xc3\xa9 after eight bytes",
    "\xff invalid",
    "ends in a truncated sequence \xc3",
    "\xed\xa0\x80 a surrogate",
    json::object(),
    json::array(),
    json{{"b", 1}, {"a", json::array({1, "x", nullptr, 2.5})}, {"\xc3\xa9", "k"}},
    json{{"\x01 key", json{{"nested", json{{"deeper", json::array({json::object()})}}}}}},
    json::binary({1, 2, 3}),
  };
  for (const auto& v : values) {
    CAPTURE(expect(v));
    CHECK(actual(v) == expect(v));
  }
}

TEST_CASE("json text: 20,000 generated values give dump()'s bytes or its exception") {
  std::mt19937_64 rng(20261125);
  int threw = 0;
  for (int i = 0; i < 20000; ++i) {
    json v = random_value(rng, 0, i % 4 != 0); // one in four may hold invalid UTF-8
    auto e = expect(v);
    threw += e.rfind("throws", 0) == 0;
    REQUIRE_MESSAGE(actual(v) == e, "value #" << i);
  }
  CHECK(threw > 100); // the invalid-UTF-8 path was exercised
}

TEST_CASE("json text: a string of valid UTF-8 is escaped as dump() escapes it, at every offset "
          "of the 8-byte fast path") {
  for (const auto& p : pieces) {
    json probe = p;
    if (expect(probe).rfind("throws", 0) == 0)
      continue; // append_json_string is for valid UTF-8 only
    for (size_t before = 0; before < 17; ++before)
      for (size_t after : {0, 1, 7, 8, 9}) {
        std::string s = std::string(before, 'x') + p + std::string(after, 'y');
        std::string out;
        append_json_string(out, s);
        CHECK(out == json(s).dump());
        CHECK(json_text(json(s)) == json(s).dump());
      }
  }
}
