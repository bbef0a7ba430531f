#!/usr/bin/python3
"""What a newcomer meets first in the `factum` executable, against a real `factum serve` on a free
loopback port and a temporary data directory (stopped by its pid). One case per run:

  home      the start line names the console's URL; GET / and HEAD / redirect there (302 with
            Location), and the console answers at it
  nofile    with a descriptor limit (RLIMIT_NOFILE) of 2048, the start says in words what the
            limit is and what it leaves to connections and entities

Every wait is bounded (WAIT seconds).

  serve_cli_test.py --factum PATH --case NAME [--keep]
"""
import argparse
import http.client
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, start_serve, stop_serve,  # noqa: E402
                         wait_until)

WAIT = 30  # seconds: the bound of every wait
KEY = "serve-cli-test-key"


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


CASES = {"home": case_home, "nofile": case_nofile}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-serve-cli-test-")
    try:
        CASES[a.case](os.path.abspath(a.factum), tmp)
    except Failure as e:
        print(f"serve_cli_test {a.case}: FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    print(f"serve_cli_test {a.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
