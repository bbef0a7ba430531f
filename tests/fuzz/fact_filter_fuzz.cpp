// tests/fuzz/fact_filter_fuzz.cpp: the fact filter parsers on arbitrary bytes: the HTTP query
// string of GET .../facts and GET .../dead-letters (gateway::handle over the stub runtime), the
// store's fact_filter built from the resulting arguments as the entity actor builds it, and the
// inspection tool's time argument parser (parse_time_arg). Properties: a query is either refused
// with 400 INVALID_QUERY or becomes arguments with only known names, each given once, strings
// of 1..255 bytes, integers that are non-negative int64, limit 1..10000, order asc|desc, equal
// to the decoded query; fact_filter::validate never crashes and refuses only with
// INVALID_ARGUMENT; parse_time_arg has no UB and reads epoch milliseconds exactly.
// Single-threaded.
#include <set>

#include "factum/storage/fact.hpp"
#include "gateway_harness.hpp"
#include "output.hpp"

namespace {

using nlohmann::json;

void check_listing(factum::fuzz::gateway_harness& h, std::string_view route, std::string_view query,
                   const std::set<std::string>& strings, const std::set<std::string>& integers,
                   bool has_order) {
  using namespace factum;
  http::http_request req;
  req.verb = "GET";
  req.target = "/v1/entities/ledger/f1/" + std::string(route) + "?" + std::string(query);
  req.has_api_key = true;
  req.api_key = std::string(fuzz::api_key);
  auto o = h.run(req);
  auto params = http::split_query(query);
  if (!o.call) {
    auto p = json::parse(o.response.body);
    FUZZ_CHECK(o.response.status == 400 && p.value("code", "") == "INVALID_QUERY", o.response.body);
    return;
  }
  FUZZ_CHECK(params.has_value(), "a malformed query was accepted");
  auto args = json::parse(o.call->args);
  FUZZ_CHECK(args.is_object(), o.call->args);
  std::set<std::string> seen;
  for (auto& p : *params) {
    FUZZ_CHECK(seen.insert(p.name).second, "duplicate parameter accepted: " + p.name);
    FUZZ_CHECK(args.contains(p.name), p.name);
  }
  FUZZ_CHECK(seen.size() == args.size(), o.call->args);
  for (auto& [name, v] : args.items()) {
    std::string given;
    for (auto& p : *params)
      if (p.name == name)
        given = p.value;
    if (strings.count(name)) {
      FUZZ_CHECK(v.is_string(), name);
      auto s = v.get<std::string>();
      FUZZ_CHECK(!s.empty() && s.size() <= 255 && s == given, name);
    } else if (integers.count(name) || name == "limit") {
      FUZZ_CHECK(v.is_number_integer(), name);
      auto n = v.get<int64_t>();
      FUZZ_CHECK(n >= 0 && std::to_string(n) ==
                             given.substr(given.find_first_not_of('0') == std::string::npos
                                            ? given.size() - 1
                                            : given.find_first_not_of('0')),
                 name + "=" + given);
      if (name == "limit")
        FUZZ_CHECK(n >= 1 && n <= 10000, given);
    } else {
      FUZZ_CHECK(has_order && name == "order", name);
      FUZZ_CHECK(v == "asc" || v == "desc", given);
    }
  }
  if (route != "facts")
    return;
  // The store's filter, built as the entity actor builds it (fact_filter::from_json).
  auto f = fact_filter::from_json(args);
  auto st = f ? status::ok() : f.error();
  auto type = args.value("type", ""), subtype = args.value("subtype", "");
  bool tokens_ok = (type.empty() || validate_fact_token(type, "type")) &&
                   (subtype.empty() || validate_fact_token(subtype, "subtype"));
  FUZZ_CHECK(st.is_ok() == tokens_ok, st.to_string());
  if (!st)
    FUZZ_CHECK(st.code() == errc::invalid_argument, st.to_string());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace factum;
  static fuzz::gateway_harness h;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  check_listing(h, "facts", text, {"type", "subtype", "trace_id", "tool_id", "idempotency_key"},
                {"since", "until", "after_seq", "before_seq"}, true);
  check_listing(h, "dead-letters", text, {"status"}, {}, false);

  // factum inspect --since/--until.
  const int64_t now = 1'705'500'000'000;
  for (bool local : {false, true}) {
    auto t = tools::parse_time_arg(text, now, local);
    if (!text.empty() && text.size() <= 18 &&
        text.find_first_not_of("0123456789") == std::string_view::npos) {
      FUZZ_CHECK(t.is_ok() && std::to_string(*t) ==
                                std::string(text).erase(
                                  0, std::min(text.find_first_not_of('0'), text.size() - 1)),
                 std::string(text));
    }
    if (!t)
      FUZZ_CHECK(t.error().code() == errc::invalid_argument, t.error().to_string());
  }
  return 0;
}
