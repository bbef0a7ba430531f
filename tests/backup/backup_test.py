#!/usr/bin/python3
"""`factum backup` and `factum restore` against a real `factum serve` (started here on a
temporary data directory, a free loopback port, stopped by its pid). One case per run:

  load         a backup taken while client threads keep appending with idempotency keys: the
               manifest matches the files, the restore verifies (`factum inspect verify`), and a
               server on the restored directory answers every key acknowledged before the backup
               began as a replay with the same body
  incremental  a second backup copies fewer bytes (unchanged entities are not copied again) and
               its restore holds the facts appended between the two
  kill         `factum backup` killed with SIGKILL mid-way: a first backup leaves no manifest
               (nothing to restore); a later one leaves the previous backup, which still
               restores and verifies; the next backup completes over what the killed one left
  corrupt      a byte changed in a backup file: the restore refuses, the new directory is left
               absent (or empty), no temporary directory stays behind
  bad-input    missing or wrong directories, DEST inside DIR, a manifest that is not a factum
               backup's, a non-empty target, a DEST another backup holds: a message on stderr
               and exit 2

Every wait is bounded (WAIT seconds), every load loop bounded in time and count.

  backup_test.py --factum PATH --case NAME [--keep]
"""
import argparse
import fcntl
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, kill_process, run_in_scratch, start_serve,  # noqa: E402
                         stop_serve)

WAIT = 30  # seconds: the bound of every wait
KEY = "backup-test-key"


# -- the server ----------------------------------------------------------------------------------

class Server:
    def __init__(self, factum, tmp, data, name, extra=None):
        self.cfg = os.path.join(tmp, name + ".json")
        with open(self.cfg, "w") as f:
            json.dump({"data_dir": data, "dev": True, "durability": "full",
                       "tenants": {"acme": {"api_keys": [KEY]}}, "types": ["ledger"],
                       **(extra or {})}, f)
        self.log = os.path.join(tmp, name + ".log")
        self.proc, self.port = start_serve(factum, self.cfg, self.log, "--listen", "127.0.0.1:0",
                                           "--data", data, bound=WAIT)

    def tail(self):
        return open(self.log).read()[-2000:]

    def stop(self):
        stop_serve(self.proc, WAIT)


def append(conn, entity, key, n):
    """One keyed ledger append: (status, replayed, body)."""
    body = json.dumps({"type": "invocation", "data": {"n": n}})
    conn.request("POST", f"/v1/entities/ledger/{entity}/append", body,
                 {"X-API-Key": KEY, "Content-Type": "application/json",
                  "Idempotency-Key": key})
    r = conn.getresponse()
    return r.status, r.getheader("Idempotent-Replayed") == "true", r.read().decode()


