// tests/fuzz/entity_key_fuzz.cpp: entity key validation and the key -> file path rule
// (storage/include/factum/storage/entity_key.hpp) on arbitrary bytes. Properties: parse()
// accepts exactly "a/b/c" with three parts that the key rule (1..128 of [A-Za-z0-9._:-], not
// starting with '.'; docs/http-api.md, "Routes") accepts, checked against an independent
// oracle; to_string() and parse() round-trip; the file path is always
// DATA/entities/<2 hex>/<64 hex>.db, whatever the key; distinct keys get distinct digests.
// Single-threaded.
#include <cstdint>
#include <string>
#include <string_view>

#include "factum/storage/entity_key.hpp"
#include "fuzz_check.hpp"

namespace {

/// The key rule, written independently of validate_key_part.
bool oracle_part(std::string_view s) {
  if (s.empty() || s.size() > 128 || s[0] == '.')
    return false;
  static constexpr std::string_view alphabet =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-";
  return s.find_first_not_of(alphabet) == std::string_view::npos;
}

bool is_lower_hex(std::string_view s) {
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace factum;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  // Each part alone.
  auto whole = validate_key_part(text, "id");
  FUZZ_CHECK(whole.is_ok() == oracle_part(text), std::string(text));
  if (!whole)
    FUZZ_CHECK(whole.code() == errc::invalid_argument && !whole.message().empty(),
               whole.to_string());

  // "tenant/type/id".
  auto parsed = entity_key::parse(text);
  size_t a = text.find('/');
  size_t b = a == std::string_view::npos ? a : text.find('/', a + 1);
  bool two_slashes = b != std::string_view::npos && text.find('/', b + 1) == std::string_view::npos;
  bool expect = two_slashes && oracle_part(text.substr(0, a)) &&
                oracle_part(text.substr(a + 1, b - a - 1)) && oracle_part(text.substr(b + 1));
  FUZZ_CHECK(parsed.is_ok() == expect, std::string(text));
  if (!parsed) {
    FUZZ_CHECK(parsed.error().code() == errc::invalid_argument, parsed.error().to_string());
    return 0;
  }
  const auto& key = *parsed;
  FUZZ_CHECK(key.to_string() == text, key.to_string());
  auto again = entity_key::parse(key.to_string());
  FUZZ_CHECK(again.is_ok() && *again == key, key.to_string());
  auto made = entity_key::make(key.tenant, key.type, key.id);
  FUZZ_CHECK(made.is_ok() && *made == key, key.to_string());

  // The path never depends on the key's characters.
  auto digest = key.digest();
  FUZZ_CHECK(digest.size() == 64 && is_lower_hex(digest), digest);
  FUZZ_CHECK(key.digest() == digest, "digest not stable");
  std::filesystem::path data_dir = "/data/dir";
  auto p = key.file_path(data_dir);
  auto expect_path = data_dir / "entities" / digest.substr(0, 2) / (digest + ".db");
  FUZZ_CHECK(p == expect_path, p.string());
  FUZZ_CHECK(p.lexically_normal() == p, p.string());
  auto rel = p.lexically_relative(data_dir);
  FUZZ_CHECK(!rel.empty() && *rel.begin() == "entities", rel.string());

  // Moving a character across a part boundary gives another key and another digest.
  if (key.type.size() > 1) {
    entity_key shifted{key.tenant + key.type.substr(0, 1), key.type.substr(1), key.id};
    FUZZ_CHECK(shifted.digest() != digest, shifted.to_string());
  }
  if (key.id.size() > 1) {
    entity_key shifted{key.tenant, key.type + key.id.substr(0, 1), key.id.substr(1)};
    FUZZ_CHECK(shifted.digest() != digest, shifted.to_string());
  }
  return 0;
}
