#!/usr/bin/python3
"""Point-in-time recovery and forks over HTTP against a real `factum serve` with a continuous
archive (started here on a temporary data directory, a free loopback port, stopped by its pid).
One case per run:

  http   keyed appends, a time between them, more appends: GET .../bookmark?at=TIME names the
         commit before the time; POST .../rollback/{bookmark} ends the facts there plus the
         rollback's lifecycle fact (chained to the bookmark's head); a key completed after the
         bookmark runs again, one before it replays; a fork (same tenant, at the bookmark) holds
         the source's state there; a fork into another tenant needs that tenant's operate key;
         refusals: a bad bookmark, a bookmark that is no commit, a read-only key, a fork onto an
         existing entity, unknown members, no archive; the same through factum operate, and
         `factum inspect state --as-of` / `bookmark` / `bookmarks` reading the archive while the
         server writes it, `factum fork` and `factum restore --entity --to-bookmark` (a tenant
         named on the command line that is not the key's: 403 TENANT_MISMATCH, nothing changed)
  ids    fact ids after a rollback: an HTTP outbox sink that de-duplicates by Idempotency-Key
         gets every fact of the new history (their ids are new), a fact stream open across
         the rollback is told the history changed (`history` event) and goes on from the
         bookmark, and a stream resumed with the id of a fact rolled away is told so too, then
         gets the facts from the bookmark on; one resumed with an id of the new history is not
  kill   rounds of: a rollback request, factum serve SIGKILLed a random moment later, restarted:
         the entity is either wholly as before (every fact, same hashes) or wholly rolled back
         (the facts up to the bookmark, then the rollback fact); `factum inspect verify` passes
         on the data directory at the end

Every wait is bounded (WAIT seconds); the kill loop is bounded in rounds and time.

  pitr_test.py --factum PATH --case NAME [--keep]
"""
import argparse
import http.client
import http.server
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import Failure, check, kill_process, start_serve, stop_serve  # noqa: E402

WAIT = 30
KEY = "pitr-operator-key"
READ_KEY = "pitr-read-key"
BETA_KEY = "pitr-beta-operator-key"


