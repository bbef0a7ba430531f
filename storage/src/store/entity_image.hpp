// entity_image.hpp (private to storage/): the bytes of a new entity file at the current schema
// version, copied from an in-memory template database per page size per process instead of
// being built with SQL per file (docs/storage-format.md section 1, "How a new file is made").
// Any thread; each template is behind its own mutex, held for an UPSERT of the meta rows and a
// copy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "factum/error/status.hpp"
#include "factum/storage/entity_key.hpp"

namespace factum::detail {

/// The complete database image of a new entity file at `current_schema_version`, with pages of
/// `page_size` bytes (factum::valid_page_size; another fails with invalid_argument): every table,
/// index and trigger of the schema, the meta rows (format, tenant, type, id, created_at,
/// fact_id_prefix) and user_version, with the header's read and write format bytes (offsets 18
/// and 19) set to 2, so that SQLite opens the file in WAL mode. Written to a file as is, it is
/// the same database that building the schema in that file would give (a test compares them).
/// Fails only if the template cannot be built or updated (out of memory).
result<std::string> fresh_entity_image(const entity_key& key, int64_t created_at,
                                       std::string_view fact_id_prefix, int page_size);

/// The image of an *unclaimed* entity file (a spare, spare_pool.hpp): the same schema and
/// user_version, with the placeholder meta rows tenant = type = id = fact_id_prefix = '' and
/// created_at = '0'. The same bytes in every process of one build (taken from the template
/// before any entity's meta was written into it), so that spares left by an earlier process can
/// be checked byte for byte. The first open of such a file through entity_store::open claims it
/// for the opened key (docs/storage-format.md section 1). Pages of `page_size` bytes.
result<std::string> unclaimed_entity_image(int page_size);

} // namespace factum::detail
