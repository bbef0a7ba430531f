#!/usr/bin/env bash
# scenario.sh: examples/escrow end to end. Starts the fake payout provider and a real
# `factum serve` hosting `escrow`, then drives, over HTTP with curl, and checks from the facts:
# the happy path, invalid transitions and unauthorized actors as terminal client errors,
# de-duplicated commands and events, the release saga's compensation and an operator's retry of
# its dead letter, a poison event retried by the runtime, and the state rebuilt from the facts
# after a restart. Also registered in ctest ("examples: escrow end to end over HTTP").
# Usage: scenario.sh --factum PATH --vendor PATH [--data DIR] [--quiet]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/driver.sh
source "$here/../lib/driver.sh"
ex_setup escrow "$@"

ex_start_vendor
ex_vendor /_vendor/mode '{"mode": "ok", "price": "0.25"}' > /dev/null
ex_config "$here/serve.json" "$EX_TMP/serve.json"
ex_start_serve "$EX_TMP/serve.json"
ex_say "factum serve on $BASE, fake payout provider on $VENDOR_URL, data in $EX_DATA"
open='{"buyer": "bob", "seller": "sue", "arbiter": "ann", "amount": "250.00", "currency": "USD"}'
vendor_calls() { ex_vendor /_vendor/stats | jq .calls; }

ex_step "1. Happy path: AWAIT_FUNDS -> FUNDED -> DELIVERED -> RELEASED (payout to the seller)"
ex_call escrow/e1/open "$open" e1-open
ex_expect 200 open
ex_check '.status == "AWAIT_FUNDS"' "a new escrow awaits funds"
ex_call escrow/e1/fund '{"actor": "bob", "amount": "250.00"}' e1-fund
ex_expect 200 fund
ex_check '.status == "FUNDED"' "funded"
ex_call escrow/e1/deliver '{"actor": "sue", "tracking": "1Z999AA1"}' e1-deliver
ex_expect 200 deliver
ex_call escrow/e1/release '{"actor": "bob"}' e1-release
ex_expect 200 release
ex_check '.status == "RELEASED" and (.payout_ref | length > 0)' "released with a payout"
ex_say "   e1: $(ex_jq -c '{status, payout_ref, payout_attempts}')"

ex_step "2. Invalid transitions and unauthorized actors are terminal client errors, never retried"
ex_call escrow/e2/open "$open" e2-open
ex_expect 200 open
before=$(vendor_calls)
ex_call escrow/e2/release '{"actor": "bob"}' e2-release
ex_expect 422 "release while AWAIT_FUNDS"
ex_check '.code == "INVALID_TRANSITION" and .category == "client"' "an invalid transition"
ex_say "   release in AWAIT_FUNDS -> $EX_CODE $(ex_jq .code): $(ex_jq .detail)"
ex_call escrow/e2/release '{"actor": "bob"}' e2-release
ex_expect 422 "the same command again"
ex_replayed || ex_fail "a terminal failure is stored and replayed under its key"
ex_call escrow/e2/fund '{"actor": "sue", "amount": "250.00"}' e2-fund-by-seller
ex_expect 403 "the seller funding"
ex_check '.code == "ACTOR_NOT_ALLOWED" and .category == "authorization"' "unauthorized actor"
ex_say "   fund by the seller -> $EX_CODE $(ex_jq .code)"
[ "$(vendor_calls)" = "$before" ] || ex_fail "a refused command reached the payout provider"

ex_step "3. Commands are de-duplicated by idempotency keys"
ex_call escrow/e2/fund '{"actor": "bob", "amount": "250.00"}' e2-fund
ex_expect 200 fund
ex_call escrow/e2/fund '{"actor": "bob", "amount": "250.00"}' e2-fund
ex_expect 200 "fund again with the same key"
ex_replayed || ex_fail "the repeated fund was not answered from its idempotency record"
[ "$(ex_count escrow/e2 type=escrow.funded)" = 1 ] || ex_fail "two escrow.funded facts"
ex_say "   the same fund twice: one escrow.funded fact, the second answer Idempotent-Replayed"

ex_step "4. The release saga: the payout fails after the state change and is compensated"
ex_call escrow/e3/open "$open" e3-open
ex_call escrow/e3/fund '{"actor": "bob", "amount": "250.00"}' e3-fund
ex_call escrow/e3/deliver '{"actor": "sue"}' e3-deliver
ex_expect 200 deliver
ex_vendor /_vendor/mode '{"mode": "down"}' > /dev/null
ex_call escrow/e3/release '{"actor": "bob"}' e3-release
ex_expect 503 "release while the payout provider is down"
ex_check '.code == "PAYOUT_FAILED" and .compensated == true and .escrow_status == "DELIVERED"' \
  "a compensated release"
dl=$(ex_jq .dead_letter_id)
[ -n "$dl" ] && [ "$dl" != null ] || ex_fail "no dead letter for the failed payout"
ex_say "   release -> $EX_CODE $(ex_jq .code), payout $(ex_jq .payout_error) after $(ex_jq .attempts) attempts, dead letter $dl"
ex_facts escrow/e3 ""
ex_check '[.[] | select(.type | startswith("escrow.")) | .type] ==
  ["escrow.opened", "escrow.funded", "escrow.delivered", "escrow.released",
   "escrow.payout_compensated"]' "the log: released, then compensated"
ex_check '[.[] | select(.type == "error" and .tool_id == "payout" and .subtype != "max_retries_exceeded")] | length == 3' \
  "one error fact per payout attempt"
