// entity_key.cpp: entity key validation and the key -> file path rule. Any thread.
#include "factum/storage/entity_key.hpp"

#include "factum/storage/sha256.hpp"

namespace factum {

namespace {

bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

} // namespace

status validate_key_part(std::string_view part, std::string_view what) {
  auto bad = [&](std::string why) {
    return status{errc::invalid_argument, std::string(what) + " " + why};
  };
  if (part.empty())
    return bad("is empty");
  if (part.size() > 128)
    return bad("is longer than 128 characters");
  if (part.front() == '.')
    return bad("starts with '.'");
  for (char c : part)
    if (!key_char(c))
      return bad("has a character outside [A-Za-z0-9._:-]");
  return status::ok();
}

result<entity_key> entity_key::make(std::string_view tenant, std::string_view type,
                                    std::string_view id) {
  if (auto st = validate_key_part(tenant, "tenant"); !st)
    return st;
  if (auto st = validate_key_part(type, "entity type"); !st)
    return st;
  if (auto st = validate_key_part(id, "entity id"); !st)
    return st;
  return entity_key{std::string(tenant), std::string(type), std::string(id)};
}

result<entity_key> entity_key::parse(std::string_view text) {
  auto a = text.find('/');
  auto b = a == std::string_view::npos ? a : text.find('/', a + 1);
  if (a == std::string_view::npos || b == std::string_view::npos ||
      text.find('/', b + 1) != std::string_view::npos)
    return status{errc::invalid_argument,
                  "an entity is named tenant/type/id (exactly two '/'), got '" +
                    std::string(text.substr(0, 200)) + "'"};
  return make(text.substr(0, a), text.substr(a + 1, b - a - 1), text.substr(b + 1));
}

std::string entity_key::to_string() const {
  return tenant + "/" + type + "/" + id;
}

std::string entity_key::digest() const {
  std::string buf;
  buf.reserve(tenant.size() + type.size() + id.size() + 2);
  buf.append(tenant).push_back('\0');
  buf.append(type).push_back('\0');
  buf.append(id);
  return sha256_hex(buf);
}

uint32_t shard_of_digest(std::string_view digest_hex, uint32_t shards) {
  if (shards == 0 || digest_hex.size() < 16)
    return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    char c = digest_hex[i];
    v = v << 4 | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return static_cast<uint32_t>(v % shards);
}

std::filesystem::path entity_key::file_path(const std::filesystem::path& data_dir) const {
  auto d = digest();
  return data_dir / "entities" / d.substr(0, 2) / (d + ".db");
}

} // namespace factum
