# driver.sh: what the example scenarios share (sourced, bash): arguments, a temp directory,
# starting the fake vendor and `factum serve` on free loopback ports and stopping them by pid,
# HTTP calls with curl, checks with jq, bounded polling, and the closing `factum inspect` hints.
# Every wait is bounded; every process started here is stopped on exit.
#
# A scenario calls: ex_setup NAME "$@"   (--factum PATH --vendor PATH [--data DIR] [--quiet])

ex_setup() {
  EX_NAME=$1
  shift
  FACTUM="" VENDOR_BIN="" EX_DATA="" EX_QUIET=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --factum) FACTUM=$2; shift 2 ;;
      --vendor) VENDOR_BIN=$2; shift 2 ;;
      --data) EX_DATA=$2; shift 2 ;;
      --quiet) EX_QUIET=1; shift ;;
      *) echo "$EX_NAME: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  [ -x "$FACTUM" ] || { echo "$EX_NAME: --factum PATH to the factum binary is required" >&2; exit 2; }
  command -v jq > /dev/null || { echo "$EX_NAME: jq is required (scripts/install-deps)" >&2; exit 2; }
  command -v curl > /dev/null || { echo "$EX_NAME: curl is required" >&2; exit 2; }
  EX_TMP=$(mktemp -d)
  EX_KEEP_DATA=1
  if [ -z "$EX_DATA" ]; then
    EX_DATA=$EX_TMP/data
    EX_KEEP_DATA=0
  else
    # Emptied first, but only a directory an earlier run made (it carries a marker file).
    if [ -d "$EX_DATA" ] && [ -n "$(ls -A "$EX_DATA")" ]; then
      [ -f "$EX_DATA/.factum-example" ] ||
        { echo "$EX_NAME: $EX_DATA is not empty and not an example's data; not touching it" >&2; exit 2; }
      rm -rf "$EX_DATA"
    fi
    mkdir -p "$EX_DATA"
    EX_DATA=$(cd "$EX_DATA" && pwd)
    echo "$EX_NAME" > "$EX_DATA/.factum-example"
  fi
  SERVE_PID="" VENDOR_PID=""
  EX_KEY=example-key
  trap ex_cleanup EXIT
}

ex_cleanup() {
  local rc=$?
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2> /dev/null; then
    kill -KILL "$SERVE_PID" 2> /dev/null || true
    wait "$SERVE_PID" 2> /dev/null || true
  fi
  if [ -n "$VENDOR_PID" ] && kill -0 "$VENDOR_PID" 2> /dev/null; then
    kill -TERM "$VENDOR_PID" 2> /dev/null || true
    wait "$VENDOR_PID" 2> /dev/null || true
  fi
  rm -rf "$EX_TMP"
  exit "$rc"
}

ex_fail() {
  echo "$EX_NAME: FAIL: $*" >&2
  if [ -f "$EX_TMP/body" ]; then
    echo "--- last response ($EX_CODE):" >&2
    head -c 2000 "$EX_TMP/body" >&2
    echo >&2
  fi
  if [ -f "$EX_TMP/serve.log" ]; then
    echo "--- server log (tail):" >&2
    tail -n 20 "$EX_TMP/serve.log" >&2
  fi
  exit 1
}

ex_say() { [ "$EX_QUIET" = 1 ] || echo "$*"; }
ex_step() { ex_say ""; ex_say "==> $*"; }

# Waits (bounded, SECONDS) until COMMAND... succeeds. Polls every $EX_POLL seconds (0.05).
ex_wait() {
  local what=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || ex_fail "timed out after ${secs}s waiting for: $what"
    sleep "${EX_POLL:-0.05}"
  done
}

ex_start_vendor() {
  [ -x "$VENDOR_BIN" ] || ex_fail "--vendor PATH to factum-fake-vendor is required"
  "$VENDOR_BIN" --listen 127.0.0.1:0 --port-file "$EX_TMP/vendor.port" > /dev/null \
    2> "$EX_TMP/vendor.log" &
  VENDOR_PID=$!
  ex_wait "the fake vendor's port" 10 test -s "$EX_TMP/vendor.port"
  VENDOR_URL="http://127.0.0.1:$(cat "$EX_TMP/vendor.port")"
}

