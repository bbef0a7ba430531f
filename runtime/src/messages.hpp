// messages.hpp (private): the atoms and message types of factum's actors (CAF 0.17). Types
// that cross actors are plain structs with inspect(), so they could also cross nodes.
#pragma once

#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "factum/entities/call.hpp"
#include "turn/call_request.hpp"

namespace factum {

template <class Inspector> typename Inspector::result_type inspect(Inspector& f, call_request& x) {
  return f(caf::meta::type_name("factum.call_request"), x.method, x.args, x.idempotency_key,
           x.trace_id, x.fingerprint);
}

template <class Inspector> typename Inspector::result_type inspect(Inspector& f, call_reply& x) {
  return f(caf::meta::type_name("factum.call_reply"), x.ok, x.body, x.code, x.category,
           x.http_status, x.retryable, x.replayed, x.retry_after_ms, x.cursor);
}

namespace atoms {
using call = caf::atom_constant<caf::atom("f_call")>;         // (call, call_request) -> reply
using flush = caf::atom_constant<caf::atom("f_flush")>;       // self: commit the batch
using opened = caf::atom_constant<caf::atom("f_opened")>;     // storage: open done (code, msg)
using committed = caf::atom_constant<caf::atom("f_commit")>;  // storage: commit done
using closed = caf::atom_constant<caf::atom("f_closed")>;     // storage: close done
using synced = caf::atom_constant<caf::atom("f_synced")>;     // storage: WAL sync done
using checkpointed = caf::atom_constant<caf::atom("f_ckpt")>; // storage: checkpoint done
using replicated = caf::atom_constant<caf::atom("f_repl")>;   // the log took commits (or not)
using resume = caf::atom_constant<caf::atom("f_resume")>;     // an awaited op completed
using slot = caf::atom_constant<caf::atom("f_slot")>;         // registry: activation slot granted
using hibernate = caf::atom_constant<caf::atom("f_hiber")>;   // registry: please hibernate
using stop = caf::atom_constant<caf::atom("f_stop")>;         // runtime: drain and close
using alarm = caf::atom_constant<caf::atom("f_alarm")>;       // timer/scheduler: check alarms
using tick = caf::atom_constant<caf::atom("f_tick")>;         // scheduler timer
using kick = caf::atom_constant<caf::atom("f_kick")>;         // scheduler: index changed
using idle = caf::atom_constant<caf::atom("f_idle")>;         // self: idle timeout check
using fire = caf::atom_constant<caf::atom("f_fire")>;         // timer actor: an entity's timer
} // namespace atoms

} // namespace factum
