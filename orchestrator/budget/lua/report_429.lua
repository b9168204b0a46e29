-- KEYS: log, meta, rate of one scope.
-- ARGV: now, retry_after_ms, interval, configured r/t, step r/t, floor r/t, decrease factor,
--       busy fraction.
-- Calls are held for Retry-After either way. The limits are cut (multiplicative decrease, once
-- per interval: the 429s of calls already in flight are one signal) only if our own calls of
-- the last interval ran at `busy` x the limit or more: then the 429 says we are over our share.
-- A 429 while we were sending little (a provider outage, our calls already held back) says
-- nothing about our share, and cutting on it would leave us crawling long after the provider
-- is back. Returns {limit r, limit t, 1 if cut else 0}.
local now = clock(ARGV[1])
local log, meta, rate, interval = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3])
local lim_r, lim_t, blocked = limits(rate, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
                                     tonumber(ARGV[7]), interval, now)
local busy = tonumber(ARGV[11])
local base = tonumber(redis.call('HGET', meta, 'base')) or 0
local recent_r = redis.call('ZCOUNT', log, '(' .. int(now - interval), int(now))
local recent_t = cum_at(log, base, now) - cum_at(log, base, now - interval)
-- per-window rates of the last interval against the limits, in whole numbers (no division)
local ours_busy = recent_r * WINDOW >= busy * lim_r * interval or recent_t * WINDOW >= busy * lim_t * interval
local last = tonumber(redis.call('HGET', rate, 'md_ms'))
local cut = 0
if ours_busy and (not last or now - last >= interval) then
  local f = tonumber(ARGV[10])
  lim_r = math.max(tonumber(ARGV[8]), math.floor(lim_r * f))
  lim_t = math.max(tonumber(ARGV[9]), math.floor(lim_t * f))
  redis.call('HSET', rate, 'base_r', int(lim_r), 'cut_r', int(now), 'base_t', int(lim_t), 'cut_t', int(now),
             'md_ms', int(now))
  cut = 1
end
redis.call('HSET', rate, 'last_429', int(now), 'blocked', int(math.max(blocked, now + tonumber(ARGV[2]))))
return {lim_r, lim_t, cut}
