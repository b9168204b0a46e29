-- KEYS: log, meta, rate of one scope.
-- ARGV: now, sent_at ('' = now), remaining r ('' = unknown), remaining t, interval,
--       configured r/t, step r/t, floor r/t, tolerance r/t, report (JSON, kept for visibility).
-- The provider's window held our calls plus everyone else's; ours + remaining is the share it
-- leaves us. If that is less than we believe, cut to it at once. Returns {limit r, limit t}.
local now = clock(ARGV[1])
local log, meta, rate = KEYS[1], KEYS[2], KEYS[3]
local at = now
if ARGV[2] ~= '' then at = math.min(now, tonumber(ARGV[2])) end
local base = tonumber(redis.call('HGET', meta, 'base')) or 0
local ours_r = redis.call('ZCOUNT', log, '(' .. int(at - WINDOW), int(at))
local ours_t = cum_at(log, base, at) - cum_at(log, base, at - WINDOW)
local lim_r, lim_t = limits(rate, tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]),
                            tonumber(ARGV[5]), now)
if ARGV[3] ~= '' then
  local share = ours_r + tonumber(ARGV[3])
  if share < lim_r - tonumber(ARGV[12]) then
    lim_r = math.max(tonumber(ARGV[10]), share)
    redis.call('HSET', rate, 'base_r', int(lim_r), 'cut_r', int(now))
  end
end
if ARGV[4] ~= '' then
  local share = ours_t + tonumber(ARGV[4])
  if share < lim_t - tonumber(ARGV[13]) then
    lim_t = math.max(tonumber(ARGV[11]), share)
    redis.call('HSET', rate, 'base_t', int(lim_t), 'cut_t', int(now))
  end
end
redis.call('HSET', rate, 'report', ARGV[14], 'report_ms', int(now))
return {lim_r, lim_t}
