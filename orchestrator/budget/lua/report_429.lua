-- KEYS: log, meta, rate of one scope.
-- ARGV: now, retry_after_ms, interval, configured r/t, step r/t, floor r/t, decrease factor,
--       busy fraction, tolerance r/t, sent_at ('' = unknown), its tokens ('' = unknown).
-- Calls are held for Retry-After either way. The refused call leaves our log, its request and its
-- tokens (call_log.lua `forget`): the provider did not count it, and counting it as ours would
-- hide as much of another client's use from report.lua, which then let more calls through,
-- which were refused, and so on (5% of 429s in the simulation). Its tokens left in the sums for
-- their minute put the estimate of another client 3-8k tokens under it beside a client taking
-- 30% of a 150k key (bench/tokens_binding.py), and a 429 after each such minute.
-- While answers carry the provider's remaining counts (one within the last window), the
-- limits follow them (report.lua) and a 429 says our estimate of the other clients ran short:
-- the safety gap under it doubles (at least one tolerance; once per interval), and the limits
-- drop by as much at once. Halving there would throw away half of a share the headers show.
-- Without them, the limits are cut (multiplicative decrease, once per interval: the 429s of
-- calls already in flight are one signal) only if our own calls of the last interval ran at
-- `busy` x the limit or more: then the 429 says we are over our share. A 429 while we were
-- sending little (a provider outage, our calls already held back) says nothing about our
-- share, and cutting on it would leave us crawling long after the provider is back.
-- Returns {limit r, limit t, 1 if cut else 0}.
local now = clock(ARGV[1])
local log, meta, rate, interval = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3])
local lim_r, lim_t, blocked = limits(rate, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
                                     tonumber(ARGV[7]), interval, now)
local last = tonumber(redis.call('HGET', rate, 'md_ms'))
local once = not last or now - last >= interval
local hdr = tonumber(redis.call('HGET', rate, 'hdr_ms'))
local cut = 0
if ARGV[14] ~= '' then forget(log, meta, tonumber(ARGV[14]), tonumber(ARGV[15])) end

local function widen(kind, lim, floor, tol)
  local st = redis.call('HMGET', rate, 'safe_' .. kind, 'safe_ms_' .. kind)
  local safe = 0
  if st[1] then safe = math.max(0, tonumber(st[1]) - tol * math.max(0, now - tonumber(st[2])) / interval) end
  local wider = math.max(tol, 2 * safe)
  lim = math.max(floor, math.floor(lim - (wider - safe)))
  redis.call('HSET', rate, 'safe_' .. kind, int(wider), 'safe_ms_' .. kind, int(now), 'base_' .. kind, int(lim),
             'cut_' .. kind, int(now + WINDOW))  -- held a window, as report.lua's
  return lim
end

if hdr and now - hdr <= WINDOW then
  if once then
    lim_r = widen('r', lim_r, tonumber(ARGV[8]), tonumber(ARGV[12]))
    lim_t = widen('t', lim_t, tonumber(ARGV[9]), tonumber(ARGV[13]))
    redis.call('HSET', rate, 'md_ms', int(now))
    cut = 1
  end
else
  local busy = tonumber(ARGV[11])
  local base = tonumber(redis.call('HGET', meta, 'base')) or 0
  local recent_r = redis.call('ZCOUNT', log, '(' .. int(now - interval), int(now))
  local recent_t = cum_at(log, base, now) - cum_at(log, base, now - interval)
  -- per-window rates of the last interval against the limits, in whole numbers (no division)
  local ours_busy = recent_r * WINDOW >= busy * lim_r * interval or recent_t * WINDOW >= busy * lim_t * interval
  if ours_busy and once then
    local f = tonumber(ARGV[10])
    lim_r = math.max(tonumber(ARGV[8]), math.floor(lim_r * f))
    lim_t = math.max(tonumber(ARGV[9]), math.floor(lim_t * f))
    redis.call('HSET', rate, 'base_r', int(lim_r), 'cut_r', int(now), 'base_t', int(lim_t), 'cut_t', int(now),
               'md_ms', int(now))
    cut = 1
  end
end
redis.call('HSET', rate, 'last_429', int(now), 'blocked', int(math.max(blocked, now + tonumber(ARGV[2]))))
redis.call('HINCRBY', rate, 'answered_429', 1)  -- every refusal, whatever the job then does
return {lim_r, lim_t, cut}
