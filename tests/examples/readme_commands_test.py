#!/usr/bin/python3
"""The README's shell commands, read from README.md itself (every line of its plain ``` blocks,
continuation lines joined), run in the order printed in a fresh directory that looks like a
checkout (its top-level entries linked to the source tree, `build` to the build directory, no
`data` yet), as a newcomer runs them:

  ./scripts/run   started in the background with FACTUM_PREBUILT=1 (the built executables, no
                  package check, no build) and FACTUM_LISTEN on a free loopback port; waited for
                  until its start line; stopped by its pid with SIGTERM at the end (exit 0)
  anything else   run with bash in that directory, 127.0.0.1:8080 replaced by the server's
                  address, each bounded to COMMAND_WAIT seconds: it must exit 0 and print
                  something on stdout, nothing on stderr, and no problem+json document

Commands that take minutes or run the whole suite are listed in SKIPPED with the reason; every
other command is run, so the README cannot grow one that this test does not check.

  readme_commands_test.py --root SOURCE_DIR --build BUILD_DIR [--keep]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, kill_process, run_in_scratch,  # noqa: E402
                         wait_until)

WAIT = 30          # seconds: the server's start and stop
COMMAND_WAIT = 20  # seconds: each command
README_ADDRESS = "127.0.0.1:8080"

# Prefixes of the README's commands this test does not run, and why.
SKIPPED = {
    "./scripts/test": "runs every test, this one among them",
    "./build/tools/factum bench ": "a load test of seconds to minutes (tests/bench covers it)",
    "bench/sweep": "a scale sweep of minutes",
    "scripts/fuzz": "fuzzing, a minute per target",
    "scripts/tsan": "a ThreadSanitizer build of CAF and the suites, about 20 minutes",
    "scripts/package": "builds the Debian packages",
    "scripts/build ": "a build of the whole tree",
}


def readme_commands(readme):
    """The commands of README.md's plain ``` blocks, in order, continuation lines joined."""
    commands, fence, plain, pending = [], False, False, ""
    for line in open(readme).read().splitlines():
        if line.startswith("```"):
            fence = not fence
            plain = fence and line == "```"
            continue
        if not plain or not line.strip():
            continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        commands.append(pending.strip())
        pending = ""
    return commands


def make_checkout(root, build, tmp):
    """A directory whose top-level entries are links into `root`, `build` a link to `build`."""
    checkout = os.path.join(tmp, "checkout")
    os.mkdir(checkout)
    for name in os.listdir(root):
        if name not in ("build", "data", ".git"):
            os.symlink(os.path.join(root, name), os.path.join(checkout, name))
    os.symlink(build, os.path.join(checkout, "build"))
    return checkout


def start_server(command, checkout, env, log):
    """Runs the README's `./scripts/run` in the background; returns (process, port) once its
    start line is in `log`."""
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=checkout, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    found = {}

    def started():
        check(proc.poll() is None, f"`{command}` exited: {open(log).read()[-3000:]}")
        for line in open(log).read().splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                if e.get("event") == "start" and e.get("pid") == proc.pid:
                    found["port"] = e["port"]
                    return True
        return False
    try:
        wait_until(f"the start line of `{command}`", started, WAIT)
    except Failure:
        kill_process(proc, WAIT)
        raise
    return proc, found["port"]


def run_command(command, checkout, env):
    r = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=COMMAND_WAIT)
    said = f"`{command}`: exit {r.returncode}, stdout {r.stdout[-1500:]!r}, stderr {r.stderr[-1500:]!r}"
    check(r.returncode == 0, said)
    check(r.stdout.strip() != "", said)
    check(r.stderr == "", said)
    for line in r.stdout.splitlines():
        doc = None
        try:
            doc = json.loads(line)
        except ValueError:
            pass
        check(not (isinstance(doc, dict) and str(doc.get("type", "")).startswith("urn:factum:problem")),
              said)
    return r.stdout


def run(root, build, tmp):
    commands = readme_commands(os.path.join(root, "README.md"))
    checkout = make_checkout(root, build, tmp)
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, FACTUM_PREBUILT="1", FACTUM_LISTEN=address)
    env.pop("FACTUM_DATA", None)
    env.pop("FACTUM_BUILD_DIR", None)
    server, ran, skipped = None, [], []
    try:
        for command in commands:
            if any(command.startswith(p) for p in SKIPPED):
                skipped.append(command)
                continue
            if command.split()[0] == "./scripts/run":
                check(server is None, "the README starts a second server")
                check(README_ADDRESS not in command, f"`{command}` names the address itself")
                server, bound = start_server(command, checkout, env, os.path.join(tmp, "run.log"))
                check(bound == port, f"the server bound {bound}, not FACTUM_LISTEN's {port}")
                continue
            check(server is not None, f"`{command}` comes before any server was started")
            print(f"$ {command}")
            out = run_command(command.replace(README_ADDRESS, address), checkout, env)
            print(out[:600].rstrip())
            ran.append(command)
        check(server is not None, "the README starts no server (./scripts/run)")
        check(len(ran) >= 3, f"only {len(ran)} commands ran: {ran}")
        check(os.path.isdir(os.path.join(checkout, "data")), "no ./data in the checkout")
        server.send_signal(signal.SIGTERM)
        rc = server.wait(WAIT)
        check(rc == 0, f"the server exited {rc} after SIGTERM: {open(os.path.join(tmp, 'run.log')).read()[-2000:]}")
    finally:
        kill_process(server, WAIT)
    print(f"ran {len(ran)} commands; skipped {len(skipped)}: {skipped}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    return run_in_scratch("readme_commands_test",
                          lambda tmp: run(os.path.abspath(a.root), os.path.abspath(a.build), tmp),
                          a.keep, (Failure, subprocess.TimeoutExpired))


if __name__ == "__main__":
    sys.exit(main())
