// factum/storage/sha256.hpp: SHA-256 and HMAC-SHA256 as lowercase hex (OpenSSL). Any thread.
#pragma once

#include <string>
#include <string_view>

namespace factum {

/// Lowercase hex SHA-256 of `data` (64 characters).
std::string sha256_hex(std::string_view data);

/// SHA-256 of data given in parts (a file read in blocks): update() each part, then hex() once.
/// One object per thread.
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;

  void update(std::string_view part);
  /// The digest of every part so far as 64 lowercase hex digits; the stream is spent after it.
  std::string hex();

 private:
  void* ctx_; ///< the EVP_MD_CTX (OpenSSL stays out of this header)
};

/// Lowercase hex HMAC-SHA256 (RFC 2104) of `data` under `key` (64 characters).
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

/// The prev_hash of the first fact of every entity: 64 zeros.
inline constexpr std::string_view genesis_hash =
  "0000000000000000000000000000000000000000000000000000000000000000";

} // namespace factum
