// tests/fuzz/fact_canonical_fuzz.cpp: the canonical serialization of facts
// (storage/include/factum/storage/fact.hpp) on facts built from arbitrary bytes. Properties for
// every fact the store can hold (text fields UTF-8, `data` the compact dump of a JSON object):
// canonical_serialization equals nlohmann's dump of the same fields (keys sorted, no blanks);
// to_json_text parses back into the same fact (parse(serialize(x)) == x); factum's JSON writer
// (json_text) gives dump()'s bytes, or its exception, for any value; compute_hash is
// SHA-256 of the canonical form, stable, and changes when any field does. A text field that is
// not UTF-8 is outside the store's domain (entity_store::append refuses it) and is skipped.
// Single-threaded.
#include <fuzzer/FuzzedDataProvider.h>

#include "factum/storage/fact.hpp"
#include "factum/storage/json_text.hpp"
#include "factum/storage/sha256.hpp"
#include "factum/storage/utf8.hpp"
#include "fuzz_check.hpp"

namespace {

using factum::fact;
using nlohmann::json;

/// The fields of a fact in declaration order, for generic loops.
std::vector<std::pair<const char*, std::string fact::*>> text_fields() {
  return {{"fact_id", &fact::fact_id},         {"type", &fact::type},
          {"subtype", &fact::subtype},         {"tenant_id", &fact::tenant_id},
          {"entity_type", &fact::entity_type}, {"entity_id", &fact::entity_id},
          {"tool_id", &fact::tool_id},         {"config_id", &fact::config_id},
          {"trace_id", &fact::trace_id},       {"idempotency_key", &fact::idempotency_key},
          {"amount", &fact::amount},           {"currency", &fact::currency},
          {"from_entity", &fact::from_entity}, {"to_entity", &fact::to_entity},
          {"prev_hash", &fact::prev_hash},     {"hash", &fact::hash}};
}

/// The JSON view built independently of fact.cpp: present fields only, `data` as a value.
json expected_view(const fact& f, bool with_hash) {
  json j = json::object();
  for (auto& [name, member] : text_fields()) {
    if (std::string_view(name) == "hash" && !with_hash)
      continue;
    if (!(f.*member).empty())
      j[name] = f.*member;
  }
  if (f.config_version != 0)
    j["config_version"] = f.config_version;
  j["seq"] = f.seq;
  j["timestamp"] = f.timestamp_ms;
  j["data"] = json::parse(f.data);
  return j;
}

/// The fact a JSON view describes (absent text = "", absent config_version = 0).
fact from_view(const json& j) {
  fact f;
  for (auto& [name, member] : text_fields())
    f.*member = j.value(name, "");
  f.config_version = j.value("config_version", int64_t{0});
  f.seq = j.at("seq").get<int64_t>();
  f.timestamp_ms = j.at("timestamp").get<int64_t>();
  f.data = j.at("data").dump();
  return f;
}

bool same(const fact& a, const fact& b) {
  for (auto& [name, member] : text_fields())
    if (a.*member != b.*member)
      return false;
  return a.seq == b.seq && a.timestamp_ms == b.timestamp_ms &&
         a.config_version == b.config_version && a.data == b.data;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  using namespace factum;
  FuzzedDataProvider in(bytes, size);
  fact f;
  f.seq = in.ConsumeIntegral<int64_t>();
  f.timestamp_ms = in.ConsumeIntegral<int64_t>();
  f.config_version = in.ConsumeBool() ? 0 : in.ConsumeIntegral<int64_t>();
  for (auto& [name, member] : text_fields()) {
    if (in.ConsumeBool())
      f.*member = in.ConsumeRandomLengthString(80);
    if (!valid_utf8(f.*member))
      return 0; // outside the store's domain
  }
  auto rest = in.ConsumeRemainingBytesAsString();
  auto data = json::parse(rest, nullptr, false);
  // factum's JSON writer (json_text.hpp) gives dump()'s bytes for any value, and for a string
  // of any bytes the same text or the same exception (invalid UTF-8).
  if (!data.is_discarded())
    FUZZ_CHECK(json_text(data) == data.dump(), data.dump());
  {
    json raw = rest;
    auto text_or_error = [](auto write) -> std::string {
      try {
        return write();
      } catch (const json::type_error& e) {
        return "throws " + std::to_string(e.id);
      }
    };
    auto want = text_or_error([&] { return raw.dump(); });
    auto got = text_or_error([&] { return json_text(raw); });
    FUZZ_CHECK(got == want, got + "\n  vs " + want);
  }
  if (data.is_discarded() || !data.is_object())
    data = json::object({{"n", f.seq}});
  f.data = json_text(data); // what entity_store::append stores

  // canonical form == nlohmann's sorted compact dump of the same fields.
  auto canonical = canonical_serialization(f);
  auto expected = expected_view(f, false).dump();
  FUZZ_CHECK(canonical == expected, canonical + "\n  vs " + expected);
  auto text = to_json_text(f);
  FUZZ_CHECK(text == expected_view(f, true).dump(), text);

  // parse(serialize(x)) == x, for the canonical and the full view.
  auto back = from_view(json::parse(text));
  FUZZ_CHECK(same(back, f), text);
  FUZZ_CHECK(to_json(f) == json::parse(text), text);
  FUZZ_CHECK(to_json_text(back) == text, text);

  // The hash: SHA-256 of the canonical form, stable, independent of `hash` itself.
  auto h = compute_hash(f);
  FUZZ_CHECK(h == sha256_hex(canonical) && h.size() == 64, h);
  FUZZ_CHECK(compute_hash(back) == h, "hash changed across a round trip");
  fact rehashed = f;
  rehashed.hash = h;
  FUZZ_CHECK(compute_hash(rehashed) == h, "the hash covers the hash field");
  fact bumped = f;
  bumped.seq = f.seq ^ 1;
  FUZZ_CHECK(compute_hash(bumped) != h, "seq not covered by the hash");
  bumped = f;
  bumped.prev_hash += "0";
  FUZZ_CHECK(compute_hash(bumped) != h, "prev_hash not covered by the hash");
  return 0;
}
