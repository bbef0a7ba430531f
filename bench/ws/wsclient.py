#!/usr/bin/python3
"""bench/ws/wsclient.py: one client process of bench/ws/run (python3-websockets, asyncio).

The driver starts several of these (one per core) and steers them with one JSON object per line
on stdin; each command is answered with one JSON object per line on stdout (the command's "id"
echoed). The same code drives factum and workerd: both serve the chat room protocol of
examples/chat/room.cpp at ws://HOST:PORT/v1/entities/room/{id}/ws?name=NAME.

Commands (every wait bounded by the command's timeout_s):
  open   {group, url, headers, rooms, per_room, prefix, concurrency, timeout_s}
         opens per_room connections to each room; each is open once its "presence" frame came
  ping   {group, every, timeout_s}   sends "ping" on every n-th connection, counts the "pong"s
  arm    {token}                      the next frames whose text is the token are timed
  send   {group, index, text}         sends one message; answers the monotonic time of the send
  flood  {group, seconds, max_messages, window, timeout_s}
         every connection of the group sends, at most `window` of its own messages unanswered
         (its own broadcast copy is its answer), until `seconds` or `max_messages`
  counts {group}                      messages each connection has received (min, max, total)
  close  {group, timeout_s}           closes the group's connections
  quit
When every connection of the armed group has a frame with the armed token, the process writes
{"event":"got","token":..,"n":..,"first":..,"last":..} (times: time.monotonic(), CLOCK_MONOTONIC,
the same clock in every process of the machine).
"""

import asyncio
import json
import sys
import time

import websockets


def log_error(errors, e):
    key = type(e).__name__ + ": " + str(e)[:120]
    errors[key] = errors.get(key, 0) + 1


class member:
    """One connection: its socket, its reader task and what it has received."""

    __slots__ = ("ws", "name", "task", "messages", "pongs", "acks")

    def __init__(self, ws, name):
        self.ws = ws
        self.name = name
        self.task = None
        self.messages = 0  # {"type":"message"} frames received
        self.pongs = 0
        self.acks = None  # flood: text -> future, for this member's own messages


