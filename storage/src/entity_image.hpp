// entity_image.hpp (private to storage/): the bytes of a new entity file at the current schema
// version, copied from one in-memory template database per process instead of being built with
// SQL per file (docs/storage-format.md section 1, "How a new file is made"). Any thread; the
// template is behind one mutex, held for an UPSERT of the meta rows and a copy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "factum/storage/entity_key.hpp"
#include "factum/storage/status.hpp"

namespace factum::detail {

/// The complete database image of a new entity file at `current_schema_version`: every table,
/// index and trigger of the schema, the meta rows (format, tenant, type, id, created_at,
/// fact_id_prefix) and user_version, with the header's read and write format bytes (offsets 18
/// and 19) set to 2, so that SQLite opens the file in WAL mode. Written to a file as is, it is
/// the same database that building the schema in that file would give (a test compares them).
/// Fails only if the template cannot be built or updated (out of memory).
result<std::string> fresh_entity_image(const entity_key& key, int64_t created_at,
                                       std::string_view fact_id_prefix);

} // namespace factum::detail