class Server:
    def __init__(self, factum, tmp, data, archive=True, extra=None):
        self.factum, self.tmp, self.data = factum, tmp, data
        self.cfg = os.path.join(tmp, "serve.json")
        cfg = {"data_dir": data, "dev": True, "durability": "full", "types": ["ledger"],
               "tenants": {"acme": {"api_keys": [{"key": KEY, "scopes": ["read", "write",
                                                                         "operate"]},
                                                 {"key": READ_KEY, "scopes": ["read"]}]},
                           "beta": {"api_keys": [{"key": BETA_KEY,
                                                  "scopes": ["read", "write", "operate"]}]}}}
        if archive:
            cfg["archive_dir"] = os.path.join(tmp, "archive")
        cfg.update(extra or {})
        with open(self.cfg, "w") as f:
            json.dump(cfg, f)
        self.log = os.path.join(tmp, "serve.log")
        self.start()

    def start(self):
        self.proc, self.port = start_serve(self.factum, self.cfg, self.log, "--listen",
                                           "127.0.0.1:0", bound=WAIT)

    def kill(self):
        kill_process(self.proc, WAIT)

    def stop(self):
        stop_serve(self.proc, WAIT)

    def request(self, verb, path, body=None, key=KEY, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            h = {"X-API-Key": key, **(headers or {})}
            if body is not None:
                h["Content-Type"] = "application/json"
                body = json.dumps(body)
            conn.request(verb, path, body, h)
            r = conn.getresponse()
            text = r.read().decode()
            try:
                doc = json.loads(text) if text else None
            except ValueError:
                doc = text
            return r.status, doc, r.getheader("Idempotent-Replayed") == "true"
        finally:
            conn.close()


def append(srv, entity, key, n, tenant_key=KEY):
    st, doc, replayed = srv.request("POST", f"/v1/entities/ledger/{entity}/append",
                                    {"type": "invocation", "data": {"n": n}}, key=tenant_key,
                                    headers={"Idempotency-Key": key})
    check(st == 200, f"append {key}: {st} {doc}")
    return replayed


def facts(srv, entity, key=KEY):
    st, doc, _ = srv.request("GET", f"/v1/entities/ledger/{entity}/facts?limit=1000", key=key)
    check(st == 200, f"facts of {entity}: {st} {doc}")
    return doc["facts"] if isinstance(doc, dict) else doc


def data_of(fact):
    d = fact.get("data")
    return json.loads(d) if isinstance(d, str) else d


def expect(srv, verb, path, body, status, code, key=KEY):
    st, doc, _ = srv.request(verb, path, body, key=key)
    check(st == status and isinstance(doc, dict) and doc.get("code") == code,
          f"{verb} {path} {body}: expected {status} {code}, got {st} {doc}")


def after_ms(t):
    """Returns once the wall clock is past t (bounded): a later commit is shipped later."""
    end = time.time() + WAIT
    while int(time.time() * 1000) <= t and time.time() < end:
        time.sleep(0.002)


def case_http(factum, tmp):
    srv = Server(factum, tmp, os.path.join(tmp, "data"))
    try:
        for i in range(3):
            check(not append(srv, "e1", f"k{i}", i), "a first append replayed")
        mark = int(time.time() * 1000)
        after_ms(mark)
        for i in range(3, 5):
            append(srv, "e1", f"k{i}", i)
        before = facts(srv, "e1")
        check(len(before) == 5, f"5 facts, got {len(before)}")

        st, bm, _ = srv.request("GET", f"/v1/entities/ledger/e1/bookmark?at={mark}")
        check(st == 200 and bm["seq"] == 3, f"bookmark at {mark}: {st} {bm}")
        st, by_seq, _ = srv.request("GET", "/v1/entities/ledger/e1/bookmark?seq=3")
        check(st == 200 and by_seq["bookmark"] == bm["bookmark"], f"bookmark seq=3: {by_seq}")

        # Forks first (the source is unchanged by them), then the rollback.
        st, fk, _ = srv.request("POST", "/v1/entities/ledger/e1/fork/ledger/copy",
                                {"bookmark": bm["bookmark"], "note": "a copy"})
        check(st == 200 and fk["source_seq"] == 3, f"fork: {st} {fk}")
        cf = facts(srv, "copy")
        check(len(cf) == 1 and cf[0]["subtype"] == "forked", f"fork's facts: {cf}")
        check(data_of(cf[0])["source_hash"] == before[2]["hash"], f"provenance {cf[0]}")
        # The fork holds the source's keys; over HTTP their fingerprints name the source's
        # path, so the same key at the fork is a different request, never a second run.
        st, doc, _ = srv.request("POST", "/v1/entities/ledger/copy/append",
                                 {"type": "invocation", "data": {"n": 1}},
                                 headers={"Idempotency-Key": "k1"})
        check(st == 422 and doc["code"] == "IDEMPOTENCY_KEY_MISMATCH", f"k1 on the fork: {st} {doc}")
        check(not append(srv, "copy", "k3", 3), "k3 (after the bookmark) replays on the fork")
        check(facts(srv, "e1") == before, "the fork changed its source")
        expect(srv, "POST", "/v1/entities/ledger/e1/fork/ledger/copy", {}, 409, "CONFLICT")
        expect(srv, "POST", "/v1/entities/ledger/e1/fork/ledger/other", {"tenant": "beta"}, 403,
               "INSUFFICIENT_SCOPE")
        st, fb, _ = srv.request("POST", "/v1/entities/ledger/e1/fork/ledger/other",
                                {"tenant": "beta", "tenant_api_key": BETA_KEY})
        check(st == 200, f"fork into beta: {st} {fb}")
        check(facts(srv, "other", key=BETA_KEY)[0]["tenant_id"] == "beta", "beta's fork")

        st, rb, _ = srv.request("POST", f"/v1/entities/ledger/e1/rollback/{bm['bookmark']}",
                                {"note": "bad deploy"})
        check(st == 200 and rb["from_seq"] == 5 and rb["fact_seq"] == 4, f"rollback: {st} {rb}")
        after = facts(srv, "e1")
        check([f["hash"] for f in after[:3]] == [f["hash"] for f in before[:3]],
              "the facts up to the bookmark changed")
        check(len(after) == 4 and after[3]["subtype"] == "rolled_back" and
              after[3]["prev_hash"] == before[2]["hash"], f"the rollback fact: {after[3:]}")
        check(data_of(after[3])["note"].startswith("bad deploy"), f"note: {after[3]}")
        check(append(srv, "e1", "k1", 1), "k1 (before the bookmark) does not replay")
        check(not append(srv, "e1", "k4", 4), "k4 (after the bookmark) still replays")

        for path, body, status, code, key in [
            ("/v1/entities/ledger/e1/rollback/x.y", {}, 400, "INVALID_ARGUMENT", KEY),
            ("/v1/entities/ledger/e1/rollback/1.1.33.3", {}, 404, "NOT_FOUND", KEY),
            (f"/v1/entities/ledger/e1/rollback/{bm['bookmark']}", {"x": 1}, 400,
             "INVALID_ARGUMENT", KEY),
            (f"/v1/entities/ledger/e1/rollback/{bm['bookmark']}", {}, 403, "INSUFFICIENT_SCOPE",
             READ_KEY),
            (f"/v1/entities/ledger/nobody/rollback/{bm['bookmark']}", {}, 404, "NOT_FOUND", KEY),
            ("/v1/entities/ledger/e1/fork/ledger/..", {}, 400, "INVALID_ARGUMENT", KEY),
            ("/v1/entities/ledger/e1/fork/ledger/x", {"bookmark": "1.2"}, 400,
             "INVALID_ARGUMENT", KEY),
        ]:
            expect(srv, "POST", path, body, status, code, key)
        for q in ["", "?at=1&seq=1", "?at=x", "?when=1"]:
            expect(srv, "GET", f"/v1/entities/ledger/e1/bookmark{q}", None, 400, "INVALID_QUERY")
        expect(srv, "GET", "/v1/entities/ledger/e1/bookmark?at=1", None, 404, "NOT_FOUND")
        cli_cases(factum, srv)
        archive_cli_cases(factum, srv, os.path.join(tmp, "archive"))
    finally:
        srv.stop()
    plain = Server(factum, tmp, os.path.join(tmp, "data2"), archive=False)
    try:
        append(plain, "e1", "k0", 0)
        expect(plain, "GET", "/v1/entities/ledger/e1/bookmark?seq=1", None, 400,
               "INVALID_ARGUMENT")
    finally:
        plain.stop()


def operate(factum, srv, *args):
    r = subprocess.run([factum, "operate", *args, "--server", f"http://127.0.0.1:{srv.port}",
                        "--api-key", KEY, "--json"], capture_output=True, text=True, timeout=WAIT)
    return r.returncode, r.stdout, r.stderr


def cli_cases(factum, srv):
    """The same through `factum operate bookmark|fork|rollback`."""
    for i in range(3):
        append(srv, "cli", f"c{i}", i)
    rc, out, err = operate(factum, srv, "bookmark", "ledger/cli", "--seq", "2")
    check(rc == 0, f"operate bookmark: {rc} {err}")
    bm = json.loads(out)
    check(bm["seq"] == 2, f"operate bookmark: {out}")
    rc, out, err = operate(factum, srv, "fork", "ledger/cli", "ledger/cli-copy", "--at",
                           bm["bookmark"], "--note", "from the CLI")
    check(rc == 0 and json.loads(out)["source_seq"] == 2, f"operate fork: {rc} {out} {err}")
    rc, out, err = operate(factum, srv, "rollback", "ledger/cli", bm["bookmark"])
    check(rc == 0 and json.loads(out)["from_seq"] == 3, f"operate rollback: {rc} {out} {err}")
    f = facts(srv, "cli")
    check(len(f) == 3 and f[2]["subtype"] == "rolled_back", f"after the CLI rollback: {f}")
    for args in [["rollback", "ledger/cli", "1.2"], ["bookmark", "ledger/cli"],
                 ["fork", "ledger/cli", "bad"], ["fork", "ledger/cli", "ledger/x", "--at", "z"]]:
        rc, out, err = operate(factum, srv, *args)
        check(rc == 2 and err, f"operate {args}: exit {rc}, stderr {err!r}")
    rc, out, err = operate(factum, srv, "rollback", "ledger/cli", "9.9.9.9")
    check(rc != 0 and "NOT_FOUND" in err, f"operate rollback to no commit: {rc} {err}")


def run(factum, *args):
    r = subprocess.run([factum, *args], capture_output=True, text=True, timeout=WAIT)
    return r.returncode, r.stdout, r.stderr


def json_lines(out):
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def archive_cli_cases(factum, srv, archive):
    """The archive read by `factum inspect state --as-of`, `bookmark` and `bookmarks` while the
    server writes it; `factum fork` and `factum restore --entity --to-bookmark`, each checking
    the tenant it names against the key's."""
    for i in range(3):
        append(srv, "hist", f"h{i}", i)
    mark = int(time.time() * 1000)
    after_ms(mark)
    for i in range(3, 5):
        append(srv, "hist", f"h{i}", i)
    server = ["--server", f"http://127.0.0.1:{srv.port}", "--api-key", KEY]
    ent = "acme/ledger/hist"

    rc, out, err = run(factum, "inspect", "state", ent, "--archive", archive, "--as-of",
                       str(mark), "--json")
    check(rc == 0, f"inspect state --as-of: {rc} {err}")
    recs = json_lines(out)
    check(recs[0]["record"] == "entity" and recs[0]["last_seq"] == 3, f"state head: {recs[0]}")
    check(sorted(r["key"] for r in recs if r["record"] == "key") == ["h0", "h1", "h2"],
          f"keys as of the mark: {recs}")
    bm = recs[0]["as_of"]["bookmark"]
    rc, out, err = run(factum, "inspect", "bookmark", ent, "--archive", archive, "--at", str(mark))
    check(rc == 0 and json.loads(out)["bookmark"] == bm, f"inspect bookmark --archive: {out} {err}")
    rc, out, err = run(factum, "inspect", "bookmark", ent, *server, "--seq", "3")
    check(rc == 0 and json.loads(out)["bookmark"] == bm, f"inspect bookmark --server: {out} {err}")
    rc, out, err = run(factum, "inspect", "bookmarks", ent, "--archive", archive, "--limit", "0")
    seqs = [p["seq"] for p in json_lines(out)]
    check(rc == 0 and 3 in seqs and seqs[-1] == 5, f"inspect bookmarks: {seqs} {err}")
    last = json_lines(out)[-1]["bookmark"]

    # factum fork: TENANT/TYPE/ID on both sides; a source tenant that is not the key's is refused.
    rc, out, err = run(factum, "fork", ent, "acme/ledger/hist-fork", "--at", bm, *server, "--json")
    check(rc == 0 and json.loads(out)["source_seq"] == 3, f"factum fork: {rc} {out} {err}")
    rc, out, err = run(factum, "fork", "beta/ledger/hist", "acme/ledger/hist-2", *server)
    check(rc == 7 and "TENANT_MISMATCH" in err, f"fork of another tenant's source: {rc} {err}")
    expect(srv, "POST", "/v1/entities/ledger/hist/fork/ledger/y", {"source_tenant": "beta"}, 403,
           "TENANT_MISMATCH")

    # factum restore --entity: the rollback through the server; another tenant is refused first.
    rc, out, err = run(factum, "restore", "--entity", "beta/ledger/hist", "--to-bookmark", bm,
                       *server)
    check(rc == 7 and "TENANT_MISMATCH" in err, f"restore of another tenant's entity: {rc} {err}")
    check(len(facts(srv, "hist")) == 5, "a refused restore changed the entity")
    for args in [["--entity", ent], ["--entity", ent, "--to-bookmark", bm],
                 ["--entity", ent, "--to-bookmark", bm, "--from", "x", *server],
                 ["--from", "x"], ["--from", "x", "--data", "y", "--note", "n"], []]:
        rc, out, err = run(factum, "restore", *args)
        check(rc == 2 and err, f"restore {args}: exit {rc}, stderr {err!r}")
    rc, out, err = run(factum, "restore", "--entity", ent, "--to-bookmark", bm, *server, "--json",
                       "--note", "restore from the CLI")
    check(rc == 0 and json.loads(out)["from_seq"] == 5, f"factum restore --entity: {rc} {out} {err}")
    f = facts(srv, "hist")
    check(len(f) == 4 and f[3]["subtype"] == "rolled_back", f"after factum restore: {f}")
    # The discarded commits stay in the archive: the state at the last one still reads.
    rc, out, err = run(factum, "inspect", "state", ent, "--archive", archive, "--as-of", last,
                       "--json")
    keys = sorted(r["key"] for r in json_lines(out) if r["record"] == "key")
    check(rc == 0 and keys == ["h0", "h1", "h2", "h3", "h4"], f"state at {last}: {keys} {err}")


class Sink:
    """An HTTP outbox sink on loopback that de-duplicates by Idempotency-Key, as docs/outbox.md
    advises one to: a key it has seen is acknowledged again and not counted as new."""

    def __init__(self):
        self.lock = threading.Lock()
        self.new = []  # (key, fact) of each first delivery
        self.again = []  # the keys delivered again
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = self.headers.get("Idempotency-Key", "")
                with sink.lock:
                    if any(k == key for k, _ in sink.new):
                        sink.again.append(key)
                    else:
                        sink.new.append((key, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, n, what):
        end = time.time() + WAIT
        while time.time() < end:
            with self.lock:
                if len(self.new) >= n:
                    return list(self.new)
            time.sleep(0.02)  # polling what another thread records, bounded
        raise Failure(f"the sink got {len(self.new)} new facts, not {n}: {what}")

    def stop(self):
        self.httpd.shutdown()


class Follower:
    """A fact stream's client on its own thread: the events it got (id, event, data)."""

    def __init__(self, srv, entity, last_id=None):
        self.events, self.lock = [], threading.Lock()
        self.conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=WAIT)
        h = {"X-API-Key": KEY}
        if last_id is not None:
            h["Last-Event-ID"] = last_id
        self.conn.request("GET", f"/v1/entities/ledger/{entity}/facts/stream", headers=h)
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, f"stream: {self.resp.status}")
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        ev = {}
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if not line:
                    with self.lock:
                        self.events.append(ev)
                    ev = {}
                elif ":" in line:
                    k, v = line.split(":", 1)
                    ev[k] = v[1:] if v.startswith(" ") else v
        except (OSError, ValueError):
            pass

    def wait_for(self, pred, what):
        end = time.time() + WAIT
        while time.time() < end:
            with self.lock:
                if pred(self.events):
                    return list(self.events)
            time.sleep(0.02)  # polling what the reader thread records, bounded
        raise Failure(f"stream: {what}; events {self.events}")

    def close(self):
        self.conn.close()