# ex_vendor PATH [BODY]: a control request to the fake vendor (GET without a body).
ex_vendor() {
  local code
  if [ $# -ge 2 ]; then
    code=$(curl -s -o "$EX_TMP/vendor.out" -w '%{http_code}' -X POST "$VENDOR_URL$1" \
      -H 'Content-Type: application/json' -d "$2")
  else
    code=$(curl -s -o "$EX_TMP/vendor.out" -w '%{http_code}' "$VENDOR_URL$1")
  fi
  [ "$code" = 200 ] || ex_fail "vendor $1 answered $code: $(cat "$EX_TMP/vendor.out")"
  cat "$EX_TMP/vendor.out"
}

# ex_config TEMPLATE OUT: the example's serve config with the vendor's URL filled in.
ex_config() {
  sed -e "s#@VENDOR_URL@#${VENDOR_URL:-http://127.0.0.1:9}#g" "$1" > "$2"
}

ex_start_serve() {
  : > "$EX_TMP/serve.log"
  "$FACTUM" serve --config "$1" --listen 127.0.0.1:0 --data "$EX_DATA" 2>> "$EX_TMP/serve.log" &
  SERVE_PID=$!
  local port=""
  local deadline=$((SECONDS + 15))
  while [ -z "$port" ]; do
    port=$(grep -o '"port":[0-9]*' "$EX_TMP/serve.log" 2> /dev/null | tail -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    kill -0 "$SERVE_PID" 2> /dev/null || ex_fail "factum serve exited early"
    [ "$SECONDS" -lt "$deadline" ] || ex_fail "factum serve did not start within 15 s"
    sleep 0.05
  done
  BASE="http://127.0.0.1:$port"
}

ex_stop_serve() {
  kill -TERM "$SERVE_PID"
  local rc=0
  wait "$SERVE_PID" || rc=$?
  SERVE_PID=""
  [ "$rc" -eq 0 ] || ex_fail "factum serve exited $rc after SIGTERM"
}

# ex_call TYPE/ID/METHOD BODY [IDEMPOTENCY-KEY]: POST a method call. Sets EX_CODE; the body is
# in $EX_TMP/body (ex_body), the headers in $EX_TMP/headers.
ex_call() {
  local args=(-s -D "$EX_TMP/headers" -o "$EX_TMP/body" -w '%{http_code}' -X POST
    "$BASE/v1/entities/$1" -H "X-API-Key: $EX_KEY" -H 'Content-Type: application/json'
    -d "$2")
  [ $# -ge 3 ] && args+=(-H "Idempotency-Key: $3")
  EX_CODE=$(curl "${args[@]}")
}

# ex_post PATH: POST without a body (operator routes).
ex_post() {
  EX_CODE=$(curl -s -D "$EX_TMP/headers" -o "$EX_TMP/body" -w '%{http_code}' -X POST \
    "$BASE$1" -H "X-API-Key: $EX_KEY")
}

# ex_get PATH: GET with the API key. Sets EX_CODE and the body.
ex_get() {
  EX_CODE=$(curl -s -D "$EX_TMP/headers" -o "$EX_TMP/body" -w '%{http_code}' "$BASE$1" \
    -H "X-API-Key: $EX_KEY")
}

ex_body() { cat "$EX_TMP/body"; }
# ex_jq [OPTIONS] FILTER: jq -r over the last body.
ex_jq() { jq -r "$@" "$EX_TMP/body"; }

# ex_expect CODE WHAT: the last answer had status CODE.
ex_expect() { [ "$EX_CODE" = "$1" ] || ex_fail "$2: expected HTTP $1, got $EX_CODE"; }

# ex_check JQ-FILTER WHAT: the filter over the last body is true.
ex_check() {
  [ "$(jq -r "$1" "$EX_TMP/body")" = true ] || ex_fail "$2 (jq: $1)"
}

ex_replayed() { grep -qi '^Idempotent-Replayed: true' "$EX_TMP/headers"; }

# ex_facts TYPE/ID QUERY: the entity's facts (GET .../facts?QUERY&limit=10000) as the body.
ex_facts() {
  ex_get "/v1/entities/$1/facts?limit=10000${2:+&$2}"
  ex_expect 200 "facts of $1"
}

# ex_count TYPE/ID QUERY: how many facts match.
ex_count() {
  ex_facts "$1" "$2"
  ex_jq 'length'
}

# ex_inspect ARGS...: `factum inspect` on the example's data directory.
ex_inspect() { "$FACTUM" inspect "$1" --data "$EX_DATA" "${@:2}"; }

# ex_hints ENTITY...: prints the inspect commands that show what happened.
ex_hints() {
  local shown=$EX_DATA
  [ "$EX_KEEP_DATA" = 1 ] || shown="<data dir; run with --data DIR to keep it>"
  echo ""
  echo "What happened, fact by fact (factum inspect reads the data directory read-only):"
  for e in "$@"; do
    echo "  $FACTUM inspect facts --data $shown $e --table"
  done
  for line in "${EX_HINTS[@]}"; do
    echo "  $FACTUM inspect $line" | sed "s#@DATA@#$shown#g"
  done
}
