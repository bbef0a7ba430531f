#!/usr/bin/python3
"""The outbox across a SIGKILL: a real `factum serve` relays `payment` facts to a NATS JetStream
stream (nats-server started here on a free loopback port, JetStream in a temporary directory).
A load appends payments to several ledgers, each thread keeping what the server acknowledged
(seq and fact_id). Midway nats-server is frozen (SIGSTOP), so that facts pile up unacknowledged
(deliveries time out and back off); the server is then killed with SIGKILL mid-load, nats-server
thawed (SIGCONT), and the server started again on the same data directory; no client touches the
entities afterwards. The test then reads the stream (with
outbox_nats_reader, polling, bounded) until every acknowledged fact is there, and checks, per
entity: every acknowledged fact present with its fact_id as Nats-Msg-Id, first occurrences in
seq order, and any duplicate a redelivery of the same fact (same seq, same id). Every wait is
bounded; both processes are started here and stopped by their pid. Prints the figures it saw
(facts acknowledged, the delivery rate while NATS was up, the lag at the kill, the time to
deliver the rest after the restart).

  kill_test.py --factum PATH --reader PATH [--nats-server PATH] [--keep]
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
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, kill_process, start_serve,  # noqa: E402
                         stop_serve)

ENTITIES = 6
UP_S = 1.0     # seconds of load with NATS up
FROZEN_S = 1.0  # then seconds of load with NATS frozen, before the kill
WAIT = 30      # seconds: the bound of every wait


def read_stream(reader, url):
    """The stream's messages, or None while it does not exist yet."""
    r = subprocess.run([reader, url, "FACTS"], capture_output=True, text=True, timeout=WAIT)
    if r.returncode != 0:
        check("NOT_FOUND" in r.stderr or "UNAVAILABLE" in r.stderr, f"reader: {r.stderr}")
        return None
    return [json.loads(line) for line in r.stdout.splitlines()]


def start_server(factum, cfg, data, log):
    return start_serve(factum, cfg, log, "--listen", "127.0.0.1:0", "--data", data, bound=WAIT)


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    for line in body.splitlines():
        if line.startswith(name + "{"):
            return float(line.split()[-1])
    return None


def load(port, entity, acked, stop):
    """Appends payments to one ledger until `stop` or the server is gone; keeps what was
    answered 200 as (seq, fact_id)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    n = 0
    while not stop.is_set():
        n += 1
        body = json.dumps({"type": "payment", "data": {"n": n}})
        try:
            conn.request("POST", f"/v1/entities/ledger/{entity}/append", body,
                         {"X-API-Key": "k", "Content-Type": "application/json",
                          "Idempotency-Key": f"{entity}-{n}"})
            r = conn.getresponse()
            answer = r.read()
        except (OSError, http.client.HTTPException):
            return  # the server is gone
        if r.status == 200:
            a = json.loads(answer)
            acked.append((a["seq"], a["fact_id"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--reader", required=True)
    ap.add_argument("--nats-server", default="/usr/sbin/nats-server")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="outbox-kill-")
    nats = server = None
    try:
        nport = free_port()
        url = f"nats://127.0.0.1:{nport}"
        nats = subprocess.Popen([args.nats_server, "-js", "-sd", os.path.join(tmp, "js"),
                                 "-a", "127.0.0.1", "-p", str(nport)],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "nats.log"), "w"))
        cfg = os.path.join(tmp, "serve.json")
        with open(cfg, "w") as f:
            json.dump({"dev": True, "tenants": {"acme": {"api_keys": ["k"]}},
                       "outbox": {"sinks": {"bus": {"kind": "nats", "url": url,
                                                    "subject": "factum.facts",
                                                    "stream": "FACTS",
                                                    "publish_timeout_ms": 300,
                                                    "retry": {"base_delay_ms": 100,
                                                              "max_delay_ms": 500}}},
                                  "routes": [{"sink": "bus", "fact_types": ["payment"]}]}}, f)
        data, log = os.path.join(tmp, "data"), os.path.join(tmp, "serve.log")
        server, port = start_server(args.factum, cfg, data, log)

        entities = [f"e{i}" for i in range(ENTITIES)]
        acked = {e: [] for e in entities}
        stop = threading.Event()
        threads = [threading.Thread(target=load, args=(port, e, acked[e], stop)) for e in entities]
        t0 = time.time()
        for t in threads:
            t.start()
        time.sleep(UP_S)  # the load runs with NATS up ...
        delivered_up = metric(port, "factum_outbox_delivered_total") or 0
        up_s = time.time() - t0
        nats.send_signal(signal.SIGSTOP)  # ... then with NATS frozen: facts pile up
        time.sleep(FROZEN_S)
        lag_at_kill = metric(port, "factum_outbox_lag") or 0
        kill_process(server, WAIT)  # mid-load
        load_s = time.time() - t0
        nats.send_signal(signal.SIGCONT)
        stop.set()
        for t in threads:
            t.join(timeout=WAIT)
        total = sum(len(v) for v in acked.values())
        check(total > 0, "no append was acknowledged before the kill")

        server, port = start_server(args.factum, cfg, data, log)
        t1 = time.time()
        want = {e: dict(v) for e, v in acked.items()}  # seq -> fact_id
        end = time.time() + WAIT
        while True:
            msgs = read_stream(args.reader, url) or []
            seen = {}
            for m in msgs:
                seen.setdefault(m["entity"].split("/")[-1], set()).add(m["seq"])
            missing = sum(len(set(w) - seen.get(e, set())) for e, w in want.items())
            if missing == 0:
                break
            check(time.time() < end, f"{missing} acknowledged facts not in the stream after {WAIT} s")
            time.sleep(0.1)
        drain_s = time.time() - t1
        check(lag_at_kill > 0, "nothing was waiting for NATS at the kill: the test tested nothing")
        # The restarted process has seen every entity its alarm index woke: its lag goes to 0.
        while metric(port, "factum_outbox_lag") != 0:
            check(time.time() < end, "factum_outbox_lag did not come back to 0")
            time.sleep(0.05)

        dups = 0
        for e in entities:
            mine = [m for m in msgs if m["entity"] == f"acme/ledger/{e}"]
            ids = {}
            order = []
            for m in mine:
                if m["seq"] in ids:
                    check(ids[m["seq"]] == m["msg_id"], f"{e} seq {m['seq']}: two ids")
                    dups += 1
                    continue
                ids[m["seq"]] = m["msg_id"]
                order.append(m["seq"])
            check(order == sorted(order), f"{e}: out of seq order: {order}")
            check(order == list(range(1, len(order) + 1)), f"{e}: a gap: {order}")
            for seq, fid in want[e].items():
                check(ids.get(seq) == fid, f"{e} seq {seq}: id {ids.get(seq)} instead of {fid}")
                check(json.loads(mine[order.index(seq)]["data"])["fact_id"] == fid,
                      f"{e} seq {seq}: body of another fact")
        print(f"outbox kill: ok: {total} appends acknowledged over {ENTITIES} entities in "
              f"{load_s:.1f} s; {int(delivered_up)} delivered to NATS in the first {up_s:.1f} s "
              f"({delivered_up / up_s:.0f}/s); lag {int(lag_at_kill)} at the kill (NATS frozen); "
              f"{len(msgs)} messages in the stream, {dups} duplicates; all delivered "
              f"{drain_s:.2f} s after the restart")
        check(stop_serve(server, WAIT) == 0, "factum serve exited non-zero after SIGTERM")
        server = None
    finally:
        for p in (server, nats):
            kill_process(p, WAIT)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"outbox kill: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
