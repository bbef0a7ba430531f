#!/usr/bin/python3
"""A fact stream across a SIGKILL of `factum serve` (docs/http-api.md, "Following facts"): a
reader follows an entity's stream (GET .../facts/stream) while a client appends to it with
Idempotency-Keys; once the reader has some events the server is killed with SIGKILL mid-load and
started again on the same data directory. Every event the reader got must be on disk: the same
fact, seq and hash, as GET .../facts on the restarted server answers it, and every append the
client saw acknowledged too. The reader then resumes with Last-Event-ID (the last seq it got) on
the restarted server while the client appends some more: the rest arrives in seq order, no gap,
no repeat, up to the last fact. Every wait is bounded; the servers are started here and stopped
by their pid.

  stream_kill_test.py --factum PATH [--keep]
"""
import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, kill_process, start_serve, stop_serve,  # noqa: E402
                         wait_until)

KEY = "stream-kill-key"
ENTITY = "/v1/entities/ledger/s1"
BEFORE_KILL = 60  # events the reader has when the server is killed
MAX_APPENDS = 2000  # the load's bound before the kill
AFTER = 30  # appends on the restarted server
WAIT = 20  # seconds: the bound of every wait


class Reader(threading.Thread):
    """Follows the stream after `after`, keeping each event's fact; ends when the connection
    does (or `until` seq arrived)."""

    def __init__(self, port, after, until=None):
        super().__init__(daemon=True)
        self.port, self.after, self.until = port, after, until
        self.facts, self.error, self.status = [], None, None

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
            c.request("GET", ENTITY + "/facts/stream",
                      headers={"X-API-Key": KEY, "Last-Event-ID": str(self.after)})
            r = c.getresponse()
            self.status = r.status
            if r.status != 200:
                self.error = f"stream answered {r.status}: {r.read()[:300]!r}"
                return
            event = {}
            while True:
                line = r.readline()
                if not line:
                    return  # the server went away
                line = line.decode().rstrip("\n")
                if line == "":
                    if "data" in event and event.get("event", "") == "":
                        fact = json.loads(event["data"])
                        check(int(event["id"]) == fact["seq"], f"event id {event} is not its seq")
                        self.facts.append(fact)
                        if self.until is not None and fact["seq"] >= self.until:
                            return
                    elif "event" in event:
                        self.error = f"stream ended with {event}"
                        return
                    event = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    event[name] = value
        except (OSError, http.client.HTTPException) as e:
            if self.until is not None:
                self.error = f"resumed stream failed: {e}"
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = f"{type(e).__name__}: {e}"


class Writer(threading.Thread):
    """Appends with keys w-1, w-2, ... until stopped, the bound, or the server goes away; keeps
    the seq of every acknowledged append by key."""

    def __init__(self, port, first, count):
        super().__init__(daemon=True)
        self.port, self.first, self.count = port, first, count
        self.acked, self.stop, self.error = {}, threading.Event(), None

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        for i in range(self.first, self.first + self.count):
            if self.stop.is_set():
                return
            try:
                c.request("POST", ENTITY + "/append", json.dumps({"type": "note", "data": {"i": i}}),
                          {"X-API-Key": KEY, "Content-Type": "application/json",
                           "Idempotency-Key": f"w-{i}"})
                r = c.getresponse()
                body = json.loads(r.read() or b"null")
            except (OSError, http.client.HTTPException):
                return  # killed
            if r.status != 200:
                self.error = f"append w-{i}: {r.status} {body}"
                return
            self.acked[f"w-{i}"] = body["seq"]


