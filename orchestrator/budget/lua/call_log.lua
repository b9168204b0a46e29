-- Call logs: a zset per scope, score = ms, member = '<seq>:<cumulative tokens>' (seq zero-padded
-- so equal scores sort in call order). Sums over any time range are then two O(log n) lookups.
local function cum_of(member) return tonumber(string.match(member, ':(%d+)$')) end

local function cum_at(log, base, t)
  local e = redis.call('ZREVRANGEBYSCORE', log, int(t), '-inf', 'LIMIT', 0, 1)
  if #e == 0 then return base end
  return cum_of(e[1])
end

-- Take a call the provider refused out of the log: its entry (one logged at `at`, the one of
-- `tokens` if several were), and its tokens out of every later entry's cumulative sum, so sums
-- over any range are what the provider counted. The entries after it are those logged since
-- the call was sent (a refusal comes back at once): a handful.
local function forget(log, meta, at, tokens)
  local same = redis.call('ZRANGEBYSCORE', log, int(at), int(at))
  if #same == 0 then return end
  local rank = redis.call('ZRANK', log, same[1])
  local prev = tonumber(redis.call('HGET', meta, 'base')) or 0
  if rank > 0 then prev = cum_of(redis.call('ZRANGE', log, rank - 1, rank - 1)[1]) end
  local pick, own = 1, cum_of(same[1]) - prev
  if tokens then
    local before = prev
    for i = 1, #same do
      if cum_of(same[i]) - before == tokens then pick, own = i, tokens break end
      before = cum_of(same[i])
    end
  end
  local later = redis.call('ZRANGE', log, rank + pick, -1, 'WITHSCORES')
  redis.call('ZREM', log, same[pick])
  for i = 1, #later, 2 do
    local member = later[i]
    redis.call('ZREM', log, member)
    redis.call('ZADD', log, later[i + 1], string.match(member, '^(%d+):') .. ':' .. int(cum_of(member) - own))
  end
  redis.call('HINCRBY', meta, 'cum', int(-own))
end
