#!/usr/bin/env bash
# alerts.sh: the alerting rules of docs/ops are valid and tested (`promtool check rules`,
# `promtool test rules alerts_test.yml`: each alert fires on its series and stays quiet on a
# healthy one; each has a test entry that expects it to fire), every runbook they name exists,
# and every metric they query is on the /metrics of a real `factum serve` started here
# (loopback, port 0, stopped by pid), as a one-node cluster on an etcd started here too, so that
# the cluster's series are there as well; that /metrics passes `promtool check metrics` too
# (tests/ops/metrics.sh checks a single server's after calls).
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
etcd_pid=""
cleanup() {
  kill_processes "$pid" "$etcd_pid"
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

# Every metric the rules query is exposed by a real server: one node of a cluster (its etcd on
# a free loopback port pair, tried again on another pair if etcd cannot bind; at most 5 tries).
etcd_url=""
for try in 1 2 3 4 5; do
  read -r cport pport < <(free_ports 2) || fail "no free loopback ports"
  rm -rf "$tmp/etcd"
  etcd --name ops --data-dir "$tmp/etcd" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "ops=http://127.0.0.1:$pport" --heartbeat-interval 10 --election-timeout 100 \
    > "$tmp/etcd.log" 2>&1 &
  etcd_pid=$!
  for ((i = 0; i < 200; i++)); do
    if curl -sf -X POST "http://127.0.0.1:$cport/v3/kv/range" -d '{"key":"AA=="}' > /dev/null 2>&1; then
      etcd_url="http://127.0.0.1:$cport"
      break
    fi
    kill -0 "$etcd_pid" 2> /dev/null || break
    sleep 0.05
  done
  [ -n "$etcd_url" ] && break
  kill_processes "$etcd_pid"
  etcd_pid=""
done
[ -n "$etcd_url" ] || fail "etcd did not start: $(tail -5 "$tmp/etcd.log")"
# "advertise" is where other nodes would reach this one; a one-node cluster relays nothing.
cat > "$tmp/serve.json" <<JSON
{"dev": true, "tenants": {"acme": {"api_keys": ["k"], "quota": {"max_bytes": 1000000000}}},
 "degradation": {},
 "cluster": {"name": "ops", "node_id": "ops1", "etcd": ["$etcd_url"],
             "advertise": "127.0.0.1:1", "shards": 4, "lease_ttl_ms": 2000}}
JSON
start_server "$tmp/err.log" 10 "$factum" serve --config "$tmp/serve.json" --listen 127.0.0.1:0 \
  --data "$tmp/data" || fail "factum serve: $wait_error: $(cat "$tmp/err.log")"
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics" || fail "GET /metrics failed"
promtool check metrics < "$tmp/metrics" > "$tmp/lint" 2>&1 && [ ! -s "$tmp/lint" ] ||
  fail "promtool check metrics: $(cat "$tmp/lint")"
used=$(grep -vE '^ *#|summary:|runbook_url:' "$ops/alerts.yml" | grep -o 'factum_[a-z_]*' | sort -u)
[ -n "$used" ] || fail "no metric found in the rules"
for m in $used; do
  grep -qE "^($m[{ ]|# TYPE $m )" "$tmp/metrics" || fail "the rules query $m, which /metrics does not expose"
done
stop_process "$pid" 30
pid=""
[ "$stop_rc" = 0 ] || fail "factum serve exited $stop_rc after SIGTERM"
echo "alerts: ok: $(grep -c 'alert:' "$ops/alerts.yml") alerts tested, $(echo "$used" | wc -l) metrics found"
