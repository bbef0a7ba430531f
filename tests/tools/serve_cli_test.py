#!/usr/bin/python3
"""What a newcomer meets first in the `factum` executable, against a real `factum serve` on a free
loopback port and a temporary data directory (stopped by its pid). One case per run:

  home      the start line names the console's URL; GET / and HEAD / redirect there (302 with
            Location), and the console answers at it
  log-text  --log-format text: one line per event, time, level, event, then key=value pairs
            (the start line with the console's URL, a failed request with its code, the stop)
  log-auto  without --log-format, stderr on a terminal (a pty) gets text and stderr to a file
            gets JSON lines; --log-format json on a terminal gets JSON; a bad value is refused
            with a message and exit 2
  nofile    with a descriptor limit (RLIMIT_NOFILE) of 2048, the start says in words what the
            limit is and what it leaves to connections and entities
  help      every help page of the command line: no CLI11 default marker such as {false}, and
            every description of a subcommand, an option or an argument starts with a capital
            letter

Every wait is bounded (WAIT seconds).

  serve_cli_test.py --factum PATH --case NAME [--keep]
"""
import argparse
import http.client
import json
import os
import pty
import re
import resource
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, run_in_scratch, start_serve,  # noqa: E402
                         stop_serve, wait_until)

WAIT = 30  # seconds: the bound of every wait
KEY = "serve-cli-test-key"
# One text log line: time, level (padded to 5), event, then key=value pairs.
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info |warn |error) [a-z_]+"
                       r"( [a-z_]+=(\"([^\"\\]|\\.)*\"|\S+))*$")


def write_config(tmp, **extra):
    cfg = os.path.join(tmp, "serve.json")
    with open(cfg, "w") as f:
        json.dump({"data_dir": os.path.join(tmp, "data"), "dev": True,
                   "listen": f"127.0.0.1:{free_port()}",
                   "tenants": {"acme": {"api_keys": [KEY]}}, **extra}, f)
    return cfg


