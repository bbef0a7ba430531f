// http/connection_caps.hpp (private): the per-entity and per-tenant caps on long-lived
// connections (WebSockets in ws_hub, fact streams in fact_streams): the check of both caps and
// the count per tenant. The entity's count is its owner's (the size of its list of that
// entity's connections). Not thread-safe: its owner's mutex guards it.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

namespace factum::http {

class connection_caps {
 public:
  enum class refusal { none, entity_full, tenant_full };

  connection_caps(size_t max_per_entity, size_t max_per_tenant)
      : max_per_entity_(max_per_entity), max_per_tenant_(max_per_tenant) {}

  /// One more connection of `tenant`'s entity that has `entity_open` open already: counted, or
  /// the cap that refuses it (nothing counted then).
  refusal admit(size_t entity_open, const std::string& tenant) {
    if (entity_open >= max_per_entity_)
      return refusal::entity_full;
    auto it = per_tenant_.find(tenant);
    if ((it == per_tenant_.end() ? 0 : it->second) >= max_per_tenant_)
      return refusal::tenant_full;
    ++per_tenant_[tenant];
    return refusal::none;
  }

  /// One connection of `tenant` admitted before is gone.
  void release(const std::string& tenant) {
    if (auto it = per_tenant_.find(tenant); it != per_tenant_.end() && --it->second == 0)
      per_tenant_.erase(it);
  }

 private:
  const size_t max_per_entity_;
  const size_t max_per_tenant_;
  std::unordered_map<std::string, size_t> per_tenant_;
};

} // namespace factum::http
