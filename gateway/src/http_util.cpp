// http/http_util.cpp: the gateway's pure helpers (see http_util.hpp). Stateless; any thread.
#include "http_util.hpp"

#include <limits>

#include <nlohmann/json.hpp>

namespace factum::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

bool all_zero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

/// A SAX consumer that only counts nesting: validation without a DOM.
class depth_counter final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit depth_counter(int max_depth) : max_depth_(max_depth) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    result.verdict = json_verdict::invalid;
    result.message = e.what();
    return false;
  }

  json_check result;

 private:
  bool enter() {
    if (++depth_ > max_depth_) {
      result.verdict = json_verdict::too_deep;
      result.message = "JSON nested deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    return true;
  }
  bool leave() {
    --depth_;
    return true;
  }

  int max_depth_;
  int depth_ = 0;
};

} // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i]))
      return false;
  return true;
}

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size())
        return std::nullopt;
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0)
        return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/')
    path.remove_prefix(1);
  for (;;) {
    auto slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos)
      break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

std::optional<std::vector<query_param>> split_query(std::string_view query) {
  std::vector<query_param> out;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part.empty())
      continue;
    auto eq = part.find('=');
    auto name = percent_decode(part.substr(0, eq), true);
    auto value =
      percent_decode(eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1), true);
    if (!name || !value || !valid_utf8(*name) || !valid_utf8(*value))
      return std::nullopt;
    out.push_back({std::move(*name), std::move(*value)});
  }
  return out;
}

std::optional<int64_t> parse_non_negative(std::string_view s) {
  if (s.empty() || s.size() > 19)
    return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return static_cast<int64_t>(v);
}

json_check check_json(std::string_view text, int max_depth) {
  // nlohmann's lexer takes a NUL byte for the end of input, so "1\0<anything>" would pass as
  // the number 1 with the rest unchecked (found by json_call_fuzz). A raw NUL is never valid
  // JSON (RFC 8259: control characters only escaped, inside strings).
  if (text.find('\0') != std::string_view::npos)
    return {json_verdict::invalid, "JSON text must not contain a NUL byte"};
  depth_counter sax(max_depth);
  bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  if (!ok && sax.result.verdict == json_verdict::ok) {
    sax.result.verdict = json_verdict::invalid;
    sax.result.message = "malformed JSON";
  }
  return sax.result;
}

bool valid_idempotency_key(std::string_view key) {
  if (key.empty() || key.size() > 255)
    return false;
  for (unsigned char c : key)
    if (c < 0x20 || c > 0x7e)
      return false;
  return true;
}

std::string incoming_trace_id(std::string_view traceparent, std::string_view x_trace_id) {
  // W3C: version "-" trace-id(32 hex) "-" parent-id(16 hex) "-" flags(2 hex)
  auto tp = trim(traceparent);
  if (tp.size() >= 55 && tp[2] == '-' && tp[35] == '-' && tp[52] == '-') {
    auto version = tp.substr(0, 2), trace = tp.substr(3, 32), parent = tp.substr(36, 16),
         flags = tp.substr(53, 2);
    bool ok = is_lower_hex(version) && version != "ff" && is_lower_hex(trace) && !all_zero(trace) &&
              is_lower_hex(parent) && !all_zero(parent) && is_lower_hex(flags) &&
              (tp.size() == 55 || (version != "00" && tp[55] == '-'));
    if (ok)
      return std::string(trace);
  }
  auto x = trim(x_trace_id);
  if (x.empty() || x.size() > 128)
    return {};
  for (char c : x) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok)
      return {};
  }
  return std::string(x);
}

bool is_json_content_type(std::string_view content_type) {
  auto semi = content_type.find(';');
  if (!iequals(trim(content_type.substr(0, semi)), "application/json"))
    return false;
  while (semi != std::string_view::npos) {
    content_type.remove_prefix(semi + 1);
    semi = content_type.find(';');
    auto param = trim(content_type.substr(0, semi));
    auto eq = param.find('=');
    if (eq == std::string_view::npos)
      continue;
    if (!iequals(trim(param.substr(0, eq)), "charset"))
      continue;
    auto value = trim(param.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    if (!iequals(value, "utf-8") && !iequals(value, "utf8"))
      return false;
  }
  return true;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string_view clip(std::string_view s, size_t n) {
  return s.substr(0, std::min(n, s.size()));
}

} // namespace factum::http