def request(port, verb, target, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(verb, target, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        conn.close()


def json_lines(log):
    out = []
    for line in open(log).read().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            raise Failure(f"a log line is not JSON: {line!r}")
    return out


# -- cases ----------------------------------------------------------------------------------------

def case_home(factum, tmp):
    cfg = write_config(tmp)
    log = os.path.join(tmp, "serve.log")
    proc, port = start_serve(factum, cfg, log, bound=WAIT)
    try:
        start = [e for e in json_lines(log) if e.get("event") == "start"][0]
        url = f"http://127.0.0.1:{port}"
        check(start.get("console") == url + "/console", f"start line without the console: {start}")
        for verb in ("GET", "HEAD"):
            status, headers, body = request(port, verb, "/")
            check(status == 302, f"{verb} / answered {status}: {body[:200]!r}")
            check(headers.get("location") == "/console", f"{verb} / Location: {headers}")
        status, headers, body = request(port, "GET", "/console")
        check(status == 200 and headers.get("content-type", "").startswith("text/html"),
              f"GET /console: {status} {headers}")
    finally:
        check(stop_serve(proc, WAIT) == 0, "factum serve did not stop cleanly")


def wait_text_start(proc, log):
    """The port of the text start line of `proc` in `log`."""
    found = {}

    def started():
        check(proc.poll() is None, f"factum serve exited: {open(log).read()[-2000:]}")
        m = re.search(r" info  start .*\bport=(\d+)", open(log).read())
        if m:
            found["port"] = int(m.group(1))
        return bool(m)
    wait_until("the text start line", started, WAIT)
    return found["port"]


def case_log_text(factum, tmp):
    cfg = write_config(tmp)
    log = os.path.join(tmp, "serve.log")
    with open(log, "w") as err:
        proc = subprocess.Popen([factum, "serve", "--config", cfg, "--log-format", "text"],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        port = wait_text_start(proc, log)
        status, _, _ = request(port, "POST", "/v1/entities/nosuch/x/m", b"{}",
                               {"X-API-Key": KEY, "Content-Type": "application/json"})
        check(status == 404, f"an unknown type answered {status}")
        wait_until("the request_failed line", lambda: "request_failed" in open(log).read(), WAIT)
    finally:
        rc = stop_serve(proc, WAIT)
    check(rc == 0, f"factum serve exited {rc}: {open(log).read()[-2000:]}")
    lines = open(log).read().splitlines()
    for line in lines:
        check(TEXT_LINE.match(line), f"not a text log line: {line!r}")
    start = [x for x in lines if " start " in x]
    check(len(start) == 1 and f" console=http://127.0.0.1:{port}/console" in start[0]
          and f" url=http://127.0.0.1:{port}" in start[0], f"start line: {start}")
    failed = [x for x in lines if " request_failed " in x]
    check(len(failed) == 1 and " code=UNKNOWN_ENTITY_TYPE " in failed[0]
          and " status=404 " in failed[0] and ' detail="no entity type nosuch' in failed[0],
          f"request_failed line: {failed}")
    check(any(" info  stopping signal=SIGTERM" in x for x in lines), f"no stopping line: {lines}")
    check(any(" info  stopped " in x for x in lines), f"no stopped line: {lines}")


def run_on_pty(factum, cfg, *args):
    """Starts `factum serve` with its stderr on a pseudo-terminal, reads until its start line
    (text or JSON), stops it; returns what it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([factum, "serve", "--config", cfg, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    # The start line names the pid, in either form; it is whole once its newline arrived.
    whole = re.compile(rb'(^|\n)[^\n]*(pid=|"pid":)\d+[^\n]*\n')
    try:
        end = time.time() + WAIT
        while time.time() < end and not whole.search(out):
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            elif proc.poll() is not None:
                break
        check(whole.search(out), f"no start line on the terminal: {out[-2000:]!r}")
    finally:
        stop_serve(proc, WAIT)
        os.close(master)
    # The lines up to the start line's newline (what came after it may be cut).
    text = out.decode(errors="replace").replace("\r\n", "\n")
    return [x for x in text[:text.rfind("\n")].split("\n") if x.strip()]


def case_log_auto(factum, tmp):
    cfg = write_config(tmp)
    tty = run_on_pty(factum, cfg)
    check(any(" info  start " in x for x in tty), f"on a terminal: {tty}")
    for line in tty:
        check(TEXT_LINE.match(line), f"on a terminal, not a text line: {line!r}")
    tty_json = run_on_pty(factum, cfg, "--log-format", "json")
    check(any('"event":"start"' in x for x in tty_json), f"--log-format json: {tty_json}")
    for line in tty_json:
        check(line.startswith("{") and json.loads(line), f"--log-format json: {line!r}")
    log = os.path.join(tmp, "file.log")
    proc, _ = start_serve(factum, cfg, log, bound=WAIT)
    check(stop_serve(proc, WAIT) == 0, "factum serve did not stop cleanly")
    events = [e.get("event") for e in json_lines(log)]
    check("start" in events and "stopped" in events, f"JSON lines to a file: {events}")
    bad = subprocess.run([factum, "serve", "--config", cfg, "--log-format", "xml"],
                         capture_output=True, text=True, timeout=WAIT)
    check(bad.returncode == 2 and "--log-format" in bad.stderr and bad.stdout == "",
          f"--log-format xml: exit {bad.returncode}, stderr {bad.stderr!r}")


def case_nofile(factum, tmp):
    cfg = write_config(tmp, max_active_entities=100000)
    log = os.path.join(tmp, "serve.log")

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, 2048))
    with open(log, "w") as err:
        proc = subprocess.Popen([factum, "serve", "--config", cfg], stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=limit)
    try:
        wait_until("the start line", lambda: '"event":"start"' in open(log).read(), WAIT)
    finally:
        check(stop_serve(proc, WAIT) == 0, "factum serve did not stop cleanly")
    events = json_lines(log)
    # 2048 descriptors: three quarters (1536) for entity files at 4 each (384 entities), 64 kept
    # for the listener, tools and indexes, the remaining 448 for connections.
    lowered = [e for e in events if e.get("event") == "max_connections_lowered"]
    check(len(lowered) == 1, f"no max_connections_lowered line: {events}")
    d = lowered[0]
    check(d.get("max_connections") == 448 and d.get("asked") == 10000
          and d.get("descriptor_limit") == 2048 and d.get("max_active_entities") == 384,
          f"max_connections_lowered fields: {d}")
    check(d["detail"] == "this process may open 2048 files (RLIMIT_NOFILE); up to 384 open "
                         "entities use 4 each (max_active_entities) and 64 are kept for the "
                         "listener, tools and indexes, which leaves 448 for connections, fewer "
                         "than max_connections 10000; raise the limit (ulimit -n, or LimitNOFILE "
                         "in a systemd unit) or lower max_active_entities to allow more",
          f"max_connections_lowered detail: {d['detail']!r}")
    notes = [e["detail"] for e in events if e.get("event") == "start_note"
             and "max_active_entities" in e.get("detail", "")]
    check(notes == ["max_active_entities 100000 lowered to 384: each open entity uses 4 file "
                    "descriptors, and three quarters of the 2048 this process may open "
                    "(RLIMIT_NOFILE) are for entities; raise the limit (ulimit -n, or "
                    "LimitNOFILE in a systemd unit) to allow more"],
          f"start note: {notes}")


def help_pages(factum, path=()):
    """(path, text) of `factum [path] --help` and of every subcommand's below it."""
    r = subprocess.run([factum, *path, "--help"], capture_output=True, text=True, timeout=WAIT)
    check(r.returncode == 0, f"factum {' '.join(path)} --help: exit {r.returncode} {r.stderr}")
    pages = [(path, r.stdout)]
    if "Subcommands:" in r.stdout:
        for line in r.stdout.split("Subcommands:", 1)[1].splitlines():
            m = re.match(r"^  (\S+)\s", line)
            if m:
                pages += help_pages(factum, path + (m.group(1),))
    return pages


def descriptions(text):
    """(name, description) of each entry of a help page's Subcommands, Options and Positionals
    sections. CLI11 pads a name to 30 columns; a longer one has its description on the next
    line, indented by 30."""
    out, section, pending = [], None, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section, pending = line, None
            continue
        if section not in ("Subcommands:", "Options:", "Positionals:"):
            continue
        if pending and line.startswith(" " * 30) and line.strip():
            out.append((pending, line.strip()))
            pending = None
            continue
        m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if m:
            if m.group(2):
                out.append((m.group(1), m.group(2)))
            pending = None if m.group(2) else m.group(1)
    return out


def case_help(factum, tmp):
    pages = help_pages(factum)
    check(len(pages) > 30, f"only {len(pages)} help pages")
    described = 0
    for path, text in pages:
        name = " ".join(("factum",) + path)
        marker = re.search(r"\S*\{(true|false)\}", text)
        check(not marker, f"{name} --help shows {marker.group(0) if marker else ''}")
        for entry, what in descriptions(text):
            described += 1
            check(what[0].isupper() or not what[0].isalpha(),
                  f"{name} --help: {entry}: {what!r} starts in lower case")
    check(described > 200, f"only {described} descriptions found: the help format changed?")


CASES = {"home": case_home, "log-text": case_log_text, "log-auto": case_log_auto,
         "nofile": case_nofile, "help": case_help}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    return run_in_scratch(f"serve_cli_test {a.case}",
                          lambda tmp: CASES[a.case](os.path.abspath(a.factum), tmp), a.keep)


if __name__ == "__main__":
    sys.exit(main())