def all_facts(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    out, after = [], 0
    for _ in range(100):
        c.request("GET", f"{ENTITY}/facts?limit=10000&after_seq={after}", headers={"X-API-Key": KEY})
        r = c.getresponse()
        page = json.loads(r.read())
        check(r.status == 200, f"facts: {r.status} {page}")
        out += page
        if not r.getheader("Link"):
            return out
        after = page[-1]["seq"]
    raise Failure("more than 100 pages of facts")


def run(factum, tmp):
    cfg = os.path.join(tmp, "serve.json")
    json.dump({"data_dir": os.path.join(tmp, "data"), "dev": True,
               "tenants": {"acme": {"api_keys": [KEY]}}, "types": ["ledger"]}, open(cfg, "w"))
    log = os.path.join(tmp, "serve.log")
    procs = []
    try:
        proc, port = start_serve(factum, cfg, log, "--listen", "127.0.0.1:0", bound=WAIT)
        procs.append(proc)
        writer = Writer(port, 1, MAX_APPENDS)
        writer.start()
        # The stream opens once the entity exists (a stream of an entity never written is 404).
        wait_until("the first append", lambda: writer.acked or writer.error, bound=WAIT)
        check(writer.error is None, writer.error or "")
        reader = Reader(port, 0)
        reader.start()
        wait_until(f"{BEFORE_KILL} events before the kill",
                   lambda: len(reader.facts) >= BEFORE_KILL or not reader.is_alive(), bound=WAIT)
        check(reader.error is None, f"reader: {reader.error}")
        check(writer.is_alive(), f"the load ended before the kill: {writer.error}")
        kill_process(proc, WAIT)
        writer.stop.set()
        writer.join(WAIT)
        reader.join(WAIT)
        check(not writer.is_alive() and not reader.is_alive(), "a client outlived the server")
        check(writer.error is None, f"writer: {writer.error}")
        got = reader.facts
        seqs = [f["seq"] for f in got]
        check(seqs == list(range(1, len(seqs) + 1)), f"the stream skipped or repeated: {seqs}")
        print(f"stream_kill_test: {len(writer.acked)} appends acknowledged, {len(got)} events "
              f"read before the SIGKILL")

        proc, port = start_serve(factum, cfg, log, "--listen", "127.0.0.1:0", bound=WAIT)
        procs.append(proc)
        disk = all_facts(port)
        check([f["seq"] for f in disk] == list(range(1, len(disk) + 1)), "seqs on disk")
        check(len(disk) >= len(got), f"{len(got)} events read, {len(disk)} facts on disk")
        for f in got:
            check(disk[f["seq"] - 1] == f,
                  f"seq {f['seq']} as streamed {f} is not as on disk {disk[f['seq'] - 1]}")
        by_key = {f.get("idempotency_key"): f["seq"] for f in disk}
        for k, seq in writer.acked.items():
            check(by_key.get(k) == seq, f"acknowledged {k} (seq {seq}) is not on disk")

        # Resume after the last event received while the client appends more.
        last = disk[-1]["seq"] + AFTER
        resumed = Reader(port, seqs[-1], until=last)
        resumed.start()
        more = Writer(port, MAX_APPENDS + 1, AFTER)
        more.run()  # on this thread: every append acknowledged, or the test fails
        check(more.error is None and len(more.acked) == AFTER, f"appends after the restart: "
              f"{more.error}, {len(more.acked)} acknowledged")
        check(max(more.acked.values()) == last, f"last append {max(more.acked.values())}, not {last}")
        resumed.join(WAIT)
        check(not resumed.is_alive(), f"the resumed stream did not reach seq {last}")
        check(resumed.error is None, f"resumed: {resumed.error}")
        rest = [f["seq"] for f in resumed.facts]
        check(rest == list(range(seqs[-1] + 1, last + 1)),
              f"resumed after {seqs[-1]}: {rest[:5]}...{rest[-5:]} (want up to {last})")
        disk = all_facts(port)
        for f in resumed.facts:
            check(disk[f["seq"] - 1] == f, f"resumed seq {f['seq']} differs from disk")
        print(f"stream_kill_test: {len(disk)} facts on disk after the restart; resumed after "
              f"{seqs[-1]}, got {len(rest)} events up to {last}")
        rc = stop_serve(procs[-1], WAIT)
        check(rc == 0, f"factum serve exited {rc} on SIGTERM")
    finally:
        for p in procs:
            kill_process(p, WAIT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-stream-kill-")
    t0 = time.time()
    ok = False
    try:
        run(a.factum, tmp)
        ok = True
    except Failure as e:
        print(f"stream_kill_test: FAIL: {e}", file=sys.stderr)
        log = os.path.join(tmp, "serve.log")
        if os.path.exists(log):
            sys.stderr.write(open(log).read()[-3000:])
    finally:
        if ok and not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"stream_kill_test: {'ok' if ok else 'FAILED'} in {time.time() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
