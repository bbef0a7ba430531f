// commit_record.hpp: one message of a shard's replicated log that carries an entity's commit
// (docs/storage-format.md, "The replicated log"): the entity, the owner's epoch, the entity's
// commit number, the changeset, and with an entity's first commit the genesis its replica is
// built from. Versioned; decode() refuses what it cannot read whole. Plain functions, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::replication {

/// The version encode() writes and the only one decode() reads.
inline constexpr int commit_record_version = 1;

struct commit_record {
  entity_key key;
  int64_t epoch = 0;                      ///< the owner's epoch when it committed
  captured_commit commit;                 ///< number and changeset
  std::optional<replica_genesis> genesis; ///< with the entity's first commit in the log
};

/// The record's bytes.
std::string encode(const commit_record& r);
/// The record in `bytes`: CORRUPTION when they are not a whole record of this version (a
/// truncated or foreign message, or a newer version: NEWER_SCHEMA).
result<commit_record> decode(std::string_view bytes);

/// The token that names an entity in its shard's log subjects: 32 lowercase hex digits of
/// SHA-256(tenant NUL type NUL id).
std::string entity_token(const entity_key& key);

} // namespace factum::replication
