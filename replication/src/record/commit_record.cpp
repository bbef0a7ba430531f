// commit_record.cpp: the commit record's bytes (commit_record.hpp). Layout, all integers
// little-endian:
//   "FCR" version(u8=1) flags(u8: bit 0 = genesis present) epoch(i64) number(i64)
//   tenant, type, id: u16 length + bytes each
//   genesis (when flagged): page size (u32), u32 count, then per row u16 key length + key,
//     u32 value length + value
//   commit id: u16 length + bytes; changeset: u32 length + bytes
// and nothing after it. Any thread.
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
  put_int<uint8_t>(out, r.genesis ? 1 : 0);
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
  put_bytes32(out, r.commit.changeset);
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
  if (version != commit_record_version)
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
  r.commit.changeset = in.bytes32();
  if (!in.ok || !in.in.empty() || (flags & ~1) != 0 || r.commit.number <= 0 || r.epoch < 0)
    return status{errc::corruption, "a commit record cut short or with bytes it should not have"};
  return r;
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