def fact_events(events):
    return [(e["id"], json.loads(e["data"])) for e in events if "id" in e]


def case_ids(factum, tmp):
    sink = Sink()
    outbox = {"outbox": {"sinks": {"audit": {"kind": "http",
                                             "url": f"http://127.0.0.1:{sink.port}/facts"}},
                         "routes": [{"sink": "audit",
                                     "fact_types": ["invocation", "lifecycle"]}]}}
    srv = Server(factum, tmp, os.path.join(tmp, "data"), extra=outbox)
    live = None
    try:
        for i in range(4):
            append(srv, "e9", f"k{i}", i)
        old = sink.wait_for(4, "the first four facts")
        old_ids = [f["fact_id"] for _, f in old]
        live = Follower(srv, "e9")
        first = fact_events(live.wait_for(lambda ev: len(fact_events(ev)) >= 4, "4 facts"))
        check([i for i, _ in first] == ["1", "2", "3", "4"], f"ids before a rollback: {first}")

        st, bm, _ = srv.request("GET", "/v1/entities/ledger/e9/bookmark?seq=2")
        check(st == 200 and bm["seq"] == 2, f"bookmark: {st} {bm}")
        st, rb, _ = srv.request("POST", f"/v1/entities/ledger/e9/rollback/{bm['bookmark']}", {})
        check(st == 200 and rb["fact_seq"] == 3, f"rollback: {st} {rb}")
        for i in range(10, 12):
            append(srv, "e9", f"k{i}", i)
        now = facts(srv, "e9")
        check([f["seq"] for f in now] == [1, 2, 3, 4, 5], f"facts after: {now}")
        check([f["fact_id"] for f in now[:2]] == old_ids[:2], "the kept facts' ids changed")
        new_ids = [f["fact_id"] for f in now[2:]]
        check(not set(new_ids) & set(old_ids), f"an id given twice: {new_ids} {old_ids}")

        # The sink: the rollback fact and the two appends are new to it (before, with the old
        # ids, it acknowledged them as repeats and they never reached it).
        got = sink.wait_for(7, "the new history's facts")
        check([k for k, _ in got[4:]] == new_ids, f"the sink's new keys {got[4:]} vs {new_ids}")
        check([f["seq"] for _, f in got[4:]] == [3, 4, 5], f"in seq order: {got[4:]}")

        # The live stream: told the history changed, then the facts from the bookmark on.
        def told(ev):
            i = next((n for n, e in enumerate(ev) if e.get("event") == "history"), None)
            return i is not None and len(fact_events(ev[i:])) >= 3
        ev = live.wait_for(told, "a history event, then 3 facts")
        at = next(n for n, e in enumerate(ev) if e.get("event") == "history")
        h = json.loads(ev[at]["data"])
        check(h["code"] == "HISTORY_CHANGED" and h["last_seq_kept"] == 2, f"history: {h}")
        after = fact_events(ev[at:])
        check([f["fact_id"] for _, f in after] == new_ids, f"facts after the event: {after}")
        suffix = new_ids[0][4:20]
        check([i for i, _ in after] == [f"{s}.{suffix}" for s in (3, 4, 5)], f"ids: {after}")

        # Resumed with the id of a fact rolled away ("4"): told, then facts 3.. of the new one.
        back = Follower(srv, "e9", last_id="4")
        ev = back.wait_for(lambda e: len(fact_events(e)) >= 3, "a resume past a rollback")
        check(ev[0].get("event") == "history" and
              json.loads(ev[0]["data"])["last_seq_kept"] == 2, f"resume's first event: {ev[0]}")
        check([f["fact_id"] for _, f in fact_events(ev)] == new_ids, f"resumed: {ev}")
        back.close()
        # Resumed with an id of the new history: nothing to tell, the next fact only.
        cur = Follower(srv, "e9", last_id=f"5.{suffix}")
        append(srv, "e9", "k12", 12)
        ev = cur.wait_for(lambda e: len(fact_events(e)) >= 1, "the next fact")
        check("event" not in ev[0] and fact_events(ev)[0][0] == f"6.{suffix}", f"resumed: {ev}")
        cur.close()
        # A resume with a malformed id is refused.
        st, doc, _ = srv.request("GET", "/v1/entities/ledger/e9/facts/stream",
                                 headers={"Last-Event-ID": "4.xyz"})
        check(st == 400 and doc["code"] == "INVALID_LAST_EVENT_ID", f"bad id: {st} {doc}")
        # The rolled-back file's outbox cursor is the bookmark's: facts up to it that were
        # acknowledged after it are delivered again, with their own ids (at least once).
        with sink.lock:
            check(set(sink.again) <= set(old_ids[:2]), f"repeated: {sink.again} {old_ids}")
    finally:
        if live:
            live.close()
        srv.stop()
        sink.stop()


