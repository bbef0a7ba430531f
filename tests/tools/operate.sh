#!/usr/bin/env bash
# operate.sh: `factum operate` against the real `factum serve` and a factum-fake-vendor process:
# a vendor that is down leaves dead letters on five entities of one tenant and one of another;
# a dry run counts them and moves nothing; a bulk discard with --limit pages through the server's
# cursor and acts on exactly that many, recording the note; the rest are discarded by a second
# run (the discarded ones skipped); another tenant's key sees only its own; one breaker is forced
# open and reset; the degradation floor is set and cleared; a key without scope operate, a
# missing --server and bad arguments exit non-zero with a message and change nothing.
# Processes are started here and stopped by pid.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: operate.sh FACTUM FAKE_VENDOR}
vendor=${2:?usage: operate.sh FACTUM FAKE_VENDOR}
tmp=$(mktemp -d)
pid=""
vpid=""
cleanup() {
  kill_processes "$pid" "$vpid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "operate: FAIL: $*" >&2
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
    "globex": {"api_keys": [{"key": "globex-op", "scopes": ["read", "write", "operate"]}]}
  },
  "types": ["webhook"],
  "tools": {"pay": {"url": "$v/pay", "retry": {"max_attempts": 1}}},
  "degradation": {"features": {"all": {"max_level": 3, "methods": ["*"]}},
                  "recover_after_ms": 0, "check_interval_ms": 50}
}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" || fail "$wait_error"
base="http://127.0.0.1:$port"
export FACTUM_API_KEY=acme-op

curl -s -f -X POST "$v/_vendor/mode" -d '{"mode": "down"}' > /dev/null || fail "vendor mode"
deliver() { # KEY ID
  curl -s -o /dev/null -w '%{http_code}' -X POST "$base/v1/entities/webhook/$2/deliver" \
    -H "X-API-Key: $1" -H 'Content-Type: application/json' -H "Idempotency-Key: d-$2" \
    -d '{"tool": "pay"}'
}
for id in w1 w2 w3 w4 w5; do
  [ "$(deliver acme-key "$id")" = 503 ] || fail "deliver $id did not fail"
done
[ "$(deliver globex-op g1)" = 503 ] || fail "deliver g1 did not fail"
count() { # KEY STATE -> dead letters of the key's tenant in that state
  curl -s -f -H "X-API-Key: $1" "$base/v1/dead-letters?state=$2" | jq '.matched'
}
[ "$(count acme-key scheduled)" = 5 ] || fail "expected 5 scheduled dead letters"

# A dry run: what would be done, nothing done.
"$factum" operate dead-letters discard --server "$base" --dry-run --json > "$tmp/dry" ||
  fail "dry run exited $?"
[ "$(tail -1 "$tmp/dry" | jq '.would_act')" = 5 ] || fail "dry run: $(cat "$tmp/dry")"
[ "$(grep -c '"dead_letter"' "$tmp/dry")" = 5 ] || fail "dry run rows: $(cat "$tmp/dry")"
[ "$(count acme-key discarded)" = 0 ] || fail "the dry run discarded something"

# Three, in pages of two: exactly three discarded, the note in their facts.
"$factum" operate dead-letters discard --server "$base" --limit 3 --page 2 --note "drill 42" \
  --json > "$tmp/three" || fail "discard --limit 3 exited $?"
[ "$(tail -1 "$tmp/three" | jq '.acted')" = 3 ] || fail "limit 3: $(cat "$tmp/three")"
[ "$(count acme-key discarded)" = 3 ] || fail "not 3 discarded"
first=$(head -1 "$tmp/three" | jq -r '.id')
curl -s -f -H 'X-API-Key: acme-key' "$base/v1/entities/webhook/$first/facts?type=lifecycle" |
  grep -q 'drill 42' || fail "no note in $first's lifecycle fact"
