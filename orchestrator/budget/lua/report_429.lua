-- KEYS: rate of one scope.
-- ARGV: now, retry_after_ms, interval, configured r/t, step r/t, floor r/t, decrease factor.
-- Multiplicative decrease, once per interval: the 429s of calls already in flight are one signal.
local now = clock(ARGV[1])
local rate, interval = KEYS[1], tonumber(ARGV[3])
local lim_r, lim_t, blocked = limits(rate, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
                                     tonumber(ARGV[7]), interval, now)
local last = tonumber(redis.call('HGET', rate, 'md_ms'))
if not last or now - last >= interval then
  local f = tonumber(ARGV[10])
  lim_r = math.max(tonumber(ARGV[8]), math.floor(lim_r * f))
  lim_t = math.max(tonumber(ARGV[9]), math.floor(lim_t * f))
  redis.call('HSET', rate, 'base_r', int(lim_r), 'cut_r', int(now), 'base_t', int(lim_t), 'cut_t', int(now),
             'md_ms', int(now))
end
redis.call('HSET', rate, 'last_429', int(now), 'blocked', int(math.max(blocked, now + tonumber(ARGV[2]))))
return {lim_r, lim_t}
