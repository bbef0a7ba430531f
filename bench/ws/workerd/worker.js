// bench/ws/workerd/worker.js: the peer of factum's chat room (examples/chat/room.cpp) for
// bench/ws/run, as a SQLite-backed Durable Object on workerd using the WebSocket Hibernation API.
//
//   GET /v1/entities/room/{id}/ws?name=NAME   (X-API-Key: dev-key-acme) -> WebSocket upgrade
//
// The same path and protocol as factum's room, so that one client drives both:
//   on connect   the new member gets {"type":"history","messages":[...]} (its last 50 messages)
//                then {"type":"presence","members":[...]}; the others get {"type":"joined"}
//   a text       is inserted into the room's `messages` table (ctx.storage.sql) and broadcast
//                to every member, the sender included, as
//                {"type":"message","seq":N,"name":..,"text":..,"ts":..}; seq is the row id
//   "ping"       answered "pong" by the runtime (setWebSocketAutoResponse) without waking the
//                object
//   a close      {"type":"left"} to the others
// The member's name lives in the socket's attachment (serializeAttachment), so the object may
// be evicted (hibernate) while its sockets stay open; every handler lists them again with
// ctx.getWebSockets("member"). Frames sent after a write are held by workerd's output gate
// until the write's implicit transaction has committed, as factum holds a turn's frames.
import { DurableObject } from "cloudflare:workers";

const API_KEY = "dev-key-acme";
const HISTORY = 50; // messages of history on connect
const MAX_NAME = 32; // bytes
const MAX_TEXT = 4000; // bytes

const bytes = (s) => new TextEncoder().encode(s).length;

export class Room extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`CREATE TABLE IF NOT EXISTS messages (
      seq  INTEGER PRIMARY KEY,
      name TEXT NOT NULL,
      text TEXT NOT NULL,
      ts   INTEGER NOT NULL)`);
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  async fetch(request) {
    const name = new URL(request.url).searchParams.get("name") ?? "";
    const [client, server] = Object.values(new WebSocketPair());
    this.ctx.acceptWebSocket(server, ["member"]);
    if (name.length === 0 || bytes(name) > MAX_NAME) {
      server.close(4400, "give a name of 1 to 32 bytes: ?name=...");
      return new Response(null, { status: 101, webSocket: client });
    }
    server.serializeAttachment({ name });
    const rows = this.sql
      .exec("SELECT seq, name, text, ts FROM messages ORDER BY seq DESC LIMIT ?", HISTORY)
      .toArray()
      .reverse();
    server.send(JSON.stringify({ type: "history", messages: rows }));
    const members = [];
    const joined = JSON.stringify({ type: "joined", name });
    for (const ws of this.ctx.getWebSockets("member")) {
      if (ws === server) continue;
      members.push(ws.deserializeAttachment()?.name ?? "");
      ws.send(joined);
    }
    members.push(name);
    server.send(JSON.stringify({ type: "presence", members }));
    return new Response(null, { status: 101, webSocket: client });
  }

  async webSocketMessage(ws, message) {
    if (typeof message !== "string" || message.length === 0 || bytes(message) > MAX_TEXT) {
      ws.send(JSON.stringify({ type: "error", detail: "send text of 1 to 4000 bytes" }));
      return;
    }
    const name = ws.deserializeAttachment()?.name ?? "?";
    const ts = Date.now();
    const seq = this.sql
      .exec("INSERT INTO messages (name, text, ts) VALUES (?, ?, ?) RETURNING seq", name, message, ts)
      .one().seq;
    const out = JSON.stringify({ type: "message", seq, name, text: message, ts });
    for (const member of this.ctx.getWebSockets("member")) {
      try {
        member.send(out);
      } catch {
        // a socket closing meanwhile
      }
    }
  }

  async webSocketClose(ws, code, reason, wasClean) {
    const name = ws.deserializeAttachment()?.name ?? "";
    const left = JSON.stringify({ type: "left", name });
    for (const member of this.ctx.getWebSockets("member")) {
      if (member === ws) continue;
      try {
        member.send(left);
      } catch {
        // a socket closing meanwhile
      }
    }
    try {
      ws.close(1000, "bye");
    } catch {
      // already closed
    }
  }

  async webSocketError(ws, error) {
    try {
      ws.close(1011, "error");
    } catch {
      // already closed
    }
  }
}

export default {
  async fetch(request, env) {
    const m = new URL(request.url).pathname.match(/^\/v1\/entities\/room\/([A-Za-z0-9._:-]{1,128})\/ws$/);
    if (!m) return new Response("not found\n", { status: 404 });
    if (request.headers.get("X-API-Key") !== API_KEY)
      return new Response("unauthorized\n", { status: 401 });
    if (request.headers.get("Upgrade") !== "websocket")
      return new Response("upgrade required\n", { status: 426 });
    return env.ROOM.get(env.ROOM.idFromName(m[1])).fetch(request);
  },
};
