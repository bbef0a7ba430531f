#!/usr/bin/python3
"""What the web console's reads cost on an entity of 1,000,000 facts (docs/console.md, "A large
entity"): builds the entity with large_entity (through the runtime, into a data directory), starts
`factum serve` on it (loopback, a free port), and times over HTTP what the console asks: the first
facts page, a page at a seq in the middle, the last page (by seq, and newest first), the stream
resumed from seq N - 100 up to the last fact, and the entity list. Each read is timed `--runs`
times on one keep-alive connection and the median (with min and max) printed; the first read
after a start, which opens the entity's file, is timed apart over `--runs` restarts. Servers are
stopped by their pid. Debian's python3, standard library only. Not a test.

  large_entity.py --factum build/tools/factum --builder build/bench/large_entity [--facts N]
                  [--runs 5] [--data DIR]
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "support"))
from factum_test import check, start_serve  # noqa: E402

KEY = "large-entity-key"
BASE = "/v1/entities/ledger/big"
PAGE = 50  # the console's default page size


def get(conn, path, headers=None):
    h = {"X-API-Key": KEY}
    h.update(headers or {})
    t0 = time.perf_counter()
    conn.request("GET", path, headers=h)
    r = conn.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t0) * 1000
    check(r.status == 200, f"{path}: {r.status} {body[:300]!r}")
    return ms, json.loads(body)


def stream_from(port, after, last):
    """ms from the request until the event of seq `last` arrived, resuming after `after`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    c.request("GET", BASE + "/facts/stream", headers={"X-API-Key": KEY, "Last-Event-ID": str(after)})
    r = c.getresponse()
    check(r.status == 200, f"stream: {r.status}")
    want = after + 1
    while True:
        line = r.readline()
        check(line, "the stream ended early")
        if line.startswith(b"id: "):
            seq = int(line[4:])
            check(seq == want, f"stream gave {seq}, expected {want}")
            want += 1
            if seq == last:
                ms = (time.perf_counter() - t0) * 1000
                c.close()
                return ms


def summary(name, values):
    med = statistics.median(values)
    return f"| {name} | {med:.1f} | {min(values):.1f} | {max(values):.1f} |"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--builder", required=True)
    ap.add_argument("--facts", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", help="keep the entity here (built once, reused when present)")
    a = ap.parse_args()
    check(a.facts > 200, "--facts must be above 200")
    tmp = tempfile.mkdtemp(prefix="factum-large-entity-")
    data = a.data or os.path.join(tmp, "data")
    procs = []
    try:
        marker = os.path.join(data, f"large-entity-{a.facts}")
        if not os.path.exists(marker):
            t0 = time.time()
            subprocess.run([a.builder, "--data", data, "--facts", str(a.facts)], check=True)
            print(f"built {a.facts} facts in {time.time() - t0:.1f} s")
            open(marker, "w").close()
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
        print(f"data directory: {size / 2**20:.0f} MiB")
        cfg = os.path.join(tmp, "serve.json")
        json.dump({"data_dir": data, "dev": True, "tenants": {"acme": {"api_keys": [KEY]}},
                   "types": ["ledger"]}, open(cfg, "w"))
        log = os.path.join(tmp, "serve.log")
        n = a.facts
        reads = {
            f"first facts page ({PAGE})": f"{BASE}/facts?limit={PAGE}",
            f"a page in the middle (after_seq={n // 2})": f"{BASE}/facts?limit={PAGE}&after_seq={n // 2}",
            f"the last page by seq (after_seq={n - PAGE})": f"{BASE}/facts?limit={PAGE}&after_seq={n - PAGE}",
            "the last page, newest first (order=desc)": f"{BASE}/facts?limit={PAGE}&order=desc",
            "entity list (order=last_activity)": f"/v1/entities?limit={PAGE}&order=last_activity",
        }
        cold, times = [], {k: [] for k in reads}
        times[f"stream resumed from seq {n - 100} to {n}"] = []
        for run in range(a.runs):
            proc, port = start_serve(a.factum, cfg, log, "--listen", "127.0.0.1:0", bound=120)
            procs.append(proc)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            ms, page = get(conn, reads[f"first facts page ({PAGE})"])
            cold.append(ms)
            check([f["seq"] for f in page] == list(range(1, PAGE + 1)), "first page")
            for name, path in reads.items():
                ms, body = get(conn, path)
                times[name].append(ms)
                if "desc" in path:
                    check(body[0]["seq"] == n, f"newest first: {body[0]['seq']}")
            times[f"stream resumed from seq {n - 100} to {n}"].append(stream_from(port, n - 100, n))
            conn.close()
            os.kill(proc.pid, signal.SIGTERM)
            check(proc.wait(timeout=120) == 0, "factum serve did not stop cleanly")
        print(f"\n{n:,} facts, {a.runs} runs, ms (median, min, max):\n")
        print("| read | median | min | max |\n|---|---|---|---|")
        print(summary("first facts page, first read after a start (opens the entity)", cold))
        for name, v in times.items():
            print(summary(name, v))
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
