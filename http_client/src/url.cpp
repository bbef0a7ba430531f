// url.cpp: the pure parts of factum's HTTP client (factum/http/client.hpp): the URL parser, the
// Host header and percent-encoding. No Beast, no Asio, no state; any thread.
#include <cctype>

#include "factum/http/client.hpp"

namespace factum::http::client {

namespace {

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size())
    return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i])
      return false;
  return true;
}

status bad(std::string why) {
  return status{errc::invalid_argument, std::move(why)};
}

/// Splits "host[:port]" or "[v6]:port" into host and port text; the why on a malformed form.
std::optional<std::string> split_authority(std::string_view authority, std::string_view& host,
                                           std::string_view& port) {
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return "unterminated IPv6 address";
    host = authority.substr(1, close - 1);
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return "bad port";
      port = after.substr(1);
      if (port.empty())
        return "bad port";
    }
    return std::nullopt;
  }
  auto colon = authority.find(':');
  host = authority.substr(0, colon);
  if (colon != std::string_view::npos) {
    port = authority.substr(colon + 1);
    if (port.empty())
      return "bad port";
  }
  return std::nullopt;
}

} // namespace

std::string_view to_string(stage s) {
  switch (s) {
  case stage::resolve: return "resolve";
  case stage::connect: return "connect";
  case stage::write: return "write";
  case stage::read: return "read";
  }
  return "connect";
}

std::string url::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != 80)
    h += ":" + std::to_string(port);
  return h;
}

result<url> parse_url(std::string_view text) {
  if (iequals_prefix(text, "https://"))
    return bad("https is not supported (plain http:// only; put a TLS proxy in front)");
  if (!iequals_prefix(text, "http://"))
    return bad("must start with http://");
  auto rest = text.substr(7);
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.empty())
    return bad("no host");
  if (authority.find('@') != std::string_view::npos)
    return bad("user information in the URL is not supported (send credentials in headers)");
  if (path.find_first_of("?# \t\r\n") != std::string_view::npos)
    return bad("the path may not contain a query, a fragment or white space");
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return bad("the path must be printable ASCII");
  std::string_view host, port;
  if (auto why = split_authority(authority, host, port))
    return bad(*why);
  if (host.empty())
    return bad("no host");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_'))
      return bad("bad character in the host");
  url u;
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
      return bad("bad port");
    auto p = std::stoul(std::string(port));
    if (p == 0 || p > 65535)
      return bad("port out of range");
    u.port = static_cast<uint16_t>(p);
  }
  u.host = std::string(host);
  u.path = std::string(path);
  while (!u.path.empty() && u.path.back() == '/')
    u.path.pop_back();
  return u;
}

std::string percent_encode(std::string_view s, std::string_view keep) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || keep.find(c) != std::string_view::npos) {
      out.push_back(c);
    } else {
      auto u = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(hex[u >> 4]);
      out.push_back(hex[u & 0xf]);
    }
  }
  return out;
}

} // namespace factum::http::client
