// factum/storage/wal_copy.hpp: what a copier of entity files (factum backup, factum inspect)
// needs beside entity_store::copy_files and refresh_copy (store_copy.cpp): where a -wal file's
// committed frames end, and the bytes of a file at an offset. Stateless; any thread, on files
// other threads and processes may be writing.
//
// copy_files replaces an existing `to` and `to`-wal (unlinks them, then makes new files); it
// never writes into them, so another name of the old copy (a hard link) keeps its bytes.
// refresh_copy's whole copy does the same; its incremental path writes `to`-wal in place, so a
// copy's -wal that refresh_copy brings up to date must have one name only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace factum {

/// Where the last whole commit of the -wal file `wal`'s current generation ends, as SQLite's
/// recovery decides (frames with the header's salts and valid checksums): 0 without a valid
/// header (or no file), 32 before the first commit. refresh_copy copies a copy's -wal from
/// there on.
int64_t wal_commit_end(const std::filesystem::path& wal);

/// Up to `n` bytes of the file `path` from `offset`: fewer at its end, none when it is missing
/// or cannot be read. A -wal's header (its first 32 bytes) and the frame header where a copy's
/// last commit ended tell a copier whether the entity committed since the copy.
std::string read_at(const std::filesystem::path& path, size_t n, int64_t offset);

} // namespace factum
