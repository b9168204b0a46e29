-- KEYS: res, exp (the send records), count (the day the record names), then (bucket, rate) per
--       account scope.
-- ARGV: now, id, refund ('1': the message never left, give it all back; '0': it left), interval,
--       9 per scope.
-- Returns 1 done, 0 unknown (already released, swept, or another day's key), -1 expired.
local now = clock(ARGV[1])
local res, exp, id = KEYS[1], KEYS[2], ARGV[2]
local expires = tonumber(redis.call('ZSCORE', exp, id))
if not expires or redis.call('HGET', res, id) ~= KEYS[3] then return 0 end
redis.call('ZREM', exp, id)
redis.call('HDEL', res, id)
if expires <= now then return -1 end
if ARGV[3] == '1' then
  local interval = tonumber(ARGV[4])
  for i = 1, (#KEYS - 3) / 2 do
    local key = KEYS[2 + 2 * i]
    local b = bucket(key, KEYS[3 + 2 * i], ARGV, 5 + (i - 1) * 9, interval, now)
    b.r = math.min(b.cap_r, b.r + UNITS)
    store(key, b)
  end
  if (tonumber(redis.call('GET', KEYS[3])) or 0) > 0 then redis.call('DECR', KEYS[3]) end
end
return 1
