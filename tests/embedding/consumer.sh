#!/usr/bin/env bash
# consumer.sh: factum embedded from outside its tree, as docs/embedding.md tells a newcomer.
# Installs the build into a temporary prefix (`cmake --install`), copies examples/embedding (a
# project of its own: find_package(factum), an entity type with a coroutine handler and a tool
# call, and serve_main) out of the tree, configures and builds it against that prefix, runs it
# with the fake vendor as its tool, calls it over HTTP (a retry with the same key replays), stops
# it with SIGTERM (exit 0 required) and checks its facts with the installed `factum inspect`.
# Also checks that only the public headers were installed, that pkg-config finds factum and that
# docs/embedding.md shows this very project.
# Usage: consumer.sh --build DIR --source DIR --vendor PATH. Servers are stopped by pid.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    --vendor) vendor=$2; shift 2 ;;
    *) echo "consumer: unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
pid="" vpid=""
cleanup() {
  kill_processes "$pid" "$vpid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "consumer: FAIL: $*" >&2
  for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

# 1. Install, and only the public headers.
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || fail "cmake --install failed"
for h in entities/entity.hpp entities/context.hpp runtime/runtime.hpp tools/serve.hpp version.hpp \
  error/status.hpp storage/status.hpp storage/fact.hpp entities/problems.hpp; do
  [ -f "$prefix/include/factum/$h" ] || fail "the public header factum/$h is not installed"
done
for h in storage/entity_store.hpp storage/alarm_index.hpp storage/spare_pool.hpp \
  storage/tenant_index.hpp; do
  [ ! -e "$prefix/include/factum/$h" ] || fail "the private header factum/$h was installed"
done
[ -x "$prefix/bin/factum" ] || fail "the factum executable is not installed"
PKG_CONFIG_PATH=$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig \
  pkg-config --exists factum || fail "pkg-config does not find factum"

# 2. The guide shows this project: its CMakeLists.txt (comments aside) and lines of main.cpp.
guide=$source/docs/embedding.md
project=$source/examples/embedding
diff <(awk '/^```cmake$/{f=1;next} /^```$/{f=0} f' "$guide") <(grep -v '^#' "$project/CMakeLists.txt") \
  > "$tmp/guide.diff" || fail "docs/embedding.md's CMakeLists.txt is not the project's: $(cat "$tmp/guide.diff")"
while IFS= read -r line; do
  grep -qxF -- "$line" "$project/main.cpp" || fail "docs/embedding.md shows a line main.cpp lacks: $line"
done < <(awk '/^```cpp$/{f=1;next} /^```$/{f=0} f' "$guide")

# 3. The consumer project, out of the tree, built against the prefix.
cp -r "$source/examples/embedding" "$tmp/project"
rm -rf "$tmp/project/build" "$tmp/project/data"
cmake -S "$tmp/project" -B "$tmp/project/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$tmp/configure.log" 2>&1 || fail "configure: $(tail -5 "$tmp/configure.log")"
cmake --build "$tmp/project/build" -j2 > "$tmp/build.log" 2>&1 || fail "build: $(tail -15 "$tmp/build.log")"
server=$tmp/project/build/reminders-server
[ -x "$server" ] || fail "no reminders-server was built"

# 4. Run it with the fake vendor as its `sms` tool.
start_vendor "$vendor" "$tmp" || fail "$wait_error"
sed -e "s#@VENDOR_URL@#$vendor_url#" "$tmp/project/serve.json" > "$tmp/serve.json"
start_server "$tmp/server.log" 20 "$server" --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "reminders-server: $wait_error"
grep -q '"types":\["reminder"\]' "$tmp/server.log" || fail "the start line does not name the reminder type"

send() {  # send KEY: the HTTP status, the body in $tmp/reply
  curl -s -o "$tmp/reply" -w '%{http_code}' -X POST \
    "http://127.0.0.1:$port/v1/entities/reminder/r1/send" -H 'X-API-Key: dev-key-acme' \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $1" \
    -d '{"to": "+15550100", "text": "dentist at 3"}'
}
code=$(send rem-1)
[ "$code" = 200 ] || fail "send answered $code: $(cat "$tmp/reply")"
jq -e '.sent == true and .attempts == 1' "$tmp/reply" > /dev/null || fail "reply $(cat "$tmp/reply")"
code=$(send rem-1)
[ "$code" = 200 ] || fail "the retry answered $code: $(cat "$tmp/reply")"
calls=$(curl -s "http://127.0.0.1:$(cat "$tmp/vendor.port")/_vendor/stats" | jq .calls)
[ "$calls" = 1 ] || fail "the vendor was called $calls times for one key"
stop_process "$pid" 30
pid=""
[ "$stop_rc" = 0 ] || fail "the server exited $stop_rc after SIGTERM"

# 5. Its facts, read with the installed factum inspect.
"$prefix/bin/factum" inspect verify acme/reminder/r1 --data "$tmp/data" --json > "$tmp/verify.out" ||
  fail "inspect verify: $(cat "$tmp/verify.out")"
"$prefix/bin/factum" inspect facts acme/reminder/r1 --data "$tmp/data" --json --limit 0 > "$tmp/facts"
for t in reminder.requested reminder.sent cost; do
  n=$(jq -s "map(select(.type == \"$t\")) | length" "$tmp/facts")
  [ "$n" = 1 ] || fail "$n facts of type $t (expected 1): $(cat "$tmp/facts")"
done
echo "consumer: ok: installed, built out of the tree, served, replayed, inspected"
