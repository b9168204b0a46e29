-- KEYS: res, exp (the send records), count (the domain's sends on this UTC day), first (hash:
--       domain -> its first send day), then (bucket, rate) per account scope.
-- ARGV: now, ttl_ms, id, interval, domain, day (days since 1970, UTC), daily cap (-1: none),
--       warm-up ramp ("50,100,200": caps of the domain's first days), then 9 per scope.
-- Returns {granted, wait_ms, scope index (0: the domain's day), kind, count today, cap today
--          (-1: none), warm-up day (1-based; 0: past the ramp)}.
-- One message per call, in every account bucket and the domain's day, or in none.
local now = clock(ARGV[1])
local res, exp = KEYS[1], KEYS[2]
sweep(res, exp, now, 32)
local interval, day, cap = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ramp = {}
for v in string.gmatch(ARGV[8], '%d+') do ramp[#ramp + 1] = tonumber(v) end
local first = tonumber(redis.call('HGET', KEYS[4], ARGV[5])) or day
local step = day - first + 1
if step <= #ramp then
  if cap < 0 or ramp[step] < cap then cap = ramp[step] end
else
  step = 0
end
local count = tonumber(redis.call('GET', KEYS[3])) or 0
if cap >= 0 and count >= cap then return {0, 0, 0, 4, count, cap, step} end
local buckets, wait, wscope = {}, 0, 0
for i = 1, (#KEYS - 4) / 2 do
  local b = bucket(KEYS[3 + 2 * i], KEYS[4 + 2 * i], ARGV, 9 + (i - 1) * 9, interval, now)
  buckets[i] = b
  local w = wait_for(UNITS - b.r, b.rate_r)
  if w > wait then wait, wscope = w, i end
end
if wait > 0 then return {0, wait, wscope, 1, count, cap, step} end
for i, b in ipairs(buckets) do
  b.r = b.r - UNITS
  store(KEYS[3 + 2 * i], b)
end
redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], 2 * 86400000)  -- its day and the next: a refund may come late
redis.call('HSETNX', KEYS[4], ARGV[5], int(day))
redis.call('HSET', res, ARGV[3], KEYS[3])  -- the record names the day it counts in
redis.call('ZADD', exp, int(now + tonumber(ARGV[2])), ARGV[3])
return {1, 0, 0, 0, count + 1, cap, step}
