#!/usr/bin/env bash
# serve_tools.sh: the real `factum serve` with a tool pointing at a real `factum-fake-vendor`
# process on loopback: a webhook delivered over HTTP is retried through a 503 and a 429 and
# then delivered; the entity's error and cost facts match what the vendor saw and charged, every
# attempt carried the same Idempotency-Key; a bad tools config exits 2. Both processes are
# started here (free ports) and stopped by pid.
# Usage: serve_tools.sh PATH/TO/factum PATH/TO/factum-fake-vendor
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: serve_tools.sh FACTUM FAKE_VENDOR}
vendor=${2:?usage: serve_tools.sh FACTUM FAKE_VENDOR}
tmp=$(mktemp -d)
pid=""
vpid=""
cleanup() {
  kill_processes "$pid" "$vpid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "serve_tools: FAIL: $*" >&2
  echo "--- server log:" >&2
  cat "$tmp/err.log" >&2 || true
  exit 1
}

start_vendor "$vendor" "$tmp" || fail "$wait_error"
vport=$(cat "$tmp/vendor.port")
[ "$(cat "$tmp/vendor.out")" = "$vport" ] || fail "vendor printed '$(cat "$tmp/vendor.out")'"
v=$vendor_url

# A bad tools section: exit 2 and the offending key named.
cat > "$tmp/bad.json" <<JSON
{"data_dir": "$tmp/unused", "dev": true, "tenants": {"acme": {"api_keys": ["k"]}},
 "tools": {"hook": {"url": "https://127.0.0.1:$vport/hooks"}}}
JSON
set +e
"$factum" serve --config "$tmp/bad.json" 2> "$tmp/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad tools config exited $rc, expected 2"
grep -q "bad configuration: .*tools.hook.url: " "$tmp/bad.err" || fail "message: $(cat "$tmp/bad.err")"

cat > "$tmp/serve.json" <<JSON
{
  "listen": "127.0.0.1:0",
  "data_dir": "$tmp/data",
  "dev": true,
  "tenants": {"acme": {"api_keys": ["tools-key"]}},
  "types": ["webhook"],
  "tools": {
    "hook": {
      "url": "$v/hooks",
      "request_timeout_ms": 3000,
      "retry": {"base_delay_ms": 10, "max_delay_ms": 50, "max_attempts": 4, "jitter": "none"},
      "price": "0.013",
      "charge_on_failure": true
    },
    "authed": {
      "url": "$v/api",
      "retry": {"max_attempts": 1},
      "auth_refresh": {"url": "$v/_vendor/token", "field": "access_token"}
    }
  }
}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" || fail "$wait_error"
base="http://127.0.0.1:$port"
grep -q '"tools":\["authed","hook"\]' "$tmp/err.log" || fail "start line does not list the tools"

ctl() { curl -s -f -X POST "$v/_vendor/$1" -d "$2" > /dev/null || fail "vendor control $1"; }
ctl mode '{"price": "0.013", "charge_failed": true}'
ctl script '{"responses": [{"status": 503}, {"status": 429, "retry_after_s": 0}]}'

code=$(curl -s -o "$tmp/body" -w '%{http_code}' -X POST "$base/v1/entities/webhook/w1/deliver" \
  -H 'X-API-Key: tools-key' -H 'Content-Type: application/json' -H 'Idempotency-Key: d-1' \
  -d '{"tool": "hook", "payload": {"to": "+15550100"}}')
[ "$code" = 200 ] || fail "deliver answered $code: $(cat "$tmp/body")"
grep -q '"attempts":3' "$tmp/body" || fail "deliver body $(cat "$tmp/body")"
grep -q '"delivered":true' "$tmp/body" || fail "deliver body $(cat "$tmp/body")"

facts() {
  curl -s -f -H 'X-API-Key: tools-key' "$base/v1/entities/webhook/w1/facts?$1&limit=100" \
    || fail "facts $1"
}
errors=$(facts "type=error" | grep -o '"error_code":"[A-Z_0-9]*"' | tr '\n' ' ')
[ "$errors" = '"error_code":"HTTP_503" "error_code":"RATE_LIMITED" ' ] || fail "errors: $errors"
costs=$(facts "type=cost" | grep -o '"amount":"[0-9.]*"' | tr '\n' ' ')
[ "$costs" = '"amount":"0.013" "amount":"0.013" "amount":"0.013" ' ] || fail "costs: $costs"

stats=$(curl -s -f "$v/_vendor/stats") || fail "vendor stats"
echo "$stats" | grep -q '"calls":3' || fail "vendor stats $stats"
echo "$stats" | grep -q '"charged_total":"0.039"' || fail "vendor stats $stats"
keys=$(echo "$stats" | grep -o '"idempotency_key":"[^"]*"' | sort -u)
[ "$(echo "$keys" | wc -l)" -eq 1 ] || fail "attempts used different keys: $keys"
echo "$keys" | grep -q '"idempotency_key":"fk_' || fail "key $keys"

# A vendor that wants a bearer token: the first call's 401 refreshes it, the call goes on.
ctl mode '{"token": "tok-1"}'
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -X POST "$base/v1/entities/webhook/w2/deliver" \
  -H 'X-API-Key: tools-key' -H 'Content-Type: application/json' -H 'Idempotency-Key: d-2' \
  -d '{"tool": "authed", "payload": {"n": 1}}')
[ "$code" = 200 ] || fail "authed deliver answered $code: $(cat "$tmp/body")"
stats=$(curl -s -f "$v/_vendor/stats") || fail "vendor stats"
echo "$stats" | grep -q '"tokens_issued":1' || fail "vendor stats after the refresh $stats"
curl -s -f -H 'X-API-Key: tools-key' \
  "$base/v1/entities/webhook/w2/facts?type=outcome&subtype=auth_refreshed" | grep -q '"after_attempt":1' ||
  fail "no auth_refreshed fact"

stop_process "$pid" 30
pid=""
[ "$stop_rc" -eq 0 ] || fail "serve exit code after SIGTERM was $stop_rc"
stop_process "$vpid" 10
vpid=""
[ "$stop_rc" -eq 0 ] || fail "vendor exit code after SIGTERM was $stop_rc"
echo "serve_tools: ok (serve $port, vendor $vport)"
