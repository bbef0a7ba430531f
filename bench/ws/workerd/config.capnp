# bench/ws/workerd: one Worker and one SQLite-backed Durable Object class ("Room"), stored on
# local disk, for bench/ws/run. The driver starts it as
#   workerd serve config.capnp --directory-path do-storage=DIR --socket-addr http=127.0.0.1:PORT
# (the address and directory below are only defaults).
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .roomWorker),
    (name = "do-storage", disk = (path = "data/do", writable = true)),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:8787", http = (), service = "main"),
  ],
);

const roomWorker :Workerd.Worker = (
  compatibilityDate = "2025-09-01",
  modules = [
    (name = "worker.js", esModule = embed "worker.js"),
  ],
  durableObjectNamespaces = [
    # enableSql = true: ctx.storage.sql, one <hex-id>.sqlite file per object.
    (className = "Room", uniqueKey = "factum-ws-bench-room-0001", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "do-storage"),
  bindings = [
    (name = "ROOM", durableObjectNamespace = "Room"),
  ],
);
