#!/usr/bin/env bash
# stream_curl.sh: the fact stream of the real `factum serve` binary read by curl (docs/http-api.md,
# "Following facts"): a bad key and an unknown entity answer problem+json; curl -N follows an
# entity while facts are appended (each arrives as `id: <seq>` with its JSON); a second curl
# resumes with Last-Event-ID and gets only what came after it. The server is stopped by pid.
# Usage: stream_curl.sh PATH/TO/factum
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: stream_curl.sh PATH/TO/factum}
tmp=$(mktemp -d)
pid=""
follower=""
cleanup() {
  kill_processes "$follower" "$pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "stream_curl: FAIL: $*" >&2
  echo "--- server log:" >&2
  cat "$tmp/err.log" >&2 || true
  exit 1
}

key_hash=$(printf %s stream-key | sha256sum | cut -d' ' -f1)
cat > "$tmp/serve.json" <<JSON
{
  "tenants": {"acme": {"api_keys": ["sha256:$key_hash"]}},
  "types": ["ledger"],
  "limits": {"stream_keepalive_ms": 200}
}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "$wait_error"
base="http://127.0.0.1:$port"
stream="$base/v1/entities/ledger/f1/facts/stream"

append() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/v1/entities/ledger/f1/append" \
    -H 'X-API-Key: stream-key' -H 'Content-Type: application/json' -H "Idempotency-Key: k-$1" \
    -d "{\"type\":\"note\",\"data\":{\"n\":$1}}")
  [ "$code" = 200 ] || fail "append $1 answered $code"
}

# Refusals come before the stream, as problem+json.
code=$(curl -s -o "$tmp/p.json" -w '%{http_code} %{content_type}' "$stream" -H 'X-API-Key: nope')
[ "$code" = "401 application/problem+json" ] || fail "a bad key answered $code"
code=$(curl -s -o "$tmp/p.json" -w '%{http_code}' "$stream" -H 'X-API-Key: stream-key')
[ "$code" = 404 ] || fail "an unwritten entity answered $code"
grep -q '"code":"ENTITY_NOT_FOUND"' "$tmp/p.json" || fail "404 body $(cat "$tmp/p.json")"

# Follow while appending: every fact arrives once, in order.
append 1
curl -s -N "$stream" -H 'X-API-Key: stream-key' > "$tmp/events" &
follower=$!
for n in 2 3 4 5; do append $n; done
for _ in $(seq 1 100); do
  [ "$(grep -c '^id: ' "$tmp/events" || true)" -ge 5 ] && break
  sleep 0.05
done
[ "$(grep '^id: ' "$tmp/events" | tr -d '\n')" = "id: 1id: 2id: 3id: 4id: 5" ] ||
  fail "the follower got: $(cat "$tmp/events")"
grep '^data: ' "$tmp/events" | sed -n 3p | grep -q '"seq":3' || fail "event 3's data"
grep -q '^: keep-alive' "$tmp/events" || {
  for _ in $(seq 1 40); do grep -q '^: keep-alive' "$tmp/events" && break; sleep 0.05; done
  grep -q '^: keep-alive' "$tmp/events" || fail "no keep-alive comment"
}
kill "$follower"
wait "$follower" 2>/dev/null || true
follower=""

# Resume after 3: only 4, 5 and what comes next.
curl -s -N "$stream" -H 'X-API-Key: stream-key' -H 'Last-Event-ID: 3' > "$tmp/resumed" &
follower=$!
append 6
for _ in $(seq 1 100); do
  [ "$(grep -c '^id: ' "$tmp/resumed" || true)" -ge 3 ] && break
  sleep 0.05
done
[ "$(grep '^id: ' "$tmp/resumed" | tr -d '\n')" = "id: 4id: 5id: 6" ] ||
  fail "the resumed stream got: $(cat "$tmp/resumed")"
kill "$follower"
wait "$follower" 2>/dev/null || true
follower=""

metrics=$(curl -s "$base/metrics")
grep -q '^factum_fact_streams_accepted_total 2$' <<< "$metrics" ||
  fail "streams accepted: $(grep fact_stream <<< "$metrics")"

stop_process "$pid" 30
pid=""
[ "$stop_rc" -eq 0 ] || fail "serve exited $stop_rc after SIGTERM"
echo "stream_curl: ok"
