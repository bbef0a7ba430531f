// factum/entities/context.hpp: the handler's view of its entity: facts, its own SQL tables,
// alarms and schedules, configs, and asynchronous calls to other entities, tools and timers.
// Implemented by the runtime. Used only on the entity's actor thread, during a turn.
#pragma once

#include <chrono>
#include <coroutine>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/entities/call.hpp"
#include "factum/entities/problems.hpp"
#include "factum/entities/task.hpp"
#include "factum/entities/websocket.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/fact.hpp"
#include "factum/storage/records.hpp"

namespace factum {

/// What is known about the call a turn runs.
struct call_info {
  std::string method;          ///< method name, or "@alarm" / "@activate" for internal turns
  std::string idempotency_key; ///< empty when the call has none
  std::string trace_id;
  std::string args_json; ///< the call's arguments (kept for dead letters)
  /// The idempotency fingerprint the key was taken with (the gateway's covers HTTP method,
  /// path and body); kept with dead letters so that their retry stores the key under it.
  std::string fingerprint;
};

/// A request to an external tool (context::call_tool wraps it in the runtime's retries, breaker,
/// budget, cost and error facts, and dead letters).
struct tool_request {
  std::string tool;
  std::string operation;
  nlohmann::json payload = nlohmann::json::object();
  /// The calling turn's trace id (the HTTP transport sends it as X-Trace-Id). Filled by the
  /// runtime's resilient call when empty.
  std::string trace_id = {};
  /// Sent as Idempotency-Key so the vendor can de-duplicate; the same for every attempt of one
  /// logical call. The runtime's resilient call fills it when empty (docs/tools.md).
  std::string idempotency_key = {};
};

/// What a tool answered. Transports set http_status for HTTP answers, or error_code to a
/// transport error name ("timeout", "connection_reset", "connection_refused", "dns_failure")
/// when there was no answer.
struct tool_reply {
  bool ok = false;
  int http_status = 0;
  nlohmann::json body;
  std::string error_code;
  std::string error_message;
  error_category category = error_category::external;
  std::optional<int64_t> retry_after_ms; ///< the tool's Retry-After, converted to ms
  std::string cost_amount; ///< what the vendor reports it charged (exact decimal), if it does
  /// The vendor says this answer replays the one it gave an earlier request with the same
  /// Idempotency-Key (`Idempotent-Replayed: true`); `cost_amount` is then what that request
  /// was charged (docs/tools.md, "Costs").
  bool replayed = false;
  int attempts = 0;           ///< attempts made (filled by the runtime's resilient call)
  std::string dead_letter_id; ///< set when the call ended as a dead letter
};

/// Whether `r` is the configured fallback the runtime answered instead of the tool (while its
/// breaker is open, or with `after_retries` once the retries ran out; docs/configuration.md,
/// "fallback"): an ok reply whose object body has `"fallback": true`.
bool is_fallback(const tool_reply& r);

/// The failure a handler throws for a tool call that did not succeed (`!r.ok`): the reply's
/// category, its error code and message (`code` and `message` when it has none), status 503 for
/// CIRCUIT_OPEN (else the category's), and in the problem body `attempts`, `tool_status` (the
/// tool's HTTP status, when it answered) and `dead_letter_id` (when the call became one).
call_error tool_failure(const tool_reply& r, std::string code, std::string message);

class context;

/// An asynchronous operation a handler awaits. Awaiting it ends the turn's current savepoint and
/// commits what the entity has written so far (like Durable Objects, an await of I/O is a
/// commit point); the operation starts only once that commit is durable (the output gate holds
/// it as it holds replies), and the handler resumes on the entity's actor once the result is
/// there. When that commit fails, the operation never starts and the await throws the storage
/// error (503 STORAGE_UNAVAILABLE, retryable).
template <class T> class async_op {
 public:
  using starter = std::function<void(std::function<void(T)>)>;
  async_op(context& ctx, starter s) : ctx_(ctx), start_(std::move(s)) {}

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h);
  T await_resume() {
    if (!*slot_)
      throw problems::storage_unavailable.error(
        "the commit of what the handler wrote before this await failed; the "
        "awaited operation did not start");
    return std::move(**slot_);
  }

