#!/usr/bin/env bash
# serve_smoke.sh: end-to-end check of the real `factum serve` binary with curl: start on a free
# port (listen port 0; the port is read from the start log line) with a temp data dir, drive a
# few requests (up to the tenant's quota of entities) and the chat example's page, check a bad
# config exits 2, then SIGTERM by pid and expect exit code 0.
# Usage: serve_smoke.sh PATH/TO/factum
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: serve_smoke.sh PATH/TO/factum}
tmp=$(mktemp -d)
pid=""
cleanup() {
  kill_processes "$pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "serve_smoke: FAIL: $*" >&2
  echo "--- server log:" >&2
  cat "$tmp/err.log" >&2 || true
  exit 1
}

key_hash=$(printf %s smoke-key | sha256sum | cut -d' ' -f1)
cat > "$tmp/serve.json" <<JSON
{
  "listen": "127.0.0.1:8080",
  "data_dir": "$tmp/unused",
  "tenants": {"acme": {"api_keys": ["sha256:$key_hash"], "quota": {"max_entities": 2}}},
  "types": ["ledger", "counter", "room"]
}
JSON

# A bad configuration: a clear message on stderr and exit code 2.
echo '{"tenants": {}, "bogus": 1}' > "$tmp/bad.json"
set +e
"$factum" serve --config "$tmp/bad.json" --data "$tmp/d" 2> "$tmp/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad config exited $rc, expected 2"
grep -q "bad configuration" "$tmp/bad.err" ||
  fail "no message for a bad config: $(cat "$tmp/bad.err")"
# A bad quota: the message names its path.
echo '{"tenants": {"acme": {"api_keys": ["sha256:'"$key_hash"'"], "quota": {"max_entities": -1}}}}' \
  > "$tmp/bad.json"
set +e
"$factum" serve --config "$tmp/bad.json" --data "$tmp/d" 2> "$tmp/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad quota exited $rc, expected 2"
grep -q "tenants.acme.quota.max_entities" "$tmp/bad.err" ||
  fail "no path in the message for a bad quota: $(cat "$tmp/bad.err")"

# Started, and waited for (bounded) until the start line carries the bound port.
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "$wait_error"
base="http://127.0.0.1:$port"

code=$(curl -s -o "$tmp/h.json" -w '%{http_code}' "$base/healthz")
[ "$code" = 200 ] || fail "healthz answered $code"
grep -q '"status":"ok"' "$tmp/h.json" || fail "healthz body $(cat "$tmp/h.json")"

post() {
  curl -s -D "$tmp/headers" -o "$tmp/body" -w '%{http_code}' -X POST "$base$1" \
    -H 'X-API-Key: smoke-key' -H 'Content-Type: application/json' "${@:3}" -d "$2"
}
code=$(post /v1/entities/ledger/s1/append '{"type":"invocation","data":{"n":1}}' \
  -H 'Idempotency-Key: smoke-1')
[ "$code" = 200 ] || fail "append answered $code: $(cat "$tmp/body")"
grep -q '"seq":1' "$tmp/body" || fail "append body $(cat "$tmp/body")"
code=$(post /v1/entities/ledger/s1/append '{"type":"invocation","data":{"n":1}}' \
  -H 'Idempotency-Key: smoke-1')
[ "$code" = 200 ] || fail "replay answered $code"
grep -qi '^Idempotent-Replayed: true' "$tmp/headers" || fail "replay not marked"
code=$(post /v1/entities/ledger/s1/append '{"type":"invocation"}')
[ "$code" = 400 ] || fail "append without a key answered $code"
code=$(post /v1/entities/counter/c1/add '{"by":5}')
[ "$code" = 200 ] || fail "counter add answered $code"
# A third entity is over acme's quota of two: refused, and no file made.
code=$(post /v1/entities/counter/c2/add '{"by":5}')
[ "$code" = 429 ] || fail "a third entity answered $code: $(cat "$tmp/body")"
grep -q '"code":"TENANT_QUOTA_EXCEEDED"' "$tmp/body" || fail "429 body $(cat "$tmp/body")"
[ "$(find "$tmp/data/entities" -name '*.db' | wc -l)" -eq 2 ] || fail "a file was made"
code=$(curl -s -o "$tmp/facts" -w '%{http_code}' -H 'X-API-Key: smoke-key' \
  "$base/v1/entities/ledger/s1/facts?type=invocation&limit=10")
[ "$code" = 200 ] || fail "facts answered $code"
[ "$(grep -o '"seq":' "$tmp/facts" | wc -l)" -eq 1 ] || fail "facts: $(cat "$tmp/facts")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/entities/ledger/s1/facts")
[ "$code" = 401 ] || fail "no API key answered $code"
# The chat example's page (the configuration hosts `room`): compiled in, no API key, its headers.
code=$(curl -s -D "$tmp/headers" -o "$tmp/page" -w '%{http_code}' "$base/examples/chat")
[ "$code" = 200 ] || fail "the chat page answered $code"
grep -qi "^Content-Type: text/html; charset=utf-8" "$tmp/headers" || fail "page: $(cat "$tmp/headers")"
grep -qi "^Content-Security-Policy: default-src 'none';" "$tmp/headers" ||
  fail "page without its CSP: $(cat "$tmp/headers")"
grep -qi '^X-Content-Type-Options: nosniff' "$tmp/headers" || fail "page without nosniff"
grep -q 'factum-key\.' "$tmp/page" || fail "not the chat page: $(head -c 300 "$tmp/page")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/examples/nothing")
[ "$code" = 404 ] || fail "an unknown path answered $code"
curl -s -o "$tmp/metrics" "$base/metrics" || fail "metrics unreachable"
grep -q '^factum_facts_total 2$' "$tmp/metrics" || fail "metrics: $(grep facts_total "$tmp/metrics")"

stop_process "$pid" 30
pid=""
[ "$stop_rc" -eq 0 ] || fail "exit code after SIGTERM was $stop_rc"
grep -q '"event":"stopped"' "$tmp/err.log" || fail "no stopped line"
echo "serve_smoke: ok (port $port)"
