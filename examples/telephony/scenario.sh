#!/usr/bin/env bash
# scenario.sh: examples/telephony end to end. Starts the fake telephony vendor and a
# real `factum serve` hosting `asset`, then places calls over HTTP while the vendor times out,
# rate-limits (429 + Retry-After), goes down (503) and charges for failed calls, and checks
# from the facts: retries with backoff and jitter, Retry-After honoured, the breaker opening,
# the fallback while it is open, half-opening and closing, error facts, cost facts on failure,
# and economics that close (every cent the vendor charged is a cost fact). Also registered in
# ctest ("examples: telephony end to end over HTTP").
# Usage: scenario.sh --factum PATH --vendor PATH [--data DIR] [--quiet]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/driver.sh
source "$here/../lib/driver.sh"
ex_setup telephony "$@"

ex_start_vendor
ex_vendor /_vendor/mode '{"mode": "ok", "price": "0.013", "charge_failed": true}' > /dev/null
ex_config "$here/serve.json" "$EX_TMP/serve.json"
ex_start_serve "$EX_TMP/serve.json"
ex_say "factum serve on $BASE, fake telephony vendor on $VENDOR_URL, data in $EX_DATA"
n=0
place() {
  n=$((n + 1))
  ex_call asset/a1/place_call '{"to": "+15550001"}' "call-$n"
}
vendor_calls() { ex_vendor /_vendor/stats | jq .calls; }

ex_step "1. A timeout, then a 429 with Retry-After: 1, then the call goes through"
ex_vendor /_vendor/script \
  '{"responses": [{"timeout": true, "hold_ms": 2000}, {"status": 429, "retry_after_s": 1},
                  {"status": 200, "body": {"call_id": "CA-0001"}}]}' > /dev/null
place
ex_expect 200 "the first call"
ex_check '.status == "placed" and .attempts == 3' "placed on the third attempt"
ex_say "   call-1: $(ex_body)"
ex_facts asset/a1 "tool_id=telephony"
ex_check '[.[] | select(.type == "error") | .data.error_code] == ["TIMEOUT", "RATE_LIMITED"]' \
  "an error fact per failed attempt"
ex_check '([.[] | select(.type == "outcome" and .subtype == "resolved_after_retry")][0].timestamp) -
  ([.[] | select(.type == "error" and .data.error_code == "RATE_LIMITED")][0].timestamp) >= 1000' \
  "Retry-After (1 s) honoured before the third attempt"
ex_say "   errors: TIMEOUT, RATE_LIMITED; the retry after the 429 waited >= 1 s"

ex_step "2. The vendor goes down (503, still charging): the breaker opens, the fallback answers"
ex_vendor /_vendor/mode '{"mode": "down"}' > /dev/null
place
ex_expect 200 "a call while the vendor is down"
ex_check '.status == "deferred" and .fallback == true' "deferred by the fallback"
ex_say "   call-$n: $(ex_jq -c '{status, fallback, attempts, message: .body.message}')"
open_calls=$(vendor_calls)
place
ex_check '.status == "deferred"' "deferred while open"
[ "$(vendor_calls)" = "$open_calls" ] || ex_fail "a call reached the vendor while the breaker was open"
ex_say "   call-$n: deferred at once, the vendor was not called (CIRCUIT_OPEN error fact)"
ex_facts asset/a1 "type=error"
ex_check '.[-1].data.error_code == "CIRCUIT_OPEN"' "a CIRCUIT_OPEN error fact"

ex_step "3. The vendor recovers: after the cooldown a trial call half-opens, then closes the breaker"
ex_vendor /_vendor/mode '{"mode": "ok"}' > /dev/null
placed_now() {
  place
  [ "$EX_CODE" = 200 ] && [ "$(ex_jq .status)" = placed ]
}
EX_POLL=0.25 ex_wait "a call to go through after the cooldown" 10 placed_now
ex_say "   call-$n: placed"
ex_facts asset/a1 "type=lifecycle&subtype=circuit_breaker_state_changed"
ex_check '[.[] | .data.new_state] == ["OPEN", "HALF_OPEN", "CLOSED"]' "OPEN -> HALF_OPEN -> CLOSED"
ex_say "   breaker: $(ex_jq -c '[.[] | "\(.data.previous_state)->\(.data.new_state)"]')"
# The operator's view of the same, labelled by tool on /metrics.
metric() { grep -F "$1" "$EX_TMP/metrics" | awk '{print $2}'; }
curl -sf "$BASE/metrics" > "$EX_TMP/metrics" || ex_fail "GET /metrics failed"
for series in 'factum_tool_breaker_transitions_total{tool="telephony",to="open"} 1' \
  'factum_tool_breaker_transitions_total{tool="telephony",to="closed"} 1' \
  'factum_tool_breakers{tool="telephony",state="open"} 0'; do
  grep -qxF "$series" "$EX_TMP/metrics" || ex_fail "/metrics lacks: $series"
done
[ "$(metric 'factum_tool_errors_total{tool="telephony",category="transient"}')" -ge 3 ] ||
  ex_fail "/metrics counts fewer than 3 transient errors of telephony"
[ "$(metric 'factum_tool_fast_fails_total{tool="telephony"}')" -ge 1 ] ||
  ex_fail "/metrics counts no fast fail of telephony"
[ "$(metric 'factum_tool_retry_outcomes_total{tool="telephony",outcome="succeeded"}')" -ge 1 ] ||
  ex_fail "/metrics counts no call that succeeded after retrying"
ex_say "   /metrics: breaker transitions, fast fails, errors by category and retries, by tool"

ex_step "4. Economics close: every cent the vendor charged is a cost fact, failed calls included"
ex_call asset/a1/summary '{}'
ex_expect 200 summary
total=$(ex_jq '.costs.total.USD')
on_failure=$(ex_jq '.costs.on_failure.USD')
charged=$(ex_vendor /_vendor/stats | jq -r .charged_total)
ex_say "   $(ex_jq -c .calls)"
ex_say "   errors by code: $(ex_jq -c .errors_by_code)"
ex_say "   cost facts: $total USD in all, $on_failure USD for failed attempts; the vendor charged $charged USD"
norm() { echo "$1" | sed -e 's/\(\.[0-9]*[1-9]\)0*$/\1/' -e 's/\.0*$//'; }
[ "$(norm "$total")" = "$(norm "$charged")" ] ||
  ex_fail "cost facts total $total USD, the vendor charged $charged USD"
ex_check '.costs.failed_call_facts >= 2' "failed attempts were charged and recorded"
ex_facts asset/a1 "type=cost"
ex_check 'map(select(.data.failed)) | all(.data.error_fact_id != null)' \
  "every failed charge points at its error fact"

ex_stop_serve
ex_inspect verify acme > "$EX_TMP/verify.out" || ex_fail "inspect verify: $(cat "$EX_TMP/verify.out")"
ex_inspect economics acme --json > "$EX_TMP/econ.out" || ex_fail "inspect economics failed"
ex_say ""
ex_say "factum inspect economics:"
[ "$EX_QUIET" = 1 ] || ex_inspect economics acme --table | sed 's/^/   /'

EX_HINTS=("facts --data @DATA@ acme/asset/a1 --type error --table"
  "facts --data @DATA@ acme/asset/a1 --type cost --table"
  "breakers --data @DATA@ acme/asset/a1 --table"
  "economics --data @DATA@ acme --table"
  "verify --data @DATA@ acme")
[ "$EX_QUIET" = 1 ] || ex_hints acme/asset/a1
echo "telephony: ok"
