#!/usr/bin/python3
"""GET /v1/entities/{type}/{id}/facts with `as_of_seq` and `as_of` against a real `factum
serve` (started here on a temporary data directory and a free loopback port, stopped by its
pid): the facts with seq <= N, those with timestamp <= T, combined with before_seq/until (the
tighter bound), paged newest first through the Link header, and malformed values refused with
400 INVALID_QUERY. Every wait is bounded.

  facts_as_of_test.py --factum PATH
"""
import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import Failure, check, start_serve, stop_serve  # noqa: E402

WAIT = 30
KEY = "as-of-key"


def start(factum, tmp):
    cfg = os.path.join(tmp, "serve.json")
    json.dump({"data_dir": os.path.join(tmp, "data"), "dev": True,
               "tenants": {"acme": {"api_keys": [KEY]}}, "types": ["ledger"]}, open(cfg, "w"))
    return start_serve(factum, cfg, os.path.join(tmp, "serve.log"), "--listen", "127.0.0.1:0",
                       bound=WAIT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="factum-as-of-test-")
    proc = None
    try:
        proc, port = start(a.factum, tmp)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)

        def req(method, path, body=None, headers=None):
            h = {"X-API-Key": KEY}
            h.update(headers or {})
            conn.request(method, path, body, h)
            r = conn.getresponse()
            return r.status, r.getheader("Link"), json.loads(r.read() or b"null")

        for i in range(1, 7):
            st, _, body = req("POST", "/v1/entities/ledger/a1/append",
                              json.dumps({"type": "invocation", "data": {"i": i}}),
                              {"Content-Type": "application/json", "Idempotency-Key": f"k{i}"})
            check(st == 200, f"append {i}: {st} {body}")
        base = "/v1/entities/ledger/a1/facts"
        st, _, every = req("GET", base)
        check(st == 200 and [f["seq"] for f in every] == [1, 2, 3, 4, 5, 6], f"all: {every}")

        def seqs(query):
            st, link, body = req("GET", base + "?" + query)
            check(st == 200, f"{query}: {st} {body}")
            return [f["seq"] for f in body], link

        check(seqs("as_of_seq=3")[0] == [1, 2, 3], "as_of_seq=3")
        check(seqs("as_of_seq=0")[0] == [], "as_of_seq=0")
        check(seqs("as_of_seq=3&before_seq=3")[0] == [1, 2], "as_of_seq with a tighter before_seq")
        check(seqs("as_of_seq=2&before_seq=5")[0] == [1, 2], "before_seq looser than as_of_seq")
        check(seqs("as_of_seq=3&after_seq=1")[0] == [2, 3], "as_of_seq with after_seq")
        check(seqs("as_of_seq=9223372036854775807")[0] == [1, 2, 3, 4, 5, 6], "as_of_seq max")
        # Each durable append takes at least a sync, so the facts span several milliseconds;
        # the expected sets come from the timestamps the facts carry.
        for f in every:
            t = f["timestamp"]
            for at in (t, t - 1):
                want = [g["seq"] for g in every if g["timestamp"] <= at]
                got = seqs(f"as_of={at}")[0]
                check(got == want, f"as_of={at}: {got}, want {want}")
        check(every[-1]["timestamp"] > every[0]["timestamp"], "every fact in one millisecond")
        t3 = every[2]["timestamp"]
        check(seqs(f"as_of={t3}&until={every[0]['timestamp']}")[0] ==
              [f["seq"] for f in every if f["timestamp"] < every[0]["timestamp"]],
              "as_of with a tighter until")
        check(seqs("as_of=0")[0] == [], "as_of=0")
        # Newest first, a page of 2: the next page's link keeps as_of_seq.
        page, link = seqs("as_of_seq=5&order=desc&limit=2")
        check(page == [5, 4] and link and "as_of_seq=5" in link and "before_seq=4" in link,
              f"first page {page}, link {link}")
        nxt = link[link.index("<") + 1:link.index(">")]
        page2, _ = seqs(nxt.split("?", 1)[1])
        check(page2 == [3, 2], f"second page {page2} from {nxt}")
        for bad in ("as_of_seq=-1", "as_of_seq=x", "as_of=1.5", "as_of_seq=1&as_of_seq=2",
                    "as_of=", "as_of_seq=99999999999999999999"):
            st, _, body = req("GET", base + "?" + bad)
            check(st == 400 and body.get("code") == "INVALID_QUERY", f"{bad}: {st} {body}")
        conn.close()
    except Failure as e:
        print(f"facts_as_of_test: FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        if proc:
            stop_serve(proc, WAIT)
        shutil.rmtree(tmp, ignore_errors=True)
    print("facts_as_of_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
