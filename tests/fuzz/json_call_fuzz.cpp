// tests/fuzz/json_call_fuzz.cpp: a JSON body -> POST /v1/entities/{ledger|orders}/j1/{method}
// through gateway::handle over the stub runtime. The first byte picks the harness (depth
// limit 64 or 4), the method and whether an Idempotency-Key is sent; the rest is the body.
// Properties: check_json's verdict agrees with an independent oracle (nlohmann::json::accept
// plus a bracket-depth scan), a body reaches runtime::call byte for byte only when it is valid
// JSON within the depth limit, refusals are 400 INVALID_JSON / JSON_TOO_DEEP, and the request
// fingerprint is SHA-256("POST\n" path "\n" body). Single-threaded.
#include "gateway_harness.hpp"

namespace {

/// The deepest nesting of arrays/objects in `text`, counting brackets outside strings. Exact
/// for valid JSON; iterative, so deep input costs no stack.
int bracket_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}')
      --depth;
  }
  return max_depth;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace factum;
  static fuzz::gateway_harness deep(64);
  static fuzz::gateway_harness shallow(fuzz::small_depth);
  if (size == 0)
    return 0;
  uint8_t sel = data[0];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto& h = (sel & 1) ? shallow : deep;
  int limit = (sel & 1) ? fuzz::small_depth : 64;
  static constexpr const char* targets[] = {"ledger/j1/append", "orders/j1/place", "orders/j1/peek",
                                            "ledger/j1/query"};
  std::string path = std::string("/v1/entities/") + targets[(sel >> 1) & 3];
  http::http_request req;
  req.verb = "POST";
  req.target = path;
  req.has_api_key = true;
  req.api_key = std::string(fuzz::api_key);
  req.has_content_type = true;
  req.content_type = (sel & 0x20) ? "Application/JSON; charset=\"UTF-8\"" : "application/json";
  bool with_key = (sel & 0x10) != 0;
  if (with_key) {
    req.idempotency_key_count = 1;
    req.idempotency_key = "k-" + std::to_string(sel);
  }
  req.body = body;
  auto o = h.run(req);

  // The oracle: valid JSON per nlohmann's DOM parser (and no NUL), nesting per a bracket scan.
  // nlohmann stops at a NUL byte as if the input ended there; a raw NUL is never valid JSON.
  bool valid = body.find('\0') == std::string::npos && nlohmann::json::accept(body);
  int depth = valid ? bracket_depth(body) : 0;
  auto verdict = http::check_json(body, limit);
  if (!body.empty()) {
    if (valid && depth <= limit)
      FUZZ_CHECK(verdict.verdict == http::json_verdict::ok, verdict.message);
    if (!valid)
      FUZZ_CHECK(verdict.verdict != http::json_verdict::ok, "invalid JSON accepted");
    if (valid && depth > limit)
      FUZZ_CHECK(verdict.verdict == http::json_verdict::too_deep, verdict.message);
  }

  if (o.call) {
    FUZZ_CHECK(body.empty() || (valid && depth <= limit), body);
    FUZZ_CHECK(o.call->args == (body.empty() ? std::string("{}") : body), o.call->args);
    if (with_key) {
      std::string fp = "POST\n" + path + "\n" + o.call->args;
      FUZZ_CHECK(o.call->opts.fingerprint == sha256_hex(fp), o.call->opts.fingerprint);
    }
  } else {
    auto code = nlohmann::json::parse(o.response.body).value("code", "");
    if (!body.empty() && !valid) // a too-deep prefix is refused before the syntax error
      FUZZ_CHECK(
        o.response.status == 400 &&
          (code == "INVALID_JSON" || (code == "JSON_TOO_DEEP" && bracket_depth(body) > limit)),
        o.response.body);
    else if (!body.empty() && depth > limit)
      FUZZ_CHECK(o.response.status == 400 && code == "JSON_TOO_DEEP", o.response.body);
    else
      FUZZ_CHECK(code == "IDEMPOTENCY_KEY_REQUIRED" && !with_key, o.response.body);
  }
  return 0;
}
