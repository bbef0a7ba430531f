// commit_record.hpp: the messages of a shard's replicated log that carry an entity's state
// (docs/storage-format.md, "The replicated log"): a commit record (the entity, the owner's epoch,
// the entity's commit number, the changeset, and with an entity's first commit the genesis its
// replica is built from), an image head (the entity's whole file at a commit, in parts named by
// their sequences) and an image part. Versioned; decode() refuses what it cannot read whole.
// Plain functions, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/entity_store.hpp"

namespace factum::replication {

/// The version encode() writes; decode() reads it and every older one.
inline constexpr int commit_record_version = 2;

/// Where an image's bytes are: the parts the head names, in order.
struct image_ref {
  uint64_t size = 0;           ///< the image's bytes in all
  std::string sha256;          ///< SHA-256 of those bytes, 32 raw bytes
  std::vector<uint64_t> parts; ///< the stream sequences of its parts, in order
};

struct commit_record {
  entity_key key;
  int64_t epoch = 0;                      ///< the owner's epoch when it committed
  captured_commit commit;                 ///< number and changeset (no changeset with an image)
  std::optional<replica_genesis> genesis; ///< with the entity's first commit in the log
  /// An image head (version 2): the entity's whole file at commit.number, in the parts named
  /// here; the log holds none of the entity's records before it.
  std::optional<image_ref> image;
};

/// One part of an image: the bytes at `index` (0, 1, ...) of the image of commit `number`.
struct image_part {
  int64_t number = 0;
  uint32_t index = 0;
  std::string bytes;
};

/// The record's bytes.
std::string encode(const commit_record& r);
/// The record in `bytes`: CORRUPTION when they are not a whole record of this version (a
/// truncated or foreign message, or a newer version: NEWER_SCHEMA).
result<commit_record> decode(std::string_view bytes);

/// An image part's bytes, and the part in `bytes` (CORRUPTION when they are not one).
std::string encode(const image_part& p);
result<image_part> decode_part(std::string_view bytes);

/// SHA-256 of an image's bytes, 32 raw bytes (image_ref::sha256).
std::string image_digest(std::string_view bytes);

/// The token that names an entity in its shard's log subjects: 32 lowercase hex digits of
/// SHA-256(tenant NUL type NUL id).
std::string entity_token(const entity_key& key);

} // namespace factum::replication
