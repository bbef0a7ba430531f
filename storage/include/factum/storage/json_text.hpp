// factum/storage/json_text.hpp: compact JSON text of a nlohmann::json value, byte for byte what
// nlohmann::json::dump() writes, without its per-character cost. Pure function; any thread.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace factum {

/// Appends `s` as a quoted JSON string escaped as dump() escapes it: \b \f \n \r \t \" \\ as
/// two characters, other bytes below 0x20 as \u00xx (lowercase hex), every other byte as it is.
/// For text already known to be valid UTF-8 (or ASCII): nothing is validated here.
void append_json_string(std::string& out, std::string_view s);

/// Appends the compact JSON text of `j` to `out`: exactly `j.dump()` (no whitespace, object keys
/// in the object's order, which is ascending for nlohmann::json, strings escaped as dump() does).
/// Strings of ASCII bytes, integers, booleans, null, objects and arrays are written here;
/// a string or key with a byte >= 0x80, a floating-point number or a binary value is written by
/// nlohmann's own serializer, so the text is the same in every case. Throws what dump() throws
/// (nlohmann::json::type_error 316 for a string that is not valid UTF-8).
void append_json_text(std::string& out, const nlohmann::json& j);

/// The compact JSON text of `j`: `j.dump()`, faster (see append_json_text).
std::string json_text(const nlohmann::json& j);

} // namespace factum
