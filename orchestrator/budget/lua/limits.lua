-- AIMD: after a cut to `base` at time `cut`, a limit regains `step` per whole interval.
local function adapted(base, cut, configured, step, interval, now)
  if not base then return configured end
  local since = math.max(0, now - tonumber(cut))
  return math.min(configured, tonumber(base) + math.floor(since / interval) * step)
end

-- A scope's adapted window limits (requests, tokens) and the end of any Retry-After block.
local function limits(rate_key, cfg_r, cfg_t, step_r, step_t, interval, now)
  local a = redis.call('HMGET', rate_key, 'base_r', 'cut_r', 'base_t', 'cut_t', 'blocked')
  return adapted(a[1], a[2], cfg_r, step_r, interval, now),
         adapted(a[3], a[4], cfg_t, step_t, interval, now),
         tonumber(a[5]) or 0
end

-- The pacer's margin past the provider's 60 s: the measured spread of the delay from logging a
-- call to its arrival (report.lua keeps it in the rate hash) plus a floor, never more than the
-- cap; the cap until something was measured.
local function margin(rate_key, floor, cap)
  local spread = tonumber(redis.call('HGET', rate_key, 'spread'))
  if not spread then return cap end
  return math.min(cap, spread + floor)
end