 private:
  context& ctx_;
  starter start_;
  std::shared_ptr<std::optional<T>> slot_ = std::make_shared<std::optional<T>>();
};

/// The handler's context. Storage failures throw call_error (the turn then rolls back).
class context {
 public:
  virtual ~context() = default;

  // -- identity --
  virtual const entity_key& key() const = 0;
  virtual const call_info& call() const = 0;
  /// Wall clock in ms since the epoch (journaled: a replay gets the time the first run got).
  virtual int64_t now_ms() const = 0;

  // -- facts --
  /// Appends a fact in the current turn; trace_id and idempotency_key default to the call's.
  virtual fact append(fact_draft draft) = 0;
  virtual std::vector<fact> query(const fact_filter& filter) = 0;

  // -- the entity's own tables (named u_*) --
  /// Read-only SQL on the entity's database; rows as a JSON array of objects.
  virtual nlohmann::json sql(std::string_view sql, const nlohmann::json& params = nullptr) = 0;
  /// SQL that may write the entity's own u_* tables (in the current turn).
  virtual nlohmann::json sql_write(std::string_view sql,
                                   const nlohmann::json& params = nullptr) = 0;

  // -- alarms --
  /// Sets or replaces the alarm `name`, due at `due_ms`; on_alarm runs at or after that time.
  virtual void set_alarm(std::string name, int64_t due_ms,
                         nlohmann::json payload = nlohmann::json::object()) = 0;
  virtual void cancel_alarm(std::string_view name) = 0;
  virtual std::vector<alarm_record> alarms() = 0;

  // -- schedules --
  /// Sets or replaces the recurring schedule `name`: `spec` is {"every_ms": N} (optionally with
  /// "anchor_ms") or {"cron": "m h dom mon dow", "time_zone": "Europe/Berlin"}, with "missed"
  /// ("skip", "fire_once", "fire_all" with "max_catch_up"), "jitter_ms" and "grace_ms"
  /// (docs/architecture.md, "Schedules"). An invalid spec throws call_error 400
  /// INVALID_SCHEDULE saying what is wrong. Each fire runs on_alarm with an alarm_record whose
  /// `schedule` is true, `name` the schedule's name, `due_ms` the scheduled time the fire stands
  /// for (without jitter), `payload` this payload and `missed` how many missed scheduled times it
  /// covers (0 when on time). The schedule goes on after each fire, failed ones included (their
  /// retries and dead letters are an alarm's); a handler may cancel or replace it meanwhile.
  virtual void set_schedule(std::string name, const nlohmann::json& spec,
                            nlohmann::json payload = nlohmann::json::object()) = 0;
  /// Cancels the schedule `name` (nothing when there is none).
  virtual void cancel_schedule(std::string_view name) = 0;

  // -- configs --
  /// The latest version of `config_id` (or `version`); nullopt when absent.
  virtual std::optional<config_record> config(std::string_view config_id, int64_t version = 0) = 0;
  /// Publishes a new version of `config_id`; returns its version.
  virtual int64_t put_config(std::string_view config_id, const nlohmann::json& body) = 0;

  // -- asynchronous operations --
  //
  // In a journaled turn (a call with an idempotency key, an alarm, a dead letter's retry) each
  // of these is a step of the turn's journal, and the reads, writes, clock and random numbers
  // between them are its entries: a retry of the turn after a crash replays what the journal
  // recorded instead of doing it again (docs/architecture.md, "Durable execution").

