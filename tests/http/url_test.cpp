// url_test.cpp: the pure parts of factum's HTTP client (factum/http/client.hpp): the one URL
// parser every user shares (the tool transport, `factum inspect --server`, `factum bench`), the
// Host header and percent-encoding. No sockets.
#include <doctest/doctest.h>

#include "factum/http/client.hpp"

using namespace factum::http::client;

TEST_CASE("url: http://host[:port][/path], IPv6 in brackets, the path without a trailing '/'") {
  auto a = parse_url("http://127.0.0.1:8080");
  REQUIRE(a.is_ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  CHECK(a->path == "");
  CHECK(a->host_header() == "127.0.0.1:8080");
  auto b = parse_url("HTTP://[::1]:9/api/v1/");
  REQUIRE(b.is_ok());
  CHECK(b->host == "::1");
  CHECK(b->port == 9);
  CHECK(b->path == "/api/v1");
  CHECK(b->host_header() == "[::1]:9");
  auto c = parse_url("http://localhost/");
  REQUIRE(c.is_ok());
  CHECK(c->port == 80);
  CHECK(c->path == "");
  CHECK(c->host_header() == "localhost");
}

TEST_CASE("url: refusals say why") {
  auto why = [](std::string_view text) {
    auto r = parse_url(text);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().code() == factum::errc::invalid_argument);
    return r.error().message();
  };
  CHECK(why("https://x/").find("https is not supported") == 0);
  CHECK(why("ftp://x/") == "must start with http://");
  CHECK(why("127.0.0.1:80") == "must start with http://");
  CHECK(why("http://") == "no host");
  CHECK(why("http://:80") == "no host");
  CHECK(why("http://u@h:1").find("user information") == 0);
  CHECK(why("http://h/p?q=1").find("query") != std::string::npos);
  CHECK(why("http://h/p#f").find("fragment") != std::string::npos);
  CHECK(why("http://h/a\x7f").find("printable ASCII") != std::string::npos);
  CHECK(why("http://[::1") == "unterminated IPv6 address");
  CHECK(why("http://[::1]x") == "bad port");
  for (auto* bad : {"http://h:", "http://h:x", "http://h:123456", "http://[::1]:"})
    CHECK(why(bad) == "bad port");
  CHECK(why("http://h:0") == "port out of range");
  CHECK(why("http://h:70000") == "port out of range");
  CHECK(why("http://h!x/") == "bad character in the host");
}

TEST_CASE("url: percent_encode keeps unreserved characters and those asked for") {
  CHECK(percent_encode("a b/c~d%") == "a%20b%2Fc~d%25");
  CHECK(percent_encode("sms/send now", "/") == "sms/send%20now");
  CHECK(percent_encode("\xc3\xa9") == "%C3%A9");
  CHECK(percent_encode("") == "");
}
