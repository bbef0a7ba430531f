#!/usr/bin/env bash
# serve_degradation.sh: degradation levels through the real `factum serve` and a
# factum-fake-vendor process: the configuration's "degradation" member reaches the runtime; a
# vendor that is down opens the critical tool's breaker, which puts the tenant at 2 (GET
# /v1/degradation, /healthz, /metrics), turns off the feature that runs only at 0 (503 DEGRADED
# with Retry-After) and leaves another tenant at 0; an operator's floor of 4 is set with a key of
# scope operate, refused to a key without it, and kept across a restart; removing it and the
# vendor coming back (a breaker reset) bring 0. Processes are started here and stopped by pid.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: serve_degradation.sh FACTUM FAKE_VENDOR}
vendor=${2:?usage: serve_degradation.sh FACTUM FAKE_VENDOR}
tmp=$(mktemp -d)
pid=""
vpid=""
cleanup() {
  kill_processes "$pid" "$vpid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "serve_degradation: FAIL: $*" >&2
  echo "--- server log:" >&2
  tail -20 "$tmp/err.log" >&2 || true
  exit 1
}

start_vendor "$vendor" "$tmp" || fail "$wait_error"
v=$vendor_url

cat > "$tmp/serve.json" <<JSON
{
  "listen": "127.0.0.1:0",
  "data_dir": "$tmp/data",
  "dev": true,
  "tenants": {
    "acme": {"api_keys": ["acme-key", {"key": "acme-op", "scopes": ["read", "write", "operate"]}]},
    "globex": {"api_keys": ["globex-key"]}
  },
  "types": ["webhook", "ledger"],
  "tools": {
    "pay": {"url": "$v/pay", "retry": {"max_attempts": 1},
            "breaker": {"count_window": {"size": 3, "min_calls": 3, "failure_threshold": 3},
                        "cooldown_ms": 600000}}
  },
  "degradation": {
    "critical_tools": ["pay"],
    "features": {"reports": {"max_level": 0, "methods": ["ledger.recent"]},
                 "writes": {"max_level": 3, "methods": ["*"]}},
    "retry_after_s": 9,
    "recover_after_ms": 0,
    "check_interval_ms": 50
  }
}
JSON
start() {
  start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" || fail "$wait_error"
  base="http://127.0.0.1:$port"
}
stop() {
  stop_process "$pid" 30
  pid=""
  [ "$stop_rc" -eq 0 ] || fail "serve exited $stop_rc after SIGTERM"
}
call() { # KEY PATH BODY -> status, body in $tmp/body
  curl -s -o "$tmp/body" -w '%{http_code}' -X POST "$base$2" -H "X-API-Key: $1" \
    -H 'Content-Type: application/json' -H "Idempotency-Key: k-$RANDOM$RANDOM" -d "$3"
}
level_of() { # KEY -> the tenant's level
  curl -s -f -H "X-API-Key: $1" "$base/v1/degradation" | grep -o '"level":[0-9]' | head -1 | cut -d: -f2
}
wait_level() { # KEY LEVEL
  for _ in $(seq 1 200); do
    [ "$(level_of "$1")" = "$2" ] && return 0
    sleep 0.05
  done
  fail "tenant of $1 did not reach level $2 (at $(level_of "$1"))"
}

start
[ "$(level_of acme-key)" = 0 ] || fail "acme starts at $(level_of acme-key)"
[ "$(call acme-key /v1/entities/ledger/l1/recent '{}')" = 200 ] || fail "recent at 0: $(cat "$tmp/body")"
curl -s -f -X POST "$v/_vendor/mode" -d '{"mode": "down"}' > /dev/null || fail "vendor mode"
for i in 1 2 3; do
  [ "$(call acme-key /v1/entities/webhook/w1/deliver '{"tool": "pay"}')" = 503 ] || fail "deliver $i: $(cat "$tmp/body")"
done
wait_level acme-key 2
[ "$(level_of globex-key)" = 0 ] || fail "globex moved with acme"
code=$(curl -s -D "$tmp/headers" -o "$tmp/body" -w '%{http_code}' -X POST "$base/v1/entities/ledger/l1/recent" \
  -H 'X-API-Key: acme-key' -H 'Content-Type: application/json' -d '{}')
[ "$code" = 503 ] || fail "recent at 2 answered $code"
grep -q '"code":"DEGRADED"' "$tmp/body" || fail "body $(cat "$tmp/body")"
grep -q '"feature":"reports"' "$tmp/body" || fail "body $(cat "$tmp/body")"
grep -qi '^retry-after: 9' "$tmp/headers" || fail "no Retry-After: $(cat "$tmp/headers")"
[ "$(call globex-key /v1/entities/ledger/l1/recent '{}')" = 200 ] || fail "globex refused"
# Read whole before grep -q, which stops at the first match: under pipefail, curl writing into a
# closed pipe (SIGPIPE, exit 23) would fail a check that matched.
health=$(curl -s -f "$base/healthz") || fail "healthz"
grep -q '"tenants":{"acme":2}' <<< "$health" || fail "healthz $health"
metrics=$(curl -s -f "$base/metrics") || fail "metrics"
grep -q '^factum_degradation_level{tenant="acme"} 2$' <<< "$metrics" || fail "metrics"
curl -s -f -H 'X-API-Key: acme-key' "$base/v1/entities/factum.runtime/degradation/facts?type=lifecycle" |
  grep -q '"subtype":"degradation_level_changed"' || fail "no lifecycle fact"

# An operator's floor: scope operate only, kept across a restart.
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$base/v1/degradation" -H 'X-API-Key: acme-key' \
  -H 'Content-Type: application/json' -d '{"level": 4, "reason": "drill"}')
[ "$code" = 403 ] || fail "a write key set a floor: $code"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -X PUT "$base/v1/degradation" -H 'X-API-Key: acme-op' \
  -H 'Content-Type: application/json' -d '{"level": 4, "reason": "drill"}')
[ "$code" = 200 ] || fail "floor answered $code: $(cat "$tmp/body")"
[ "$(call acme-key /v1/entities/ledger/l1/append '{"type": "x"}')" = 503 ] || fail "append ran at 4"
stop
start
wait_level acme-key 4
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$base/v1/degradation" -H 'X-API-Key: acme-op' \
  -H 'Content-Type: application/json' -d '{"level": null, "reason": "drill over"}')
[ "$code" = 200 ] || fail "removing the floor answered $code"
# The breaker is in the entity's file: it is open again once w1 loads it; reset it.
curl -s -f -X POST "$v/_vendor/mode" -d '{"mode": "ok"}' > /dev/null || fail "vendor mode"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'X-API-Key: acme-op' \
  "$base/v1/entities/webhook/w1/breakers/pay/reset")" = 200 ] || fail "breaker reset"
wait_level acme-key 0
[ "$(call acme-key /v1/entities/ledger/l1/recent '{}')" = 200 ] || fail "recent after recovery"
stop
stop_process "$vpid" 10
vpid=""
echo "serve_degradation: ok"
