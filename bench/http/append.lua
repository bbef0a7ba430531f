-- append.lua: wrk script for `factum serve`: POST .../ledger/{id}/append with a unique
-- Idempotency-Key per request (so every request is a real durable append, never a replay).
--
--   wrk -t2 -c32 -d10s -s bench/http/append.lua http://127.0.0.1:8080
--
-- Environment: FACTUM_API_KEY (default dev-key-acme), FACTUM_ENTITIES (default 1: every request
-- to ledger/bench-0; N spreads requests over ledger/bench-0 .. bench-(N-1)),
-- FACTUM_REPLAY=1 (reuse one key per connection: measures replays, no writes).
-- Prints the status-code histogram at the end; any non-200 is a failure.

local api_key = os.getenv("FACTUM_API_KEY") or "dev-key-acme"
local entities = tonumber(os.getenv("FACTUM_ENTITIES") or "1")
local replay = os.getenv("FACTUM_REPLAY") == "1"
local body = '{"type":"invocation","subtype":"bench","data":{"n":1},'
  .. '"amount":"0.01","currency":"USD"}'

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  statuses = {}
  run = tostring(os.time()) .. "-" .. tostring(math.random(1, 1e9))
end

function request()
  counter = counter + 1
  local n = replay and 1 or counter
  local key = run .. "-" .. thread_id .. "-" .. n
  local entity = (counter + thread_id) % entities
  return wrk.format("POST", "/v1/entities/ledger/bench-" .. entity .. "/append", {
    ["X-API-Key"] = api_key,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, n in pairs(s) do
      total[code] = (total[code] or 0) + n
    end
  end
  io.write("status codes:")
  for code, n in pairs(total) do
    io.write(string.format(" %s=%d", code, n))
  end
  io.write("\n")
  io.write(string.format("p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
