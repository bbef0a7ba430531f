#!/usr/bin/env bash
# scenario.sh: examples/workflow end to end. Starts the fake vendor (one process
# playing inventory, payments and shipping) and a real `factum serve` hosting `order_workflow`,
# then drives over HTTP and checks from the facts: each step retrying with its own policy
# (fixed, exponential, linear), one idempotency key = one execution, an exhausted step as a dead
# letter retried by an operator (the execution resumes after its last completed step), dead
# letters discarded and acknowledged, and bad input answered at once. Also registered in ctest
# ("examples: workflow end to end over HTTP").
# Usage: scenario.sh --factum PATH --vendor PATH [--data DIR] [--quiet]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/driver.sh
source "$here/../lib/driver.sh"
ex_setup workflow "$@"

ex_start_vendor
ex_config "$here/serve.json" "$EX_TMP/serve.json"
ex_start_serve "$EX_TMP/serve.json"
ex_say "factum serve on $BASE, fake vendor on $VENDOR_URL, data in $EX_DATA"
wf=order_workflow/order-process
execute() { ex_call $wf/execute "{\"input\": {\"order_id\": \"$1\"}}" "${2:-}"; }
vendor_calls() { ex_vendor /_vendor/stats | jq .calls; }

ex_step "1. Each step retries with its own policy: inventory fixed, payments exponential, shipping linear"
ex_vendor /_vendor/script '{"responses": [
  {"status": 503}, {"status": 503}, {"status": 200},
  {"status": 503}, {"status": 503}, {"status": 503}, {"status": 200},
  {"status": 503}, {"status": 503}, {"status": 503}, {"status": 200}]}' > /dev/null
