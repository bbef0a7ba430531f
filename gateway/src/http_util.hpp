// http/http_util.hpp: the gateway's pure helpers (percent-decoding, query splitting, the
// depth-limited JSON check, header value checks, constant-time comparison). No Beast, no
// state; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "factum/storage/utf8.hpp"

namespace factum::http {

/// Decodes %XX escapes (and '+' as a space when `plus_is_space`); nullopt on a malformed
/// escape.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space = false);

/// Splits a path into its '/'-separated segments (still encoded); "/a/b" -> {"a", "b"}. An
/// empty segment (e.g. "//" or a trailing '/') is kept as "".
std::vector<std::string_view> split_path(std::string_view path);

/// One decoded query parameter.
struct query_param {
  std::string name;
  std::string value;
};

/// Splits and decodes "a=1&b=2"; nullopt on a malformed escape or on a decoded name or value
/// that is not valid UTF-8 (it could never match stored text, and JSON cannot carry it). "a"
/// alone has an empty value.
std::optional<std::vector<query_param>> split_query(std::string_view query);

/// Whether `s` is well-formed UTF-8 (the store's check: factum/storage/utf8.hpp).
using factum::valid_utf8;

/// Parses a non-negative decimal integer that fits int64 (digits only, no sign, no blanks).
std::optional<int64_t> parse_non_negative(std::string_view s);

/// Outcome of check_json.
enum class json_verdict { ok, invalid, too_deep };

struct json_check {
  json_verdict verdict = json_verdict::ok;
  /// Why the text was refused (empty when ok).
  std::string message;
};

/// Validates JSON text (syntax and UTF-8) with nlohmann's SAX parser and a depth counter, so
/// no DOM is built and arbitrarily deep input costs no stack: deeper than `max_depth` nested
/// arrays/objects is too_deep. A NUL byte anywhere is invalid (nlohmann would stop there).
json_check check_json(std::string_view text, int max_depth);

/// Whether `key` is a valid Idempotency-Key: 1..255 printable ASCII characters (0x20..0x7e).
bool valid_idempotency_key(std::string_view key);

/// The trace id a request carries: the trace-id of a valid W3C `traceparent`, else an
/// `X-Trace-Id` of 1..128 characters of [A-Za-z0-9._:-]; empty when neither is usable.
std::string incoming_trace_id(std::string_view traceparent, std::string_view x_trace_id);

/// Whether a Content-Type names application/json (any case; parameters allowed, but a charset
/// must be utf-8).
bool is_json_content_type(std::string_view content_type);

/// Compares two strings in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

/// ASCII case-insensitive equality (header names, media types, tokens).
bool iequals(std::string_view a, std::string_view b);

/// `s` cut to at most `n` bytes (for log lines).
std::string_view clip(std::string_view s, size_t n);

} // namespace factum::http
