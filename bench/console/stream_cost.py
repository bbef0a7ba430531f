#!/usr/bin/python3
"""What fact streams cost the commit path (docs/console.md, "What streams cost the commit
path"): `factum bench append --mode http` on one entity against one `factum serve`, alternately
with no fact stream open and with one stream open on another entity (a reader in this process
that drains it), `--runs` times each, in one run of the server; prints the median throughput and
p50/p99 of each. Every commit that appends facts asks whether a stream is open; with one open it
also hands the commit's last seq to the streams. Servers are stopped by their pid. Debian's
python3, standard library only. Not a test.

  stream_cost.py --factum build/tools/factum [--runs 5] [--duration 3] [--concurrency 1]
                 [--durability full|normal]
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
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "support"))
from factum_test import check, start_serve  # noqa: E402

KEY = "stream-cost-key"


class Follower(threading.Thread):
    """Reads the stream of ledger/followed until the connection closes."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.conn.request("GET", "/v1/entities/ledger/followed/facts/stream",
                          headers={"X-API-Key": KEY})
        self.sock = self.conn.sock  # the response takes it over
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, f"stream: {self.resp.status}")

    def run(self):
        try:
            while self.resp.readline():
                pass
        except (OSError, ValueError, AttributeError):
            pass  # closed by stop()

    def stop(self):
        self.sock.shutdown(2)
        self.sock.close()
        self.join(10)


def bench(factum, port, pid, a):
    r = subprocess.run([factum, "bench", "append", "--mode", "http",
                        "--url", f"http://127.0.0.1:{port}", "--api-key", KEY,
                        "--entities", "1", "--concurrency", str(a.concurrency),
                        "--duration", str(a.duration), "--warmup", "--json", "--no-progress",
                        "--server-pid", str(pid)], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"bench: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--durability", choices=["full", "normal"], default="full")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-stream-cost-")
    proc = None
    try:
        cfg = os.path.join(tmp, "serve.json")
        json.dump({"data_dir": os.path.join(tmp, "data"), "dev": True,
                   "durability": a.durability, "tenants": {"bench": {"api_keys": [KEY]}},
                   "types": ["ledger"]}, open(cfg, "w"))
        factum = a.factum
        proc, port = start_serve(factum, cfg, os.path.join(tmp, "serve.log"),
                                 "--listen", "127.0.0.1:0", bound=60)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/entities/ledger/followed/append", json.dumps({"type": "note"}),
                  {"X-API-Key": KEY, "Content-Type": "application/json", "Idempotency-Key": "f-1"})
        check(c.getresponse().status == 200, "the followed entity's first fact")
        c.close()
        results = {"no stream": [], "a stream open on another entity": []}
        for _ in range(a.runs):
            for name in results:
                follower = None
                if name != "no stream":
                    follower = Follower(port)
                    follower.start()
                    check(metric(port, "factum_fact_streams") == 1, "the stream is not open")
                try:
                    results[name].append(bench(factum, port, proc.pid, a))
                finally:
                    if follower:
                        follower.stop()
        print(f"\nfactum bench append --mode http, 1 entity, concurrency {a.concurrency}, "
              f"{a.duration} s, durability {a.durability}, {a.runs} runs each (alternating):\n")
        print("| | req/s (median) | min | max | p50 ms | p99 ms |")
        print("|---|---|---|---|---|---|")
        for name, rs in results.items():
            tp = [r["throughput"] for r in rs]
            p50 = statistics.median(r["latency_us"]["p50"] for r in rs) / 1000
            p99 = statistics.median(r["latency_us"]["p99"] for r in rs) / 1000
            print(f"| {name} | {statistics.median(tp):,.0f} | {min(tp):,.0f} | {max(tp):,.0f} | "
                  f"{p50:.2f} | {p99:.2f} |")
        os.kill(proc.pid, signal.SIGTERM)
        check(proc.wait(timeout=60) == 0, "factum serve did not stop cleanly")
    finally:
        if proc and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
