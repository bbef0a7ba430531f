// factum/runtime/outbox.hpp: the outbox: facts of configured types are relayed to external sinks
// (an HTTP endpoint, a NATS JetStream subject, or any outbox_fn) until each sink acknowledges
// them, at least once, in seq order per entity (docs/outbox.md). This header is what a runtime
// is configured with (runtime_config::outbox) and what a sink implements; the relay itself is
// runtime/src/outbox/. An outbox_fn is called from a CAF worker and must not block it; its
// `done` may run on any thread, exactly once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/storage/entity_key.hpp"

namespace factum {

/// One fact on its way to a sink.
struct outbox_message {
  std::string sink;    ///< the configured sink's name
  entity_key entity;   ///< whose fact it is
  int64_t seq = 0;     ///< its place in the entity's log
  std::string fact_id; ///< the sink's dedupe key (HTTP Idempotency-Key, NATS Nats-Msg-Id)
  std::string type;    ///< the fact's type
  /// The fact as the HTTP API shows it (to_json_text: tenant, type and id of the entity
  /// included), compact JSON text.
  std::string body;
};

/// What a sink made of one delivery.
struct outbox_ack {
  enum class outcome {
    acknowledged, ///< the sink has it (HTTP 2xx, a JetStream PubAck)
    retry,        ///< not now: try again after a backoff (429, 5xx, timeouts, no connection)
    refused,      ///< never: the fact is dead-lettered and delivery goes on with the next one
  };
  outcome result = outcome::retry;
  std::string error_code;                ///< "HTTP_503", "timeout", ... (empty when acknowledged)
  std::string error_message;             ///< what the sink or the transport said
  std::optional<int64_t> retry_after_ms; ///< the sink's Retry-After, when it sent one
};

/// A sink's transport: delivers one message and calls `done` once with the outcome.
using outbox_fn = std::function<void(const outbox_message&, std::function<void(outbox_ack)> done)>;

/// One sink: its transport and how failures are handled.
struct outbox_sink {
  /// The transport. Required.
  outbox_fn deliver;
  /// retry_policy JSON (factum/resilience/retry_policy.hpp) for the backoff between failed
  /// deliveries of a fact. Its max_attempts is not a limit here: a fact the sink does not refuse
  /// is retried until it is acknowledged, at most max_delay_ms apart. Null: 1 s base,
  /// exponential x2 to 60 s, ratio jitter 0.5, Retry-After honoured up to 5 min.
  nlohmann::json retry;
  /// breaker_config JSON (factum/resilience/circuit_breaker.hpp) of the sink's one breaker,
  /// shared by every entity of this process. Null: the defaults (5 failures in 10 deliveries or
  /// 10 in 60 s, 120 s cooldown).
  nlohmann::json breaker;
};

/// Which facts go to a sink. A fact is relayed to `sink` when its type is one of `fact_types`
/// and its entity's tenant and type are among `tenants` and `entity_types` (an empty list: any).
struct outbox_route {
  std::string sink;
  std::vector<std::string> fact_types; ///< at least one
  std::vector<std::string> tenants;
  std::vector<std::string> entity_types;
};

/// runtime_config::outbox. Every field documents its default.
struct outbox_config {
  /// Sinks by name (1 to 64 characters of [A-Za-z0-9._-]). Default none: no outbox.
  std::map<std::string, outbox_sink> sinks;
  /// Which facts go where. Several routes may name one sink: a fact matching any of them goes
  /// to it once. Default none.
  std::vector<outbox_route> routes;
  /// Facts one relay turn of an entity delivers to one sink before it lets the entity's queued
  /// calls run (the relay goes on in the next turn). 1..10000; default 64.
  int batch = 64;
};

} // namespace factum
