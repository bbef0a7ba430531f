#!/usr/bin/python3
"""An operator's degradation floor holds across a cluster: etcd and two `factum serve` nodes are
started here on free loopback ports. A floor of 4 set through one node (PUT /v1/degradation)
reaches the other within a bound, where a call of any method then answers 503 DEGRADED; the
other node, killed with SIGKILL and started again, applies it again from etcd; the tenant's
runtime entity holds exactly one `degradation_override` fact for it (written by the node that
owns the entity). Removing the floor through the second node brings both to 0. With etcd
stopped, a PUT answers 503 CLUSTER_UNAVAILABLE and the level stays. Every wait is bounded;
processes are started here and stopped by pid.

  degradation_floors.py --factum PATH [--etcd PATH] [--keep]
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (WAIT, Failure, check, free_port, kill_process, spawn_serve,  # noqa: E402
                         wait_until)

KEY = "floors-key"


def request(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"X-API-Key": KEY}
    if body is not None:
        headers["Content-Type"] = "application/json"
        body = json.dumps(body).encode()
    if method == "POST":
        headers["Idempotency-Key"] = f"k-{time.time_ns()}"
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data) if data else None
    except ValueError:
        return r.status, data


def level(port):
    status, body = request(port, "GET", "/v1/degradation")
    return body.get("level") if status == 200 else None


class Node:
    def __init__(self, factum, tmp, name, etcd_url):
        self.factum, self.name = factum, name
        self.port = free_port()
        self.log = os.path.join(tmp, name + ".log")
        self.cfg = os.path.join(tmp, name + ".json")
        with open(self.cfg, "w") as f:
            json.dump({
                "listen": f"127.0.0.1:{self.port}",
                "data_dir": os.path.join(tmp, name),
                "dev": True,
                "tenants": {"acme": {"api_keys": [
                    {"key": KEY, "scopes": ["read", "write", "operate"]}]}},
                "types": ["ledger"],
                "degradation": {"features": {"writes": {"max_level": 3, "methods": ["*"]}},
                                "check_interval_ms": 100},
                "cluster": {"name": "floors", "node_id": name, "etcd": [etcd_url],
                            "advertise": f"127.0.0.1:{self.port}", "shards": 8,
                            "lease_ttl_ms": 2000, "min_nodes": 2},
            }, f)
        self.proc = None

    def spawn(self):
        self.proc = spawn_serve(self.factum, self.cfg, self.log)

    def start(self):
        self.spawn()
        wait_until(f"{self.name} answers /healthz", self.healthy)

    def healthy(self):
        check(self.proc.poll() is None, f"{self.name} exited: {open(self.log).read()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def kill(self):
        kill_process(self.proc, WAIT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--etcd", default=shutil.which("etcd") or "/usr/bin/etcd")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-floors-")
    client, peer = free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client}"
    etcd = subprocess.Popen(
        [a.etcd, "--name", "m", "--data-dir", os.path.join(tmp, "etcd"),
         "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"m=http://127.0.0.1:{peer}", "--logger", "zap"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "etcd.log"), "a"))
    nodes = [Node(a.factum, tmp, n, etcd_url) for n in ("n1", "n2")]
    try:
        def etcd_healthy():
            check(etcd.poll() is None, "etcd exited: " +
                  open(os.path.join(tmp, "etcd.log")).read()[-2000:])
            try:
                c = http.client.HTTPConnection("127.0.0.1", client, timeout=2)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                return ok
            except OSError:
                return False
        wait_until("etcd answers /health", etcd_healthy)
        for n in nodes:
            n.spawn()
        for n in nodes:  # min_nodes 2: both start before either serves
            wait_until(f"{n.name} answers /healthz", n.healthy)
        n1, n2 = nodes
        check(level(n1.port) == 0 and level(n2.port) == 0, "levels start at 0")
        # Shards are placed once each node has seen the other (min_nodes 2): until then 503.
        wait_until("an append through n2 at 0", lambda: request(
            n2.port, "POST", "/v1/entities/ledger/l1/append", {"type": "x"})[0] == 200)

        status, body = request(n1.port, "PUT", "/v1/degradation",
                               {"level": 4, "reason": "drill"})
        check(status == 200, f"PUT answered {status}: {body}")
        check(level(n1.port) == 4, "n1 applies its floor at once")
        wait_until("n2 applies the floor", lambda: level(n2.port) == 4)
        status, body = request(n2.port, "POST", "/v1/entities/ledger/l2/append", {"type": "x"})
        check(status == 503 and body.get("code") == "DEGRADED",
              f"a call through n2 at 4 answered {status}: {body}")

        n2.kill()
        n2.start()
        wait_until("n2 applies the floor again after a restart", lambda: level(n2.port) == 4)
        _, st = request(n2.port, "GET", "/v1/degradation")
        check(st["override"]["reason"] == "drill", f"the floor's reason on n2: {st}")

        def override_facts(port):
            status, facts = request(port, "GET", "/v1/entities/factum.runtime/degradation/facts"
                                    "?type=lifecycle&subtype=degradation_override")
            return facts if status == 200 else None
        wait_until("one override fact", lambda: override_facts(n1.port) is not None and
                   len(override_facts(n1.port)) == 1)
        f = override_facts(n2.port)[0]
        check(f["data"]["override"]["level"] == 4, f"the fact: {f}")

        status, body = request(n2.port, "PUT", "/v1/degradation",
                               {"level": None, "reason": "drill over"})
        check(status == 200, f"removing answered {status}: {body}")
        wait_until("both back to 0", lambda: level(n1.port) == 0 and level(n2.port) == 0)
        wait_until("two override facts", lambda: len(override_facts(n1.port) or []) == 2)
        status, _ = request(n1.port, "POST", "/v1/entities/ledger/l3/append", {"type": "x"})
        check(status == 200, f"append after the floor answered {status}")

        etcd.send_signal(signal.SIGSTOP)  # etcd does not answer: the floor cannot be stored
        try:
            status, body = request(n1.port, "PUT", "/v1/degradation",
                                   {"level": 2, "reason": "no etcd"})
            check(status == 503 and body.get("code") == "CLUSTER_UNAVAILABLE",
                  f"PUT without etcd answered {status}: {body}")
        finally:
            etcd.send_signal(signal.SIGCONT)
        check(level(n1.port) == 0, "a floor etcd did not take moved the level")
        print("degradation_floors: ok")
        return 0
    except Failure as e:
        print(f"degradation_floors: FAIL: {e}", file=sys.stderr)
        for n in nodes:
            if os.path.exists(n.log):
                print(f"--- {n.name}:", open(n.log).read()[-3000:], file=sys.stderr)
        return 1
    finally:
        for n in nodes:
            kill_process(n.proc, WAIT)
        kill_process(etcd, WAIT)
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