execute ORD-1 order-ORD-1
ex_expect 200 "execute ORD-1"
ex_check '.status == "completed" and ([.steps[].attempts] == [3, 4, 4])' "completed after retries"
ex_check '[.steps[].retry.backoff] == ["constant", "exponential", "linear"]' "per-step policies"
exec1=$(ex_jq .execution_id)
ex_say "   $exec1: $(ex_jq -c '[.steps[] | {step, attempts, backoff: .retry.backoff}]')"
# When each attempt ended: its error fact, and the outcome that resolved the retries.
gaps() {
  ex_facts $wf "tool_id=$1"
  ex_jq '[.[] | select(.type == "error" or (.type == "outcome" and .subtype ==
    "resolved_after_retry")) | .timestamp] | [range(1; length) as $i | .[$i] - .[$i - 1]]
    | map(tostring) | join(" ")'
}
check_gaps() { # TOOL MIN-GAPS...
  local tool=$1
  shift
  local got
  got=$(gaps "$tool")
  read -r -a g <<< "$got"
  [ "${#g[@]}" -eq $# ] || ex_fail "$tool: ${#g[@]} gaps ($got), expected $#"
  local i=0
  for min in "$@"; do
    [ "${g[$i]}" -ge "$min" ] || ex_fail "$tool: gap $((i + 1)) was ${g[$i]} ms, below $min ms"
    i=$((i + 1))
  done
  ex_say "   $tool: waits between attempts (ms): $got (at least $*)"
}
check_gaps inventory 100 100
check_gaps payments 100 200 400
check_gaps shipping 100 200 300

ex_step "2. One idempotency key is one execution: executing again returns the first execution"
before=$(vendor_calls)
execute ORD-1 order-ORD-1
ex_expect 200 "execute ORD-1 again"
ex_replayed || ex_fail "the second execute was not a replay"
ex_check ".execution_id == \"$exec1\"" "the same execution"
[ "$(vendor_calls)" = "$before" ] || ex_fail "the replay called the vendor"
ex_say "   same key -> $exec1 again (Idempotent-Replayed: true), no step ran"

ex_step "3. An exhausted step becomes a dead letter"
ex_vendor /_vendor/script '{"responses": [{"status": 200}]}' > /dev/null
ex_vendor /_vendor/mode '{"mode": "down"}' > /dev/null
execute ORD-2 order-ORD-2
ex_expect 503 "execute ORD-2 while payments are down"
ex_check '.code == "STEP_FAILED" and .step == "charge_payment" and .attempts == 4' \
  "charge_payment exhausted"
exec2=$(ex_jq .execution_id)
dl=$(ex_jq .dead_letter_id)
ex_say "   $exec2: $(ex_jq -c '{code, step, step_error, attempts, dead_letter_id}')"
ex_get /v1/entities/$wf/dead-letters
ex_check "map(select(.id == \"$dl\"))[0] | .operation == \"execute\" and
  .idempotency_key == \"order-ORD-2\" and .status == \"pending\"" \
  "the dead letter keeps the operation and its key, pending an operator (serve.json: server errors are not retried automatically)"
ex_say "   dead letter $dl: $(ex_jq -c "map(select(.id == \"$dl\"))[0] | {status, reason, attempts, error_code}")"
ex_call $wf/execution "{\"execution_id\": \"$exec2\"}"
ex_check '.status == "incomplete" and .completed_steps == ["reserve_inventory"]' \
  "inventory done, payment not"

ex_step "4. The operator retries it over HTTP: the execution resumes after its last completed step"
ex_vendor /_vendor/mode '{"mode": "ok"}' > /dev/null
before=$(vendor_calls)
ex_post "/v1/entities/$wf/dead-letters/$dl/retry"
ex_expect 200 "operator retry"
ex_check '.status == "scheduled"' "scheduled"
resolved() {
  ex_get /v1/entities/$wf/dead-letters
  [ "$(ex_jq "map(select(.id == \"$dl\"))[0].status")" = resolved ]
}
ex_wait "the dead letter to be resolved" 10 resolved
[ "$(vendor_calls)" = $((before + 2)) ] ||
  ex_fail "the retry made $(($(vendor_calls) - before)) vendor calls, expected 2 (payments, shipping)"
ex_call $wf/execution "{\"execution_id\": \"$exec2\"}"
ex_check '.status == "completed"' "the execution completed"
# The client, who got a 503 first, retries with its own key: the operator's retry already ran
# the call under that key, so this is a replay of the completed execution, not a new one.
before=$(vendor_calls)
execute ORD-2 order-ORD-2
ex_expect 200 "the client's own retry of ORD-2"
ex_replayed || ex_fail "the client's retry after the operator's was not a replay"
ex_check ".execution_id == \"$exec2\"" "the client's retry answers the resolved execution"
[ "$(vendor_calls)" = "$before" ] || ex_fail "the client's retry called the vendor"
ex_say "   $dl resolved; $exec2 completed with 2 vendor calls (inventory was not run again); the client's own retry with order-ORD-2 replays it"
ex_facts $wf "type=lifecycle"
ex_check '[.[] | .subtype] | index("dead_letter_created") != null and
  index("dead_letter_retry") != null and index("dead_letter_resolved") != null' \
  "each move of the dead letter is a lifecycle fact"

ex_step "5. Dead letters can also be discarded or acknowledged (final states stay final)"
ex_vendor /_vendor/mode '{"mode": "down"}' > /dev/null
execute ORD-3 order-ORD-3
ex_expect 503 "execute ORD-3"
dl3=$(ex_jq .dead_letter_id)
execute ORD-4 order-ORD-4
ex_expect 503 "execute ORD-4"
dl4=$(ex_jq .dead_letter_id)
ex_post "/v1/entities/$wf/dead-letters/$dl3/discard"
ex_expect 200 discard
ex_check '.status == "discarded"' "discarded"
ex_post "/v1/entities/$wf/dead-letters/$dl4/acknowledge"
ex_expect 200 acknowledge
ex_check '.status == "acknowledged"' "acknowledged"
ex_post "/v1/entities/$wf/dead-letters/$dl3/retry"
ex_expect 409 "retry of a discarded dead letter"
ex_say "   $dl3 discarded, $dl4 acknowledged; retrying a discarded one -> 409 $(ex_jq .code)"

ex_step "6. Bad input is a client error: answered at once, never retried"
ex_vendor /_vendor/mode '{"mode": "ok"}' > /dev/null
before=$(vendor_calls)
ex_call $wf/execute '{"input": {}}' order-bad
ex_expect 400 "execute without order_id"
ex_check '.code == "INVALID_REQUEST"' "INVALID_REQUEST"
[ "$(vendor_calls)" = "$before" ] || ex_fail "bad input reached a step"
ex_say "   -> 400 $(ex_jq .code): $(ex_jq .detail)"

ex_stop_serve
ex_inspect verify acme > "$EX_TMP/verify.out" || ex_fail "inspect verify: $(cat "$EX_TMP/verify.out")"
EX_HINTS=("dead-letters --data @DATA@ acme/$wf --table"
  "facts --data @DATA@ acme/$wf --type error --tool payments --table"
  "keys --data @DATA@ acme/$wf --table"
  "verify --data @DATA@ acme")
[ "$EX_QUIET" = 1 ] || ex_hints "acme/$wf"
echo "workflow: ok"
