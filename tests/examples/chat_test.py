#!/usr/bin/python3
"""examples/chat end to end: a real `factum serve` on a free loopback port, driven by real
WebSocket clients (python3-websockets) and, for frames no well-behaved client sends, by a raw
socket client. Checks: messages in order to every member, history on reconnect, the room
hibernating with members connected and waking on the next message, the ping auto-response not
waking it, refusals (no name, no key, no upgrade, a type without WebSockets, the per-entity cap),
tenant isolation, hostile clients (oversized, invalid UTF-8, unmasked, flood, a client that never
reads) each closed with its code while the server stays healthy, and a SIGKILL of the server
losing no message whose echo reached its sender. Every wait is bounded; the server is started
here and stopped by its pid.

  chat_test.py --factum PATH [--keep]
"""
import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from factum_test import (Failure, check, free_port, kill_process, start_serve,  # noqa: E402
                         stop_serve)

KEY_A = "key-acme"
KEY_G = "key-globex"
WAIT = 15  # seconds: the bound of every wait in this test


# -- the server ---------------------------------------------------------------------------------


class Server:
    def __init__(self, factum, data, port):
        self.factum, self.data, self.port = factum, data, port
        self.proc = None

    def config(self):
        cfg = {
            "listen": f"127.0.0.1:{self.port}",
            "data_dir": self.data,
            "durability": "full",
            "dev": True,
            "idle_timeout_ms": 300,
            "tenants": {
                "acme": {"api_keys": [{"key": KEY_A, "scopes": ["read", "write", "operate"]}]},
                "globex": {"api_keys": [KEY_G]},
            },
            "types": ["room", "counter"],
            "limits": {
                "ws_max_message_bytes": 4096,
                "ws_messages_per_second": 200,
                "ws_max_connections_per_entity": 5,
                "ws_max_send_queue_bytes": 65536,
            },
        }
        path = os.path.join(os.path.dirname(self.data), f"serve-{self.port}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def start(self):
        log = os.path.join(os.path.dirname(self.data), "serve.log")
        self.proc, self.port = start_serve(self.factum, self.config(), log, bound=WAIT)

    def kill(self):
        kill_process(self.proc, WAIT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            rc = stop_serve(self.proc, 30)
            check(rc == 0, f"factum serve exited {rc} on SIGTERM")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def ws(self, room, name=None, key=KEY_A, typ="room"):
        q = f"?name={name}" if name is not None else ""
        return f"ws://127.0.0.1:{self.port}/v1/entities/{typ}/{room}/ws{q}"

    def metric(self, name):
        with urllib.request.urlopen(self.url("/metrics"), timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                m = re.match(r"^(\S+)\s+(\S+)$", line)
                if m and (m.group(1) == name or m.group(1).startswith(name + "{")):
                    total += float(m.group(2))
        return total

    def metric_labelled(self, name, label):
        with urllib.request.urlopen(self.url("/metrics"), timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + "{" + label + "}"):
                    return float(line.split()[-1])
        return 0.0

    def wait_metric(self, name, pred, what, label=None):
        deadline = time.time() + WAIT
        while time.time() < deadline:
            v = self.metric_labelled(name, label) if label else self.metric(name)
            if pred(v):
                return v
            time.sleep(0.05)  # polling a gauge the server updates, bounded by the deadline
        raise Failure(f"timed out waiting for {what}")

    def get(self, path, key=KEY_A, headers=None):
        req = urllib.request.Request(self.url(path), headers={"X-API-Key": key, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


# -- clients ------------------------------------------------------------------------------------


async def connect(srv, room, name, key=KEY_A):
    ws = await asyncio.wait_for(
        websockets.connect(srv.ws(room, name), extra_headers={"X-API-Key": key}, max_size=None),
        WAIT)
    hist = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    check(hist["type"] == "history", f"first frame is the history, got {hist}")
    pres = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    check(pres["type"] == "presence" and name in pres["members"], f"then presence, got {pres}")
    return ws, hist["messages"]


async def next_of(ws, typ):
    """The next frame of type `typ` (skipping presence changes)."""
    while True:
        m = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        if m["type"] == typ:
            return m


async def closed_code(ws):
    """Reads until the server closes; the close code."""
    try:
        while True:
            await asyncio.wait_for(ws.recv(), WAIT)
    except websockets.ConnectionClosed as e:
        return e.code


def upgrade_status(srv, path, headers):
    """Status of a WebSocket upgrade the server refuses before the handshake."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT)
    req = (f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    for k, v in headers.items():
        req += f"{k}: {v}\r\n"
    s.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    s.close()
    return int(head.split(b" ", 2)[1])


class RawClient:
    """A WebSocket client that sends whatever frames it is told to, masked or not."""

    def __init__(self, srv, room, name, rcvbuf=None):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(WAIT)
        self.s.connect(("127.0.0.1", srv.port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /v1/entities/room/{room}/ws?name={name} HTTP/1.1\r\nHost: x\r\n"
                        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                        f"Sec-WebSocket-Key: {key}\r\nX-API-Key: {KEY_A}\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.s.recv(4096)
            check(chunk, "the raw client's handshake got no answer")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        check(head.startswith(b"HTTP/1.1 101"), f"handshake answered {head[:40]!r}")

    def send(self, opcode, payload, masked=True):
        b1 = 0x80 | opcode
        n = len(payload)
        hdr = bytes([b1])
        mbit = 0x80 if masked else 0
        if n < 126:
            hdr += bytes([mbit | n])
        elif n < 65536:
            hdr += bytes([mbit | 126]) + struct.pack("!H", n)
        else:
            hdr += bytes([mbit | 127]) + struct.pack("!Q", n)
        if masked:
            mask = os.urandom(4)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            hdr += mask
        self.s.sendall(hdr + payload)

    def close_code(self):
        """Reads frames until a close frame (its code) or the end of the connection (None)."""
        deadline = time.time() + WAIT
        while time.time() < deadline:
            while len(self.buf) >= 2:
                op, ln = self.buf[0] & 0x0F, self.buf[1] & 0x7F
                off = 2
                if ln == 126:
                    ln, off = struct.unpack("!H", self.buf[2:4])[0], 4
                elif ln == 127:
                    ln, off = struct.unpack("!Q", self.buf[2:10])[0], 10
                if len(self.buf) < off + ln:
                    break
                payload, self.buf = self.buf[off:off + ln], self.buf[off + ln:]
                if op == 0x8:
                    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            try:
                chunk = self.s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                return None
            if not chunk:
                return None
            self.buf += chunk
        raise Failure("no close frame within the bound")


# -- the cases ----------------------------------------------------------------------------------


async def messages_in_order(srv):
    a, _ = await connect(srv, "r-order", "alice")
    b, _ = await connect(srv, "r-order", "bob")
    await next_of(a, "joined")
    texts = [f"m{i}" for i in range(100)]
    for t in texts:
        await a.send(t)
    for ws in (a, b):
        got = [await next_of(ws, "message") for _ in texts]
        check([m["text"] for m in got] == texts, "every member gets the messages in order")
        seqs = [m["seq"] for m in got]
        check(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "seqs increase")
    await b.close()
    left = await next_of(a, "left")
    check(left["name"] == "bob", "on_close told the others")
    b, hist = await connect(srv, "r-order", "bob")
    check([m["text"] for m in hist] == texts[-50:], "a reconnecting member gets the history")
    await a.close()
    await b.close()
    print("ok: messages in order to every member; history on reconnect; on_close")


async def hibernation(srv):
    a, _ = await connect(srv, "r-sleep", "alice")
    b, _ = await connect(srv, "r-sleep", "bob")
    await next_of(a, "joined")
    srv.wait_metric("factum_active_entities", lambda v: v == 0,
                    "the room to hibernate with both members connected")
    check(srv.metric("factum_ws_connections") >= 2, "both connections stay open")
    act = srv.metric("factum_activations_total")
    await b.send("ping")
    check(await asyncio.wait_for(b.recv(), WAIT) == "pong", "ping is answered pong")
    check(srv.metric("factum_activations_total") == act, "the auto-response woke nothing")
    await a.send("wake up")
    for ws in (a, b):
        m = await next_of(ws, "message")
        check(m["text"] == "wake up", "the message reaches both members")
    check(srv.metric("factum_activations_total") == act + 1, "the message woke the room once")
    await a.close()
    await b.close()
    print("ok: the room hibernates with members connected, ping does not wake it, a message does")


async def refusals(srv):
    ws = await websockets.connect(srv.ws("r-ref"), extra_headers={"X-API-Key": KEY_A})
    check(await closed_code(ws) == 4400, "on_connect's refusal closes with its code")
    check(upgrade_status(srv, "/v1/entities/room/r-ref/ws?name=x", {}) == 401, "no key: 401")
    # Two keys are ambiguous however they come: a header and a subprotocol (of either tenant),
    # or two subprotocols.
    for two in ({"X-API-Key": KEY_A, "Sec-WebSocket-Protocol": f"factum, factum-key.{KEY_G}"},
                {"X-API-Key": KEY_A, "Sec-WebSocket-Protocol": f"factum, factum-key.{KEY_A}"},
                {"Sec-WebSocket-Protocol": f"factum, factum-key.{KEY_A}, factum-key.{KEY_G}"}):
        check(upgrade_status(srv, "/v1/entities/room/r-ref/ws?name=x", two) == 401,
              f"two keys: 401 ({two})")
    ws = await websockets.connect(srv.ws("r-ref", "y"),
                                  subprotocols=["factum", f"factum-key.{KEY_A}"])
    check(ws.subprotocol == "factum", "one key as a subprotocol is accepted")
    await ws.close()
    check(upgrade_status(srv, "/v1/entities/counter/c1/ws", {"X-API-Key": KEY_A}) == 404,
          "a type without WebSockets: 404")
    st, body = srv.get("/v1/entities/room/r-ref/ws")
    check(st == 426 and body["code"] == "UPGRADE_REQUIRED", f"no upgrade: 426, got {st}")
    held = [await connect(srv, "r-cap", f"u{i}") for i in range(5)]
    check(upgrade_status(srv, "/v1/entities/room/r-cap/ws?name=six", {"X-API-Key": KEY_A}) == 429,
          "the sixth connection of an entity: 429")
    for ws, _ in held:
        await ws.close()
    # Tenant isolation: globex's room r-order is another entity than acme's.
    g, hist = await connect(srv, "r-order", "mallory", key=KEY_G)
    check(hist == [], "another tenant's room of the same id shares nothing")
    await g.close()
    print("ok: refusals (4400, 401, 404, 426, 429) and tenant isolation")


async def hostile(srv):
    rss0 = srv.rss_kib()
    raw = RawClient(srv, "r-host", "big")
    raw.send(0x1, b"x" * 5000)
    check(raw.close_code() == 1009, "an oversized message closes with 1009")
    raw = RawClient(srv, "r-host", "utf")
    raw.send(0x1, b"\xff\xfe\xfd")
    check(raw.close_code() == 1007, "invalid UTF-8 in a text frame closes with 1007")
    raw = RawClient(srv, "r-host", "unmasked")
    raw.send(0x1, b"hello", masked=False)
    check(raw.close_code() == 1002, "an unmasked client frame closes with 1002")
    raw = RawClient(srv, "r-host", "flood")
    for i in range(400):
        raw.send(0x1, f"flood {i}".encode())
    check(raw.close_code() == 1008, "a flood closes with 1008")
    # A client that never reads: its queue grows with each broadcast until the server drops it.
    before = srv.metric_labelled("factum_ws_closed_total", 'reason="slow_reader"')
    sleeper = RawClient(srv, "r-slow", "sleeper", rcvbuf=4096)
    talker, _ = await connect(srv, "r-slow", "talker")
    deadline = time.time() + 4 * WAIT  # the kernel's socket buffers fill first (a few MB)
    sent = 0
    while time.time() < deadline and sent < 2000:
        await talker.send("y" * 4000)
        await next_of(talker, "message")  # its own echo
        await asyncio.sleep(0.01)  # pacing under ws_messages_per_second (not a synchronisation)
        sent += 1
        if sent % 20 == 0 and srv.metric_labelled(
                "factum_ws_closed_total", 'reason="slow_reader"') > before:
            break
    check(srv.metric_labelled("factum_ws_closed_total", 'reason="slow_reader"') > before,
          f"a client that never reads is dropped (after {sent} messages of 4000 bytes)")
    sleeper.s.close()
    await talker.close()
    st, _ = srv.get("/healthz")
    check(st == 200, "the server stays healthy")
    grew = srv.rss_kib() - rss0
    check(grew < 64 * 1024, f"memory stays bounded (resident grew {grew} KiB)")
    a, _ = await connect(srv, "r-host", "after")
    await a.send("still here")
    check((await next_of(a, "message"))["text"] == "still here", "and serves the room")
    await a.close()
    print(f"ok: hostile clients closed (1009, 1007, 1002, 1008, slow reader after {sent} "
          f"messages), resident memory +{grew} KiB")


async def kill9(srv):
    """Two members send while the server is SIGKILLed: every message whose echo reached its
    sender is in the room's log afterwards, once."""
    a, _ = await connect(srv, "r-kill", "alice")
    b, _ = await connect(srv, "r-kill", "bob")
    acked = {"alice": [], "bob": []}

    async def talk(ws, name):
        try:
            i = 0
            while i < 5000:
                await ws.send(f"{name}-{i}")
                i += 1
                while True:  # wait for our own echo: the acknowledgement
                    m = await next_of(ws, "message")
                    if m["name"] == name:
                        acked[name].append(m["text"])
                        break
        except (websockets.ConnectionClosed, asyncio.TimeoutError, OSError):
            return

    tasks = [asyncio.create_task(talk(a, "alice")), asyncio.create_task(talk(b, "bob"))]
    deadline = time.time() + WAIT
    while time.time() < deadline and min(len(acked["alice"]), len(acked["bob"])) < 30:
        await asyncio.sleep(0.01)  # lets the talkers run until both have echoes, bounded
    srv.kill()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    check(len(acked["alice"]) >= 30 and len(acked["bob"]) >= 30, "both sent before the kill")
    srv.start()
    st, facts = srv.get("/v1/entities/room/r-kill/facts?type=chat.message&limit=10000")
    check(st == 200, f"facts readable after the restart, got {st}")
    logged = [f["data"]["text"] for f in facts]
    for name in acked:
        for t in acked[name]:
            check(logged.count(t) == 1, f"acknowledged {t} is in the log once")
    v = subprocess.run([srv.factum, "inspect", "verify", "acme/room/r-kill", "--data", srv.data,
                        "--json"], capture_output=True, text=True, timeout=WAIT)
    check(v.returncode == 0, f"the chain verifies after the kill: {v.stdout} {v.stderr}")
    c, hist = await connect(srv, "r-kill", "carol")
    check(hist and hist[-1]["text"] == logged[-1], "the restarted room serves its history")
    await c.close()
    print(f"ok: SIGKILL lost none of {len(acked['alice']) + len(acked['bob'])} acknowledged "
          f"messages ({len(logged)} in the log)")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--factum", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="factum-chat-")
    srv = Server(args.factum, os.path.join(work, "data"), free_port())
    ok = False
    try:
        srv.start()
        for case in (messages_in_order, hibernation, refusals, hostile, kill9):
            await case(srv)
        srv.stop()
        ok = True
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
    finally:
        kill_process(srv.proc, WAIT)
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
