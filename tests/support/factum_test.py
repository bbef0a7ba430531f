"""factum_test.py: what the Python tests that drive processes share (imported from
tests/support; Debian's python3 standard library only): a test's failure, its checks, a free
loopback port, a bounded wait, starting `factum serve` until its start line names the port it
bound, and stopping or killing what a test started, by pid, always reaped; running a test in a
scratch directory of its own. Not a test on its own."""
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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


def spawn_serve(factum, cfg, log, *args):
    """Starts `factum serve --config cfg [args]` with stderr appended to `log` and returns its
    process at once (wait_started waits for its start line)."""
    with open(log, "a") as err:
        return subprocess.Popen([factum, "serve", "--config", cfg, *args],
                                stdout=subprocess.DEVNULL, stderr=err)


def wait_started(proc, log, bound=WAIT):
    """Waits for the start line of the server `proc` (the event "start" with its pid) in `log`
    and returns the port it names; Failure, with the log's tail, when it exits first or does not
    start within `bound` s (it is killed then)."""
    end = time.time() + bound
    while time.time() < end:
        check(proc.poll() is None, f"factum serve exited: {open(log).read()[-2000:]}")
        for line in open(log).read().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "start" and e.get("pid") == proc.pid:
                return e["port"]
        time.sleep(0.05)
    kill_process(proc, bound)
    raise Failure("factum serve did not start")


def start_serve(factum, cfg, log, *args, bound=WAIT):
    """spawn_serve, then wait_started: returns (process, port)."""
    proc = spawn_serve(factum, cfg, log, *args)
    return proc, wait_started(proc, log, bound)


def stop_serve(proc, bound=WAIT):
    """Stops a server started by start_serve: SIGTERM, then SIGKILL after `bound` s. Returns its
    exit code (negative: the signal that ended it)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(bound)
        except subprocess.TimeoutExpired:
            kill_process(proc, bound)
    return proc.returncode


def kill_process(proc, bound=WAIT):
    """SIGKILL to a process the test started (a server, etcd, nats-server...), and waits for it
    (at most `bound` s); nothing when it has exited already (it is reaped then)."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(bound)


def run_in_scratch(name, fn, keep=False, failures=(Failure,)):
    """Runs fn(scratch) in a new temporary directory, removed afterwards unless `keep`; prints
    "<name>: ok" or "<name>: FAIL: <why>" (on stderr) for a failure of the kinds `failures`, and
    returns the process's exit code: 0, or 1 on such a failure."""
    tmp = tempfile.mkdtemp(prefix="factum-" + name.replace(" ", "-") + "-")
    try:
        fn(tmp)
    except failures as e:
        print(f"{name}: FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    print(f"{name}: ok")
    return 0