ex_call escrow/e3/state '{}'
ex_check '.status == "DELIVERED"' "back in DELIVERED"

ex_step "5. The operator retries the dead letter once the provider is back: the release runs again"
ex_vendor /_vendor/mode '{"mode": "ok"}' > /dev/null
ex_post "/v1/entities/escrow/e3/dead-letters/$dl/retry"
ex_expect 200 "operator retry"
ex_check '.status == "scheduled"' "the dead letter is scheduled"
dl_resolved() {
  ex_get /v1/entities/escrow/e3/dead-letters
  [ "$(ex_jq ".[] | select(.id == \"$dl\") | .status")" = resolved ]
}
ex_wait "the dead letter to be resolved" 10 dl_resolved
ex_call escrow/e3/state '{}'
ex_check '.status == "RELEASED" and .compensations == 1' "released after the retry"
ex_say "   e3: $(ex_jq -c '{status, compensations, payout_ref}')"
ex_facts escrow/e3 "type=lifecycle"
ex_check '[.[] | .subtype] | index("dead_letter_retry") != null and
  index("dead_letter_resolved") != null' "the dead letter's moves are facts"

ex_step "6. Payment events: de-duplicated by event_id; a poison event is retried by the runtime"
ex_call escrow/e4/open "$open" e4-open
ex_call escrow/e4/ingest \
  '{"event_id": "evt-bad", "type": "PaymentSucceeded", "payload": "%%corrupted%%"}' in-1
ex_expect 200 "ingest of a corrupted event"
ex_call escrow/e4/ingest \
  '{"event_id": "evt-1", "type": "PaymentSucceeded", "payload": {"amount": "250.00"}}' in-2
ex_expect 200 ingest
ex_call escrow/e4/ingest \
  '{"event_id": "evt-1", "type": "PaymentSucceeded", "payload": {"amount": "250.00"}}' in-3
ex_check '.duplicate == true' "the redelivered event is a duplicate"
funded() {
  ex_call escrow/e4/state '{}'
  [ "$(ex_jq .status)" = FUNDED ]
}
ex_wait "the event to fund e4" 10 funded
poison_retrying() {
  ex_facts escrow/e4 "type=lifecycle&subtype=alarm_retry_scheduled"
  [ "$(ex_jq 'map(select(.data.alarm == "alarm:event:evt-bad" or .data.alarm == "event:evt-bad")) | length')" -ge 1 ]
}
ex_wait "the poison event's retry" 10 poison_retrying
ex_facts escrow/e4 "type=error&subtype=alarm_failed"
ex_check '.[0].data.error_code == "MALFORMED_EVENT"' "the poison event's failure is a fact"
# serve.json sets alarm_retry_base_ms 100 and alarm_max_retries 2: after 3 failed runs the
# poison event is a dead letter, and only it.
poison_dead() {
  ex_get /v1/entities/escrow/e4/dead-letters
  [ "$(ex_jq 'map(select(.operation == "@alarm:event:evt-bad")) | length')" = 1 ]
}
ex_wait "the poison event's dead letter" 10 poison_dead
ex_check 'length == 1 and .[0].error_code == "MALFORMED_EVENT" and .[0].attempts == 3' \
  "the poison event is the entity's only dead letter, after 3 attempts"
ex_say "   evt-1 funded e4 once; evt-bad failed 3 times (MALFORMED_EVENT) and became dead letter $(ex_jq -r '.[0].id')"

ex_step "7. The state is the fold of the facts: restart the server and compare"
for e in e1 e2 e3 e4; do
  ex_call "escrow/$e/state" '{}'
  jq -S 'del(.last_seq)' "$EX_TMP/body" > "$EX_TMP/before-$e.json"
done
ex_stop_serve
ex_start_serve "$EX_TMP/serve.json"
for e in e1 e2 e3 e4; do
  ex_call "escrow/$e/state" '{}'
  ex_expect 200 "state of $e after the restart"
  jq -S 'del(.last_seq)' "$EX_TMP/body" > "$EX_TMP/after-$e.json"
  cmp -s "$EX_TMP/before-$e.json" "$EX_TMP/after-$e.json" ||
    ex_fail "$e: state before the restart $(cat "$EX_TMP/before-$e.json") != after $(ex_body)"
  ex_call "escrow/$e/rebuild" '{}'
  ex_check '.matches_memory == true' "$e: a fresh replay equals the activation's state"
done
ex_say "   e1..e4 after the restart: the same states, rebuilt from their facts"
ex_stop_serve

ex_step "8. factum inspect: the hash chains verify; the payout costs add up"
ex_inspect verify acme > "$EX_TMP/verify.out" || ex_fail "inspect verify: $(cat "$EX_TMP/verify.out")"
charged=$(ex_vendor /_vendor/stats | jq -r .charged_total)
ex_say "   the payout provider charged $charged USD; factum inspect economics says:"
ex_inspect economics acme --table | sed 's/^/   /'

EX_HINTS=("dead-letters --data @DATA@ acme/escrow/e3 --table"
  "dead-letters --data @DATA@ acme/escrow/e4 --table"
  "keys --data @DATA@ acme/escrow/e2 --table"
  "economics --data @DATA@ acme --table"
  "verify --data @DATA@ acme")
[ "$EX_QUIET" = 1 ] || ex_hints acme/escrow/e1 acme/escrow/e3 acme/escrow/e4
echo "escrow: ok"
