# serve.sh: sourced by the shell tests that start processes in the background. start_server
# starts a server (`factum serve`, or a server built on factum's serve_main) and waits until its
# start log line names the port it bound (wait_for_port); start_vendor starts the fake vendor
# those tests call; free_ports picks loopback ports for a process that cannot bind port 0;
# stop_process stops one by pid (SIGTERM, then SIGKILL after a bound) and kill_processes kills
# them (the tests' EXIT traps). Every wait is bounded. Not executable on its own.

# start_server LOG SECONDS COMMAND...: starts COMMAND in the background with its stderr to LOG
# (emptied first, before the command starts: a restart must not read its predecessor's start
# line) and waits, at most SECONDS, for its start line (wait_for_port). Sets `pid` (also when it
# fails, for the caller's cleanup) and `port` and returns 0; else sets `wait_error` and returns 1.
start_server() {
  local log=$1 seconds=$2
  shift 2
  : > "$log"
  "$@" 2>> "$log" &
  pid=$!
  wait_for_port "$log" "$pid" "$seconds"
}

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

# free_ports N: prints N distinct loopback TCP ports, free now (each bound to port 0 at once, then
# released: another process may take one before it is bound).
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()' "$1"
}

# stop_process PID SECONDS: SIGTERM to PID, polled every 50 ms for at most SECONDS, then SIGKILL
# if it still runs; waits for it. Sets `stop_rc` to its exit status (0: it exited cleanly).
stop_process() {
  local p=$1 seconds=$2 i
  kill -TERM "$p" 2> /dev/null || true
  for ((i = 0; i < seconds * 20; i++)); do
    kill -0 "$p" 2> /dev/null || break
    sleep 0.05
  done
  if kill -0 "$p" 2> /dev/null; then kill -KILL "$p" 2> /dev/null || true; fi
  stop_rc=0
  wait "$p" || stop_rc=$?
}

# kill_processes PID...: SIGKILL to each PID still running (empty ones are skipped), and waits for
# it: what a test's EXIT trap does with what it started.
kill_processes() {
  local p
  for p in "$@"; do
    [ -n "$p" ] || continue
    kill -KILL "$p" 2> /dev/null || true
    wait "$p" 2> /dev/null || true
  done
}
