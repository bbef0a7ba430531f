// sha256.cpp: SHA-256 through OpenSSL's EVP interface. Any thread.
//
// The digest is fetched once (OpenSSL 3 would otherwise look the algorithm up on every one-shot
// call) and each thread reuses one EVP_MD_CTX.
#include "factum/storage/sha256.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <memory>

namespace factum {

namespace {

const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return m ? m : EVP_sha256();
  }();
  return md;
}

struct ctx_deleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

/// 32 bytes (a SHA-256 digest or MAC) as 64 lowercase hex digits.
std::string hex32(const unsigned char* bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 0xf];
  }
  return out;
}

} // namespace

std::string sha256_hex(std::string_view data) {
  thread_local std::unique_ptr<EVP_MD_CTX, ctx_deleter> ctx(EVP_MD_CTX_new());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), sha256_md(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1 || len != 32)
    std::abort(); // no SHA-256 means no hash chain: refuse to write anything
  return hex32(digest);
}

sha256_stream::sha256_stream() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), sha256_md(), nullptr) != 1)
    std::abort(); // as sha256_hex
}

sha256_stream::~sha256_stream() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void sha256_stream::update(std::string_view part) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), part.data(), part.size()) != 1)
    std::abort();
}

std::string sha256_stream::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len) != 1 || len != 32)
    std::abort();
  return hex32(digest);
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(sha256_md(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len) ||
      len != 32)
    std::abort(); // as sha256_hex: without it nothing can be authenticated
  return hex32(mac);
}

} // namespace factum