# The rest: the discarded ones are skipped, the two others discarded; the table's summary says so.
"$factum" operate dead-letters discard --server "$base" --table > "$tmp/rest" ||
  fail "second discard exited $?"
grep -q '^discard 2 of 5 matching; skipped 3' "$tmp/rest" || fail "summary: $(cat "$tmp/rest")"
[ "$(count acme-key discarded)" = 5 ] || fail "not all discarded"
[ "$(count globex-op discarded)" = 0 ] || fail "globex's dead letter moved with acme's"
"$factum" operate dead-letters retry --server "$base" --api-key globex-op --dry-run --json \
  > "$tmp/globex" || fail "globex dry run"
[ "$(tail -1 "$tmp/globex" | jq '.would_act')" = 1 ] || fail "globex: $(cat "$tmp/globex")"

# One dead letter, one breaker.
dl=$(curl -s -f -H 'X-API-Key: globex-op' "$base/v1/dead-letters" | jq -r '.dead_letters[0].id')
"$factum" operate dead-letter acknowledge webhook/g1 "$dl" --server "$base" --api-key globex-op \
  --json > "$tmp/ack" || fail "acknowledge exited $?"
[ "$(count globex-op acknowledged)" = 1 ] || fail "not acknowledged: $(cat "$tmp/ack")"
"$factum" operate breaker force-open webhook/w1 pay --server "$base" --note "vendor incident" \
  > /dev/null || fail "force-open exited $?"
curl -s -f -H 'X-API-Key: acme-key' "$base/v1/breakers" | grep -q '"FORCED_OPEN"' ||
  fail "breaker not forced open"
"$factum" operate breaker reset webhook/w1 pay --server "$base" > /dev/null || fail "reset"
curl -s -f -H 'X-API-Key: acme-key' "$base/v1/breakers?state=FORCED_OPEN" |
  grep -q '"not_closed":\[\]' || fail "breaker still forced open"

# The degradation floor (the breaker's move reaches the level within a check: polled, bounded).
level() { curl -s -f -H 'X-API-Key: acme-key' "$base/v1/degradation" | jq '.level'; }
wait_level() {
  for _ in $(seq 1 200); do
    [ "$(level)" = "$1" ] && return 0
    sleep 0.05
  done
  fail "level did not reach $1 (at $(level))"
}
wait_level 0
"$factum" operate degradation set 3 --server "$base" --note "drill" > /dev/null || fail "set"
[ "$(level)" = 3 ] || fail "floor not set"
"$factum" operate degradation clear --server "$base" --note "over" > /dev/null || fail "clear"
[ "$(level)" = 0 ] || fail "floor not cleared"

# Refusals: a message and a non-zero exit, nothing changed.
expect_exit() { # CODE PATTERN ARGS...
  local want=$1 pattern=$2 rc=0
  shift 2
  "$factum" operate "$@" > "$tmp/out" 2> "$tmp/msg" || rc=$?
  [ "$rc" = "$want" ] || fail "operate $* exited $rc, not $want: $(cat "$tmp/msg")"
  grep -q "$pattern" "$tmp/msg" || fail "operate $*: message $(cat "$tmp/msg")"
}
expect_exit 7 "403" dead-letters retry --server "$base" --api-key acme-key
expect_exit 2 "server URL is required" dead-letters retry
expect_exit 2 "TYPE/ID" breaker reset w1 pay --server "$base"
expect_exit 2 "LEVEL" degradation set --server "$base" --note x
expect_exit 2 "note" degradation clear --server "$base"
expect_exit 7 "INVALID_ARGUMENT" dead-letters retry --server "$base" --state nope
expect_exit 2 "loopback" dead-letters retry --server "http://192.0.2.1:1"
[ "$(count acme-key scheduled)" = 0 ] || fail "a refused run changed something"

stop_process "$pid" 30
pid=""
[ "$stop_rc" -eq 0 ] || fail "serve exited $stop_rc after SIGTERM"
stop_process "$vpid" 10
vpid=""
echo "operate: ok"