class client:
    def __init__(self):
        self.groups = {}
        self.out = sys.stdout
        self.armed = None  # [token_bytes_in_frame, group, count, first, last]
        self.pong_event = asyncio.Event()

    def write(self, obj):
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    # -- receiving --

    async def reader(self, m, group):
        try:
            async for frame in m.ws:
                now = time.monotonic()
                if frame == "pong":
                    m.pongs += 1
                    self.pong_event.set()
                    continue
                if not isinstance(frame, str) or '"message"' not in frame:
                    continue
                m.messages += 1
                a = self.armed
                if a is not None and a[1] == group and a[0] in frame:
                    a[2] += 1
                    if a[3] is None:
                        a[3] = now
                    a[4] = now
                    if a[2] == len(self.groups[group]):
                        self.write({"event": "got", "token": a[5], "n": a[2], "first": a[3],
                                    "last": a[4]})
                        self.armed = None
                if m.acks:
                    msg = json.loads(frame)
                    fut = m.acks.pop(msg.get("text"), None)
                    if fut is not None and not fut.done():
                        fut.set_result(now)
        except websockets.ConnectionClosed:
            pass

    # -- commands --

    async def open(self, c):
        group = self.groups.setdefault(c["group"], [])
        sem = asyncio.Semaphore(c.get("concurrency", 64))
        errors = {}
        ok = 0
        deadline = time.monotonic() + c["timeout_s"]

        async def one(room, i):
            nonlocal ok
            name = f'{c["prefix"]}{room}-{i}'
            url = f'{c["url"]}/v1/entities/room/{room}/ws?name={name}'
            async with sem:
                left = deadline - time.monotonic()
                if left <= 0:
                    errors["deadline"] = errors.get("deadline", 0) + 1
                    return
                try:
                    ws = await asyncio.wait_for(
                        websockets.connect(url, extra_headers=c.get("headers", {}),
                                           compression=None, ping_interval=None,
                                           close_timeout=2, max_queue=None,
                                           open_timeout=left),
                        timeout=left)
                except Exception as e:  # refused, reset, timed out: counted, not fatal
                    log_error(errors, e)
                    return
                try:
                    while True:  # history first, then presence (joins of others may interleave)
                        f = await asyncio.wait_for(ws.recv(), timeout=max(0.1, deadline - time.monotonic()))
                        if isinstance(f, str) and f.startswith("{") and '"presence"' in f:
                            break
                except Exception as e:
                    log_error(errors, e)
                    await ws.close()
                    return
                m = member(ws, name)
                group.append(m)
                m.task = asyncio.ensure_future(self.reader(m, c["group"]))
                ok += 1

        t0 = time.monotonic()
        await asyncio.gather(*(one(r, i) for r in c["rooms"] for i in range(c["per_room"])))
        return {"ok": ok, "failed": sum(errors.values()), "errors": errors,
                "seconds": time.monotonic() - t0}

    async def ping(self, c):
        group = self.groups.get(c["group"], [])
        targets = group[:: c["every"]]
        before = sum(m.pongs for m in targets)
        errors = {}
        for m in targets:
            try:
                await m.ws.send("ping")
            except Exception as e:
                log_error(errors, e)
        deadline = time.monotonic() + c["timeout_s"]
        while sum(m.pongs for m in targets) - before < len(targets) and time.monotonic() < deadline:
            self.pong_event.clear()
            try:
                await asyncio.wait_for(self.pong_event.wait(), timeout=max(0.01, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
        return {"sent": len(targets), "pongs": sum(m.pongs for m in targets) - before,
                "errors": errors}

    async def arm(self, c):
        token = c["token"]
        self.armed = ['"' + token + '"', c["group"], 0, None, None, token]
        return {"armed": token}

    async def send(self, c):
        m = self.groups[c["group"]][c["index"]]
        t = time.monotonic()
        await m.ws.send(c["text"])
        return {"sent": t}

    async def flood(self, c):
        group = self.groups.get(c["group"], [])
        end = time.monotonic() + c["seconds"]
        budget = [c["max_messages"]]
        lat = []
        stats = {"sent": 0, "acked": 0, "first": None, "last_ack": None, "errors": {}}
        loop = asyncio.get_running_loop()

        async def sender(m, idx):
            m.acks = {}
            k = 0
            inflight = []
            try:
                while True:
                    while (len(inflight) < c["window"] and budget[0] > 0
                           and time.monotonic() < end):
                        text = f'tp:{c["tag"]}:{idx}:{k}'
                        k += 1
                        fut = loop.create_future()
                        m.acks[text] = fut
                        t = time.monotonic()
                        if stats["first"] is None:
                            stats["first"] = t
                        await m.ws.send(text)
                        budget[0] -= 1
                        stats["sent"] += 1
                        inflight.append((t, fut))
                    if not inflight:
                        return
                    t, fut = inflight.pop(0)
                    left = end + c["timeout_s"] - time.monotonic()
                    got = await asyncio.wait_for(fut, timeout=max(0.01, left))
                    lat.append(got - t)
                    stats["acked"] += 1
                    stats["last_ack"] = got
            except Exception as e:
                log_error(stats["errors"], e)
            finally:
                m.acks = None

        await asyncio.gather(*(sender(m, i) for i, m in enumerate(group)))
        lat.sort()
        stats["lat_p50"] = lat[len(lat) // 2] if lat else None
        stats["lat_p99"] = lat[min(len(lat) - 1, (len(lat) * 99) // 100)] if lat else None
        return stats

    async def counts(self, c):
        group = self.groups.get(c["group"], [])
        n = [m.messages for m in group]
        return {"members": len(n), "min": min(n) if n else 0, "max": max(n) if n else 0,
                "total": sum(n)}

    async def close(self, c):
        group = self.groups.pop(c["group"], [])
        sem = asyncio.Semaphore(256)

        async def one(m):
            async with sem:
                try:
                    await asyncio.wait_for(m.ws.close(), timeout=c["timeout_s"])
                except Exception:
                    pass
                m.task.cancel()

        t0 = time.monotonic()
        await asyncio.gather(*(one(m) for m in group))
        return {"closed": len(group), "seconds": time.monotonic() - t0}

    async def run(self):
        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        running = set()
        while True:
            line = await stdin.readline()
            if not line:
                break
            c = json.loads(line)
            if c["cmd"] == "quit":
                break
            t = asyncio.ensure_future(self.dispatch(c))
            running.add(t)
            t.add_done_callback(running.discard)
        for name in list(self.groups):
            await self.close({"group": name, "timeout_s": 2})

    async def dispatch(self, c):
        try:
            r = await getattr(self, c["cmd"])(c)
        except Exception as e:  # reported to the driver, which stops the run
            r = {"error": type(e).__name__ + ": " + str(e)}
        r["id"] = c.get("id")
        self.write(r)


if __name__ == "__main__":
    asyncio.run(client().run())
