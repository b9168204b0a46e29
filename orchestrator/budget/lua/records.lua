-- Reservations past expiry are dropped and give nothing back: their calls may have been made.
-- A bounded number per call keeps every call O(1) amortised.
local function sweep(res, exp, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', exp, '-inf', int(now), 'LIMIT', 0, limit)
  if #ids > 0 then
    redis.call('HDEL', res, unpack(ids))
    redis.call('ZREM', exp, unpack(ids))
  end
  return #ids
end
