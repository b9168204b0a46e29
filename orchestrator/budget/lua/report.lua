-- KEYS: log, meta, rate of one scope, its spread samples (list).
-- ARGV: now, sent_at ('' = now), remaining r ('' = unknown), remaining t, interval,
--       configured r/t, step r/t, floor r/t, tolerance r/t, report (JSON, kept for visibility),
--       release r/t, processing ms ('' = unknown), samples kept, min samples, quantile, factor,
--       late ms (how long after the answer this report is sent: with the job's next call).
-- Returns {limit r, limit t, margin ms}.
--
-- Limits. The provider's window ending at the call's arrival held our calls and everyone
-- else's: configured - remaining - ours is another client's use. Our limit is the configured
-- one less that, up or down: a report that only cut, with a slow additive climb back, left a
-- key shared with another client 20-30% idle, and every climb past our share ended in a 429
-- and a halving. The estimate rises at once (another client's burst must not cost us 429s),
-- holds its peak for an interval, then falls by at most `release` per interval, so it sits at
-- the top of the other client's wobble: an answer is as old as the model's latency, and a
-- client back at its peak is seen only that much later (released at once, the estimate sat up
-- to a step under such a client, and our calls filled the difference: a 429 each). One within
-- the tolerance is noise (our calls racing the header), not a client.
-- A 429 meanwhile widened a safety gap (report_429.lua), closing by one tolerance per interval.
-- Such a limit holds for a window (60 s) without answers, then climbs as after a cut.
--
-- Margin. Each answer is one sample of the spread of the delay from logging a call to its
-- arrival: admission to report on Redis's clock, less the provider's own processing time
-- (without it the whole round trip: an upper bound). The margin in force (limits.lua) is a
-- factor x a high quantile of the recent samples, plus a floor.
-- The answer's time: a report sent with the job's next call is that much late (ARGV[22]).
local now = clock(ARGV[1]) - (tonumber(ARGV[22]) or 0)
local log, meta, rate, samples = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local interval = tonumber(ARGV[5])
local at = now
if ARGV[2] ~= '' then at = math.min(now, tonumber(ARGV[2])) end
local base = tonumber(redis.call('HGET', meta, 'base')) or 0
local ours_r = redis.call('ZCOUNT', log, '(' .. int(at - WINDOW), int(at))
local ours_t = cum_at(log, base, at) - cum_at(log, base, at - WINDOW)
local lim_r, lim_t = limits(rate, tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]),
                            interval, now)

local function follow(kind, remaining, ours, cfg, floor, tol, release)
  local st = redis.call('HMGET', rate, 'foreign_' .. kind, 'foreign_ms_' .. kind, 'safe_' .. kind, 'safe_ms_' .. kind,
                        'peak_ms_' .. kind)
  local seen = math.max(0, cfg - remaining - ours)
  local foreign, peak = seen, now
  if st[1] then  -- milli-units, so a release of a fraction per report is not rounded away
    local from = math.max(tonumber(st[2]), (tonumber(st[5]) or 0) + interval)
    local held = tonumber(st[1]) / 1000 - release * math.max(0, now - from) / interval
    if held > seen then foreign, peak = held, tonumber(st[5]) or 0 end
  end
  local safe = 0
  if st[3] then safe = math.max(0, tonumber(st[3]) - tol * math.max(0, now - tonumber(st[4])) / interval) end
  -- Within the tolerance: noise (our calls racing the header). Beyond it, another client, at
  -- its estimate: that rises at once and falls slowly, so it holds the top of the other
  -- client's wobble already; a further tolerance on top of it left 1-2% of the key idle.
  local others = 0
  if foreign > tol then others = foreign end
  local lim = math.max(floor, math.min(cfg, math.floor(cfg - others - safe)))
  -- The additive climb (limits.lua) starts only a window later: while our calls wait for room
  -- nothing is answered, and a climb after one quiet interval took back what the last answer
  -- said was another client's (a 429 each time). A window on, that answer says nothing more.
  redis.call('HSET', rate, 'foreign_' .. kind, int(foreign * 1000), 'foreign_ms_' .. kind, int(now),
             'peak_ms_' .. kind, int(peak), 'base_' .. kind, int(lim), 'cut_' .. kind, int(now + WINDOW),
             'hdr_ms', int(now))
  return lim
end

if ARGV[3] ~= '' then
  lim_r = follow('r', tonumber(ARGV[3]), ours_r, tonumber(ARGV[6]), tonumber(ARGV[10]), tonumber(ARGV[12]),
                 tonumber(ARGV[15]))
end
if ARGV[4] ~= '' then
  lim_t = follow('t', tonumber(ARGV[4]), ours_t, tonumber(ARGV[7]), tonumber(ARGV[11]), tonumber(ARGV[13]),
                 tonumber(ARGV[16]))
end

if ARGV[2] ~= '' then
  local sample = now - at
  if ARGV[17] ~= '' then sample = sample - tonumber(ARGV[17]) end
  local keep, least, q = tonumber(ARGV[18]), tonumber(ARGV[19]), tonumber(ARGV[20])
  redis.call('LPUSH', samples, int(math.max(0, sample)))
  redis.call('LTRIM', samples, 0, keep - 1)
  redis.call('PEXPIRE', samples, 3600000)
  local got = redis.call('LRANGE', samples, 0, -1)
  if #got >= least then  -- a sort of a few hundred numbers: tens of microseconds per answer
    local v = {}
    for i, x in ipairs(got) do v[i] = tonumber(x) end
    table.sort(v)
    redis.call('HSET', rate, 'spread', int(math.ceil(tonumber(ARGV[21]) * v[math.max(1, math.ceil(q * #v))])))
  end
end
redis.call('HSET', rate, 'report', ARGV[14], 'report_ms', int(now))
return {lim_r, lim_t, tonumber(redis.call('HGET', rate, 'spread')) or -1}
