-- KEYS: (log, meta, rate) per scope.
-- ARGV: now, tokens, interval, 6 per scope (configured limit r/t, AIMD step r/t, margin floor and
--       cap: the window is the provider's 60 s + the margin in force). Calls are kept a minute
--       past the widest window, for reports.
-- Returns {wait_ms, scope index, kind (1 requests, 2 tokens, 3 retry-after), now}; wait 0 = logged.
local now = clock(ARGV[1])
local tokens, interval = tonumber(ARGV[2]), tonumber(ARGV[3])
local wait, wscope, wkind = 0, 0, 0
for i = 1, #KEYS / 3 do
  local log, meta, rate = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local a = 4 + (i - 1) * 6
  local window = WINDOW + margin(rate, tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))
  local from = now - window
  local lim_r, lim_t, blocked = limits(rate, tonumber(ARGV[a]), tonumber(ARGV[a + 1]),
                                       tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), interval, now)
  local m = redis.call('HMGET', meta, 'cum', 'base')
  local cum, base = tonumber(m[1]) or 0, tonumber(m[2]) or 0
  local before = redis.call('ZCOUNT', log, '-inf', int(from))
  local count = redis.call('ZCOUNT', log, '(' .. int(from), '+inf')
  local w, kind = blocked - now, 3
  if count + 1 > lim_r then
    -- the call must wait until enough of the oldest calls in the window have aged out
    local e = redis.call('ZRANGE', log, before + count - lim_r, before + count - lim_r, 'WITHSCORES')
    local wr = tonumber(e[2]) + window - now
    if wr > w then w, kind = wr, 1 end
  end
  local target = cum + tokens - lim_t  -- the window may hold only entries after this cumulative
  if target > cum_at(log, base, from) then
    local wt = window
    if target <= cum then  -- binary search: the first entry in the window whose cum reaches target
      local lo, hi = before, before + count - 1
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if cum_of(redis.call('ZRANGE', log, mid, mid)[1]) >= target then hi = mid else lo = mid + 1 end
      end
      wt = tonumber(redis.call('ZRANGE', log, lo, lo, 'WITHSCORES')[2]) + window - now
    end
    if wt > w then w, kind = wt, 2 end
  end
  if w > wait then wait, wscope, wkind = w, i, kind end
end
if wait > 0 then return {wait, wscope, wkind, now} end
for i = 1, #KEYS / 3 do
  local log, meta = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local retain = WINDOW + tonumber(ARGV[4 + (i - 1) * 6 + 5]) + WINDOW
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  local cum = redis.call('HINCRBY', meta, 'cum', int(tokens))
  redis.call('ZADD', log, int(now), string.format('%012d:%s', seq, int(cum)))
  local old = redis.call('ZREVRANGEBYSCORE', log, int(now - retain), '-inf', 'LIMIT', 0, 1)
  if #old > 0 then
    redis.call('HSET', meta, 'base', int(cum_of(old[1])))
    redis.call('ZREMRANGEBYSCORE', log, '-inf', int(now - retain))
  end
  redis.call('PEXPIRE', log, int(retain))
  redis.call('PEXPIRE', meta, int(retain))
end
return {0, 0, 0, now}
