#!/usr/bin/env bash
# http_smoke.sh: `factum bench` in http mode against a real `factum serve` started here on a free
# port (listen port 0; the port is read from the start log line) with a temp data dir: append
# (closed loop), replay, an open-loop append and appends of facts large enough to span several
# facts pages, each with --json, --server-pid and the verification over the facts route; then
# SIGTERM by pid and `factum inspect verify` on the stopped server's data.
# Usage: http_smoke.sh PATH/TO/factum
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: http_smoke.sh PATH/TO/factum}
tmp=$(mktemp -d)
pid=""
cleanup() {
  kill_processes "$pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "http_smoke: FAIL: $*" >&2
  echo "--- server log:" >&2
  tail -20 "$tmp/err.log" >&2 || true
  exit 1
}

cat > "$tmp/serve.json" <<JSON
{
  "dev": true,
  "durability": "normal",
  "tenants": {"bench": {"api_keys": ["bench-key"]}},
  "types": ["ledger"]
}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "$wait_error"
url="http://127.0.0.1:$port"

bench() {
  "$factum" bench "$@" --mode http --url "$url" --api-key bench-key --server-pid "$pid" --json \
    --no-progress > "$tmp/out.json" 2> "$tmp/bench.err" ||
    fail "bench $* exited $?: $(cat "$tmp/bench.err") $(cat "$tmp/out.json")"
}
check() {  # check JQ_EXPRESSION: must be true on the last report
  jq -e "$1" "$tmp/out.json" > /dev/null || fail "expected $1 in $(cat "$tmp/out.json")"
}

bench append --entities 4 --count 300 --concurrency 4
check '.ok == 300 and .errors == 0 and .verify.ok == true and .verify.found == 300'
check '.verify.duplicates == 0 and .latency_us.p99 > 0 and .server.peak_rss_kib > 0'
check '.server.cpu_s >= 0 and .server.includes_client == false'

bench replay --entities 2 --keys 20 --count 200 --concurrency 4
check '.ok == 200 and .replayed == 200 and .verify.ok == true and .verify.acked == 20'

bench append --entities 2 --count 100 --rate 500 --concurrency 2
check '.loop == "open" and .ok == 100 and .verify.ok == true and .duration_s >= 0.19'

# Facts of 900,000 bytes: the server ends a facts page at about 4 MiB (max_facts_bytes), i.e.
# after 4 of them, so the verification must follow the pages past a short one to find all 10.
bench append --entities 1 --count 10 --payload 900000 --concurrency 2
check '.ok == 10 and .verify.ok == true and .verify.found == 10 and .verify.missing == 0'

# A wrong API key: every request fails, the bench says so and exits 1.
set +e
"$factum" bench append --mode http --url "$url" --api-key wrong --count 5 --json --no-progress \
  > "$tmp/out.json" 2>/dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a bench with a wrong key exited $rc, expected 1"
check '.errors == 5 and .codes.UNAUTHORIZED == 5'

stop_process "$pid" 30
pid=""
[ "$stop_rc" -eq 0 ] || fail "server exit code after SIGTERM was $stop_rc"
"$factum" inspect verify --data "$tmp/data" > "$tmp/verify.out" 2>&1 ||
  fail "inspect verify: $(cat "$tmp/verify.out")"
echo "http_smoke: ok (port $port)"