  /// Calls a method of another entity of the same tenant.
  task<call_reply> call(const std::string& type, const std::string& id, std::string method,
                        nlohmann::json args) {
    // No defaulted class-type argument: GCC 12 miscompiles them inside co_await expressions.
    return call(type, id, std::move(method), std::move(args), call_options());
  }
  /// Calls a method of another entity of the same tenant with options (idempotency key...).
  /// In a journaled turn a call without a key gets one derived from the turn's journal, so that
  /// a replay that runs it again is not run twice by the callee.
  virtual task<call_reply> call(const std::string& type, const std::string& id, std::string method,
                                nlohmann::json args, call_options opts) = 0;
  /// Calls an external tool registered with the runtime, with its retry policy, circuit
  /// breaker, retry budget and price (config version locked at the first attempt). Every failed
  /// attempt appends an error fact, every charge a cost fact; exhausted retries end as a dead
  /// letter. The reply is the last attempt's (or the fallback's while the breaker is open).
  virtual task<tool_reply> call_tool(tool_request req) = 0;
  /// One attempt at the tool, without any policy (the transport).
  virtual task<tool_reply> call_tool_once(tool_request req) = 0;
  /// Waits without blocking a thread. In a journaled turn the wait ends at the time the first
  /// run chose, also when a replay reaches it after a crash.
  virtual task<bool> sleep(std::chrono::milliseconds d) = 0;
  /// A random 64-bit number (journaled: a replay gets the same one).
  virtual uint64_t random() = 0;

  // -- WebSocket connections (docs/websockets.md) --
  //
  // Frames leave when what the turn wrote before them is durable (at the turn's end, or at an
  // await), as replies do; a turn that fails sends nothing it had not sent at an earlier await.
  // A connection that has gone meanwhile is skipped. Outside an entity that accepts
  // connections these throw call_error 400 WEBSOCKET_NOT_SUPPORTED.

  /// Sends a text (or binary) message to connection `conn_id`.
  virtual void send(const std::string& conn_id, std::string message, bool binary) {
    (void)conn_id, (void)message, (void)binary;
    throw no_websockets();
  }
  void send(const std::string& conn_id, std::string message) {
    send(conn_id, std::move(message), false);
  }
  /// Sends a text message to every open connection with `tag` (every one when `tag` is empty).
  virtual void broadcast(const std::string& tag, std::string message) {
    (void)tag, (void)message;
    throw no_websockets();
  }
  /// Closes connection `conn_id` with `code` (1000, or 3000-4999) and `reason` (<= 123 bytes).
  virtual void close(const std::string& conn_id, int code, std::string reason) {
    (void)conn_id, (void)code, (void)reason;
    throw no_websockets();
  }
  /// The open connections with `tag` (every one when `tag` is empty), oldest first.
  virtual std::vector<connection> connections(const std::string& tag) {
    (void)tag;
    throw no_websockets();
  }

  // -- runtime seam (implemented by the runtime; not for handlers) --
  /// Marks the running turn suspended at `h` (a commit point), commits what it wrote, and once
  /// that is durable calls `start(true, wake)` on the entity's actor (`start(false, wake)` when
  /// the commit failed); `wake` is the thread-safe function that schedules the turn's
  /// resumption.
  virtual void suspend_turn(std::coroutine_handle<> h,
                            std::function<void(bool, std::function<void()>)> start) = 0;

 protected:
  static call_error no_websockets();
};

inline call_error context::no_websockets() {
  return problems::websocket_not_supported.error(
    "this context has no WebSocket connections (a shared call, or an entity type "
    "without websocket options)");
}

template <class T> void async_op<T>::await_suspend(std::coroutine_handle<> h) {
  ctx_.suspend_turn(
    h, [slot = slot_, start = std::move(start_)](bool go, std::function<void()> wake) mutable {
      if (!go) {
        wake(); // the slot stays empty: await_resume throws
        return;
      }
      start([slot, wake = std::move(wake)](T v) mutable {
        *slot = std::move(v);
        wake();
      });
    });
}

} // namespace factum