def fill(port, entities, rounds, prefix, threads=4):
    """Appends `rounds` keyed facts to each entity (threads over the entities). Returns
    {key: (entity, n, body)} of what was acknowledged."""
    acked = {}
    lock = threading.Lock()
    errors = []

    def work(part):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            for r in range(rounds):
                for e in part:
                    key = f"{prefix}-{e}-{r}"
                    st, _, body = append(conn, e, key, r)
                    if st != 200:
                        errors.append(f"{key}: {st} {body}")
                        return
                    with lock:
                        acked[key] = (e, r, body)
        finally:
            conn.close()

    ts = [threading.Thread(target=work, args=(entities[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(WAIT * 4)
    check(not errors, f"appends failed: {errors[:3]}")
    return acked


def check_replays(port, acked):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        for key, (e, n, body) in sorted(acked.items()):
            st, replayed, got = append(conn, e, key, n)
            check(st == 200 and replayed, f"{key} on {e}: status {st}, replayed {replayed}: {got}")
            check(got == body, f"{key}: replay {got} differs from the acknowledged {body}")
    finally:
        conn.close()


# -- the tools -----------------------------------------------------------------------------------

def run(factum, *args, expect=0):
    r = subprocess.run([factum, *args], capture_output=True, text=True, timeout=WAIT * 4)
    check(r.returncode == expect,
          f"factum {' '.join(args)}: exit {r.returncode}, expected {expect}: {r.stderr}")
    return r


def backup(factum, data, dest):
    return json.loads(run(factum, "backup", "--data", data, "--to", dest).stdout)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest(), os.path.getsize(path)


def check_manifest(dest):
    """The manifest names every file of its generation with the right size and SHA-256."""
    m = json.load(open(os.path.join(dest, "manifest.json")))
    check(m["format"] == "factum-backup" and m["version"] == 1, f"manifest header: {m}")
    gen = os.path.join(dest, "gen-%06d" % m["generation"])
    named = set()
    for e in m["entities"]:
        for part, suffix in (("db", ""), ("wal", "-wal")):
            if e[part] is None:
                continue
            path = os.path.join(gen, e["file"] + suffix)
            digest, size = sha256(path)
            check(digest == e[part]["sha256"] and size == e[part]["bytes"],
                  f"{path}: {size} bytes {digest}, manifest {e[part]}")
            named.add(os.path.relpath(path, gen))
    on_disk = set()
    for root, _, files in os.walk(gen):
        on_disk |= {os.path.relpath(os.path.join(root, f), gen) for f in files}
    check(on_disk == named, f"files not in the manifest: {sorted(on_disk - named)[:5]}")
    return m


def restore_and_verify(factum, dest, into):
    run(factum, "restore", "--from", dest, "--data", into)
    run(factum, "inspect", "verify", "--data", into)


# -- the cases -----------------------------------------------------------------------------------

def case_load(factum, tmp):
    data, dest, into = (os.path.join(tmp, d) for d in ("data", "backup", "restored"))
    srv = Server(factum, tmp, data, "serve")
    acked, lock, stop = {}, threading.Lock(), threading.Event()
    errors = []

    def load(t):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=WAIT)
        end = time.time() + WAIT
        for n in range(20000):
            if stop.is_set() or time.time() > end:
                break
            e, key = f"l{(n * 3 + t) % 12}", f"load-{t}-{n}"
            st, _, body = append(conn, e, key, n)
            if st != 200:
                errors.append(f"{key}: {st} {body}")
                break
            with lock:
                acked[key] = (e, n, body)
        conn.close()

    ts = [threading.Thread(target=load, args=(t,)) for t in range(3)]
    for t in ts:
        t.start()
    try:
        end = time.time() + WAIT
        while len(acked) < 300 and time.time() < end and not errors:
            time.sleep(0.01)
        with lock:
            before = dict(acked)  # acknowledged before the backup began
        b = backup(factum, data, dest)
        with lock:
            during = len(acked) - len(before)
    finally:
        stop.set()
        for t in ts:
            t.join(WAIT)
        srv.stop()
    check(not errors, f"load failed: {errors[:3]}")
    check(len(before) >= 300, f"only {len(before)} calls before the backup")
    print(f"backup under load: {b}; {len(before)} calls acknowledged before it, {during} during")
    m = check_manifest(dest)
    check(len(m["entities"]) == 12, f"{len(m['entities'])} entities in the manifest")
    restore_and_verify(factum, dest, into)
    srv = Server(factum, tmp, into, "restored")
    try:
        check_replays(srv.port, before)
    finally:
        srv.stop()


def case_incremental(factum, tmp):
    data, dest = os.path.join(tmp, "data"), os.path.join(tmp, "backup")
    srv = Server(factum, tmp, data, "serve")
    try:
        ents = [f"i{i}" for i in range(20)]
        first = fill(srv.port, ents, 5, "first")
        b1 = backup(factum, data, dest)
        later = fill(srv.port, ents[:2], 3, "later")
        b2 = backup(factum, data, dest)
    finally:
        srv.stop()
    print(f"first backup: {b1}\nsecond backup: {b2}")
    check(b2["generation"] == 2 and b2["entities"] == 20, f"second backup: {b2}")
    check(b2["unchanged"] == 18, f"{b2['unchanged']} entities unchanged, expected 18")
    check(0 < b2["bytes_copied"] < b1["bytes_copied"],
          f"second backup copied {b2['bytes_copied']} bytes, the first {b1['bytes_copied']}")
    check(not os.path.exists(os.path.join(dest, "gen-000001")), "the first generation stayed")
    check_manifest(dest)
    into = os.path.join(tmp, "restored")
    restore_and_verify(factum, dest, into)
    srv = Server(factum, tmp, into, "restored")
    try:
        check_replays(srv.port, {**first, **later})
    finally:
        srv.stop()


def kill_backup(factum, data, dest, generation):
    """Starts `factum backup`, kills it with SIGKILL once its generation directory holds 10
    entity files (polled, bounded); answers how many it held."""
    gen = os.path.join(dest, "gen-%06d" % generation, "entities")
    p = subprocess.Popen([factum, "backup", "--data", data, "--to", dest],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end, copied = time.time() + WAIT, 0
    while time.time() < end and p.poll() is None:
        copied = sum(f.endswith(".db") for _, _, fs in os.walk(gen) for f in fs) \
            if os.path.isdir(gen) else 0
        if copied >= 10:
            break
        time.sleep(0.005)
    check(p.poll() is None, "the backup finished before it could be killed")
    kill_process(p, WAIT)
    return copied


def case_kill(factum, tmp):
    data, dest = os.path.join(tmp, "data"), os.path.join(tmp, "backup")
    ents = [f"k{i}" for i in range(150)]
    # Every close checkpoints and empties the -wal: after the restart below, each entity's next
    # commit starts a new WAL generation, so the second backup copies every file whole, through
    # the names the first generation's files have there too (hard links) until it replaces them.
    closing = {"wal_kept_on_close_kib": 0}
    srv = Server(factum, tmp, data, "serve", closing)
    try:
        first = fill(srv.port, ents, 1, "first")
        # A first backup killed mid-way leaves no manifest: no backup, and the next one
        # completes over what it left.
        dest0 = os.path.join(tmp, "backup0")
        copied = kill_backup(factum, data, dest0, 1)
        check(not os.path.exists(os.path.join(dest0, "manifest.json")), "a killed first backup "
              "left a manifest")
        r = run(factum, "restore", "--from", dest0, "--data", os.path.join(tmp, "r0"), expect=2)
        check("holds no factum backup" in r.stderr, f"restore of a killed first backup: {r.stderr}")
        print(f"killed the first backup after {copied} of {len(ents)} entities")
        b0 = backup(factum, data, dest0)
        check(b0["generation"] == 1 and b0["entities"] == len(ents), f"first backup again: {b0}")
        check_manifest(dest0)
        backup(factum, data, dest)
    finally:
        srv.stop()
    srv = Server(factum, tmp, data, "serve2", closing)
    try:
        second = fill(srv.port, ents, 1, "second")  # every entity changed since
        copied = kill_backup(factum, data, dest, 2)
        print(f"killed the second backup after {copied} of {len(ents)} entities")
        m = check_manifest(dest)
        check(m["generation"] == 1, f"the manifest is generation {m['generation']}")
    finally:
        srv.stop()
    into = os.path.join(tmp, "restored1")
    restore_and_verify(factum, dest, into)
    srv = Server(factum, tmp, into, "restored1")
    try:
        check_replays(srv.port, first)
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=WAIT)
        key = sorted(second)[0]
        st, replayed, _ = append(conn, second[key][0], key, second[key][1])
        conn.close()
        check(st == 200 and not replayed, f"{key}, appended after the first backup, replayed")
    finally:
        srv.stop()
    # The next backup completes over what the killed one left.
    b = backup(factum, data, dest)
    check(b["generation"] == 2 and b["entities"] == len(ents) and b["copied_whole"] == len(ents),
          f"backup after the kill: {b}")
    check_manifest(dest)
    into = os.path.join(tmp, "restored2")
    restore_and_verify(factum, dest, into)
    srv = Server(factum, tmp, into, "restored2")
    try:
        check_replays(srv.port, {k: v for k, v in second.items() if k.endswith("-0")})
    finally:
        srv.stop()


def case_corrupt(factum, tmp):
    data, dest = os.path.join(tmp, "data"), os.path.join(tmp, "backup")
    srv = Server(factum, tmp, data, "serve")
    try:
        fill(srv.port, ["c1", "c2", "c3"], 4, "c")
        backup(factum, data, dest)
    finally:
        srv.stop()
    m = check_manifest(dest)
    victim = os.path.join(dest, "gen-%06d" % m["generation"], m["entities"][1]["file"])
    with open(victim, "r+b") as f:
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0x55]))
    for into, made in ((os.path.join(tmp, "absent"), False), (os.path.join(tmp, "empty"), True)):
        if made:
            os.mkdir(into)
        r = run(factum, "restore", "--from", dest, "--data", into, expect=1)
        check("does not match the manifest" in r.stderr, f"message: {r.stderr}")
        check(os.path.isdir(into) == made and (not made or not os.listdir(into)),
              f"{into} after a refused restore: {os.listdir(into) if made else 'exists'}")
    left = [d for d in os.listdir(tmp) if ".restore-" in d]
    check(not left, f"temporary directories left: {left}")


