// factum/entities/entity.hpp: how a tenant defines an entity type: a class derived from
// `entity`, methods registered by name, hooks for activation and alarms. Registries are built
// before the runtime starts and read-only afterwards (any thread may read them).
#pragma once

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/entities/context.hpp"
#include "factum/entities/task.hpp"
#include "factum/entities/websocket.hpp"

namespace factum {

/// Base class of every entity. One instance per activation; its methods run one at a time on
/// the entity's actor. State that must survive belongs in facts or the entity's own tables.
class entity {
 public:
  virtual ~entity() = default;
  /// Runs once per activation, before any call (e.g. rebuild in-memory state from facts).
  virtual task<void> on_activate(context&) { co_return; }
  /// Runs when an alarm is due, or a schedule fires (alarm_record::schedule; context.hpp,
  /// set_schedule). Throwing retries it with backoff (2 s, doubling, 6 retries), then
  /// dead-letters it; a schedule goes on with its next fire either way.
  virtual task<void> on_alarm(context&, const alarm_record&) { co_return; }

  // -- WebSocket connections (types built with type_builder::websocket; docs/websockets.md) --

  /// A client asks to connect (GET /v1/entities/{type}/{id}/ws). Runs as a turn: what it
  /// writes is committed, and what it sends (history, say) leaves, before the client sees the
  /// connection open. Default: refused with 1008.
  virtual task<connect_decision> on_connect(context&, const connection&) {
    co_return connect_decision::refuse(1008, "this entity accepts no connections");
  }
  /// A message from an open connection. Runs as a turn, one at a time with every other turn;
  /// frames it sends leave once what it wrote is durable (the output gate).
  virtual task<void> on_message(context&, const connection&, const ws_message&) { co_return; }
  /// An accepted connection ended (`code`: the close code the client sent, 1006 when it went
  /// away without one, or the server's own). It is no longer among ctx.connections().
  virtual task<void> on_close(context&, const connection&, int /*code*/) { co_return; }
};

using method_fn = std::function<task<nlohmann::json>(entity&, context&, nlohmann::json args)>;

/// How a method may be called.
struct method_options {
  /// HTTP answers 400 when a call to this method carries no Idempotency-Key.
  bool requires_idempotency_key = false;
  /// A shared (read-only) method: it reads the entity's state as committed so far, may not
  /// write, append or await (500 SHARED_CALL_READ_ONLY), ignores idempotency keys, and runs at
  /// once, also while an exclusive call waits at an await, instead of queueing behind it
  /// (docs/architecture.md, "Shared calls"). Default false: exclusive.
  bool shared = false;
};

struct method_def {
  method_fn fn;
  method_options options;
};

/// A registered entity type: a factory and its methods.
struct entity_type {
  std::string name;
  std::function<std::unique_ptr<entity>()> factory;
  std::map<std::string, method_def, std::less<>> methods;
  /// Page size, in bytes, of this type's new entity files (store_options::page_size: a power
  /// of two from 512 to 65536; runtime::start refuses another). Pages of 1 KiB suit types whose
  /// calls append a fact or two each (their commits write a quarter of the bytes); 4 KiB suit
  /// types that write many facts per call or large ones. Files keep the size they were made
  /// with. Default 4096.
  int page_size = 4096;
  /// Set: the type accepts WebSocket connections (entity::on_connect and friends). Default
  /// unset: GET .../ws answers 404 WEBSOCKET_NOT_SUPPORTED.
  std::optional<websocket_options> websocket;

  const method_def* find(std::string_view method) const {
    auto it = methods.find(method);
    return it == methods.end() ? nullptr : &it->second;
  }
};

namespace detail {
template <class E>
task<nlohmann::json> run_sync(nlohmann::json (E::*fn)(context&, nlohmann::json), entity& e,
                              context& c, nlohmann::json a) {
  co_return (static_cast<E&>(e).*fn)(c, std::move(a));
}
} // namespace detail

/// Builds an entity_type for class E:
///   auto t = type_builder<counter>("counter").method("add", &counter::add).build();
template <class E> class type_builder {
 public:
  explicit type_builder(std::string name) {
    type_.name = std::move(name);
    type_.factory = [] { return std::make_unique<E>(); };
  }
  /// A coroutine method.
  type_builder& method(std::string name, task<nlohmann::json> (E::*fn)(context&, nlohmann::json),
                       method_options opts = {}) {
    type_.methods[std::move(name)] = method_def{
      [fn](entity& e, context& c, nlohmann::json a) { return (static_cast<E&>(e).*fn)(c, a); },
      opts};
    return *this;
  }
  /// A synchronous method.
  type_builder& method(std::string name, nlohmann::json (E::*fn)(context&, nlohmann::json),
                       method_options opts = {}) {
    type_.methods[std::move(name)] =
      method_def{[fn](entity& e, context& c, nlohmann::json a) {
                   return detail::run_sync<E>(fn, e, c, std::move(a));
                 },
                 opts};
    return *this;
  }
  /// The page size of this type's new entity files (entity_type::page_size).
  type_builder& page_size(int bytes) {
    type_.page_size = bytes;
    return *this;
  }
  /// The type accepts WebSocket connections (entity_type::websocket).
  type_builder& websocket(websocket_options opts = {}) {
    type_.websocket = std::move(opts);
    return *this;
  }
  entity_type build() { return std::move(type_); }
  operator entity_type() && { return std::move(type_); }

 private:
  entity_type type_;
};

/// The entity types a runtime hosts, by name.
class entity_registry {
 public:
  /// Adds a type; a type of the same name is replaced.
  void add(entity_type t) {
    auto name = t.name;
    types_[name] = std::make_shared<const entity_type>(std::move(t));
  }
  const entity_type* find(std::string_view name) const {
    auto it = types_.find(name);
    return it == types_.end() ? nullptr : it->second.get();
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& [n, _] : types_)
      out.push_back(n);
    return out;
  }
  /// What a call of a type this registry does not hold is told: "no entity type NAME (hosted
  /// types: a, b)", with "did you mean a? " before the list when NAME is a hosted type's name in
  /// another case.
  std::string unknown_type_detail(std::string_view name) const {
    std::string hosted, meant;
    for (auto& [n, _] : types_) {
      hosted += (hosted.empty() ? "" : ", ") + n;
      if (meant.empty() && n.size() == name.size() &&
          std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          }))
        meant = n;
    }
    return "no entity type " + std::string(name) + " (" +
           (meant.empty() ? "" : "did you mean " + meant + "? ") +
           (hosted.empty() ? "no type is hosted" : "hosted types: " + hosted) + ")";
  }

 private:
  std::map<std::string, std::shared_ptr<const entity_type>, std::less<>> types_;
};

/// Adds the built-in types (`ledger`; `webhook` comes with the resilience layer).
void add_builtin_types(entity_registry& registry);

} // namespace factum
