#!/usr/bin/env bash
# alerts.sh: the alerting rules of docs/ops are valid and tested (`promtool check rules`,
# `promtool test rules alerts_test.yml`: each alert fires on its series and stays quiet on a
# healthy one; each has a test entry that expects it to fire), every runbook they name exists,
# and every metric they query is on the /metrics of a real `factum serve` started here
# (loopback, port 0, stopped by pid).
# Usage: alerts.sh --factum PATH --source DIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/serve.sh"
while [ $# -gt 0 ]; do
  case $1 in
    --factum) factum=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    *) echo "alerts: unknown argument $1" >&2; exit 2 ;;
  esac
done
ops=$source/docs/ops
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "alerts: FAIL: $*" >&2; exit 1; }

promtool check rules "$ops/alerts.yml" > "$tmp/check.out" 2>&1 || fail "$(cat "$tmp/check.out")"
(cd "$ops" && promtool test rules alerts_test.yml) > "$tmp/test.out" 2>&1 ||
  fail "promtool test rules: $(cat "$tmp/test.out")"

# Every alert has a test that expects it to fire (an entry of alert_rule_test naming it with an
# `exp_labels` under its exp_alerts), and every runbook it names exists.
firing=$(awk '
  /^ *- (interval|eval_time|alertname):/ { name = "" }
  /^ *(- )?alertname:/ { sub(/.*alertname: */, ""); sub(/[^A-Za-z0-9_].*/, ""); name = $0 }
  /^ *- exp_labels:/ && name != "" { print name }
' "$ops/alerts_test.yml" | sort -u)
for a in $(grep -o 'alert: [A-Za-z]*' "$ops/alerts.yml" | cut -d' ' -f2); do
  grep -qx "$a" <<< "$firing" ||
    fail "alert $a has no test in alerts_test.yml that expects it to fire"
done
for r in $(grep -o 'runbook_url: [^ ]*' "$ops/alerts.yml" | cut -d' ' -f2 | sort -u); do
  [ -f "$source/$r" ] || fail "runbook $r does not exist"
done

# Every metric the rules query is exposed by a real server.
cat > "$tmp/serve.json" <<JSON
{"dev": true, "tenants": {"acme": {"api_keys": ["k"], "quota": {"max_bytes": 1000000000}}}}
JSON
"$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 --data "$tmp/data" 2> "$tmp/err.log" &
pid=$!
wait_for_port "$tmp/err.log" "$pid" 10 || fail "factum serve: $wait_error: $(cat "$tmp/err.log")"
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics" || fail "GET /metrics failed"
used=$(grep -vE '^ *#|summary:|runbook_url:' "$ops/alerts.yml" | grep -o 'factum_[a-z_]*' | sort -u)
[ -n "$used" ] || fail "no metric found in the rules"
for m in $used; do
  grep -qE "^($m[{ ]|# TYPE $m )" "$tmp/metrics" || fail "the rules query $m, which /metrics does not expose"
done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || fail "factum serve exited $rc after SIGTERM"
echo "alerts: ok: $(grep -c 'alert:' "$ops/alerts.yml") alerts tested, $(echo "$used" | wc -l) metrics found"