def case_bad_input(factum, tmp):
    data = os.path.join(tmp, "data")
    os.makedirs(os.path.join(data, "entities"))
    good = os.path.join(tmp, "good")
    # An empty data directory: a backup of no entity, with a warning (a shared-storage node's).
    r = run(factum, "backup", "--data", data, "--to", good)
    check(json.loads(r.stdout)["entities"] == 0, f"empty backup: {r.stdout}")
    check("warning: no entity file" in r.stderr, f"no warning: {r.stderr}")
    not_data = os.path.join(tmp, "plain")
    os.mkdir(not_data)
    afile = os.path.join(tmp, "afile")
    open(afile, "w").write("x")
    foreign = os.path.join(tmp, "foreign")
    os.mkdir(foreign)
    open(os.path.join(foreign, "manifest.json"), "w").write('{"format": "something else"}')
    full = os.path.join(tmp, "full")
    os.mkdir(full)
    open(os.path.join(full, "notes.txt"), "w").write("x")
    evil = os.path.join(tmp, "evil")
    shutil.copytree(good, evil)
    m = json.load(open(os.path.join(evil, "manifest.json")))
    m["entities"] = [{"tenant": "acme", "type": "ledger", "id": "a1", "key": "acme/ledger/a1",
                      "file": "../../../etc/passwd", "last_seq": 0, "head": "0" * 64,
                      "db": {"bytes": 1, "sha256": "0" * 64}, "wal": None}]
    json.dump(m, open(os.path.join(evil, "manifest.json"), "w"))
    cases = [
        (["backup", "--data", os.path.join(tmp, "missing"), "--to", good], "is not a directory"),
        (["backup", "--data", afile, "--to", good], "is not a directory"),
        (["backup", "--data", not_data, "--to", good], "not a factum data directory"),
        (["backup", "--data", data, "--to", os.path.join(data, "bk")], "inside the data directory"),
        (["backup", "--data", data, "--to", data], "inside the data directory"),
        (["backup", "--data", data, "--to", tmp], "is inside --to"),
        (["backup", "--data", data, "--to", afile], "is not a directory"),
        (["backup", "--data", data, "--to", foreign], "is not a factum backup manifest"),
        (["backup", "--data", data, "--to", full], "holds no factum backup"),
        (["restore", "--from", os.path.join(tmp, "missing"), "--data", os.path.join(tmp, "n1")],
         "is not a directory"),
        (["restore", "--from", full, "--data", os.path.join(tmp, "n2")], "holds no factum backup"),
        (["restore", "--from", foreign, "--data", os.path.join(tmp, "n3")],
         "is not a factum backup manifest"),
        (["restore", "--from", evil, "--data", os.path.join(tmp, "n4")], "is not the key's path"),
        (["restore", "--from", good, "--data", full], "is not empty"),
        (["restore", "--from", good, "--data", afile], "is not a directory"),
        (["restore", "--from", good, "--data", os.path.join(good, "x")], "overlap"),
        (["restore", "--from", good, "--data", os.path.join(tmp, "no", "such", "parent")],
         "is not a directory"),
        (["backup", "--data", data], "--to is required"),
        (["restore", "--from", good], "--data is required"),
    ]
    for args, says in cases:
        r = run(factum, *args, expect=2)
        check(says in r.stderr, f"factum {' '.join(args)}: stderr {r.stderr!r} lacks {says!r}")
    # A second backup into a DEST whose lock another backup holds.
    with open(os.path.join(good, "backup.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = run(factum, "backup", "--data", data, "--to", good, expect=2)
        check("in use by another factum backup" in r.stderr, f"locked DEST: {r.stderr!r}")
    for n in ("n1", "n2", "n3", "n4"):
        check(not os.path.exists(os.path.join(tmp, n)), f"{n} was made by a refused restore")
    check(os.listdir(full) == ["notes.txt"], "a refused restore changed the target")
    restore_and_verify(factum, good, os.path.join(tmp, "empty-restore"))


CASES = {"load": case_load, "incremental": case_incremental, "kill": case_kill,
         "corrupt": case_corrupt, "bad-input": case_bad_input}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    return run_in_scratch(f"backup_test {a.case}",
                          lambda tmp: CASES[a.case](os.path.abspath(a.factum), tmp), a.keep)


if __name__ == "__main__":
    sys.exit(main())
