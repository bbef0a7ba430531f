# serve.sh: sourced by the shell tests that start a server in the background (`factum serve`, or
# a server built on factum's serve_main): wait_for_port reads the port it bound from the
# `"port":N` of its start log line; start_vendor starts the fake vendor those tests call. Not
# executable on its own.

# wait_for_port LOG PID SECONDS: polls LOG every 50 ms, at most SECONDS, for the start line's
# `"port":N` while process PID is alive. Sets `port` to N and returns 0; else sets `wait_error`
# to why not (the process exited first, or no start line in time) and returns 1.
wait_for_port() {
  local log=$1 pid=$2 seconds=$3 i
  port=""
  wait_error=""
  for ((i = 0; i < seconds * 20; i++)); do
    port=$(grep -o '"port":[0-9]*' "$log" 2>/dev/null | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      wait_error="the server exited before its start line"
      return 1
    fi
    sleep 0.05
  done
  wait_error="no start line within $seconds s"
  return 1
}

# start_vendor VENDOR DIR: starts factum-fake-vendor (the binary VENDOR) in the background on a
# free loopback port, its port written to DIR/vendor.port and its stdout to DIR/vendor.out;
# polls every 50 ms, at most 10 s, for the port. Sets `vpid` and `vendor_url`
# (http://127.0.0.1:PORT) and returns 0; else sets `wait_error` and returns 1.
start_vendor() {
  local bin=$1 dir=$2 i
  "$bin" --listen 127.0.0.1:0 --port-file "$dir/vendor.port" > "$dir/vendor.out" &
  vpid=$!
  for ((i = 0; i < 200; i++)); do
    if [ -s "$dir/vendor.port" ]; then
      vendor_url="http://127.0.0.1:$(cat "$dir/vendor.port")"
      return 0
    fi
    if ! kill -0 "$vpid" 2>/dev/null; then
      wait_error="the vendor exited early"
      return 1
    fi
    sleep 0.05
  done
  wait_error="no vendor port within 10 s"
  return 1
}
