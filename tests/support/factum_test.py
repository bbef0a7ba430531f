"""factum_test.py: what the Python tests that drive processes share (imported from
tests/support; Debian's python3 standard library only): a test's failure, its checks, a free
loopback port, a bounded wait, and starting `factum serve` until its start line names the port
it bound. Not a test on its own."""
import json
import signal
import socket
import subprocess
import time

WAIT = 30  # seconds: the default bound of every wait


class Failure(Exception):
    """What a test failed on; its message says why."""


def check(cond, what):
    if not cond:
        raise Failure(what)


def free_port():
    """A loopback port free now (another process may take it before it is bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, fn, bound=WAIT, every=0.05):
    """Polls fn() every `every` s until it is true, at most `bound` s; Failure naming `what`."""
    end = time.time() + bound
    while time.time() < end:
        if fn():
            return
        time.sleep(every)
    raise Failure(f"not within {bound} s: {what}")


def start_serve(factum, cfg, log, *args, bound=WAIT):
    """Starts `factum serve --config cfg [args]` with stderr appended to `log` and waits for its
    start line (the event "start" with its pid). Returns (process, port); Failure, with the log's
    tail, when it exits first or does not start within `bound` s (it is killed then)."""
    proc = subprocess.Popen([factum, "serve", "--config", cfg, *args],
                            stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    end = time.time() + bound
    while time.time() < end:
        check(proc.poll() is None, f"factum serve exited: {open(log).read()[-2000:]}")
        for line in open(log).read().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "start" and e.get("pid") == proc.pid:
                return proc, e["port"]
        time.sleep(0.05)
    proc.kill()
    proc.wait(bound)
    raise Failure("factum serve did not start")


def stop_serve(proc, bound=WAIT):
    """Stops a server started by start_serve: SIGTERM, then SIGKILL after `bound` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(bound)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(bound)
