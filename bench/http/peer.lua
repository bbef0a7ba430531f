-- peer.lua: wrk script for the side-by-side comparison with workerd (bench/http/compare-workerd).
-- The workload of the workerd peer (bench/http/compare-workerd --peer), on factum's routes: POST
-- /v1/entities/ledger/{id}/append with body {"type":"note","data":{"n":N,"msg":"hello world"}}
-- and an Idempotency-Key per request.
--
--   wrk -tN -cN -d10s -s bench/http/peer.lua URL -- MODE ENTITIES KEY_PREFIX ENTITY_PREFIX [KEYS]
--
-- MODE append: a fresh key per request, entity picked uniformly at random among ENTITIES.
-- MODE replay: keys KEY_PREFIX-0 .. KEY_PREFIX-(KEYS-1), seeded before the run (key i lives in
--   entity ENTITY_PREFIX(i % ENTITIES) with body n = i), so every request is a stored replay.
-- Environment: FACTUM_API_KEY (default bench-key); PEER_ENTITIES_OUT: a file that receives
-- "entity<TAB>2xx count" lines at the end, for the check against the disk.
--
-- Latency: wrk's own figures are corrected for coordinated omission by adding synthetic samples,
-- so this script times every real request itself. Run with -t equal to -c: each wrk thread then
-- owns one connection, request() and response() alternate on it, and the time between them is the
-- request's latency. Samples go into log-spaced buckets about 1% wide.

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long sec; long nsec; } peer_timespec;
  int clock_gettime(int clock, peer_timespec* out);
]]
local clock_buf = ffi.new("peer_timespec")
local function micros()
  ffi.C.clock_gettime(1, clock_buf) -- CLOCK_MONOTONIC
  return tonumber(clock_buf.sec) * 1e6 + tonumber(clock_buf.nsec) / 1e3
end

local api_key = os.getenv("FACTUM_API_KEY") or "bench-key"

-- Per-thread state; globals so that done() can read them with thread:get().
buckets, acked, ok, failed, replayed, sum_us, max_us = {}, {}, 0, 0, 0, 0, 0
local mode, entities, key_prefix, entity_prefix, keys = "append", 1, "k", "e", 1000
local counter, started, entity = 0, 0, nil

local all_threads = {}
function setup(thread)
  thread:set("thread_index", #all_threads)
  table.insert(all_threads, thread)
end

function init(args)
  mode = args[1] or "append"
  entities = tonumber(args[2] or "1")
  key_prefix = args[3] or "k"
  entity_prefix = args[4] or "e"
  keys = tonumber(args[5] or "1000")
  if mode ~= "append" and mode ~= "replay" then error("MODE must be append or replay") end
  math.randomseed(os.time() * 131 + thread_index)
  counter = thread_index * 7919 -- replay: threads start at different keys
end

function request()
  counter = counter + 1
  local key, n
  if mode == "append" then
    n = counter
    key = key_prefix .. "-" .. thread_index .. "-" .. counter
    entity = entity_prefix .. (entities == 1 and 0 or math.random(0, entities - 1))
  else
    n = counter % keys
    key = key_prefix .. "-" .. n
    entity = entity_prefix .. (n % entities)
  end
  started = micros()
  return wrk.format("POST", "/v1/entities/ledger/" .. entity .. "/append", {
    ["X-API-Key"] = api_key,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }, '{"type":"note","data":{"n":' .. n .. ',"msg":"hello world"}}')
end

function response(status, headers, body)
  local us = math.max(1, micros() - started)
  local b = math.floor(100 * math.log(us))
  buckets[b] = (buckets[b] or 0) + 1
  sum_us = sum_us + us
  if us > max_us then max_us = us end
  if status >= 200 and status < 300 then
    ok = ok + 1
    acked[entity] = (acked[entity] or 0) + 1
    if headers["Idempotent-Replayed"] == "true" or headers["idempotent-replayed"] == "true" then
      replayed = replayed + 1
    end
  else
    failed = failed + 1
  end
end

function done(summary, latency, requests)
  local merged, n, total_us, worst, n_ok, n_failed, n_replayed, per_entity = {}, 0, 0, 0, 0, 0, 0, {}
  for _, t in ipairs(all_threads) do
    for b, c in pairs(t:get("buckets")) do
      merged[b] = (merged[b] or 0) + c
      n = n + c
    end
    total_us = total_us + t:get("sum_us")
    worst = math.max(worst, t:get("max_us"))
    n_ok = n_ok + t:get("ok")
    n_failed = n_failed + t:get("failed")
    n_replayed = n_replayed + t:get("replayed")
    for e, c in pairs(t:get("acked")) do per_entity[e] = (per_entity[e] or 0) + c end
  end
  if n == 0 then
    print("PEER n=0")
    return
  end
  local order = {}
  for b in pairs(merged) do table.insert(order, b) end
  table.sort(order)
  local function quantile(q)
    local seen = 0
    for _, b in ipairs(order) do
      seen = seen + merged[b]
      if seen >= q * n then return math.exp((b + 0.5) / 100) end
    end
    return worst
  end
  print(string.format(
    "PEER n=%d ok=%d failed=%d replayed=%d mean_us=%.0f p50_us=%.0f p90_us=%.0f p99_us=%.0f " ..
    "p999_us=%.0f max_us=%.0f",
    n, n_ok, n_failed, n_replayed, total_us / n, quantile(0.5), quantile(0.9), quantile(0.99),
    quantile(0.999), worst))
  local path = os.getenv("PEER_ENTITIES_OUT")
  if path and path ~= "" then
    local f = assert(io.open(path, "w"))
    for e, c in pairs(per_entity) do f:write(e, "\t", c, "\n") end
    f:close()
  end
end
