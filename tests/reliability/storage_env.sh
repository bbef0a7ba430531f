#!/usr/bin/env bash
# storage_env.sh: the real `factum serve` on a real small filesystem (a 2 MiB tmpfs): the disk
# fills up under appends (503 STORAGE_FULL, nothing acknowledged lost, the refused key runs
# once after the filesystem grows), then the data directory turns read-only under the running
# server (a read-only bind mount: a new entity answers 503, /healthz still answers), a start on
# a read-only data directory fails with a clear message, and after remounting read-write every
# hash chain verifies and every acknowledged fact is there once.
# Needs root and permission to mount (a tmpfs); without them it exits 77, which ctest reports
# as skipped. Root ignores file permissions, so a chmod'ed directory would prove nothing.
# Usage: storage_env.sh PATH/TO/factum
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
factum=${1:?usage: storage_env.sh PATH/TO/factum}
if [ "$(id -u)" != 0 ]; then
  echo "storage_env: skipped: needs root to mount a tmpfs"
  exit 77
fi
tmp=$(mktemp -d)
mnt=$tmp/mnt
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=2m tmpfs "$mnt" 2> "$tmp/mount.err"; then
  echo "storage_env: skipped: cannot mount a tmpfs: $(cat "$tmp/mount.err")"
  rm -rf "$tmp"
  exit 77
fi
pid=""
bound=0
cleanup() {
  kill_processes "$pid"
  [ "$bound" = 1 ] && umount "$mnt/data" 2>/dev/null
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "storage_env: FAIL: $*" >&2
  echo "--- server log:" >&2
  tail -20 "$tmp/err.log" >&2 || true
  exit 1
}

key_hash=$(printf %s env-key | sha256sum | cut -d' ' -f1)
# No spare files: their maker would take space and give it back on its own (a batch that fails
# on the full disk is deleted), so "the disk is still full" would depend on its timing (a retry
# once answered 200 here). The maker's own failures are tested in the storage suite.
cat > "$tmp/serve.json" <<JSON
{
  "listen": "127.0.0.1:0",
  "data_dir": "$mnt/data",
  "tenants": {"acme": {"api_keys": ["sha256:$key_hash"]}},
  "types": ["ledger"],
  "idle_timeout_ms": 2000,
  "spare_files": 0
}
JSON

start() {
  start_server "$tmp/err.log" 15 "$factum" serve --config "$tmp/serve.json" || fail "$wait_error"
  base="http://127.0.0.1:$port"
}
stop() {
  stop_process "$pid" 30
  pid=""
}
pad=$(head -c 24000 /dev/zero | tr '\0' 'p')
post() { # entity key -> sets code, body (code 000 when the server does not answer)
  printf '{"type":"invocation","data":{"k":"%s","pad":"%s"}}' "$2" "$pad" > "$tmp/req"
  : > "$tmp/body"
  code=$(curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X POST \
    "$base/v1/entities/ledger/$1/append" -H 'X-API-Key: env-key' \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $2" --data-binary @"$tmp/req" ||
    true)
  body=$(cat "$tmp/body")
}
healthz() { curl -s -o /dev/null -w '%{http_code}' "$base/healthz" || true; }

