// factum/storage/sha256.hpp: SHA-256 and HMAC-SHA256 as lowercase hex (OpenSSL). Any thread.
#pragma once

#include <string>
#include <string_view>

namespace factum {

/// Lowercase hex SHA-256 of `data` (64 characters).
std::string sha256_hex(std::string_view data);

/// Lowercase hex HMAC-SHA256 (RFC 2104) of `data` under `key` (64 characters).
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

/// The prev_hash of the first fact of every entity: 64 zeros.
inline constexpr std::string_view genesis_hash =
  "0000000000000000000000000000000000000000000000000000000000000000";

} // namespace factum
