#!/usr/bin/env bash
# metrics.sh: the /metrics of a real `factum serve` passes `promtool check metrics` (Prometheus's
# own lint: names, base units, `_total` on counters, no `_sum` or `_count` outside histograms,
# HELP and TYPE), after a few calls so that counters, labelled families and histograms have
# values: appends with keys (one replayed), a refused key, a 404, a 401, a tool call to a fake
# vendor, with a tenant quota, degradation levels, a configured tool and an outbox sink, so that
# their families have series too. The server and the vendor are started here on loopback (port
# 0) and stopped by pid.
# Usage: metrics.sh --factum PATH --vendor PATH
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
while [ $# -gt 0 ]; do
  case $1 in
    --factum) factum=$2; shift 2 ;;
    --vendor) vendor=$2; shift 2 ;;
    *) echo "metrics: unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
pid=""
vpid=""
cleanup() {
  kill_processes "$pid" "$vpid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "metrics: FAIL: $*" >&2; exit 1; }

start_vendor "$vendor" "$tmp" || fail "$wait_error"
cat > "$tmp/serve.json" <<JSON
{"dev": true,
 "tenants": {"acme": {"api_keys": ["k"], "quota": {"max_entities": 100, "max_bytes": 1000000000}}},
 "types": ["ledger", "webhook"],
 "tools": {"pay": {"url": "$vendor_url/pay", "retry": {"max_attempts": 1}}},
 "outbox": {"sinks": {"audit": {"kind": "http", "url": "$vendor_url/facts"}},
            "routes": [{"sink": "audit", "fact_types": ["note"]}]},
 "degradation": {}}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "factum serve: $wait_error: $(cat "$tmp/err.log")"
base="http://127.0.0.1:$port"

call() { # STATUS METHOD PATH [KEY [BODY]]
  local want=$1 method=$2 path=$3 key=${4:-} body=${5:-} got
  local args=(-s -o /dev/null -w '%{http_code}' -X "$method" "$base$path" -H 'X-API-Key: k')
  [ -n "$key" ] && args+=(-H "Idempotency-Key: $key")
  [ -n "$body" ] && args+=(-H 'Content-Type: application/json' -d "$body")
  got=$(curl "${args[@]}") || fail "$method $path: curl failed"
  [ "$got" = "$want" ] || fail "$method $path answered $got, not $want"
}
note='{"type":"note","data":{"n":1}}'
call 200 POST /v1/entities/ledger/m1/append a-1 "$note"
call 200 POST /v1/entities/ledger/m1/append a-2 "$note"
call 200 POST /v1/entities/ledger/m2/append a-3 "$note"
call 200 POST /v1/entities/ledger/m1/append a-1 "$note" # a replay
call 422 POST /v1/entities/ledger/m1/append a-1 '{"type":"note","data":{"n":2}}'
call 404 GET /v1/entities/ledger/none/facts
call 200 POST /v1/entities/webhook/w1/deliver w-1 '{"tool":"pay"}'
got=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/entities/ledger/m1/facts" -H 'X-API-Key: bad')
[ "$got" = 401 ] || fail "a bad key answered $got, not 401"

curl -sf "$base/metrics" > "$tmp/metrics" || fail "GET /metrics failed"
promtool check metrics < "$tmp/metrics" > "$tmp/lint" 2>&1 && [ ! -s "$tmp/lint" ] ||
  fail "promtool check metrics: $(cat "$tmp/lint")"

value() { # SERIES: its value, or empty
  awk -v s="$1" '$1 == s { print $2 }' "$tmp/metrics"
}
# The calls are counted, and the histograms have observations.
for s in factum_http_call_duration_seconds_count factum_storage_sync_duration_seconds_count \
  factum_facts_total factum_idempotency_replays_total factum_tool_calls_total \
  'factum_tenant_requests_total{tenant="acme",class="2xx"}' 'factum_tenant_entities{tenant="acme"}'; do
  v=$(value "$s")
  [ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "$s is '$v', not above 0"
done
for f in factum_tool_errors_total factum_outbox_lag factum_degradation_level \
  factum_dead_letters factum_alarm_lag_seconds_bucket; do
  grep -q "^$f{" "$tmp/metrics" || fail "no series of $f"
done

stop_process "$pid" 30
pid=""
[ "$stop_rc" = 0 ] || fail "factum serve exited $stop_rc after SIGTERM"
echo "metrics: ok: $(grep -c '^# TYPE' "$tmp/metrics") families, $(grep -vc '^#' "$tmp/metrics") samples, promtool found nothing"
