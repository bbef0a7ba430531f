// commit_record.cpp: the bytes of a commit record and an image part (commit_record.hpp). Layout,
// all integers little-endian:
//   "FCR" version(u8=2; 1 is read too) flags(u8: bit 0 = genesis present, bit 1 = image head,
//     version 2 only) epoch(i64) number(i64)
//   tenant, type, id: u16 length + bytes each
//   genesis (when flagged): page size (u32), u32 count, then per row u16 key length + key,
//     u32 value length + value
//   commit id: u16 length + bytes
//   then either the changeset: u32 length + bytes
//   or, for an image head: size (u64), SHA-256 (32 bytes), u32 count, then each part's stream
//     sequence (u64)
// and nothing after it. An image part:
//   "FCP" version(u8=1) number(i64) index(u32) then the part's bytes to the end.
// Any thread.
#include "factum/replication/commit_record.hpp"

#include "factum/storage/sha256.hpp"

namespace factum::replication {

namespace {

constexpr std::string_view magic = "FCR";

template <class T> void put_int(std::string& out, T v) {
  auto u = static_cast<uint64_t>(v);
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void put_bytes16(std::string& out, std::string_view s) {
  put_int<uint16_t>(out, static_cast<uint16_t>(s.size()));
  out.append(s);
}

void put_bytes32(std::string& out, std::string_view s) {
  put_int<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

/// Reads from the front of `in`; any short read fails the whole record.
struct reader {
  std::string_view in;
  bool ok = true;
  template <class T> T get_int() {
    if (in.size() < sizeof(T)) {
      ok = false;
      return T{};
    }
    uint64_t u = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      u |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
    in.remove_prefix(sizeof(T));
    return static_cast<T>(u);
  }
  std::string get_bytes(size_t n) {
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
  std::string bytes16() { return get_bytes(get_int<uint16_t>()); }
  std::string bytes32() { return get_bytes(get_int<uint32_t>()); }
};

} // namespace

std::string encode(const commit_record& r) {
  std::string out;
  out.reserve(64 + r.commit.changeset.size());
  out.append(magic);
  put_int<uint8_t>(out, commit_record_version);
  put_int<uint8_t>(out, (r.genesis ? 1 : 0) | (r.image ? 2 : 0));
  put_int<int64_t>(out, r.epoch);
  put_int<int64_t>(out, r.commit.number);
  put_bytes16(out, r.key.tenant);
  put_bytes16(out, r.key.type);
  put_bytes16(out, r.key.id);
  if (r.genesis) {
    put_int<uint32_t>(out, static_cast<uint32_t>(r.genesis->page_size));
    put_int<uint32_t>(out, static_cast<uint32_t>(r.genesis->meta.size()));
    for (auto& [k, v] : r.genesis->meta) {
      put_bytes16(out, k);
      put_bytes32(out, v);
    }
  }
  put_bytes16(out, r.commit.id);
  if (r.image) {
    put_int<uint64_t>(out, r.image->size);
    out.append(r.image->sha256);
    put_int<uint32_t>(out, static_cast<uint32_t>(r.image->parts.size()));
    for (auto seq : r.image->parts)
      put_int<uint64_t>(out, seq);
  } else {
    put_bytes32(out, r.commit.changeset);
  }
  return out;
}

result<commit_record> decode(std::string_view bytes) {
  if (bytes.substr(0, magic.size()) != magic)
    return status{errc::corruption, "not a commit record"};
  reader in{bytes.substr(magic.size())};
  auto version = in.get_int<uint8_t>();
  if (in.ok && version > commit_record_version)
    return status{errc::newer_schema, "a commit record of version " + std::to_string(version) +
                                        ", newer than this build reads (" +
                                        std::to_string(commit_record_version) + ")"};
  if (version < 1)
    return status{errc::corruption, "a commit record of unknown version"};
  commit_record r;
  auto flags = in.get_int<uint8_t>();
  r.epoch = in.get_int<int64_t>();
  r.commit.number = in.get_int<int64_t>();
  r.key.tenant = in.bytes16();
  r.key.type = in.bytes16();
  r.key.id = in.bytes16();
  if (flags & 1) {
    replica_genesis g;
    g.page_size = static_cast<int>(in.get_int<uint32_t>());
    auto n = in.get_int<uint32_t>();
    for (uint32_t i = 0; in.ok && i < n; ++i) {
      auto k = in.bytes16();
      auto v = in.bytes32();
      g.meta.emplace_back(std::move(k), std::move(v));
    }
    r.genesis = std::move(g);
  }
  r.commit.id = in.bytes16();
  if (flags & 2) {
    image_ref img;
    img.size = in.get_int<uint64_t>();
    img.sha256 = in.get_bytes(32);
    auto n = in.get_int<uint32_t>();
    for (uint32_t i = 0; in.ok && i < n; ++i)
      img.parts.push_back(in.get_int<uint64_t>());
    r.image = std::move(img);
  } else {
    r.commit.changeset = in.bytes32();
  }
  uint8_t known = version >= 2 ? 3 : 1;
  if (!in.ok || !in.in.empty() || (flags & ~known) != 0 || r.commit.number <= 0 || r.epoch < 0)
    return status{errc::corruption, "a commit record cut short or with bytes it should not have"};
  return r;
}

namespace {
constexpr std::string_view part_magic = "FCP";
constexpr int part_version = 1;
} // namespace

std::string encode(const image_part& p) {
  std::string out;
  out.reserve(16 + p.bytes.size());
  out.append(part_magic);
  put_int<uint8_t>(out, part_version);
  put_int<int64_t>(out, p.number);
  put_int<uint32_t>(out, p.index);
  out.append(p.bytes);
  return out;
}

result<image_part> decode_part(std::string_view bytes) {
  if (bytes.substr(0, part_magic.size()) != part_magic)
    return status{errc::corruption, "not an image part"};
  reader in{bytes.substr(part_magic.size())};
  auto version = in.get_int<uint8_t>();
  image_part p;
  p.number = in.get_int<int64_t>();
  p.index = in.get_int<uint32_t>();
  if (!in.ok || version != part_version || p.number <= 0)
    return status{version > part_version ? errc::newer_schema : errc::corruption,
                  "an image part cut short or of a version this build does not read"};
  p.bytes = std::string(in.in);
  return p;
}

std::string image_digest(std::string_view bytes) {
  auto hex = sha256_hex(bytes);
  std::string raw;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return raw;
}

std::string entity_token(const entity_key& key) {
  std::string parts = key.tenant;
  parts.push_back('\0');
  parts += key.type;
  parts.push_back('\0');
  parts += key.id;
  return sha256_hex(parts).substr(0, 32);
}

} // namespace factum::replication
