// factum/storage/entity_key.hpp: the (tenant, type, id) triple that names an entity, its
// validation, and the file path derived from it. Plain value type; any thread.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "factum/error/status.hpp"

namespace factum {

/// Names one entity. Each part is 1..128 characters of [A-Za-z0-9._:-], not starting with '.'.
struct entity_key {
  std::string tenant;
  std::string type;
  std::string id;

  /// Validates and builds a key; INVALID_ARGUMENT names the offending part.
  static result<entity_key> make(std::string_view tenant, std::string_view type,
                                 std::string_view id);

  /// Parses "tenant/type/id" (the inspection tool's syntax).
  static result<entity_key> parse(std::string_view text);

  /// "tenant/type/id".
  std::string to_string() const;

  /// SHA-256 (hex) over the three parts, NUL-separated: the entity's file name stem.
  std::string digest() const;

  /// The entity's database file: DATA/entities/<digest[0..2]>/<digest>.db. Never derived from
  /// the key's characters, so no key can reach a path outside the data directory.
  std::filesystem::path file_path(const std::filesystem::path& data_dir) const;

  friend bool operator==(const entity_key&, const entity_key&) = default;
};

/// The cluster shard of an entity whose digest (entity_key::digest()) is `digest_hex`: its
/// first 16 hex digits as a uint64, modulo `shards` (0 when `shards` is 0). Cluster mode places
/// entities by it (factum/cluster/shard_map.hpp); `factum inspect entities --shards` shows it.
uint32_t shard_of_digest(std::string_view digest_hex, uint32_t shards);

/// Checks one key part; ok or INVALID_ARGUMENT with a message naming `what`.
status validate_key_part(std::string_view part, std::string_view what);

} // namespace factum