metric() { curl -s "$base/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

# -- 1. the disk fills up --
start
# An entity that hibernates before the disk fills: activated again on the full disk below.
post sleeper s1
[ "$code" = 200 ] || fail "sleeper answered $code: $body"
# (2 s: long enough that "other" below stays open across section 2's few requests.)
for _ in $(seq 1 400); do
  [ "$(metric factum_hibernations_total)" -ge 1 ] 2>/dev/null && break
  sleep 0.05
done
[ "$(metric factum_hibernations_total)" -ge 1 ] || fail "the sleeper did not hibernate within 20 s"
acked=()
refused=""
for i in $(seq 1 300); do
  post fill "f$i"
  if [ "$code" = 200 ]; then
    acked+=("f$i")
  else
    refused="f$i"
    break
  fi
done
[ -n "$refused" ] || fail "a 2 MiB filesystem never filled up"
[ "$code" = 503 ] || fail "full disk answered $code: $body"
echo "$body" | grep -q '"code":"STORAGE_FULL"' || fail "full disk: $body"
grep -qi '^content-type: application/problem+json' "$tmp/headers" || fail "not problem+json"
echo "storage_env: disk full after ${#acked[@]} appends: $code $(echo "$body" | grep -o '"code":"[A-Z_]*"')"
[ "$(healthz)" = 200 ] || fail "healthz with a full disk"
# The refused key is still refused while the disk is full (released, not stored).
post fill "$refused"
[ "$code" = 503 ] || fail "retry on a full disk answered $code: $body"
# The last free blocks taken too: the sleeper's activation and its append find no block. An
# error (503) and a server that goes on, not a crash.
dd if=/dev/zero of="$mnt/filler" bs=4k 2> /dev/null || true
post sleeper s2
[ "$code" = 503 ] || fail "activation on a full disk answered $code: $body"
grep -qi '^content-type: application/problem+json' "$tmp/headers" || fail "not problem+json"
echo "storage_env: activation of a hibernated entity on a full disk: $code $(echo "$body" | grep -o '"code":"[A-Z_]*"'): $(echo "$body" | grep -o '"detail":"[^"]*"')"
kill -0 "$pid" 2> /dev/null || fail "the server died activating an entity on a full disk"
[ "$(healthz)" = 200 ] || fail "healthz after an activation on a full disk"
rm -f "$mnt/filler"
# The filesystem grows: the refused key runs now, once, without a server restart.
mount -o remount,size=16m "$mnt"
post sleeper s2
[ "$code" = 200 ] || fail "the sleeper after growing answered $code: $body"
grep -qi '^idempotent-replayed' "$tmp/headers" && fail "the sleeper's refused key was replayed"
post fill "$refused"
[ "$code" = 200 ] || fail "retry after growing answered $code: $body"
grep -qi '^idempotent-replayed' "$tmp/headers" && fail "the refused key was replayed"
acked+=("$refused")
post fill after-grow
[ "$code" = 200 ] || fail "append after growing answered $code"
acked+=(after-grow)

# -- 2. the data directory turns read-only under the running server --
# (A remount of the whole filesystem read-only is refused, EBUSY, while the server holds files
# open for writing; a read-only bind mount over the data directory applies to every file opened
# from now on, while files already open keep their descriptors.)
post other o1
[ "$code" = 200 ] || fail "other entity answered $code"
acked_other=(o1)
mount --bind -o ro "$mnt/data" "$mnt/data" || fail "read-only bind mount"
bound=1
post newent n1
[ "$code" = 503 ] || fail "a new entity on a read-only data dir answered $code: $body"
echo "$body" | grep -q '"code":"STORAGE_READ_ONLY"' || fail "read-only: $body"
echo "storage_env: new entity on a read-only data dir: $code $(echo "$body" | grep -o '"code":"[A-Z_]*"'): $(echo "$body" | grep -o '"detail":"[^"]*"')"
[ "$(healthz)" = 200 ] || fail "healthz on a read-only data dir"
post other o2 # already open before: its descriptor is still writable
echo "storage_env: an entity opened before: $code"
[ "$code" = 200 ] && acked_other+=(o2)
umount "$mnt/data"
bound=0
post newent n1
[ "$code" = 200 ] || fail "the key refused on a read-only data dir answered $code: $body"
grep -qi '^idempotent-replayed' "$tmp/headers" && fail "the refused key was replayed"
stop
[ "$stop_rc" = 0 ] || fail "exit $stop_rc after SIGTERM"

# -- 3. starting on a read-only data directory: a clear error, at once --
mount -o remount,ro "$mnt"
set +e
timeout 20 "$factum" serve --config "$tmp/serve.json" 2> "$tmp/ro.log"
ro_rc=$?
set -e
[ "$ro_rc" != 0 ] && [ "$ro_rc" != 124 ] || fail "start on a read-only data dir exited $ro_rc"
grep -q '"event":"start_failed"' "$tmp/ro.log" || fail "no start_failed line: $(cat "$tmp/ro.log")"
grep -q 'READ_ONLY: .*Read-only file system' "$tmp/ro.log" || fail "start failure without its reason: $(cat "$tmp/ro.log")"
echo "storage_env: start on a read-only data dir: exit $ro_rc: $(grep -o '"detail":"[^"]*"' "$tmp/ro.log")"

# -- 4. read-write again: everything acknowledged is there once, chains verify --
mount -o remount,rw "$mnt"
start
post fill after-ro
[ "$code" = 200 ] || fail "append after read-write again answered $code: $body"
acked+=(after-ro)
stop
[ "$stop_rc" = 0 ] || fail "exit $stop_rc after SIGTERM"
"$factum" inspect verify --data "$mnt/data" > "$tmp/verify" 2>&1 || fail "verify: $(cat "$tmp/verify")"
"$factum" inspect facts --data "$mnt/data" acme/ledger/fill --type invocation --json --limit 0 \
  > "$tmp/fill.jsonl" 2> "$tmp/inspect.err" || fail "inspect: $(cat "$tmp/inspect.err")"
for k in "${acked[@]}"; do
  n=$(grep -c "\"idempotency_key\":\"$k\"" "$tmp/fill.jsonl" || true)
  [ "$n" = 1 ] || fail "key $k has $n facts"
done
total=$(wc -l < "$tmp/fill.jsonl")
[ "$total" = "${#acked[@]}" ] || fail "$total invocation facts for ${#acked[@]} acknowledged keys"
"$factum" inspect facts --data "$mnt/data" acme/ledger/other --type invocation --json --limit 0 \
  > "$tmp/other.jsonl" || fail "inspect other"
[ "$(wc -l < "$tmp/other.jsonl")" = "${#acked_other[@]}" ] || fail "other: $(cat "$tmp/other.jsonl")"
"$factum" inspect facts --data "$mnt/data" acme/ledger/sleeper --type invocation --json --limit 0 \
  > "$tmp/sleeper.jsonl" || fail "inspect sleeper"
[ "$(wc -l < "$tmp/sleeper.jsonl")" = 2 ] || fail "sleeper: $(cat "$tmp/sleeper.jsonl")"
echo "storage_env: ok: ${#acked[@]} + ${#acked_other[@]} + 2 acknowledged facts present once, chains verify"
