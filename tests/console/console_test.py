#!/usr/bin/python3
"""The web console (docs/console.md) in headless Chromium (Debian's chromium, chromium-driver and
python3-selenium) against a real `factum serve` on a free loopback port with a temp data dir and
two tenants: log in with a key, list entities, open one, filter its facts, verify the chain of a
page, follow live while a client appends (the new fact appears), retry a dead letter (the page
says its new state, a fact is appended), force-open and reset a breaker and read both moves in
its state history, page through an entity's idempotency keys, the economics chart, the cluster
view of a server alone, and a key of another tenant seeing nothing of the first's.
Screenshots of each page go to --out. Every wait is bounded; the server is stopped by its pid.

  console_test.py --factum PATH --out DIR
"""
import argparse
import hashlib
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, kill_process, start_serve,  # noqa: E402
                         stop_serve)

KEY_A = "key-acme"
KEY_G = "key-globex"
WAIT = 15  # seconds: the bound of every wait


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


class Vendor(http.server.BaseHTTPRequestHandler):
    """The tool's vendor once it is back: every delivery succeeds and costs 0.25 USD."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"delivered":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Cost", "0.25")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server:
    def __init__(self, factum, work):
        self.factum, self.work, self.port = factum, work, free_port()
        self.vendor_port = free_port()
        self.proc = None

    def start(self):
        cfg = {
            "listen": f"127.0.0.1:{self.port}",
            "data_dir": os.path.join(self.work, "data"),
            "tenants": {
                "acme": {"api_keys": [{"key": f"sha256:{sha(KEY_A)}",
                                       "scopes": ["read", "write", "operate"]}]},
                "globex": {"api_keys": [f"sha256:{sha(KEY_G)}"]},
            },
            "types": ["ledger", "webhook"],
            # Nothing listens there until the test starts the vendor: the first delivery fails
            # at once and becomes a dead letter.
            "tools": {"vendor": {"url": f"http://127.0.0.1:{self.vendor_port}/hook",
                                 "connect_timeout_ms": 500, "retry": {"max_attempts": 1}}},
        }
        path = os.path.join(self.work, "serve.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.proc, self.port = start_serve(self.factum, path, os.path.join(self.work, "serve.log"),
                                           bound=WAIT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            rc = stop_serve(self.proc, 30)
            check(rc == 0, f"factum serve exited {rc} on SIGTERM")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def call(self, method, path, body=None, key=KEY_A, idem=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url(path), data=data, method=method)
        req.add_header("X-API-Key", key)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if idem:
            req.add_header("Idempotency-Key", idem)
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def facts(self, path, key=KEY_A):
        status, body = self.call("GET", path + "/facts?limit=1000", key=key)
        check(status == 200, f"facts of {path}: {status} {body}")
        return body


def seed(srv):
    for i, (t, amount) in enumerate([("note", None), ("payment", "1.50"), ("note", None),
                                     ("payment", "2.25")]):
        body = {"type": t, "data": {"n": i}}
        if amount:
            body.update({"amount": amount, "currency": "USD"})
        status, r = srv.call("POST", "/v1/entities/ledger/a1/append", body, idem=f"a1-{i}")
        check(status == 200, f"append {i}: {status} {r}")
    status, r = srv.call("POST", "/v1/entities/webhook/w1/deliver",
                         {"tool": "vendor", "payload": {"order": 1}}, idem="w1-1")
    check(status >= 500 and "dead_letter_id" in r, f"the failed delivery: {status} {r}")
    status, r = srv.call("POST", "/v1/entities/ledger/g1/append", {"type": "note", "data": {}},
                         key=KEY_G, idem="g1-0")
    check(status == 200, f"globex append: {status} {r}")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


class Console:
    def __init__(self, drv, srv, out):
        self.d, self.srv, self.out = drv, srv, out
        # A view re-renders its rows while a wait reads them: a row read as it is replaced is
        # read again at the next poll, not a failure.
        self.wait = WebDriverWait(drv, WAIT,
                                  ignored_exceptions=[StaleElementReferenceException])

    def shot(self, name):
        self.d.save_screenshot(os.path.join(self.out, f"console-{name}.png"))

    def go(self, hash_):
        self.d.get(self.srv.url("/console" + hash_))

    def status_has(self, text):
        self.wait.until(ec.text_to_be_present_in_element((By.ID, "status"), text))

    def login(self, key):
        self.go("#/entities")
        field = self.wait.until(ec.element_to_be_clickable((By.ID, "api-key")))
        field.clear()
        field.send_keys(key)
        self.d.find_element(By.ID, "login-submit").click()
        self.wait.until(ec.presence_of_element_located((By.ID, "entities-form")))

    def seqs(self):
        return [int(r.get_attribute("data-seq"))
                for r in self.d.find_elements(By.CSS_SELECTOR, "#facts-body tr")]

    def wait_seqs(self, want):
        try:
            self.wait.until(lambda d: self.seqs() == want)
        except Exception:
            raise Failure(f"facts shown {self.seqs()}, expected {want}")


def run(srv, out):
    seed(srv)
    d = browser()
    try:
        c = Console(d, srv, out)
        # The key, then the entities, most recently active first.
        c.login(KEY_A)
        c.status_has("entities shown")
        links = {e.text for e in d.find_elements(By.CSS_SELECTOR, "a.entity-link")}
        check({"a1", "w1"} <= links and "g1" not in links, f"entities listed: {links}")
        c.shot("entities")
        # One entity's facts, then a filter.
        d.find_element(By.XPATH, "//a[@class='entity-link' and text()='a1']").click()
        c.wait_seqs([1, 2, 3, 4])
        c.shot("facts")
        d.find_element(By.ID, "f-type").send_keys("payment")
        d.find_element(By.ID, "f-apply").click()
        c.wait_seqs([2, 4])
        # The chain of the page shown, recomputed in the browser.
        c.go("#/entity/ledger/a1/facts")
        c.wait_seqs([1, 2, 3, 4])
        d.find_element(By.ID, "verify").click()
        c.wait.until(ec.text_to_be_present_in_element((By.ID, "verify-result"), "Chain verified"))
        d.find_element(By.CSS_SELECTOR, "#facts-body tr[data-seq='2'] summary").click()
        c.shot("facts-verified")
        # Live: a client appends, the fact appears.
        d.find_element(By.ID, "follow").click()
        c.wait.until(ec.text_to_be_present_in_element((By.ID, "live-state"), "Following live"))
        status, r = srv.call("POST", "/v1/entities/ledger/a1/append",
                             {"type": "note", "data": {"live": True}}, idem="a1-live")
        check(status == 200, f"live append: {status} {r}")
        c.wait_seqs([1, 2, 3, 4, 5])
        c.wait.until(ec.text_to_be_present_in_element((By.ID, "live-state"), "last fact 5"))
        c.shot("follow")
        d.find_element(By.ID, "follow").click()
        # A dead letter: the vendor is back, retry it; its state changes on the page and facts
        # are appended.
        before = len(srv.facts("/v1/entities/webhook/w1"))
        c.go("#/entity/webhook/w1/dead-letters")
        c.status_has("1 dead letters")
        state0 = d.find_element(By.CSS_SELECTOR, ".dl-status").text
        check(state0 in ("pending", "scheduled"), f"dead letter state {state0}")
        c.shot("dead-letters")
        vendor = http.server.ThreadingHTTPServer(("127.0.0.1", srv.vendor_port), Vendor)
        threading.Thread(target=vendor.serve_forever, daemon=True).start()
        try:
            d.find_element(By.CSS_SELECTOR, "button.dl-retry").click()
            c.status_has("retry done, now")

            def resolved(drv):
                drv.refresh()
                c.status_has("1 dead letters")
                return drv.find_element(By.CSS_SELECTOR, ".dl-status").text == "resolved"
            c.wait.until(resolved)
        finally:
            vendor.shutdown()
            vendor.server_close()
        check(d.find_element(By.CSS_SELECTOR, "button.dl-retry").get_attribute("disabled"),
              "a resolved dead letter offers a retry")
        check(len(srv.facts("/v1/entities/webhook/w1")) > before, "no fact after the retry")
        c.shot("dead-letter-retried")
        # Breakers: force open, then reset.
        c.go("#/entity/webhook/w1/breakers")
        c.status_has("breakers")
        d.find_element(By.CSS_SELECTOR, "button.br-force-open").click()
        c.status_has("now FORCED_OPEN")
        check(d.find_element(By.CSS_SELECTOR, ".breaker-state").text == "FORCED_OPEN", "state shown")
        c.shot("breakers")
        d.find_element(By.CSS_SELECTOR, "button.br-reset").click()
        c.status_has("now CLOSED")
        # The breaker's history: both moves, newest first, from its lifecycle facts.
        d.find_element(By.CSS_SELECTOR, "details.br-history[data-tool='vendor'] summary").click()
        c.status_has("state changes shown")
        moves = [e.text for e in d.find_elements(By.CSS_SELECTOR, ".br-move")]
        check(len(moves) >= 2 and moves[0] == "FORCED_OPEN -> CLOSED"
              and moves[1].endswith("-> FORCED_OPEN"), f"breaker history {moves}")
        c.shot("breaker-history")
        # Idempotency keys, two a page, in key order.
        c.go("#/entity/ledger/a1/keys?limit=2")
        pages = []
        for _ in range(5):
            c.status_has("idempotency keys shown")
            pages.append([e.text for e in d.find_elements(By.CSS_SELECTOR, ".key-name")])
            states = {e.text for e in d.find_elements(By.CSS_SELECTOR, ".key-state")}
            check(states == {"completed"}, f"key states {states}")
            if len(pages) == 1:
                c.shot("keys")
            nxt = d.find_elements(By.ID, "k-next")
            if not nxt:
                break
            d.execute_script("document.getElementById('status').textContent = ''")
            nxt[0].click()
        check(pages == [["a1-0", "a1-1"], ["a1-2", "a1-3"], ["a1-live"]], f"key pages {pages}")
        # Alarms, economics, the cluster view.
        c.go("#/entity/webhook/w1/alarms")
        c.status_has("alarms")
        c.shot("alarms")
        c.go("#/entity/webhook/w1/economics")
        c.status_has("error facts read")
        cats = [e.text for e in d.find_elements(By.CSS_SELECTOR, "table")[1].find_elements(
            By.CSS_SELECTOR, "tbody td:first-child")]
        check(cats, "no error category counted")
        c.shot("economics")
        costs = [e.text for e in d.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(
            By.CSS_SELECTOR, "tbody td")]
        check(costs == ["vendor USD", "0.25"], f"cost by tool {costs}")
        c.go("#/cluster")
        c.wait.until(ec.presence_of_element_located((By.ID, "not-clustered")))
        c.shot("cluster")
        # Another tenant's key sees nothing of the first's.
        d.find_element(By.ID, "logout").click()
        c.login(KEY_G)
        c.status_has("entities shown")
        links = {e.text for e in d.find_elements(By.CSS_SELECTOR, "a.entity-link")}
        check(links == {"g1"}, f"globex sees {links}")
        c.go("#/entity/ledger/a1/facts")
        c.status_has("ENTITY_NOT_FOUND")
        check(not d.find_elements(By.CSS_SELECTOR, "#facts-body tr"), "globex sees acme's facts")
        c.go("#/entity/webhook/w1/dead-letters")
        c.status_has("ENTITY_NOT_FOUND")
        d.execute_script("document.getElementById('status').textContent = ''")
        c.go("#/entity/ledger/a1/keys")
        c.status_has("ENTITY_NOT_FOUND")
        check(not d.find_elements(By.CSS_SELECTOR, ".key-name"), "globex sees acme's keys")
        # The key lives in the tab's sessionStorage only.
        stored = d.execute_script("return [sessionStorage.length, localStorage.length]")
        check(stored == [1, 0], f"storage {stored}")
    finally:
        d.quit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="factum-console-")
    srv = Server(args.factum, work)
    ok = False
    t0 = time.time()
    try:
        srv.start()
        run(srv, args.out)
        srv.stop()
        ok = True
    except Failure as e:
        print(f"console_test: FAIL: {e}", file=sys.stderr)
    except Exception as e:  # a wait that timed out, a browser that failed
        print(f"console_test: FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exc()
    finally:
        kill_process(srv.proc, WAIT)
        if not ok:
            with open(os.path.join(work, "serve.log")) as f:
                sys.stderr.write(f.read()[-4000:])
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"console_test: {'ok' if ok else 'FAILED'} in {time.time() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