def case_kill(factum, tmp):
    data = os.path.join(tmp, "data")
    srv = Server(factum, tmp, data)
    outcomes = {"before": 0, "rolled back": 0}
    deadline = time.time() + 60
    n = 0
    try:
        for rnd in range(12):
            if time.time() > deadline:
                break
            for i in range(4):
                append(srv, "e1", f"r{rnd}-{i}", i)
                n += 1
            old = facts(srv, "e1")
            seq = len(old) - 2
            st, bm, _ = srv.request("GET", f"/v1/entities/ledger/e1/bookmark?seq={seq}")
            check(st == 200 and bm["seq"] == seq, f"bookmark seq={seq}: {st} {bm}")
            done = []

            def rollback():
                try:
                    done.append(srv.request("POST",
                                            f"/v1/entities/ledger/e1/rollback/{bm['bookmark']}"))
                except (OSError, http.client.HTTPException) as e:
                    done.append(e)

            t = threading.Thread(target=rollback)
            t.start()
            time.sleep(random.uniform(0, 0.06))  # the moment of the kill, not a synchronisation
            srv.kill()
            t.join(WAIT)
            srv.start()
            now = facts(srv, "e1")
            if [f["hash"] for f in now] == [f["hash"] for f in old]:
                outcomes["before"] += 1
            else:
                check(len(now) == seq + 1, f"round {rnd}: {len(now)} facts, neither "
                                           f"{len(old)} (before) nor {seq + 1} (rolled back)")
                check([f["hash"] for f in now[:seq]] == [f["hash"] for f in old[:seq]],
                      f"round {rnd}: the facts up to the bookmark changed")
                check(now[seq]["subtype"] == "rolled_back" and
                      now[seq]["prev_hash"] == old[seq - 1]["hash"],
                      f"round {rnd}: the last fact is not the rollback's: {now[seq]}")
                outcomes["rolled back"] += 1
    finally:
        srv.stop()
    r = subprocess.run([factum, "inspect", "verify", "--data", data], capture_output=True,
                       text=True, timeout=WAIT)
    check(r.returncode == 0, f"inspect verify: {r.returncode} {r.stdout[-500:]} {r.stderr[-500:]}")
    print(f"kill rounds: {outcomes} ({n} appends)")
    check(sum(outcomes.values()) >= 3, "fewer than 3 rounds ran")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--case", required=True, choices=["http", "ids", "kill"])
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-pitr-")
    try:
        {"http": case_http, "ids": case_ids, "kill": case_kill}[a.case](a.factum, tmp)
        print(f"pitr {a.case}: ok")
        return 0
    except Failure as e:
        print(f"pitr {a.case}: FAILED: {e}")
        log = os.path.join(tmp, "serve.log")
        if os.path.exists(log):
            print(open(log).read()[-3000:])
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
